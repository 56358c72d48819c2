"""Compiled (numba) loops of the range coder and of the latent decoder — the fast path.

The same integer arithmetic as :class:`~eff_vision.moric.rangecoder.RangeEncoder` /
:class:`~eff_vision.moric.rangecoder.RangeDecoder` (which stay as the reference): the encoder's
output is byte-identical, the decoder's symbols identical. All state fits in int64: for a stream
this encoder wrote, ``code < rng ≤ 2**32`` holds after every symbol, so ``code << 8`` stays below
2**40. Anything outside the valid path (a target beyond the table — impossible for such a stream —
reading past the end, an Elias-gamma prefix over 40 bits, a latent beyond 2**20) stops the kernel
with a non-zero status, and the caller replays that part with the reference code from the saved
state, so malformed streams raise the reference's errors (or decode to the same values).

The latent decoder evaluates the ARM per latent in exact dyadic float64 arithmetic, as
:func:`eff_vision.moric.codec._arm_exact` does per wavefront: every product and sum is exact, so
the summation order (BLAS there, a plain loop here) cannot change a bit; then the same IEEE
operations quantise μ and ln b to the Laplace tables.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from eff_vision.moric.rangecoder import (
    LAPLACE_FRACTIONS,
    LAPLACE_SCALES,
    LAPLACE_TAIL,
    LOG_MIN,
    LOG_STEP,
    MAX_TOTAL,
    RangeDecoder,
    RangeEncoder,
    decode_laplace,
    encode_laplace,
    laplace_table,
)

_TOP = 1 << 24
_MASK = 0xFFFFFFFF
_NSYM = 2 * LAPLACE_TAIL + 2  # table size, escape last
_SAFE = 1 << 40  # |value − center| below this: every gamma code fits int64 comfortably
_HIDDEN_GRID = 256.0  # codec._HIDDEN_FRAC_BITS = 8
_LAT_MAX = 1 << 20
# |integer weight| below 2**16: with contexts ≤ 2**20, hidden values ≤ 2**20 on the 2**-8 grid
# and ≤ 256 inputs per unit, every partial sum is an integer multiple of the grid below 2**53
_WEIGHT_MAX = 1 << 16

# status codes of the kernels (0 = done)
_OK, _REPLAY = 0, 1


@lru_cache(maxsize=1)
def laplace_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(cum, freq) int64 [SCALES·FRACTIONS, 2·TAIL + 2]: row ``scale·FRACTIONS + frac`` is
    :func:`~eff_vision.moric.rangecoder.laplace_table` (scale, frac)."""
    cum = np.zeros((LAPLACE_SCALES * LAPLACE_FRACTIONS, _NSYM), np.int64)
    freq = np.zeros_like(cum)
    for s in range(LAPLACE_SCALES):
        for f in range(LAPLACE_FRACTIONS):
            c, q = laplace_table(s, f)
            cum[s * LAPLACE_FRACTIONS + f] = c
            freq[s * LAPLACE_FRACTIONS + f] = q
    return cum, freq


# --------------------------------------------------------------------------------------------
# Encoder kernels: st = [low, rng, n_out]; ``out`` the new bytes, ``prev`` the bytes already
# written (a writable view of the encoder's bytearray, for the carry)
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _enc(st, cum, freq, total, out, prev):
    low, rng, n = st[0], st[1], st[2]
    r = rng // total
    low += r * cum
    rng = r * freq
    if low > _MASK:  # carry into the bytes already written (this call's, then the earlier ones)
        low &= _MASK
        i = n - 1
        while True:
            if i >= 0:
                if out[i] == 0xFF:
                    out[i] = 0
                    i -= 1
                    continue
                out[i] += 1
            else:
                j = prev.size + i
                if prev[j] == 0xFF:
                    prev[j] = 0
                    i -= 1
                    continue
                prev[j] += 1
            break
    while rng < _TOP:
        out[n] = low >> 24
        n += 1
        low = (low << 8) & _MASK
        rng <<= 8
    st[0], st[1], st[2] = low, rng, n


@njit(cache=True)
def _enc_bits(st, value, nbits, out, prev):
    while nbits > 0:
        k = min(16, nbits)
        nbits -= k
        _enc(st, (value >> nbits) & ((1 << k) - 1), 1, 1 << k, out, prev)


@njit(cache=True)
def _enc_signed_gamma(st, v, out, prev):
    n = (2 * v if v >= 0 else -2 * v - 1) + 1
    k = 0
    while (n >> (k + 1)) > 0:
        k += 1
    for _ in range(k):
        _enc_bits(st, 0, 1, out, prev)
    _enc_bits(st, 1, 1, out, prev)
    if k:
        _enc_bits(st, n - (1 << k), k, out, prev)


@njit(cache=True)
def _enc_laplace(st, values, centers, tables, cum, freq, out, prev):
    for i in range(values.size):
        s = values[i] - centers[i]
        t = tables[i]
        if -LAPLACE_TAIL <= s <= LAPLACE_TAIL:
            j = s + LAPLACE_TAIL
            _enc(st, cum[t, j], freq[t, j], MAX_TOTAL, out, prev)
        else:
            _enc(st, cum[t, _NSYM - 1], freq[t, _NSYM - 1], MAX_TOTAL, out, prev)
            _enc_signed_gamma(st, s - LAPLACE_TAIL - 1 if s > 0 else s + LAPLACE_TAIL, out, prev)


def encode_laplace_array(
    enc: RangeEncoder, values: np.ndarray, centers: np.ndarray, scales: np.ndarray,
    fracs: np.ndarray,
) -> None:  # fmt: skip
    """``encode_laplace(enc, v, c, s, f)`` for every element, in order (byte-identical to the
    reference loop, which runs instead for values the int64 kernel must not see)."""
    v = np.ascontiguousarray(values, np.int64).ravel()
    c = np.broadcast_to(np.asarray(centers, np.int64), v.shape).ravel()
    sc = np.broadcast_to(np.asarray(scales, np.int64), v.shape).ravel()
    fr = np.broadcast_to(np.asarray(fracs, np.int64), v.shape).ravel()
    if v.size == 0:
        return
    d = v - c
    if (
        np.abs(v).max() >= _SAFE
        or np.abs(c).max() >= _SAFE
        or np.abs(d).max() >= _SAFE
        or sc.min() < 0
        or sc.max() >= LAPLACE_SCALES
        or fr.min() < 0
        or fr.max() >= LAPLACE_FRACTIONS
    ):
        for a, b, s, f in zip(v.tolist(), c.tolist(), sc.tolist(), fr.tolist(), strict=True):
            encode_laplace(enc, a, b, s, f)
        return
    # bytes: ≤ 3 per coded interval (total ≤ 2**16); an escape codes ≤ 2·41 + 4 intervals
    n_esc = int((np.abs(d) > LAPLACE_TAIL).sum())
    out = np.zeros(3 * (v.size + 90 * n_esc) + 8, np.uint8)
    cum, freq = laplace_arrays()
    st = np.array([enc.low, enc.rng, 0], np.int64)
    prev = np.frombuffer(enc.out, np.uint8) if len(enc.out) else np.zeros(0, np.uint8)
    _enc_laplace(st, v, np.ascontiguousarray(c), sc * LAPLACE_FRACTIONS + fr, cum, freq, out, prev)
    del prev  # release the view before the bytearray grows
    enc.low, enc.rng = int(st[0]), int(st[1])
    enc.out += out[: int(st[2])].tobytes()


# --------------------------------------------------------------------------------------------
# Decoder kernels: st = [pos, code, rng, r, status]
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _target(st, total):
    r = st[2] // total
    st[3] = r
    q = st[1] // r
    if q >= total:  # never for a stream this encoder wrote: replay with the reference
        st[4] = _REPLAY
        return 0
    return q


@njit(cache=True)
def _consume(st, data, cum, freq):
    r = st[3]
    code = st[1] - r * cum
    rng = r * freq
    pos = st[0]
    while rng < _TOP:
        if pos >= data.size:
            st[4] = _REPLAY
            return
        code = (code << 8) | data[pos]
        pos += 1
        rng <<= 8
    st[0], st[1], st[2] = pos, code, rng


@njit(cache=True)
def _dec_bits(st, data, nbits):
    value = 0
    while nbits > 0 and st[4] == _OK:
        k = min(16, nbits)
        nbits -= k
        v = _target(st, 1 << k)
        if st[4] != _OK:
            return 0
        _consume(st, data, v, 1)
        value = (value << k) | v
    return value


@njit(cache=True)
def _dec_laplace(st, data, center, t, cum, freq):
    x = _target(st, MAX_TOTAL)
    if st[4] != _OK:
        return 0
    lo, hi = 0, _NSYM - 1  # the last i with cum[t, i] <= x (bisect_right − 1)
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if cum[t, mid] <= x:
            lo = mid
        else:
            hi = mid - 1
    _consume(st, data, cum[t, lo], freq[t, lo])
    if lo < _NSYM - 1 or st[4] != _OK:
        return center + lo - LAPLACE_TAIL
    k = 0  # signed Elias gamma (decode_gamma, max_bits = 40)
    while True:
        b = _dec_bits(st, data, 1)
        if st[4] != _OK:
            return 0
        if b != 0:
            break
        k += 1
        if k > 40:
            st[4] = _REPLAY
            return 0
    z = ((1 << k) | _dec_bits(st, data, k) if k else 1) - 1
    rest = z // 2 if z % 2 == 0 else -(z + 1) // 2
    return center + (rest + LAPLACE_TAIL + 1 if rest >= 0 else rest - LAPLACE_TAIL)


@njit(cache=True)
def _dec_laplace_many(st, data, t, n, cum, freq, out):
    for i in range(n):
        out[i] = _dec_laplace(st, data, 0, t, cum, freq)
        if st[4] != _OK:
            return


def _state(dec: RangeDecoder) -> np.ndarray:
    return np.array([dec.pos, dec.code, dec.rng, dec._r, _OK], np.int64)


def _data(dec: RangeDecoder) -> np.ndarray:
    arr = getattr(dec, "_u8", None)
    if arr is None or arr.size != len(dec.data):
        arr = np.frombuffer(bytes(dec.data), np.uint8)
        dec._u8 = arr
    return arr


def _safe_state(dec: RangeDecoder) -> bool:
    return dec.code < dec.rng <= _MASK and dec.code >= 0


def decode_laplace_zero_center(dec: RangeDecoder, scale: int, n: int) -> np.ndarray:
    """``[decode_laplace(dec, 0, scale, 0) for _ in range(n)]`` as int64 (the reference loop runs
    from the same state where the kernel stops, so errors are the reference's)."""
    out = np.zeros(n, np.int64)
    if n == 0:
        return out
    if _safe_state(dec) and 0 <= scale < LAPLACE_SCALES:
        st = _state(dec)
        cum, freq = laplace_arrays()
        _dec_laplace_many(st, _data(dec), scale * LAPLACE_FRACTIONS, n, cum, freq, out)
        if st[4] == _OK:
            dec.pos, dec.code, dec.rng, dec._r = (int(x) for x in st[:4])
            return out
    return np.array([decode_laplace(dec, 0, scale, 0) for _ in range(n)], np.int64)


# --------------------------------------------------------------------------------------------
# Latents: exact ARM per latent + Laplace decoding, one level in coding order
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _decode_level(st, data, grid, ys, xs, offy, offx, pad, w1t, b1, w2t, b2, w3t, b3, cum, freq):
    """Decode the latents at (ys, xs) (coding order) into the padded int64 ``grid``; the weights
    are the dequantised float64 layers, transposed ([in, out])."""
    nc, nh = w1t.shape
    ctx = np.empty(nc)
    h1 = np.empty(nh)
    h2 = np.empty(nh)
    for p in range(ys.size):
        y, x = ys[p] + pad, xs[p] + pad
        for j in range(nc):
            ctx[j] = float(grid[y + offy[j], x + offx[j]])
        for i in range(nh):
            h1[i] = 0.0
        for j in range(nc):  # exact sums: the order is free
            cj = ctx[j]
            for i in range(nh):
                h1[i] += cj * w1t[j, i]
        for i in range(nh):
            v = max(h1[i] + b1[i], 0.0)
            v = min(v, 1048576.0)
            h1[i] = np.floor(v * _HIDDEN_GRID + 0.5) / _HIDDEN_GRID
            h2[i] = 0.0
        for j in range(nh):
            cj = h1[j]
            for i in range(nh):
                h2[i] += cj * w2t[j, i]
        for i in range(nh):
            v = max(h2[i] + b2[i], 0.0)
            v = min(v, 1048576.0)
            h2[i] = np.floor(v * _HIDDEN_GRID + 0.5) / _HIDDEN_GRID
        mu = 0.0
        log_b = 0.0
        for j in range(nh):
            mu += h2[j] * w3t[j, 0]
            log_b += h2[j] * w3t[j, 1]
        mu = min(max(mu + b3[0], -1048576.0), 1048576.0)
        log_b = log_b + b3[1]
        center = np.floor(mu)
        frac = int(np.floor((mu - center) * LAPLACE_FRACTIONS))
        sf = np.floor((log_b - LOG_MIN) / LOG_STEP + 0.5)
        scale = int(min(max(sf, 0.0), LAPLACE_SCALES - 1.0))
        v = _dec_laplace(st, data, int(center), scale * LAPLACE_FRACTIONS + frac, cum, freq)
        if st[4] != _OK or v > _LAT_MAX or v < -_LAT_MAX:
            st[4] = _REPLAY
            return
        grid[y, x] = v


def decode_latent_level(
    dec: RangeDecoder, grid: np.ndarray, ys: np.ndarray, xs: np.ndarray, offsets, layers, k: int,
    pad: int,
) -> bool:  # fmt: skip
    """Decode one level into ``grid`` (padded int64) with the compiled loop; False (and the
    decoder's state untouched) when the reference path must replay it."""
    if not _safe_state(dec) or ys.size == 0:
        return ys.size == 0
    if any(np.abs(a).max(initial=0) >= _WEIGHT_MAX for layer in layers for a in layer):
        return False  # beyond the bound that keeps every sum exact: the reference decides
    step = 2.0**-k
    w = [np.ascontiguousarray((wq.astype(np.float64) * step).T) for wq, _ in layers]
    b = [bq.astype(np.float64) * step for _, bq in layers]
    if not all(np.isfinite(a).all() for a in w + b) or w[2].shape[1] != 2:
        return False
    offy = np.array([o[0] for o in offsets], np.int64)
    offx = np.array([o[1] for o in offsets], np.int64)
    st = _state(dec)
    cum, freq = laplace_arrays()
    work = grid.copy()
    _decode_level(st, _data(dec), work, ys.astype(np.int64), xs.astype(np.int64), offy, offx, pad,
                  w[0], b[0], w[1], b[1], w[2], b[2], cum, freq)  # fmt: skip
    if st[4] != _OK:
        return False
    grid[...] = work
    dec.pos, dec.code, dec.rng, dec._r = (int(x) for x in st[:4])
    return True
