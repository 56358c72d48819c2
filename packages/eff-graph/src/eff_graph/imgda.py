"""ImGDA: dual prototype-enhanced contrastive learning for class-imbalanced graph domain adaptation.

Paper: "Dual Prototype-Enhanced Contrastive Framework for Class-Imbalanced Graph Domain Adaptation",
NeurIPS 2025. Official code: ``maxin88scu/ImGDA`` (MIT; ``main.py``, ``utils.py``, ``Models.py``,
``GNN/ppmi_conv.py`` read for reference, this is our own implementation on PyG). The paper's equation
numbers were not available to us; each formula below is written out and named after the official
function that computes it.

Model (unsupervised domain adaptation: labelled, long-tailed source graph; unlabelled target graph):

* **Dual-branch encoder, shared weights** (``GNNEncoder``/``PPMIConv``): the same GCN layers are
  propagated with a *local* operator ``Â = D^{-1/2}(A + I)D^{-1/2}`` and a *global* operator
  (:func:`ppr_operator` by default, :func:`ppmi_operator` = the release's random-walk PPMI).
* **Anchors** (``sampling_anchor_nodes``): per class the top-k highest-degree source nodes, chosen
  separately on the local graph and on the global operator (:func:`degree_anchors`).
* **Class-dependent temperature** ``τ_c = τ0 + (1 − τ0)·n_c / n_max`` (:func:`class_temperatures`).
* **Cross-branch prototype contrast** (``cross_branch_prototype_contrastive_loss``)::

      L_cb = 1/(4C) Σ_{b,b'∈{l,g}} Σ_c −mean_{a∈A_c^{b'}} log( exp(ẑ_a^{b'}·p̂_c^b/τ_c)
                                                            / Σ_{n∈source} exp(ẑ_n^{b'}·p̂_c^b/τ_c) )

  with ``p_c^b`` the mean of branch-b embeddings of class c's branch-b anchors and hats denoting
  L2-normalised vectors (:func:`cross_branch_prototype_loss`).
* **Cross-domain contrast** (``cross_domain_contrastive_loss``): target pseudo-labels from a soft
  nearest-anchor vote ``argmax softmax_a(cos(z_t, z_a)) @ onehot(y_a)`` with ``z_t = z_local + z_global``
  (:func:`cross_domain_contrastive_loss`).
* **Objective**: ``CE(W z_global_src, y) + w_cb·L_cb + w_cd·L_cd``; prediction uses the global branch.

Code vs paper (intended behaviour is the default; a flag gives the released behaviour):

1. ``prototypes="anchors"`` (paper) — the release's ``calculate_prototypes`` ignores its anchor
   argument and averages *all* source nodes of the class (``prototypes="all"``).
2. ``cross_domain="infonce"`` — the release's softmax runs only over the same-class anchors, so its
   minimum is *uniform* similarity (a weak regulariser, not an attraction), and it divides by the
   class size twice (``cross_domain="official"``, temperature 1, both branches averaged). The intended
   term (class-balanced confident selection, start at ``cd_start`` of the epochs, weight ``cd_weight``)
   is documented in :func:`cross_domain_contrastive_loss`.
3. ``global_op="ppr"`` — the paper says "global (e.g. PPR/diffusion)"; the release uses random-walk
   PPMI (``global_op="ppmi"``, re-implemented vectorised and seeded; the release builds it with a pure
   Python dict loop and caches it on disk).
4. ``source_offsets=False`` — the release adds a learnable per-node offset ``c_i ∈ R^hidden``
   (init N(−1, 1)) after each layer for source nodes only (not described in the abstract).
5. Evaluation: the release reports the best target F1 over epochs (model selection on target labels);
   here :meth:`ImGDA.fit` never reads ``target.y`` and the reproduction reports the last epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.utils import add_remaining_self_loops, degree

from eff_graph._gnn import (
    GCNStack,
    GraphOperator,
    OperatorCache,
    check_domain_pair,
    check_edge_index,
    check_graph,
    gcn_operator,
)
from eff_shared.errors import check_choice, check_positive, check_type
from eff_shared.progress import track
from eff_shared.torch import seeded

__all__ = [
    "DualBranchEncoder",
    "ImGDA",
    "ImGDAConfig",
    "class_prototypes",
    "class_temperatures",
    "cross_branch_prototype_loss",
    "cross_domain_contrastive_loss",
    "degree_anchors",
    "ppmi_operator",
    "ppr_operator",
    "ppr_topk",
]

GLOBAL_OPS = ("ppr", "ppmi")
PROTOTYPES = ("anchors", "all")
CROSS_DOMAIN = ("infonce", "official")
BRANCHES = ("local", "global", "both")


# --------------------------------------------------------------------------------------------
# Global operators
# --------------------------------------------------------------------------------------------


def _check_ppr_args(num_nodes: int, alpha: float, topk: int) -> None:
    check_positive("num_nodes", num_nodes, integer=True)
    check_type("ppr_alpha", alpha, (int, float))
    if not 0 < alpha < 1:
        raise ValueError(f"ppr_alpha must lie in (0, 1), got {alpha!r}")
    check_positive("topk", topk, integer=True)


def ppr_topk(
    edge_index: Tensor, num_nodes: int, alpha: float = 0.15, topk: int = 32
) -> tuple[Tensor, Tensor]:
    """Exact personalised PageRank ``Π = α (I − (1 − α) T)^{-1}``, ``T = D^{-1/2}(A + I)D^{-1/2}``,
    sparsified to the ``topk`` largest entries of every row; returns ``(edge_index, edge_weight)``.

    This is what ``torch_geometric.transforms.GDC(self_loop_weight=1, normalization_in="sym",
    normalization_out=None, diffusion_kwargs={"method": "ppr", "alpha": α},
    sparsification_kwargs={"method": "topk", "k": topk, "dim": 1}, exact=True)`` computes (duplicate
    edges are summed, as GDC's ``coalesce`` does); dense, so ``O(n²)`` memory and ``O(n³)`` time.
    Computed in float64; weights are returned in the default dtype.
    """
    _check_ppr_args(num_nodes, alpha, topk)
    check_edge_index(edge_index, num_nodes)
    dev = edge_index.device
    a = torch.zeros(num_nodes, num_nodes, dtype=torch.float64, device=dev)
    a.index_put_(
        (edge_index[0], edge_index[1]),
        torch.ones(edge_index.size(1), dtype=torch.float64, device=dev),
        accumulate=True,
    )
    a += torch.eye(num_nodes, dtype=torch.float64, device=dev)
    dis = a.sum(0).pow(-0.5)
    t = dis[:, None] * a * dis[None, :]
    m = torch.eye(num_nodes, dtype=torch.float64, device=dev) - (1 - alpha) * t
    pi = alpha * torch.linalg.inv(m)
    k = min(topk, num_nodes)
    vals, cols = pi.topk(k, dim=1)
    rows = torch.arange(num_nodes, device=dev).repeat_interleave(k)
    return torch.stack([rows, cols.reshape(-1)]), vals.reshape(-1).to(torch.get_default_dtype())


def ppr_operator(
    edge_index: Tensor, num_nodes: int, alpha: float = 0.15, topk: int = 32
) -> tuple[Tensor, Tensor]:
    """ImGDA's default global operator: :func:`ppr_topk`, symmetrised, with self-loops, re-normalised.

    Symmetrisation keeps an entry ``(i, j)`` when ``j`` is among the top-k of row ``i`` *or* ``i`` among
    those of row ``j``, with the value ``max(P_ij, P_ji)`` (= ``Π_ij``, since ``Π`` is symmetric for a
    symmetric graph); the diagonal ``Π_ii`` is always kept. The result ``D^{-1/2} S D^{-1/2}`` (row sums
    of ``S``) is symmetric and non-negative.
    """
    ei, ew = ppr_topk(edge_index, num_nodes, alpha, topk)
    s = torch.zeros(num_nodes, num_nodes, dtype=torch.float64, device=ei.device)
    s[ei[0], ei[1]] = ew.double()
    s = torch.maximum(s, s.T)
    diag = torch.arange(num_nodes, device=ei.device)
    missing = s[diag, diag] <= 0
    if bool(missing.any()):  # Π_ii ≥ α > 0, but it may fall outside a tiny top-k
        pi_diag = _ppr_diagonal(edge_index, num_nodes, alpha)
        s[diag[missing], diag[missing]] = pi_diag[missing]
    dis = s.sum(1).pow(-0.5)
    s = dis[:, None] * s * dis[None, :]
    idx = s.nonzero().T
    return idx, s[idx[0], idx[1]].to(torch.get_default_dtype())


def _ppr_diagonal(edge_index: Tensor, num_nodes: int, alpha: float) -> Tensor:
    ei, ew = ppr_topk(edge_index, num_nodes, alpha, num_nodes)
    out = torch.zeros(num_nodes, dtype=torch.float64, device=ei.device)
    self_loop = ei[0] == ei[1]
    out[ei[0, self_loop]] = ew[self_loop].double()
    return out


def ppmi_operator(
    edge_index: Tensor,
    num_nodes: int,
    walks_per_node: int = 40,
    max_walk_len: int = 5,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """UDAGCN/ImGDA's random-walk PPMI operator (``GNN/ppmi_conv.py::PPMIConv.norm``), vectorised.

    From every node with a neighbour, ``walks_per_node`` walks of length ``L ~ U{1..max_walk_len}`` on
    the undirected graph; every node ``b`` visited from start ``a`` counts once per visit. With
    ``P(b|a)`` the normalised visit counts, ``N`` the number of distinct visited nodes::

        w(a, b) = log( P(b|a) / Σ_a' P(b|a') · N / max_walk_len )

    then self-loops of weight 1 where missing and ``D^{-1/2} W D^{-1/2}`` with ``D`` the row sums of
    ``W``. As in the release, negative values are kept (it is PMI, not clipped PPMI) and the result
    is not symmetric; a node whose weighted degree is not positive gets ``D^{-1/2} = 0`` (the release
    only zeroes infinities). Seeded through ``generator`` (a CPU ``torch.Generator``).
    """
    check_positive("num_nodes", num_nodes, integer=True)
    check_positive("walks_per_node", walks_per_node, integer=True)
    check_positive("max_walk_len", max_walk_len, integer=True)
    check_edge_index(edge_index, num_nodes)
    dev = edge_index.device
    ei = edge_index.cpu()
    ei = torch.cat([ei, ei.flip(0)], 1)
    ei = torch.unique(ei[0] * num_nodes + ei[1])
    src, dst = ei // num_nodes, ei % num_nodes  # sorted by src: a CSR layout
    deg = torch.bincount(src, minlength=num_nodes)
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(deg, 0)
    starts = torch.nonzero(deg > 0).flatten()
    pairs = []
    for _ in range(walks_per_node):
        length = torch.randint(1, max_walk_len + 1, (starts.numel(),), generator=generator)
        cur = starts.clone()
        for step in range(max_walk_len):
            active = length > step
            if not bool(active.any()):
                break
            a, c = starts[active], cur[active]
            offset = (torch.rand(c.numel(), generator=generator) * deg[c]).long()
            nxt = dst[rowptr[c] + torch.minimum(offset, deg[c] - 1)]
            pairs.append(a * num_nodes + nxt)
            cur[active] = nxt
    keys, counts = torch.unique(torch.cat(pairs), return_counts=True)
    a, b = keys // num_nodes, keys % num_nodes
    counts = counts.double()
    p = counts / torch.zeros(num_nodes, dtype=torch.float64).index_add_(0, a, counts)[a]
    prob_sums = torch.zeros(num_nodes, dtype=torch.float64).index_add_(0, b, p)
    n_visited = int((prob_sums > 0).sum())
    w = torch.log(p / prob_sums[b] * n_visited / max_walk_len)
    out_ei, out_w = add_remaining_self_loops(torch.stack([a, b]), w, 1.0, num_nodes)
    d = torch.zeros(num_nodes, dtype=torch.float64).index_add_(0, out_ei[0], out_w)
    dis = torch.where(d > 0, d.clamp_min(1e-300).pow(-0.5), torch.zeros_like(d))
    norm = dis[out_ei[0]] * out_w * dis[out_ei[1]]
    nonzero = norm != 0  # rows zeroed by a non-positive degree carry no message
    return out_ei[:, nonzero].to(dev), norm[nonzero].to(torch.get_default_dtype()).to(dev)


# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------


class DualBranchEncoder(nn.Module):
    """One GCN weight set propagated with the local operator and with the global operator.

    ``forward(..., branch="local"|"global"|"both")``; ``"both"`` returns ``z_local + z_global`` (the
    official target representation). Operators are computed once per graph and cached (keyed by the
    ``edge_index`` tensor, or an equal one). ``seed`` seeds the PPMI random walks.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 512,
        num_layers: int = 2,
        dropout: float = 0.1,
        global_op: Literal["ppr", "ppmi"] = "ppr",
        ppr_alpha: float = 0.15,
        topk: int = 32,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_positive("in_channels", in_channels, integer=True)
        check_positive("hidden_channels", hidden_channels, integer=True)
        check_positive("num_layers", num_layers, integer=True)
        check_choice("global_op", global_op, GLOBAL_OPS)
        _check_ppr_args(1, ppr_alpha, topk)
        self.global_op = global_op
        self.stack = GCNStack(in_channels, hidden_channels, num_layers, dropout)
        self.local_cache = OperatorCache(gcn_operator)
        if global_op == "ppr":
            self.global_cache = OperatorCache(lambda ei, n: ppr_operator(ei, n, ppr_alpha, topk))
        else:

            def build(ei: Tensor, n: int) -> tuple[Tensor, Tensor]:
                gen = torch.Generator().manual_seed(seed)
                return ppmi_operator(ei, n, generator=gen)

            self.global_cache = OperatorCache(build)

    def operator(
        self, edge_index: Tensor, num_nodes: int, branch: Literal["local", "global"]
    ) -> GraphOperator:
        check_choice("branch", branch, ("local", "global"))
        cache = self.local_cache if branch == "local" else self.global_cache
        return cache(edge_index, num_nodes)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        *,
        branch: Literal["local", "global", "both"],
        offsets: list[Tensor] | None = None,
    ) -> Tensor:
        check_choice("branch", branch, BRANCHES)
        if branch == "both":
            return self.forward(x, edge_index, branch="local", offsets=offsets) + self.forward(
                x, edge_index, branch="global", offsets=offsets
            )
        return self.stack(x, self.operator(edge_index, x.size(0), branch), offsets)


# --------------------------------------------------------------------------------------------
# Anchors, temperatures, losses
# --------------------------------------------------------------------------------------------


def degree_anchors(
    edge_index: Tensor, y: Tensor, k: int, num_classes: int | None = None
) -> list[Tensor]:
    """Per class, the ``k`` source nodes of highest degree (``degree(edge_index[0])``, the release's
    count of out-entries), ties broken by node id; fewer when the class has fewer nodes. One entry
    per class in ``[0, num_classes)`` (default ``max(y) + 1``)."""
    check_positive("k", k, integer=True)
    check_edge_index(edge_index, y.numel())
    deg = degree(edge_index[0], num_nodes=y.numel())
    order = torch.argsort(-deg, stable=True)  # node ids ascending within equal degree
    y_sorted = y[order]
    if num_classes is None:
        num_classes = int(y.max()) + 1 if y.numel() else 0
    return [order[y_sorted == c][:k] for c in range(num_classes)]


def class_temperatures(counts: Tensor, tau0: float = 0.5) -> Tensor:
    """``τ_c = τ0 + (1 − τ0)·n_c / n_max``: minority classes get a sharper (smaller) temperature."""
    _check_tau0(tau0)
    counts = torch.as_tensor(counts, dtype=torch.get_default_dtype())
    if counts.numel() == 0 or bool((counts < 0).any()) or float(counts.max()) <= 0:
        raise ValueError("counts must be non-negative class sizes with at least one positive")
    return tau0 + (1 - tau0) * counts / counts.max()


def _check_tau0(tau0: float) -> None:
    check_type("tau0", tau0, (int, float))
    if not 0 < tau0 <= 1:
        raise ValueError(f"tau0 must lie in (0, 1], got {tau0!r}")


def _flatten(anchors: list[Tensor], device: torch.device) -> tuple[Tensor, Tensor]:
    """Concatenated anchor ids and their classes (the position in the per-class list)."""
    idx = torch.cat([a.to(device) for a in anchors])
    cls = torch.cat(
        [
            torch.full((a.numel(),), c, dtype=torch.long, device=device)
            for c, a in enumerate(anchors)
        ]
    )
    return idx, cls


def _class_means(z: Tensor, idx: Tensor, cls: Tensor, num_classes: int) -> Tensor:
    sums = torch.zeros(num_classes, z.size(1), dtype=z.dtype, device=z.device).index_add_(
        0, cls, z[idx]
    )
    counts = torch.bincount(cls, minlength=num_classes).clamp_min(1).to(z.dtype)
    return sums / counts[:, None]


def class_prototypes(
    z: Tensor,
    y: Tensor,
    anchors: list[Tensor],
    mode: Literal["anchors", "all"] = "anchors",
) -> Tensor:
    """Class prototypes ``(C, d)``: mean embedding of each class's anchors (``"anchors"``, paper) or of
    all its source nodes (``"all"``, the release's ``calculate_prototypes``)."""
    check_choice("prototypes", mode, PROTOTYPES)
    if mode == "anchors":
        return _class_means(z, *_flatten(anchors, z.device), len(anchors))
    every = torch.arange(y.numel(), device=z.device)
    return _class_means(z, every, y.to(z.device), len(anchors))


def cross_branch_prototype_loss(
    z_local: Tensor,
    z_global: Tensor,
    y: Tensor,
    anchors_l: list[Tensor],
    anchors_g: list[Tensor],
    tau_c: Tensor,
    prototypes: Literal["anchors", "all"] = "anchors",
) -> Tensor:
    """``L_cb`` (module docstring): prototypes of branch b against anchors of branch b', all four
    branch pairs, class temperatures ``tau_c``, divided by ``4C``. Vectorised: one similarity matrix
    per branch pair, anchors gathered by index, per-class means by ``index_add``.

    ``prototypes="anchors"``: ``p_c^b`` = mean of branch-b embeddings of class c's branch-b anchors
    (paper); ``"all"``: mean over every source node of class c (release).
    """
    check_choice("prototypes", prototypes, PROTOTYPES)
    num_classes = len(anchors_l)
    if len(anchors_g) != num_classes or tau_c.numel() != num_classes:
        raise ValueError("anchors_l, anchors_g and tau_c must have one entry per class")
    dev = z_local.device
    zs = {"l": z_local, "g": z_global}
    anchors = {"l": _flatten(anchors_l, dev), "g": _flatten(anchors_g, dev)}
    protos = {
        "l": class_prototypes(z_local, y, anchors_l, prototypes),
        "g": class_prototypes(z_global, y, anchors_g, prototypes),
    }
    tau = tau_c.to(device=dev, dtype=z_local.dtype)
    total = z_local.new_zeros(())
    for b in ("l", "g"):
        p_hat = F.normalize(protos[b], dim=1)
        for b2 in ("l", "g"):
            logits = F.normalize(zs[b2], dim=1) @ p_hat.T / tau  # (N, C)
            lse = torch.logsumexp(logits, dim=0)  # over all source nodes, per class
            idx, cls = anchors[b2]
            log_prob = logits[idx, cls] - lse[cls]
            per_class = torch.zeros(num_classes, dtype=z_local.dtype, device=dev).index_add_(
                0, cls, log_prob
            ) / torch.bincount(cls, minlength=num_classes).clamp_min(1)
            total = total - per_class.sum()
    return total / (4 * num_classes)


def _check_cd_args(temperature: float, select_frac: float, mode: str) -> None:
    check_choice("mode", mode, CROSS_DOMAIN)
    check_positive("temperature", temperature)
    check_type("select_frac", select_frac, (int, float))
    if not 0 < select_frac <= 1:
        raise ValueError(f"select_frac must lie in (0, 1], got {select_frac!r}")


def cross_domain_contrastive_loss(
    z_t: Tensor,
    z_src: Tensor,
    y_src: Tensor,
    anchors: list[Tensor],
    temperature: float = 0.5,
    select_frac: float = 0.3,
    mode: Literal["infonce", "official"] = "infonce",
) -> Tensor:
    """Cross-domain contrast between target nodes and the source anchors.

    Pseudo-labels (both modes, no gradient): ``v_t = softmax_a(cos(z_t, z_a)) @ onehot(y_a)`` over every
    anchor ``a``, ``ŷ_t = argmax v_t``, confidence ``max v_t`` (the winning vote mass).

    ``mode="infonce"`` (intended, default): per pseudo-class the ``ceil(select_frac·n)`` most confident
    target nodes (class-balanced selection), then the multi-positive InfoNCE, averaged over the
    selected nodes::

        −log( Σ_{a∈A_ŷ} exp(cos(z_t, z_a)/T) / Σ_{a∈A} exp(cos(z_t, z_a)/T) )

    ``mode="official"`` (release): for every target node, ``−mean_{a∈A_ŷ} log softmax_{a'∈A_ŷ}(cos/T)``
    (softmax over the same-class anchors only, minimised by *uniform* similarities), averaged within each
    pseudo-class, divided again by the class size, summed over classes. The release uses ``T = 1``.
    ``anchors`` is the per-class list of anchor node ids into ``z_src``/``y_src``.
    """
    _check_cd_args(temperature, select_frac, mode)
    dev = z_t.device
    num_classes = len(anchors)
    a_idx, a_cls = _flatten(anchors, dev)
    if a_idx.numel() == 0:
        raise ValueError("anchors must contain at least one node")
    if bool((y_src.to(dev)[a_idx] != a_cls).any()):
        raise ValueError("anchors[c] must only hold source nodes of class c")
    cos = F.normalize(z_t, dim=1) @ F.normalize(z_src[a_idx], dim=1).T  # (n_t, n_anchors)
    with torch.no_grad():
        votes = torch.softmax(cos, dim=1) @ F.one_hot(a_cls, num_classes).to(cos.dtype)
        conf, pseudo = votes.max(dim=1)
    same = pseudo[:, None] == a_cls[None, :]
    logits = cos / temperature
    if mode == "official":
        log_p = torch.log_softmax(logits.masked_fill(~same, float("-inf")), dim=1)
        per_node = -(log_p.masked_fill(~same, 0.0)).sum(1) / same.sum(1).clamp_min(1)
        n_c = torch.bincount(pseudo, minlength=num_classes).to(cos.dtype)
        per_class = torch.zeros(num_classes, dtype=cos.dtype, device=dev).index_add_(
            0, pseudo, per_node
        )
        present = n_c > 0
        return (per_class[present] / n_c[present] ** 2).sum()
    selected = _balanced_top(pseudo, conf, select_frac, num_classes)
    pos = torch.logsumexp(logits[selected].masked_fill(~same[selected], float("-inf")), dim=1)
    return (torch.logsumexp(logits[selected], dim=1) - pos).mean()


def _balanced_top(pseudo: Tensor, conf: Tensor, frac: float, num_classes: int) -> Tensor:
    """Indices of the ``ceil(frac·n_c)`` most confident nodes of every pseudo-class (no class loop)."""
    order = torch.argsort(pseudo.double() * 2.0 + (1.0 - conf.double()), stable=True)
    counts = torch.bincount(pseudo, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=order.device) - starts[pseudo[order]]
    keep = torch.ceil(frac * counts.double()).long()
    return order[rank < keep[pseudo[order]]]


# --------------------------------------------------------------------------------------------
# Config and model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImGDAConfig:
    """Hyper-parameters (defaults: the official code's, with the intended behaviours of the spec).

    ``cb_weight`` (cross-branch prototype term) and ``cd_weight`` (cross-domain term) at 0 give the
    "dual-branch, CE only" ablation. ``seed`` seeds initialisation, dropout and the PPMI walks.
    """

    hidden_channels: int = 512
    num_layers: int = 2
    dropout: float = 0.1
    global_op: str = "ppr"
    ppr_alpha: float = 0.15
    topk: int = 32
    anchors_per_class: int = 200
    tau0: float = 0.5
    prototypes: str = "anchors"
    cross_domain: str = "infonce"
    cd_temperature: float = 0.5
    select_frac: float = 0.3
    cd_start: float = 0.5
    cd_weight: float = 0.1
    cb_weight: float = 1.0
    source_offsets: bool = False
    lr: float = 0.01
    weight_decay: float = 1e-3
    epochs: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden_channels", "num_layers", "topk", "anchors_per_class", "epochs"):
            check_positive(name, getattr(self, name), integer=True)
        check_choice("global_op", self.global_op, GLOBAL_OPS)
        check_choice("prototypes", self.prototypes, PROTOTYPES)
        check_choice("cross_domain", self.cross_domain, CROSS_DOMAIN)
        _check_ppr_args(1, self.ppr_alpha, self.topk)
        _check_tau0(self.tau0)
        _check_cd_args(self.cd_temperature, self.select_frac, self.cross_domain)
        check_type("cd_start", self.cd_start, (int, float))
        if not 0 <= self.cd_start <= 1:
            raise ValueError(f"cd_start must lie in [0, 1], got {self.cd_start!r}")
        check_type("dropout", self.dropout, (int, float))
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout!r}")
        for name in ("cd_weight", "cb_weight", "weight_decay"):
            check_positive(name, getattr(self, name), strict=False)
        check_positive("lr", self.lr)
        check_type("source_offsets", self.source_offsets, bool)
        check_positive("seed", self.seed, strict=False, integer=True)


class ImGDA(nn.Module):
    """ImGDA (module docstring): dual-branch encoder + prototype and cross-domain contrast.

    ``fit(source, target)`` trains on the labelled source and the unlabelled target (``target.y`` is
    never read); ``predict(target)`` classifies with the global branch. ``history`` holds the loss
    terms per epoch. An ``nn.Module``: ``state_dict()`` / ``load_state_dict()`` save and restore a
    fitted model (encoder, classifier, the per-node source offsets when used, the fitted flag) on
    a model built with the same ``in_channels``, ``num_classes`` and config.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        config: ImGDAConfig | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__()
        check_positive("in_channels", in_channels, integer=True)
        check_positive("num_classes", num_classes, integer=True)
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        unknown = set(overrides) - {f.name for f in fields(ImGDAConfig)}
        if unknown:
            raise TypeError(f"unknown ImGDAConfig field(s): {sorted(unknown)}")
        self.config = replace(config or ImGDAConfig(), **overrides)
        self.in_channels = in_channels
        self.num_classes = num_classes
        cfg = self.config
        with seeded(cfg.seed):
            self.encoder = DualBranchEncoder(
                in_channels,
                cfg.hidden_channels,
                cfg.num_layers,
                cfg.dropout,
                cfg.global_op,  # type: ignore[arg-type]
                cfg.ppr_alpha,
                cfg.topk,
                seed=cfg.seed,
            )
            self.classifier = nn.Linear(cfg.hidden_channels, num_classes)
        self.offsets: nn.ParameterList | None = None
        self.history: list[dict[str, float]] = []
        self.anchors: dict[str, list[Tensor]] = {}
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        # The source offsets are created by fit (one row per source node): shape them first.
        n = sum(1 for k in state_dict if k.startswith("offsets."))
        if n and self.offsets is None:
            self.offsets = nn.ParameterList(
                nn.Parameter(torch.empty_like(state_dict[f"offsets.{i}"])) for i in range(n)
            )
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _check(self, source: Data, target: Data) -> None:
        check_domain_pair(source, target, self.num_classes)
        if source.x.size(1) != self.in_channels:
            raise ValueError(
                f"source has {source.x.size(1)} features, the model was built for {self.in_channels}"
            )
        for name, data in (("source", source), ("target", target)):
            self._check_dtype(name, data)

    def _check_dtype(self, name: str, data: Data) -> None:
        want = self.classifier.weight.dtype
        if data.x.dtype != want:
            raise TypeError(
                f"{name}.x must have the model's dtype {want}, got {data.x.dtype} "
                f"(convert with {name}.x = {name}.x.to({want}))"
            )

    def fit(self, source: Data, target: Data, epochs: int | None = None) -> ImGDA:
        """Train for ``epochs`` (default ``config.epochs``) full-batch epochs; returns ``self``."""
        self._check(source, target)
        cfg = self.config
        epochs = cfg.epochs if epochs is None else epochs
        check_positive("epochs", epochs, integer=True)
        dev = source.x.device
        self.encoder.to(dev)
        self.classifier.to(dev)
        xs, eis, ys = source.x, source.edge_index, source.y
        xt, eit = target.x, target.edge_index
        ns, c = xs.size(0), self.num_classes
        global_ei = self.encoder.operator(eis, ns, "global").edge_index
        k = cfg.anchors_per_class
        self.anchors = {
            "local": degree_anchors(eis, ys, k, c),
            "global": degree_anchors(global_ei, ys, k, c),
        }
        tau = class_temperatures(torch.bincount(ys, minlength=c), cfg.tau0).to(dev)
        union = [
            torch.unique(torch.cat([a, b])) for a, b in zip(*self.anchors.values(), strict=True)
        ]
        with seeded(cfg.seed + 1):
            if cfg.source_offsets:
                self.offsets = nn.ParameterList(
                    nn.Parameter(torch.empty(ns, cfg.hidden_channels, device=dev).normal_(-1, 1))
                    for _ in range(cfg.num_layers)
                )
            opt = torch.optim.Adam(self.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
            cd_from = math.floor(cfg.cd_start * epochs)
            self.encoder.train()
            self.classifier.train()
            offs = list(self.offsets) if self.offsets is not None else None
            for epoch in track(range(epochs), "ImGDA training (epochs)"):
                z_l = self.encoder(xs, eis, branch="local", offsets=offs)
                z_g = self.encoder(xs, eis, branch="global", offsets=offs)
                ce = F.cross_entropy(self.classifier(z_g), ys)
                loss, terms = ce, {"epoch": float(epoch), "ce": float(ce.detach())}
                if cfg.cb_weight > 0:
                    cb = cross_branch_prototype_loss(
                        z_l, z_g, ys, self.anchors["local"], self.anchors["global"], tau,
                        cfg.prototypes,  # type: ignore[arg-type]
                    )  # fmt: skip
                    loss = loss + cfg.cb_weight * cb
                    terms["cb"] = float(cb.detach())
                if cfg.cd_weight > 0 and epoch >= cd_from:
                    cd = self._cross_domain(xt, eit, z_l, z_g, ys, union)
                    loss = loss + cfg.cd_weight * cd
                    terms["cd"] = float(cd.detach())
                opt.zero_grad()
                loss.backward()
                opt.step()
                terms["loss"] = float(loss.detach())
                self.history.append(terms)
        self.fitted.fill_(True)
        return self

    def _cross_domain(
        self, xt: Tensor, eit: Tensor, z_l: Tensor, z_g: Tensor, ys: Tensor, union: list[Tensor]
    ) -> Tensor:
        cfg = self.config
        z_t = self.encoder(xt, eit, branch="both")
        if cfg.cross_domain == "infonce":
            return cross_domain_contrastive_loss(
                z_t, z_l + z_g, ys, union, cfg.cd_temperature, cfg.select_frac, "infonce"
            )
        # release: one term per branch (branch anchors, branch embeddings), T = 1, averaged
        return 0.5 * (
            cross_domain_contrastive_loss(z_t, z_l, ys, self.anchors["local"], 1.0, 1.0, "official")
            + cross_domain_contrastive_loss(
                z_t, z_g, ys, self.anchors["global"], 1.0, 1.0, "official"
            )
        )

    @torch.no_grad()
    def predict(self, target: Data) -> Tensor:
        """Class predictions for every node of ``target`` from the global branch."""
        check_graph(target, "target")
        if target.x.size(1) != self.in_channels:
            raise ValueError(
                f"target has {target.x.size(1)} features, the model was built for {self.in_channels}"
            )
        self._check_dtype("target", target)
        if not bool(self.fitted):
            raise RuntimeError("ImGDA.predict called before fit: train with fit(source, target)")
        self.encoder.eval()
        self.classifier.eval()
        z = self.encoder(target.x, target.edge_index, branch="global")
        self.encoder.train()
        self.classifier.train()
        return self.classifier(z).argmax(1)
