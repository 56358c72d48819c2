"""DEFT — Decompositional Efficient Fine-Tuning (NeurIPS 2025; code ``MAXNORM8650/DEFT``).

For a frozen W ∈ R^{m×n}, learn P ∈ R^{m×r} and R ∈ R^{r×n} (LoRA's r(m+n) parameters) and use

    W' = (I − P_proj) W + Q_P R,                                   (DEFT, residual projection)

i.e. remove W's component in a learned r-dimensional output subspace and inject new content there.
Two decompositions (both upstream in **peft ≥ 0.20**, ``peft.tuners.deft``, which we use and re-export):

- ``"relu"`` (peft's default, the official diffusers variant with ``decomposition_method=None``):
  Q_P = P and P_proj = P·relu(P)ᵀ — **not** an orthogonal projector (not idempotent, not symmetric);
- ``"qr"``: Q_P = qr(P).Q and P_proj = Q_P Q_Pᵀ — an orthogonal projector; then Q_Pᵀ W' = R exactly
  (the injected rows replace W's content in span(Q_P)).

Differences between peft and the paper / official code, checked here (``deft_delta`` is our pure
transcription of the formula, compared with peft's layer in the tests and the reproduction):

- **Initialisation.** peft's default ``init_weights=True`` sets R = rightᵀ W / scaling (right =
  relu(P) or Q_P), so W' = W at init (identity); the official T2I code draws R ~ N(0, (0.02·init_scale)²)
  (for ``qr`` this removes a random slice of W at step 0). peft's ``init_weights=False`` is the
  official behaviour. We keep peft's identity init (adapters must not change the model at init).
- **Gradient of P.** The official layer with ``compute_svd_each_forward=False`` caches Q_P under
  ``no_grad`` so P never learns; peft recomputes Q_P every forward (P is trained) — the paper's intent.
- **Scaling.** The official residual projection ignores ``lora_alpha``; peft scales only the
  injection by alpha/r when ``alpha`` is set (default: no scaling, as the official code).
- **Merge.** Δ = Q_P (γR − rightᵀ W) is exact; peft caches rightᵀ W for an exact unmerge.

We write no DEFT layer of our own: peft's algebra equals the paper's (see ``deft_delta`` tests).
"""

from __future__ import annotations

import warnings
from typing import Literal

import torch
from peft import DeftConfig, PeftModel, get_peft_model
from peft.tuners.deft import DeftLayer
from torch import nn

from eff_llm._adapters import peft_deprecations_silenced
from eff_shared.errors import check_choice, check_positive

__all__ = ["DeftConfig", "deft_delta", "deft_projector", "get_deft_model"]

DECOMPOSITIONS = ("relu", "qr")


def deft_projector(
    P: torch.Tensor, decomposition: Literal["relu", "qr"] = "relu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Q_P, P_proj)`` of the paper: relu → (P, P relu(P)ᵀ); qr → (Q, Q Qᵀ) with Q = qr(P).Q."""
    check_choice("decomposition", decomposition, DECOMPOSITIONS)
    if P.ndim != 2:
        raise ValueError(f"P must be a matrix (out_features, r), got shape {tuple(P.shape)}")
    if decomposition == "relu":
        return P, P @ torch.relu(P).t()
    q = torch.linalg.qr(P).Q
    return q, q @ q.t()


def deft_delta(
    W: torch.Tensor,
    P: torch.Tensor,
    R: torch.Tensor | None,
    decomposition: Literal["relu", "qr"] = "relu",
    scaling: float = 1.0,
) -> torch.Tensor:
    """W' − W = −P_proj W + Q_P (scaling·R), straight from the paper's formula (materialises the
    m×m projector; for checking, not for speed). ``R=None`` is PaRa: −P_proj W."""
    if W.ndim != 2 or P.shape[0] != W.shape[0]:
        raise ValueError(
            f"W must be (m, n) and P (m, r), got {tuple(W.shape)} and {tuple(P.shape)}"
        )
    q, proj = deft_projector(P, decomposition)
    delta = -proj @ W
    if R is not None:
        if R.shape != (P.shape[1], W.shape[1]):
            raise ValueError(f"R must be (r, n) = {(P.shape[1], W.shape[1])}, got {tuple(R.shape)}")
        delta = delta + q @ (scaling * R)
    return delta


def get_deft_model(
    model: nn.Module,
    r: int = 8,
    target_modules: list[str] | str | None = None,
    decomposition: Literal["relu", "qr"] = "relu",
    alpha: int | None = None,
    para: bool = False,
    **config_kwargs,
) -> PeftModel:
    """``peft.get_peft_model(model, DeftConfig(...))`` with our checks.

    ``target_modules=None`` uses peft's per-architecture default (``q_proj, v_proj`` for Llama/Qwen2);
    ``"all-linear"`` adapts every linear layer but the output head. Raises ``ValueError`` for
    ``para=True`` with ``alpha`` (PaRa has no injection to scale) and for an unknown
    ``decomposition``; peft raises ``ValueError`` for r ≤ 0 and ``TypeError`` for a target that is
    neither ``nn.Linear`` nor ``Conv1D``. Warns when ``r`` exceeds a target's ``out_features``
    (peft silently clips the rank there).
    """
    check_choice("decomposition", decomposition, DECOMPOSITIONS)
    if isinstance(r, bool) or not isinstance(r, int):
        raise TypeError(f"r must be an int, got {r!r}")
    if para and alpha is not None:
        raise ValueError(
            f"para=True (PaRa: pure subspace removal) takes no alpha; got alpha={alpha!r}"
        )
    if alpha is not None:
        check_positive("alpha", alpha)
    config = DeftConfig(
        r=r,
        target_modules=target_modules,
        decomposition_method=decomposition,
        alpha=alpha,
        para=para,
        **config_kwargs,
    )
    with peft_deprecations_silenced():
        peft_model = get_peft_model(model, config)
    clipped = [
        name
        for name, module in peft_model.named_modules()
        if isinstance(module, DeftLayer) and r > module.out_features
    ]
    if clipped:
        warnings.warn(
            f"r={r} exceeds out_features of {clipped}; peft clips the rank to out_features there",
            UserWarning,
            stacklevel=2,
        )
    return peft_model
