"""Compiled (numba) Pan-LUT inference: the ``impl="fused"`` lookups and the baked path's kernel.

Why: the paper (Pan-LUT, NeurIPS 2025, arXiv 2503.23793) sells LUT inference as far cheaper than a
CNN, but in PyTorch a lookup is 2ⁿ ``F.embedding`` gathers, each writing a full-size temporary, and
our float Pan-LUT ran at 0.3× a small CNN on one CPU thread (issue #25). Here every LUT stage is one
pass over the tile, a block of ``NB`` pixels of one image row at a time, in two loops:

1. *coordinates* (SIMD-vectorised by LLVM for 4-D tables): per pixel the cell index and the 2ⁿ
   multilinear weights, stored corner-major ``w[corner·NB + pixel]`` (whole-vector stores);
2. *accumulation*: per pixel the 2ⁿ table reads, weighted and summed. A single-output 4-D table
   (the SDLUTs: 16 of Pan-LUT's 18 lookups) is first *expanded by cell* (:func:`expand_cells`):
   the 16 corner values of cell c at ``16·c … 16·c + 15`` (64 contiguous bytes), read at constant
   offsets; two pixels are summed side by side (two dependency chains in flight).

The arithmetic is exactly the reference's (:func:`eff_vision.panlut.lut._corners`, ``_lut_core``)
in float32: per axis ``pos = x·(d−1)``, ``i0 = clamp(floor(pos), 0, d−2)``, ``f = pos − i0``; the
corner weights built axis by axis as ``[w·(1−f)] + [w·f]``; the products summed in corner order,
without fused multiply-adds (numba does not contract without ``fastmath``): the output equals
``impl="gather"`` (the tests allow 1e-6). The SDLUT chain cannot be fused per pixel — rotation r
reads rotation r−1's *neighbours* — so it runs rotation by rotation on a buffer with a one-pixel
replicate border (the reference's ``F.pad(mode="replicate")``).

Inference only (no autograd; training keeps the differentiable torch paths), float32, CPU.
"""

from __future__ import annotations

import numpy as np
from numba import njit

F32 = np.float32
NB = 256  # pixels per block (a compile-time constant: the weights' corner stride)
_INF = F32(np.inf)


# --------------------------------------------------------------------------------------------
# Table layouts (numpy, once per table)
# --------------------------------------------------------------------------------------------


def corner_offsets(n: int, d: int) -> np.ndarray:
    """Flat-index offset of corner m (bit k of m: +1 on axis k, stride d^(n−1−k)), uint64 [2ⁿ]."""
    m = np.arange(2**n)
    return sum(((m >> k) & 1) * d ** (n - 1 - k) for k in range(n)).astype(np.uint64)


def flat_table(lut: np.ndarray) -> np.ndarray:
    """[C, d, …, d] → flat [dⁿ, Cp] float32, the channels zero-padded to Cp = a multiple of 4
    (read four at a time)."""
    c = lut.shape[0]
    flat = np.zeros((lut[0].size, -(-c // 4) * 4), np.float32)
    flat[:, :c] = lut.reshape(c, -1).T
    return flat.ravel()


def expand_cells(lut: np.ndarray) -> np.ndarray:
    """Single-output 4-D tables [..., d, d, d, d] → [..., (d−1)⁴·16] float32: cell
    (i0, i1, i2, i3) (index ((i0·e + i1)·e + i2)·e + i3, e = d − 1) holds its 16 corner values in
    corner order (bit k of the corner: +1 on axis k)."""
    d = lut.shape[-1]
    e = d - 1
    out = np.empty((*lut.shape[:-4], e, e, e, e, 16), np.float32)
    for m in range(16):
        s = [(m >> k) & 1 for k in range(4)]
        out[..., m] = lut[..., s[0] : s[0] + e, s[1] : s[1] + e, s[2] : s[2] + e, s[3] : s[3] + e]
    return out.reshape(*lut.shape[:-4], -1)


# --------------------------------------------------------------------------------------------
# Block kernels: n ≤ NB pixels → b [NB] cell indices, w [2ⁿ·NB] weights (corner-major)
# --------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _axis(x, dm1, dm2):
    """The reference's split of one coordinate: (floor index as float32, fraction). A NaN
    coordinate gets index 0 (memory-safe; its output is NaN)."""
    pos = x * dm1
    i0 = np.floor(pos)
    i0 = i0 if i0 >= F32(0.0) else F32(0.0)
    i0 = i0 if i0 <= dm2 else dm2
    return i0, pos - i0


@njit(cache=True)
def _coords4(src, r0, r1, r2, r3, c0, c1, c2, c3, n, d, e, b, w):
    """4-D: coordinate k of pixel j is src[r_k, c_k + j]; cell index with stride e per axis."""
    dm1, dm2, one, es = F32(d - 1), F32(d - 2), F32(1.0), np.int32(e)
    for j in range(n):
        i0, f0 = _axis(src[r0, c0 + j], dm1, dm2)
        i1, f1 = _axis(src[r1, c1 + j], dm1, dm2)
        i2, f2 = _axis(src[r2, c2 + j], dm1, dm2)
        i3, f3 = _axis(src[r3, c3 + j], dm1, dm2)
        b[j] = ((np.int32(i0) * es + np.int32(i1)) * es + np.int32(i2)) * es + np.int32(i3)
        g0, g1, g2, g3 = one - f0, one - f1, one - f2, one - f3
        a0, a1, a2, a3 = g0 * g1, f0 * g1, g0 * f1, f0 * f1
        h0, h1, h2, h3 = a0 * g2, a1 * g2, a2 * g2, a3 * g2
        h4, h5, h6, h7 = a0 * f2, a1 * f2, a2 * f2, a3 * f2
        w[j], w[NB + j], w[2 * NB + j], w[3 * NB + j] = h0 * g3, h1 * g3, h2 * g3, h3 * g3
        w[4 * NB + j], w[5 * NB + j] = h4 * g3, h5 * g3
        w[6 * NB + j], w[7 * NB + j] = h6 * g3, h7 * g3
        w[8 * NB + j], w[9 * NB + j] = h0 * f3, h1 * f3
        w[10 * NB + j], w[11 * NB + j] = h2 * f3, h3 * f3
        w[12 * NB + j], w[13 * NB + j] = h4 * f3, h5 * f3
        w[14 * NB + j], w[15 * NB + j] = h6 * f3, h7 * f3


@njit(cache=True)
def _coords(X, x0, n, d, b, w):
    """Any number of axes (X [axes, W], pixels x0 … x0 + n − 1): the weights doubled axis by axis
    as the reference builds them; cell index with stride d per axis."""
    dm1, dm2, one = F32(d - 1), F32(d - 2), F32(1.0)
    for j in range(n):
        w[j] = one
        base = 0
        for k in range(X.shape[0]):
            i0, f = _axis(X[k, x0 + j], dm1, dm2)
            g = one - f
            base = base * d + np.int32(i0)
            m = 1 << k
            for u in range(m):
                w[(m + u) * NB + j] = w[u * NB + j] * f
                w[u * NB + j] = w[u * NB + j] * g
        b[j] = base


@njit(cache=True)
def _sum_cells(t, b, w, n, out, o, lo, hi):
    """Expanded 4-D single-output table t: out[o + j] = clamp(Σ_m t[16·b[j] + m]·w[m, j]),
    summed in corner order; two pixels side by side."""
    j = 0
    while j + 2 <= n:
        k = j + 1
        p, q = np.uint64(16) * np.uint64(b[j]), np.uint64(16) * np.uint64(b[k])
        u, v = t[p] * w[j], t[q] * w[k]
        for m in range(1, 16):
            u += t[p + np.uint64(m)] * w[m * NB + j]
            v += t[q + np.uint64(m)] * w[m * NB + k]
        out[o + j], out[o + k] = min(max(u, lo), hi), min(max(v, lo), hi)
        j += 2
    if j < n:
        p = np.uint64(16) * np.uint64(b[j])
        u = t[p] * w[j]
        for m in range(1, 16):
            u += t[p + np.uint64(m)] * w[m * NB + j]
        out[o + j] = min(max(u, lo), hi)


@njit(cache=True)
def _sum_channels(t, cp, c_out, off, b, w, n, out, o):
    """Flat table t [dⁿ, cp]: out[c, o + j] = Σ_m t[(b[j] + off[m])·cp + c]·w[m, j] for
    c < c_out, summed in corner order; four channels side by side."""
    for j in range(n):
        p = np.uint64(b[j])
        for c0 in range(0, c_out, 4):
            r = (p + off[0]) * cp + np.uint64(c0)
            wm = w[j]
            a0, a1, a2, a3 = t[r] * wm, t[r + 1] * wm, t[r + 2] * wm, t[r + 3] * wm
            for m in range(1, off.shape[0]):
                r = (p + off[m]) * cp + np.uint64(c0)
                wm = w[m * NB + j]
                a0 += t[r] * wm
                a1 += t[r + 1] * wm
                a2 += t[r + 2] * wm
                a3 += t[r + 3] * wm
            for c, a in ((c0, a0), (c0 + 1, a1), (c0 + 2, a2), (c0 + 3, a3)):
                if c < c_out:
                    out[c, o + j] = a


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def lut_apply(x, t, d, c_out, off):
    """Pointwise multilinear LUT: x [B, n, H, W] float32, t = :func:`flat_table` of a
    [c_out, d, …, d] table, off = :func:`corner_offsets` → [B, c_out, H, W]."""
    nb, n, h, wd = x.shape
    cp = np.uint64(t.shape[0] // d**n)
    out = np.empty((nb, c_out, h, wd), np.float32)
    X = np.empty((n, wd), np.float32)
    b = np.empty(NB, np.int32)
    w = np.empty(NB << n, np.float32)
    for bi in range(nb):
        for i in range(h):
            for k in range(n):
                X[k] = x[bi, k, i]
            for x0 in range(0, wd, NB):
                m = min(NB, wd - x0)
                if n == 4:
                    _coords4(X, 0, 1, 2, 3, x0, x0, x0, x0, m, d, d, b, w)
                else:
                    _coords(X, x0, m, d, b, w)
                _sum_channels(t, cp, c_out, off, b, w, m, out[bi, :, i], x0)
    return out


@njit(cache=True)
def _replicate_border(a):
    """a [C, H+2, W+2]: the one-pixel border copies the nearest interior pixel."""
    for c in range(a.shape[0]):
        a[c, 1:-1, 0] = a[c, 1:-1, 1]
        a[c, 1:-1, -1] = a[c, 1:-1, -2]
        a[c, 0] = a[c, 1]
        a[c, -1] = a[c, -2]


@njit(cache=True)
def sd_apply(x, cells, d, taps, mean):
    """SDLUT: x [B, C, H, W] float32; cells [R, C, (d−1)⁴·16] (:func:`expand_cells` of the
    [R, C, d, d, d, d] tables); taps [R, 4, 2] (di, dj) per rotation. Chain (``mean`` False):
    rotation r reads rotation r−1's output clamped to [0, 1]; mean: every rotation reads x, the
    unclamped outputs summed in order, divided by R, clamped."""
    nb, nc, h, wd = x.shape
    R = cells.shape[0]
    out = np.empty((nb, nc, h, wd), np.float32)
    cur = np.empty((nc, h + 2, wd + 2), np.float32)
    nxt = np.empty((nc, h + 2, wd + 2), np.float32)
    acc = np.empty((nc, h, wd), np.float32)
    row = np.empty(wd, np.float32)
    b = np.empty(NB, np.int32)
    w = np.empty(16 * NB, np.float32)
    lo, hi = (-_INF, _INF) if mean else (F32(0.0), F32(1.0))
    for bi in range(nb):
        cur[:, 1:-1, 1:-1] = x[bi]
        _replicate_border(cur)
        acc[:] = 0.0
        for r in range(R):
            tp = taps[r]
            for c in range(nc):
                t, src = cells[r, c], cur[c]
                for i in range(h):
                    dst, o = (row, 0) if mean else (nxt[c, 1 + i], 1)
                    for x0 in range(0, wd, NB):
                        c0 = 1 + x0
                        _coords4(src, 1 + i + tp[0, 0], 1 + i + tp[1, 0], 1 + i + tp[2, 0],
                                 1 + i + tp[3, 0], c0 + tp[0, 1], c0 + tp[1, 1], c0 + tp[2, 1],
                                 c0 + tp[3, 1], min(NB, wd - x0), d, d - 1, b, w)  # fmt: skip
                        _sum_cells(t, b, w, min(NB, wd - x0), dst, o + x0, lo, hi)
                    if mean:
                        acc[c, i] += row
            if not mean:
                _replicate_border(nxt)
                cur, nxt = nxt, cur
        if mean:
            out[bi] = np.minimum(np.maximum(acc / F32(R), F32(0.0)), F32(1.0))
        else:
            out[bi] = cur[:, 1:-1, 1:-1]
    return out


@njit(cache=True)
def nearest_apply(x, q, d, values):
    """Baked lookup: x [B, n, H, W] float32, q [C, dⁿ] uint8 → [B, C, H, W] with
    out[c] = values[q[c, Σ_k rint(x_k·(d−1))·d^(n−1−k)]] (rint: half to even, as torch.round;
    ``values``: the float32 of each uint8 code). Indices outside the grid (x outside [0, 1], NaN)
    are clamped to it."""
    nb, n, h, wd = x.shape
    nc = q.shape[0]
    dm1 = F32(d - 1)
    out = np.empty((nb, nc, h, wd), np.float32)
    for bi in range(nb):
        for i in range(h):
            for j in range(wd):
                p = 0
                for k in range(n):
                    v = np.rint(x[bi, k, i, j] * dm1)
                    v = v if v >= F32(0.0) else F32(0.0)
                    p = p * d + np.int32(v if v <= dm1 else dm1)
                for c in range(nc):
                    out[bi, c, i, j] = values[q[c, p]]
    return out
