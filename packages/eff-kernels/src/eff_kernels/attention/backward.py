"""SageBwd (a reconstruction): the INT8 backward emulated in PyTorch and as Triton kernels, the
forward that feeds it (:func:`run_forward`) and the autograd functions :class:`SageBwdFunction` and
:class:`ExactBwdFunction` behind ``sage_attention(..., backward=...)``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eff_kernels.attention.common import LN2, SAGEBWD_BLOCK, Prepared, prepare, sixteen_bit
from eff_kernels.attention.forward import (
    apply_masks,
    base2_scores,
    dummy_tensor,
    reference_forward,
    triton_cdiv,
    triton_forward,
)
from eff_kernels.quant import (
    int8_per_block,
    round_half_away,
)

__all__ = [
    "AttentionOptions",
    "ExactBwdFunction",
    "SageBwdFunction",
    "natural_lse",
    "run_forward",
]


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
    prep: Prepared,
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
    s2 = apply_masks(base2_scores(prep, group), mask, mode, is_causal)
    p = torch.exp2(s2 - lse2.unsqueeze(-1))
    do_i8, do_s = int8_per_block(do, SAGEBWD_BLOCK)
    rows = torch.arange(n, device=do.device) // SAGEBWD_BLOCK
    do_deq = do_i8.float() * do_s[..., rows].unsqueeze(-1)
    dv = _tile_int8(p, "col").transpose(-1, -2) @ do_deq
    sb = sixteen_bit(v.dtype)
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
    prep: Prepared,
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
    sb = sixteen_bit(v.dtype)
    v16 = v.to(sb).contiguous()
    do = do.contiguous()
    do8, dos = int8_per_block(do, SAGEBWD_BLOCK)
    do8, dos = do8.contiguous(), dos.contiguous()
    do16 = do.to(sb).contiguous()
    delta = (do.float() * o.float()).sum(dim=-1).contiguous()
    lse2 = lse2.contiguous()
    qs, ks = prep.q_scale.contiguous(), prep.k_scale.contiguous()
    dummy = dummy_tensor(dev)
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
class AttentionOptions:
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


def run_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    mode: int,
    opt: AttentionOptions,
    store_ml: bool,
    sagebwd: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, Prepared]:
    prep = prepare(
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
        o, m_i, l_i = triton_forward(prep, mask, mode, opt.is_causal, q.dtype, store_ml)
    else:
        o, m_i, l_i = reference_forward(prep, mask, mode, opt.is_causal)
        o = o.to(q.dtype)
    return o, m_i, l_i, prep


def natural_lse(
    q: torch.Tensor, m_i: torch.Tensor, l_i: torch.Tensor, prep: Prepared
) -> torch.Tensor:
    """Natural-log LSE of the *unsmoothed* scores: (m + log2 l − log2 P_scale)·ln 2 + s·q·mean(K)."""
    lse = (m_i + torch.log2(l_i) - prep.log2_pscale) * LN2
    if prep.k_mean is not None:
        km = prep.k_mean.repeat_interleave(q.shape[1] // prep.k_mean.shape[1], dim=1)
        lse = lse + prep.sm_scale * (q.float() @ km.transpose(-1, -2)).squeeze(-1)
    return lse


class SageBwdFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, mode, opt):  # type: ignore[override]
        o, m_i, l_i, prep = run_forward(q, k, v, mask, mode, opt, store_ml=True, sagebwd=True)
        lse2 = m_i + torch.log2(torch.where(l_i > 0, l_i, torch.ones_like(l_i)))
        lse2 = torch.where(torch.isfinite(lse2), lse2, torch.zeros_like(lse2))  # fully masked rows
        ctx.save_for_backward(v, o, lse2, mask if mask is not None else torch.empty(0))
        ctx.prep, ctx.mode, ctx.opt = prep, mode, opt
        lse = natural_lse(q, m_i, l_i, prep)
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


class ExactBwdFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, mode, opt):  # type: ignore[override]
        o, m_i, l_i, prep = run_forward(q, k, v, mask, mode, opt, store_ml=True)
        ctx.save_for_backward(q, k, v, mask if mask is not None else torch.empty(0))
        ctx.mode, ctx.opt = mode, opt
        lse = natural_lse(q, m_i, l_i, prep)
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
