#!/usr/bin/env python
"""Benchmark: eff-games' vectorised CFR+ and exploitability against OpenSpiel's C++ on Leduc poker.

Same process, interleaved rounds, medians of CPU time (``time.process_time``, BLAS pinned to one
thread). Requirements (spec of eff-games): our CFR+ iteration ≥ 10× cheaper than
``pyspiel.CFRPlusSolver.evaluate_and_update_policy``; our ``exploitability`` ≥ 100× cheaper than
``pyspiel.exploitability``; an RTCFR+ iteration ≤ 1.5× a CFR+ iteration. Prints the ratios; exit
status 1 when a requirement fails. Skips (exit 0) without the extra ``eff-games[openspiel]``.

    uv run --frozen python tools/bench/games_cfr.py [--game leduc_poker] [--rounds 3]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

from eff_games import CFRPlusSolver, RTCFRPlus, exploitability, load_game  # noqa: E402


def cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    t0 = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t0) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="leduc_poker")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        import pyspiel
    except ImportError:
        print("skipped: pyspiel is not installed (pip install 'eff-games[openspiel]')")
        return 0

    game = load_game(args.game)
    ours = CFRPlusSolver(game).step(5)
    rt = RTCFRPlus(game).step(5)
    os_game = pyspiel.load_game(args.game)
    theirs = pyspiel.CFRPlusSolver(os_game)
    theirs.evaluate_and_update_policy()
    os_policy = theirs.current_policy()
    our_policy = ours.current_policy()

    n_ours, n_theirs = 300, 30
    samples: dict[str, list[float]] = {
        k: [] for k in ("cfr+", "rtcfr+", "os cfr+", "expl", "os expl")
    }
    for _ in range(args.rounds):
        samples["cfr+"].append(cpu_per_call(ours.evaluate_and_update_policy, n_ours))
        samples["os cfr+"].append(cpu_per_call(theirs.evaluate_and_update_policy, n_theirs))
        samples["rtcfr+"].append(cpu_per_call(rt.evaluate_and_update_policy, n_ours))
        samples["expl"].append(cpu_per_call(lambda: exploitability(game, our_policy), n_ours))
        samples["os expl"].append(
            cpu_per_call(lambda: pyspiel.exploitability(os_game, os_policy), 3)
        )
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"game {args.game}: CPU time per call, median of {args.rounds} interleaved rounds")
    for k, v in med.items():
        print(f"  {k:8s} {1e3 * v:10.3f} ms")
    checks = [
        (
            "OpenSpiel C++ CFRPlusSolver / our CFR+ iteration",
            med["os cfr+"] / med["cfr+"],
            ">=",
            10.0,
        ),
        ("pyspiel.exploitability / our exploitability", med["os expl"] / med["expl"], ">=", 100.0),
        ("our RTCFR+ / our CFR+ iteration", med["rtcfr+"] / med["cfr+"], "<=", 1.5),
    ]
    ok = True
    for text, ratio, op, bound in checks:
        passed = ratio >= bound if op == ">=" else ratio <= bound
        ok &= passed
        print(
            f"  {'PASS' if passed else 'FAIL'}  {text}: {ratio:8.2f}x  (required {op} {bound:g}x)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
