"""Triton kernels of SageAttention2/3 (forward) and SageBwd (backward).

Loaded through :func:`eff_kernels._triton.kernels` (compiled on CUDA, interpreted on CPU). The
PyTorch emulations in :mod:`eff_kernels.attention` define the numerics these kernels reproduce:
same tiles, same quantization of P inside the online softmax, fp32 accumulators.

Low-precision values that a kernel produces itself (P in FP8/NVFP4/MXFP4/INT8) are rounded with
the exact-arithmetic helpers below rather than with Triton casts, because the interpreter's
float8 casts neither round to nearest even nor keep subnormals. The rounded values are exactly
representable in fp16, so an fp16 ``tl.dot`` with an fp32 accumulator computes what an FP8/FP4
tensor-core MMA computes (``FP8_DOT`` feeds real float8 operands on GPUs that have FP8 MMA).
"""

import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _rows(base, offs, stride, offs_d, mask, other):
    """Load the rows ``offs`` (masked) of a (rows, HEAD_DIM) block whose last dim is contiguous."""
    return tl.load(base + offs[:, None] * stride + offs_d[None, :], mask=mask[:, None], other=other)


@triton.jit
def _masked(s, offs_m, offs_n, N, M, mk_ptrs, CAUSAL: tl.constexpr, MASK_MODE: tl.constexpr):
    """Scores with −inf outside the ragged tile, above the diagonal (causal, top-left like SDPA) and
    where a bool mask is False; an additive mask (MASK_MODE 2, natural log) is added in base 2."""
    inside = (offs_m < N)[:, None] & (offs_n < M)[None, :]
    valid = inside
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None])
    if MASK_MODE == 1:
        valid = valid & (tl.load(mk_ptrs, mask=inside, other=0) != 0)
    if MASK_MODE == 2:
        s = s + tl.load(mk_ptrs, mask=inside, other=0.0).to(tl.float32) * 1.4426950408889634
    return tl.where(valid, s, float("-inf"))


@triton.jit
def _round_half_away(x):
    """Nearest integer, halves away from zero (SageAttention's ``x + 0.5·sign(x)`` then truncate)."""
    return tl.where(x >= 0, x + 0.5, x - 0.5).to(tl.int32).to(tl.float32)


@triton.jit
def _e4m3_round(x):
    """Round fp32 to FP8 E4M3 (nearest even, subnormals, saturate at 448) with exact arithmetic."""
    a = tl.minimum(tl.abs(x), 448.0)
    e = ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    e = tl.maximum(e, -6)
    quantum = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 2^(e-3)
    inv_quantum = ((127 + 3 - e) << 23).to(tl.float32, bitcast=True)  # 2^(3-e)
    y = a * inv_quantum  # exact, < 16
    r = (y + 8388608.0) - 8388608.0  # round to the nearest integer, ties to even (fp32 RNE)
    res = r * quantum
    return tl.where(x < 0, -res, res)


@triton.jit
def _e2m1_round(x):
    """Round to the E2M1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}: nearest, ties to even, saturate at 6."""
    a = tl.abs(x)
    v = tl.where(a > 0.25, 0.5, 0.0)
    v = tl.where(a >= 0.75, 1.0, v)
    v = tl.where(a > 1.25, 1.5, v)
    v = tl.where(a >= 1.75, 2.0, v)
    v = tl.where(a > 2.5, 3.0, v)
    v = tl.where(a >= 3.5, 4.0, v)
    v = tl.where(a > 5.0, 6.0, v)
    return tl.where(x < 0, -v, v)


@triton.jit
def _dot16(a, b, DOT_F32: tl.constexpr):
    """16-bit dot with an fp32 accumulator; DOT_F32 (interpreter only: its bf16 ``tl.dot`` is
    broken) computes the same exact products in fp32."""
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, out_dtype=tl.float32)


@triton.jit
def _fp4_quant_p(p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MX: tl.constexpr):
    """Fake-quantize P along the key axis: NVFP4 (1×16, E4M3 scale) or MXFP4 (1×32, E8M0 scale)."""
    if MX:
        p3 = tl.reshape(p, (BLOCK_M, BLOCK_N // 32, 32), can_reorder=False)
        bmax = tl.max(p3, 2)
        e = ((bmax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127 - 2
        e = tl.minimum(tl.maximum(e, -126), 126)
        sf = ((e + 127) << 23).to(tl.float32, bitcast=True)
        inv = ((127 - e) << 23).to(tl.float32, bitcast=True)
        q = _e2m1_round(p3 * inv[:, :, None]) * sf[:, :, None]
    else:
        p3 = tl.reshape(p, (BLOCK_M, BLOCK_N // 16, 16), can_reorder=False)
        bmax = tl.max(p3, 2)
        sf = _e4m3_round(tl.math.div_rn(bmax, tl.full(bmax.shape, 6.0, tl.float32)))
        inv = tl.where(
            sf > 0,
            tl.math.div_rn(tl.full(sf.shape, 1.0, tl.float32), tl.where(sf > 0, sf, 1.0)),
            0.0,
        )
        q = _e2m1_round(p3 * inv[:, :, None]) * sf[:, :, None]
    return tl.reshape(q, (BLOCK_M, BLOCK_N), can_reorder=False)


@triton.jit
def sage_fwd_kernel(
    Q, K, V, QS, KS, VS, DS, MASK, Out, MOUT, LOUT,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sob, soh, son,
    smb, smh, smn, smm, sdb, sdh, sdn,
    qsb, qsh, ksb, ksh, vsb, vsh,
    N, M, HQ, GROUP, sm_scale_log2,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    QK_MODE: tl.constexpr, PV_MODE: tl.constexpr, MX: tl.constexpr, LOG2_PSCALE: tl.constexpr,
    CAUSAL: tl.constexpr, MASK_MODE: tl.constexpr, DS_BLOCK: tl.constexpr,
    STORE_ML: tl.constexpr, FP8_DOT: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """One (query tile, batch·head) program of the quantized FlashAttention-2 forward.

    QK_MODE 0: INT8 Q·Kᵀ (int32) × per-row scales (Q pre-scaled by s·log2e). QK_MODE 1: fp16 values
    of NVFP4/MXFP4 Q̂·K̂ᵀ plus the fp32 ΔS of Q smoothing, times s·log2e.
    PV_MODE 0: 16-bit P·V; 1: P̃·448 in E4M3 × per-channel FP8 V; 2: P̃ INT8 per row × INT8 V per
    64-token block (SageBwd); 3: two-/one-level P̃ in NVFP4 (MX: MXFP4) × FP4 V.
    """
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    hk = h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_nb = tl.arange(0, BLOCK_N)
    qmask = offs_m < N
    q = _rows(Q + b * sqb + h * sqh, offs_m, sqn, offs_d, qmask, 0)
    if QK_MODE == 0:
        qs = tl.load(QS + b * qsb + h * qsh + offs_m, mask=qmask, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + offs_nb
        kmask = offs_n < M
        kt = tl.load(
            K + b * skb + hk * skh + offs_n[None, :] * skn + offs_d[:, None],
            mask=kmask[None, :],
            other=0,
        )
        if QK_MODE == 0:
            ks = tl.load(KS + b * ksb + hk * ksh + offs_n, mask=kmask, other=0.0)
            s = tl.dot(q, kt, out_dtype=tl.int32).to(tl.float32) * qs[:, None] * ks[None, :]
        else:
            ds = tl.load(
                DS + b * sdb + h * sdh + (offs_m[:, None] // DS_BLOCK) * sdn + offs_n[None, :],
                mask=qmask[:, None] & kmask[None, :],
                other=0.0,
            )
            s = (tl.dot(q, kt, out_dtype=tl.float32) + ds) * sm_scale_log2
        mk_ptrs = MASK + b * smb + h * smh + offs_m[:, None] * smn + offs_n[None, :] * smm
        s = _masked(s, offs_m, offs_n, N, M, mk_ptrs, CAUSAL, MASK_MODE)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_safe)
        p = tl.math.exp2(s - m_safe[:, None] + LOG2_PSCALE)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _rows(V + b * svb + hk * svh, offs_n, svn, offs_d, kmask, 0)
        if PV_MODE == 0:
            acc += _dot16(p.to(v.dtype), v, DOT_F32)
        elif PV_MODE == 1:
            pq = _e4m3_round(p)
            if FP8_DOT:
                acc += tl.dot(pq.to(tl.float8e4nv), v.to(tl.float8e4nv), out_dtype=tl.float32)
            else:
                acc += tl.dot(pq.to(tl.float16), v, out_dtype=tl.float32)
        elif PV_MODE == 2:
            ps = tl.max(p, 1) / 127.0
            pi = _round_half_away(p / tl.where(ps > 0, ps, 1.0)[:, None])
            vs = tl.load(VS + b * vsb + hk * vsh + start_n // BLOCK_N)
            acc += tl.dot(pi.to(tl.int8), v, out_dtype=tl.int32).to(tl.float32) * ps[:, None] * vs
        else:
            pq = _fp4_quant_p(p, BLOCK_M, BLOCK_N, MX)
            acc += tl.dot(pq.to(tl.float16), v, out_dtype=tl.float32)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    if PV_MODE == 1:
        vsc = tl.load(VS + b * vsb + hk * vsh + offs_d)
        out = out * vsc[None, :]
    tl.store(
        Out + b * sob + h * soh + offs_m[:, None] * son + offs_d[None, :],
        out.to(Out.dtype.element_ty),
        mask=qmask[:, None],
    )
    if STORE_ML:
        tl.store(MOUT + bh * N + offs_m, m_i, mask=qmask)
        tl.store(LOUT + bh * N + offs_m, l_i, mask=qmask)


@triton.jit
def _bwd_tile(q, qs_rows, kt_rows, ks_rows, v16, do16, lse2, delta, offs_m, offs_n, mk_ptrs,
              N, M, CAUSAL: tl.constexpr, MASK_MODE: tl.constexpr, DOT_F32: tl.constexpr):  # fmt: skip
    """Recompute P (normalised) and dS = P∘(dP − δ) of one tile; dP = dO·Vᵀ stays fp16 × fp16."""
    s = (
        tl.dot(q, tl.trans(kt_rows), out_dtype=tl.int32).to(tl.float32)
        * qs_rows[:, None]
        * ks_rows[None, :]
    )
    s = _masked(s, offs_m, offs_n, N, M, mk_ptrs, CAUSAL, MASK_MODE)
    p = tl.math.exp2(s - lse2[:, None])  # lse2 is finite (fully masked rows use 0), so −inf → 0
    dp = _dot16(do16, tl.trans(v16), DOT_F32)
    ds = p * (dp - delta[:, None])
    return p, ds


@triton.jit
def _rows_int8(x):
    """INT8 with one scale per row of the tile: (values as fp32 integers, scales (rows,))."""
    sc = tl.max(tl.abs(x), 1) / 127.0
    xi = _round_half_away(x / tl.where(sc > 0, sc, 1.0)[:, None])
    return xi, sc


@triton.jit
def _cols_int8(x):
    """INT8 with one scale per column of the tile: (values as fp32 integers, scales (cols,))."""
    sc = tl.max(tl.abs(x), 0) / 127.0
    xi = _round_half_away(x / tl.where(sc > 0, sc, 1.0)[None, :])
    return xi, sc


@triton.jit
def sagebwd_dkdv_kernel(
    Q, QS, K, KS, V16, DO8, DOS, DO16, LSE2, DELTA, MASK, DK, DV,
    sqb, sqh, sqn, skb, skh, skn, sob, soh, son, sgb, sgh, sgn,
    smb, smh, smn, smm, qsb, qsh, ksb, ksh, dosb, dosh,
    N, M, HQ, GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, MASK_MODE: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """dK and dV of one key tile for one query head (summed over the GQA group outside).

    dV = Σ_tiles P_int8ᵀ·dO_int8 (P one scale per key column, dO per 64-row block);
    dK = Σ_tiles dS_int8ᵀ·Q_int8 (dS one scale per key column). Strides: Q/dO (sq*, so*), K/V (sk*),
    dK/dV outputs (sg*).
    """
    start_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    hk = h // GROUP
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kmask = offs_n < M
    kt = _rows(K + b * skb + hk * skh, offs_n, skn, offs_d, kmask, 0)
    ks_rows = tl.load(KS + b * ksb + hk * ksh + offs_n, mask=kmask, other=0.0)
    v16 = _rows(V16 + b * skb + hk * skh, offs_n, skn, offs_d, kmask, 0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    lo = 0
    if CAUSAL:
        lo = (start_n * BLOCK_N // BLOCK_M) * BLOCK_M
    for start_m in range(lo, N, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        qmask = offs_m < N
        q = _rows(Q + b * sqb + h * sqh, offs_m, sqn, offs_d, qmask, 0)
        qs_rows = tl.load(QS + b * qsb + h * qsh + offs_m, mask=qmask, other=0.0)
        qs_tile = tl.load(QS + b * qsb + h * qsh + start_m)
        do8 = _rows(DO8 + b * sob + h * soh, offs_m, son, offs_d, qmask, 0)
        do16 = _rows(DO16 + b * sob + h * soh, offs_m, son, offs_d, qmask, 0.0)
        dos = tl.load(DOS + b * dosb + h * dosh + start_m // BLOCK_M)
        lse2 = tl.load(LSE2 + bh * N + offs_m, mask=qmask, other=0.0)
        delta = tl.load(DELTA + bh * N + offs_m, mask=qmask, other=0.0)
        mk_ptrs = MASK + b * smb + h * smh + offs_m[:, None] * smn + offs_n[None, :] * smm
        p, ds = _bwd_tile(q, qs_rows, kt, ks_rows, v16, do16, lse2, delta, offs_m, offs_n, mk_ptrs,
                          N, M, CAUSAL, MASK_MODE, DOT_F32)  # fmt: skip
        pi, psc = _cols_int8(p)
        dv += tl.dot(tl.trans(pi.to(tl.int8)), do8, out_dtype=tl.int32).to(tl.float32) * (
            psc[:, None] * dos
        )
        dsi, dssc = _cols_int8(ds)
        dk += tl.dot(tl.trans(dsi.to(tl.int8)), q, out_dtype=tl.int32).to(tl.float32) * (
            dssc[:, None] * qs_tile
        )
    dk = dk * 0.6931471805599453  # Q_int8·qs = Q·s·log2e, so s·dSᵀQ = dSᵀ(Q_int8·qs)·ln 2
    out_off = b * sgb + h * sgh + offs_n[:, None] * sgn + offs_d[None, :]
    tl.store(DK + out_off, dk, mask=kmask[:, None])
    tl.store(DV + out_off, dv, mask=kmask[:, None])


@triton.jit
def sagebwd_dq_kernel(
    Q, QS, K, KS, V16, DO16, LSE2, DELTA, MASK, DQ,
    sqb, sqh, sqn, skb, skh, skn, sob, soh, son,
    smb, smh, smn, smm, qsb, qsh, ksb, ksh,
    N, M, HQ, GROUP, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, MASK_MODE: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """dQ of one query tile: s·Σ_tiles dS_int8·K_int8 (dS one scale per query row, K per 64-row block)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    hk = h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    qmask = offs_m < N
    q = _rows(Q + b * sqb + h * sqh, offs_m, sqn, offs_d, qmask, 0)
    qs_rows = tl.load(QS + b * qsb + h * qsh + offs_m, mask=qmask, other=0.0)
    do16 = _rows(DO16 + b * sob + h * soh, offs_m, son, offs_d, qmask, 0.0)
    lse2 = tl.load(LSE2 + bh * N + offs_m, mask=qmask, other=0.0)
    delta = tl.load(DELTA + bh * N + offs_m, mask=qmask, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kmask = offs_n < M
        kt = _rows(K + b * skb + hk * skh, offs_n, skn, offs_d, kmask, 0)
        ks_rows = tl.load(KS + b * ksb + hk * ksh + offs_n, mask=kmask, other=0.0)
        ks_tile = tl.load(KS + b * ksb + hk * ksh + start_n)
        v16 = _rows(V16 + b * skb + hk * skh, offs_n, skn, offs_d, kmask, 0.0)
        mk_ptrs = MASK + b * smb + h * smh + offs_m[:, None] * smn + offs_n[None, :] * smm
        _, ds = _bwd_tile(q, qs_rows, kt, ks_rows, v16, do16, lse2, delta, offs_m, offs_n, mk_ptrs,
                          N, M, CAUSAL, MASK_MODE, DOT_F32)  # fmt: skip
        dsi, dssc = _rows_int8(ds)
        dq += tl.dot(dsi.to(tl.int8), kt, out_dtype=tl.int32).to(tl.float32) * (
            dssc[:, None] * ks_tile
        )
    dq = dq * sm_scale
    tl.store(
        DQ + b * sqb + h * sqh + offs_m[:, None] * sqn + offs_d[None, :], dq, mask=qmask[:, None]
    )
