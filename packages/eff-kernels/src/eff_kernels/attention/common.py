"""SageAttention building blocks shared by the reference, the kernels and the API: formats and
constants, the FP4-emulation warning, the float64 reference and the error metrics, input checks and
the quantization pre-pass (:func:`prepare`). The user API is :mod:`eff_kernels.attention`."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eff_kernels.quant import (
    fake_fp4,
    fp8_e4m3_per_channel,
    int8_per_block,
    int8_quantize_rows,
    row_groups,
)

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
    "Prepared",
    "attention_error",
    "attention_fp64",
    "check_inputs",
    "mask_4d",
    "padded_dim",
    "prepare",
    "sixteen_bit",
    "warn_fp4_emulation",
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


def warn_fp4_emulation(device: torch.device) -> None:
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


def check_inputs(
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


def padded_dim(d: int) -> int:
    for p in (64, 128, 256):
        if d <= p:
            return p
    raise ValueError(f"head dim must be <= 256, got {d}")


def mask_4d(
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
class Prepared:
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


def sixteen_bit(dtype: torch.dtype) -> torch.dtype:
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float16


def prepare(
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
) -> Prepared:
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
        vo = v.to(sixteen_bit(v.dtype))
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
    return Prepared(
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
