"""Triton kernel of ParetoQ inference: a GEMM that unpacks low-bit weight codes inside the kernel.

Y = X·Wᵀ with W[n, k] = α_n/n_lv·(code[n, k] + offset): codes of ``BITS`` bits packed along k (low
bits first), ``offset`` = shift − c0 makes every operand an exact (half-)integer, so the 16-bit dot
is exact and the per-row scale α_n/n_lv is applied once to the fp32 accumulator.
Loaded through :func:`eff_kernels._triton.kernels`; the reference is
:func:`eff_kernels.paretoq.lowbit_matmul` with ``backend="reference"``.
"""

import triton
import triton.language as tl


@triton.jit
def lowbit_matmul_kernel(
    X, W, S, Y,
    M, N, K,
    sxm, sxk, swn, swk, sym, syn,
    offset,
    BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr,
):  # fmt: skip
    """IEEE: fp32 operands and products (fp32 inputs, and the interpreter, whose bf16 dot is broken)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    VPB: tl.constexpr = 8 // BITS
    MASKV: tl.constexpr = (1 << BITS) - 1
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(
            X + offs_m[:, None] * sxm + kk[None, :] * sxk,
            mask=(offs_m[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        wmask = (kk[:, None] < K) & (offs_n[None, :] < N)
        byte = tl.load(W + offs_n[None, :] * swn + (kk[:, None] // VPB) * swk, mask=wmask, other=0)
        code = (byte.to(tl.int32) >> ((kk[:, None] % VPB) * BITS)) & MASKV
        lev = tl.where(wmask, code.to(tl.float32) + offset, 0.0)
        if IEEE:
            acc += tl.dot(x.to(tl.float32), lev, input_precision="ieee")
        else:
            acc += tl.dot(x, lev.to(x.dtype), out_dtype=tl.float32)
    s = tl.load(S + offs_n, mask=offs_n < N, other=0.0)
    y = acc * s[None, :]
    tl.store(
        Y + offs_m[:, None] * sym + offs_n[None, :] * syn,
        y.to(Y.dtype.element_ty),
        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )
