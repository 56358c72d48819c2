"""Quantized (low-precision) Oja's algorithm for streaming PCA, standard and batched.

Dasgupta, Kumar, Pandey, Sarkar, "Low-Precision Streaming PCA", NeurIPS 2025 (arXiv 2510.22440).
Code only in the paper's supplementary material. **Reconstruction:** Algorithm 1 below is rebuilt
from the paper's prose and its noise decomposition Ξ_i = (ηξ_{a,i} + ξ_{2,i} + (I + ηD_i)ξ_{1,i})u_{i−1}ᵀ,
and the log-grid exponent split (Eq. 10) from the floating-point analogy; both are marked below.

* Stochastic rounding (Sec. 2): Q(x) = u w.p. (x − ℓ)/(u − ℓ), else ℓ, for adjacent grid points
  ℓ ≤ x < u; unbiased, |Q(x) − x| ≤ u − ℓ; values outside the grid saturate.
* Linear grid Q_L = {δk : k = −2^{β−1} … 2^{β−1} − 1}, δ = 2^{2−β} (covers [−2, 2)).
* Logarithmic grid q_0 = 0, q_{i+1} = (1+ζ)q_i + δ₀, i = 0 … 2^{β−1} − 1, mirrored; ζ = 2^{−β_m},
  δ₀ = 4·2^{−2^{β_e−1}}, β = β_e + β_m, with (β_e, β_m) chosen by brute force to minimise the
  lower bound ζ² + δ₀²d subject to q_N ≥ 2 (Lemma 2; the paper's closed form is an approximation).
* Batched quantized Oja (Algorithm 1, reconstructed), per batch B_i:
  w = Q(u_{i−1}); ḡ = mean_{j∈B_i} Q(X_j X_jᵀ w); ũ = w + Q(ηḡ) (``accumulate="update"``) or
  ũ = Q(w + ηḡ) (``"sum"``); u_i = ũ/‖ũ‖; output Q(u_b). Three quantizations per step; batching
  makes the quantization error independent of n (Theorem 2), whereas standard quantized Oja
  (batch size 1, Theorem 3) accumulates n times more.
* Learning rate η = α ln n / (b (λ₁ − λ₂)) (Sec. 3.4; the experiments use α = 2).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from eff_shared.errors import check_choice, check_int, check_real, finite_array
from eff_theory import _rounding
from eff_theory._runtime import RngLike

__all__ = [
    "LinearQuantizer",
    "LogQuantizer",
    "QuantizedOja",
    "Quantizer",
    "SpikedStream",
    "oja_learning_rate",
    "optimal_log_grid_params",
    "quantization_lower_bound",
    "quantized_oja",
    "sin2_error",
    "spiked_covariance_stream",
    "stochastic_round",
    "success_boost",
]

_MAX_BITS = 32
_LOG_MAX_BITS = 24  # the log grid tabulates its 2^(β−1) levels (and cell steps): 2^23 at most


@runtime_checkable
class Quantizer(Protocol):
    """Anything with ``quantize(x, rng) -> ndarray`` (stochastic rounding onto a grid)."""

    def quantize(self, x: Any, rng: RngLike = None) -> np.ndarray: ...


def _round_between(
    x: np.ndarray, lower: np.ndarray, upper: np.ndarray, gen: np.random.Generator
) -> np.ndarray:
    # upper with probability (x − lower)/(upper − lower): one uniform per element.
    gap = upper - lower
    with np.errstate(invalid="ignore", divide="ignore"):
        p = (x - lower) / gap
    up = gen.random(x.shape) < p  # NaN (gap 0) compares False: stays at lower = x
    return np.where(up, upper, lower)


_BLOCK = 1 << 15  # elements per pass: temporaries stay in cache instead of fresh mmap'ed pages


def _blockwise(kernel: Any, x: Any, rng: RngLike) -> np.ndarray:
    """Apply ``kernel(block, gen)`` to consecutive blocks of the flattened ``x``.

    Large temporaries made the log quantizer spend more time in page faults than in arithmetic;
    uniform draws come in the same order either way, so the result does not depend on the block size.
    """
    gen = np.random.default_rng(rng)
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    out = np.empty_like(flat)
    for start in range(0, flat.size, _BLOCK):
        out[start : start + _BLOCK] = kernel(flat[start : start + _BLOCK], gen)
    return out.reshape(x.shape)


def _blockwise_into(quantizer: Any, x: Any, rng: RngLike) -> np.ndarray:
    """``_blockwise(quantizer._quantize_block, x, rng)`` by the quantizer's compiled kernel
    (``_round_into(x, u, out)``, :mod:`eff_theory._rounding`; issue #25): the uniforms drawn by
    blocks into one buffer, then one pass per block. Same draws, same bits. ``ValueError`` for a
    NaN in ``x`` (±inf saturate)."""
    gen = np.random.default_rng(rng)
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    out = np.empty_like(flat)
    u = np.empty(min(flat.size, _BLOCK))
    nan = False
    for start in range(0, flat.size, _BLOCK):
        stop = min(start + _BLOCK, flat.size)
        draws = gen.random(out=u[: stop - start])
        nan |= quantizer._round_into(flat[start:stop], draws, out[start:stop])
    if nan:
        raise ValueError(f"x must not contain NaN ({int(np.isnan(flat).sum())} of {flat.size})")
    return out.reshape(x.shape)


def stochastic_round(x: Any, lower: Any, upper: Any, rng: RngLike = None) -> np.ndarray:
    """Round each x to ``upper`` w.p. (x − lower)/(upper − lower), else to ``lower`` (unbiased).

    Requires lower ≤ x ≤ upper elementwise (arrays broadcast); where lower = upper the value is kept.
    """
    x = finite_array("x", x)
    lo, hi = np.broadcast_arrays(finite_array("lower", lower), finite_array("upper", upper))
    x, lo, hi = np.broadcast_arrays(x, lo, hi)
    if np.any(lo > x) or np.any(x > hi):
        raise ValueError("stochastic_round needs lower <= x <= upper elementwise")
    return _round_between(x, lo, hi, np.random.default_rng(rng))


def _check_bits(bits: Any, minimum: int = 2, maximum: int = _MAX_BITS) -> int:
    return check_int("bits", bits, minimum=minimum, maximum=maximum)


class LinearQuantizer:
    """Uniform grid {δk : k = −2^{β−1} … 2^{β−1} − 1} with stochastic rounding (paper Sec. 2).

    δ = 2^{2−β} by default, so the grid covers [−2, 2 − δ]; values outside saturate.
    """

    def __init__(self, bits: int, *, delta: float | None = None) -> None:
        self.bits = _check_bits(bits)
        if delta is None:
            delta = 2.0 ** (2 - self.bits)
        self.delta = check_real("delta", delta)
        if self.delta <= 0:
            raise ValueError(f"delta must be > 0, got {delta}")
        self._kmin = -(2 ** (self.bits - 1))
        self._kmax = 2 ** (self.bits - 1) - 1
        self._kernel_args = (self.delta, float(self._kmin), float(self._kmax))

    def __repr__(self) -> str:
        return f"LinearQuantizer(bits={self.bits}, delta={self.delta:g})"

    @property
    def range(self) -> tuple[float, float]:
        """The smallest and largest grid points."""
        return self._kmin * self.delta, self._kmax * self.delta

    @property
    def resolution(self) -> float:
        """The grid gap δ."""
        return self.delta

    def grid(self) -> np.ndarray:
        return self.delta * np.arange(self._kmin, self._kmax + 1, dtype=np.float64)

    def quantize(self, x: Any, rng: RngLike = None) -> np.ndarray:
        return _blockwise_into(self, x, rng)

    def _quantize_reference(self, x: Any, rng: RngLike = None) -> np.ndarray:
        # the reference kernel ``quantize`` must match bit for bit (tests)
        return _blockwise(self._quantize_block, x, rng)

    def _quantize_block(self, x: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        k = x / self.delta
        np.clip(k, self._kmin, self._kmax, out=k)  # saturate outside the range
        low = np.floor(k)
        k -= low  # fractional part = probability of rounding up
        low += gen.random(k.shape) < k
        low *= self.delta
        return low

    def _round_into(self, x: np.ndarray, u: np.ndarray, out: np.ndarray) -> bool:
        # _quantize_block compiled, given its uniforms u (same bits); whether x held a NaN
        return _rounding.linear_round(x, u, *self._kernel_args, out)

    def _round_rows(
        self, X: np.ndarray, proj: np.ndarray, u: np.ndarray, first: bool, acc: np.ndarray
    ) -> None:
        _rounding.linear_row_sum(X, proj, u, first, *self._kernel_args, acc)


def _log_grid_feasible(bits: int, zeta: float, delta0: float) -> bool:
    """q_N = δ₀((1+ζ)^N − 1)/ζ ≥ 2, evaluated in logs (the power overflows for large N)."""
    if delta0 <= 0 or zeta <= 0:
        return False
    growth = min((2 ** (bits - 1) - 1) * math.log1p(zeta), 700.0)
    return math.log(delta0) + math.log(math.expm1(growth)) - math.log(zeta) >= math.log(2.0)


def optimal_log_grid_params(bits: int, dim: int) -> tuple[float, float, int, int]:
    """(ζ, δ₀, β_e, β_m) of the log grid for a ``bits`` budget in dimension ``dim``.

    Floating-point analogy (paper Sec. 3.4): ζ = 2^{−β_m}, δ₀ = 4·2^{−2^{β_e−1}}, β_e + β_m = bits.
    Exact brute force over integer β_e ∈ [1, bits−1] minimising the Lemma-2 bound ζ² + δ₀²·dim
    subject to the grid reaching 2 (q_N ≥ 2); the paper's β_e ≈ log₂(2β + log₂ d) (Eq. 10,
    reconstructed) approximates it. β_m ≥ 3 is not imposed. ``ValueError`` when nothing is feasible.
    """
    bits = _check_bits(bits)
    dim = check_int("dim", dim, minimum=1)
    best: tuple[float, float, float, int, int] | None = None
    for beta_e in range(1, bits):
        beta_m = bits - beta_e
        zeta = math.ldexp(1.0, -beta_m)
        delta0 = math.ldexp(4.0, -(2 ** (beta_e - 1))) if beta_e <= 11 else 0.0
        if not _log_grid_feasible(bits, zeta, delta0):
            continue
        cost = zeta**2 + delta0**2 * dim
        if best is None or cost < best[0]:
            best = (cost, zeta, delta0, beta_e, beta_m)
    if best is None:
        raise ValueError(f"no feasible (beta_e, beta_m) split of bits={bits} reaches the range 2")
    return best[1], best[2], best[3], best[4]


class LogQuantizer:
    """Symmetric logarithmic grid ±q_i, q_i = δ₀((1+ζ)^i − 1)/ζ, i = 0 … 2^{β−1} − 1 (paper Sec. 2).

    Give ``dim`` to choose (ζ, δ₀) by :func:`optimal_log_grid_params`, or both ``zeta`` and
    ``delta0``. Relative resolution ζ for large values, absolute resolution δ₀ near 0; values beyond
    ±q_N saturate. ``bits`` ≤ 24 (the 2^(β−1) levels are tabulated).
    """

    def __init__(
        self,
        bits: int,
        *,
        dim: int | None = None,
        zeta: float | None = None,
        delta0: float | None = None,
    ) -> None:
        self.bits = _check_bits(bits, maximum=_LOG_MAX_BITS)
        if zeta is None and delta0 is None:
            if dim is None:
                raise ValueError(
                    "LogQuantizer needs dim (to split the bits) or both zeta and delta0"
                )
            zeta, delta0, self.beta_e, self.beta_m = optimal_log_grid_params(self.bits, dim)
        elif zeta is None or delta0 is None:
            raise ValueError("give both zeta and delta0, or neither (then dim)")
        else:
            self.beta_e = self.beta_m = None
        self.zeta = check_real("zeta", zeta)
        self.delta0 = check_real("delta0", delta0)
        if self.zeta <= 0 or self.delta0 <= 0:
            raise ValueError(f"zeta and delta0 must be > 0, got {zeta}, {delta0}")
        self.n_levels = 2 ** (self.bits - 1) - 1  # N: positive levels q_1 … q_N
        i = np.arange(self.n_levels + 1, dtype=np.float64)
        self._q = self.delta0 * np.expm1(i * math.log1p(self.zeta)) / self.zeta
        if not np.all(np.isfinite(self._q)):
            raise ValueError("zeta/delta0 make the grid overflow float64")
        self._gap = np.diff(self._q)
        self._next_exact = bool(np.array_equal(self._q[:-1] + self._gap, self._q[1:]))
        self._inv_gap = 1.0 / self._gap
        self._scale = self.zeta / self.delta0
        self._inv_log_step = 1.0 / math.log1p(self.zeta)
        thr = _rounding.log_cell_thresholds(self._cell_index, self._q)
        self._kernel_args = (
            self._q,
            self._gap,
            self._inv_gap,
            thr,
            *_rounding.cell_table(thr, self.zeta),
            self._next_exact,
        )

    def __repr__(self) -> str:
        return f"LogQuantizer(bits={self.bits}, zeta={self.zeta:g}, delta0={self.delta0:g})"

    @property
    def range(self) -> tuple[float, float]:
        return -float(self._q[-1]), float(self._q[-1])

    @property
    def resolution(self) -> float:
        """The finest gap δ₀ (at 0); the gap at q_i is ζq_i + δ₀."""
        return self.delta0

    def grid(self) -> np.ndarray:
        return np.concatenate([-self._q[:0:-1], self._q])

    def quantize(self, x: Any, rng: RngLike = None) -> np.ndarray:
        return _blockwise_into(self, x, rng)

    def _quantize_reference(self, x: Any, rng: RngLike = None) -> np.ndarray:
        # the reference kernel ``quantize`` must match bit for bit (tests)
        return _blockwise(self._quantize_block, x, rng)

    def _cell_index(self, a: np.ndarray) -> np.ndarray:
        # cell i = ⌊log(1 + ζ|x|/δ₀)/log(1+ζ)⌋ (capped at the last cell) of |x| = a ≥ 0
        t = a * self._scale
        np.log1p(t, out=t)
        t *= self._inv_log_step
        np.floor(t, out=t)
        np.minimum(t, self.n_levels - 1, out=t)
        return t.astype(np.intp)

    def _quantize_block(self, x: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        a = np.abs(x)
        np.minimum(a, self._q[-1], out=a)  # saturate at ±q_N
        i = self._cell_index(a)
        out = np.take(self._q, i)
        # p = (|x| − q_i)/(q_{i+1} − q_i). Rounding in log/exp can put i one cell off, but only for
        # |x| within an ulp of a level; then p is slightly < 0 or > 1 and the comparison still
        # returns that level (exactly what Q must return there), so no fix-up pass is needed.
        p = a
        p -= out
        p *= np.take(self._inv_gap, i)
        step = np.take(self._gap, i)
        step *= gen.random(p.shape) < p
        out += step
        return np.copysign(out, x, out=out)

    def _round_into(self, x: np.ndarray, u: np.ndarray, out: np.ndarray) -> bool:
        # _quantize_block compiled, given its uniforms u (same bits; the cell index from the
        # reference's own thresholds, see eff_theory._rounding); whether x held a NaN
        return _rounding.log_round(x, u, *self._kernel_args, out)

    def _round_rows(
        self, X: np.ndarray, proj: np.ndarray, u: np.ndarray, first: bool, acc: np.ndarray
    ) -> None:
        _rounding.log_row_sum(X, proj, u, first, *self._kernel_args, acc)


def quantization_lower_bound(
    dim: int, bits: int, scheme: Literal["linear", "log"] = "linear"
) -> float:
    """The rate of the worst-case sin² lower bound, **without constants** (Lemmas 1/2).

    Linear grid: δ²·d = d·4^{2−β}; logarithmic grid: ζ² + δ₀²·d with the optimal split, which is
    Õ(4^{−β}) and nearly dimension-free.
    """
    dim = check_int("dim", dim, minimum=1)
    check_choice("scheme", scheme, ("linear", "log"))
    if scheme == "linear":
        return 4.0 ** (2 - _check_bits(bits)) * dim
    zeta, delta0, _, _ = optimal_log_grid_params(bits, dim)
    return zeta**2 + delta0**2 * dim


def sin2_error(u: Any, v: Any) -> np.ndarray | float:
    """sin²∠(u, v) = 1 − (uᵀv)²/(‖u‖²‖v‖²) along the last axis (broadcasts)."""
    u = finite_array("u", u)
    v = finite_array("v", v)
    num = np.sum(u * v, axis=-1) ** 2
    den = np.sum(u * u, axis=-1) * np.sum(v * v, axis=-1)
    if np.any(den == 0):
        raise ValueError("sin2_error needs non-zero vectors")
    out = np.clip(1.0 - num / den, 0.0, 1.0)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class SpikedStream:
    """Samples X ~ N(0, Σ), Σ = V diag(λ) Vᵀ: ``X`` (n, d) or (trials, n, d), the eigenbasis
    ``basis`` = V, the ``eigenvalues`` λ and the ``eigengap`` λ₁ − λ₂."""

    X: np.ndarray
    basis: np.ndarray
    eigenvalues: np.ndarray
    eigengap: float

    @property
    def v1(self) -> np.ndarray:
        """The top eigenvector V[:, 0]."""
        return self.basis[:, 0]


def spiked_covariance_stream(
    n: int,
    d: int,
    *,
    decay: float = 2.0,
    n_trials: int | None = None,
    basis: Any = None,
    rng: RngLike = None,
) -> SpikedStream:
    """The paper's Sec. 5 data: λ_i = i^{−decay} (λ₁ = 1, λ₂ = 1/4 at decay 2), random orthonormal
    eigenbasis V (Haar, or ``basis`` to share one across calls), X = Z diag(√λ) Vᵀ."""
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=2)
    decay = check_real("decay", decay)
    if decay <= 0:
        raise ValueError(f"decay must be > 0, got {decay}")
    gen = np.random.default_rng(rng)
    if basis is None:
        q, r = np.linalg.qr(gen.standard_normal((d, d)))
        basis = q * np.sign(np.diag(r))  # sign fix: Haar-distributed
    else:
        basis = finite_array("basis", basis, ndim=2)
        if basis.shape != (d, d) or not np.allclose(basis.T @ basis, np.eye(d), atol=1e-8):
            raise ValueError(f"basis must be an orthonormal ({d}, {d}) matrix")
    lam = np.arange(1, d + 1, dtype=np.float64) ** (-decay)
    shape = (n, d) if n_trials is None else (check_int("n_trials", n_trials, minimum=1), n, d)
    X = (gen.standard_normal(shape) * np.sqrt(lam)) @ basis.T
    return SpikedStream(X, basis, lam, float(lam[0] - lam[1]))


def _identity(x: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    return x


def _quantize_fn(quantizer: Any) -> Any:
    if quantizer is None:
        return _identity
    if not isinstance(quantizer, Quantizer):
        raise TypeError(
            f"quantizer must be None, LinearQuantizer, LogQuantizer or have .quantize(x, rng), "
            f"got {type(quantizer).__name__}"
        )
    return quantizer.quantize


def _check_stream(X: Any, ndim: tuple[int, ...]) -> np.ndarray:
    X = finite_array("X", X, ndim=ndim)
    if X.shape[-1] < 2 or X.shape[-2] < 1:
        raise ValueError(f"X must hold >= 1 sample of >= 2 features, got shape {X.shape}")
    return X


def _oja_step(
    u: np.ndarray,
    Xb: np.ndarray,
    eta: float,
    q: Any,
    gen: np.random.Generator,
    accumulate: str,
    on_zero: str,
    fused: bool = True,
) -> tuple[np.ndarray, int]:
    """One batched quantized Oja step on u (R, d) with the batch Xb (R, B, d); returns (u, #zero).

    ``fused=False`` is the reference for ḡ: the (R, B, d) array of per-sample updates quantized
    whole, then averaged; the fused path gives the same bits (see ``_fused_quantized_mean``)."""
    w = q(u, gen)  # ξ1: the normalised iterate on the grid
    proj = np.einsum("rbd,rd->rb", Xb, w)
    # ξa: each per-sample update, then the mean
    # (only for this module's own quantizers: a subclass may override _quantize_block)
    if fused and Xb.size > _FUSE_MIN and type(getattr(q, "__self__", None)) in _FUSABLE:
        gbar = _fused_quantized_mean(Xb, proj, q.__self__, gen)
    else:
        gbar = q(Xb * proj[..., None], gen).mean(axis=1)
    # ξ2: the averaged step ("update") or the whole sum ("sum") on the grid
    ut = w + q(eta * gbar, gen) if accumulate == "update" else q(w + eta * gbar, gen)
    norm = np.linalg.norm(ut, axis=-1)
    zero = norm == 0
    if np.any(zero):
        if on_zero == "raise":
            raise FloatingPointError(
                "the quantized Oja iterate became the zero vector (too few bits for this step "
                "size); pass on_zero='keep' to keep the previous iterate"
            )
        ut[zero], norm[zero] = u[zero], np.linalg.norm(u[zero], axis=-1)
    return ut / norm[:, None], int(zero.sum())


_FUSABLE = (LinearQuantizer, LogQuantizer)
_FUSE_MIN = 1 << 16  # below this many elements per batch the whole-array reference is as fast


def _fused_quantized_mean(
    Xb: np.ndarray, proj: np.ndarray, quantizer: Any, gen: np.random.Generator
) -> np.ndarray:
    """mean_j Q(X_j X_jᵀw) over the batch, bit-identical to ``q(Xb * proj[..., None]).mean(axis=1)``.

    Speed (issue #25): the reference materialises and re-reads the (R, B, d) per-sample updates;
    here each chunk of rows is formed, rounded and summed in one compiled pass. Identical because
    (1) the uniforms are drawn in the same flat (r, j, k) order, one per element, and PCG64 doubles
    do not depend on how the draws are split; (2) each element gets the same operations; (3) numpy
    sums a non-contiguous axis sequentially (the first row copied, then out += row in order), as the
    kernel does; (4) the mean is that sum divided by B.
    """
    R, B, d = Xb.shape
    rows = max(1, _BLOCK // d)
    u = np.empty(min(rows, B) * d)
    gbar = np.empty((R, d))
    for r in range(R):
        for j0 in range(0, B, rows):
            j1 = min(j0 + rows, B)
            draws = gen.random(out=u[: (j1 - j0) * d])
            quantizer._round_rows(Xb[r, j0:j1], proj[r, j0:j1], draws, j0 == 0, gbar[r])
    gbar /= B
    return gbar


def _run_oja(
    X: np.ndarray,
    n_batches: int,
    eta: float,
    quantizer: Any,
    gen: np.random.Generator,
    accumulate: str,
    on_zero: str,
    u0: np.ndarray | None,
) -> tuple[np.ndarray, int]:
    R, n, d = X.shape
    q = _quantize_fn(quantizer)
    if u0 is None:
        u0 = gen.standard_normal((R, d))
    u = u0 / np.linalg.norm(u0, axis=-1, keepdims=True)
    bounds = np.linspace(0, n, n_batches + 1).round().astype(int)  # near-equal batches
    zeros = 0
    for start, stop in itertools.pairwise(bounds):
        u, z = _oja_step(u, X[:, start:stop], eta, q, gen, accumulate, on_zero)
        zeros += z
    return q(u, gen), zeros


def quantized_oja(
    X: Any,
    *,
    n_batches: int,
    learning_rate: float,
    quantizer: Any = None,
    rng: RngLike = None,
    accumulate: Literal["update", "sum"] = "update",
    on_zero: Literal["raise", "keep"] = "raise",
) -> np.ndarray:
    """Batched quantized Oja (Algorithm 1, reconstructed) on the stream ``X``; returns Q(u_b).

    ``X`` is ``(n, d)`` or ``(R, n, d)`` for R independent runs vectorised together (then the result
    is ``(R, d)``). ``n_batches = n`` is standard (batch size 1) quantized Oja; ``quantizer=None``
    runs in full precision. u_0 ~ N(0, I)/‖·‖ from ``rng``, which also drives the rounding.
    """
    X = _check_stream(X, (2, 3))
    n = X.shape[-2]
    n_batches = check_int("n_batches", n_batches, minimum=1, maximum=n)
    eta = _check_rate("learning_rate", learning_rate)
    check_choice("accumulate", accumulate, ("update", "sum"))
    check_choice("on_zero", on_zero, ("raise", "keep"))
    _quantize_fn(quantizer)
    gen = np.random.default_rng(rng)
    u, _ = _run_oja(
        X.reshape(-1, *X.shape[-2:]), n_batches, eta, quantizer, gen, accumulate, on_zero, None
    )
    return u if X.ndim == 3 else u[0]


def _check_rate(name: str, value: Any) -> float:
    value = check_real(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def oja_learning_rate(n: int, n_batches: int, eigengap: float, alpha: float = 2.0) -> float:
    """η = α ln n / (b (λ₁ − λ₂)) (paper Sec. 3.4; b = n for standard Oja)."""
    return alpha * math.log(n) / (n_batches * _check_rate("eigengap", eigengap))


class QuantizedOja:
    """Top principal component by (batched) quantized Oja, in the style of sklearn's IncrementalPCA.

    Dasgupta et al., "Low-Precision Streaming PCA", NeurIPS 2025, Algorithm 1 (reconstructed; see
    the module docstring). ``fit(X)`` runs ``n_batches`` batched steps over X (None: one sample per
    step, i.e. standard Oja) with η = ``learning_rate`` or α ln n/(b·``eigengap``) and stores the
    returned Q(u_b), normalised, in ``components_`` (1, d). ``partial_fit(X_batch)`` takes one
    batched step with the given ``learning_rate`` and stores the iterate u_i. ``quantizer=None`` is
    full-precision Oja. ``on_zero="keep"`` keeps the previous iterate when ũ quantizes to 0 and
    counts it in ``n_zero_events_``; ``"raise"`` raises ``FloatingPointError``.
    """

    def __init__(
        self,
        n_features: int,
        *,
        quantizer: Any = None,
        n_batches: int | None = None,
        learning_rate: float | None = None,
        eigengap: float | None = None,
        alpha: float = 2.0,
        accumulate: Literal["update", "sum"] = "update",
        on_zero: Literal["raise", "keep"] = "raise",
        rng: RngLike = None,
    ) -> None:
        self.n_features = check_int("n_features", n_features, minimum=2)
        _quantize_fn(quantizer)
        self.quantizer = quantizer
        self.n_batches = None if n_batches is None else check_int("n_batches", n_batches, minimum=1)
        self.learning_rate = (
            None if learning_rate is None else _check_rate("learning_rate", learning_rate)
        )
        self.eigengap = None if eigengap is None else _check_rate("eigengap", eigengap)
        self.alpha = _check_rate("alpha", alpha)
        check_choice("accumulate", accumulate, ("update", "sum"))
        check_choice("on_zero", on_zero, ("raise", "keep"))
        self.accumulate, self.on_zero = accumulate, on_zero
        self._rng = np.random.default_rng(rng)
        self._u: np.ndarray | None = None
        self.n_steps_ = 0
        self.n_zero_events_ = 0

    def _check_X(self, X: Any) -> np.ndarray:
        X = _check_stream(X, (2,))
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, expected n_features={self.n_features}")
        return X

    def fit(self, X: Any) -> QuantizedOja:
        X = self._check_X(X)
        n = X.shape[0]
        b = n if self.n_batches is None else self.n_batches
        if b > n:
            raise ValueError(f"n_batches must be in [1, n={n}], got {b}")
        if self.learning_rate is not None:
            eta = self.learning_rate
        elif self.eigengap is not None:
            eta = oja_learning_rate(n, b, self.eigengap, self.alpha)
        else:
            raise ValueError("fit needs learning_rate or eigengap (to set η = α ln n / (b·gap))")
        u, zeros = _run_oja(
            X[None], b, eta, self.quantizer, self._rng, self.accumulate, self.on_zero, None
        )
        norm = np.linalg.norm(u[0])
        if norm == 0:
            raise FloatingPointError("the final quantized estimate Q(u_b) is the zero vector")
        self._u = u[0] / norm
        self.learning_rate_ = eta
        self.n_steps_ = b
        self.n_zero_events_ = zeros
        return self

    def partial_fit(self, X_batch: Any) -> QuantizedOja:
        if self.learning_rate is None:
            raise ValueError("partial_fit needs learning_rate (n and the step count are unknown)")
        X_batch = self._check_X(X_batch)
        if self._u is None:
            u0 = self._rng.standard_normal((1, self.n_features))
            self._u = (u0 / np.linalg.norm(u0))[0]
        q = _quantize_fn(self.quantizer)
        u, zeros = _oja_step(
            self._u[None],
            X_batch[None],
            self.learning_rate,
            q,
            self._rng,
            self.accumulate,
            self.on_zero,
        )
        self._u = u[0]
        self.learning_rate_ = self.learning_rate
        self.n_steps_ += 1
        self.n_zero_events_ += zeros
        return self

    @property
    def components_(self) -> np.ndarray:
        if self._u is None:
            raise AttributeError("QuantizedOja is not fitted yet: call fit or partial_fit")
        return self._u[None, :]

    def transform(self, X: Any) -> np.ndarray:
        """Projections X·u, shape (n, 1)."""
        return self._check_X(X) @ self.components_.T


def success_boost(
    estimates: Any, eps: float, *, bits: int = 8, rng: RngLike = None
) -> np.ndarray | None:
    """Algorithm 2 (SuccessBoost): pick an estimate that agrees with at least half of the others.

    ``estimates`` (r, d) are runs of Oja on r = ⌈20 ln(1/θ)⌉ disjoint chunks of the stream. The
    pairwise sin² are computed in low precision (stochastically rounded onto the linear grid of gap
    ``eps`` with ``bits`` ≥ 4 bits); the first estimate whose rounded sin² to at least r/2 of the
    others is ≤ 5·eps is returned, or None when none is. If each run succeeds (sin² ≤ ε to the
    truth) with probability > 1/2, the output succeeds with probability ≥ 1 − θ.
    """
    U = finite_array("estimates", estimates, ndim=2)
    if U.shape[0] < 2:
        raise ValueError(f"estimates must hold r >= 2 runs, got {U.shape[0]}")
    eps = _check_rate("eps", eps)
    bits = _check_bits(bits, minimum=4)
    gen = np.random.default_rng(rng)
    s = sin2_error(U[:, None, :], U[None, :, :])
    s_q = LinearQuantizer(bits + 1, delta=eps).quantize(s, gen)  # grid 0, ε, …, (2^β − 1)ε
    r = U.shape[0]
    close = (s_q <= 5 * eps) & ~np.eye(r, dtype=bool)
    for i in range(r):
        if close[i].sum() >= r / 2:
            return U[i].copy()
    return None
