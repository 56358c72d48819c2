"""Reproduction ``theory.heavy_rnn``: the slow, finite-size transition to chaos in heavy-tailed RNNs.

Xie, Mihalas, Kuśmierz, NeurIPS 2025 (arXiv 2505.09816), at CPU scale. The spec's thresholds
(Gaussian α = 2 is the baseline). Checks (the theory's predictions and the numerics, master seed):

1. g*(α, N) by Monte Carlo: 1/√2 at α = 2; the prototype values at N = 500; strictly decreasing in N
   for α < 2 and increasing in α (Fig. 1A).
3. QR correctness in the linear regime: exponents equal ln|eig(gW)|; the MLE at g = 0.8/ρ is ln 0.8.

Paper claims (simulations of random networks, median over seeds: quick 1, full 5):

2. Quenched networks: the median 1/ρ(W) matches the annealed g* within 15 % (Fig. 1B/C).
4. Slow transition: the mean MLE crosses 0 much later (in units of g*) for α = 1 than for α = 2
   (Fig. 2; headline).
5. Dimension: heavier tails give a lower Kaplan–Yorke dimension at the same gain (Fig. 3B; headline).

Full mode adds the quenched estimator against N (:func:`quenched_drift`: α ∈ {0.5, 0.75, 1, 1.5},
N ∈ {100, 200, 400, 800}): the median 1/ρ(W) drifts above g* for α < 1 at every N, while the
quenched average of the log, exp(E ln 1/ρ), which g* predicts, stays on it (paper claims per α).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import make_rng
from eff_theory._runtime import blas_threads
from eff_theory.heavy_rnn import (
    kaplan_yorke_dimension,
    levy_weight_matrix,
    lyapunov_spectrum,
    max_lyapunov_exponent,
    participation_ratio,
    predicted_transition_gain,
    quenched_statistic,
    quiescent_instability_gain,
    transition_gain_from_sweep,
)

__all__ = [
    "DRIFT_ALPHAS",
    "DRIFT_SIZES",
    "SWEEP_FACTORS",
    "HeavyRNNReproConfig",
    "dimension_check",
    "quenched_drift",
    "run",
    "slow_transition",
    "transition_summary",
]

# The quenched-estimator study of full mode: tails below and above α = 1, N doubling.
DRIFT_ALPHAS = (0.5, 0.75, 1.0, 1.5)
DRIFT_SIZES = (100, 200, 400, 800)

# Gains of the slow-transition sweep in units of g*(α, N) (spec item 4).
SWEEP_FACTORS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0)


@dataclass(frozen=True)
class HeavyRNNReproConfig:
    """Monte Carlo budgets of the reproduction (defaults: quick mode's; the sizes are the spec's)."""

    sweep_samples: int = 2_000  # Monte Carlo draws per (α, N) of the monotonicity sweep
    quenched_trials: int = 20
    transition_trials: int = 4
    dimension_trials: int = 3


_MODES = {
    # The spec's sizes everywhere; quick mode only thins the Monte Carlo of the N sweep (10
    # quenched networks instead of 20 put α = 1 at 0.28 > 0.15 at seed 0: not trimmed).
    "quick": HeavyRNNReproConfig(),
    "full": HeavyRNNReproConfig(
        sweep_samples=10_000, quenched_trials=40, transition_trials=8, dimension_trials=6
    ),
}


def _unit_weights(n: int, alpha: float, trials: int, rng: np.random.Generator) -> np.ndarray:
    return np.stack([levy_weight_matrix(n, alpha, 1.0, rng=rng) for _ in range(trials)])


def slow_transition(
    alpha: float,
    n: int = 300,
    *,
    trials: int = 4,
    factors: tuple[float, ...] = SWEEP_FACTORS,
    n_steps: int = 800,
    warmup: int = 400,
    gstar_samples: int = 4_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean MLE over ``trials`` networks at gains g*·factors and its interpolated zero crossing."""
    gstar = predicted_transition_gain(alpha, n, n_samples=gstar_samples, rng=make_rng(seed, 41))
    gains = gstar * np.asarray(factors, dtype=float)
    Ws = _unit_weights(n, alpha, trials, make_rng(seed, 42, int(alpha * 100)))
    mle = max_lyapunov_exponent(
        Ws, gains, n_steps=n_steps, warmup=warmup, rng=make_rng(seed, 43, int(alpha * 100))
    )
    mean = np.asarray(mle).mean(axis=0)
    crossing = transition_gain_from_sweep(gains, mean)
    return {
        "alpha": alpha,
        "gstar": gstar,
        "gains": gains,
        "mean_mle": mean,
        "crossing": crossing,
        "median_inv_rho": float(np.median(quiescent_instability_gain(Ws))),
    }


def dimension_check(
    alpha: float,
    n: int = 150,
    gain: float = 2.0,
    *,
    trials: int = 3,
    n_steps: int = 500,
    warmup: int = 300,
    seed: int = 0,
    input_std: float = 0.0,
) -> dict[str, float]:
    """Mean Kaplan–Yorke dimension (full spectrum) and participation ratio at one gain
    (``input_std`` > 0: driven by I(t) ~ N(0, input_std²), the paper's noisy setting uses 0.1)."""
    Ws = _unit_weights(n, alpha, trials, make_rng(seed, 51, int(alpha * 100)))
    exps, states = lyapunov_spectrum(
        Ws,
        gain,
        n_steps=n_steps,
        warmup=warmup,
        input_std=input_std,
        rng=make_rng(seed, 52, int(alpha * 100)),
        return_trajectory=True,
    )
    dky = [kaplan_yorke_dimension(e) for e in exps]
    pr = [participation_ratio(states[:, i], warmup=warmup) for i in range(trials)]
    return {"alpha": alpha, "d_ky": float(np.mean(dky)), "pr": float(np.mean(pr))}


def transition_summary(
    alphas: tuple[float, ...] = (1.0, 1.5, 2.0),
    n: int = 300,
    *,
    trials: int = 4,
    seed: int = 0,
    dimension: bool = False,
    gain: float = 2.0,
) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """Rows α, g*, median 1/ρ, crossing, crossing/g* (and D_KY, PR at ``gain``) plus the MLE curves.

    The CLI's ``eff theory heavy-rnn``; the series maps ``"x"`` (g/g*) and one mean-MLE curve per α.
    """
    n = check_int("n", n, minimum=2)
    trials = check_int("trials", trials, minimum=1)
    rows: list[dict[str, Any]] = []
    series: dict[str, list[float]] = {"x": list(SWEEP_FACTORS)}
    with blas_threads(1):
        for alpha in alphas:
            st = slow_transition(alpha, n, trials=trials, seed=seed)
            row: dict[str, Any] = {
                "alpha": alpha,
                "g*": st["gstar"],
                "median 1/rho": st["median_inv_rho"],
                "crossing g_c": st["crossing"],
                "g_c/g*": st["crossing"] / st["gstar"],
            }
            if dimension:
                dim = dimension_check(alpha, n, gain, trials=trials, seed=seed)
                row[f"D_KY (g={gain})"] = dim["d_ky"]
                row[f"PR (g={gain})"] = dim["pr"]
            rows.append(row)
            series[f"alpha={alpha}"] = [float(v) for v in st["mean_mle"]]
    return rows, series


def _gstar_claims(result: Result, settings: HeavyRNNReproConfig, seed: int) -> None:
    g2 = predicted_transition_gain(2.0, 1000, n_samples=4000, rng=make_rng(seed, 11))
    result.claims.append(
        Claim(
            "|g*(α=2, N=1000) − 1/√2|, Monte Carlo 4000 draws",
            abs(g2 - 1 / math.sqrt(2)),
            0.005,
            "<=",
        )
    )
    for alpha, expected, tol in ((1.0, 0.178, 0.006), (1.5, 0.391, 0.008)):
        g = predicted_transition_gain(
            alpha, 500, n_samples=10_000, rng=make_rng(seed, 12, int(alpha * 100))
        )
        result.claims.append(
            Claim(
                f"|g*(α={alpha}, N=500) − {expected}| (prototype value), 10k draws",
                abs(g - expected),
                tol,
                "<=",
            )
        )
        result.metrics[f"gstar[alpha={alpha},N=500]"] = g
    sizes = (100, 200, 500, 1000, 5000)
    alphas = (0.75, 1.0, 1.5, 2.0)
    grid = np.array(
        [
            [
                predicted_transition_gain(
                    a, n, n_samples=settings.sweep_samples, rng=make_rng(seed, 13, i, j)
                )
                for j, n in enumerate(sizes)
            ]
            for i, a in enumerate(alphas)
        ]
    )
    for i, alpha in enumerate(alphas[:-1]):
        result.claims.append(
            Claim(
                f"g*(α={alpha}) strictly decreasing in N over {sizes}: min g*(N_i) − g*(N_i+1)",
                float(np.min(-np.diff(grid[i]))),
                0.0,
                ">",
            )
        )
    result.claims.append(
        Claim(
            f"g* increasing in α over {alphas} at every N in {sizes}: min step in α",
            float(np.min(np.diff(grid, axis=0))),
            0.0,
            ">",
        )
    )
    for i, alpha in enumerate(alphas):
        result.table.append(
            {
                "experiment": "g* (Monte Carlo)",
                "alpha": alpha,
                **{f"N={n}": grid[i, j] for j, n in enumerate(sizes)},
            }
        )


def _quenched(settings: HeavyRNNReproConfig, seed: int) -> dict[float, float]:
    """Per α: max over N ∈ {200, 500} of |median 1/ρ(W) − g*|/g* (one seed)."""
    out = {}
    for alpha in (1.0, 1.5, 2.0):
        errors = []
        for n in (200, 500):
            Ws = _unit_weights(
                n, alpha, settings.quenched_trials, make_rng(seed, 21, int(alpha * 100), n)
            )
            med = float(np.median(quiescent_instability_gain(Ws)))
            gstar = predicted_transition_gain(alpha, n, n_samples=10_000, rng=make_rng(seed, 22, n))
            errors.append(abs(med - gstar) / gstar)
        out[alpha] = max(errors)
    return out


def _quenched_claims(result: Result, settings: HeavyRNNReproConfig, seeds: list[int]) -> None:
    per = [_quenched(settings, s) for s in seeds]
    for alpha in (1.0, 1.5, 2.0):
        result.claims.append(
            paper_claim(
                f"quenched vs annealed, α={alpha}: max over N∈{{200,500}} of |median 1/ρ(W) − g*|/g* "
                f"({settings.quenched_trials} networks)",
                [p[alpha] for p in per],
                0.15,
                "<=",
                seeds=seeds,
                paper="Fig. 1B/C: the annealed prediction g*(α, N) matches the quenched networks' "
                "transition (N up to 10^4)",
            )
        )


def quenched_drift(
    seed: int,
    alphas: tuple[float, ...] = DRIFT_ALPHAS,
    sizes: tuple[int, ...] = DRIFT_SIZES,
    trials: int = 40,
) -> dict[tuple[float, int], dict[str, float]]:
    """Per (α, N): g* (10k draws) and, over ``trials`` quenched networks, the relative deviation
    from it of the median 1/ρ(W) and of the quenched average of the log exp(E ln 1/ρ(W))."""
    out = {}
    for i, alpha in enumerate(alphas):
        for n in sizes:
            gstar = predicted_transition_gain(alpha, n, n_samples=10_000, rng=make_rng(seed, 24, n))
            rng = make_rng(seed, 23, i, n)
            inv = np.array(
                [
                    quiescent_instability_gain(levy_weight_matrix(n, alpha, 1.0, rng=rng))
                    for _ in range(trials)
                ]
            )  # one network at a time: a stack of 40 800² matrices would take 200 MB
            med = quenched_statistic(inv, "median")[0]
            logm = quenched_statistic(inv, "log_mean")[0]
            out[(alpha, n)] = {
                "gstar": gstar,
                "median": med,
                "log_mean": logm,
                "median_rel": (med - gstar) / gstar,
                "log_mean_rel": (logm - gstar) / gstar,
            }
    return out


# Expected verdicts of the quenched-estimator claims, set by their first 5-seed run (claims.md;
# seeds 0-4, |bias| median [min, max]: median 1/ρ 0.370 [0.327, 0.454] at α = 0.5 and 0.183
# [0.139, 0.222] at α = 0.75; exp(E ln 1/ρ) 0.079 [0.005, 0.165] and 0.092 [0.035, 0.112]).
_MEDIAN_XFAIL = (
    "g* is the annealed mean log growth, so it predicts E ln ρ, not the median network: for α < 1 "
    "ln ρ is right-skewed and the median 1/ρ sits above g* by a bias flat in N (α = 0.5: +47, +39, "
    "+31, +36 % at N = 100-800): a statistic mismatch, not a finite-size drift"
)
_DRIFT_EXPECTED: dict[tuple[str, float], tuple[str, str]] = {
    ("median", 0.5): ("xfail", _MEDIAN_XFAIL),
    ("median", 0.75): ("xfail", _MEDIAN_XFAIL),
    ("log_mean", 0.5): ("reproduces", ""),
    ("log_mean", 0.75): ("reproduces", ""),
}


def _drift_claims(result: Result, settings: HeavyRNNReproConfig, seeds: list[int]) -> None:
    """Full mode: the quenched estimators against N, per α (claims for α < 1, where they differ)."""
    per = {s: quenched_drift(s, trials=settings.quenched_trials) for s in seeds}
    paper = (
        "Fig. 1B/C: the annealed prediction g*(α, N) matches the quenched networks' transition "
        "(Cauchy, N = 100); Fig. 1A: g* for α from 0.5 to 2"
    )
    for stat, label in (("median", "median 1/ρ(W)"), ("log_mean", "exp(E ln 1/ρ(W))")):
        for alpha in (0.5, 0.75):
            expected, reason = _DRIFT_EXPECTED[(stat, alpha)]
            result.claims.append(
                paper_claim(
                    f"quenched vs annealed, α={alpha}: |mean over N∈{{{', '.join(map(str, DRIFT_SIZES))}}} "
                    f"of ({label} − g*)/g*| (the bias; {settings.quenched_trials} networks per N)",
                    [abs(float(np.mean([per[s][(alpha, n)][f"{stat}_rel"] for n in DRIFT_SIZES])))
                     for s in seeds],
                    0.15, "<=", seeds=seeds, paper=paper, modes=("full",),
                    expected=expected, reason=reason,
                )
            )  # fmt: skip
    med = lambda xs: float(np.median(xs))  # noqa: E731
    series: dict[str, list[float]] = {"x": [float(n) for n in DRIFT_SIZES]}
    for alpha in DRIFT_ALPHAS:
        for stat in ("median", "log_mean"):
            series[f"alpha={alpha} {stat}"] = [
                med([per[s][(alpha, n)][f"{stat}_rel"] for s in seeds]) for n in DRIFT_SIZES
            ]
        result.table.append(
            {
                "experiment": f"quenched estimator vs g* (median over seeds {seeds[0]}-{seeds[-1]})",
                "alpha": alpha,
                **{
                    f"N={n}": f"median {series[f'alpha={alpha} median'][j]:+.1%}, "
                    f"log-mean {series[f'alpha={alpha} log_mean'][j]:+.1%}"
                    for j, n in enumerate(DRIFT_SIZES)
                },
            }
        )
    result.add_series(
        "quenched_estimator_drift_vs_n",
        series,
        title="Quenched transition gain vs the annealed g*(α, N): median 1/ρ and exp(E ln 1/ρ)",
        xlabel="network size N (units)",
        ylabel="relative deviation from g* (estimate / g* − 1)",
        yscale="linear",
    )
    result.metrics["quenched_drift"] = {
        str(s): {f"{a},{n}": v for (a, n), v in d.items()} for s, d in per.items()
    }
    result.notes.append(
        "Quenched estimator (full mode): g* is the annealed mean log growth, so it predicts the "
        "quenched average of the log exp(E ln 1/ρ), not the median network's 1/ρ; for α < 1 ln ρ is "
        "right-skewed and the median sits 15-45 % above g* at every N (a statistic mismatch, not a "
        "finite-size drift: a linear simulation with W redrawn every step grows at g* within "
        "1-8 %, and the median of the T = 100 linear growth of quenched networks drifts like 1/ρ)."
    )


def _linear_regime_claims(result: Result, seed: int) -> None:
    eig_err, mle_err = 0.0, 0.0
    for alpha in (1.0, 1.5, 2.0):
        for trial in range(2):
            W = levy_weight_matrix(100, alpha, 1.0, rng=make_rng(seed, 31, int(alpha * 100), trial))
            eig = np.linalg.eigvals(W)
            rho = float(np.abs(eig).max())
            g = 0.7 / rho
            exps = lyapunov_spectrum(
                W, g, n_steps=3000, warmup=500, k=6, rng=make_rng(seed, 32, trial)
            )
            ref = np.sort(np.log(np.abs(g * eig)))[::-1][:6]
            eig_err = max(eig_err, float(np.abs(exps - ref).max()))
            mle = max_lyapunov_exponent(
                W, 0.8 / rho, n_steps=3000, warmup=500, rng=make_rng(seed, 33, trial)
            )
            mle_err = max(mle_err, abs(mle - math.log(0.8)))
    result.claims.append(
        Claim(
            "QR at g = 0.7/ρ (N=100, α∈{1,1.5,2}): max |λ_i − ln|eig_i(gW)||, top 6",
            eig_err,
            0.01,
            "<=",
        )
    )
    result.claims.append(
        Claim("MLE at g = 0.8/ρ: max |MLE − ln 0.8| over 6 networks", mle_err, 0.01, "<=")
    )


_PAPER_SLOW = (
    "Fig. 2: heavy-tailed (α < 2) networks cross into chaos slowly over a wide range of gains, "
    "Gaussian ones sharply at g* = 1/√2 (N = 1000-10^4)"
)
_PAPER_DIM = (
    "Fig. 3B: heavier tails give lower-dimensional chaotic dynamics (Kaplan–Yorke) at the same gain"
)


def _slow(settings: HeavyRNNReproConfig, seed: int) -> dict[str, Any]:
    sweeps = {
        a: slow_transition(a, 300, trials=settings.transition_trials, seed=seed)
        for a in (1.0, 1.5, 2.0)
    }
    rel = {a: s["crossing"] / s["gstar"] for a, s in sweeps.items()}
    at2 = {a: float(s["mean_mle"][SWEEP_FACTORS.index(2.0)]) for a, s in sweeps.items()}
    return {"sweeps": sweeps, "rel": rel, "at2": at2}


def _slow_transition_claims(
    result: Result, settings: HeavyRNNReproConfig, seeds: list[int]
) -> None:
    per = [_slow(settings, s) for s in seeds]
    kw: dict[str, Any] = {"seeds": seeds, "paper": _PAPER_SLOW}
    result.claims += [
        paper_claim(
            "(g_c/g*) at α=1 over (g_c/g*) at α=2 (N=300, mean MLE crossing)",
            [p["rel"][1.0] / p["rel"][2.0] for p in per], 1.5, ">=", headline=True, **kw,
        ),
        paper_claim(
            "α=2 crossing gain g_c (lower bound)",
            [p["sweeps"][2.0]["crossing"] for p in per], 0.70, ">=", **kw,
        ),
        paper_claim(
            "α=2 crossing gain g_c (upper bound)",
            [p["sweeps"][2.0]["crossing"] for p in per], 0.95, "<=", **kw,
        ),
        paper_claim("α=1 mean MLE at 2g*", [p["at2"][1.0] for p in per], 0.05, "<=", **kw),
        paper_claim("α=2 mean MLE at 2g*", [p["at2"][2.0] for p in per], 0.10, ">=", **kw),
    ]  # fmt: skip
    sweeps, rel, at2 = per[0]["sweeps"], per[0]["rel"], per[0]["at2"]
    result.add_series(
        "mean_mle_vs_g_over_gstar",
        {
            "x": list(SWEEP_FACTORS),
            **{f"alpha={a}": [float(v) for v in s["mean_mle"]] for a, s in sweeps.items()},
        },
        title=f"Transition to chaos in heavy-tailed RNNs (N = 300), seed {seeds[0]}",
        xlabel="gain relative to the predicted transition, g / g*",
        ylabel="mean maximal Lyapunov exponent (per step)",
        yscale="linear",
    )
    for a, s in sweeps.items():
        result.table.append(
            {
                "experiment": f"slow transition (N=300, seed {seeds[0]})",
                "alpha": a,
                "g*": s["gstar"],
                "crossing g_c": s["crossing"],
                "g_c/g*": rel[a],
                "mean MLE at 2g*": at2[a],
            }
        )


def _dimension_claims(result: Result, settings: HeavyRNNReproConfig, seeds: list[int]) -> None:
    per = [
        {a: dimension_check(a, trials=settings.dimension_trials, seed=s) for a in (1.0, 1.5, 2.0)}
        for s in seeds
    ]
    d = [{a: v["d_ky"] for a, v in dims.items()} for dims in per]
    kw: dict[str, Any] = {"seeds": seeds, "paper": _PAPER_DIM}
    result.claims += [
        paper_claim("D_KY(α=1.5) − D_KY(α=1) at g=2, N=150", [x[1.5] - x[1.0] for x in d], 0.0, ">", **kw),
        paper_claim("D_KY(α=2) − D_KY(α=1.5) at g=2, N=150", [x[2.0] - x[1.5] for x in d], 0.0, ">", **kw),
        paper_claim(
            "D_KY(α=2) / D_KY(α=1) at g=2, N=150", [x[2.0] / x[1.0] for x in d], 2.0, ">=",
            unit="x", headline=True, **kw,
        ),
    ]  # fmt: skip
    for a, v in per[0].items():
        result.table.append(
            {
                "experiment": f"dimension (N=150, g=2, seed {seeds[0]})",
                "alpha": a,
                "D_KY": v["d_ky"],
                "PR": v["pr"],
            }
        )


PAPER_TITLE = "Slow Transition to Low-Dimensional Chaos in Heavy-Tailed Recurrent Neural Networks"
HEADLINE = (
    "Finite heavy-tailed (Lévy α-stable) RNNs have a sharp, predictable quiescent-to-chaos "
    "transition at g*(α, N) that shrinks with N, and the transition is slow: chaos grows over a wide "
    "range of gains (an extended edge of chaos) with lower-dimensional dynamics than Gaussian RNNs"
)


def run(mode: Mode = "quick", seed: int = 0, cfg: HeavyRNNReproConfig | None = None) -> Result:
    check_choice("mode", mode, _MODES)
    settings = cfg or _MODES[mode]
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    result = Result(
        name="theory.heavy_rnn", mode=mode, seed=seed, paper_title=PAPER_TITLE, headline=HEADLINE
    )
    with blas_threads(1):
        _gstar_claims(result, settings, seed)
        _quenched_claims(result, settings, seeds)
        _linear_regime_claims(result, seed)
        _slow_transition_claims(result, settings, seeds)
        _dimension_claims(result, settings, seeds)
        if mode == "full":
            _drift_claims(result, settings, seeds)
    result.notes += [
        "α = 2 is N(0, 2σ²) (√2 convention): the Gaussian transition is at g* = 1/√2 ≈ 0.707.",
        "Lyapunov exponents use J_t = diag(1 − x_{t+1}²)·gW applied as J_t Q (the published Fig. 2 "
        "crossings came from a transposed, one-step-late Jacobian and are not reproduced).",
        f"N sweep of g*: {settings.sweep_samples} Monte Carlo draws per point; quenched check: "
        f"{settings.quenched_trials} networks; slow transition: N=300, {settings.transition_trials} "
        f"networks, 800 steps (400 warmup); dimension: N=150, {settings.dimension_trials} networks, "
        "300 warmup + 200 QR steps, autonomous.",
        "Participation ratio (PR) is reported, not claimed (spec: not verified; the paper's Fig. 3C "
        "is noise-driven at N = 1000).",
    ]
    return result
