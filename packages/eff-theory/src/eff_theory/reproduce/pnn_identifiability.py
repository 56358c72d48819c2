"""Reproduction ``theory.pnn_identifiability``: exact neurovariety dimensions, identifiability
verdicts and constructive shallow recovery for polynomial neural networks (Usevich et al., NeurIPS 2025).

Checks (exact algebra; the spec's reference tables): the exact mod-p Jacobian rank (two primes) reproduces the
known dimensions, including the Alexander–Hirschowitz exceptions, the quadratic-form defect and
KTB's defective example (2,3,2,3,4) (expected 22, exact 16); :func:`check_identifiability` returns the
reference verdicts, including an expanding architecture whose every block passes Kruskal but whose
exact rank is defective; Jennrich recovery of shallow networks is exact to 1e-8 in under 5 s per
case. For comparison the table also shows float64 SVD ranks (the trap: unreliable at high degree).
Paper claim (headline; 40 architectures per seed, quick 2 seeds, full 5): in random pyramidal
architectures, every block passing Kruskal's condition implies exact finite identifiability.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

from eff_shared.errors import check_choice
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import make_rng
from eff_theory._runtime import blas_threads
from eff_theory.pnn_identifiability import (
    alignment_error,
    check_identifiability,
    expected_dimension,
    identify_shallow,
    jacobian_ranks,
    kruskal_block_condition,
    neurovariety_dimension,
    shallow_tensor,
)

__all__ = [
    "DIMENSION_TABLE",
    "RECOVERY_CASES",
    "VERDICT_TABLE",
    "PNNIdentifiabilityReproConfig",
    "dimension_rows",
    "run",
    "verdict_rows",
]

#: (widths, degrees, expected dimension, exact dimension, note) — the spec's reference values.
DIMENSION_TABLE: tuple[tuple[tuple[int, ...], tuple[int, ...], int, int, str], ...] = (
    ((3, 5, 1), (4,), 15, 14, "Alexander–Hirschowitz exception"),
    ((5, 7, 1), (3,), 35, 34, "Alexander–Hirschowitz exception"),
    ((4, 9, 1), (4,), 35, 34, "Alexander–Hirschowitz exception"),
    ((4, 3, 1), (2,), 10, 9, "quadratic forms: 3·4 − C(3,2)"),
    ((3, 3, 3), (2,), 15, 15, "equi-width"),
    ((2, 2, 2, 2), (2, 2), 8, 8, "equi-width"),
    ((3, 3, 3, 3), (2, 2), 21, 21, "equi-width"),
    ((4, 3, 2, 2), (2, 2), 17, 17, ""),
    ((2, 4, 8), (4,), 36, 36, ""),
    ((2, 3, 4, 5), (3, 3), 31, 31, ""),
    ((2, 3, 2, 3, 4), (2, 2, 2), 22, 16, "KTB's script example"),
    ((2, 4, 6, 7), (4, 2), 63, 60, "every block passes Kruskal"),
)

#: (widths, degrees, verdict) — the spec's reference verdicts.
VERDICT_TABLE: tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...] = (
    ((4, 3, 2), (2,), "identifiable"),
    ((4, 3, 2, 2), (2, 2), "identifiable"),
    ((2, 4, 8), (4,), "identifiable"),
    ((3, 3, 3, 1), (2, 2), "not_identifiable"),
    ((2, 4, 6, 1), (4, 4), "not_identifiable"),
    ((2, 4, 6, 7), (4, 2), "not_identifiable"),
    ((2, 3, 4, 5), (3, 3), "finitely_identifiable"),
)

#: (d0, d1, d2, r) shallow networks recovered by Jennrich.
RECOVERY_CASES: tuple[tuple[int, int, int, int], ...] = (
    (5, 4, 3, 2),
    (6, 6, 1, 3),
    (3, 5, 4, 4),
    (8, 6, 2, 3),
)

_BIASED = (((2, 2, 2), (3,), 10), ((4, 3, 2), (3,), 20))


def _arch(widths: tuple[int, ...], degrees: tuple[int, ...]) -> str:
    return f"{widths} r={degrees if len(degrees) > 1 else degrees[0]}"


def dimension_rows(seed: int = 0, float_ranks: bool = True) -> list[dict[str, Any]]:
    """One row per :data:`DIMENSION_TABLE` entry: expected, exact (mod p, two primes), float64 rank."""
    rows = []
    for widths, degrees, expected, exact, note in DIMENSION_TABLE:
        start = time.perf_counter()
        dim = neurovariety_dimension(widths, degrees, seed=seed)
        elapsed = time.perf_counter() - start
        row: dict[str, Any] = {
            "architecture": _arch(widths, degrees),
            "expected": expected_dimension(widths, degrees),
            "exact (mod p)": dim,
            "reference": exact,
        }
        if float_ranks:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # R >= 6 warns by design
                row["float64 rank"] = jacobian_ranks(
                    widths, degrees, method="float", trials=1, seed=seed
                )[0]
        row |= {
            "match": dim == exact and row["expected"] == expected,
            "seconds": elapsed,
            "note": note,
        }
        rows.append(row)
    return rows


def verdict_rows(seed: int = 0) -> list[dict[str, Any]]:
    """One row per :data:`VERDICT_TABLE` entry with the verdict and its evidence."""
    rows = []
    for widths, degrees, reference in VERDICT_TABLE:
        start = time.perf_counter()
        rep = check_identifiability(widths, degrees, seed=seed)
        rows.append(
            {
                "architecture": _arch(widths, degrees),
                "verdict": rep.verdict,
                "reference": reference,
                "match": rep.verdict == reference,
                "P - s": rep.params_minus_symmetries,
                "ambient": rep.ambient_dim,
                "exact dim": rep.dim,
                "blocks pass Kruskal": all(rep.block_ok),
                "seconds": time.perf_counter() - start,
            }
        )
    return rows


def recovery_rows(seed: int = 0) -> list[dict[str, Any]]:
    """Jennrich recovery of random shallow networks: term error after Hungarian matching."""
    rows = []
    for i, (d0, d1, d2, r) in enumerate(RECOVERY_CASES):
        gen = make_rng(seed, 7, i)
        W1 = gen.standard_normal((d1, d0))
        W2 = gen.standard_normal((d2, d1))
        start = time.perf_counter()
        W1_hat, W2_hat = identify_shallow(shallow_tensor(W1, W2, r), d1, seed=make_rng(seed, 8, i))
        elapsed = time.perf_counter() - start
        rows.append(
            {
                "case (d0,d1,d2,r)": f"({d0},{d1},{d2},{r})",
                "term error": alignment_error(W1, W2, W1_hat, W2_hat, r),
                "seconds": elapsed,
            }
        )
    return rows


def pyramidal_sweep(seed: int, n: int = 40) -> dict[str, int]:
    """Random pyramidal architectures (non-increasing widths ≤ 7, r ∈ {2,3,4}, L ≤ 4): agreement of the
    per-block Kruskal condition with exact finite identifiability, and the architectures whose every
    block passes but whose exact rank is defective (the localisation's sufficiency fails)."""
    gen = make_rng(seed, 9)
    agree = total = sufficient_fails = 0
    while total < n:
        L = int(gen.integers(2, 5))
        widths = tuple(sorted(gen.integers(1, 8, size=L + 1).tolist(), reverse=True))
        degrees = tuple(int(x) for x in gen.integers(2, 5, size=L - 1))
        try:
            dim = neurovariety_dimension(widths, degrees, seed=seed, max_rows=4000)
        except ValueError:  # too many monomials for a quick sweep
            continue
        finite = dim == expected_dimension(widths, degrees) == _p_minus_s(widths)
        blocks = all(
            kruskal_block_condition(widths[i], widths[i + 1], widths[i + 2], degrees[i])
            for i in range(L - 1)
        )
        agree += int(finite == blocks)
        sufficient_fails += int(blocks and not finite)
        total += 1
    return {"agree": agree, "total": total, "blocks_pass_not_identifiable": sufficient_fails}


def _p_minus_s(widths: tuple[int, ...]) -> int:
    return sum(widths[i] * widths[i - 1] for i in range(1, len(widths))) - sum(widths[1:-1])


PAPER_TITLE = "Identifiability of Deep Polynomial Neural Networks"
HEADLINE = (
    "Deep PNNs with non-increasing layer widths are generically (finitely) identifiable under mild "
    "conditions, encoder-decoder networks when the decoder widths do not grow too fast; "
    "identifiability localises to the 2-layer blocks (abstract and TL;DR; the theorems were not "
    "readable)"
)


@dataclass(frozen=True)
class PNNIdentifiabilityReproConfig:
    """Seeds of the random pyramidal sweep, and whether to add the biased-network dimensions
    (defaults: quick mode's; the architecture tables are the paper's and fixed)."""

    sweep_seeds: int = 2
    biased: bool = False


_MODES = {
    "quick": PNNIdentifiabilityReproConfig(),
    "full": PNNIdentifiabilityReproConfig(sweep_seeds=5, biased=True),
}


def run(
    mode: Mode = "quick", seed: int = 0, cfg: PNNIdentifiabilityReproConfig | None = None
) -> Result:
    check_choice("mode", mode, _MODES)
    cfg = cfg or _MODES[mode]
    sweep_seeds = claim_seeds(mode, seed, quick=cfg.sweep_seeds, full=cfg.sweep_seeds)
    with blas_threads(1):
        dims = dimension_rows(seed)
        verdicts = verdict_rows(seed)
        recovery = recovery_rows(seed)
        extra: dict[str, Any] = {}
        sweeps = [pyramidal_sweep(s) for s in sweep_seeds]
        extra["pyramidal_sweep"] = sweeps[0]
        if cfg.biased:
            for widths, degrees, ref in _BIASED:
                extra[f"biased {_arch(widths, degrees)} dim (prototype {ref})"] = (
                    neurovariety_dimension(widths, degrees, bias=True, seed=seed)
                )
    result = Result(
        name="theory.pnn_identifiability",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=HEADLINE,
    )
    seconds = [r["seconds"] for r in dims + verdicts + recovery]
    result.claims = [
        Claim(
            f"exact neurovariety dimension ≠ reference, out of {len(dims)} architectures "
            "(incl. 3 Alexander–Hirschowitz exceptions and KTB's 22 → 16)",
            sum(not r["match"] for r in dims),
            0,
            "<=",
        ),
        Claim(
            f"identifiability verdict ≠ reference, out of {len(verdicts)} architectures",
            sum(not r["match"] for r in verdicts),
            0,
            "<=",
        ),
        Claim(
            f"Jennrich shallow recovery: max term error over {len(recovery)} cases",
            max(r["term error"] for r in recovery),
            1e-8,
            "<=",
        ),
        Claim("slowest single case (dimension, verdict or recovery)", max(seconds), 5.0, "<=", "s"),
        paper_claim(
            f"random pyramidal architectures (non-increasing widths ≤ 7, L ≤ 4; {sweeps[0]['total']} "
            "per seed) whose every block passes Kruskal but whose exact rank is defective",
            [sw["blocks_pass_not_identifiable"] for sw in sweeps],
            0,
            "<=",
            seeds=sweep_seeds,
            unit="architectures",
            headline=True,
            paper="non-increasing widths: generically identifiable; identifiability localises to the "
            "2-layer blocks (abstract, TL;DR)",
        ),
    ]
    result.table = [{k: v for k, v in r.items() if k != "seconds"} for r in dims]
    result.metrics = {
        "verdicts": {r["architecture"]: r["verdict"] for r in verdicts},
        "recovery_term_errors": {r["case (d0,d1,d2,r)"]: r["term error"] for r in recovery},
        "float_rank_disagreements": sum(r["float64 rank"] != r["exact (mod p)"] for r in dims),
        **extra,
    }
    result.notes = [
        "exact dims: Jacobian of the evaluation map at C(d0+R-1,R)+5 points, ranks mod p = "
        "2147483629 and the next smaller prime (max of the two); rank_p = P − s certifies finite "
        "identifiability, a lower rank_p is probabilistic (Schwartz–Zippel) evidence of a defect.",
        "verdicts follow the derived decision order (count, GL symmetry, exact rank, dense inputs + "
        "per-block Kruskal); the paper's own theorem statements (encoder–decoder condition, degree "
        "bounds) could not be read and are not verified.",
        f"float64 rank column (not a claim): SVD rank of the same evaluation-map Jacobian with "
        f"Gaussian parameters and points; it equals the exact dimension in "
        f"{len(dims) - result.metrics['float_rank_disagreements']}/{len(dims)} architectures here "
        "(the spec's prototype saw float ranks fail at R ≥ 8, e.g. 23 vs 31 on (2,3,4,5) r=(3,3), "
        "with its own float formulation); only the mod-p rank is a certificate.",
    ]
    if "pyramidal_sweep" in extra:
        sw = extra["pyramidal_sweep"]
        result.notes.append(
            f"pyramidal sweep (seed {sweep_seeds[0]}): per-block Kruskal agreed with exact finite "
            f"identifiability in {sw['agree']}/{sw['total']} random architectures (numerical "
            "evidence, not a proof)."
        )
    return result
