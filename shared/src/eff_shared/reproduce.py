"""The reproduction harness: ``Claim``, ``Result`` and the registry of reproductions.

A package registers each method's small-scale reproduction under the entry-point group
``eff.reproductions`` as ``"<domain>.<method>" = "eff_<domain>.<module>:run"`` where
``run(mode: "quick" | "full", seed: int) -> Result``. ``eff reproduce`` discovers them, runs
them (in parallel worker processes with ``jobs > 1``) and prints one table of claims.

A claim is one of two kinds (``specs/claims.md``):

- ``check`` — holds by construction or by the method's mathematics (exactness, invariants,
  memory bounds, kernel accuracy). It must hold at every seed; a failing check is a bug. A check
  may carry per-seed ``values``: it then holds only when every one of them does.
- ``paper`` — an empirical statement of the paper tested at small scale. It keeps its per-seed
  ``values`` and is judged on a statistic over them (median by default, or the mean). It carries
  an expected verdict: ``reproduces`` (failing it is a regression) or ``xfail`` (a faithful
  implementation does not reproduce it at this scale; run, printed, never gating) with a one-line
  ``reason``, the paper's own number (``paper``) and the modes it is judged in.

The exit status of ``eff reproduce`` is non-zero only for a failing check or a failing
``reproduces`` paper claim.
"""

from __future__ import annotations

import importlib.util
import json
import math
import operator
import os
import statistics
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Literal

from eff_shared.errors import ReproductionError, check_choice

__all__ = [
    "ENTRY_POINT_GROUP",
    "EXPECTED",
    "KINDS",
    "MODES",
    "STATISTICS",
    "VERDICTS",
    "Claim",
    "Expected",
    "Kind",
    "Mode",
    "Result",
    "Statistic",
    "available",
    "claim_seeds",
    "load",
    "paper_claim",
    "resolve_names",
    "run_many",
    "run_one",
    "summarize",
]

ENTRY_POINT_GROUP = "eff.reproductions"
MODES = ("quick", "full")
KINDS = ("check", "paper")
EXPECTED = ("reproduces", "xfail")
STATISTICS = ("median", "mean")
Mode = Literal["quick", "full"]
Op = Literal[">=", ">", "<=", "<"]
Kind = Literal["check", "paper"]
Expected = Literal["reproduces", "xfail"]
Statistic = Literal["median", "mean"]

#: The verdicts a claim can get in one run.
PASS, FAIL, XFAIL, XPASS, NOT_JUDGED = (
    "pass",
    "FAIL",
    "xfail",
    "reproduced (unexpected)",
    "not judged",
)
VERDICTS = (PASS, FAIL, XFAIL, XPASS, NOT_JUDGED)

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


def _holds(op: str, value: float, threshold: float) -> bool:
    # A NaN or infinite measurement never holds.
    return math.isfinite(value) and bool(_OPS[op](value, threshold))


@dataclass(frozen=True)
class Claim:
    """One statement of a reproduction: ``measured <op> threshold``.

    ``text`` says what is compared in words (method, baseline, metric and its unit), so the
    summary table can be read without the code. For a claim with per-seed ``values``,
    ``measured`` is derived from them: the ``statistic`` (median or mean) for a ``paper`` claim,
    the worst value for a ``check`` (which must hold at every seed). ``seeds`` names the seed of
    each value. ``headline`` marks the claim that tests the paper's headline result.
    """

    text: str
    measured: float
    threshold: float
    op: Op = ">="
    unit: str = ""
    kind: Kind = "check"
    values: tuple[float, ...] = ()
    seeds: tuple[int, ...] = ()
    statistic: Statistic = "median"
    expected: Expected = "reproduces"
    reason: str = ""
    paper: str = ""
    modes: tuple[Mode, ...] = MODES
    headline: bool = False

    def __post_init__(self) -> None:
        check_choice("op", self.op, _OPS)
        check_choice("kind", self.kind, KINDS)
        check_choice("expected", self.expected, EXPECTED)
        check_choice("statistic", self.statistic, STATISTICS)
        if not self.text:
            raise ValueError("text must describe the claim, got an empty string")
        modes = tuple(self.modes)
        if not modes:
            raise ValueError(f"modes must name at least one of {list(MODES)!r}, got ()")
        for m in modes:
            check_choice("modes", m, MODES)
        values = tuple(float(v) for v in self.values)
        seeds = tuple(int(s) for s in self.seeds)
        if seeds and len(seeds) != len(values):
            raise ValueError(
                f"seeds must name one seed per value: {len(seeds)} seeds for {len(values)} values"
            )
        if self.kind == "check" and self.expected != "reproduces":
            raise ValueError("expected='xfail' is for paper claims; a check must always hold")
        if self.expected == "xfail" and not self.reason:
            raise ValueError(f"an xfail paper claim needs a one-line reason: {self.text!r}")
        object.__setattr__(self, "modes", modes)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "threshold", float(self.threshold))
        measured = float(self.measured)
        if values:
            measured = self._aggregate(values)
        object.__setattr__(self, "measured", measured)

    def _aggregate(self, values: tuple[float, ...]) -> float:
        if any(not math.isfinite(v) for v in values):
            return math.nan
        if self.kind == "check":  # the worst seed decides
            failing = [v for v in values if not _holds(self.op, v, self.threshold)]
            pick = min if self.op in (">=", ">") else max
            return pick(failing or values)
        if self.statistic == "mean":
            return statistics.fmean(values)
        return float(statistics.median(values))

    @property
    def passed(self) -> bool:
        """Whether the claim holds (its statistic, or every seed for a check)."""
        if self.kind == "check" and self.values:
            return all(_holds(self.op, v, self.threshold) for v in self.values)
        return _holds(self.op, self.measured, self.threshold)

    @property
    def n_seeds(self) -> int:
        return len(self.values) if self.values else 1

    @property
    def k_on_side(self) -> int:
        """How many seeds are on the claimed side of the threshold."""
        if not self.values:
            return int(self.passed)
        return sum(_holds(self.op, v, self.threshold) for v in self.values)

    @property
    def spread(self) -> tuple[float, float]:
        """(min, max) over the per-seed values (the measured value twice without them)."""
        if not self.values:
            return (self.measured, self.measured)
        return (min(self.values), max(self.values))

    def judged_in(self, mode: str) -> bool:
        return mode in self.modes

    def verdict(self, mode: str) -> str:
        """``pass``, ``FAIL``, ``xfail`` (not reproduced), ``reproduced (unexpected)`` or
        ``not judged`` (a claim declared for the other mode only)."""
        if not self.judged_in(mode):
            return NOT_JUDGED
        if self.expected == "xfail":
            return XPASS if self.passed else XFAIL
        return PASS if self.passed else FAIL

    def to_dict(self, mode: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["values"] = list(self.values)
        out["seeds"] = list(self.seeds)
        out["modes"] = list(self.modes)
        out["passed"] = self.passed
        if mode is not None:
            out["verdict"] = self.verdict(mode)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Claim:
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        for key in ("values", "seeds", "modes"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)


def paper_claim(
    text: str,
    values: Sequence[float],
    threshold: float,
    op: Op = ">=",
    *,
    seeds: Sequence[int] = (),
    statistic: Statistic = "median",
    expected: Expected = "reproduces",
    reason: str = "",
    paper: str = "",
    modes: Sequence[Mode] = MODES,
    unit: str = "",
    headline: bool = False,
) -> Claim:
    """A ``paper`` claim judged on ``statistic`` over the per-seed ``values``.

    ``paper`` is the paper's own number and setting (e.g. "TruthfulQA MC +2.8 points,
    Qwen2.5-1.5B + LoRA"); ``expected='xfail'`` needs a one-line ``reason``.
    """
    if len(values) == 0:
        raise ValueError(f"values must hold at least one per-seed value: {text!r}")
    return Claim(
        text,
        math.nan,
        threshold,
        op,
        unit=unit,
        kind="paper",
        values=tuple(values),
        seeds=tuple(seeds),
        statistic=statistic,
        expected=expected,
        reason=reason,
        paper=paper,
        modes=tuple(modes),
        headline=headline,
    )


def claim_seeds(mode: str, seed: int, *, quick: int = 2, full: int = 5) -> list[int]:
    """The seeds a paper claim is judged over: ``seed, seed + 1, ...`` — ``quick`` of them in
    quick mode, ``full`` in full mode (the policy asks for ≥ 5 in full mode)."""
    check_choice("mode", mode, MODES)
    n = quick if mode == "quick" else full
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of seeds must be an int >= 1, got {n!r}")
    return [seed + i for i in range(n)]


@dataclass
class Result:
    """What a reproduction returns.

    ``table`` holds the method-vs-baseline rows (one dict per method, same keys in every row);
    ``series`` holds curves to plot: ``{plot_name: {"x": [...], label: [...], ...}}``, and
    ``plot_labels`` their words: ``{plot_name: {"title": ..., "xlabel": ..., "ylabel": ...,
    "yscale": "log" | "linear"}}`` (axis labels with units; the scale is chosen from the data
    when absent). Reproductions attach each plot with :meth:`add_series`, which requires the words.
    ``paper_title`` and ``headline`` (the paper's headline result and its setting) head the
    method's section of the ledger.
    """

    name: str
    mode: Mode
    seed: int
    claims: list[Claim] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    table: list[dict[str, Any]] = field(default_factory=list)
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    error: str | None = None
    paper_title: str = ""
    headline: str = ""
    plot_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, MODES)

    def add_series(
        self,
        name: str,
        series: dict[str, list[float]],
        *,
        title: str,
        xlabel: str,
        ylabel: str,
        yscale: str | None = None,
    ) -> None:
        """Attach one plot: ``series`` (``{"x": [...], label: [...], ...}``) under
        ``self.series[name]`` and its words under ``self.plot_labels[name]``.

        ``title`` is in words (not the key); ``xlabel`` and ``ylabel`` carry units where there
        are any (``"wall time (s)"``, ``"exploitability (chips)"``). ``yscale`` is ``"log"``,
        ``"linear"`` or ``None`` (log when every value is positive and they span over two
        decades, the rule of ``report.plot_series``).
        """
        for arg, value in (
            ("name", name),
            ("title", title),
            ("xlabel", xlabel),
            ("ylabel", ylabel),
        ):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{arg} must be a non-empty string, got {value!r}")
        if yscale is not None:
            check_choice("yscale", yscale, ("log", "linear"))
        if not isinstance(series, dict):
            raise ValueError(f"series must be a dict of lists, got {type(series).__name__}")
        labels = {"title": title, "xlabel": xlabel, "ylabel": ylabel}
        if yscale is not None:
            labels["yscale"] = yscale
        self.series[name] = series
        self.plot_labels[name] = labels

    def verdicts(self) -> list[str]:
        return [c.verdict(self.mode) for c in self.claims]

    @property
    def passed(self) -> bool:
        """True when the run raised nothing, made at least one claim, and no check and no
        ``reproduces`` paper claim failed (an xfail claim never fails a run)."""
        return self.error is None and bool(self.claims) and FAIL not in self.verdicts()

    def counts(self) -> dict[str, int]:
        """Verdict counts: checks passed/failed, paper claims reproduced, xfail, unexpected,
        regressions, not judged in this mode."""
        c = dict.fromkeys(
            (
                "checks_passed",
                "checks_failed",
                "paper_reproduced",
                "paper_xfail",
                "paper_unexpected",
                "paper_regressions",
                "not_judged",
            ),
            0,
        )
        for claim, verdict in zip(self.claims, self.verdicts(), strict=True):
            if verdict == NOT_JUDGED:
                c["not_judged"] += 1
            elif claim.kind == "check":
                c["checks_passed" if verdict == PASS else "checks_failed"] += 1
            else:
                key = {
                    PASS: "paper_reproduced",
                    FAIL: "paper_regressions",
                    XFAIL: "paper_xfail",
                    XPASS: "paper_unexpected",
                }[verdict]
                c[key] += 1
        return c

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "seed": self.seed,
            "passed": self.passed,
            "counts": self.counts(),
            "paper_title": self.paper_title,
            "headline": self.headline,
            "claims": [c.to_dict(self.mode) for c in self.claims],
            "metrics": self.metrics,
            "table": self.table,
            "series": self.series,
            "plot_labels": self.plot_labels,
            "notes": self.notes,
            "elapsed_s": self.elapsed_s,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        claims = [Claim.from_dict(c) for c in data.get("claims", [])]
        names = {f.name for f in fields(cls)} - {"claims"}
        return cls(claims=claims, **{k: v for k, v in data.items() if k in names})


def summarize(results: Sequence[Result]) -> dict[str, int]:
    """Verdict counts over several results, plus the number of results that raised."""
    total = dict.fromkeys(Result("x", "quick", 0).counts(), 0)
    for r in results:
        for k, v in r.counts().items():
            total[k] += v
    total["errors"] = sum(r.error is not None for r in results)
    total["no_claims"] = sum(r.error is None and not r.claims for r in results)
    return total


def available() -> dict[str, EntryPoint]:
    """All registered reproductions, by name, sorted."""
    eps = entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: ep for ep in sorted(eps, key=lambda e: e.name)}


def resolve_names(names: Sequence[str] | None) -> list[str]:
    """Expand the user's selection: exact names, or a domain prefix (``games`` → ``games.*``).

    An empty selection means every registered reproduction.
    """
    registry = available()
    if not names:
        return list(registry)
    chosen: list[str] = []
    for name in names:
        matches = [n for n in registry if n == name or n.startswith(name + ".")]
        if not matches:
            raise ReproductionError(
                f"no reproduction named {name!r}; available: {', '.join(registry) or '(none)'}"
            )
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def load(name: str) -> Callable[..., Result]:
    """The ``run`` function registered under ``name``."""
    registry = available()
    if name not in registry:
        raise ReproductionError(
            f"no reproduction named {name!r}; available: {', '.join(registry) or '(none)'}"
        )
    return registry[name].load()


def run_one(name: str, mode: Mode = "quick", seed: int = 0) -> Result:
    """Run one reproduction; an exception becomes a failed ``Result`` carrying the traceback."""
    check_choice("mode", mode, MODES)
    from eff_shared.progress import silenced

    start = time.perf_counter()
    try:
        with silenced():  # the harness reports per reproduction; inner loops stay quiet
            result = load(name)(mode=mode, seed=seed)
        if not isinstance(result, Result):
            raise ReproductionError(
                f"reproduction {name!r} returned {type(result).__name__}, expected Result"
            )
    except Exception:  # a broken reproduction must not stop the others
        result = Result(name=name, mode=mode, seed=seed, error=traceback.format_exc())
    result.elapsed_s = time.perf_counter() - start
    return result


_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _init_worker(threads: int) -> None:
    """Pin a worker's BLAS and torch threads (``threads`` = 0 leaves the libraries' defaults):
    the workers share the machine's cores, so one thread each keeps them from oversubscribing it."""
    if threads <= 0:
        return
    if importlib.util.find_spec("threadpoolctl") is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    if importlib.util.find_spec("torch") is not None:
        from eff_shared.torch import pin_threads  # only where a torch domain package is installed

        pin_threads(threads)


def json_default(obj: Any) -> Any:
    # numpy scalars and arrays reach here from metrics; keep the core free of a numpy import cost.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def _run_in_worker(name: str, mode: Mode, seed: int) -> dict[str, Any]:
    # Sent back as plain JSON data: metrics may hold numpy or torch values, and the parent must
    # not need torch to unpickle them.
    return json.loads(json.dumps(run_one(name, mode, seed).to_dict(), default=json_default))


def _durations_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eff" / "durations.json"


def _load_durations() -> dict[str, float]:
    try:
        data = json.loads(_durations_path().read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _save_durations(results: Sequence[Result], old: dict[str, float]) -> None:
    new = {**old, **{f"{r.name}:{r.mode}": r.elapsed_s for r in results if r.error is None}}
    try:
        path = _durations_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(new, indent=0, sort_keys=True))
    except OSError:  # a read-only home only loses the scheduling hint
        pass


def run_many(
    names: Iterable[str],
    mode: Mode = "quick",
    seed: int = 0,
    on_start: Callable[[str], Any] | None = None,
    on_done: Callable[[Result], Any] | None = None,
    *,
    jobs: int = 1,
    threads: int = 1,
) -> list[Result]:
    """Run several reproductions; the results come back in the order of ``names``.

    With ``jobs > 1`` they run in that many worker processes (``spawn``, each pinned to
    ``threads`` BLAS/torch threads); ``on_done`` is called as each finishes. With ``jobs = 1``
    they run here, one after the other (``threads`` is then the caller's business).
    """
    names = list(names)
    check_choice("mode", mode, MODES)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    if jobs == 1 or len(names) <= 1:
        results = []
        for name in names:
            if on_start is not None:
                on_start(name)
            result = run_one(name, mode, seed)
            results.append(result)
            if on_done is not None:
                on_done(result)
        return results

    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    # Longest first (from the last run's durations): the last worker to finish does not start a
    # long reproduction at the end, so the wall time is close to the total work / jobs.
    durations = _load_durations()
    order = sorted(
        range(len(names)), key=lambda i: -durations.get(f"{names[i]}:{mode}", float("inf"))
    )
    saved = {k: os.environ.get(k) for k in _THREAD_ENV}
    if threads > 0:  # inherited by the spawned workers before they load numpy/torch
        os.environ.update(dict.fromkeys(_THREAD_ENV, str(threads)))
    done: dict[int, Result] = {}
    try:
        with ProcessPoolExecutor(
            max_workers=min(jobs, len(names)),
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(threads,),
        ) as pool:
            futures = {pool.submit(_run_in_worker, names[i], mode, seed): i for i in order}
            if on_start is not None:
                for n in names:
                    on_start(n)
            for fut in as_completed(futures):
                index = futures[fut]
                try:
                    result = Result.from_dict(fut.result())
                except BrokenProcessPool as exc:  # a worker died (killed, out of memory)
                    error = f"worker died: {exc}"
                    result = Result(name=names[index], mode=mode, seed=seed, error=error)
                done[index] = result
                if on_done is not None:
                    on_done(result)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    results = [done[i] for i in range(len(names))]
    _save_durations(results, durations)
    return results
