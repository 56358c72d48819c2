"""``solve`` and ``compare``: run a solver with exploitability checkpoints, by algorithm name.

Algorithm names (OpenSpiel's vocabulary): ``cfr``, ``cfr+``, ``dcfr``, ``pcfr+``, ``mmd`` (the
baselines in :mod:`eff_games.cfr`) and ``rtcfr+`` (:class:`eff_games.rtcfr.RTCFRPlus`, Meng et al.,
NeurIPS 2025). Every checkpoint row states exploitability (= NashConv/2, OpenSpiel's convention) and
NashConv, both in chips, and ``wall_s``: the seconds spent in the solver's iterations so far
(evaluation excluded).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, Literal

from eff_games.cfr import (
    CFRPlusSolver,
    CFRSolver,
    DCFRSolver,
    MMDSolver,
    PCFRPlusSolver,
    Solver,
)
from eff_games.efg import EFG
from eff_games.games import load_game
from eff_games.metrics import UNITS, nash_conv
from eff_games.policy import TabularPolicy
from eff_games.rtcfr import RTCFRPlus
from eff_shared.errors import check_int
from eff_shared.progress import progress_task

__all__ = [
    "ALGORITHMS",
    "ITERATES",
    "SolveResult",
    "compare",
    "default_checkpoints",
    "make_solver",
    "payload",
    "resolve_checkpoints",
    "run_checkpoints",
    "solve",
]

#: algorithm name → (solver class, its keyword parameters)
ALGORITHMS: dict[str, tuple[type[Solver], tuple[str, ...]]] = {
    "cfr": (CFRSolver, ()),
    "cfr+": (CFRPlusSolver, ()),
    "dcfr": (DCFRSolver, ("alpha", "beta", "gamma")),
    "pcfr+": (PCFRPlusSolver, ()),
    "rtcfr+": (RTCFRPlus, ("mu", "gamma", "ref_update_interval", "inner", "alternating")),
    "mmd": (MMDSolver, ("eta", "tau")),
}
ITERATES = ("last", "average")
ROW_KEYS = ("iteration", "algo", "iterate", "exploitability", "nash_conv", "wall_s")


def _as_game(game: EFG | str) -> EFG:
    if isinstance(game, EFG):
        return game
    if isinstance(game, str):
        return load_game(game)
    raise TypeError(f"game must be an EFG or a game name, got {type(game).__name__}")


def make_solver(game: EFG | str, algo: str, **algo_kwargs: Any) -> Solver:
    """A solver by name; ``ValueError`` for an unknown name or a parameter it does not take."""
    game = _as_game(game)
    if algo not in ALGORITHMS:
        raise ValueError(f"algo must be one of {list(ALGORITHMS)}, got {algo!r}")
    cls, allowed = ALGORITHMS[algo]
    unknown = sorted(set(algo_kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"{algo} takes the parameters {list(allowed) or '(none)'}, got {unknown}")
    return cls(game, **algo_kwargs)


def default_checkpoints(iterations: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``iterations``, and ``iterations`` itself."""
    iterations = check_int("iterations", iterations, minimum=1)
    out = []
    base = 1
    while base <= iterations:
        out += [m * base for m in (1, 2, 5) if m * base <= iterations]
        base *= 10
    return sorted(set(out) | {iterations})


def resolve_checkpoints(
    iterations: int, checkpoints: Sequence[int] | None = None, every: int | None = None
) -> list[int]:
    """Validated, sorted, de-duplicated checkpoints in [1, iterations] (``iterations`` always)."""
    iterations = check_int("iterations", iterations, minimum=1)
    if checkpoints is not None and every is not None:
        raise ValueError("give checkpoints or every, not both")
    if every is not None:
        every = check_int("every", every, minimum=1, maximum=iterations)
        return sorted(set(range(every, iterations + 1, every)) | {iterations})
    if checkpoints is None:
        return default_checkpoints(iterations)
    out = set()
    for c in checkpoints:
        out.add(check_int("checkpoints", c, minimum=1, maximum=iterations))
    return sorted(out | {iterations})


def _policy(solver: Solver, iterate: str) -> TabularPolicy:
    return solver.current_policy() if iterate == "last" else solver.average_policy()


def _check_iterates(algo: str, iterates: Sequence[str]) -> None:
    for it in iterates:
        if it not in ITERATES:
            raise ValueError(f"iterate must be one of {list(ITERATES)}, got {it!r}")
        if it == "average" and not ALGORITHMS[algo][0].has_average:
            raise ValueError(f"{algo} is a last-iterate method with no average; use iterate='last'")


def run_checkpoints(
    solver: Solver, checkpoints: Sequence[int], iterates: Sequence[str] = ("last",)
) -> list[dict[str, Any]]:
    """Advance ``solver`` to each checkpoint and evaluate the requested iterates there."""
    _check_iterates(solver.name, iterates)
    rows = []
    wall = 0.0
    total = max([solver.iteration, *checkpoints]) - solver.iteration
    with progress_task(f"{solver.name} (iterations)", total=total) as tick:
        for c in checkpoints:
            if c > solver.iteration:
                n = c - solver.iteration
                t0 = time.perf_counter()
                solver.step(n)
                wall += time.perf_counter() - t0
                tick(n)
            for it in iterates:
                nc = nash_conv(solver.game, _policy(solver, it))
                rows.append(
                    {
                        "iteration": c,
                        "algo": solver.name,
                        "iterate": it,
                        "exploitability": 0.5 * nc,
                        "nash_conv": nc,
                        "wall_s": wall,
                    }
                )
    return rows


def payload(game: EFG, rows: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of a run: rows plus game, sizes, params, units and the package version."""
    return {
        "game": game.name,
        "sizes": game.sizes(),
        "params": params,
        "units": UNITS,
        "version": version("eff-games"),
        "rows": rows,
    }


@dataclass
class SolveResult:
    """The outcome of :func:`solve`: the final policy and the checkpoint rows."""

    game: EFG
    algo: str
    iterate: str
    params: dict[str, Any]
    policy: TabularPolicy
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """``[{"iteration", "exploitability", "nash_conv", "wall_s"}, ...]``."""
        keys = ("iteration", "exploitability", "nash_conv", "wall_s")
        return [{k: r[k] for k in keys} for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        return payload(
            self.game, self.rows, {"algo": self.algo, "iterate": self.iterate, **self.params}
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def solve(
    game: EFG | str,
    algo: str,
    iterations: int,
    *,
    checkpoints: Sequence[int] | None = None,
    iterate: Literal["last", "average"] = "last",
    **algo_kwargs: Any,
) -> SolveResult:
    """Run ``algo`` for ``iterations`` iterations on ``game``, evaluating ``iterate`` at the
    checkpoints (default 1, 2, 5, 10, ... and the last iteration)."""
    game = _as_game(game)
    points = resolve_checkpoints(iterations, checkpoints)
    solver = make_solver(game, algo, **algo_kwargs)
    rows = run_checkpoints(solver, points, (iterate,))
    return SolveResult(game, algo, iterate, dict(algo_kwargs), _policy(solver, iterate), rows)


def compare(
    game: EFG | str,
    algos: Sequence[str],
    iterations: int,
    *,
    checkpoints: Sequence[int] | None = None,
    iterates: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Rows of several algorithms (default parameters) on the same game and checkpoints; each
    algorithm's last iterate and, when it has one, its average (unless ``iterates`` is given)."""
    game = _as_game(game)
    if isinstance(algos, str) or not algos:
        raise ValueError(f"algos must be a non-empty list of names from {list(ALGORITHMS)}")
    points = resolve_checkpoints(iterations, checkpoints)
    rows = []
    for algo in algos:
        solver = make_solver(game, algo)
        its = iterates or (ITERATES if solver.has_average else ("last",))
        rows += run_checkpoints(solver, points, its)
    return rows
