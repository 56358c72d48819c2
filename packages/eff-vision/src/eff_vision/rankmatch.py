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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_positive, check_type
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
]

_REDUCTIONS = ("mean", "sum", "none")
Augment = Callable[[Tensor, torch.Generator], Tensor]


def _check_rows(name: str, t: Tensor, tol: float, hint: str) -> None:
    sums = t.detach().sum(-1)
    if bool((t.detach() < 0).any()) or float((sums - 1).abs().max()) > tol:
        raise ValueError(
            f"every {name} row must be a probability distribution (entries >= 0, sum 1 ± {tol:g}); "
            f"got row sums in [{float(sums.min()):.6g}, {float(sums.max()):.6g}]{hint}"
        )


def prr_loss(pred: Tensor, target: Tensor, margin: bool = True, reduction: str = "mean") -> Tensor:
    """Pairwise relevance ranking loss over the label pairs ordered by ``target``.

    ``margin=True``: ``(1/C) Σ_{d_j > d_k} max(0, (d_j − d_k) − (p_j − p_k))``, zero iff every
    predicted gap is at least the target's (in particular when ``pred == target``).
    ``margin=False``: ``(1/C) Σ_{d_j > d_k} max(0, p_k − p_j)``, zero iff the prediction orders every
    such pair like the target (ties in the target impose nothing). ``O(B·C²)``, vectorised.

    ``pred`` and ``target`` are ``(B, C)`` probability rows (``pred`` from a softmax). ``ValueError``
    for different shapes, C < 2, a target that is not a distribution, or logits as ``pred``.
    """
    check_type("pred", pred, Tensor)
    check_type("target", target, Tensor)
    check_choice("reduction", reduction, _REDUCTIONS)
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
    dt = target[:, :, None] - target[:, None, :]  # d_j − d_k
    dp = pred[:, :, None] - pred[:, None, :]  # p_j − p_k
    hinge = F.relu(dt - dp) if margin else F.relu(-dp)
    per_sample = torch.where(dt > 0, hinge, torch.zeros_like(hinge)).sum((1, 2)) / c
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
        check_type("num_weak", num_weak, int)
        if num_weak < 1:
            raise ValueError(f"num_weak must be >= 1, got {num_weak}")
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


def _split_xd(data: Any, name: str, need_d: bool) -> tuple[Tensor, Tensor | None]:
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
        x_l, d_l = _split_xd(labeled, "labeled", need_d=True)
        x_u, _ = _split_xd(unlabeled, "unlabeled", need_d=False)
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
