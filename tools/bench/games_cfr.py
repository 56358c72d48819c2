#!/usr/bin/env python
"""Benchmark: eff-games' CFR+ / RTCFR+ iterations and exploitability against OpenSpiel's C++.

One process, interleaved rounds, medians of CPU time per call (``_bench.median_cpu``: a warm-up call
first, BLAS pinned to one thread, the allocator settled inside each job's timing). ``--game``
takes any 2-player zero-sum OpenSpiel game string; built-in games (Kuhn, Leduc, Liar's Dice) are
built by eff-games itself, others through ``from_openspiel``. Targets (the ratio of OpenSpiel's
time to ours):

- Kuhn poker: our CFR+ iteration ≥ 1× ``pyspiel.CFRPlusSolver.evaluate_and_update_policy``
  (issue #25: a tiny game is all call overhead);
- every other game: CFR+ iteration ≥ 10×, ``exploitability`` ≥ 100× ``pyspiel.exploitability``
  (the spec of eff-games);
- everywhere: an RTCFR+ iteration ≤ 1.5× a CFR+ iteration.

The reference numpy path (``backend="numpy"``) is timed beside the compiled one (information).
Exit status 1 when a target fails; exits 0 with a notice without ``eff-games[openspiel]``.

Fair interleaving. Timed right after ``pyspiel.exploitability``, our numpy CFR+ iteration on
Liar's Dice cost 3× its time alone: that call frees ~10⁵ small blocks, and the next allocation of a
few hundred KiB pays ~270 ms to coalesce them (glibc's fast bins; no page faults, not the GC,
measured). Each job now pays for its own garbage (``_bench.settle`` inside its timing), and the
compiled path allocates nothing per iteration.

    uv run --frozen python tools/bench/games_cfr.py [--game kuhn_poker --game leduc_poker ...]
        [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys

from _bench import Bench, add_json_arg, median_cpu

from eff_games import CFRPlusSolver, RTCFRPlus, exploitability, from_openspiel, load_game
from eff_games.games import GAMES, parse_game_string

DEFAULT_GAMES = ("kuhn_poker", "leduc_poker", "liars_dice")


def our_game(name: str):
    base, _ = parse_game_string(name)
    return load_game(name) if base in GAMES else from_openspiel(name)


def calls_for(seconds_per_call: float, budget: float = 0.2) -> int:
    """Calls per round so that a round lasts about ``budget`` seconds."""
    return max(1, min(5000, int(budget / max(seconds_per_call, 1e-7))))


def bench_game(bench: Bench, name: str, rounds: int) -> None:
    import time

    import pyspiel

    game = our_game(name)
    os_game = pyspiel.load_game(name)
    ours = CFRPlusSolver(game).step(5)
    ref = CFRPlusSolver(game, backend="numpy").step(5)
    rt = RTCFRPlus(game).step(5)
    theirs = pyspiel.CFRPlusSolver(os_game)
    t0 = time.process_time()
    theirs.evaluate_and_update_policy()
    os_iter = time.process_time() - t0
    os_policy = theirs.current_policy()
    our_policy = ours.current_policy()
    t0 = time.process_time()
    pyspiel.exploitability(os_game, os_policy)
    os_expl = time.process_time() - t0

    def n(fn):  # calls per round from an untimed probe (after a warm-up call: compilation)
        fn()
        t = time.process_time()
        for _ in range(3):
            fn()
        return calls_for((time.process_time() - t) / 3)

    jobs = {
        "cfr+ (numba)": ours.evaluate_and_update_policy,
        "cfr+ (numpy)": ref.evaluate_and_update_policy,
        "rtcfr+ (numba)": rt.evaluate_and_update_policy,
        "os cfr+": theirs.evaluate_and_update_policy,
        "expl (numba)": lambda: exploitability(game, our_policy),
        "expl (numpy)": lambda: exploitability(game, our_policy, backend="numpy"),
        "os expl": lambda: pyspiel.exploitability(os_game, os_policy),
    }
    calls = {k: (fn, n(fn)) for k, fn in jobs.items()}
    calls["os cfr+"] = (jobs["os cfr+"], calls_for(os_iter))
    calls["os expl"] = (jobs["os expl"], calls_for(os_expl))
    med = median_cpu(calls, rounds)
    sizes = game.sizes()
    print(
        f"game {name} ({sum(sizes['infosets'])} infosets): CPU time per call, median of "
        f"{rounds} interleaved rounds"
    )
    for k, v in med.items():
        print(f"  {k:15s} {1e3 * v:10.4f} ms")
    bench.info[name] = {"ms_per_call": {k: 1e3 * v for k, v in med.items()}, "sizes": sizes}
    tiny = name.split("(")[0] == "kuhn_poker"
    bench.check(
        f"{name}: OpenSpiel CFRPlusSolver iteration / our CFR+ iteration",
        med["os cfr+"] / med["cfr+ (numba)"],
        ">=",
        1.0 if tiny else 10.0,
    )
    expl_ratio = med["os expl"] / med["expl (numba)"]
    if tiny:
        print(f"  info  {name}: pyspiel.exploitability / our exploitability: {expl_ratio:.1f}x")
        bench.info[name]["exploitability_ratio"] = expl_ratio
    else:
        bench.check(f"{name}: pyspiel.exploitability / our exploitability", expl_ratio, ">=", 100.0)
    bench.check(
        f"{name}: our RTCFR+ / our CFR+ iteration",
        med["rtcfr+ (numba)"] / med["cfr+ (numba)"],
        "<=",
        1.5,
    )
    print(
        f"  info  {name}: compiled / numpy reference CFR+ iteration: "
        f"{med['cfr+ (numpy)'] / med['cfr+ (numba)']:.1f}x faster"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", action="append", help=f"default: {', '.join(DEFAULT_GAMES)}")
    parser.add_argument("--rounds", type=int, default=5)
    add_json_arg(parser)
    args = parser.parse_args()
    try:
        import pyspiel  # noqa: F401
    except ImportError:
        print("skipped: pyspiel is not installed (pip install 'eff-games[openspiel]')")
        return 0
    bench = Bench("games_cfr")
    for name in args.game or DEFAULT_GAMES:
        bench_game(bench, name, args.rounds)
    return bench.finish(args.json)


if __name__ == "__main__":
    sys.exit(main())
