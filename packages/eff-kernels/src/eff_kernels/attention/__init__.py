"""SageAttention2 (INT8 Q·Kᵀ, FP16/FP8 P·V), SageAttention3 (NVFP4) and SageBwd (INT8 training).

Papers: SageAttention3 (arXiv 2505.11594, NeurIPS 2025) and SageBwd (arXiv 2603.02170); code
``thu-ml/SageAttention`` @ d1a57a5. Every scheme exists three ways:

1. a pure-PyTorch **reference** (:func:`sage_reference`) that emulates every low-precision format in
   float32 tile by tile, exactly as the kernel computes it (same tiles, same online softmax, same
   quantization of P) — it defines the numerics;
2. a **Triton kernel** (``eff_kernels/_triton/k_attention.py``), interpreted on CPU;
3. the **GPU path**: the same Triton kernels compiled for CUDA (``backend="auto"`` on CUDA tensors).

The algorithm, with s = D^-1/2 and base-2 softmax (log2 e folded into the Q scale):

- **K smoothing** K ← K − mean_tokens(K): each score row shifts by a constant, softmax is unchanged
  (SageAttention eq. for ``smooth_k``); ``return_lse`` adds s·q·mean(K) back.
- **SageAttention2 INT8 Q·Kᵀ**: Q·s·log2e and K INT8 per thread (the default, SageAttention2's
  CUDA granularity: inside a 128-row Q block the rows i ≡ t (mod 8) share a scale, inside a 64-row
  K block the rows 2t, 2t+1 (mod 8)), or per block (Q 128 tokens, K 64 tokens, the Triton path's
  granularity) or per warp; scale max|x|/127, round half away from zero;
  S = (Q_i8 K_i8ᵀ)_int32 · δ_Q · δ_K.
- **P·V**: FP16 P̃ and V; or FP8 E4M3 with the static scale P̃·448 and V per channel
  (max|V|/448); or INT8 (SageBwd: P̃ per token, V per 64-token block).
- **SageAttention3 (NVFP4)**: K smoothing, per-128-block Q smoothing with the fp32 correction
  ΔS = mean(Q_blk)·Kᵀ that initialises the accumulator (S = ΔS + FP4MM(Q̂, K̂)), NVFP4 (1×16,
  E4M3 scale max|x|/6, E2M1 elements) for Q and K along the head dim and for V along tokens, and
  the **two-level P scaling** P̃ = 2688·exp(S − m) ∈ [0, 2688] with per-16 E4M3 scales (so the
  scale uses the full E4M3 range); the row sum l accumulates the unquantized P̃, so 2688 cancels.
- **SageBwd** (a *reconstruction*: the code is unreleased): FlashAttention-2 forward and backward;
  six of the seven matmuls are INT8 (S, O = P̃V, recomputed S, dV = PᵀdO, dQ = dS·K, dK = dSᵀQ) and
  dP = dO·Vᵀ stays FP16. Granularities chosen here (the paper's are not public): Q, K, V, dO per
  block of 64 tokens, P̃ per query token in the forward; in the
  backward: INT8 scales that factor out of each matmul's contraction — P for dV = PᵀdO one scale
  per key (column) of each 64×64 tile, dS one scale per query row for dQ = dS·K and one per key
  column for dK = dSᵀQ (the dS tile is quantized twice). A single scale per tile was measured to
  cost ~10× more gradient error (gauss dQ cos 0.9989 vs 0.9998). dK is projected onto
  Σ_j dK_j = 0, the exact chain rule of K smoothing.

API: :func:`sage_attention` (drop-in for ``F.scaled_dot_product_attention``), :func:`sage_attention3`,
:func:`patch_sdpa`, :func:`register_transformers`. Modules: :mod:`~eff_kernels.attention.common`
(formats, the float64 reference and metrics, input checks, the quantization pre-pass),
:mod:`~eff_kernels.attention.forward` (reference and Triton forward),
:mod:`~eff_kernels.attention.backward` (SageBwd) and :mod:`~eff_kernels.attention.api` (the functions
above).
"""

from __future__ import annotations

from eff_kernels.attention.api import (
    kv_bytes_per_token,
    p_quant_attention,
    patch_sdpa,
    register_transformers,
    sage_attention,
    sage_attention3,
    sage_reference,
)
from eff_kernels.attention.common import (
    BACKENDS,
    BACKWARDS,
    FP4_FORMATS,
    LAYOUTS,
    LN2,
    LOG2E,
    P_SCALE,
    PV_DTYPES,
    QK_DTYPES,
    SAGEBWD_BLOCK,
    FP4EmulationWarning,
    attention_error,
    attention_fp64,
)
from eff_kernels.attention.forward import triton_cdiv

__all__ = [
    "BACKENDS",
    "BACKWARDS",
    "FP4_FORMATS",
    "LAYOUTS",
    "LN2",
    "LOG2E",
    "PV_DTYPES",
    "P_SCALE",
    "QK_DTYPES",
    "SAGEBWD_BLOCK",
    "FP4EmulationWarning",
    "attention_error",
    "attention_fp64",
    "kv_bytes_per_token",
    "p_quant_attention",
    "patch_sdpa",
    "register_transformers",
    "sage_attention",
    "sage_attention3",
    "sage_reference",
    "triton_cdiv",
]
