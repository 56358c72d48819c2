"""RobIA: robust instance-aware continual test-time adaptation for deep stereo — **our
reconstruction**.

Paper: Ko, Park, Choi, Min, "RobIA: Robust Instance-aware Continual Test-time Adaptation for Deep
Stereo", NeurIPS 2025 (arXiv 2511.10107). The repository ``0ju-un/RobIA`` holds only a README; no
code, equations or numbers were available. Everything below is rebuilt from the abstract, the first
page of the arXiv HTML and a third-party summary (which adds that the AdaptBN teacher "provides
supervision in low-confidence regions"), following the spec (``eff-vision.md``, section RobIA).
The choices that are ours are marked *(ours)*.

1. **AttEx-MoE** (:class:`AttExMoE`), after the shared feature extractor, on both views. ``E``
   expert adapters ``A_e(F) = W_up,e · act(W_down,e · F)`` (1×1 convolutions, bottleneck r;
   ``W_up`` zero-initialised so the module starts as the identity *(ours)*), **frozen at test
   time**. The **router** is what adapts:
   *attend* — one-head self-attention along the **epipolar line** (the image row in rectified
   stereo): tokens are the W pixels of a row, dim ``c' = C/4``, ``Z = softmax(QKᵀ/√c') V`` per row;
   *excite* — global average pool of Z → MLP → softmax gate ``g ∈ R^E``, top-k (k = 2) and
   renormalised, plus an SE channel excitation ``s = sigmoid(MLP(pool(Z))) ∈ R^C``; output
   ``F' = F + s ⊙ Σ_e g_e A_e(F)``. The left and right views of a pair share one g and one s (the
   pooled descriptor is averaged over the two views) so the correlation sees both views modulated
   alike *(ours)*.
   **Expert diversity before deployment** (:func:`train_experts`, *ours*: no schedule is
   published): from the trained source model, base frozen, each batch draws one augmentation
   family f (noise / blur / photometric / haze), applies it to both views and updates expert f
   (the others get no gradient) and the router, with a routing cross-entropy towards f.
2. **Robust AdaptBN teacher** (:class:`RobustAdaptBNTeacher`): a copy of the model whose BatchNorm
   uses a blend of source and test-batch statistics, ``μ = (1 − m)·μ_src + m·μ_batch`` (same for the
   variance), m = ``bn_mix`` = 0.3; its trainable parameters (the router, and norm affines if the
   student trains them) are an EMA (0.999) of the student's. It outputs a dense disparity ``d_T``
   and a confidence ``c_T`` (default: the peak probability of the soft-argmin distribution;
   ``"flip"``: left–right consistency of the unflipped pass with a horizontally flipped, view-swapped
   pass).
3. **Handcrafted sparse labels** (:func:`sgbm_sparse_labels`): OpenCV StereoSGBM with its
   left–right check (``disp12MaxDiff = 1``, ``uniquenessRatio = 10``); fixed-point × 16 output,
   negative = invalid.
4. **Loss per frame** (teacher detached): ``mean_{p ∈ V_H} ρ(d_S − d_H) + λ · mean_{p ∉ V_H,
   c_T(p) > τ} ρ(d_S − d_T)``, ρ = smooth-L1, λ = 1, τ = 0.5; one Adam step (lr 1e-3) per incoming
   pair; the prediction is taken before the update. The teacher does **not** replace the SGBM
   labels; it fills the pixels where they are missing.

The student's BatchNorm uses test-batch statistics (the two views of the pair), as in the BN-adapt
baseline and TENT *(ours: the student's norm mode is not specified)*; the teacher's blend is what
makes it "robust" to a single frame's statistics. Besides the router, the student trains the norm
layers' affine parameters by default (the spec's optional norm affines: the teacher's affines are
an EMA of the student's, which presupposes it).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_fraction, check_int, check_type
from eff_vision.tta import TTAMethod, configure_norm_adaptation, norm_parameters

__all__ = [
    "EXPERT_FAMILIES",
    "AttExMoE",
    "FullFineTune",
    "RobIA",
    "RobustAdaptBNTeacher",
    "StereoBNAdapt",
    "augment_family",
    "robia_loss",
    "sgbm_batch",
    "sgbm_sparse_labels",
    "stream_eval",
    "train_experts",
]

EXPERT_FAMILIES = ("noise", "blur", "photometric", "haze")


# --- AttEx-MoE ---------------------------------------------------------------------------------


class AttExMoE(nn.Module):
    """Attend-and-excite mixture of expert adapters (see the module docstring).

    ``forward(feat, views=1)``: ``feat`` is ``(views·B, C, H, W)``; with ``views = 2`` (left and
    right stacked) both views of a pair share the gate and the excitation. ``last_gates`` is the
    ``(B, E)`` gate of the last call (exactly ``top_k`` non-zero entries per row, summing to 1).
    ``routing = "uniform"`` replaces the router by ``g_e = 1/E``, ``s = 1`` (the ablation).
    """

    def __init__(
        self,
        channels: int,
        num_experts: int = 4,
        top_k: int = 2,
        bottleneck: int = 8,
        attn_dim: int | None = None,
        epipolar_dim: int = -1,
        hidden: int | None = None,
    ) -> None:
        super().__init__()
        for name, v in (
            ("channels", channels),
            ("num_experts", num_experts),
            ("bottleneck", bottleneck),
        ):
            check_int(name, v, minimum=1)
        check_int("top_k", top_k, 1, num_experts)
        if epipolar_dim not in (-1, 3):
            raise ValueError(
                f"epipolar_dim must be the width axis of NCHW features (-1 or 3): rectified "
                f"stereo's epipolar lines are the image rows; got {epipolar_dim}"
            )
        c_att = attn_dim if attn_dim is not None else max(1, channels // 4)
        check_int("attn_dim", c_att, minimum=1)
        hid = hidden if hidden is not None else max(8, c_att)
        self.channels, self.num_experts, self.top_k, self.attn_dim = (
            channels,
            num_experts,
            top_k,
            c_att,
        )
        self.experts = nn.ModuleList()
        for _ in range(num_experts):
            down = nn.Conv2d(channels, bottleneck, 1)
            up = nn.Conv2d(bottleneck, channels, 1)
            nn.init.zeros_(up.weight)
            nn.init.zeros_(up.bias)
            self.experts.append(nn.Sequential(down, nn.ReLU(), up))
        self.qkv = nn.Conv2d(channels, 3 * c_att, 1)
        self.gate = nn.Sequential(nn.Linear(c_att, hid), nn.ReLU(), nn.Linear(hid, num_experts))
        self.excite = nn.Sequential(nn.Linear(c_att, hid), nn.ReLU(), nn.Linear(hid, channels))
        self.routing: Literal["router", "uniform"] = "router"
        self.last_gates: Tensor | None = None
        self.last_logits: Tensor | None = None  # detached, for logging
        self.keep_logits = False  # train_experts: keep the differentiable logits in _aux_logits
        self._aux_logits: Tensor | None = None

    def router_parameters(self) -> Iterator[nn.Parameter]:
        """The parameters updated at test time: attention projections, gate and excitation MLPs."""
        for mod in (self.qkv, self.gate, self.excite):
            yield from mod.parameters()

    def freeze_experts(self) -> None:
        self.experts.requires_grad_(False)

    def attend(self, feat: Tensor) -> Tensor:
        """Row-wise (epipolar) self-attention: ``(N, C, H, W) → Z (N, H, W, c')``."""
        n, _, h, w = feat.shape
        q, k, v = self.qkv(feat).chunk(3, dim=1)  # (N, c', H, W)

        def rows(t: Tensor) -> Tensor:
            return t.permute(0, 2, 3, 1).reshape(n * h, w, self.attn_dim)

        z = F.scaled_dot_product_attention(rows(q), rows(k), rows(v))  # softmax(QKᵀ/√c') V
        return z.reshape(n, h, w, self.attn_dim)

    def gates(self, pooled: Tensor) -> tuple[Tensor, Tensor]:
        """Top-k renormalised softmax gates and their logits from a pooled descriptor."""
        logits = self.gate(pooled)
        probs = logits.softmax(-1)
        top, idx = probs.topk(self.top_k, dim=-1)
        g = torch.zeros_like(probs).scatter(-1, idx, top / top.sum(-1, keepdim=True))
        return g, logits

    def forward(self, feat: Tensor, views: int = 1) -> Tensor:
        if feat.dim() != 4 or feat.shape[1] != self.channels:
            raise ValueError(f"feat must be (N, {self.channels}, H, W), got {tuple(feat.shape)}")
        if feat.shape[0] % views:
            raise ValueError(f"the batch ({feat.shape[0]}) must be a multiple of views ({views})")
        n = feat.shape[0]
        b = n // views
        if self.routing == "uniform":
            g = feat.new_full((b, self.num_experts), 1.0 / self.num_experts)
            s = feat.new_ones((b, self.channels))
            self.last_logits = None
        else:
            pooled = self.attend(feat).mean((1, 2)).reshape(views, b, self.attn_dim).mean(0)
            g, logits = self.gates(pooled)
            self.last_logits = logits.detach()
            self._aux_logits = logits if self.keep_logits else None
            s = torch.sigmoid(self.excite(pooled))
        self.last_gates = g.detach()
        g_all, s_all = g.repeat(views, 1), s.repeat(views, 1)
        mix = torch.zeros_like(feat)
        for e, expert in enumerate(self.experts):
            if bool((g_all[:, e] != 0).any()):  # experts outside every sample's top-k are skipped
                mix = mix + g_all[:, e, None, None, None] * expert(feat)
        return feat + s_all[:, :, None, None] * mix


def _moe_of(model: nn.Module, moe_layer_name: str) -> AttExMoE:
    try:
        moe = model.get_submodule(moe_layer_name)
    except AttributeError as exc:
        raise ValueError(f"model has no submodule {moe_layer_name!r}") from exc
    if not isinstance(moe, AttExMoE):
        raise TypeError(f"{moe_layer_name!r} must be an AttExMoE, got {type(moe).__name__}")
    return moe


# --- source-side augmentation families and expert training ----------------------------------


def augment_family(
    family: str, left: Tensor, right: Tensor, gen: torch.Generator
) -> tuple[Tensor, Tensor]:
    """A random member of one augmentation family, applied to both views (float in [0, 1]).

    noise: σ ~ U(0.02, 0.15); blur: Gaussian σ ~ U(0.5, 2.5); photometric: gain ~ U(0.15, 0.7)
    and gamma ~ U(0.7, 1.4); haze: ``(1 − m)x + mA``, m ~ U(0.4, 0.92), A ~ U(0.6, 1). *(ours)*
    """
    check_choice("family", family, EXPERT_FAMILIES)

    def u(lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(torch.rand((), generator=gen))

    if family == "noise":
        sig = u(0.02, 0.15)
        out = [x + sig * torch.randn(x.shape, generator=gen, dtype=x.dtype) for x in (left, right)]
    elif family == "blur":
        sig = u(0.5, 2.5)
        r = max(1, math.ceil(3 * sig))
        t = torch.arange(-r, r + 1, dtype=left.dtype)
        k1 = torch.exp(-(t**2) / (2 * sig**2))
        k1 = k1 / k1.sum()
        out = []
        for x in (left, right):
            y = F.conv2d(F.pad(x, (r, r, 0, 0), mode="replicate"), k1.view(1, 1, 1, -1))
            out.append(F.conv2d(F.pad(y, (0, 0, r, r), mode="replicate"), k1.view(1, 1, -1, 1)))
    elif family == "photometric":
        gain, gamma = u(0.15, 0.7), u(0.7, 1.4)
        out = [gain * x.clamp(min=0).pow(gamma) for x in (left, right)]
    else:
        m, a = u(0.4, 0.92), u(0.6, 1.0)
        out = [(1 - m) * x + m * a for x in (left, right)]
    return out[0].clamp(0, 1), out[1].clamp(0, 1)


def _smooth_l1_mean(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    if not bool(mask.any()):
        return pred.sum() * 0.0
    return F.smooth_l1_loss(pred[mask], target[mask])


def train_experts(
    model: nn.Module,
    moe_layer_name: str,
    left: Tensor,
    right: Tensor,
    disp: Tensor,
    steps: int = 150,
    batch_size: int = 4,
    lr: float = 1e-3,
    route_weight: float = 0.1,
    seed: int = 0,
) -> list[float]:
    """Expert diversity before deployment (*ours*): base frozen, per batch one family f; expert f
    and the router learn (disparity smooth-L1 on ``x ≥ max_disp`` + ``route_weight``·CE(gate, f)).

    BatchNorm runs on batch statistics (as at test time) with ``momentum = 0`` so the source
    running statistics (the teacher's) are not changed. Returns the loss per step.
    """
    moe = _moe_of(model, moe_layer_name)
    max_disp = int(getattr(model, "max_disp", 0))
    gen = torch.Generator().manual_seed(seed)
    model.requires_grad_(False)
    params = list(moe.router_parameters()) + list(moe.experts.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in bns]
    for m in bns:
        m.momentum = 0.0
    model.train()
    mask = torch.zeros(disp.shape[1:], dtype=torch.bool)
    mask[..., max_disp:] = True
    losses = []
    moe.keep_logits = True
    try:
        for _ in range(steps):
            f = int(torch.randint(len(EXPERT_FAMILIES), (), generator=gen))
            idx = torch.randperm(len(left), generator=gen)[:batch_size]
            lq, rq = augment_family(EXPERT_FAMILIES[f], left[idx], right[idx], gen)
            pred = model(lq, rq)
            loss = _smooth_l1_mean(pred, disp[idx], mask.expand_as(pred))
            target = torch.full((len(idx),), f, dtype=torch.long)
            loss = loss + route_weight * F.cross_entropy(moe._aux_logits, target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for e, expert in enumerate(moe.experts):  # only expert f learns from this batch
                if e != f:
                    for p in expert.parameters():
                        p.grad = None
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        moe.keep_logits, moe._aux_logits = False, None
        for m, mom in zip(bns, momenta, strict=True):
            m.momentum = mom
        model.requires_grad_(True)
        model.eval()
    return losses


# --- handcrafted sparse labels -------------------------------------------------------------


def _to_uint8(name: str, img: np.ndarray) -> np.ndarray:
    if hasattr(img, "detach"):
        img = img.detach().cpu().numpy()
    img = np.asarray(img)
    if img.dtype == np.uint8:
        return img
    if not np.issubdtype(img.dtype, np.floating):
        raise TypeError(f"{name} must be uint8 or float in [0, 1], got dtype {img.dtype}")
    if img.size and (img.min() < 0 or img.max() > 1):
        raise ValueError(
            f"{name}: float images must lie in [0, 1], got [{img.min():.3g}, {img.max():.3g}]"
        )
    return np.rint(img * 255.0).astype(np.uint8)


def sgbm_sparse_labels(
    left: np.ndarray,
    right: np.ndarray,
    num_disparities: int = 32,
    block_size: int = 5,
    lr_check: int = 1,
    uniqueness_ratio: int = 10,
) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV StereoSGBM disparities ``(H, W)`` float32 and their validity mask.

    ``left``/``right``: ``(H, W)`` grey or ``(H, W, C)`` images, uint8 or float in [0, 1]
    (converted to uint8). ``P1 = 8·C·b²``, ``P2 = 32·C·b²``; ``lr_check`` is ``disp12MaxDiff``
    (the left–right consistency check; < 0 disables it). OpenCV returns fixed-point
    disparities × 16 and marks invalid pixels with a negative value.
    """
    l8, r8 = _to_uint8("left", left), _to_uint8("right", right)
    if l8.shape != r8.shape:
        raise ValueError(f"left and right must have the same shape, got {l8.shape} and {r8.shape}")
    if l8.ndim not in (2, 3):
        raise ValueError(f"images must be 2-D (H, W) or 3-D (H, W, C), got shape {l8.shape}")
    check_type("num_disparities", num_disparities, int)
    if num_disparities <= 0 or num_disparities % 16:
        raise ValueError(
            f"num_disparities must be a positive multiple of 16 (OpenCV's rule), got {num_disparities}"
        )
    check_type("block_size", block_size, int)
    if block_size < 1 or block_size % 2 == 0:
        raise ValueError(f"block_size must be odd and >= 1, got {block_size}")
    import cv2

    cn = 1 if l8.ndim == 2 else l8.shape[2]
    sgbm = cv2.StereoSGBM_create(
        minDisparity=0,
        numDisparities=num_disparities,
        blockSize=block_size,
        P1=8 * cn * block_size**2,
        P2=32 * cn * block_size**2,
        disp12MaxDiff=lr_check,
        uniquenessRatio=uniqueness_ratio,
    )
    raw = sgbm.compute(l8, r8)
    valid = raw >= 0
    return np.where(valid, raw.astype(np.float32) / 16.0, 0.0).astype(np.float32), valid


def sgbm_batch(left: Tensor, right: Tensor, **kw: Any) -> tuple[Tensor, Tensor]:
    """:func:`sgbm_sparse_labels` over a batch: the stacked disparities and validity masks."""
    ds, vs = [], []
    for i in range(left.shape[0]):
        d, v = sgbm_sparse_labels(
            left[i, 0].detach().cpu().numpy(), right[i, 0].detach().cpu().numpy(), **kw
        )
        ds.append(torch.from_numpy(d))
        vs.append(torch.from_numpy(v))
    return torch.stack(ds).to(left.device), torch.stack(vs).to(left.device)


# --- the robust AdaptBN teacher --------------------------------------------------------------


class _MixedBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d normalising with ``(1 − m)·running + m·batch`` statistics (never updated)."""

    bn_mix: float = 0.3

    def forward(self, x: Tensor) -> Tensor:
        m = self.bn_mix
        c = x.shape[1]
        mean_b = torch.zeros(c, dtype=x.dtype, device=x.device)
        var_b = torch.ones(c, dtype=x.dtype, device=x.device)
        # the fused kernel with momentum 1 writes the batch mean and unbiased variance
        F.batch_norm(x, mean_b, var_b, None, None, True, 1.0, self.eps)
        n = x.numel() // c
        var_b = var_b * ((n - 1) / n) if n > 1 else torch.zeros_like(var_b)
        mean = (1 - m) * self.running_mean + m * mean_b
        var = (1 - m) * self.running_var + m * var_b
        return F.batch_norm(x, mean, var, self.weight, self.bias, False, 0.0, self.eps)


class RobustAdaptBNTeacher:
    """The robust AdaptBN teacher: blended BN statistics, EMA of the student's trainable weights.

    Build it from the **source** model (BN running statistics present), before the student's BN
    is switched to batch statistics.
    """

    def __init__(
        self,
        student: nn.Module,
        momentum: float = 0.999,
        bn_mix: float = 0.3,
        conf_threshold: float = 0.5,
        confidence: Literal["peak", "flip"] = "peak",
    ) -> None:
        check_type("student", student, nn.Module)
        check_fraction("momentum", momentum)
        check_fraction("bn_mix", bn_mix)
        check_fraction("conf_threshold", conf_threshold)
        check_choice("confidence", confidence, ("peak", "flip"))
        self.momentum, self.bn_mix = float(momentum), float(bn_mix)
        self.conf_threshold, self.confidence = float(conf_threshold), confidence
        self.model = copy.deepcopy(student)
        for mod in self.model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                if mod.running_mean is None:
                    raise ValueError(
                        "the teacher needs the source BN running statistics: build it from the "
                        "source model before configuring the student for batch statistics"
                    )
                mod.__class__ = _MixedBatchNorm2d
                mod.bn_mix = self.bn_mix
        self.model.eval().requires_grad_(False)
        self._initial = copy.deepcopy(self.model.state_dict())

    def reset(self) -> None:
        self.model.load_state_dict(self._initial)

    @torch.no_grad()
    def _full(self, left: Tensor, right: Tensor) -> tuple[Tensor, Tensor]:
        if hasattr(self.model, "forward_full"):
            return self.model.forward_full(left, right)
        raise TypeError(
            "the teacher's model must provide forward_full(left, right) -> (disp, prob)"
        )

    @torch.no_grad()
    def predict(self, left: Tensor, right: Tensor) -> tuple[Tensor, Tensor]:
        """Dense disparity ``d_T (B, H, W)`` and confidence ``c_T ∈ [0, 1]``."""
        if left.shape != right.shape:
            raise ValueError(
                f"left and right must have the same shape, got {tuple(left.shape)} and {tuple(right.shape)}"
            )
        if left.shape[0] == 1 and self.bn_mix == 1.0:
            raise ValueError(
                "batch size 1 with bn_mix = 1 normalises with one frame's statistics only; "
                "use bn_mix < 1 (blend with the source statistics)"
            )
        disp, prob = self._full(left, right)
        if self.confidence == "peak":
            return disp, prob.amax(1)
        # flip: the flipped, view-swapped pair gives the right view's disparity (flipped back)
        d_right = self._full(right.flip(-1), left.flip(-1))[0].flip(-1)
        w = disp.shape[-1]
        xs = torch.arange(w, dtype=disp.dtype, device=disp.device).expand_as(disp)
        x_r = (xs - disp).clamp(0, w - 1)  # left pixel x matches right pixel x − d
        grid_x = 2 * x_r / (w - 1) - 1
        h = disp.shape[-2]
        ys = torch.linspace(-1, 1, h, dtype=disp.dtype, device=disp.device)[
            None, :, None
        ].expand_as(disp)
        grid = torch.stack([grid_x, ys], -1)
        d_r_at = F.grid_sample(d_right[:, None], grid, align_corners=True)[:, 0]
        return disp, torch.exp(-(disp - d_r_at).abs())

    @torch.no_grad()
    def update(self, student: nn.Module) -> None:
        """EMA ``θ_T ← m·θ_T + (1 − m)·θ_S`` over the student's trainable parameters."""
        own = dict(self.model.named_parameters())
        for name, p in student.named_parameters():
            if p.requires_grad and name in own:
                own[name].mul_(self.momentum).add_(p.detach(), alpha=1 - self.momentum)


# --- the loss and the TTA methods -------------------------------------------------------------


def robia_loss(
    d_student: Tensor,
    d_sgbm: Tensor,
    valid: Tensor,
    d_teacher: Tensor | None = None,
    conf: Tensor | None = None,
    tau: float = 0.5,
    lambda_teacher: float = 1.0,
) -> tuple[Tensor, dict[str, float]]:
    """``mean_{V_H} ρ(d_S − d_H) + λ·mean_{¬V_H, c_T > τ} ρ(d_S − d_T)`` (ρ = smooth-L1)."""
    loss = _smooth_l1_mean(d_student, d_sgbm, valid)
    logs = {"label_density": float(valid.float().mean()), "teacher_fraction": 0.0}
    if d_teacher is not None and conf is not None and lambda_teacher > 0:
        t_mask = (~valid) & (conf > tau)
        logs["teacher_fraction"] = float(t_mask.float().mean())
        loss = loss + lambda_teacher * _smooth_l1_mean(d_student, d_teacher.detach(), t_mask)
    return loss, logs


class _StereoTTA(TTAMethod):
    """Shared plumbing: BN on batch statistics, ``step(left, right)`` = ``forward``."""

    def step(self, left: Tensor, right: Tensor) -> Tensor:
        """Predict, then adapt once; returns the prediction made before the update."""
        return self(left, right)

    def _check(self, left: Tensor, right: Tensor) -> None:
        if left.shape != right.shape:
            raise ValueError(
                f"left and right must have the same shape, got {tuple(left.shape)} and {tuple(right.shape)}"
            )
        if left.dim() != 4:
            raise ValueError(f"left/right must be NCHW tensors, got shape {tuple(left.shape)}")


class StereoBNAdapt(_StereoTTA):
    """BN-adapt baseline for stereo: test-batch statistics (both views), no update."""

    @torch.no_grad()
    def forward_and_adapt(self, left: Tensor, right: Tensor) -> Tensor:
        self._check(left, right)
        return self.model(left, right)


class FullFineTune(_StereoTTA):
    """Full fine-tuning on the SGBM labels: every parameter, Adam, one step per pair."""

    def __init__(self, model: nn.Module, lr: float = 1e-3, num_disparities: int = 32) -> None:
        self.lr, self.num_disparities = lr, num_disparities
        super().__init__(model)

    def collect_params(self) -> list[tuple[str, nn.Parameter]]:
        named = list(self.model.named_parameters())
        for _, p in named:
            p.requires_grad_(True)
        return named

    def configure_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=self.lr)

    def forward_and_adapt(self, left: Tensor, right: Tensor) -> Tensor:
        self._check(left, right)
        with torch.enable_grad():
            disp = self.model(left, right)
            d_h, valid = sgbm_batch(left, right, num_disparities=self.num_disparities)
            loss, logs = robia_loss(disp, d_h, valid)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        self.stats["label_density"] = logs["label_density"]
        return disp.detach()


class RobIA(_StereoTTA):
    """RobIA's continual TTA (reconstruction; see the module docstring), ``tent.Tent`` shape.

    ``model`` must contain an :class:`AttExMoE` at ``moe_layer_name`` (experts trained before
    deployment, e.g. by :func:`train_experts`) and provide ``forward_full``. It is configured in
    place (pass a copy). Only the router and (``train_norm_affine``, default) the norm layers'
    affine parameters adapt — the spec's "optional norm affine parameters", on by default because
    the teacher's "affine parameters are an EMA of the student's" presupposes that the student
    trains them. With ``moe.routing = "uniform"`` only the norm affines adapt (the ablation).
    ``stats``: label density, fraction of teacher pixels, last gates, steps.
    """

    def __init__(
        self,
        model: nn.Module,
        moe_layer_name: str,
        teacher: RobustAdaptBNTeacher | None = None,
        lr: float = 1e-3,
        lambda_teacher: float = 1.0,
        use_teacher: bool = True,
        train_norm_affine: bool = True,
        num_disparities: int = 32,
    ) -> None:
        check_type("model", model, nn.Module)
        _moe_of(model, moe_layer_name)
        self.moe_layer_name = moe_layer_name
        if lambda_teacher < 0:
            raise ValueError(f"lambda_teacher must be >= 0, got {lambda_teacher}")
        if num_disparities <= 0 or num_disparities % 16:
            raise ValueError(
                f"num_disparities must be a positive multiple of 16 (OpenCV's rule), got {num_disparities}"
            )
        self.lr, self.lambda_teacher, self.use_teacher = lr, float(lambda_teacher), use_teacher
        self.train_norm_affine, self.num_disparities = train_norm_affine, num_disparities
        # the teacher keeps the source BN statistics: build it before the student is configured
        self.teacher = (
            (teacher if teacher is not None else RobustAdaptBNTeacher(model))
            if use_teacher
            else None
        )
        super().__init__(model)

    @property
    def moe(self) -> AttExMoE:
        return _moe_of(self.model, self.moe_layer_name)

    def configure_model(self) -> None:
        configure_norm_adaptation(self.model)
        self.model.requires_grad_(False)

    def collect_params(self) -> list[tuple[str, nn.Parameter]]:
        ids = (
            {id(p) for p in self.moe.router_parameters()} if self.moe.routing == "router" else set()
        )
        named = [(n, p) for n, p in self.model.named_parameters() if id(p) in ids]
        if self.train_norm_affine:
            named += norm_parameters(self.model)
        for _, p in named:
            p.requires_grad_(True)
        if not named:
            raise ValueError(
                "RobIA has no parameter to adapt (uniform routing without norm affines)"
            )
        return named

    def configure_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=self.lr)

    def reset_state(self) -> None:
        self.stats = {"batches": 0, "label_density": 0.0, "teacher_fraction": 0.0, "gates": None,
                      "teacher_fraction_sum": 0.0}  # fmt: skip
        if getattr(self, "teacher", None) is not None:
            self.teacher.reset()

    def forward_and_adapt(self, left: Tensor, right: Tensor) -> Tensor:
        self._check(left, right)
        with torch.enable_grad():
            disp = self.model(left, right)
            d_h, valid = sgbm_batch(left, right, num_disparities=self.num_disparities)
            d_t = conf = None
            if self.teacher is not None:
                d_t, conf = self.teacher.predict(left, right)
            loss, logs = robia_loss(disp, d_h, valid, d_t, conf, self.teacher.conf_threshold
                                    if self.teacher is not None else 0.5, self.lambda_teacher)  # fmt: skip
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        if self.teacher is not None:
            self.teacher.update(self.model)
        self.stats.update(label_density=logs["label_density"], teacher_fraction=logs["teacher_fraction"],
                          gates=self.moe.last_gates.tolist() if self.moe.last_gates is not None else None)  # fmt: skip
        self.stats["teacher_fraction_sum"] += logs["teacher_fraction"]
        return disp.detach()


def stream_eval(
    method: Any,
    frames: Sequence[tuple[Any, ...]],
    max_disp: int,
    on_frame: Any = None,
) -> dict[str, Any]:
    """Run ``method(left, right)`` over the frames (online); EPE / bad-1 / D1 per frame on
    ``x ≥ max_disp`` and the wall ms per frame. ``on_frame(i, pred)`` is called after each.

    Frames are ``(left, right, disp, domain)``, or with a fifth entry, the texture-kind map of
    ``stereo_stream(texture_kinds=True)``: then ``bad1_low_texture`` holds bad-1 on the pixels
    of flat or striped surfaces (NaN for a frame without any)."""
    from eff_vision.data.stereo import TEXTURES
    from eff_vision.metrics.stereo import bad_px, d1, epe

    out: dict[str, list[Any]] = {"epe": [], "bad1": [], "d1": [], "domain": []}
    low_kinds = [TEXTURES.index("flat"), TEXTURES.index("stripes")]
    t0 = time.perf_counter()
    for left, right, gt, dom, *kind in frames:
        lt = torch.from_numpy(np.ascontiguousarray(left))[None, None]
        rt = torch.from_numpy(np.ascontiguousarray(right))[None, None]
        with torch.no_grad():  # TTA methods re-enable gradients for their own update
            pred = method(lt, rt)[0].detach().numpy()
        mask = np.zeros(gt.shape, bool)
        mask[:, max_disp:] = True
        out["epe"].append(epe(pred, gt, mask))
        out["bad1"].append(bad_px(pred, gt, 1.0, mask))
        out["d1"].append(d1(pred, gt, mask))
        out["domain"].append(dom)
        if kind:
            low = mask & np.isin(kind[0], low_kinds)
            out.setdefault("bad1_low_texture", []).append(
                bad_px(pred, gt, 1.0, low) if low.any() else float("nan")
            )
        if on_frame is not None:
            on_frame(len(out["epe"]) - 1, pred)
    ms = (time.perf_counter() - t0) / max(len(frames), 1) * 1e3
    return {**out, "ms_per_frame": ms}
