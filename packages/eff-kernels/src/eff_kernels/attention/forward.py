"""The attention forward: the PyTorch reference, a tile-by-tile emulation of the kernel
(:func:`reference_forward`), and the Triton path (:func:`triton_forward`), both on a
:class:`~eff_kernels.attention.common.Prepared` pre-pass."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from eff_kernels.attention.common import LOG2E, Prepared
from eff_kernels.quant import (
    e2m1_round,
    e4m3_round,
    floor_log2,
    round_half_away,
)

__all__ = [
    "apply_masks",
    "base2_scores",
    "dummy_tensor",
    "reference_forward",
    "triton_cdiv",
    "triton_forward",
]


# ---------------------------------------------------------------------------------------------
# the PyTorch reference (tile-by-tile emulation of the kernel)


def _quantize_p(p: torch.Tensor, prep: Prepared) -> tuple[torch.Tensor, torch.Tensor | None]:
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


def base2_scores(prep: Prepared, group: int) -> torch.Tensor:
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


def apply_masks(
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


def reference_forward(
    prep: Prepared, mask: torch.Tensor | None, mode: int, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantized FlashAttention-2 forward, tile by tile; returns (O fp32, m, l) with base-2 m."""
    b, hq, n, d = prep.q.shape
    group = hq // prep.k.shape[1]
    s_all = apply_masks(base2_scores(prep, group), mask, mode, is_causal)
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


def dummy_tensor(device: torch.device) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.float32, device=device)


def triton_forward(
    prep: Prepared,
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
    m_out = (
        torch.empty(b, hq, n, dtype=torch.float32, device=dev) if store_ml else dummy_tensor(dev)
    )
    l_out = (
        torch.empty(b, hq, n, dtype=torch.float32, device=dev) if store_ml else dummy_tensor(dev)
    )
    dummy = dummy_tensor(dev)
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
