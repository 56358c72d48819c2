"""SVIP: source-free domain adaptation for visible-infrared person re-identification — **our
reconstruction**.

Paper: Li, Feng, Sun, Peng, Peng, Hu, "Learning Source-free Domain Adaptation for Visible-Infrared
Person Re-Identification", NeurIPS 2025. The repository ``LYXRhythm/SVIP`` holds only a README
(abstract and framework figure; "the code will be coming soon"). Everything below is rebuilt from
the abstract and standard practice of unsupervised VI-ReID (cluster-contrast memories, DBSCAN
pseudo-labels, cross-modal association), following the spec (``eff-vision.md``, section SVIP); the
choices the abstract leaves open are marked *(ours)*.

Setting: a source model ``f_s`` trained on labelled VI-ReID data; the target domain is unlabelled,
has visible and infrared images and identities disjoint from the source's; the source data is not
available during adaptation.

1. **RTL** (:class:`ResidualTransfer`): ``f_t(x) = f_s(x) + γ · r_φ(x)`` with ``f_s`` frozen and
   ``r_φ`` a 2-layer bottleneck on the pooled backbone features *(ours: where the residual sits)*,
   output layer zero-initialised so ``f_t = f_s`` at the start; only φ trains (optionally also the
   BatchNorm affines of a target copy of the backbone).
2. **SGCL** (source-guided contrastive learning): ``z_s = normalize(f_s(x))`` of every target image
   (cached: ``f_s`` is frozen); per-modality pseudo-clusters by DBSCAN on ``z_s`` (``eps`` = the
   median distance to the ``min_samples``-th neighbour, *ours*) or k-means; −1 = outlier, excluded;
   per-modality k-NN graphs (k = 5) in ``z_s`` space. Loss: cluster-contrast InfoNCE against a
   cluster memory (τ = 0.05, memory momentum 0.2) whose positives are the sample's cluster centroid
   **and** its k source-space neighbours (their current target features, from an instance memory):
   a multi-positive InfoNCE *(ours: the form)*.
3. **SCCA** (structural-consistency cross-modal alignment): a visible v and an infrared r form a
   reliable pair iff they are mutual nearest neighbours across modalities in ``f_t`` space **and**
   Jaccard(``N_k(v)`` mapped through the cross-modal nearest-neighbour matching, ``N_k(r)``) ≥ 0.5
   (``N_k`` = the k nearest intra-modal neighbours including the sample itself, *ours*). Each side
   of a reliable pair gets an InfoNCE against the **other** modality's cluster memory with the
   partner's cluster as positive.

Total ``L = L_SGCL^V + L_SGCL^IR + λ·L_SCCA`` (λ = 1), Adam 3.5e-4 (cluster-contrast-reid's default;
no source gives SVIP's). Ablations (``ablate``): ``"rtl"`` (full fine-tuning of a copy of ``f_s``
instead of the residual), ``"sgcl"`` (clusters and neighbours from the current ``f_t`` instead of
``f_s``, recomputed every epoch), ``"scca"`` (no cross-modal term).

Baselines (our choice, see :class:`ShotBaseline`, :class:`UnsupervisedVIBaseline`): SHOT-style
cluster pseudo-labels + cross-entropy; unsupervised VI-ReID without source guidance (per-modality
cluster contrast on ``f_t`` clusters + Hungarian matching of cluster centroids across modalities,
``scipy.optimize.linear_sum_assignment``).

A source model must expose ``backbone(x) → pooled features (B, feat_dim)`` and ``head(pooled) →
embedding``; ``forward = head ∘ backbone`` (:class:`ReIDNet` does).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_fraction, check_positive, check_type
from eff_shared.progress import track

__all__ = [
    "ClusterMemoryContrast",
    "ReIDNet",
    "ResidualTransfer",
    "SVIPAdapter",
    "ShotBaseline",
    "UnsupervisedVIBaseline",
    "embed",
    "knn_indices",
    "reliable_cross_modal_pairs",
    "source_guided_clusters",
    "train_source_reid",
]

ABLATIONS = ("rtl", "sgcl", "scca")


# --- the backbone of the reproduction ---------------------------------------------------------


class ReIDNet(nn.Module):
    """4 conv layers with BatchNorm → part pooling → linear embedding (64-d).

    The pooled features are the average over a ``pool`` grid of parts (default 4 × 2, PCB-like
    horizontal/vertical parts, *ours*), flattened: a global average pool of this shallow net loses
    the layout (height, bag side) that the two modalities share.
    """

    def __init__(
        self,
        embed_dim: int = 64,
        widths: tuple[int, int, int, int] = (16, 32, 48, 64),
        pool: tuple[int, int] = (4, 2),
    ) -> None:
        super().__init__()
        c1, c2, c3, c4 = widths
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(),
            nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c2, c3, 3, padding=1), nn.BatchNorm2d(c3), nn.ReLU(),
            nn.Conv2d(c3, c4, 3, padding=1), nn.BatchNorm2d(c4), nn.ReLU(),
        )  # fmt: skip
        self.pool = tuple(pool)
        self.feat_dim, self.embed_dim = c4 * self.pool[0] * self.pool[1], embed_dim
        self.embedding = nn.Linear(self.feat_dim, embed_dim)

    def backbone(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(self.features(x), self.pool).flatten(1)

    def head(self, pooled: Tensor) -> Tensor:
        return self.embedding(pooled)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x))


def _batch_hard_triplet(z: Tensor, y: Tensor, margin: float) -> Tensor:
    d = torch.cdist(z, z)
    same = y[:, None] == y[None, :]
    hardest_pos = (d * same).amax(1)
    hardest_neg = torch.where(same, torch.full_like(d, float("inf")), d).amin(1)
    return F.relu(hardest_pos - hardest_neg + margin).mean()


def train_source_reid(
    model: nn.Module,
    x: Tensor,
    ids: Tensor,
    modality: Tensor | None = None,
    epochs: int = 60,
    lr: float = 1e-3,
    p_ids: int = 16,
    k_per_id: int = 4,
    margin: float = 0.3,
    seed: int = 0,
) -> list[float]:
    """Identity cross-entropy (a linear classifier on the embedding) + batch-hard triplet loss on
    the normalised embedding, P×K batches; with ``modality`` (0 visible, 1 infrared) each identity
    contributes K/2 images of each modality (the usual VI-ReID identity sampler)."""
    num_ids = int(ids.max()) + 1
    classifier = nn.Linear(model.embed_dim, num_ids)
    opt = torch.optim.Adam(list(model.parameters()) + list(classifier.parameters()), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    groups = [0] if modality is None else [0, 1]
    mod = torch.zeros_like(ids) if modality is None else modality
    per = k_per_id // len(groups)
    members = [
        [torch.nonzero((ids == i) & (mod == m)).flatten() for m in groups] for i in range(num_ids)
    ]
    losses = []
    model.train()
    for _ in track(range(epochs), "source Re-ID training (epochs)"):
        order = torch.randperm(num_ids, generator=gen)
        for start in range(0, num_ids - p_ids + 1, p_ids):
            idx = torch.cat([
                g[torch.randperm(len(g), generator=gen)[:per]]
                for i in order[start : start + p_ids] for g in members[int(i)]
            ])  # fmt: skip
            z = model(x[idx])
            loss = F.cross_entropy(classifier(z), ids[idx]) + _batch_hard_triplet(
                F.normalize(z, dim=1), ids[idx], margin
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    model.eval()
    return losses


@torch.no_grad()
def embed(model: nn.Module, x: Tensor, batch_size: int = 512) -> Tensor:
    """Normalised embeddings of ``x`` in eval mode."""
    was = model.training
    model.eval()
    out = torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])
    model.train(was)
    return F.normalize(out, dim=1)


# --- RTL ---------------------------------------------------------------------------------------


class ResidualTransfer(nn.Module):
    """``f_t(x) = f_s(x) + γ·r_φ(pooled(x))``; ``f_s`` frozen, ``r_φ``'s output layer zero-init."""

    def __init__(
        self,
        source: nn.Module,
        feat_dim: int,
        bottleneck: int = 64,
        gamma: float = 1.0,
        train_norm_affine: bool = False,
        embed_dim: int | None = None,
    ) -> None:
        super().__init__()
        check_type("source", source, nn.Module)
        if not (hasattr(source, "backbone") and hasattr(source, "head")):
            raise TypeError("source must provide backbone(x) -> pooled features and head(pooled)")
        check_positive("feat_dim", feat_dim, integer=True)
        check_positive("bottleneck", bottleneck, integer=True)
        if any(p.requires_grad for p in source.parameters()):
            warnings.warn(
                "the source model has trainable parameters; RTL needs it frozen: freezing it",
                UserWarning,
                stacklevel=2,
            )
        source.requires_grad_(False)
        source.eval()
        out_dim = embed_dim if embed_dim is not None else getattr(source, "embed_dim", feat_dim)
        self.source = source
        self.gamma = float(gamma)
        self.train_norm_affine = train_norm_affine
        self.target_backbone: nn.Module | None = None
        if train_norm_affine:
            self.target_backbone = copy.deepcopy(source).requires_grad_(False)
            for m in self.target_backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.weight.requires_grad_(True)
                    m.bias.requires_grad_(True)
        self.residual = nn.Sequential(
            nn.Linear(feat_dim, bottleneck), nn.ReLU(), nn.Linear(bottleneck, out_dim)
        )
        nn.init.zeros_(self.residual[2].weight)
        nn.init.zeros_(self.residual[2].bias)

    def train(self, mode: bool = True) -> ResidualTransfer:
        super().train(mode)
        self.source.eval()  # the frozen source keeps its running statistics
        if self.target_backbone is not None:
            self.target_backbone.eval()
        return self

    def pooled(self, x: Tensor) -> Tensor:
        if self.target_backbone is not None:
            return self.target_backbone.backbone(x)
        with torch.no_grad():
            return self.source.backbone(x)

    def from_pooled(self, pooled: Tensor) -> Tensor:
        """The embedding from pooled features (the frozen head plus the residual)."""
        head = self.target_backbone.head if self.target_backbone is not None else self.source.head
        return head(pooled) + self.gamma * self.residual(pooled)

    def forward(self, x: Tensor) -> Tensor:
        return self.from_pooled(self.pooled(x))


# --- clustering, neighbours, reliable pairs ----------------------------------------------------


def _np(z: Tensor) -> np.ndarray:
    return F.normalize(z.detach().float(), dim=1).cpu().numpy().astype(np.float64)


def source_guided_clusters(
    z_src: Tensor,
    method: Literal["dbscan", "kmeans"] = "dbscan",
    eps: float | None = None,
    min_samples: int = 4,
    n_clusters: int | None = None,
    seed: int = 0,
) -> Tensor:
    """Pseudo-labels (LongTensor, −1 = outlier) of features ``z_src`` (normalised here).

    DBSCAN with ``eps`` = the median distance to the ``min_samples``-th neighbour by default, or
    k-means with ``n_clusters`` (required).
    """
    check_choice("method", method, ("dbscan", "kmeans"))
    z = _np(z_src)
    if method == "kmeans":
        if n_clusters is None or n_clusters < 1:
            raise ValueError(f"method='kmeans' needs n_clusters >= 1, got {n_clusters}")
        from sklearn.cluster import KMeans

        labels = KMeans(n_clusters=n_clusters, n_init=4, random_state=seed).fit_predict(z)
        return torch.from_numpy(labels.astype(np.int64))
    from sklearn.cluster import DBSCAN
    from sklearn.neighbors import NearestNeighbors

    check_positive("min_samples", min_samples, integer=True)
    if eps is None:
        if len(z) <= min_samples:
            raise ValueError(f"need more than min_samples={min_samples} samples, got {len(z)}")
        dist, _ = NearestNeighbors(n_neighbors=min_samples + 1).fit(z).kneighbors(z)
        eps = float(np.median(dist[:, min_samples]))
    check_positive("eps", eps)
    labels = DBSCAN(eps=eps, min_samples=min_samples).fit_predict(z)
    return torch.from_numpy(labels.astype(np.int64))


def knn_indices(z: Tensor, k: int, include_self: bool = False) -> Tensor:
    """``(n, k)`` indices of the k nearest neighbours by cosine similarity (stable ties)."""
    n = z.shape[0]
    check_type("k", k, int)
    if not 1 <= k < n + (1 if include_self else 0):
        raise ValueError(
            f"k must lie in [1, n{' ' if include_self else ' - 1'}] for n = {n}, got {k}"
        )
    zn = F.normalize(z.detach().float(), dim=1)
    sim = zn @ zn.T
    if not include_self:
        sim.fill_diagonal_(-float("inf"))
    else:
        sim.fill_diagonal_(float("inf"))  # a sample is its own first neighbour
    order = torch.from_numpy(np.argsort(-sim.numpy(), axis=1, kind="stable"))
    return order[:, :k]


def reliable_cross_modal_pairs(
    z_vis: Tensor, z_ir: Tensor, k: int = 5, jaccard_threshold: float = 0.5
) -> Tensor:
    """``(P, 2)`` LongTensor of (visible index, infrared index): mutual cross-modal nearest
    neighbours whose neighbourhoods agree, ``Jaccard(nn_ir(N_k(v)), N_k(r)) ≥ threshold``."""
    check_fraction("jaccard_threshold", jaccard_threshold)
    n_v, n_r = z_vis.shape[0], z_ir.shape[0]
    check_type("k", k, int)
    if k < 1 or k >= min(n_v, n_r):
        raise ValueError(
            f"k must lie in [1, n) with n = min(n_vis, n_ir) = {min(n_v, n_r)}, got {k}"
        )
    if z_vis.shape[1] != z_ir.shape[1]:
        raise ValueError(f"feature dimensions differ: {z_vis.shape[1]} vs {z_ir.shape[1]}")
    zv, zr = F.normalize(z_vis.detach().float(), dim=1), F.normalize(z_ir.detach().float(), dim=1)
    sim = (zv @ zr.T).numpy()
    nn_v2r = np.argmax(sim, axis=1)  # first maximum: stable
    nn_r2v = np.argmax(sim, axis=0)
    nk_v = knn_indices(zv, k, include_self=True).numpy()
    nk_r = knn_indices(zr, k, include_self=True).numpy()
    pairs = []
    for v in range(n_v):
        r = int(nn_v2r[v])
        if nn_r2v[r] != v:
            continue
        mapped = set(nn_v2r[nk_v[v]].tolist())
        own = set(nk_r[r].tolist())
        if len(mapped & own) / len(mapped | own) >= jaccard_threshold:
            pairs.append((v, r))
    return torch.tensor(pairs, dtype=torch.long).reshape(-1, 2)


# --- the cluster memory and its losses ---------------------------------------------------------


class ClusterMemoryContrast(nn.Module):
    """Cluster-contrast memory (cluster-contrast-reid's ``ClusterMemory``): one normalised
    centroid per cluster, updated per sample as ``m ← μ·m + (1 − μ)·z`` then renormalised."""

    def __init__(
        self, num_clusters: int, dim: int, temperature: float = 0.05, momentum: float = 0.2
    ) -> None:
        super().__init__()
        check_positive("num_clusters", num_clusters, integer=True)
        check_positive("dim", dim, integer=True)
        check_positive("temperature", temperature)
        check_fraction("momentum", momentum)
        self.temperature, self.momentum = float(temperature), float(momentum)
        self.register_buffer("features", torch.zeros(num_clusters, dim))

    @torch.no_grad()
    def initialise(self, z: Tensor, labels: Tensor) -> None:
        """Centroids of the normalised features of each cluster (outliers −1 ignored)."""
        zn = F.normalize(z.detach().float(), dim=1)
        for c in range(self.features.shape[0]):
            members = zn[labels == c]
            if len(members):
                self.features[c] = F.normalize(members.mean(0), dim=0)

    def logits(self, z: Tensor) -> Tensor:
        return F.normalize(z, dim=1) @ self.features.T / self.temperature

    def forward(self, z: Tensor, labels: Tensor, extra_keys: Tensor | None = None) -> Tensor:
        """InfoNCE of ``z`` against the memory with positive ``labels`` (rows with −1 skipped);
        ``extra_keys (B, k, d)`` are further positives (multi-positive InfoNCE)."""
        keep = labels >= 0
        if not bool(keep.any()):
            return z.sum() * 0.0
        z, labels = z[keep], labels[keep]
        logits = self.logits(z)
        if extra_keys is None:
            return F.cross_entropy(logits, labels)
        extra = (F.normalize(z, dim=1)[:, None, :] * extra_keys[keep]).sum(-1) / self.temperature
        all_logits = torch.cat([logits, extra], 1)
        pos = torch.cat([logits.gather(1, labels[:, None]), extra], 1)
        return (torch.logsumexp(all_logits, 1) - torch.logsumexp(pos, 1)).mean()

    @torch.no_grad()
    def update(self, z: Tensor, labels: Tensor) -> None:
        for zi, y in zip(F.normalize(z.detach().float(), dim=1), labels.tolist(), strict=True):
            if y >= 0:
                m = self.momentum * self.features[y] + (1 - self.momentum) * zi
                self.features[y] = m / m.norm().clamp_min(1e-12)


# --- training loops -------------------------------------------------------------------------


def _collect(data: Any, name: str) -> Tensor:
    """A tensor of images from a tensor, an array or an iterable of batches (DataLoader)."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return torch.from_numpy(data)
    if isinstance(data, Iterable):
        parts = [b[0] if isinstance(b, tuple | list) else b for b in data]
        if parts:
            return torch.cat([torch.as_tensor(p) for p in parts])
    raise TypeError(f"{name} must be a tensor of images or an iterable of image batches")


def _num_clusters(labels: Tensor) -> int:
    return int(labels.max()) + 1 if labels.numel() and int(labels.max()) >= 0 else 0


class _ContrastiveAdaptation:
    """The shared loop of SVIP, its ablations and the unsupervised baseline (see the docstrings)."""

    def __init__(
        self,
        source_model: nn.Module,
        *,
        k: int,
        lr: float,
        lambda_cross: float,
        residual: bool,
        guidance: bool,
        cross: Literal["scca", "hungarian", "none"],
        knn_positives: bool,
        temperature: float = 0.05,
        momentum: float = 0.2,
        min_samples: int = 4,
        batch_size: int = 64,
        seed: int = 0,
        bottleneck: int = 64,
        eps: float | None = None,
    ) -> None:
        check_type("source_model", source_model, nn.Module)
        check_positive("k", k, integer=True)
        check_positive("lr", lr)
        check_positive("batch_size", batch_size, integer=True)
        self.source = copy.deepcopy(source_model).eval().requires_grad_(False)
        self.k, self.lr, self.lambda_cross = k, lr, float(lambda_cross)
        self.residual, self.guidance, self.cross, self.knn_positives = (
            residual,
            guidance,
            cross,
            knn_positives,
        )
        self.temperature, self.momentum, self.min_samples = temperature, momentum, min_samples
        self.batch_size, self.seed, self.bottleneck, self.eps = batch_size, seed, bottleneck, eps
        self.history: list[dict[str, float]] = []

    def _model(self) -> nn.Module:
        if self.residual:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the copy is frozen on purpose
                return ResidualTransfer(
                    copy.deepcopy(self.source), self.source.feat_dim, self.bottleneck
                )
        model = copy.deepcopy(self.source).requires_grad_(True)
        return model.train()

    def _clusters(self, z: Tensor) -> Tensor:
        return source_guided_clusters(z, "dbscan", eps=self.eps, min_samples=self.min_samples)

    def fit(self, vis_loader: Any, ir_loader: Any, epochs: int) -> nn.Module:
        check_positive("epochs", epochs, integer=True)
        x_v, x_r = _collect(vis_loader, "vis_loader"), _collect(ir_loader, "ir_loader")
        for name, x in (("vis_loader", x_v), ("ir_loader", x_r)):
            if len(x) <= self.k:
                raise ValueError(f"k ({self.k}) must be < the number of {name} images ({len(x)})")
        torch.manual_seed(self.seed)
        model = self._model()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=self.lr)
        gen = torch.Generator().manual_seed(self.seed)
        cached = None
        if isinstance(model, ResidualTransfer) and model.target_backbone is None:
            cached = (model.pooled(x_v), model.pooled(x_r))  # f_s is frozen: pool once

        def forward(idx: Tensor, modality: int) -> Tensor:
            if cached is not None:
                return model.from_pooled(cached[modality][idx])
            return model((x_v, x_r)[modality][idx])

        z_s = (embed(self.source, x_v), embed(self.source, x_r))
        labels_s = (self._clusters(z_s[0]), self._clusters(z_s[1])) if self.guidance else None
        knn_s = (
            (knn_indices(z_s[0], self.k), knn_indices(z_s[1], self.k)) if self.guidance else None
        )
        n_paired: list[int] = []
        for epoch in track(range(epochs), "SVIP adaptation (epochs)"):
            model.eval()
            with torch.no_grad():
                z_t = tuple(F.normalize(torch.cat([forward(torch.arange(len(x))[i : i + 512], m)
                                                   for i in range(0, len(x), 512)]), dim=1)
                            for m, x in enumerate((x_v, x_r)))  # fmt: skip
            model.train()
            labels = labels_s if self.guidance else (self._clusters(z_t[0]), self._clusters(z_t[1]))
            knn = (
                knn_s
                if self.guidance
                else (knn_indices(z_t[0], self.k), knn_indices(z_t[1], self.k))
            )
            counts = [_num_clusters(lab) for lab in labels]
            if min(counts) == 0:
                warnings.warn(
                    f"epoch {epoch}: every sample is an outlier; SGCL skipped",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            memories = [
                ClusterMemoryContrast(c, z_t[0].shape[1], self.temperature, self.momentum)
                for c in counts
            ]
            for mem, z, lab in zip(memories, z_t, labels, strict=True):
                mem.initialise(z, lab)
            bank = [z.clone() for z in z_t]  # instance memory of the current target features
            partner = self._partners(z_t, labels)
            paired = int((partner[0] >= 0).sum())  # visible samples pulled to an infrared cluster
            n_paired.append(paired)
            n_steps = -(-max(len(x_v), len(x_r)) // self.batch_size)
            perms = [torch.randperm(len(x), generator=gen) for x in (x_v, x_r)]
            total = {"sgcl": 0.0, "cross": 0.0}
            for step in range(n_steps):
                loss = 0.0
                outs = []
                for m in (0, 1):
                    idx = perms[m].roll(-step * self.batch_size)[: self.batch_size]
                    z = forward(idx, m)
                    extra = bank[m][knn[m][idx]] if self.knn_positives else None
                    l_c = memories[m](z, labels[m][idx], extra)
                    loss = loss + l_c
                    total["sgcl"] += float(l_c.detach())
                    outs.append((idx, z))
                    if self.cross != "none" and self.lambda_cross > 0:
                        target = partner[m][idx]
                        l_x = memories[1 - m](z, target)
                        loss = loss + self.lambda_cross * l_x
                        total["cross"] += float(l_x.detach())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                for m, (idx, z) in enumerate(outs):
                    memories[m].update(z, labels[m][idx])
                    bank[m][idx] = F.normalize(z.detach(), dim=1)
            self.history.append({k: v / n_steps for k, v in total.items()} | {"clusters_vis": counts[0],
                                                                              "clusters_ir": counts[1],
                                                                              "paired_vis": paired})  # fmt: skip
        self._warn_if_idle(n_paired, epochs)
        model.eval()
        self.model = model
        return model

    def _warn_if_idle(self, n_paired: list[int], epochs: int) -> None:
        """A run that never adapted, or whose cross-modal term never acted, must say so: its
        result is the source model's (or SGCL's alone) and would otherwise look like SVIP's."""
        if not n_paired:
            warnings.warn(
                f"{type(self).__name__} never updated the model in {epochs} epochs (every sample "
                "was a clustering outlier): the result is the source model",
                UserWarning,
                stacklevel=3,
            )
        elif self.cross != "none" and self.lambda_cross > 0 and max(n_paired) == 0:
            rule = "reliable cross-modal pairs" if self.cross == "scca" else "matched clusters"
            warnings.warn(
                f"{type(self).__name__} selected no {rule} in {len(n_paired)} epochs (0 of "
                f"{len(n_paired)} epochs with a pair, k={self.k}): the cross-modal term never "
                "acted; check the modality gap, k, or the clustering (eps, min_samples)",
                UserWarning,
                stacklevel=3,
            )

    def _partners(
        self, z_t: tuple[Tensor, Tensor], labels: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, Tensor]:
        """Per sample, the cluster in the *other* modality it is pulled towards (−1 = none)."""
        n_v, n_r = len(z_t[0]), len(z_t[1])
        to_ir = torch.full((n_v,), -1, dtype=torch.long)
        to_vis = torch.full((n_r,), -1, dtype=torch.long)
        if self.cross == "scca":
            pairs = reliable_cross_modal_pairs(z_t[0], z_t[1], self.k)
            self.last_pairs = pairs
            for v, r in pairs.tolist():
                to_ir[v] = labels[1][r]
                to_vis[r] = labels[0][v]
        elif self.cross == "hungarian":
            from scipy.optimize import linear_sum_assignment

            cents = []
            for z, lab in zip(z_t, labels, strict=True):
                c = _num_clusters(lab)
                cents.append(
                    torch.stack([F.normalize(z[lab == i].mean(0), dim=0) for i in range(c)])
                )
            rows, cols = linear_sum_assignment(-(cents[0] @ cents[1].T).numpy())
            v2r = dict(zip(rows.tolist(), cols.tolist(), strict=True))
            r2v = dict(zip(cols.tolist(), rows.tolist(), strict=True))
            to_ir = torch.tensor(
                [v2r.get(int(c), -1) if c >= 0 else -1 for c in labels[0]], dtype=torch.long
            )
            to_vis = torch.tensor(
                [r2v.get(int(c), -1) if c >= 0 else -1 for c in labels[1]], dtype=torch.long
            )
        return to_ir, to_vis


class SVIPAdapter(_ContrastiveAdaptation):
    """SVIP (reconstruction): RTL + SGCL + SCCA; ``ablate ⊆ {"rtl", "sgcl", "scca"}``.

    ``fit(vis_loader, ir_loader, epochs)`` takes the unlabelled target images of each modality
    (tensors, arrays or iterables of batches) and returns the adapted model ``f_t``.
    """

    def __init__(
        self,
        source_model: nn.Module,
        *,
        k: int = 5,
        lambda_scca: float = 1.0,
        lr: float = 3.5e-4,
        ablate: Iterable[str] = frozenset(),
        **kw: Any,
    ) -> None:
        ablate = frozenset(ablate)
        bad = sorted(ablate - set(ABLATIONS))
        if bad:
            raise ValueError(f"ablate must be a subset of {list(ABLATIONS)}, got {bad}")
        self.ablate = ablate
        super().__init__(
            source_model, k=k, lr=lr, lambda_cross=lambda_scca, residual="rtl" not in ablate,
            guidance="sgcl" not in ablate, cross="none" if "scca" in ablate else "scca",
            knn_positives=True, **kw,
        )  # fmt: skip


class UnsupervisedVIBaseline(_ContrastiveAdaptation):
    """Unsupervised VI-ReID without source guidance: full fine-tuning from ``f_s``; per-modality
    cluster contrast on DBSCAN clusters of the current ``f_t`` (every epoch) and a cross-modal term
    towards the Hungarian-matched cluster of the other modality."""

    def __init__(
        self, source_model: nn.Module, *, lr: float = 3.5e-4, k: int = 5, **kw: Any
    ) -> None:
        super().__init__(source_model, k=k, lr=lr, lambda_cross=1.0, residual=False, guidance=False,
                         cross="hungarian", knn_positives=False, **kw)  # fmt: skip


class ShotBaseline:
    """SHOT-style source-free baseline: k-means pseudo-labels on the source features of all target
    images (k = the DBSCAN cluster count of the visible set, an estimate), a cosine classifier
    initialised at the centroids, full fine-tuning with cross-entropy, and SHOT's per-epoch label
    refinement (prediction-weighted centroids, nearest-centroid reassignment)."""

    def __init__(self, source_model: nn.Module, *, lr: float = 3.5e-4, batch_size: int = 64,
                 temperature: float = 0.05, min_samples: int = 4, seed: int = 0) -> None:  # fmt: skip
        self.source = copy.deepcopy(source_model).eval().requires_grad_(False)
        self.lr, self.batch_size, self.temperature = lr, batch_size, temperature
        self.min_samples, self.seed = min_samples, seed

    def fit(self, vis_loader: Any, ir_loader: Any, epochs: int) -> nn.Module:
        x = torch.cat([_collect(vis_loader, "vis_loader"), _collect(ir_loader, "ir_loader")])
        z_s = embed(self.source, x)
        n_vis = len(_collect(vis_loader, "vis_loader"))
        k = max(2, _num_clusters(source_guided_clusters(z_s[:n_vis], min_samples=self.min_samples)))
        labels = source_guided_clusters(z_s, "kmeans", n_clusters=k, seed=self.seed)
        torch.manual_seed(self.seed)
        model = copy.deepcopy(self.source).requires_grad_(True).train()
        cents = torch.stack([F.normalize(z_s[labels == i].mean(0), dim=0) for i in range(k)])
        classifier = nn.Parameter(cents.clone())
        opt = torch.optim.Adam([*model.parameters(), classifier], lr=self.lr)
        gen = torch.Generator().manual_seed(self.seed)
        for _ in track(range(epochs), "adaptation (epochs)"):
            z = embed(model, x)
            probs = (z @ F.normalize(classifier.detach(), dim=1).T / self.temperature).softmax(1)
            cents = F.normalize(probs.T @ z, dim=1)  # SHOT: prediction-weighted centroids
            labels = (z @ cents.T).argmax(1)
            model.train()
            for idx in torch.randperm(len(x), generator=gen).split(self.batch_size):
                logits = F.normalize(model(x[idx]), dim=1) @ F.normalize(classifier, dim=1).T
                loss = F.cross_entropy(logits / self.temperature, labels[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        model.eval()
        return model
