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
:func:`patch_sdpa`, :func:`register_transformers`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from eff_kernels.quant import (
    e2m1_round,
    e4m3_round,
    fake_fp4,
    floor_log2,
    fp8_e4m3_per_channel,
    int8_per_block,
    int8_quantize_rows,
    round_half_away,
    row_groups,
)
from eff_shared.errors import check_choice

__all__ = [
    "BACKENDS",
    "PV_DTYPES",
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
]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
PV_DTYPES = ("fp16", "fp8", "int8", "fp4")
QK_DTYPES = ("int8", "fp4")
BACKENDS = ("auto", "reference", "triton", "cuda")
BACKWARDS = (None, "sagebwd", "exact")
LAYOUTS = ("HND", "NHD")
FP4_FORMATS = ("nvfp4", "mxfp4")
P_SCALE = {"fp16": 1.0, "fp8": 448.0, "int8": 1.0, "fp4": 448.0 * 6.0}  # P̃ ranges [0, P_SCALE]
SAGEBWD_BLOCK = 64


class FP4EmulationWarning(UserWarning):
    """NVFP4 attention is emulated (no FP4 tensor cores here): correct numerics, no speedup."""


_WARNED_FP4 = False


def _warn_fp4_emulation(device: torch.device) -> None:
    global _WARNED_FP4
    if not _WARNED_FP4:
        _WARNED_FP4 = True
        where = "this CPU" if device.type == "cpu" else f"{torch.cuda.get_device_name(device)}"
        warnings.warn(
            f"NVFP4 attention is emulated on {where} (FP4 tensor cores exist only on sm100/sm120): "
            "the numerics are SageAttention3's, but there is no speedup (it is slower than bf16).",
            FP4EmulationWarning,
            stacklevel=3,
        )


# ---------------------------------------------------------------------------------------------
# metrics and the float64 reference


def attention_fp64(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Exact softmax attention in float64 (HND layout); the yardstick of every accuracy claim."""
    mask = (
        attn_mask.double() if attn_mask is not None and attn_mask.is_floating_point() else attn_mask
    )
    return F.scaled_dot_product_attention(
        query.double(),
        key.double(),
        value.double(),
        attn_mask=mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


def attention_error(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """Cosine similarity, relative L1 (Σ|O−O_ref|/Σ|O_ref|) and RMSE over the flattened outputs."""
    o = out.detach().double().flatten()
    r = ref.detach().double().flatten()
    cos = float(torch.dot(o, r) / (o.norm() * r.norm()).clamp_min(1e-300))
    rel_l1 = float((o - r).abs().sum() / r.abs().sum().clamp_min(1e-300))
    rmse = float(((o - r) ** 2).mean().sqrt())
    return {"cos": cos, "rel_l1": rel_l1, "rmse": rmse}


# ---------------------------------------------------------------------------------------------
# input checks


def _check_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    enable_gqa: bool,
    layout: str,
) -> None:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have rank 4 ({layout}: "
                f"{'(B, H, N, D)' if layout == 'HND' else '(B, N, H, D)'}), got shape {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"query, key and value must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"query, key and value must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    hd = 1 if layout == "HND" else 2
    sd = 2 if layout == "HND" else 1
    if q.shape[-1] != k.shape[-1] or k.shape[-1] != v.shape[-1]:
        raise ValueError(
            f"query, key and value must have the same head dim, got {q.shape[-1]}, {k.shape[-1]}, {v.shape[-1]}"
        )
    if q.shape[-1] > 256:
        raise ValueError(f"head dim must be <= 256, got {q.shape[-1]}")
    if q.shape[0] != k.shape[0] or k.shape[0] != v.shape[0]:
        raise ValueError(
            f"query, key and value must have the same batch size, got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}"
        )
    if k.shape[hd] != v.shape[hd] or k.shape[sd] != v.shape[sd]:
        raise ValueError(
            f"key and value must have the same heads and length, got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    hq, hkv = q.shape[hd], k.shape[hd]
    if hq % hkv != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hkv})")
    if hq != hkv and not enable_gqa:
        raise ValueError(
            f"query has {hq} heads and key/value {hkv}: pass enable_gqa=True for grouped-query attention"
        )
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask and is_causal=True cannot be used together (as in SDPA)")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(
                f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}"
            )
        if attn_mask.device != q.device:
            raise ValueError(f"attn_mask must be on {q.device}, got {attn_mask.device}")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise TypeError(f"attn_mask must be bool or floating point, got {attn_mask.dtype}")


def _padded_dim(d: int) -> int:
    for p in (64, 128, 256):
        if d <= p:
            return p
    raise ValueError(f"head dim must be <= 256, got {d}")


def _mask_4d(
    mask: torch.Tensor | None, b: int, h: int, n: int, m: int
) -> tuple[torch.Tensor | None, int]:
    """The mask broadcast to (B, H, N, M) as a strided view, and its mode (0 none, 1 bool, 2 additive)."""
    if mask is None:
        return None, 0
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    try:
        mask = mask.expand(b, h, n, m)
    except RuntimeError as exc:
        raise ValueError(
            f"attn_mask of shape {tuple(mask.shape)} does not broadcast to {(b, h, n, m)}"
        ) from exc
    if mask.dtype == torch.bool:
        return mask, 1
    return mask, 2


# ---------------------------------------------------------------------------------------------
# quantization pre-pass shared by the reference and the kernels


@dataclass
class _Prepared:
    q: torch.Tensor  # int8 (Q·s·log2e) | fp16 FP4 values | fp32 exact
    k: torch.Tensor
    v: torch.Tensor  # fp16/bf16 | fp16 holding FP8 values | int8 | fp16 FP4 values | fp32 exact
    q_scale: torch.Tensor | None  # per row (B, Hq, N)
    k_scale: torch.Tensor | None  # per row (B, Hkv, M)
    v_scale: torch.Tensor | None  # fp8: (B, Hkv, 1, D); int8: (B, Hkv, ⌈M/64⌉)
    delta_s: torch.Tensor | None  # fp4 Q smoothing: (B, Hq, ⌈N/128⌉, M), unscaled
    k_mean: torch.Tensor | None  # (B, Hkv, 1, D) subtracted from K
    qk: str  # "int8" | "fp4" | "none"
    pv: str  # "fp16" | "fp8" | "int8" | "fp4" | "none"
    fmt: str  # FP4 format of Q, K, P, V: "nvfp4" | "mxfp4"
    two_level: bool
    block_n: int
    sm_scale: float

    @property
    def log2_pscale(self) -> float:
        if self.pv == "fp4":
            return math.log2(P_SCALE["fp4"]) if self.two_level else 0.0
        return math.log2(P_SCALE.get(self.pv, 1.0))


def _sixteen_bit(dtype: torch.dtype) -> torch.dtype:
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float16


def _prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    sm_scale: float,
    qk: str,
    pv: str,
    granularity: str = "per_block",
    smooth_k: bool = True,
    smooth_q: bool = False,
    q_smooth_block: int | None = 128,
    q_block: int | None = None,
    fmt: str = "nvfp4",
    two_level: bool = True,
    block_n: int | None = None,
    v_exact: bool = False,
) -> _Prepared:
    """Quantize Q, K, V for one scheme (HND, head dim already padded); ``v_exact`` keeps V in fp32."""
    b, hq, n, d = q.shape
    hkv, m = k.shape[1], k.shape[2]
    kf = k.float()
    k_mean = None
    if smooth_k and m > 0:
        k_mean = kf.mean(dim=-2, keepdim=True)
        kf = kf - k_mean
    q_scale = k_scale = v_scale = delta_s = None
    if qk == "int8":
        if q_block is not None:
            qg, nq = torch.arange(n, device=q.device) // q_block, max(1, math.ceil(n / q_block))
        else:
            qg, nq = row_groups(n, "q", granularity, q.device)
        kg, nk = row_groups(m, "k", granularity, q.device)
        qo, q_scale = int8_quantize_rows(q, qg, nq, sm_scale * LOG2E)
        ko, k_scale = int8_quantize_rows(kf, kg, nk)
    elif qk == "fp4":
        qf = q.float()
        if smooth_q and n > 0:
            blk = q_smooth_block or n
            nb = math.ceil(n / blk)
            pad = nb * blk - n
            qp = F.pad(qf, (0, 0, 0, pad)).reshape(b, hq, nb, blk, d)
            counts = torch.full((nb,), float(blk), device=q.device)
            counts[-1] = blk - pad
            qm = qp.sum(dim=3) / counts[:, None]  # (B, Hq, nb, D), mean of the valid rows
            rows = torch.arange(n, device=q.device) // blk
            qf = qf - qm[:, :, rows]
            kr = kf.repeat_interleave(hq // hkv, dim=1)
            delta_s = qm @ kr.transpose(-1, -2)  # (B, Hq, nb, M)
            if blk != 128:  # one mean for all rows: repeat it per 128-row block for the kernel
                delta_s = delta_s.expand(b, hq, math.ceil(n / 128), m)
        qo = fake_fp4(qf, fmt, dim=-1).half()
        ko = fake_fp4(kf, fmt, dim=-1).half()
    else:
        qo, ko = q.float(), kf
    if v_exact or pv == "none":
        vo = v.float()
    elif pv == "fp16":
        vo = v.to(_sixteen_bit(v.dtype))
    elif pv == "fp8":
        v8, v_scale = fp8_e4m3_per_channel(v)
        vo = v8.to(torch.float16)
    elif pv == "int8":
        vo, v_scale = int8_per_block(v, SAGEBWD_BLOCK)
    elif pv == "fp4":
        group = 16 if fmt == "nvfp4" else 32
        pad = (-m) % group
        vo = fake_fp4(F.pad(v.float(), (0, 0, 0, pad)), fmt, dim=-2)[:, :, :m].half()
    if block_n is None:
        block_n = 128 if pv == "fp4" else 64
    return _Prepared(
        qo,
        ko,
        vo,
        q_scale,
        k_scale,
        v_scale,
        delta_s,
        k_mean,
        qk,
        pv,
        fmt,
        two_level,
        block_n,
        sm_scale,
    )


# ---------------------------------------------------------------------------------------------
# the PyTorch reference (tile-by-tile emulation of the kernel)


def _quantize_p(p: torch.Tensor, prep: _Prepared) -> tuple[torch.Tensor, torch.Tensor | None]:
    """P̃ of one key tile as the kernel feeds it to the P·V matmul: (values, per-row scale or None)."""
    if prep.pv == "fp16":
        return p.to(prep.v.dtype).float(), None
    if prep.pv == "fp8":
        return e4m3_round(p), None
    if prep.pv == "int8":
        ps = p.amax(dim=-1) / 127.0
        safe = torch.where(ps > 0, ps, torch.ones_like(ps))
        return round_half_away(p / safe.unsqueeze(-1)), ps
    if prep.pv == "none":
        return p, None
    group = 16 if prep.fmt == "nvfp4" else 32
    width = p.shape[-1]
    pp = F.pad(p, (0, (-width) % group)).reshape(*p.shape[:-1], -1, group)
    bmax = pp.amax(dim=-1, keepdim=True)
    if prep.fmt == "nvfp4":
        sf = e4m3_round(bmax / 6.0)
        inv = torch.where(sf > 0, 1.0 / sf, torch.zeros_like(sf))
    else:
        e = (floor_log2(bmax) - 2).clamp(-126, 126)
        sf, inv = torch.exp2(e), torch.exp2(-e)
    out = e2m1_round(pp * inv) * sf
    return out.flatten(-2)[..., :width], None


def _scores(prep: _Prepared, group: int) -> torch.Tensor:
    """Base-2 scores S·s·log2e of the scheme, (B, Hq, N, M) in float32."""
    k = prep.k.repeat_interleave(group, dim=1).float()
    if prep.qk == "int8":
        s = prep.q.float() @ k.transpose(-1, -2)
        ks = prep.k_scale.repeat_interleave(group, dim=1)
        return s * prep.q_scale.unsqueeze(-1) * ks.unsqueeze(-2)
    s = prep.q.float() @ k.transpose(-1, -2)
    if prep.delta_s is not None:
        rows = torch.arange(s.shape[-2], device=s.device) // 128
        s = s + prep.delta_s[:, :, rows]
    return s * (prep.sm_scale * LOG2E)


def _apply_masks(
    s: torch.Tensor, mask: torch.Tensor | None, mode: int, is_causal: bool
) -> torch.Tensor:
    n, m = s.shape[-2:]
    if mode == 2:
        s = s + mask.float() * LOG2E
    valid = torch.ones(n, m, dtype=torch.bool, device=s.device)
    if is_causal:
        valid = torch.ones(n, m, dtype=torch.bool, device=s.device).tril()
    if mode == 1:
        valid = valid & mask
    return s.masked_fill(~valid, float("-inf"))


def _reference_forward(
    prep: _Prepared, mask: torch.Tensor | None, mode: int, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantized FlashAttention-2 forward, tile by tile; returns (O fp32, m, l) with base-2 m."""
    b, hq, n, d = prep.q.shape
    group = hq // prep.k.shape[1]
    s_all = _apply_masks(_scores(prep, group), mask, mode, is_causal)
    v = prep.v.repeat_interleave(group, dim=1).float()
    m_i = torch.full((b, hq, n), float("-inf"), device=s_all.device)
    l_i = torch.zeros(b, hq, n, device=s_all.device)
    acc = torch.zeros(b, hq, n, d, device=s_all.device)
    mm = s_all.shape[-1]
    bn = prep.block_n
    for j0 in range(0, mm, bn):
        s = s_all[..., j0 : j0 + bn]
        m_new = torch.maximum(m_i, s.amax(dim=-1))
        m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp2(m_i - m_safe)
        p = torch.exp2(s - m_safe.unsqueeze(-1) + prep.log2_pscale)
        l_i = l_i * alpha + p.sum(dim=-1)
        pq, ps = _quantize_p(p, prep)
        contrib = pq @ v[:, :, j0 : j0 + bn]
        if prep.pv == "int8":
            vs = prep.v_scale[:, :, j0 // bn].repeat_interleave(group, dim=1)
            contrib = contrib * ps.unsqueeze(-1) * vs[..., None, None]
        acc = acc * alpha.unsqueeze(-1) + contrib
        m_i = m_new
    out = acc / torch.where(l_i > 0, l_i, torch.ones_like(l_i)).unsqueeze(-1)
    if prep.pv == "fp8":
        out = out * prep.v_scale.repeat_interleave(group, dim=1)
    return out, m_i, l_i


# ---------------------------------------------------------------------------------------------
# the Triton path


def _dummy(device: torch.device) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.float32, device=device)


def _triton_forward(
    prep: _Prepared,
    mask: torch.Tensor | None,
    mode: int,
    is_causal: bool,
    out_dtype: torch.dtype,
    store_ml: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    from eff_kernels._triton import interpret_for, kernels, launch_env

    q, k, v = prep.q.contiguous(), prep.k.contiguous(), prep.v.contiguous()
    b, hq, n, d = q.shape
    hkv, m = k.shape[1], k.shape[2]
    dev = q.device
    interpret = interpret_for(dev)
    mod = kernels("attention", dev)
    o = torch.empty(b, hq, n, d, dtype=out_dtype, device=dev)
    m_out = torch.empty(b, hq, n, dtype=torch.float32, device=dev) if store_ml else _dummy(dev)
    l_out = torch.empty(b, hq, n, dtype=torch.float32, device=dev) if store_ml else _dummy(dev)
    dummy = _dummy(dev)
    qs = prep.q_scale.contiguous() if prep.q_scale is not None else dummy
    ks = prep.k_scale.contiguous() if prep.k_scale is not None else dummy
    vs = prep.v_scale.contiguous() if prep.v_scale is not None else dummy
    if prep.qk == "fp4":
        ds = prep.delta_s
        if ds is None:
            ds = torch.zeros(b, hq, max(1, math.ceil(n / 128)), m, device=dev)
        ds = ds.contiguous()
    else:
        ds = dummy
    if mode == 1:
        mk = mask.view(torch.uint8) if mask.is_contiguous() else mask.to(torch.uint8)
    elif mode == 2:
        mk = mask.float()
    else:
        mk = dummy
    mstr = mk.stride() if mode else (0, 0, 0, 0)
    block_m = 64 if interpret or d > 128 else 128
    fp8_dot = prep.pv == "fp8" and not interpret and torch.cuda.get_device_capability(dev) >= (8, 9)
    grid = (triton_cdiv(n, block_m), b * hq)
    with launch_env(interpret):
        mod.sage_fwd_kernel[grid](
            q, k, v, qs, ks, vs, ds, mk, o, m_out, l_out,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            o.stride(0), o.stride(1), o.stride(2),
            mstr[0], mstr[1], mstr[2], mstr[3],
            ds.stride(0) if prep.qk == "fp4" else 0,
            ds.stride(1) if prep.qk == "fp4" else 0,
            ds.stride(2) if prep.qk == "fp4" else 0,
            qs.stride(0) if qs.dim() == 3 else 0, qs.stride(1) if qs.dim() == 3 else 0,
            ks.stride(0) if ks.dim() == 3 else 0, ks.stride(1) if ks.dim() == 3 else 0,
            vs.stride(0) if vs.dim() >= 3 else 0, vs.stride(1) if vs.dim() >= 3 else 0,
            n, m, hq, hq // hkv, prep.sm_scale * LOG2E,
            HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=prep.block_n,
            QK_MODE=0 if prep.qk == "int8" else 1,
            PV_MODE={"fp16": 0, "fp8": 1, "int8": 2, "fp4": 3}[prep.pv],
            MX=prep.fmt == "mxfp4", LOG2_PSCALE=prep.log2_pscale,
            CAUSAL=is_causal, MASK_MODE=mode, DS_BLOCK=128,
            STORE_ML=store_ml, FP8_DOT=fp8_dot, DOT_F32=interpret,
        )  # fmt: skip
    return o, (m_out if store_ml else None), (l_out if store_ml else None)


def triton_cdiv(a: int, b: int) -> int:
    return max(1, -(-a // b))


# ---------------------------------------------------------------------------------------------
# SageBwd (reconstruction)


def _tile_int8(x: torch.Tensor, axis: str, block: int = SAGEBWD_BLOCK) -> torch.Tensor:
    """Fake INT8 inside (block × block) tiles of the last two dims, round half away from zero.

    ``axis="row"``: one scale per row of each tile (factorable when the matmul contracts over
    columns, dQ = dS·K); ``axis="col"``: one scale per column of each tile (dV = PᵀdO, dK = dSᵀQ
    contract over rows).
    """
    n, m = x.shape[-2:]
    xp = F.pad(x, (0, (-m) % block, 0, (-n) % block))
    t = xp.reshape(*xp.shape[:-2], xp.shape[-2] // block, block, xp.shape[-1] // block, block)
    sc = t.abs().amax(dim=-1 if axis == "row" else -3, keepdim=True) / 127.0
    safe = torch.where(sc > 0, sc, torch.ones_like(sc))
    out = round_half_away(t / safe) * sc
    return out.reshape(xp.shape)[..., :n, :m]


def _sagebwd_reference_backward(
    prep: _Prepared,
    v: torch.Tensor,
    o: torch.Tensor,
    lse2: torch.Tensor,
    do: torch.Tensor,
    mask: torch.Tensor | None,
    mode: int,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SageBwd backward emulated in PyTorch: (dQ, dK per q-head, dV per q-head), fp32."""
    hq, n = prep.q.shape[1], prep.q.shape[2]
    group = hq // prep.k.shape[1]
    s2 = _apply_masks(_scores(prep, group), mask, mode, is_causal)
    p = torch.exp2(s2 - lse2.unsqueeze(-1))
    do_i8, do_s = int8_per_block(do, SAGEBWD_BLOCK)
    rows = torch.arange(n, device=do.device) // SAGEBWD_BLOCK
    do_deq = do_i8.float() * do_s[..., rows].unsqueeze(-1)
    dv = _tile_int8(p, "col").transpose(-1, -2) @ do_deq
    sb = _sixteen_bit(v.dtype)
    vr = v.repeat_interleave(group, dim=1)
    dp = do.to(sb).float() @ vr.to(sb).float().transpose(-1, -2)
    delta = (do.float() * o.float()).sum(dim=-1, keepdim=True)
    ds = p * (dp - delta)
    k_deq = (prep.k.float() * prep.k_scale.unsqueeze(-1)).repeat_interleave(group, dim=1)
    q_deq = prep.q.float() * prep.q_scale.unsqueeze(-1)  # = Q·s·log2e
    dq = (_tile_int8(ds, "row") @ k_deq) * prep.sm_scale
    dk = (_tile_int8(ds, "col").transpose(-1, -2) @ q_deq) * LN2
    return dq, dk, dv


def _sagebwd_triton_backward(
    prep: _Prepared,
    v: torch.Tensor,
    o: torch.Tensor,
    lse2: torch.Tensor,
    do: torch.Tensor,
    mask: torch.Tensor | None,
    mode: int,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from eff_kernels._triton import interpret_for, kernels, launch_env

    q, k = prep.q.contiguous(), prep.k.contiguous()
    b, hq, n, d = q.shape
    hkv, m = k.shape[1], k.shape[2]
    dev = q.device
    interpret = interpret_for(dev)
    mod = kernels("attention", dev)
    sb = _sixteen_bit(v.dtype)
    v16 = v.to(sb).contiguous()
    do = do.contiguous()
    do8, dos = int8_per_block(do, SAGEBWD_BLOCK)
    do8, dos = do8.contiguous(), dos.contiguous()
    do16 = do.to(sb).contiguous()
    delta = (do.float() * o.float()).sum(dim=-1).contiguous()
    lse2 = lse2.contiguous()
    qs, ks = prep.q_scale.contiguous(), prep.k_scale.contiguous()
    dummy = _dummy(dev)
    if mode == 1:
        mk = mask.to(torch.uint8)
    elif mode == 2:
        mk = mask.float()
    else:
        mk = dummy
    ms = mk.stride() if mode else (0, 0, 0, 0)
    dq = torch.empty(b, hq, n, d, dtype=torch.float32, device=dev)
    dk = torch.empty(b, hq, m, d, dtype=torch.float32, device=dev)
    dv = torch.empty(b, hq, m, d, dtype=torch.float32, device=dev)
    blk = SAGEBWD_BLOCK
    with launch_env(interpret):
        mod.sagebwd_dkdv_kernel[(triton_cdiv(m, blk), b * hq)](
            q, qs, k, ks, v16, do8, dos, do16, lse2, delta, mk, dk, dv,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            do.stride(0), do.stride(1), do.stride(2),
            dk.stride(0), dk.stride(1), dk.stride(2),
            ms[0], ms[1], ms[2], ms[3],
            qs.stride(0), qs.stride(1), ks.stride(0), ks.stride(1), dos.stride(0), dos.stride(1),
            n, m, hq, hq // hkv,
            HEAD_DIM=d, BLOCK_M=blk, BLOCK_N=blk, CAUSAL=is_causal, MASK_MODE=mode, DOT_F32=interpret,
        )  # fmt: skip
        mod.sagebwd_dq_kernel[(triton_cdiv(n, blk), b * hq)](
            q, qs, k, ks, v16, do16, lse2, delta, mk, dq,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            do.stride(0), do.stride(1), do.stride(2),
            ms[0], ms[1], ms[2], ms[3],
            qs.stride(0), qs.stride(1), ks.stride(0), ks.stride(1),
            n, m, hq, hq // hkv, prep.sm_scale,
            HEAD_DIM=d, BLOCK_M=blk, BLOCK_N=blk, CAUSAL=is_causal, MASK_MODE=mode, DOT_F32=interpret,
        )  # fmt: skip
    return dq, dk, dv


def _group_sum(x: torch.Tensor, hkv: int) -> torch.Tensor:
    b, hq, m, d = x.shape
    return x.reshape(b, hkv, hq // hkv, m, d).sum(dim=2)


@dataclass(frozen=True)
class _Options:
    scale: float
    is_causal: bool
    qk: str
    pv: str
    granularity: str
    smooth_k: bool
    smooth_q: bool
    q_smooth_block: int | None
    fmt: str
    backend: str  # "reference" | "triton"
    enable_gqa: bool


def _run_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    mode: int,
    opt: _Options,
    store_ml: bool,
    sagebwd: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, _Prepared]:
    prep = _prepare(
        q,
        k,
        v,
        sm_scale=opt.scale,
        qk="int8" if sagebwd else opt.qk,
        pv="int8" if sagebwd else opt.pv,
        granularity=opt.granularity,
        smooth_k=opt.smooth_k,
        smooth_q=opt.smooth_q,
        q_smooth_block=opt.q_smooth_block,
        q_block=SAGEBWD_BLOCK if sagebwd and opt.granularity == "per_block" else None,
        fmt=opt.fmt,
    )
    if opt.backend == "triton":
        o, m_i, l_i = _triton_forward(prep, mask, mode, opt.is_causal, q.dtype, store_ml)
    else:
        o, m_i, l_i = _reference_forward(prep, mask, mode, opt.is_causal)
        o = o.to(q.dtype)
    return o, m_i, l_i, prep


def _lse(q: torch.Tensor, m_i: torch.Tensor, l_i: torch.Tensor, prep: _Prepared) -> torch.Tensor:
    """Natural-log LSE of the *unsmoothed* scores: (m + log2 l − log2 P_scale)·ln 2 + s·q·mean(K)."""
    lse = (m_i + torch.log2(l_i) - prep.log2_pscale) * LN2
    if prep.k_mean is not None:
        km = prep.k_mean.repeat_interleave(q.shape[1] // prep.k_mean.shape[1], dim=1)
        lse = lse + prep.sm_scale * (q.float() @ km.transpose(-1, -2)).squeeze(-1)
    return lse


class _SageBwdFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, mode, opt):  # type: ignore[override]
        o, m_i, l_i, prep = _run_forward(q, k, v, mask, mode, opt, store_ml=True, sagebwd=True)
        lse2 = m_i + torch.log2(torch.where(l_i > 0, l_i, torch.ones_like(l_i)))
        lse2 = torch.where(torch.isfinite(lse2), lse2, torch.zeros_like(lse2))  # fully masked rows
        ctx.save_for_backward(v, o, lse2, mask if mask is not None else torch.empty(0))
        ctx.prep, ctx.mode, ctx.opt = prep, mode, opt
        lse = _lse(q, m_i, l_i, prep)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):  # type: ignore[override]
        v, o, lse2, mask = ctx.saved_tensors
        mask = mask if ctx.mode else None
        fn = (
            _sagebwd_triton_backward if ctx.opt.backend == "triton" else _sagebwd_reference_backward
        )
        dq, dk, dv = fn(ctx.prep, v, o, lse2, do, mask, ctx.mode, ctx.opt.is_causal)
        hkv = v.shape[1]
        dk, dv = _group_sum(dk, hkv), _group_sum(dv, hkv)
        if ctx.opt.smooth_k:
            dk = dk - dk.mean(dim=-2, keepdim=True)
        return dq.to(do.dtype), dk.to(do.dtype), dv.to(do.dtype), None, None, None


class _ExactBwdFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, mode, opt):  # type: ignore[override]
        o, m_i, l_i, prep = _run_forward(q, k, v, mask, mode, opt, store_ml=True)
        ctx.save_for_backward(q, k, v, mask if mask is not None else torch.empty(0))
        ctx.mode, ctx.opt = mode, opt
        lse = _lse(q, m_i, l_i, prep)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):  # type: ignore[override]
        q, k, v, mask = ctx.saved_tensors
        mask = mask if ctx.mode else None
        with torch.enable_grad():
            qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
            out = F.scaled_dot_product_attention(
                qf,
                kf,
                vf,
                attn_mask=mask.float() if mask is not None and ctx.mode == 2 else mask,
                is_causal=ctx.opt.is_causal,
                scale=ctx.opt.scale,
                enable_gqa=ctx.opt.enable_gqa,
            )
            dq, dk, dv = torch.autograd.grad(out, (qf, kf, vf), do.float())
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


# ---------------------------------------------------------------------------------------------
# public API


def _resolve_backend(backend: str, device: torch.device, qk: str) -> str:
    check_choice("backend", backend, BACKENDS)
    if backend == "cuda":
        if not torch.cuda.is_available() or device.type != "cuda":
            raise RuntimeError(
                "backend='cuda' needs CUDA tensors on a machine with CUDA "
                f"(CUDA available: {torch.cuda.is_available()}, tensors on {device})"
            )
        return "triton"
    if backend == "auto":
        return "triton" if device.type == "cuda" else "reference"
    return backend


def sage_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    qk_dtype: str | None = None,
    pv_dtype: str = "fp16",
    qk_granularity: str | None = None,
    smooth_k: bool = True,
    smooth_q: bool | None = None,
    backend: str = "auto",
    backward: str | None = None,
    layout: str = "HND",
    return_lse: bool = False,
    fp4_format: str = "nvfp4",
    per_block_mean: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Quantized attention with the positional signature of ``F.scaled_dot_product_attention``.

    ``pv_dtype``: ``"fp16"`` (SageAttention2 INT8 Q·Kᵀ + 16-bit P·V, the Triton path of every GPU),
    ``"fp8"`` (P̃·448 and per-channel V in E4M3, sm89/sm90 CUDA path), ``"int8"`` (SageBwd's
    forward) or ``"fp4"`` (SageAttention3: Q, K, P, V in NVFP4, or MXFP4 with ``fp4_format``).
    ``qk_dtype`` defaults to ``"int8"``, or ``"fp4"`` with ``pv_dtype="fp4"``.
    ``qk_granularity`` of the INT8 Q·Kᵀ scales: ``"per_thread"`` (the default, SageAttention2's
    CUDA granularity), ``"per_warp"`` or ``"per_block"`` (the upstream Triton path's); None means
    per thread, except for ``backward="sagebwd"`` training, whose forward quantizes Q per block of
    64 tokens unless a granularity is given.
    ``smooth_q`` (Q smoothing with the ΔS correction) defaults to True for fp4 only.

    ``backend``: ``"reference"`` (PyTorch emulation), ``"triton"`` (Triton kernels, interpreted on
    CPU), ``"cuda"`` (the Triton kernels compiled for CUDA; RuntimeError without CUDA) or
    ``"auto"`` (CUDA tensors → kernels, CPU tensors → reference).

    ``backward``: None raises when an input requires grad (SageAttention is inference-only and must
    never cut a gradient silently); ``"sagebwd"`` runs SageBwd's INT8 forward and backward;
    ``"exact"`` keeps the quantized forward and back-propagates exact fp32 attention.

    ``attn_mask`` (bool: True = attend, or additive float) is supported, unlike upstream. Head dims
    other than 64/128/256 are zero-padded. Returns O (same dtype and layout as ``query``) and, with
    ``return_lse``, the natural-log LSE (B, H, N) in float32.
    """
    check_choice("layout", layout, LAYOUTS)
    check_choice("pv_dtype", pv_dtype, PV_DTYPES)
    check_choice("backward", backward, BACKWARDS)
    if qk_granularity is not None:
        check_choice("qk_granularity", qk_granularity, ("per_block", "per_warp", "per_thread"))
    check_choice("fp4_format", fp4_format, FP4_FORMATS)
    qk = qk_dtype if qk_dtype is not None else ("fp4" if pv_dtype == "fp4" else "int8")
    check_choice("qk_dtype", qk, QK_DTYPES)
    if (qk == "fp4") != (pv_dtype == "fp4"):
        raise ValueError(
            f"qk_dtype={qk!r} with pv_dtype={pv_dtype!r} is not a SageAttention scheme: "
            "use qk_dtype='fp4' only with pv_dtype='fp4' (SageAttention3)"
        )
    sq = (qk == "fp4") if smooth_q is None else bool(smooth_q)
    if sq and qk != "fp4":
        raise ValueError(
            "smooth_q is part of the fp4 scheme (SageAttention3); use it with pv_dtype='fp4'"
        )
    _check_inputs(query, key, value, attn_mask, is_causal, enable_gqa, layout)
    if dropout_p:
        raise NotImplementedError("dropout_p > 0 is not supported by the quantized attention paths")
    device = query.device
    be = _resolve_backend(backend, device, qk)
    if qk == "fp4":
        _warn_fp4_emulation(device)

    q, k, v = (
        (query, key, value) if layout == "HND" else (t.transpose(1, 2) for t in (query, key, value))
    )
    b, hq, n, d = q.shape
    m = k.shape[2]
    sm_scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if needs_grad and backward is None:
        raise RuntimeError(
            "sage_attention got inputs that require grad but backward=None: SageAttention's forward is "
            "inference-only and would silently cut the gradient. Pass backward='sagebwd' (INT8 "
            "training attention) or backward='exact' (quantized forward, exact fp32 backward)."
        )
    if needs_grad and attn_mask is not None and attn_mask.requires_grad:
        raise NotImplementedError("gradients with respect to attn_mask are not supported")
    if needs_grad and backward == "sagebwd" and pv_dtype == "fp4":
        raise ValueError("backward='sagebwd' is INT8 training attention; it has no fp4 variant")
    sagebwd = needs_grad and backward == "sagebwd"
    granularity = qk_granularity or ("per_block" if sagebwd else "per_thread")

    if n == 0 or m == 0:
        out = q.new_zeros(b, hq, n, d)
        out = out + 0 * (q.sum() + k.sum() + v.sum()) if needs_grad else out
        lse = torch.full((b, hq, n), float("-inf"), device=device)
        out = out if layout == "HND" else out.transpose(1, 2)
        return (out, lse) if return_lse else out

    dp = _padded_dim(d)
    if dp != d:
        q, k, v = (F.pad(t, (0, dp - d)) for t in (q, k, v))
    mask4, mode = _mask_4d(attn_mask, b, hq, n, m)
    opt = _Options(
        scale=sm_scale,
        is_causal=bool(is_causal),
        qk=qk,
        pv=pv_dtype,
        granularity=granularity,
        smooth_k=bool(smooth_k),
        smooth_q=sq,
        q_smooth_block=128 if per_block_mean else None,
        fmt=fp4_format,
        backend=be,
        enable_gqa=bool(enable_gqa),
    )
    if needs_grad:
        fn = _SageBwdFunction if backward == "sagebwd" else _ExactBwdFunction
        out, lse = fn.apply(q, k, v, mask4, mode, opt)
    else:
        with torch.no_grad():
            out, m_i, l_i, prep = _run_forward(q, k, v, mask4, mode, opt, store_ml=return_lse)
            lse = _lse(q, m_i, l_i, prep) if return_lse else None
    out = out[..., :d]
    if layout == "NHD":
        out = out.transpose(1, 2)
    return (out, lse) if return_lse else out


def sage_attention3(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    per_block_mean: bool = True,
    emulate: bool | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """SageAttention3 (``sageattn3_blackwell``): NVFP4 Q, K, P, V with K smoothing and Q smoothing.

    ``per_block_mean``: Q smoothing per block of 128 tokens (True, upstream default) or one mean over
    all tokens. ``emulate``: None → native FP4 only on sm100/sm120 with the upstream ``sageattn3``
    package, emulated elsewhere (one-time :class:`FP4EmulationWarning`); False on any other device
    raises RuntimeError.
    """
    if emulate is False:
        dev = q.device
        native = (
            dev.type == "cuda"
            and torch.cuda.get_device_capability(dev)[0] in (10, 12)
            and _has_module("sageattn3")
        )
        if not native:
            raise RuntimeError(
                "emulate=False needs FP4 tensor cores (sm100/sm120) and the sageattn3 package; "
                f"this device is {dev}"
            )
        sageattn3 = importlib.import_module("sageattn3")  # optional, Blackwell only

        return sageattn3.sageattn3_blackwell(
            q, k, v, is_causal=is_causal, per_block_mean=per_block_mean
        )
    return sage_attention(
        q,
        k,
        v,
        is_causal=is_causal,
        scale=scale,
        pv_dtype="fp4",
        per_block_mean=per_block_mean,
        backend=backend,
    )  # type: ignore[return-value]


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def sage_reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    qk_dtype: str = "int8",
    pv_dtype: str = "fp16",
    smooth_k: bool = True,
    smooth_q: bool = False,
    fp4_format: str = "nvfp4",
    two_level: bool = True,
    qk_granularity: str = "per_thread",
    block_n: int | None = None,
    v_exact: bool = False,
) -> torch.Tensor:
    """The PyTorch emulation of one scheme on (B, H, N, D) inputs (any ``qk_dtype``/``pv_dtype``
    combination, including ``"none"`` for exact float32 operands; ``v_exact`` quantizes P but not
    V); float32 output.

    Used for ablations that the public API does not expose (one-level P, P-only quantization).
    """
    check_choice("qk_dtype", qk_dtype, (*QK_DTYPES, "none"))
    check_choice("pv_dtype", pv_dtype, (*PV_DTYPES, "none"))
    d = query.shape[-1]
    dp = _padded_dim(d)
    q, k, v = (F.pad(t, (0, dp - d)) for t in (query, key, value))
    prep = _prepare(
        q,
        k,
        v,
        sm_scale=float(scale) if scale is not None else 1.0 / math.sqrt(d),
        qk=qk_dtype,
        pv=pv_dtype,
        granularity=qk_granularity,
        smooth_k=smooth_k,
        smooth_q=smooth_q,
        fmt=fp4_format,
        two_level=two_level,
        block_n=block_n,
        v_exact=v_exact,
    )
    with torch.no_grad():
        out, _, _ = _reference_forward(prep, None, 0, is_causal)
    return out[..., :d]


def p_quant_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    two_level: bool = True,
    fmt: str = "nvfp4",
    scale: float | None = None,
) -> torch.Tensor:
    """Attention with only P̃ quantized (Q, K, V exact): isolates the two-level P scaling (SageAttention3)."""
    return sage_reference(
        q,
        k,
        v,
        scale=scale,
        qk_dtype="none",
        pv_dtype="fp4",
        smooth_k=False,
        fp4_format=fmt,
        two_level=two_level,
        v_exact=True,
    )


def kv_bytes_per_token(fmt: str, head_dim: int = 64, tokens: int = 1024) -> dict[str, float]:
    """Bytes of one token's K and V (one head) in a format, measured from quantized tensors.

    ``fmt``: ``"fp16"``, ``"int8-fp16"`` (INT8 K per 64-token block + fp16 V), ``"int8-fp8"`` (INT8 K +
    FP8 per-channel V), ``"nvfp4"`` or ``"mxfp4"`` (packed nibbles + block scales for K and V).
    Returns bytes per token and the ratio to fp16.
    """
    from eff_kernels.quant import mxfp4_quantize, nvfp4_quantize

    check_choice("fmt", fmt, ("fp16", "int8-fp16", "int8-fp8", "nvfp4", "mxfp4"))
    x = torch.randn(1, 1, tokens, head_dim)
    if fmt == "fp16":
        nbytes = 2 * x.half().nbytes
    elif fmt.startswith("int8"):
        ki8, ks = int8_per_block(x, 64)
        nbytes = ki8.nbytes + ks.nbytes
        if fmt == "int8-fp16":
            nbytes += x.half().nbytes
        else:
            v8, vs = fp8_e4m3_per_channel(x)
            nbytes += v8.nbytes + vs.nbytes
    else:
        quant = nvfp4_quantize if fmt == "nvfp4" else mxfp4_quantize
        kp, kscale = quant(x, -1)
        vp, vscale = quant(x, -2)
        nbytes = kp.nbytes + kscale.nbytes + vp.nbytes + vscale.nbytes
    per_token = nbytes / tokens
    return {"bytes_per_token": per_token, "ratio_to_fp16": per_token / (4 * head_dim)}


@contextlib.contextmanager
def patch_sdpa(**sage_kwargs: Any) -> Iterator[None]:
    """Replace ``torch.nn.functional.scaled_dot_product_attention`` by :func:`sage_attention` inside the block.

    Keyword arguments configure it (e.g. ``pv_dtype="fp8"``, ``backward="sagebwd"``). Code that
    imported the function object before entering (``from torch.nn.functional import
    scaled_dot_product_attention``) keeps the original. Restored on exit, even after an exception.
    """
    original = F.scaled_dot_product_attention
    patched = functools.partial(sage_attention, **sage_kwargs)
    F.scaled_dot_product_attention = patched  # type: ignore[assignment]
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original  # type: ignore[assignment]


def register_transformers(name: str = "sage", **sage_kwargs: Any) -> str:
    """Register :func:`sage_attention` as a transformers attention implementation called ``name``.

    Afterwards ``model.set_attn_implementation(name)`` (or ``attn_implementation=name`` when building a
    model) routes attention through it; masks are built as for ``"sdpa"``. Keyword arguments configure
    it (``pv_dtype``, ``backward="sagebwd"`` for training, ...). Returns ``name``.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    AttentionInterface.register(name, functools.partial(_transformers_attention, **sage_kwargs))
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def _transformers_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface (mirrors ``sdpa_attention_forward``)."""
    sage_kwargs = {k: v for k, v in kwargs.items() if k in _SAGE_KWARGS}
    n = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(n > 1 and attention_mask is None and causal)
    if causal and key.shape[2] > n:
        key, value = key[:, :, :n], value[:, :, :n]
    out = sage_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        is_causal=causal,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
        **sage_kwargs,
    )
    return out.transpose(1, 2).contiguous(), None  # type: ignore[union-attr]


_SAGE_KWARGS = {
    "qk_dtype",
    "pv_dtype",
    "qk_granularity",
    "smooth_k",
    "smooth_q",
    "backend",
    "backward",
    "fp4_format",
    "per_block_mean",
}
