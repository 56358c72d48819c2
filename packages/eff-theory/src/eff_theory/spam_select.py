"""Minimax univariate-function selection in sparse additive models (SpAM) by χ² tests.

S. Liu, "Minimax-Optimal Univariate Function Selection in Sparse Additive Models: Rates, Adaptation,
and the Estimation-Selection Gap", NeurIPS 2025 (OpenReview QudbVyFaTu).

The model is the Gaussian white-noise sparse additive model, written in an orthonormal basis
{ψ_i} (here the cosine basis √2·cos(πix)) as the **sequence model**

    X_ij = θ_ij + σ ε_ij,   ε_ij i.i.d. N(0, 1),   i = 1, 2, …,  j = 1, …, p,

with f_j = Σ_i θ_ij ψ_i centred, non-zero only for j ∈ S, and the smoothness ellipsoid
Σ_i θ_ij² / μ_i ≤ 1 (Sobolev α: μ_i = i^(−2α)); n := σ^(−2). Every selector here is a χ² test on
the truncated coefficient energy T_j(K) = σ^(−2) Σ_{i≤K} X_ij², which is exactly χ²_K under
H₀: f_j = 0, calibrated by the Laurent–Massart bound P(χ²_K ≥ K + 2√(KL) + 2L) ≤ e^(−L).
It is **not** a regression method and uses no group lasso:

* support recovery (Remark 4, Eq. 11): K' = min{k : μ_k ≤ σ²√k·log p}; select j iff
  T_j(K') ≥ K' + 2√(K'L) + 2L with L = log(2p/δ), so P(Ŝ ≠ S) ≤ δ above the separation rate;
* multiple testing (Theorem 1, Eq. 7, constants of App. D): K = min{k : μ_k ≤ σ²√k·log(p/s)};
  select iff T_j(K) ≥ K + 2√(5KL) + 10L with L = log(p/(sδ)) (``threshold="theory"``), or the plain
  Laurent–Massart level K + 2√(KL) + 2L (``threshold="lm"``; the paper's constants are very
  conservative); controls the combined risk FDR + FNR ≤ δ under the signal condition (a combined
  risk, not a BH-style FDR level);
* adaptation to unknown smoothness (Eq. 13): K_rec = {2, 4, …, 2^⌊log₂(σ^(−4) log p)⌋},
  L = log(8p·log(σ^(−2))/δ); select j iff T_j(k) passes its level at some k ∈ K_rec.

Under the global null P(Ŝ ≠ ∅) ≤ δ/2 for (11), and likewise for (13).
Theorem 7 (estimation ≠ selection): truncating at the estimation-optimal K_e = min{k : μ_k ≤ σ²k}
(``truncation="estimation"``) is provably suboptimal for selection once n ≳ (log p)^(1+2α).

:func:`spam_select` is a regression front-end that is **not in the paper**: by the asymptotic
equivalence of regression and white noise (Brown–Low) it turns data (X, y) into empirical cosine
coefficients and runs a selector with σ̂² = var(y)/N (conservative: it includes signal variance).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.fft

from eff_shared.errors import check_choice, check_fraction, check_int, check_positive, finite_array
from eff_theory._runtime import RngLike

__all__ = [
    "DEFAULT_FUNCTIONS",
    "SelectionResult",
    "SequenceSample",
    "SpAMSelector",
    "cosine_coefficients",
    "cosine_design_coefficients",
    "fdr_fnr",
    "laurent_massart_threshold",
    "minimax_separation_rate",
    "simulate_sequence_model",
    "spam_select",
    "truncation_level",
    "wrong_recovery",
]

MuLike = Callable[[np.ndarray], np.ndarray] | Sequence[float] | np.ndarray | None
Mode = Literal["recovery", "testing", "adaptive"]
Truncation = Literal["minimax", "estimation", "univariate"]

_MODES = ("recovery", "testing", "adaptive")
_TRUNCATIONS = ("minimax", "estimation", "univariate")
_MAX_K = 2**30


# --------------------------------------------------------------------------- truncation and rates


def _sobolev(smoothness: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda k: k.astype(np.float64) ** (-2.0 * smoothness)


def _mu_values(mu: MuLike, k: np.ndarray, smoothness: float = 0.5) -> np.ndarray:
    """μ at the (1-based) indices ``k``: Sobolev i^(−2α) for ``None``, a callable, or a sequence."""
    if mu is None:
        return _sobolev(smoothness)(k)
    if callable(mu):
        values = np.asarray(mu(k), dtype=np.float64)
        if values.shape != k.shape:
            raise ValueError(f"mu(k) must return one value per index, got shape {values.shape}")
    else:
        table = _mu_table(mu)
        if k.max() > table.size:
            raise ValueError(
                f"mu has {table.size} values but the truncation search needs index {int(k.max())}; "
                "pass a longer sequence or a callable"
            )
        values = table[k - 1]
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("mu must be positive and finite")
    return values


def _mu_table(mu: Sequence[float] | np.ndarray) -> np.ndarray:
    table = finite_array("mu", mu, 1)
    if table.size == 0 or np.any(table <= 0) or np.any(np.diff(table) > 0):
        raise ValueError("mu must be a non-empty, positive, non-increasing sequence μ_1 ≥ μ_2 ≥ …")
    return table


def truncation_level(
    mu: MuLike,
    sigma2: float,
    log_term: float,
    *,
    kind: Literal["sqrt", "linear"] = "sqrt",
    smoothness: float = 0.5,
) -> int:
    """The smallest k with μ_k ≤ σ²·√k·log_term (``"sqrt"``) or μ_k ≤ σ²·k·log_term (``"linear"``).

    K' of Eq. 11 is ``log_term = log p``; K of Eq. 7 is ``log(p/s)``; the "univariate" level
    K_u = min{k : μ_k ≤ √k/n} is ``log_term = 1``; the estimation level K_e of Theorem 7 is
    ``kind="linear", log_term=1``. ``mu=None`` means Sobolev μ_k = k^(−2·smoothness).
    """
    check_positive("sigma2", sigma2)
    check_positive("log_term", log_term)
    check_choice("kind", kind, ("sqrt", "linear"))
    check_positive("smoothness", smoothness)
    if mu is not None and not callable(mu):
        mu = _mu_table(mu)
    limit = _MAX_K if mu is None or callable(mu) else len(mu)
    start, stop = 1, min(1024, limit)
    while start <= limit:
        k = np.arange(start, stop + 1)
        scale = np.sqrt(k) if kind == "sqrt" else k.astype(np.float64)
        hit = np.flatnonzero(_mu_values(mu, k, smoothness) <= sigma2 * scale * log_term)
        if hit.size:
            return int(k[hit[0]])
        start, stop = stop + 1, min(2 * stop, limit)
    if limit < _MAX_K:
        raise ValueError(
            f"none of the {limit} values of mu satisfies the truncation condition; "
            "pass a longer sequence or a callable"
        )
    raise ValueError(f"no truncation level below {_MAX_K}: sigma2 * log_term is too small")


def laurent_massart_threshold(k: int | np.ndarray, log_term: float, factor: float = 1.0) -> Any:
    """k + 2√(k·factor·L) + 2·factor·L: P(χ²_k ≥ it) ≤ exp(−factor·L) (Laurent–Massart)."""
    L = factor * log_term
    return k + 2.0 * np.sqrt(k * L) + 2.0 * L


def minimax_separation_rate(
    sigma2: float,
    p: int,
    s: int | None = None,
    mu: MuLike = None,
    *,
    kind: Literal["recovery", "testing"] = "recovery",
    smoothness: float = 0.5,
) -> float:
    """The separation rate ε² (up to constants) of Theorem 1 (``"testing"``) or Remark 4 (``"recovery"``).

    ε²_test = σ² log(p/s) + max_k (σ²√k log(p/s) ∧ μ_k); ε²_rec = σ² log p + max_k (σ²√k log p ∧ μ_k).
    For Sobolev α this is σ^(8α/(4α+1)) (log p)^(2α/(4α+1)) when log p ≲ σ^(−2/(2α+1)), else σ² log p.
    """
    check_positive("sigma2", sigma2)
    p = check_int("p", p, 2)
    check_choice("kind", kind, ("recovery", "testing"))
    if kind == "testing":
        if s is None:
            raise ValueError("s (the sparsity) is required for kind='testing'")
        s = check_int("s", s, 1, p - 1)
        log_term = math.log(p / s)
    else:
        log_term = math.log(p)
    # σ²√k·L increases and μ_k decreases in k, so the max of the minimum sits at the crossing K.
    K = truncation_level(mu, sigma2, log_term, kind="sqrt", smoothness=smoothness)
    k = np.arange(1, K + 1)
    bias = np.minimum(sigma2 * np.sqrt(k) * log_term, _mu_values(mu, k, smoothness)).max()
    return float(sigma2 * log_term + bias)


# --------------------------------------------------------------------------- the selector


class SpAMSelector:
    """χ²-test selector of the non-zero univariate functions of a sparse additive model.

    Implements Liu (NeurIPS 2025): ``mode="recovery"`` is the support-recovery selector of Remark 4
    (Eq. 11), ``"testing"`` the multiple-testing selector of Theorem 1 (Eq. 7, constants of App. D;
    needs ``sparsity``), ``"adaptive"`` the smoothness-adaptive selector of Eq. 13 (union of
    Laurent–Massart tests over dyadic truncations, a Lepski-type rule). σ² must be known.

    ``truncation`` replaces the minimax truncation of the recovery/testing selectors by the
    estimation-optimal K_e (``"estimation"``, Theorem 7's suboptimal selector) or the univariate
    K_u = min{k : μ_k ≤ √k/n} (``"univariate"``), or by a fixed int, keeping the threshold rule.
    ``threshold`` only affects ``"testing"``: ``"theory"`` (paper constants, L at factor 5) or
    ``"lm"`` (plain Laurent–Massart at L = log(p/(sδ))). ``k_max`` caps the adaptive dyadic grid.

    After :meth:`fit`: ``support_`` (bool, p), ``statistics_`` (T_j(k), shape (n_k, p)),
    ``thresholds_`` (n_k,), ``truncation_`` (int, or the list K_rec in adaptive mode) and
    ``n_coefficients_used_``.
    """

    def __init__(
        self,
        mode: Mode = "recovery",
        *,
        sigma2: float,
        delta: float = 0.1,
        smoothness: float = 0.5,
        mu: MuLike = None,
        sparsity: int | None = None,
        threshold: Literal["theory", "lm"] = "theory",
        k_max: int | None = None,
        truncation: Truncation | int = "minimax",
    ) -> None:
        check_choice("mode", mode, _MODES)
        check_positive("sigma2", sigma2)
        check_fraction("delta", delta, closed=False)
        check_positive("smoothness", smoothness)
        check_choice("threshold", threshold, ("theory", "lm"))
        if mu is not None and not callable(mu):
            mu = _mu_table(mu)
        if sparsity is not None:
            check_int("sparsity", sparsity, 1)
        elif mode == "testing":
            raise ValueError("sparsity (s) is required in mode='testing'")
        if k_max is not None:
            check_int("k_max", k_max, 1)
        if isinstance(truncation, str):
            check_choice("truncation", truncation, _TRUNCATIONS)
        else:
            check_int("truncation", truncation, 1)
        if mode == "adaptive" and sigma2 > math.exp(-1):
            raise ValueError(
                f"mode='adaptive' needs sigma2 <= exp(-1) so that log(sigma^-2) >= 1 in "
                f"L = log(8p log(sigma^-2)/delta), got sigma2={sigma2}"
            )
        self.mode = mode
        self.sigma2 = float(sigma2)
        self.delta = float(delta)
        self.smoothness = float(smoothness)
        self.mu = mu
        self.sparsity = sparsity
        self.threshold = threshold
        self.k_max = k_max
        self.truncation = truncation

    # -- the plan: truncation levels and thresholds for p coordinates

    def _level(self, log_term: float) -> int:
        if not isinstance(self.truncation, str):
            return int(self.truncation)
        kind = "linear" if self.truncation == "estimation" else "sqrt"
        term = log_term if self.truncation == "minimax" else 1.0
        return truncation_level(self.mu, self.sigma2, term, kind=kind, smoothness=self.smoothness)

    def plan(self, p: int) -> tuple[list[int], np.ndarray]:
        """The truncation levels (increasing) and their χ² thresholds for ``p`` coordinates."""
        p = check_int("p", p, 2)
        if self.mode == "recovery":
            K = self._level(math.log(p))
            return [K], np.array([laurent_massart_threshold(K, math.log(2 * p / self.delta))])
        if self.mode == "testing":
            s = int(self.sparsity)  # type: ignore[arg-type]
            if not 1 <= s < p:
                raise ValueError(f"sparsity must lie in [1, p) = [1, {p}), got {s}")
            K = self._level(math.log(p / s))
            L = math.log(p / (s * self.delta))
            factor = 5.0 if self.threshold == "theory" else 1.0
            return [K], np.array([laurent_massart_threshold(K, L, factor)])
        log_inv = math.log(1.0 / self.sigma2)
        top = max(1, math.floor(math.log2(math.log(p) / self.sigma2**2)))
        ks = [2**j for j in range(1, top + 1)]
        if self.k_max is not None:
            ks = [k for k in ks if k <= self.k_max] or [min(2, self.k_max)]
        L = math.log(8 * p * log_inv / self.delta)
        return ks, laurent_massart_threshold(np.array(ks, dtype=np.float64), L)

    # -- fitting

    def fit(self, coefs: Any) -> SpAMSelector:
        """Select from empirical coefficients ``coefs`` of shape (K, p): row i−1 holds X_ij."""
        X = finite_array("coefs", coefs, 2)
        ks, taus = self.plan(X.shape[1])
        ks = self._available(ks, X.shape[0])
        energy = np.cumsum(X[: ks[-1]] ** 2, axis=0)[np.array(ks) - 1] / self.sigma2
        return self._select(energy, ks, taus)

    def fit_statistics(self, statistics: Any, ks: Sequence[int]) -> SpAMSelector:
        """Select from precomputed T_j(k) = σ^(−2)Σ_{i≤k} X_ij² (rows of ``statistics``) at levels ``ks``.

        ``ks`` must contain every level the selector needs (see :meth:`plan`); in adaptive mode the
        dyadic levels above ``max(ks)`` are dropped with a warning, as in :meth:`fit`.
        """
        T = finite_array("statistics", statistics, 2)
        ks_given = [check_int("ks[i]", k, 1) for k in ks]
        if len(ks_given) != T.shape[0]:
            raise ValueError(f"statistics has {T.shape[0]} rows but ks has {len(ks_given)} levels")
        needed, taus = self.plan(T.shape[1])
        needed = self._available(needed, max(ks_given))
        missing = sorted(set(needed) - set(ks_given))
        if missing:
            raise ValueError(
                f"ks lacks the truncation levels {missing} that mode={self.mode!r} needs"
            )
        rows = [ks_given.index(k) for k in needed]
        return self._select(T[rows], needed, taus)

    def _available(self, ks: list[int], n_rows: int) -> list[int]:
        if ks[-1] <= n_rows:
            return ks
        if self.mode != "adaptive":
            raise ValueError(
                f"mode={self.mode!r} needs K={ks[-1]} coefficients per coordinate, got {n_rows}"
            )
        kept = [k for k in ks if k <= n_rows]
        if not kept:
            raise ValueError(f"mode='adaptive' needs at least K=2 coefficients, got {n_rows}")
        warnings.warn(
            f"adaptive selector: K_rec goes up to {ks[-1]} but only {n_rows} coefficients are "
            f"available; truncating K_rec at {kept[-1]} (the adaptation guarantee weakens)",
            UserWarning,
            stacklevel=3,
        )
        return kept

    def _select(self, T: np.ndarray, ks: list[int], taus: np.ndarray) -> SpAMSelector:
        taus = taus[: len(ks)]  # the kept levels are a prefix of the plan
        self.statistics_ = T
        self.thresholds_ = taus
        self.support_ = np.any(taus[:, None] <= T, axis=0)
        self.truncation_ = ks if self.mode == "adaptive" else ks[0]
        self.n_coefficients_used_ = ks[-1]
        return self

    @property
    def selected_(self) -> np.ndarray:
        """Indices of the selected coordinates."""
        return np.flatnonzero(self.support_)


# --------------------------------------------------------------------------- error metrics


def fdr_fnr(selected: Any, truth: Any) -> tuple[Any, Any]:
    """False discovery and false non-discovery proportions along the last axis.

    FDR = |Ŝ \\ S| / max(|Ŝ|, 1), FNR = |S \\ Ŝ| / max(|S|, 1); the paper's risk is their sum.
    """
    sel, true = _bool_pair(selected, truth)
    n_sel = sel.sum(axis=-1)
    n_true = true.sum(axis=-1)
    fdr = (sel & ~true).sum(axis=-1) / np.maximum(n_sel, 1)
    fnr = (true & ~sel).sum(axis=-1) / np.maximum(n_true, 1)
    return fdr, fnr


def wrong_recovery(selected: Any, truth: Any) -> Any:
    """1{Ŝ ≠ S} along the last axis (the event whose probability Eq. 11 controls)."""
    sel, true = _bool_pair(selected, truth)
    return np.any(sel != true, axis=-1)


def _bool_pair(selected: Any, truth: Any) -> tuple[np.ndarray, np.ndarray]:
    sel = np.asarray(selected, dtype=bool)
    true = np.asarray(truth, dtype=bool)
    if sel.shape[-1:] != true.shape[-1:]:
        raise ValueError(f"selected and truth differ in length: {sel.shape} vs {true.shape}")
    return sel, true


# --------------------------------------------------------------------------- simulation


def _f1(x: np.ndarray) -> np.ndarray:
    return np.sin(2 * np.pi * x)


def _f2(x: np.ndarray) -> np.ndarray:
    return 12 * (x - 0.5) ** 2 - 1


def _f3(x: np.ndarray) -> np.ndarray:
    return 2 * x - 1


def _f4(x: np.ndarray) -> np.ndarray:
    return np.cos(2 * np.pi * x)


def _f5(x: np.ndarray) -> np.ndarray:
    return 2 * np.sin(2 * np.pi * x) / (2 - np.sin(2 * np.pi * x))


#: The s = 5 signal functions of the reproduction (centred numerically before use). f₂ is the
#: paper's 12(x−0.5)² (centred); f₁ = sin(2πx) replaces the paper's unreadable f₁; f₃–f₅ are our
#: choices (the paper's are not stated legibly): ‖f‖² = 0.5, 0.8, 1/3, 0.5, 0.82.
DEFAULT_FUNCTIONS: tuple[Callable[[np.ndarray], np.ndarray], ...] = (_f1, _f2, _f3, _f4, _f5)


def cosine_coefficients(f: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """θ_i = ∫₀¹ (f − ∫f) √2 cos(πix) dx for i = 1..n (midpoint rule on m = max(8n, 2^16) points,
    one DCT-II; error O(m^-2) for smooth f).

    The midpoint-rule DCT is an orthogonal transform, so Σ_i θ_i² over all m − 1 indices equals the
    discrete ‖f − f̄‖².
    """
    n = check_int("n", n, 1)
    m = max(8 * n, 2**16)
    values = np.asarray(f((np.arange(m) + 0.5) / m), dtype=np.float64)
    if values.shape != (m,) or not np.all(np.isfinite(values)):
        raise ValueError(
            "f must map an array of points in [0, 1] to finite values of the same shape"
        )
    dct = scipy.fft.dct(values - values.mean(), type=2)  # 2·Σ_m f(x_m) cos(πi x_m)
    return dct[1 : n + 1] * (math.sqrt(2.0) / (2.0 * m))


@functools.lru_cache(maxsize=4)
def _default_coefficients(n: int) -> tuple[np.ndarray, np.ndarray]:
    theta = np.stack([cosine_coefficients(f, n) for f in DEFAULT_FUNCTIONS])
    energy = np.cumsum(theta**2, axis=1)
    theta.flags.writeable = False
    energy.flags.writeable = False
    return theta, energy


@dataclass(frozen=True)
class SequenceSample:
    """One draw of the sequence model summarised by T_j(k) at the requested truncation levels.

    ``statistics[m, j] = σ^(−2) Σ_{i ≤ ks[m]} X_ij²``; ``support`` marks the s signal coordinates
    (the first s).
    """

    statistics: np.ndarray
    ks: list[int]
    support: np.ndarray


def simulate_sequence_model(
    p: int,
    s: int,
    a: float,
    sigma2: float,
    *,
    functions: Sequence[Callable[[np.ndarray], np.ndarray]] | np.ndarray | None = None,
    basis: Literal["cosine"] = "cosine",
    ks: Sequence[int],
    rng: RngLike = None,
) -> SequenceSample:
    """Draw X_ij = a·θ_ij + σε_ij and return T_j(k) at the levels ``ks`` without forming X.

    Exact in distribution and cheap (the χ²-increment trick): a null coordinate needs T_j only at
    the sorted levels, so it gets independent χ² increments between them; a signal coordinate gets
    explicit Gaussians up to I = 4096 and a non-central χ² increment (exact non-centrality from its
    coefficients) for each level beyond. p = 10⁴ with K up to 2^19 costs milliseconds.

    ``functions``: callables on [0, 1] (centred numerically, cosine coefficients by DCT) or an
    (s, n) array of coefficient sequences θ_j (zero beyond n); default :data:`DEFAULT_FUNCTIONS`.
    """
    p = check_int("p", p, 1)
    s = check_int("s", s, 0, p)
    check_positive("a", a, strict=False)
    check_positive("sigma2", sigma2)
    check_choice("basis", basis, ("cosine",))
    levels = sorted({check_int("ks[i]", k, 1) for k in ks})
    if not levels:
        raise ValueError("ks must name at least one truncation level")
    k_top = levels[-1]
    explicit = min(4096, k_top)
    theta, energy = _signal_coefficients(functions, s, k_top)
    gen = np.random.default_rng(rng)
    sigma = math.sqrt(sigma2)
    T = np.empty((len(levels), p))

    # Null coordinates: T(k_m) = T(k_{m-1}) + χ²_{k_m − k_{m-1}}.
    prev = 0
    acc = np.zeros(p - s)
    for m, k in enumerate(levels):
        acc = acc + gen.chisquare(k - prev, size=p - s)
        T[m, s:] = acc
        prev = k

    # Signal coordinates: explicit Gaussians up to I, non-central χ² increments beyond, with the
    # exact non-centrality (a²/σ²)·Σ_{prev < i ≤ k} θ_i² from the cumulative energy.
    scale = a * a / sigma2
    for j in range(s):
        x = a * theta[j, :explicit] + sigma * gen.standard_normal(explicit)
        cum = np.cumsum(x**2) / sigma2
        prev, total = explicit, cum[-1]
        for m, k in enumerate(levels):
            if k <= explicit:
                T[m, j] = cum[k - 1]
                continue
            nonc = scale * (energy[j, k - 1] - energy[j, prev - 1])
            total = total + gen.noncentral_chisquare(k - prev, max(nonc, 0.0))
            T[m, j] = total
            prev = k
    support = np.zeros(p, dtype=bool)
    support[:s] = True
    return SequenceSample(statistics=T, ks=levels, support=support)


def _signal_coefficients(
    functions: Sequence[Callable[[np.ndarray], np.ndarray]] | np.ndarray | None, s: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The (s, n) coefficients θ_j and their cumulative energies Σ_{i≤k} θ_ij²."""
    if s == 0:
        return np.zeros((0, n)), np.zeros((0, n))
    if functions is None:
        if s > len(DEFAULT_FUNCTIONS):
            raise ValueError(
                f"s={s} exceeds the {len(DEFAULT_FUNCTIONS)} default functions; pass functions="
            )
        theta, energy = _default_coefficients(n)
        return theta[:s], energy[:s]
    if isinstance(functions, np.ndarray):
        coef = finite_array("functions", functions, 2)
        if coef.shape[0] < s:
            raise ValueError(f"functions holds {coef.shape[0]} coefficient rows, need s={s}")
        theta = np.zeros((s, n))
        width = min(n, coef.shape[1])
        theta[:, :width] = coef[:s, :width]
    else:
        if len(functions) < s:
            raise ValueError(f"functions holds {len(functions)} callables, need s={s}")
        theta = np.stack([cosine_coefficients(f, n) for f in functions[:s]])
    return theta, np.cumsum(theta**2, axis=1)


# --------------------------------------------------------------------------- regression front-end


def cosine_design_coefficients(X: Any, y: Any, n_coefficients: int) -> np.ndarray:
    """C_ij = mean_t (y_t − ȳ)·√2 cos(π i x_tj), i = 1..K, by the Chebyshev recurrence (O(NpK)).

    cos(πix) = 2cos(πx)cos(π(i−1)x) − cos(π(i−2)x): one multiply-add per entry instead of a cosine.
    Returns shape (K, p).
    """
    X, y = _check_xy(X, y)
    K = check_int("n_coefficients", n_coefficients, 1)
    yc = (y - y.mean()) * (math.sqrt(2.0) / len(y))
    c1 = np.cos(np.pi * X)
    prev, cur = np.ones_like(X), c1
    out = np.empty((K, X.shape[1]))
    for i in range(K):
        out[i] = yc @ cur
        prev, cur = cur, 2.0 * c1 * cur - prev
    return out


def _check_xy(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    X = finite_array("X", X, 2)
    y = finite_array("y", y, 1)
    if len(y) != X.shape[0]:
        raise ValueError(f"len(y) must equal len(X): got {len(y)} and {X.shape[0]}")
    if len(y) < 2:
        raise ValueError(f"need at least 2 samples, got {len(y)}")
    return X, y


@dataclass(frozen=True)
class SelectionResult:
    """Output of :func:`spam_select`."""

    support: np.ndarray
    statistics: np.ndarray
    thresholds: np.ndarray
    truncation: int | list[int]
    sigma2: float
    n_coefficients: int

    @property
    def selected(self) -> np.ndarray:
        return np.flatnonzero(self.support)


def spam_select(
    X: Any,
    y: Any,
    *,
    mode: Mode = "adaptive",
    basis: Literal["cosine"] = "cosine",
    n_coefficients: int | None = None,
    sigma2: float | None = None,
    delta: float = 0.1,
    smoothness: float = 0.5,
    rescale: bool = False,
    sparsity: int | None = None,
) -> SelectionResult:
    """Select the active covariates of y = Σ_j f_j(x_j) + noise from data (not in the paper).

    Builds empirical cosine coefficients (:func:`cosine_design_coefficients`) and runs
    :class:`SpAMSelector` on them with σ² = ``sigma2`` or the conservative σ̂² = var(y)/N. Covariates
    must lie in [0, 1] (or pass ``rescale=True`` for per-column min–max scaling). The default
    ``n_coefficients`` is the selector's K, capped at N/4 in adaptive mode (coefficients with i ≳ N
    carry no extra information).
    """
    X, y = _check_xy(X, y)
    check_choice("basis", basis, ("cosine",))
    if rescale:
        lo, hi = X.min(axis=0), X.max(axis=0)
        X = (X - lo) / np.where(hi > lo, hi - lo, 1.0)
    elif X.min() < 0 or X.max() > 1:
        raise ValueError(
            "X must lie in [0, 1] for the cosine basis; pass rescale=True to min-max scale"
        )
    N = len(y)
    if sigma2 is None:
        sigma2 = float(np.var(y) / N)
        if sigma2 <= 0:
            raise ValueError("y is constant: sigma2 cannot be estimated, pass sigma2=")
    cap = max(2, N // 4)
    selector = SpAMSelector(
        mode,
        sigma2=sigma2,
        delta=delta,
        smoothness=smoothness,
        sparsity=sparsity,
        k_max=(n_coefficients or cap) if mode == "adaptive" else None,
    )
    if n_coefficients is None:
        ks, _ = selector.plan(X.shape[1])
        n_coefficients = min(ks[-1], cap) if mode == "adaptive" else ks[-1]
    coefs = cosine_design_coefficients(X, y, n_coefficients)
    selector.fit(coefs)
    return SelectionResult(
        support=selector.support_,
        statistics=selector.statistics_,
        thresholds=selector.thresholds_,
        truncation=selector.truncation_,
        sigma2=float(sigma2),
        n_coefficients=int(n_coefficients),
    )
