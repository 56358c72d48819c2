"""A small integer range coder (the entropy coder that defines MoRIC's format).

32-bit range coder with carry propagation (Schindler/Subbotin style): the encoder keeps ``low`` and
``rng``, narrows the interval by ``r = rng // total`` per symbol and emits a byte whenever
``rng < 2**24``; a carry out of ``low`` is propagated into the bytes already written. The decoder
tracks ``code − low``. Totals must stay ≤ 2**16 so that r ≥ 2**8 (the per-symbol loss from the
truncation is below 0.006 bit). The stream ends with the 4 bytes of ``low``, so the decoder consumes
exactly the bytes the encoder wrote; reading past the end raises :class:`RangeDecodeError`.

Models:

- :class:`AdaptiveModel` — an adaptive frequency table per context (counts start at 1, grow by
  ``increment`` and are halved when the total would exceed 2**16), for the chain codes and labels.
- :func:`laplace_table` — quantised discretised-Laplace tables (scale on a log grid, location
  fraction on a 1/8 grid, an escape symbol for the tails) for latents and network parameters.
- raw bits (``encode_bits``) and Elias-gamma / signed Elias-gamma integers on top of them.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from functools import lru_cache

import numpy as np

__all__ = [
    "LAPLACE_FRACTIONS",
    "LAPLACE_SCALES",
    "LAPLACE_TAIL",
    "AdaptiveModel",
    "RangeDecodeError",
    "RangeDecoder",
    "RangeEncoder",
    "decode_laplace",
    "encode_laplace",
    "laplace_bits",
    "laplace_scale_index",
    "laplace_table",
]

_TOP = 1 << 24
_MASK = 0xFFFFFFFF
MAX_TOTAL = 1 << 16


class RangeDecodeError(ValueError):
    """The range-coded payload is truncated or decodes to an impossible symbol."""


class RangeEncoder:
    def __init__(self) -> None:
        self.low = 0
        self.rng = _MASK
        self.out = bytearray()

    def encode(self, cum: int, freq: int, total: int) -> None:
        """Code the symbol occupying [cum, cum + freq) of [0, total)."""
        r = self.rng // total
        self.low += r * cum
        self.rng = r * freq
        if self.low > _MASK:  # carry into the bytes already written
            self.low &= _MASK
            i = len(self.out) - 1
            while self.out[i] == 0xFF:
                self.out[i] = 0
                i -= 1
            self.out[i] += 1
        while self.rng < _TOP:
            self.out.append(self.low >> 24)
            self.low = (self.low << 8) & _MASK
            self.rng <<= 8

    def encode_bits(self, value: int, nbits: int) -> None:
        """``nbits`` raw (equiprobable) bits of a non-negative int, most significant chunk first."""
        if value < 0 or value >= (1 << nbits):
            raise ValueError(f"value {value} does not fit in {nbits} bits")
        while nbits > 0:
            k = min(16, nbits)
            nbits -= k
            self.encode((value >> nbits) & ((1 << k) - 1), 1, 1 << k)

    def encode_gamma(self, n: int) -> None:
        """Elias-gamma code of n ≥ 1: ⌊log2 n⌋ zeros, then n in ⌊log2 n⌋ + 1 bits."""
        if n < 1:
            raise ValueError(f"Elias-gamma codes integers >= 1, got {n}")
        k = n.bit_length() - 1
        for _ in range(k):  # the unary prefix, one binary symbol per bit (as the decoder reads it)
            self.encode_bits(0, 1)
        self.encode_bits(1, 1)
        if k:
            self.encode_bits(n - (1 << k), k)

    def encode_signed_gamma(self, v: int) -> None:
        """Zig-zag (0, −1, 1, −2, …) then Elias-gamma of zigzag + 1."""
        self.encode_gamma((2 * v if v >= 0 else -2 * v - 1) + 1)

    def finish(self) -> bytes:
        self.out += self.low.to_bytes(4, "big")
        return bytes(self.out)


class RangeDecoder:
    def __init__(self, data: bytes) -> None:
        if len(data) < 4:
            raise RangeDecodeError(f"range-coded payload truncated ({len(data)} bytes < 4)")
        self.data = data
        self.pos = 4
        self.code = int.from_bytes(data[:4], "big")
        self.rng = _MASK
        self._r = 1

    def _next(self) -> int:
        if self.pos >= len(self.data):
            raise RangeDecodeError("range-coded payload truncated (read past its end)")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def target(self, total: int) -> int:
        """The cumulative count the next symbol's interval contains."""
        self._r = self.rng // total
        return min(self.code // self._r, total - 1)

    def consume(self, cum: int, freq: int) -> None:
        self.code -= self._r * cum
        self.rng = self._r * freq
        while self.rng < _TOP:
            self.code = (self.code << 8) | self._next()
            self.rng <<= 8

    def decode_bits(self, nbits: int) -> int:
        value = 0
        while nbits > 0:
            k = min(16, nbits)
            nbits -= k
            v = self.target(1 << k)
            self.consume(v, 1)
            value = (value << k) | v
        return value

    def decode_gamma(self, max_bits: int = 40) -> int:
        k = 0
        while self.decode_bits(1) == 0:
            k += 1
            if k > max_bits:
                raise RangeDecodeError(f"Elias-gamma prefix longer than {max_bits} bits")
        return (1 << k) | self.decode_bits(k) if k else 1

    def decode_signed_gamma(self) -> int:
        z = self.decode_gamma() - 1
        return z // 2 if z % 2 == 0 else -(z + 1) // 2

    def exhausted(self) -> bool:
        """True when every byte has been read (the encoder's final 4 bytes included)."""
        return self.pos == len(self.data)


class AdaptiveModel:
    """Adaptive frequencies over ``nsym`` symbols for each of ``contexts`` contexts."""

    def __init__(self, nsym: int, contexts: int = 1, increment: int = 24) -> None:
        self.nsym, self.increment = nsym, increment
        self.freq = [[1] * nsym for _ in range(contexts)]
        self.total = [nsym] * contexts

    def _update(self, ctx: int, s: int) -> None:
        f = self.freq[ctx]
        f[s] += self.increment
        self.total[ctx] += self.increment
        if self.total[ctx] > MAX_TOTAL:
            for i in range(self.nsym):
                f[i] = (f[i] + 1) // 2
            self.total[ctx] = sum(f)

    def encode(self, enc: RangeEncoder, s: int, ctx: int = 0) -> None:
        f = self.freq[ctx]
        enc.encode(sum(f[:s]), f[s], self.total[ctx])
        self._update(ctx, s)

    def decode(self, dec: RangeDecoder, ctx: int = 0) -> int:
        f = self.freq[ctx]
        t = dec.target(self.total[ctx])
        cum = 0
        for s in range(self.nsym):
            if t < cum + f[s]:
                dec.consume(cum, f[s])
                self._update(ctx, s)
                return s
            cum += f[s]
        raise RangeDecodeError("adaptive model: target outside the table")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# Quantised Laplace tables
# --------------------------------------------------------------------------------------------

LAPLACE_SCALES = 64  # log-spaced scales b_s = B_MIN · (B_MAX / B_MIN)^(s / 63)
LAPLACE_FRACTIONS = 8  # location fraction grid
LAPLACE_TAIL = 40  # symbols k − ⌊μ⌋ ∈ [−TAIL, TAIL]; beyond: escape + signed Elias-gamma
B_MIN, B_MAX = 0.04, 64.0
LOG_STEP = math.log(B_MAX / B_MIN) / (LAPLACE_SCALES - 1)
LOG_MIN = math.log(B_MIN)


def laplace_scale_index(log_b: float) -> int:
    """Index of the nearest grid scale for ln b (pure arithmetic, no transcendental calls)."""
    s = math.floor((log_b - LOG_MIN) / LOG_STEP + 0.5)
    return min(max(s, 0), LAPLACE_SCALES - 1)


@lru_cache(maxsize=LAPLACE_SCALES * LAPLACE_FRACTIONS)
def laplace_table(scale: int, frac: int) -> tuple[list[int], list[int]]:
    """(cum, freq) over 2·TAIL + 2 symbols (the last one = escape) for Laplace(μ, b_scale) with
    μ − ⌊μ⌋ = frac / 8, discretised on the integers relative to ⌊μ⌋; every freq ≥ 1, sum 2**16."""
    b = B_MIN * math.exp(scale * LOG_STEP)
    mu = frac / LAPLACE_FRACTIONS
    k = np.arange(-LAPLACE_TAIL, LAPLACE_TAIL + 1, dtype=np.float64)

    def cdf(x: np.ndarray) -> np.ndarray:
        z = (x - mu) / b
        return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0)), 1 - 0.5 * np.exp(-np.maximum(z, 0)))

    p = cdf(k + 0.5) - cdf(k - 0.5)
    tail = max(0.0, 1.0 - float(p.sum()))
    probs = np.append(p, tail)
    n = probs.size
    freq = np.floor(probs * (MAX_TOTAL - n)).astype(np.int64) + 1
    freq[int(np.argmax(freq))] += MAX_TOTAL - int(freq.sum())
    f = [int(v) for v in freq]
    cum = [0] * n
    for i in range(1, n):
        cum[i] = cum[i - 1] + f[i - 1]
    return cum, f


def encode_laplace(enc: RangeEncoder, value: int, center: int, scale: int, frac: int) -> None:
    """Code integer ``value`` given the quantised location (⌊μ⌋ = center, fraction frac/8) and scale."""
    cum, freq = laplace_table(scale, frac)
    s = value - center
    if -LAPLACE_TAIL <= s <= LAPLACE_TAIL:
        i = s + LAPLACE_TAIL
        enc.encode(cum[i], freq[i], MAX_TOTAL)
    else:
        enc.encode(cum[-1], freq[-1], MAX_TOTAL)
        # the sign of the remainder tells the side: ≥ 0 above the window, < 0 below it
        enc.encode_signed_gamma(s - LAPLACE_TAIL - 1 if s > 0 else s + LAPLACE_TAIL)


def decode_laplace(dec: RangeDecoder, center: int, scale: int, frac: int) -> int:
    cum, freq = laplace_table(scale, frac)
    t = dec.target(MAX_TOTAL)
    i = bisect_right(cum, t) - 1
    dec.consume(cum[i], freq[i])
    if i < len(cum) - 1:
        return center + i - LAPLACE_TAIL
    rest = dec.decode_signed_gamma()
    return center + (rest + LAPLACE_TAIL + 1 if rest >= 0 else rest - LAPLACE_TAIL)


def laplace_bits(values: np.ndarray, mu: np.ndarray, b: np.ndarray) -> float:
    """Ideal code length (bits) of integers under discretised Laplace(μ, b) (for step searches)."""
    v = values.astype(np.float64)

    def cdf(x: np.ndarray) -> np.ndarray:
        z = (x - mu) / b
        return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0)), 1 - 0.5 * np.exp(-np.maximum(z, 0)))

    p = np.maximum(cdf(v + 0.5) - cdf(v - 0.5), 2.0**-16)
    return float(-np.log2(p).sum())
