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

**Identity at init, to float32 rounding** (:func:`identity_rounding_bound`). peft's forward
computes y = y₀ − ((y₀ − b) right) Q_Pᵀ + (x (γR)ᵀ) Q_Pᵀ in float32, with y₀ the base layer's
output and, at init, R = rightᵀ W / γ. The removal and the injection are equal in exact arithmetic
but are formed along different paths ((x Wᵀ) right vs x (rightᵀ W)ᵀ), so they cancel only to float32
rounding: each DEFT layer's output differs from its base layer's by a few units in the last place.
For ``qr`` both terms have the size of W x (Q_P is orthonormal), for ``relu`` only ~|P|² ≈ 4e-4 of
it (P ~ N(0, 0.02²)), so qr's per-layer gap is larger (measured ≤ 1.4e-6 per layer on the
reproduction's tiny Llama, vs relu's ≤ 4.8e-7 — both about one ulp of the output) and, amplified
through the network, reaches ~1.6e-5–2.2e-5 on its logits (relu ~5e-6). That is rounding, not an
error of the method: :func:`identity_rounding_bound` bounds it elementwise and
:func:`init_identity_ratio` checks every layer against that bound.
"""

from __future__ import annotations

import warnings
from typing import Literal

import torch
from peft import DeftConfig, PeftModel, get_peft_model
from peft.tuners.deft import DeftLayer
from torch import nn

from eff_llm._adapters import peft_deprecations_silenced
from eff_shared.errors import check_choice, check_int, check_positive

__all__ = [
    "DeftConfig",
    "deft_delta",
    "deft_projector",
    "get_deft_model",
    "identity_rounding_bound",
    "init_identity_ratio",
]

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
    check_int("r", r)
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


def _gamma(k: int, u: float) -> float:
    """γ_k = k u / (1 − k u): the relative bound of a k-term float sum (Higham, Thm 3.1)."""
    return k * u / (1 - k * u)


@torch.no_grad()
def identity_rounding_bound(
    layer: nn.Module, x: torch.Tensor, adapter_name: str = "default"
) -> torch.Tensor:
    """Elementwise bound on |layer(x) − base_layer(x)| for a peft DEFT layer at identity init.

    At init (peft's ``init_weights=True``: R = rightᵀ W / γ, γ = alpha/r or 1) the DEFT output equals
    the base output in exact arithmetic; peft computes its update in float32 (unit roundoff
    u = 2⁻²⁴), so the two differ by rounding only. With m = out_features, n = in_features, r the
    rank, y₀ = base_layer(x), b the bias, Q = Q_P and right from peft's ``_project``, u_o = the
    output dtype's unit roundoff (at least u) and γ_k = k u / (1 − k u), to first order in u:

        |y − y₀| ≤ (u_o + 2u)|y₀| + (γ_m + γ_r + 3u + u_o)·T₁ + (γ_n + γ_r + 2u)·T₂
                   + (γ_m + γ_{n+1} + 2u)·T₀ + γ_{n+1}·T_b,

    T₁ = |y₀ − b| |right| |Q|ᵀ (the removal), T₂ = |x| |γR|ᵀ |Q|ᵀ (the injection),
    T₀ = |x| |W|ᵀ |right| |Q|ᵀ (the rounding of y₀ and of R = rightᵀ W), T_b = |b| |right| |Q|ᵀ.
    The first term is the rounding of the two float32 updates of y₀; the others bound the float
    matmuls (each |fl(AB) − AB| ≤ γ_k |A||B|). Valid for any BLAS summation order; the bound is
    worst-case, so measured gaps sit well inside it. Only for an adapter still at its init values,
    in eval mode (no dropout), and not for PaRa (``para=True`` removes a subspace at init).
    Returned in float64, shaped like the layer's output.
    """
    if not isinstance(layer, DeftLayer):
        raise TypeError(f"layer must be a peft DEFT layer (DeftLayer), got {type(layer).__name__}")
    if adapter_name not in layer.deft_P:
        raise ValueError(
            f"adapter_name {adapter_name!r} is not on this layer; it has {list(layer.deft_P)}"
        )
    if layer.deft_para[adapter_name]:
        raise ValueError("para=True (PaRa) removes a subspace at init: it is not an identity")
    from peft.utils.other import transpose

    u = 2.0**-24
    base = layer.get_base_layer()
    out = base(x)
    u_out = max(u, torch.finfo(out.dtype).eps / 2)
    y0 = out.double()
    w = transpose(base.weight, layer.fan_in_fan_out).double().abs()
    m, n = w.shape
    q, right = layer._project(layer.deft_P[adapter_name], adapter_name)
    q, right = q.double().abs(), right.double().abs()
    r = q.shape[1]
    bias = base.bias
    b = torch.zeros(m, dtype=torch.float64, device=y0.device) if bias is None else bias.double()
    ax = x.double().abs()
    t1 = (y0 - b).abs() @ right @ q.t()
    t0 = ax @ w.t() @ right @ q.t()
    tb = b.abs() @ right @ q.t()
    gam_r = layer.deft_R[adapter_name].double().abs() * abs(layer.deft_scaling[adapter_name])
    t2 = ax @ gam_r.t() @ q.t()
    return (
        (u_out + 2 * u) * y0.abs()
        + (_gamma(m, u) + _gamma(r, u) + 3 * u + u_out) * t1
        + (_gamma(n, u) + _gamma(r, u) + 2 * u) * t2
        + (_gamma(m, u) + _gamma(n + 1, u) + 2 * u) * t0
        + _gamma(n + 1, u) * tb
    )


@torch.no_grad()
def init_identity_ratio(model: nn.Module, *args, **kwargs) -> float:
    """Max over every DEFT layer and output element of |y − y_base| / :func:`identity_rounding_bound`
    during one forward ``model(*args, **kwargs)`` (≤ 1: every layer is the identity to float32
    rounding). For a model whose DEFT adapters are at their identity init, in eval mode."""
    layers = [m for m in model.modules() if isinstance(m, DeftLayer)]
    if not layers:
        raise ValueError("the model has no DEFT layer")
    worst = [0.0]

    def hook(module, inputs, output):
        x = inputs[0]
        active = [a for a in module.active_adapters if a in module.deft_P]
        if not active or module.merged or module.disable_adapters:
            return
        gap = (output.double() - module.get_base_layer()(x).double()).abs()
        # several active adapters: their updates (and roundings) add up
        bound = sum(identity_rounding_bound(module, x, a) for a in active)
        ratio = torch.where(gap == 0, torch.zeros_like(gap), gap / bound)
        worst[0] = max(worst[0], float(ratio.max()))

    handles = [m.register_forward_hook(hook) for m in layers]
    try:
        model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return worst[0]
