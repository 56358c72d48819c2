"""RankMatch: semi-supervised label-distribution learning with ranking-aware pseudo-labels —
**our reconstruction**.

Paper: Kou, Xie, Wang, Chen, Wang, Xie, Chen, Jia, Liu, Geng, "RankMatch: A Novel Approach to
Semi-Supervised Label Distribution Learning Leveraging Rank Correlation between Labels", NeurIPS
2025 (OpenReview Q8QMhJFSk4). No official code was found; this module is rebuilt from the NeurIPS
abstract and the earlier version (arXiv 2312.06343), which gives two ingredients: the pseudo-label
distribution is the **average of the predictions over several weak augmentations**, and a
**pairwise relevance ranking (PRR) loss**. The exact form of the PRR loss, the schedule and the
weights below are our choices (spec ``eff-vision.md``, section RankMatch):

- labelled loss ``KL(d ‖ p(weak(x))) + λ_r · PRR_m(p, d)`` with the margin-aware
  ``PRR_m(p, d) = (1/C) Σ_{j,k: d_j > d_k} max(0, (d_j − d_k) − (p_j − p_k))`` (ranking *and* gaps);
- pseudo-label ``q = (1/A) Σ_a p(weak_a(u))``, A = 2, without gradient;
- unlabelled loss, ranking only ("disregarding their margins helps prevent overfitting"):
  ``PRR_0(p(strong(u)), q) = (1/C) Σ_{j,k: q_j > q_k} max(0, p_k − p_j)``;
- ``L = L_lab + λ_u(t) L_unl``, λ_u = 0 for ``warmup_steps`` and then ramps linearly to its value
  over ``rampup_steps``.

``unlabeled_loss="kl"`` replaces the unlabelled term by ``KL(q ‖ p(strong(u)))``: the KL-only
pseudo-label baseline the abstract argues against. With ``lambda_u=0`` the trainer is the
supervised-only baseline (the same labelled loss; the unlabelled forward passes are skipped).
The six LDL metrics live in :mod:`eff_vision.metrics.ldl` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from numba import njit
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_int, check_positive, check_type
from eff_shared.progress import track
from eff_vision.metrics.ldl import (
    canberra,
    chebyshev,
    clark,
    cosine,
    intersection,
    kl_divergence,
    ldl_report,
)

__all__ = [
    "GaussianNoise",
    "RandomShift",
    "RankMatchLoss",
    "RankMatchTrainer",
    "canberra",
    "chebyshev",
    "clark",
    "cosine",
    "intersection",
    "kl_divergence",
    "ldl_report",
    "prr_loss",
    "split_xd",
]

_REDUCTIONS = ("mean", "sum", "none")
Augment = Callable[[Tensor, torch.Generator], Tensor]


def _check_rows(name: str, t: Tensor, tol: float, hint: str) -> None:
    t = t.detach()
    if t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64):
        a = t.numpy()  # fewer, cheaper calls than torch's for this per-step check
        bad = bool(a.min() < 0) or bool(np.abs(a.sum(-1) - 1).max() > tol)
    else:
        bad = bool((t < 0).any()) or float((t.sum(-1) - 1).abs().max()) > tol
    if bad:
        sums = t.sum(-1)
        raise ValueError(
            f"every {name} row must be a probability distribution (entries >= 0, sum 1 ± {tol:g}); "
            f"got row sums in [{float(sums.min()):.6g}, {float(sums.max()):.6g}]{hint}"
        )


def _run_bounds(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position of row-sorted keys: start and (exclusive) end of its run of equal keys."""
    n, c = sorted_keys.shape
    pos = np.broadcast_to(np.arange(c), (n, c))
    new = np.ones((n, c), dtype=bool)
    new[:, 1:] = sorted_keys[:, 1:] != sorted_keys[:, :-1]
    last = np.ones((n, c), dtype=bool)
    last[:, :-1] = new[:, 1:]
    start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, pos + 1, c)[:, ::-1], axis=1)[:, ::-1]
    return start, end


def _unsort(order: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    np.put_along_axis(out, order, values, axis=1)
    return out


@njit(cache=True)
def _packed_keys(a):
    """float32 rows → int64 keys: the value's order-preserving bits above its column, so that one
    integer sort gives the order and the sorted values (issue #25: without AVX-512 numpy's argsort
    has no SIMD path and cost 2.3x an int64 sort at 256 x 100, plus a sort for the values)."""
    n, c = a.shape
    bits = a.view(np.int32)
    out = np.empty((n, c), dtype=np.int64)
    for i in range(n):
        for j in range(c):
            b = np.int64(bits[i, j])
            if b == -2147483648:  # -0.0 sorts (and ties) as 0.0
                b = 0
            b ^= (b >> 31) & 0x7FFFFFFF  # negative floats: the magnitude bits reversed
            out[i, j] = (b << 32) | j
    return out


@njit(cache=True)
def _place_signed_ranks(packed, out):
    """out[i, column] = 2·rank − (C − 1) from row-sorted packed keys; whether a row has a tie."""
    n, c = packed.shape
    tie = False
    for i in range(n):
        prev = packed[i, 0] >> 32
        out[i, packed[i, 0] & 0xFFFFFFFF] = 1 - c
        for r in range(1, c):
            key = packed[i, r]
            tie |= (key >> 32) == prev
            prev = key >> 32
            out[i, key & 0xFFFFFFFF] = 2 * r + 1 - c
    return tie


def _less_minus_greater(keys: np.ndarray) -> tuple[np.ndarray, bool]:
    """``#{j: key_j < key_i} − #{j: key_j > key_i}`` per row, and whether any row has a tie."""
    n, c = keys.shape
    if keys.dtype == np.float32 and c < 1 << 31:
        packed = _packed_keys(np.ascontiguousarray(keys))
        packed.sort(axis=1)
        counts = np.empty((n, c), dtype=np.intp)
        if not _place_signed_ranks(packed, counts):  # no ties: the count is 2·rank − (C − 1)
            return counts, False
        order, srt = packed & 0xFFFFFFFF, packed >> 32  # ties: equal keys are equal values
    else:
        order = np.argsort(keys, axis=1)
        srt = np.sort(keys, axis=1)  # cheaper than gathering through ``order``
        if not (srt[:, 1:] == srt[:, :-1]).any():  # no ties: the count is 2·rank − (C − 1)
            ranks = np.broadcast_to(2 * np.arange(c) - (c - 1), (n, c))
            return _unsort(order, ranks), False
    start, end = _run_bounds(srt)
    return _unsort(order, start - (c - end)), True


def _tied_sign_count(tie_key: np.ndarray, by: np.ndarray) -> np.ndarray:
    """``#{j: tie_key_j = tie_key_i, by_j < by_i} − #{j: tie_key_j = tie_key_i, by_j > by_i}``."""
    order = np.lexsort((by, tie_key), axis=1)
    tk, bk = (np.take_along_axis(a, order, axis=1) for a in (tie_key, by))
    g_start, g_end = _run_bounds(tk)
    # runs of equal (tie_key, by): a new run where either key changes
    both = np.stack([tk, bk])
    n, c = tk.shape
    new = np.ones((n, c), dtype=bool)
    new[:, 1:] = (both[:, :, 1:] != both[:, :, :-1]).any(0)
    pos = np.broadcast_to(np.arange(c), (n, c))
    last = np.ones((n, c), dtype=bool)
    last[:, :-1] = new[:, 1:]
    b_start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
    b_end = np.minimum.accumulate(np.where(last, pos + 1, c)[:, ::-1], axis=1)[:, ::-1]
    return _unsort(order, (b_start - g_start) - (g_end - b_end))


def _host(x: Tensor) -> np.ndarray:
    """Detached values as a numpy array (order and ties preserved: float16 widens exactly)."""
    x = x.detach()
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    return x.cpu().numpy()


def _prr_coefficients(v: Tensor, t: Tensor) -> Tensor:
    """Integer coefficients κ with ``Σ_{t_j > t_k} max(0, v_k − v_j) = Σ_i κ_i v_i`` per row.

    κ_i = #{j: t_j > t_i, v_j < v_i} − #{j: t_j < t_i, v_j > v_i} (the hinge's derivative, with
    max′(0) = 0). Each term is a two-dimensional dominance count; it equals
    ``[(G_t − L_t) + (L_v − G_v) − E − F] / 2`` where G/L count larger/smaller keys in one
    dimension (one sort each) and E, F correct for ties in v and in t (a lexicographic sort, only
    when a row has ties). O(C log C) per row, in numpy on the detached values.
    """
    vn, tn = _host(v), _host(t)
    lt, t_ties = _less_minus_greater(tn)  # L_t − G_t
    lv, v_ties = _less_minus_greater(vn)  # L_v − G_v
    twice = lv - lt
    if v_ties:  # E = #{v equal, t larger} − #{v equal, t smaller}
        twice += _tied_sign_count(vn, tn)
    if t_ties:  # F = #{t equal, v smaller} − #{t equal, v larger}
        twice -= _tied_sign_count(tn, vn)
    return torch.from_numpy(twice // 2).to(device=v.device)


class _SortedPRR(torch.autograd.Function):
    """``Σ_{t_j > t_k} max(0, v_k − v_j)`` per row as ``Σ_i κ_i v_i`` with κ from
    :func:`_prr_coefficients` (O(C log C) sorts on the host), and its gradient ``κ`` directly: one
    product and one sum forward, one product backward (issue #25: the chain of gathers, tie checks
    and their autograd nodes it replaces cost more than the sorts at batch 256)."""

    @staticmethod
    def forward(ctx: Any, v: Tensor, t: Tensor) -> Tensor:
        kappa = _prr_coefficients(v, t).to(v.dtype)
        ctx.save_for_backward(kappa)
        return (kappa * v).sum(1)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (kappa,) = ctx.saved_tensors
        return kappa * grad[:, None], None


def _prr_sorted(v: Tensor, t: Tensor) -> Tensor:
    """``Σ_{t_j > t_k} max(0, v_k − v_j)`` per row in ``O(C log C)`` (see :class:`_SortedPRR`)."""
    return _SortedPRR.apply(v, t)


#: ``prr_loss(impl="auto")`` sorts from this many labels on (CPU); below it the pairwise kernel,
#: whose ``B·C²`` work is then small, is as fast and stays bit-identical to the reference.
SORTED_MIN_LABELS = 32
_IMPLS = ("auto", "pairwise", "sorted")


def _prr_pairwise(v_pred: Tensor, target: Tensor, margin: bool) -> Tensor:
    """The reference: every (j, k) pair, ``O(B·C²)`` memory and work."""
    dt = target[:, :, None] - target[:, None, :]  # d_j − d_k
    dp = v_pred[:, :, None] - v_pred[:, None, :]  # p_j − p_k
    hinge = F.relu(dt - dp) if margin else F.relu(-dp)
    return torch.where(dt > 0, hinge, torch.zeros_like(hinge)).sum((1, 2))


def prr_loss(
    pred: Tensor,
    target: Tensor,
    margin: bool = True,
    reduction: str = "mean",
    impl: Literal["auto", "pairwise", "sorted"] = "auto",
) -> Tensor:
    """Pairwise relevance ranking loss over the label pairs ordered by ``target``.

    ``margin=True``: ``(1/C) Σ_{d_j > d_k} max(0, (d_j − d_k) − (p_j − p_k))``, zero iff every
    predicted gap is at least the target's (in particular when ``pred == target``).
    ``margin=False``: ``(1/C) Σ_{d_j > d_k} max(0, p_k − p_j)``, zero iff the prediction orders every
    such pair like the target (ties in the target impose nothing).

    ``impl``: ``"pairwise"`` forms every pair (``O(B·C²)``, the reference); ``"sorted"`` computes
    the same sum in ``O(B·C log C)``: with ``v = p − d`` (margin) or ``v = p`` it is
    ``Σ_{d_j > d_k} max(0, v_k − v_j)``, piecewise linear in ``v``, ``= Σ_i κ_i v_i`` with integer
    κ from sorts (:func:`_prr_coefficients`); value and gradient equal the reference's up to
    floating-point summation order (float64: 1e-15; float32: ~1e-7 relative), the gradient exactly
    at pairs on the kink (max′(0) = 0). ``"auto"``: sorted on CPU from
    :data:`SORTED_MIN_LABELS` labels, pairwise otherwise.

    ``pred`` and ``target`` are ``(B, C)`` probability rows (``pred`` from a softmax). ``ValueError``
    for different shapes, C < 2, a target that is not a distribution, or logits as ``pred``.
    """
    check_type("pred", pred, Tensor)
    check_type("target", target, Tensor)
    check_choice("reduction", reduction, _REDUCTIONS)
    check_choice("impl", impl, _IMPLS)
    if pred.shape != target.shape or pred.dim() != 2:
        raise ValueError(
            f"pred and target must be (B, C) tensors of the same shape, got {tuple(pred.shape)} "
            f"and {tuple(target.shape)}"
        )
    c = pred.shape[1]
    if c < 2:
        raise ValueError(f"the number of labels C must be >= 2, got {c}")
    _check_rows("target", target, 1e-4, "")
    _check_rows("pred", pred, 1e-3, ": apply softmax to logits first")
    target = target.detach().to(pred.dtype)
    if impl == "auto":
        impl = "sorted" if c >= SORTED_MIN_LABELS and pred.device.type == "cpu" else "pairwise"
    if impl == "pairwise":
        per_sample = _prr_pairwise(pred, target, margin) / c
    else:
        per_sample = _prr_sorted(pred - target if margin else pred, target) / c
    if reduction == "mean":
        return per_sample.mean()
    if reduction == "sum":
        return per_sample.sum()
    return per_sample


@dataclass(frozen=True)
class GaussianNoise:
    """The reproduction's augmentation: ``x + std · N(0, 1)`` drawn from the given generator."""

    std: float

    def __post_init__(self) -> None:
        check_positive("std", self.std, strict=False)

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        if self.std == 0:
            return x
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        return x + self.std * noise


@dataclass(frozen=True)
class RandomShift:
    """Image augmentation on flattened rows: translate each image by an integer offset
    ``(dy, dx)`` drawn uniformly from ``[−max_shift, max_shift]²`` (zero fill), optionally plus
    ``noise_std · N(0, 1)``. ``shape`` is the image's (H, W); rows of ``x`` are ``H·W`` pixels
    (e.g. :func:`eff_vision.data.ldl.make_digits_ldl`, shape (8, 8))."""

    max_shift: int
    shape: tuple[int, int] = (8, 8)
    noise_std: float = 0.0

    def __post_init__(self) -> None:
        check_positive("max_shift", self.max_shift, strict=False, integer=True)
        check_positive("noise_std", self.noise_std, strict=False)
        h, w = self.shape
        check_positive("shape", h, integer=True)
        check_positive("shape", w, integer=True)
        if self.max_shift >= min(h, w):
            raise ValueError(f"max_shift must be < min(shape) = {min(h, w)}, got {self.max_shift}")

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        h, w = self.shape
        if x.dim() != 2 or x.shape[1] != h * w:
            raise ValueError(f"x must be (n, {h * w}) rows of {h}x{w} images, got {tuple(x.shape)}")
        m, n = self.max_shift, x.shape[0]
        out = x
        if m > 0:
            off = torch.randint(-m, m + 1, (2, n), generator=generator, device=x.device)
            padded = F.pad(x.reshape(n, h, w), (m, m, m, m))
            # output pixel (i, j) reads the padded input at (i + m − dy, j + m − dx)
            rows = (torch.arange(h, device=x.device) + m)[None, :] - off[0][:, None]
            cols = (torch.arange(w, device=x.device) + m)[None, :] - off[1][:, None]
            batch = torch.arange(n, device=x.device)[:, None, None]
            out = padded[batch, rows[:, :, None], cols[:, None, :]].reshape(n, h * w)
        if self.noise_std > 0:
            noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
            out = out + self.noise_std * noise
        return out


def _kl_rows(target: Tensor, log_pred: Tensor) -> Tensor:
    """Mean over rows of ``KL(target ‖ pred)`` with ``pred = exp(log_pred)``."""
    return F.kl_div(log_pred, target, reduction="batchmean")


class RankMatchLoss(nn.Module):
    """The RankMatch objective (reconstruction; see the module docstring for every term).

    ``forward(model, x_lab, d_lab, x_unlab, weak_aug, strong_aug, step, generator)`` returns
    ``(loss, logs)``; the augmentations are callables ``aug(x, generator) -> x``.
    """

    def __init__(
        self,
        lambda_rank: float = 1.0,
        lambda_u: float = 0.5,
        num_weak: int = 2,
        warmup_steps: int = 200,
        rampup_steps: int = 500,
        unlabeled_loss: Literal["prr", "kl"] = "prr",
    ) -> None:
        super().__init__()
        check_positive("lambda_rank", lambda_rank, strict=False)
        check_positive("lambda_u", lambda_u, strict=False)
        check_int("num_weak", num_weak, minimum=1)
        for name, v in (("warmup_steps", warmup_steps), ("rampup_steps", rampup_steps)):
            check_type(name, v, int)
            if v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        check_choice("unlabeled_loss", unlabeled_loss, ("prr", "kl"))
        self.lambda_rank = float(lambda_rank)
        self.lambda_u = float(lambda_u)
        self.num_weak = num_weak
        self.warmup_steps = warmup_steps
        self.rampup_steps = rampup_steps
        self.unlabeled_loss = unlabeled_loss

    def unlabeled_weight(self, step: int) -> float:
        """λ_u(t): 0 before ``warmup_steps``, then a linear ramp to ``lambda_u``."""
        if step < self.warmup_steps:
            return 0.0
        if self.rampup_steps == 0:
            return self.lambda_u
        return self.lambda_u * min(1.0, (step - self.warmup_steps) / self.rampup_steps)

    @torch.no_grad()
    def pseudo_label(
        self, model: nn.Module, x_unlab: Tensor, weak_aug: Augment, generator: torch.Generator
    ) -> Tensor:
        """``q = mean_a softmax(model(weak_a(u)))`` over ``num_weak`` views, without gradient."""
        probs = [model(weak_aug(x_unlab, generator)).softmax(-1) for _ in range(self.num_weak)]
        return torch.stack(probs).mean(0)

    def forward(
        self,
        model: nn.Module,
        x_lab: Tensor,
        d_lab: Tensor,
        x_unlab: Tensor | None,
        weak_aug: Augment,
        strong_aug: Augment,
        step: int,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        check_type("step", step, int)
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        gen = generator if generator is not None else torch.Generator().manual_seed(step)
        log_p = model(weak_aug(x_lab, gen)).log_softmax(-1)
        kl = _kl_rows(d_lab, log_p)
        rank = prr_loss(log_p.exp(), d_lab, margin=True)
        loss = kl + self.lambda_rank * rank
        w = self.unlabeled_weight(step)
        logs = {
            "kl_lab": float(kl.detach()),
            "prr_lab": float(rank.detach()),
            "lambda_u": w,
            "unl": 0.0,
        }
        if w > 0 and x_unlab is not None and len(x_unlab) > 0:
            q = self.pseudo_label(model, x_unlab, weak_aug, gen)
            log_ps = model(strong_aug(x_unlab, gen)).log_softmax(-1)
            if self.unlabeled_loss == "prr":
                unl = prr_loss(log_ps.exp(), q, margin=False)
            else:
                unl = _kl_rows(q, log_ps)
            loss = loss + w * unl
            logs["unl"] = float(unl.detach())
        logs["loss"] = float(loss.detach())
        return loss, logs


def split_xd(data: Any, name: str, need_d: bool) -> tuple[Tensor, Tensor | None]:
    """Features and (when ``need_d``) label distributions of ``data`` (an ``LDLSplit``, an
    ``(x, d)`` pair or a bare feature array) as float tensors; ``name`` is the argument named in
    the errors."""
    if hasattr(data, "x"):  # eff_vision.data.ldl.LDLSplit
        x, d = data.x, getattr(data, "d", None)
    elif isinstance(data, tuple | list):
        x, d = data[0], data[1] if len(data) > 1 else None
    else:
        x, d = data, None
    x = torch.as_tensor(x, dtype=torch.float32)
    if need_d:
        if d is None:
            raise ValueError(f"{name} must carry label distributions (x, d)")
        d = torch.as_tensor(d, dtype=torch.float32)
        if d.shape[0] != x.shape[0]:
            raise ValueError(f"{name}: x has {x.shape[0]} rows but d has {d.shape[0]}")
    return x, d if need_d else None


class RankMatchTrainer:
    """Minibatch training with :class:`RankMatchLoss` (FixMatch-family loop shape, as in USB).

    Each step draws ``batch_size`` labelled and ``unlabeled_batch_size`` unlabelled samples
    (without replacement within a step) from a generator seeded with ``seed``; the augmentations
    draw from the same generator, so the same seed gives the same run.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        weak_aug: Augment,
        strong_aug: Augment,
        loss: RankMatchLoss | None = None,
        seed: int = 0,
        batch_size: int = 64,
        unlabeled_batch_size: int = 256,
    ) -> None:
        check_type("model", model, nn.Module)
        check_type("optimizer", optimizer, torch.optim.Optimizer)
        if not (callable(weak_aug) and callable(strong_aug)):
            raise TypeError("weak_aug and strong_aug must be callables aug(x, generator) -> x")
        check_positive("batch_size", batch_size, integer=True)
        check_positive("unlabeled_batch_size", unlabeled_batch_size, integer=True)
        check_positive("seed", seed, strict=False, integer=True)
        self.model, self.optimizer = model, optimizer
        self.weak_aug, self.strong_aug = weak_aug, strong_aug
        self.loss = loss if loss is not None else RankMatchLoss()
        self.seed, self.batch_size, self.unlabeled_batch_size = (
            seed,
            batch_size,
            unlabeled_batch_size,
        )

    def fit(self, labeled: Any, unlabeled: Any, steps: int) -> dict[str, list[float]]:
        """Train for ``steps`` optimiser steps; returns the per-step logs (loss, λ_u, terms)."""
        check_positive("steps", steps, integer=True)
        x_l, d_l = split_xd(labeled, "labeled", need_d=True)
        x_u, _ = split_xd(unlabeled, "unlabeled", need_d=False)
        gen = torch.Generator().manual_seed(self.seed)
        history: dict[str, list[float]] = {}
        self.model.train()
        b_l, b_u = min(self.batch_size, len(x_l)), min(self.unlabeled_batch_size, len(x_u))
        for step in track(range(steps), "RankMatch training (steps)"):
            il = torch.randperm(len(x_l), generator=gen)[:b_l]
            iu = torch.randperm(len(x_u), generator=gen)[:b_u]
            self.optimizer.zero_grad(set_to_none=True)
            loss, logs = self.loss(
                self.model, x_l[il], d_l[il], x_u[iu], self.weak_aug, self.strong_aug, step, gen
            )
            loss.backward()
            self.optimizer.step()
            for k, v in logs.items():
                history.setdefault(k, []).append(v)
        self.model.eval()
        return history
