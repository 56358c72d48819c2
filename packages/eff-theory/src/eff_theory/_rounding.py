"""Compiled stochastic-rounding kernels of :mod:`eff_theory.quantized_oja` (numba, issue #25).

Each kernel repeats the reference numpy kernel (``LinearQuantizer._quantize_block``,
``LogQuantizer._quantize_block``) operation for operation on one element at a time, with the
uniforms drawn beforehand by numpy's generator in the same flat order, so the results are the same
bits (tested against the reference). The one step not repeated literally is the log grid's cell
index ⌊log1p(ζ|x|/δ₀)/log(1+ζ)⌋: the kernels read it from the exact points where the reference's
numpy expression steps from one cell to the next (found once per quantizer by bisection over the
floats, see :func:`log_cell_thresholds`), through a table indexed by the leading bits of |x| —
numpy's ``log1p`` can differ from the compiled one by an ulp, and a cell index one off near a
level changes which level a non-uniform grid returns.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_TABLE_MAX = 1 << 16  # cell-lookup entries (int32): the table stays in L2


@njit(cache=True)
def _linear(x: float, u: float, delta: float, kmin: float, kmax: float) -> float:
    k = x / delta
    k = min(max(k, kmin), kmax)  # saturate (np.clip)
    low = np.floor(k)
    # the reference adds the bool (0.0 or 1.0) unconditionally: -0.0 + 0.0 gives +0.0 as there
    low = low + (1.0 if u < k - low else 0.0)
    return low * delta


@intrinsic
def _float_bits(typingctx, x):
    """The IEEE-754 bit pattern of a float64 as an int64 (a bitcast; numba's scalar .view
    allocates)."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))

    return sig, codegen


@njit(cache=True)
def linear_round(x, u, delta, kmin, kmax, out):
    """Q(x) on the linear grid, given the uniforms u; whether x held a NaN."""
    nan = False
    for n in range(x.size):
        nan |= x[n] != x[n]
        out[n] = _linear(x[n], u[n], delta, kmin, kmax)
    return nan


@njit(cache=True)
def linear_row_sum(X, proj, u, first, delta, kmin, kmax, acc):
    """acc (+)= Σ_j Q(X[j]·proj[j]) row by row, in order (numpy's sum over a non-contiguous axis);
    ``first``: acc starts as the first row (numpy's reduction copies it; -0.0 stays)."""
    rows, d = X.shape
    for j in range(rows):
        pj = proj[j]
        for k in range(d):
            v = _linear(X[j, k] * pj, u[j * d + k], delta, kmin, kmax)
            acc[k] = v if first and j == 0 else acc[k] + v


@njit(cache=True)
def log_round(x, u, q, gap, inv_gap, thr, table, key0, shift, one_step, next_exact, out):
    """Q(x) on the log grid, given the uniforms u; whether x held a NaN. One loop body (a numba
    helper taking the grid's arrays is called per element, not inlined: ~80 ns per element)."""
    nan = False
    for n in range(x.size):
        x_n = x[n]
        nan |= x_n != x_n
        # branch-free where the data decides: rounding up is a coin flip (a branch
        # mispredicts half the time); both neighbours of the cell are loaded before it
        a = min(abs(x_n), q[-1])
        i = table[min(max((_float_bits(a) >> shift) - key0, 0), table.size - 1)]
        if one_step:  # the cell is i or i + 1
            i += a >= thr[i + 1]
        else:  # a coarse table (capped size): walk on; thr[N] = inf ends the walk
            while a >= thr[i + 1]:
                i += 1
        lo, hi, ig, g = q[i], q[i + 1], inv_gap[i], gap[i]
        up = u[n] < (a - lo) * ig
        if next_exact:  # noqa: SIM108 (q_i + gap_i is q_{i+1} on this grid)
            o = hi if up else lo
        else:
            o = lo + (g if up else 0.0)
        out[n] = np.copysign(o, x_n)
    return nan


@njit(cache=True)
def log_row_sum(
    X, proj, u, first, q, gap, inv_gap, thr, table, key0, shift, one_step, next_exact, acc
):
    """:func:`linear_row_sum` on the log grid: each row formed, rounded by :func:`log_round` (a
    call per row; its loop with the products inlined ran 3x slower) and added."""
    rows, d = X.shape
    row, rounded = np.empty(d), np.empty(d)
    for j in range(rows):
        pj = proj[j]
        for k in range(d):
            row[k] = X[j, k] * pj
        log_round(
            row, u[j * d : (j + 1) * d], q, gap, inv_gap, thr, table, key0, shift, one_step,
            next_exact, rounded,
        )  # fmt: skip
        if first and j == 0:
            acc[:] = rounded
        else:
            for k in range(d):
                acc[k] += rounded[k]


def log_cell_thresholds(cell_index, levels: np.ndarray) -> np.ndarray:
    """thr[k] = the smallest float a in [0, q_N] with ``cell_index(a) >= k`` (k = 1 … N − 1);
    thr[0] = 0, thr[N] = inf. ``cell_index`` is the reference's vectorised index expression,
    non-decreasing in a; ``levels`` = q_0 … q_N. Bisection over the bit patterns of the
    non-negative floats (whose order is the integer order), all k at once, from a bracket of 64 ulps
    around each level q_k (the step is within an ulp or two of it), else from [0, q_N]."""
    n_cells = levels.size - 1
    ks = np.arange(1, n_cells)
    top = levels[-1:].view(np.int64)
    near = levels[1:n_cells].view(np.int64)
    lo, hi = np.maximum(near - 64, 0), np.minimum(near + 64, top)
    bad = (cell_index(lo.view(np.float64)) >= ks) | (cell_index(hi.view(np.float64)) < ks)
    lo[bad], hi[bad] = 0, top  # cell_index(lo) < k <= cell_index(hi)
    while np.any(hi - lo > 1):
        mid = lo + (hi - lo) // 2
        up = cell_index(mid.view(np.float64)) >= ks
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    return np.concatenate([[0.0], hi.view(np.float64), [np.inf]])


def cell_table(thr: np.ndarray, zeta: float) -> tuple[np.ndarray, int, int, bool]:
    """(table, key0, shift, one_step): table[clip((bits(a) >> shift) − key0)] = the cell of the
    smallest float with those leading bits — a lower bound the kernels walk up from, one step when
    ``one_step`` (no key holds two cell steps). A key keeps the exponent and m = ⌈log₂(1/ζ)⌉ + 1
    mantissa bits: its floats span a relative width 2^−m ≤ ζ/2, less than half a cell (ζ·a + δ₀
    wide), unless the table would exceed ``_TABLE_MAX`` entries. Key 0 starts below thr[1], so
    every smaller |x| (cell 0) clips onto an entry 0."""
    n_cells = thr.size - 1
    if n_cells < 2:  # one cell: thr[1] = inf, the walk never moves
        return np.zeros(1, dtype=np.int32), 0, 0, True
    lo_bits, hi_bits = (np.float64(v).view(np.int64) for v in (thr[1], thr[n_cells - 1]))
    lo_bits -= 1
    shift = max(0, 52 - (max(0, math.ceil(-math.log2(zeta))) + 1))
    while ((hi_bits >> shift) - (lo_bits >> shift)) + 1 > _TABLE_MAX:
        shift += 1
    key0 = lo_bits >> shift
    keys = np.arange(key0, (hi_bits >> shift) + 1, dtype=np.int64)
    first = (keys << shift).view(np.float64)  # the smallest float per key
    table = np.searchsorted(thr[1:n_cells], first, side="right").astype(np.int32)
    one_step = bool(np.all(np.diff(table) <= 1))
    return table, int(key0), int(shift), one_step
