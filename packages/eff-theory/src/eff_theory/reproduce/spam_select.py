"""Reproduction ``theory.spam_select``: χ² selectors of Liu (NeurIPS 2025) in the sequence model.

Setting of the paper's App. B: σ² = 1/300 (n = 300), s = 5 signals scaled by a, cosine basis,
μ_k = 1/k (Sobolev α = 1/2), δ = 0.1; the sequence model is simulated exactly with the χ²-increment
trick (:func:`~eff_theory.spam_select.simulate_sequence_model`). Selectors compared on the same
draws: support recovery (Eq. 11, the method), adaptive (Eq. 13), the Theorem-7 "suboptimal" one
truncated at the estimation level K_e, the "univariate" level K_u, and the Theorem-1 multiple-testing
selector with the paper's constants.

Check (the spec's thresholds; Laurent–Massart, every seed): the null false-selection rate is at
most δ/2. Paper claims (Monte Carlo per seed, median over seeds: quick 1, full 5): P(Ŝ ≠ S) of (11)
falls with a and sits at the paper's anchors (a = 0.3 undetectable, a = 0.5 partial, a = 0.7 about
half, a ≥ 1 exact); larger p needs larger a; K_e is worse than K' (estimation ≠ selection,
headline); adaptation costs at most 0.05 in P(Ŝ ≠ S) (headline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import make_rng
from eff_theory._runtime import blas_threads
from eff_theory.spam_select import SpAMSelector, fdr_fnr, simulate_sequence_model, wrong_recovery

__all__ = ["SELECTORS", "SpAMSelectReproConfig", "risk_row", "run", "selection_risks"]

SIGMA2 = 1.0 / 300.0
S = 5
DELTA = 0.1
A_GRID = (0.3, 0.5, 0.7, 1.0, 1.5)
SELECTORS = ("recovery", "adaptive", "suboptimal", "univariate", "testing")


@dataclass(frozen=True)
class SpAMSelectReproConfig:
    """Monte-Carlo budgets and the p sweep (defaults: quick mode's)."""

    reps: int = 160
    null_reps: int = 800
    p_sweep: tuple[int, ...] = (100,)
    sweep_a: tuple[float, ...] = (0.7,)
    seeds: int = 1


_MODES = {
    "quick": SpAMSelectReproConfig(),
    "full": SpAMSelectReproConfig(
        reps=300, null_reps=2000, p_sweep=(10, 100, 1000), sweep_a=A_GRID, seeds=5
    ),
}
PAPER_TITLE = (
    "Minimax-Optimal Univariate Function Selection in Sparse Additive Models: Rates, Adaptation, "
    "and the Estimation-Selection Gap"
)
HEADLINE = (
    "Minimax separation rates for univariate-function selection in SpAM (FDR + FNR and exact "
    "support recovery), an adaptive procedure that pays little for unknown smoothness, and "
    "selection differs from estimation: estimation-optimal truncation selects suboptimally "
    "(App. B simulations, n = 300, p up to 10^4)"
)
_PAPER = "App. B simulations (n = 300, s = 5, p = 10^4, δ = 0.1): P(Ŝ ≠ S) falls from ~1 at a = 0.3 to ~0 at a ≥ 1"


def _selectors(
    names: tuple[str, ...], sigma2: float = SIGMA2, delta: float = DELTA, s: int = S
) -> dict[str, SpAMSelector]:
    kw = {"sigma2": sigma2, "delta": delta}
    make = {
        "recovery": lambda: SpAMSelector("recovery", **kw),
        "adaptive": lambda: SpAMSelector("adaptive", **kw),
        "suboptimal": lambda: SpAMSelector("recovery", truncation="estimation", **kw),
        "univariate": lambda: SpAMSelector("recovery", truncation="univariate", **kw),
        "testing": lambda: SpAMSelector("testing", sparsity=max(s, 1), **kw),
    }
    unknown = sorted(set(names) - set(make))
    if unknown:
        raise ValueError(f"selectors must be among {list(make)}, got {unknown}")
    return {name: make[name]() for name in names}


def selection_risks(
    p: int,
    s: int,
    a: float,
    reps: int,
    rng: np.random.Generator,
    names: tuple[str, ...] = SELECTORS,
    *,
    sigma2: float = SIGMA2,
    delta: float = DELTA,
) -> dict[str, dict[str, float]]:
    """Monte-Carlo P(Ŝ ≠ S), FDR + FNR, P(Ŝ ≠ ∅) and mean |Ŝ| of each selector on shared draws."""
    selectors = _selectors(names, sigma2, delta, s)
    ks = sorted({k for sel in selectors.values() for k in sel.plan(p)[0]})
    supports = {name: np.empty((reps, p), dtype=bool) for name in names}
    truth = np.zeros(p, dtype=bool)
    for r in range(reps):
        sample = simulate_sequence_model(p, s, a, sigma2, ks=ks, rng=rng)
        truth = sample.support
        for name, sel in selectors.items():
            supports[name][r] = sel.fit_statistics(sample.statistics, sample.ks).support_
    out = {}
    for name, sup in supports.items():
        fdr, fnr = fdr_fnr(sup, truth)
        out[name] = {
            "p_wrong": float(np.mean(wrong_recovery(sup, truth))),
            "fdr_fnr": float(np.mean(fdr + fnr)),
            "p_any": float(np.mean(sup.any(axis=1))),
            "mean_selected": float(np.mean(sup.sum(axis=1))),
        }
    return out


def _one_seed(cfg: SpAMSelectReproConfig, seed: int) -> dict[str, Any]:
    """The Monte-Carlo risks of one seed: the null, the a grid at p = 1e4, the p sweep."""
    null = selection_risks(1000, 0, 0.0, cfg.null_reps, make_rng(seed, 1), ("recovery", "adaptive"))
    main = {
        a: selection_risks(10_000, S, a, cfg.reps, make_rng(seed, 2, i))
        for i, a in enumerate(A_GRID)
    }
    sweep = {
        (p, a): selection_risks(
            p, S, a, cfg.reps, make_rng(seed, 3, p, i), ("recovery", "adaptive")
        )
        for p in cfg.p_sweep
        for i, a in enumerate(cfg.sweep_a)
    }
    return {"null": null, "main": main, "sweep": sweep}


def run(mode: Mode = "quick", seed: int = 0, cfg: SpAMSelectReproConfig | None = None) -> Result:
    cfg = cfg or _MODES[mode]
    seeds = claim_seeds(mode, seed, quick=cfg.seeds, full=cfg.seeds)
    result = Result(
        name="theory.spam_select", mode=mode, seed=seed, paper_title=PAPER_TITLE, headline=HEADLINE
    )
    with blas_threads(1):
        per = [_one_seed(cfg, s) for s in seeds]
    null, main, sweep = per[0]["null"], per[0]["main"], per[0]["sweep"]

    def vals(fn: Any) -> list[float]:
        return [float(fn(x["main"], x["sweep"])) for x in per]

    kw: dict[str, Any] = {"seeds": seeds, "paper": _PAPER}
    for name in ("recovery", "adaptive"):
        result.claims.append(
            Claim(
                f"null (p=1000, {cfg.null_reps} reps): P(any selection) of the {name} selector ≤ δ/2, every seed",
                math.nan, DELTA / 2, "<=",
                values=[x["null"][name]["p_any"] for x in per], seeds=seeds,
            )
        )  # fmt: skip

    def rise(m: dict, _sw: dict) -> float:
        rec = [m[a]["recovery"]["p_wrong"] for a in A_GRID]
        return max(float(np.diff(rec).max()), 0.0)

    result.claims += [
        paper_claim(
            "recovery (11), p=1e4: largest rise of P(Ŝ≠S) between consecutive a (non-increasing, tol 0.05)",
            vals(rise), 0.05, "<=", **kw,
        ),
        paper_claim(
            "recovery, p=1e4, a=0.3: FDR+FNR (undetectable)",
            vals(lambda m, _: m[0.3]["recovery"]["fdr_fnr"]), 0.9, **kw,
        ),
        paper_claim("recovery, p=1e4, a=0.5: FDR+FNR ≥ 0.4", vals(lambda m, _: m[0.5]["recovery"]["fdr_fnr"]), 0.4, **kw),
        paper_claim(
            "recovery, p=1e4, a=0.5: FDR+FNR ≤ 0.85", vals(lambda m, _: m[0.5]["recovery"]["fdr_fnr"]), 0.85, "<=", **kw,
        ),
        paper_claim("recovery, p=1e4, a=0.7: P(Ŝ≠S) ≥ 0.3", vals(lambda m, _: m[0.7]["recovery"]["p_wrong"]), 0.3, **kw),
        paper_claim(
            "recovery, p=1e4, a=0.7: P(Ŝ≠S) ≤ 0.75", vals(lambda m, _: m[0.7]["recovery"]["p_wrong"]), 0.75, "<=", **kw,
        ),
        paper_claim(
            "recovery, p=1e4: max P(Ŝ≠S) over a ≥ 1.0",
            vals(lambda m, _: max(m[a]["recovery"]["p_wrong"] for a in A_GRID if a >= 1.0)), 0.1, "<=", **kw,
        ),
        paper_claim(
            "a=0.7: P(Ŝ≠S) at p=1e4 minus at p=100 (recovery; larger p needs larger signal)",
            vals(lambda m, sw: m[0.7]["recovery"]["p_wrong"] - sw[(100, 0.7)]["recovery"]["p_wrong"]), 0.1, **kw,
        ),
        paper_claim(
            "p=1e4, a=0.7: P(Ŝ≠S) of K_e (estimation-truncated) minus recovery (11) (Theorem 7)",
            vals(lambda m, _: m[0.7]["suboptimal"]["p_wrong"] - m[0.7]["recovery"]["p_wrong"]), 0.1,
            headline=True, **kw,
        ),
        paper_claim(
            "p=1e4: max over a of P(Ŝ≠S) adaptive (13) minus recovery (11)",
            vals(lambda m, _: max(m[a]["adaptive"]["p_wrong"] - m[a]["recovery"]["p_wrong"] for a in A_GRID)),
            0.05, "<=", headline=True, **kw,
        ),
    ]  # fmt: skip
    for a in A_GRID:
        for name, r in main[a].items():
            result.table.append({"p": 10_000, "a": a, "selector": name, **risk_row(r)})
    for (p, a), risks in sweep.items():
        for name, r in risks.items():
            result.table.append({"p": p, "a": a, "selector": name, **risk_row(r)})
    result.add_series(
        "p_wrong_vs_a",
        {
            "x": list(A_GRID),
            **{name: [main[a][name]["p_wrong"] for a in A_GRID] for name in SELECTORS},
        },
        title=f"Support recovery failures vs signal strength, p = 10⁴, seed {seeds[0]}",
        xlabel="signal amplitude, a",
        ylabel="P(Ŝ ≠ S), Monte Carlo",
        yscale="linear",
    )
    truncs = {name: sel.plan(10_000)[0][-1] for name, sel in _selectors(SELECTORS).items()}
    result.metrics = {
        "null_p_any_recovery": null["recovery"]["p_any"],
        "null_p_any_adaptive": null["adaptive"]["p_any"],
        "reps": cfg.reps,
        "seeds": seeds,
        "null_reps": cfg.null_reps,
        **{f"K_{name}_p1e4": k for name, k in truncs.items()},
    }
    result.notes += [
        "sequence model simulated exactly (χ² increments); signals: f1 = sin(2πx) (substitute for the "
        "paper's unreadable f1), f2 = 12(x−0.5)²−1 (paper, centred), f3 = 2x−1, f4 = cos(2πx), "
        "f5 = 2sin(2πx)/(2−sin(2πx)) (our choices: the paper's f3–f5 are not stated legibly).",
        "K_rec of the adaptive selector runs to 2^19 for p = 1e4; 'testing' is Theorem 1 with the "
        "paper's constants (very conservative); 'univariate' truncates at K_u = min{k: μ_k ≤ √k/n}.",
        "Sim. 3 (smoothness reweighting) is not reproduced: with the cosine basis it shows no "
        "separation between methods (basis-dependent).",
    ]
    return result


def risk_row(r: dict[str, float]) -> dict[str, float]:
    """The table columns of one selector's risks."""
    return {
        "P(S_hat != S)": r["p_wrong"],
        "FDR+FNR": r["fdr_fnr"],
        "mean |S_hat|": r["mean_selected"],
    }
