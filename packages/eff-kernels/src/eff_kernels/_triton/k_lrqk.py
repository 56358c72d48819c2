"""Triton kernel of LRQK's decode attention: gather the selected K/V rows and take an exact softmax.

Loaded through :func:`eff_kernels._triton.kernels`; the reference is
:func:`eff_kernels.lrqk.sparse_decode_attention` with ``backend="reference"``.
"""

import triton
import triton.language as tl


@triton.jit
def sparse_decode_kernel(
    Q, K, V, IDX, Out,
    sqh, skh, skn, svh, svn, sih, soh,
    n_idx, GROUP, scale_log2,
    HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One query head: Out = softmax(q·K[idx]ᵀ·s)·V[idx] over the indices ≥ 0 (−1 pads), online."""
    h = tl.program_id(0)
    hk = h // GROUP
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + h * sqh + offs_d).to(tl.float32)
    m_i = tl.full([1], float("-inf"), tl.float32)
    l_i = tl.zeros([1], tl.float32)
    acc = tl.zeros([1, HEAD_DIM], tl.float32)
    for start in range(0, n_idx, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        idx = tl.load(IDX + h * sih + offs, mask=offs < n_idx, other=-1)
        valid = idx >= 0
        safe = tl.where(valid, idx, 0)
        kk = tl.load(
            K + hk * skh + safe[:, None] * skn + offs_d[None, :], mask=valid[:, None], other=0.0
        )
        s = tl.sum(kk.to(tl.float32) * q[None, :], 1) * scale_log2
        s = tl.where(valid, s, float("-inf"))[None, :]
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_safe)
        p = tl.math.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        vv = tl.load(
            V + hk * svh + safe[:, None] * svn + offs_d[None, :], mask=valid[:, None], other=0.0
        )
        acc = acc * alpha[:, None] + tl.sum(tl.trans(p) * vv.to(tl.float32), 0)[None, :]
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(Out + h * soh + offs_d[None, :], out.to(Out.dtype.element_ty))
