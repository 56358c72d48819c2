"""The reproduction harness: ``Claim``, ``Result`` and the registry of reproductions.

A package registers each method's small-scale reproduction under the entry-point group
``eff.reproductions`` as ``"<domain>.<method>" = "eff_<domain>.<module>:run"`` where
``run(mode: "quick" | "full", seed: int) -> Result``. ``eff reproduce`` discovers them, runs
them and prints one table of claims; it exits non-zero when a claim fails.
"""

from __future__ import annotations

import math
import operator
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal

from eff_shared.errors import ReproductionError, check_choice

__all__ = [
    "ENTRY_POINT_GROUP",
    "MODES",
    "Claim",
    "Result",
    "available",
    "load",
    "resolve_names",
    "run_many",
    "run_one",
]

ENTRY_POINT_GROUP = "eff.reproductions"
MODES = ("quick", "full")
Mode = Literal["quick", "full"]
Op = Literal[">=", ">", "<=", "<"]

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


@dataclass(frozen=True)
class Claim:
    """One checkable statement of a reproduction: ``measured <op> threshold``.

    ``text`` says what is compared in words (method, baseline, metric and its unit), so the
    summary table can be read without the code.
    """

    text: str
    measured: float
    threshold: float
    op: Op = ">="
    unit: str = ""

    def __post_init__(self) -> None:
        check_choice("op", self.op, _OPS)
        if not self.text:
            raise ValueError("text must describe the claim, got an empty string")
        object.__setattr__(self, "measured", float(self.measured))
        object.__setattr__(self, "threshold", float(self.threshold))

    @property
    def passed(self) -> bool:
        """Whether the claim holds; a NaN or infinite measurement never passes."""
        if not math.isfinite(self.measured):
            return False
        return bool(_OPS[self.op](self.measured, self.threshold))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


@dataclass
class Result:
    """What a reproduction returns.

    ``table`` holds the method-vs-baseline rows (one dict per method, same keys in every row);
    ``series`` holds curves to plot: ``{plot_name: {"x": [...], label: [...], ...}}``.
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

    @property
    def passed(self) -> bool:
        """True when the run raised nothing, made at least one claim, and every claim holds."""
        return self.error is None and bool(self.claims) and all(c.passed for c in self.claims)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "seed": self.seed,
            "passed": self.passed,
            "claims": [c.to_dict() for c in self.claims],
            "metrics": self.metrics,
            "table": self.table,
            "series": self.series,
            "notes": self.notes,
            "elapsed_s": self.elapsed_s,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        claims = [
            Claim(**{k: v for k, v in c.items() if k != "passed"}) for c in data.get("claims", [])
        ]
        fields = {k: v for k, v in data.items() if k not in ("claims", "passed")}
        return cls(claims=claims, **fields)


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
    start = time.perf_counter()
    try:
        result = load(name)(mode=mode, seed=seed)
        if not isinstance(result, Result):
            raise ReproductionError(
                f"reproduction {name!r} returned {type(result).__name__}, expected Result"
            )
    except Exception:  # a broken reproduction must not stop the others
        result = Result(name=name, mode=mode, seed=seed, error=traceback.format_exc())
    result.elapsed_s = time.perf_counter() - start
    return result


def run_many(
    names: Iterable[str], mode: Mode = "quick", seed: int = 0, on_start=None, on_done=None
) -> list[Result]:
    """Run several reproductions in order; callbacks let the CLI drive a progress bar."""
    results = []
    for name in names:
        if on_start is not None:
            on_start(name)
        result = run_one(name, mode, seed)
        results.append(result)
        if on_done is not None:
            on_done(result)
    return results
