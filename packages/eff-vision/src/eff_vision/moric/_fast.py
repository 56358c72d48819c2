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
def laplace_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cum, freq, lut) of every Laplace table: row ``scale·FRACTIONS + frac`` of cum (int64
    [rows, 2·TAIL + 3], a last column = 2**16) and freq (int64 [rows, 2·TAIL + 2]) is
    :func:`~eff_vision.moric.rangecoder.laplace_table` (scale, frac); ``lut[row, q]`` (int16
    [rows, 256]) is the last symbol with cum ≤ 256·q, where the decoder's search starts."""
    rows = LAPLACE_SCALES * LAPLACE_FRACTIONS
    cum = np.full((rows, _NSYM + 1), MAX_TOTAL, np.int64)
    freq = np.zeros((rows, _NSYM), np.int64)
    lut = np.zeros((rows, 256), np.int16)
    for s in range(LAPLACE_SCALES):
        for f in range(LAPLACE_FRACTIONS):
            c, q = laplace_table(s, f)
            t = s * LAPLACE_FRACTIONS + f
            cum[t, :_NSYM], freq[t] = c, q
            lut[t] = np.searchsorted(c, np.arange(256) * 256, side="right") - 1
    return cum, freq, lut


# --------------------------------------------------------------------------------------------
# Encoder kernels: state (low, rng, n_out) in locals; ``out`` receives the new bytes, ``prev``
# is a writable view of the bytes the encoder had already written (reached by a carry)
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _carry(out, n, prev):
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
        return


@njit(cache=True, inline="always")
def _enc(low, rng, n, cum, freq, total, out, prev):
    """RangeEncoder.encode."""
    r = rng // total
    low += r * cum
    rng = r * freq
    if low > _MASK:  # carry into the bytes already written
        low &= _MASK
        _carry(out, n, prev)
    while rng < _TOP:
        out[n] = low >> 24
        n += 1
        low = (low << 8) & _MASK
        rng <<= 8
    return low, rng, n


@njit(cache=True)
def _enc_bits(low, rng, n, value, nbits, out, prev):
    while nbits > 0:
        k = min(16, nbits)
        nbits -= k
        low, rng, n = _enc(low, rng, n, (value >> nbits) & ((1 << k) - 1), 1, 1 << k, out, prev)
    return low, rng, n


@njit(cache=True)
def _enc_signed_gamma(low, rng, n, v, out, prev):
    """RangeEncoder.encode_signed_gamma: zig-zag, then Elias gamma bit by bit."""
    z = (2 * v if v >= 0 else -2 * v - 1) + 1
    k = 0
    while (z >> (k + 1)) > 0:
        k += 1
    for _ in range(k):
        low, rng, n = _enc_bits(low, rng, n, 0, 1, out, prev)
    low, rng, n = _enc_bits(low, rng, n, 1, 1, out, prev)
    if k:
        low, rng, n = _enc_bits(low, rng, n, z - (1 << k), k, out, prev)
    return low, rng, n


@njit(cache=True)
def _enc_laplace(st, values, centers, tables, cum, freq, out, prev):
    low, rng, n = st[0], st[1], st[2]
    for i in range(values.size):
        s = values[i] - centers[i]
        t = tables[i]
        if -LAPLACE_TAIL <= s <= LAPLACE_TAIL:
            j = s + LAPLACE_TAIL
            low, rng, n = _enc(low, rng, n, cum[t, j], freq[t, j], MAX_TOTAL, out, prev)
        else:
            e = _NSYM - 1
            low, rng, n = _enc(low, rng, n, cum[t, e], freq[t, e], MAX_TOTAL, out, prev)
            # the sign of the remainder tells the side: ≥ 0 above the window, < 0 below it
            rest = s - LAPLACE_TAIL - 1 if s > 0 else s + LAPLACE_TAIL
            low, rng, n = _enc_signed_gamma(low, rng, n, rest, out, prev)
    st[0], st[1], st[2] = low, rng, n


def encode_laplace_array(
    enc: RangeEncoder, values: np.ndarray, centers: np.ndarray | int, scales: np.ndarray | int,
    fracs: np.ndarray | int,
) -> None:  # fmt: skip
    """``encode_laplace(enc, v, c, s, f)`` for every element, in order (byte-identical to that
    reference loop, which runs instead for values the int64 kernel must not see)."""
    v = np.ascontiguousarray(values, np.int64).ravel()
    if v.size == 0:
        return
    c = np.broadcast_to(np.asarray(centers, np.int64), v.shape).ravel()
    sc = np.broadcast_to(np.asarray(scales, np.int64), v.shape).ravel()
    fr = np.broadcast_to(np.asarray(fracs, np.int64), v.shape).ravel()
    ad = np.abs(v - c)
    if (
        max(int(np.abs(v).max()), int(np.abs(c).max()), int(ad.max())) >= _SAFE
        or not (sc.min() >= 0 and sc.max() < LAPLACE_SCALES)
        or not (fr.min() >= 0 and fr.max() < LAPLACE_FRACTIONS)
    ):
        for a, b, s, f in zip(v.tolist(), c.tolist(), sc.tolist(), fr.tolist(), strict=True):
            encode_laplace(enc, a, b, s, f)
        return
    # bytes: ≤ 3 per coded interval (total ≤ 2**16); an escape codes ≤ 2·41 + 4 intervals
    n_esc = int(np.count_nonzero(ad > LAPLACE_TAIL))
    out = np.empty(3 * (v.size + 90 * n_esc) + 8, np.uint8)
    cum, freq, _ = laplace_arrays()
    st = np.array([enc.low, enc.rng, 0], np.int64)
    prev = np.frombuffer(enc.out, np.uint8) if len(enc.out) else np.zeros(0, np.uint8)
    tables = sc * LAPLACE_FRACTIONS + fr
    _enc_laplace(st, v, np.ascontiguousarray(c), tables, cum, freq, out, prev)
    del prev  # release the view before the bytearray grows
    enc.low, enc.rng = int(st[0]), int(st[1])
    enc.out += out[: int(st[2])].tobytes()


# --------------------------------------------------------------------------------------------
# Decoder kernels: state (pos, code, rng, r) in locals, ``ok`` False = replay with the reference
# --------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _fill(pos, code, rng, data):
    """The renormalisation of RangeDecoder.consume (False: read past the end)."""
    while rng < _TOP:
        if pos >= data.size:
            return pos, code, rng, False
        code = (code << 8) | data[pos]
        pos += 1
        rng <<= 8
    return pos, code, rng, True


@njit(cache=True)
def _dec_bits(pos, code, rng, data, nbits):
    """RangeDecoder.decode_bits → (value, pos, code, rng, r, ok)."""
    value, r = 0, 1
    while nbits > 0:
        k = min(16, nbits)
        nbits -= k
        total = 1 << k
        r = rng // total
        q = code // r
        if q >= total:  # never for a stream this encoder wrote
            return 0, pos, code, rng, r, False
        code -= r * q
        rng = r
        pos, code, rng, ok = _fill(pos, code, rng, data)
        if not ok:
            return 0, pos, code, rng, r, False
        value = (value << k) | q
    return value, pos, code, rng, r, True


@njit(cache=True)
def _dec_gamma(pos, code, rng, data):
    """RangeDecoder.decode_gamma (max_bits = 40) → (n, pos, code, rng, r, ok)."""
    k = 0
    while True:
        b, pos, code, rng, r, ok = _dec_bits(pos, code, rng, data, 1)
        if not ok:
            return 0, pos, code, rng, r, False
        if b != 0:
            break
        k += 1
        if k > 40:
            return 0, pos, code, rng, r, False
    if k == 0:
        return 1, pos, code, rng, r, True
    bits, pos, code, rng, r, ok = _dec_bits(pos, code, rng, data, k)
    return (1 << k) | bits, pos, code, rng, r, ok


@njit(cache=True)
def _dec_escape(pos, code, rng, data):
    """decode_signed_gamma → (rest, pos, code, rng, r, ok)."""
    g, pos, code, rng, r, ok = _dec_gamma(pos, code, rng, data)
    if not ok:
        return 0, pos, code, rng, r, False
    z = g - 1
    return (z // 2 if z % 2 == 0 else -(z + 1) // 2), pos, code, rng, r, True


@njit(cache=True)
def _dec_laplace_batch(st, data, centers, tabs, n, cum, freq, lut, out):
    """``out[k] = decode_laplace(dec, centers[k], scale, frac)`` for k < n (``tabs[k]`` = the
    table row ``scale·FRACTIONS + frac``), the decoder's state in ``st``; st[4] = _REPLAY (and
    st[:4] untouched) when the reference must decide. The symbol decoding is written out in the
    loop: behind a helper function (even ``inline="always"``) numba's code ran ~4x slower."""
    pos, code, rng, r = st[0], st[1], st[2], st[3]
    for k in range(n):
        t = tabs[k]
        r = rng >> 16  # rng // MAX_TOTAL
        x = code // r
        if x >= MAX_TOTAL:  # the reference clamps; a stream this encoder wrote never gets here
            st[4] = _REPLAY
            return
        i = lut[t, x >> 8]  # then the last i with cum ≤ x (bisect_right − 1)
        while cum[t, i + 1] <= x:
            i += 1
        code -= r * cum[t, i]
        rng = r * freq[t, i]
        pos, code, rng, ok = _fill(pos, code, rng, data)
        if not ok:
            st[4] = _REPLAY
            return
        if i < _NSYM - 1:
            out[k] = centers[k] + i - LAPLACE_TAIL
            continue
        rest, pos, code, rng, r, ok = _dec_escape(pos, code, rng, data)
        if not ok:
            st[4] = _REPLAY
            return
        out[k] = centers[k] + (rest + LAPLACE_TAIL + 1 if rest >= 0 else rest - LAPLACE_TAIL)
    st[0], st[1], st[2], st[3] = pos, code, rng, r


def _state(dec: RangeDecoder) -> np.ndarray:
    return np.array([dec.pos, dec.code, dec.rng, dec._r, _OK], np.int64)


def _data(dec: RangeDecoder) -> np.ndarray:
    arr = getattr(dec, "_u8", None)
    if arr is None or arr.size != len(dec.data):
        arr = np.frombuffer(bytes(dec.data), np.uint8)
        dec._u8 = arr
    return arr


def _safe_state(dec: RangeDecoder) -> bool:
    return 0 <= dec.code < dec.rng <= _MASK and 0 < dec._r <= _MASK


def decode_laplace_zero_center(dec: RangeDecoder, scale: int, n: int) -> np.ndarray:
    """``[decode_laplace(dec, 0, scale, 0) for _ in range(n)]`` as int64 (the reference loop runs
    from the same state when the kernel cannot finish, so errors are the reference's)."""
    out = np.zeros(n, np.int64)
    if n == 0:
        return out
    if _safe_state(dec) and 0 <= scale < LAPLACE_SCALES:
        st = _state(dec)
        cum, freq, lut = laplace_arrays()
        tabs = np.full(n, scale * LAPLACE_FRACTIONS, np.int64)
        _dec_laplace_batch(st, _data(dec), np.zeros(n, np.int64), tabs, n, cum, freq, lut, out)
        if st[4] == _OK:
            dec.pos, dec.code, dec.rng, dec._r = (int(x) for x in st[:4])
            return out
    return np.array([decode_laplace(dec, 0, scale, 0) for _ in range(n)], np.int64)


# --------------------------------------------------------------------------------------------
# Latents: exact ARM per latent + Laplace decoding, one level in coding order
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _layer(x, wt, b, out, n, relu):
    """out[:, :n] = x[:, :n]ᵀ-batch @ wt + b (features × positions, positions innermost so the
    loop vectorises); hidden layers then take codec._arm_exact's ReLU, clip at 2**20 and rounding
    to the 2**-8 grid. Every sum is exact (module docstring), so neither the order of the terms
    (bias first, four inputs per pass) nor FMA contraction can change a bit. ``n`` is rounded up
    to a whole vector (the arrays are that wide; the extra columns are never read back)."""
    nin, nout = wt.shape
    n = min(out.shape[1], (n + 7) & ~7)
    for i in range(nout):
        acc = out[i]
        bi = b[i]
        for p in range(n):
            acc[p] = bi
        j = 0
        while j + 4 <= nin:
            w0, w1, w2, w3 = wt[j, i], wt[j + 1, i], wt[j + 2, i], wt[j + 3, i]
            x0, x1, x2, x3 = x[j], x[j + 1], x[j + 2], x[j + 3]
            for p in range(n):
                acc[p] += x0[p] * w0 + x1[p] * w1 + x2[p] * w2 + x3[p] * w3
            j += 4
        while j < nin:
            wj = wt[j, i]
            xj = x[j]
            for p in range(n):
                acc[p] += xj[p] * wj
            j += 1
        if relu:
            for p in range(n):
                v = min(max(acc[p], 0.0), 1048576.0)
                acc[p] = np.floor(v * _HIDDEN_GRID + 0.5) / _HIDDEN_GRID


@njit(cache=True)
def _decode_level(
    st, data, grid, ys, xs, bounds, offy, offx, pad, w1t, b1, w2t, b2, w3t, b3, cum, freq, lut
):
    """Decode the latents at (ys, xs) (coding order, wavefront k = [bounds[k], bounds[k+1]))
    into the padded int64 ``grid``: per wavefront the ARM runs on the whole batch, as the
    reference does (the weights: dequantised float64 layers, transposed to [in, out])."""
    nc, nh = w1t.shape
    pmax = 1
    for k in range(bounds.size - 1):
        pmax = max(pmax, bounds[k + 1] - bounds[k])
    pmax = (pmax + 7) & ~7  # whole vectors (_layer)
    ctx = np.zeros((nc, pmax))
    h1 = np.zeros((nh, pmax))
    h2 = np.zeros((nh, pmax))
    o = np.zeros((2, pmax))
    centers = np.zeros(pmax, np.int64)
    tabs = np.zeros(pmax, np.int64)
    vals = np.zeros(pmax, np.int64)
    flat = grid.reshape(-1)  # contexts by flat index: position + offset
    gw = grid.shape[1]
    base = (ys + pad) * gw + xs + pad
    off = offy * gw + offx
    for k in range(bounds.size - 1):
        lo, n = bounds[k], bounds[k + 1] - bounds[k]
        for j in range(nc):
            oj = off[j]
            cj = ctx[j]
            for p in range(n):
                cj[p] = float(flat[base[lo + p] + oj])
        _layer(ctx, w1t, b1, h1, n, True)
        _layer(h1, w2t, b2, h2, n, True)
        _layer(h2, w3t, b3, o, n, False)
        for p in range(n):
            mu = min(max(o[0, p], -1048576.0), 1048576.0)
            center = np.floor(mu)
            frac = int(np.floor((mu - center) * LAPLACE_FRACTIONS))
            sf = np.floor((o[1, p] - LOG_MIN) / LOG_STEP + 0.5)
            scale = int(min(max(sf, 0.0), LAPLACE_SCALES - 1.0))
            centers[p] = int(center)
            tabs[p] = scale * LAPLACE_FRACTIONS + frac
        _dec_laplace_batch(st, data, centers, tabs, n, cum, freq, lut, vals)
        if st[4] != _OK:
            return
        for p in range(n):
            v = vals[p]
            if v > _LAT_MAX or v < -_LAT_MAX:
                st[4] = _REPLAY
                return
            flat[base[lo + p]] = v


def decode_latent_level(
    dec: RangeDecoder, grid: np.ndarray, ys: np.ndarray, xs: np.ndarray, waves: np.ndarray,
    offsets, layers, k: int, pad: int,
) -> bool:  # fmt: skip
    """Decode one level into ``grid`` (padded int64; positions in coding order, ``waves`` their
    wavefront ids) with the compiled loop; False (and the decoder's state untouched) when the
    reference path must replay it."""
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
    cum, freq, lut = laplace_arrays()
    work = grid.copy()
    bounds = np.r_[0, np.flatnonzero(np.diff(waves)) + 1, ys.size].astype(np.int64)
    _decode_level(st, _data(dec), work, ys.astype(np.int64), xs.astype(np.int64), bounds, offy,
                  offx, pad,
                  w[0], b[0], w[1], b[1], w[2], b[2], cum, freq, lut)  # fmt: skip
    if st[4] != _OK:
        return False
    grid[...] = work
    dec.pos, dec.code, dec.rng, dec._r = (int(x) for x in st[:4])
    return True


# --------------------------------------------------------------------------------------------
# Contours: the crack-code paths of contours._decode_paths
# --------------------------------------------------------------------------------------------

_TURN_INCREMENT = 24  # contours' AdaptiveModel(3, contexts=4): the default increment
_DY = np.array([0, 1, 0, -1], np.int64)  # contours._DIRS: right, down, left, up
_DX = np.array([1, 0, -1, 0], np.int64)


@njit(cache=True, inline="always")
def _edge(h, w, nh, y, x, d):
    """contours._EdgeGrid.edge: the id of the edge leaving vertex (y, x) in direction d, or −1."""
    if d == 0:
        return y * w + x if x < w and 0 < y < h else -1
    if d == 2:
        return y * w + x - 1 if x > 0 and 0 < y < h else -1
    if d == 1:
        return nh + y * (w + 1) + x if y < h and 0 < x < w else -1
    return nh + (y - 1) * (w + 1) + x if y > 0 and 0 < x < w else -1


@njit(cache=True)
def _dec_paths(st, data, h, w, vbits, used):
    """Every path of the payload into ``used`` (edge ids); st[4] = _REPLAY on anything the
    reference would reject or that this kernel does not model (the reference then decides)."""
    nh = (h + 1) * w
    n_edges = nh + h * (w + 1)
    freq = np.ones((4, 3), np.int64)  # the turn model: 3 symbols × 4 contexts
    tot = np.full(4, 3, np.int64)
    pos, code, rng, r = st[0], st[1], st[2], st[3]
    g, pos, code, rng, r, ok = _dec_gamma(pos, code, rng, data)
    if not ok or g - 1 > n_edges:
        st[4] = _REPLAY
        return
    total = 0
    for _ in range(g - 1):
        v, pos, code, rng, r, ok = _dec_bits(pos, code, rng, data, vbits)
        if not ok or v >= (h + 1) * (w + 1):
            st[4] = _REPLAY
            return
        y, x = v // (w + 1), v % (w + 1)
        length, pos, code, rng, r, ok = _dec_gamma(pos, code, rng, data)
        total += length
        if not ok or total > n_edges:
            st[4] = _REPLAY
            return
        d, pos, code, rng, r, ok = _dec_bits(pos, code, rng, data, 2)
        if not ok:
            st[4] = _REPLAY
            return
        ctx = 3
        for k in range(length):
            if k:  # AdaptiveModel.decode(dec, ctx): straight, right turn, left turn
                t = tot[ctx]
                r = rng // t
                q = code // r
                if q >= t:  # the reference clamps; a stream the encoder wrote never gets here
                    st[4] = _REPLAY
                    return
                s, cum = 0, 0
                while q >= cum + freq[ctx, s]:
                    cum += freq[ctx, s]
                    s += 1
                code -= r * cum
                rng = r * freq[ctx, s]
                pos, code, rng, ok = _fill(pos, code, rng, data)
                if not ok:
                    st[4] = _REPLAY
                    return
                freq[ctx, s] += _TURN_INCREMENT
                tot[ctx] += _TURN_INCREMENT
                if tot[ctx] > MAX_TOTAL:
                    tot[ctx] = 0
                    for i in range(3):
                        freq[ctx, i] = (freq[ctx, i] + 1) // 2
                        tot[ctx] += freq[ctx, i]
                ctx = s
                if s == 1:
                    d = (d + 3) % 4
                elif s == 2:
                    d = (d + 1) % 4
            e = _edge(h, w, nh, y, x, d)
            if e < 0 or used[e]:
                st[4] = _REPLAY
                return
            used[e] = True
            y += _DY[d]
            x += _DX[d]
    st[0], st[1], st[2], st[3] = pos, code, rng, r


def decode_paths(
    dec: RangeDecoder, h: int, w: int, vbits: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """``contours._decode_paths`` with the compiled loop: the (hm, vm) edge masks, or None (and
    the decoder's state untouched) when the reference path must replay the payload."""
    if not _safe_state(dec):
        return None
    nh = (h + 1) * w
    used = np.zeros(nh + h * (w + 1), np.bool_)
    st = _state(dec)
    _dec_paths(st, _data(dec), h, w, vbits, used)
    if st[4] != _OK:
        return None
    dec.pos, dec.code, dec.rng, dec._r = (int(x) for x in st[:4])
    return used[:nh].reshape(h + 1, w), used[nh:].reshape(h, w + 1)


@njit(cache=True)
def wavefront_positions(fp, a):
    """The coded positions of footprint ``fp`` (H×W bool) in coding order — wavefronts
    t = a·y + x ascending, rows ascending within one — as (ys, xs, t): what ``np.nonzero`` and
    codec._wavefront_order's lexsort give, in one pass over the diagonals."""
    h, w = fp.shape
    n = 0
    for y in range(h):
        for x in range(w):
            n += fp[y, x]
    ys = np.empty(n, np.int64)
    xs = np.empty(n, np.int64)
    ts = np.empty(n, np.int64)
    k = 0
    for t in range(a * (h - 1) + w):
        for y in range(max(0, (t - w + a) // a), min(h - 1, t // a) + 1):  # 0 ≤ t − a·y < w
            x = t - a * y
            if fp[y, x]:
                ys[k], xs[k], ts[k] = y, x, t
                k += 1
    return ys, xs, ts


@njit(cache=True)
def components(hm, vm):
    """4-connected components of the pixel grid cut by the crack edges (hm (H+1)×W, vm H×(W+1)):
    ``(n, comp)`` with the ids of scipy's ``connected_components`` (a component's id is its rank
    by its first pixel in raster order), by a flood fill from each unlabelled pixel in raster
    order."""
    h, w = vm.shape[0], hm.shape[1]
    comp = np.full(h * w, -1, np.int32)
    stack = np.empty(h * w, np.int64)
    n = 0
    for s in range(h * w):
        if comp[s] >= 0:
            continue
        comp[s] = n
        stack[0] = s
        top = 1
        while top:
            top -= 1
            p = stack[top]
            i, j = p // w, p % w
            if j + 1 < w and not vm[i, j + 1] and comp[p + 1] < 0:
                comp[p + 1] = n
                stack[top] = p + 1
                top += 1
            if j > 0 and not vm[i, j] and comp[p - 1] < 0:
                comp[p - 1] = n
                stack[top] = p - 1
                top += 1
            if i + 1 < h and not hm[i + 1, j] and comp[p + w] < 0:
                comp[p + w] = n
                stack[top] = p + w
                top += 1
            if i > 0 and not hm[i, j] and comp[p - w] < 0:
                comp[p - w] = n
                stack[top] = p - w
                top += 1
        n += 1
    return n, comp.reshape(h, w)
