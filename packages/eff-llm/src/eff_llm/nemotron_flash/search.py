"""Nemotron-Flash's architecture search (§2.4; item 4 of :mod:`eff_llm.nemotron_flash`): the
3-stage :class:`SearchSpace` of :class:`StageSpec` blocks, :func:`aging_evolution` under a latency
budget and the :func:`random_search` baseline."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from eff_llm.nemotron_flash.latency import HybridArch, LatencyLUT
from eff_llm.nemotron_flash.model import MIXERS, parse_operators
from eff_shared.errors import check_positive, check_type
from eff_shared.progress import track

__all__ = ["SearchResult", "SearchSpace", "StageSpec", "aging_evolution", "random_search"]

_RATIOS = ((0, 1), (1, 1), (1, 2), (1, 3))


@dataclass(frozen=True)
class StageSpec:
    """One stage: ``blocks`` repetitions of a block of ``first``:``second`` mixers in ``ratio``
    (0:1 = only ``second``), each mixer followed by ``ffn`` FFNs."""

    first: str
    second: str
    ratio: tuple[int, int]
    ffn: int
    blocks: int

    @classmethod
    def from_block(cls, block: str | Sequence[str], blocks: int = 1) -> StageSpec:
        """Parse one block, e.g. ``"d f a f a f"`` (mixers, each followed by the same number of
        FFNs); raises ``ValueError`` for > 2 mixer types, an FFN count ∉ {0, 1, 2}, a ratio other
        than 0:1, 1:1, 1:2, 1:3 or an unknown token."""
        ops = parse_operators(block)
        check_positive("blocks", blocks, integer=True)
        if ops[0] not in MIXERS:
            raise ValueError(f"a block starts with a mixer, got {ops[0]!r}")
        mixers, ffns = [], []
        for o in ops:
            if o == "f":
                ffns[-1] += 1
            else:
                mixers.append(o)
                ffns.append(0)
        types = list(dict.fromkeys(mixers))
        if len(types) > 2:
            raise ValueError(f"a block has at most 2 mixer types, got {types}")
        if len(set(ffns)) != 1 or ffns[0] not in (0, 1, 2):
            raise ValueError(f"FFN count after each mixer must be one of {{0, 1, 2}}, got {ffns}")
        if len(types) == 1:
            if len(mixers) != 1:
                raise ValueError(f"a one-type block has one mixer (ratio 0:1), got {len(mixers)}")
            return cls(types[0], types[0], (0, 1), ffns[0], blocks)
        first = mixers[0]
        x, y = mixers.count(first), len(mixers) - mixers.count(first)
        spec = cls(first, types[1], (x, y), ffns[0], blocks)
        if (x, y) not in _RATIOS or spec.block() != ops:
            raise ValueError(
                f"block {' '.join(ops)} is not 'first×x second×y' in a ratio of {list(_RATIOS)}"
            )
        return spec

    def block(self) -> list[str]:
        x, y = self.ratio
        mixers = [self.first] * x + [self.second] * y
        return [tok for m in mixers for tok in [m, *(["f"] * self.ffn)]]

    def operators(self) -> list[str]:
        return self.block() * self.blocks


@dataclass(frozen=True)
class SearchSpace:
    """The paper's space (§2.4): 3 stages, operators {d, a, m2}, ratios 0:1/1:1/1:2/1:3, 0–2 FFNs
    per mixer, ``1..max_blocks`` blocks per stage, ≤ ``max_operators`` operators (last stage
    trimmed), hidden size = the largest of ``hidden_sizes`` meeting the latency budget."""

    operators: tuple[str, ...] = ("d", "a", "m2")
    stages: int = 3
    max_blocks: int = 4
    ffn_choices: tuple[int, ...] = (0, 1, 2)
    ratios: tuple[tuple[int, int], ...] = _RATIOS
    max_operators: int = 30
    hidden_sizes: tuple[int, ...] = (1024, 1280, 1536, 1792, 2048, 2304, 2560)

    def __post_init__(self) -> None:
        bad = [o for o in self.operators if o not in MIXERS]
        if bad or not self.operators:
            raise ValueError(
                f"operators must be mixers from {list(MIXERS)}, got {list(self.operators)}"
            )
        for name in ("stages", "max_blocks", "max_operators"):
            check_positive(name, getattr(self, name), integer=True)
        bad_ffn = [f for f in self.ffn_choices if f not in (0, 1, 2)]
        if bad_ffn or not self.ffn_choices:
            raise ValueError(f"FFN count must be in {{0, 1, 2}}, got {list(self.ffn_choices)}")
        bad_r = [r for r in self.ratios if tuple(r) not in _RATIOS]
        if bad_r or not self.ratios:
            raise ValueError(f"ratios must be among {list(_RATIOS)}, got {list(self.ratios)}")
        if not self.hidden_sizes:
            raise ValueError("hidden_sizes must not be empty")

    def stage_options(self) -> list[StageSpec]:
        """Every distinct stage (0:1 blocks have one operator type; others two different ones)."""
        out = []
        for ratio in self.ratios:
            pairs = (
                [(o, o) for o in self.operators]
                if ratio == (0, 1)
                else [(a, b) for a in self.operators for b in self.operators if a != b]
            )
            for a, b in pairs:
                for f in self.ffn_choices:
                    for n in range(1, self.max_blocks + 1):
                        out.append(StageSpec(a, b, tuple(ratio), f, n))
        return out

    def validate(self, stages: Sequence[StageSpec]) -> None:
        if len(stages) != self.stages:
            raise ValueError(f"an architecture has {self.stages} stages, got {len(stages)}")
        for s in stages:
            if s.ratio not in self.ratios:
                raise ValueError(f"hybrid ratio {s.ratio} is not in {list(self.ratios)}")
            types = {s.second} if s.ratio == (0, 1) else {s.first, s.second}
            if s.ratio != (0, 1) and s.first == s.second:
                raise ValueError("a two-type block needs two different operators")
            if len(types) > 2:
                raise ValueError("a block has at most 2 mixer types")
            if not types <= set(self.operators):
                raise ValueError(f"unknown operator in {s}; allowed: {list(self.operators)}")
            if s.ffn not in self.ffn_choices:
                raise ValueError(f"FFN count must be in {list(self.ffn_choices)}, got {s.ffn}")
            if not 1 <= s.blocks <= self.max_blocks:
                raise ValueError(f"blocks must be in 1..{self.max_blocks}, got {s.blocks}")

    def stages_from_blocks(
        self, blocks: Sequence[tuple[str | Sequence[str], int]], trim: bool = False
    ) -> tuple[StageSpec, ...]:
        """Stages from ``[(block, count), ...]`` (see :meth:`StageSpec.from_block`); more than
        ``max_operators`` operators raise ``ValueError`` unless ``trim`` (the search trims the last
        stage)."""
        stages = tuple(StageSpec.from_block(b, n) for b, n in blocks)
        self.validate(stages)
        total = sum(len(s.operators()) for s in stages)
        if total > self.max_operators and not trim:
            raise ValueError(
                f"too many operators: {total} > max_operators={self.max_operators} (pass trim=True "
                f"to trim the last stage)"
            )
        return stages

    def operators_of(self, stages: Sequence[StageSpec]) -> tuple[str, ...]:
        """The operator sequence, the last stage trimmed to ``max_operators`` in total."""
        self.validate(stages)
        ops = [o for s in stages for o in s.operators()]
        return tuple(ops[: self.max_operators])

    def random(self, rng: np.random.Generator) -> tuple[StageSpec, ...]:
        opts = self.stage_options()
        return tuple(opts[int(rng.integers(len(opts)))] for _ in range(self.stages))

    def mutate(
        self, stages: Sequence[StageSpec], rng: np.random.Generator
    ) -> tuple[StageSpec, ...]:
        """Change one factor of one stage: an operator, the hybrid ratio, the FFN count or the
        block count (always a different architecture)."""
        stages = list(stages)
        while True:
            i = int(rng.integers(len(stages)))
            s = stages[i]
            kind = ("operator", "ratio", "ffn", "blocks")[int(rng.integers(4))]
            if kind == "operator":
                slot = "second" if s.ratio == (0, 1) else ("first", "second")[int(rng.integers(2))]
                other = s.first if slot == "second" else s.second
                choices = [
                    o
                    for o in self.operators
                    if o != getattr(s, slot) and (s.ratio == (0, 1) or o != other)
                ]
                if not choices:
                    continue
                new = replace(s, **{slot: choices[int(rng.integers(len(choices)))]})
                if new.ratio == (0, 1):
                    new = replace(new, first=new.second)
            elif kind == "ratio":
                choices = [r for r in self.ratios if r != s.ratio]
                if not choices:
                    continue
                r = choices[int(rng.integers(len(choices)))]
                first, second = s.first, s.second
                if r == (0, 1):
                    first = second
                elif first == second:
                    first = next(o for o in self.operators if o != second)
                new = replace(s, ratio=tuple(r), first=first, second=second)
            elif kind == "ffn":
                choices = [f for f in self.ffn_choices if f != s.ffn]
                if not choices:
                    continue
                new = replace(s, ffn=choices[int(rng.integers(len(choices)))])
            else:
                choices = [n for n in range(1, self.max_blocks + 1) if n != s.blocks]
                if not choices:
                    continue
                new = replace(s, blocks=choices[int(rng.integers(len(choices)))])
            stages[i] = new
            return tuple(stages)

    def realise(
        self, stages: Sequence[StageSpec], lut: LatencyLUT, budget_ms: float
    ) -> tuple[HybridArch | None, float]:
        """(arch at the largest feasible hidden size, its predicted latency), or (None, latency at
        the smallest hidden size) when no hidden size meets ``budget_ms``."""
        ops = self.operators_of(stages)
        lat = math.inf
        for h in sorted(self.hidden_sizes, reverse=True):
            arch = HybridArch(ops, h)
            lat = lut.predict(arch)
            if lat <= budget_ms:
                return arch, lat
        return None, lat


@dataclass
class SearchResult:
    """Best feasible architecture found, with the history of every evaluated candidate."""

    stages: tuple[StageSpec, ...]
    arch: HybridArch
    fitness: float
    latency_ms: float
    evaluations: int
    history: list[tuple[float, float, bool]] = field(default_factory=list)  # fitness, ms, feasible


class _Evaluator:
    """Realises candidates through the LUT (free) and calls ``fitness_fn`` only on feasible ones
    (the expensive short training); memoised, but every call counts as an evaluation."""

    def __init__(self, space, fitness_fn, lut, budget):
        self.space, self.fitness_fn, self.lut, self.budget = space, fitness_fn, lut, budget
        self.memo: dict[tuple[StageSpec, ...], float] = {}
        self.count = 0
        self.history: list[tuple[float, float, bool]] = []
        self.best: tuple[float, tuple[StageSpec, ...], HybridArch, float] | None = None

    def feasible(self, stages: tuple[StageSpec, ...]) -> tuple[HybridArch | None, float]:
        return self.space.realise(stages, self.lut, self.budget)

    def __call__(self, stages: tuple[StageSpec, ...], arch: HybridArch, lat: float) -> float:
        if stages not in self.memo:
            self.memo[stages] = float(self.fitness_fn(arch))
        fit = self.memo[stages]
        self.count += 1
        self.history.append((fit, lat, True))
        if self.best is None or fit < self.best[0]:
            self.best = (fit, stages, arch, lat)
        return fit

    def draw(self, propose: Callable[[], tuple[StageSpec, ...]], tries: int):
        """The first feasible proposal (infeasible ones are rejected by the LUT, not evaluated)."""
        for _ in range(tries):
            stages = propose()
            arch, lat = self.feasible(stages)
            if arch is not None:
                return stages, arch, lat
        raise ValueError(
            f"no architecture meets the budget of {self.budget} ms in {tries} proposals"
        )

    def result(self) -> SearchResult:
        assert self.best is not None
        fit, stages, arch, lat = self.best
        return SearchResult(stages, arch, fit, lat, self.count, self.history)


def _check_budget(space: SearchSpace, lut: LatencyLUT, budget: float) -> None:
    check_type("space", space, SearchSpace)
    check_type("lut", lut, LatencyLUT)
    check_positive("latency_budget", budget)
    h = min(space.hidden_sizes)
    cheapest = lut.predict(
        HybridArch((min(space.operators, key=lambda o: lut.op_latency(o, h)),), h)
    )
    if cheapest > budget:
        raise ValueError(
            f"no architecture meets the budget: latency_budget={budget} ms is below the cheapest "
            f"single-operator model ({cheapest:.4g} ms)"
        )


def aging_evolution(
    space: SearchSpace,
    fitness_fn: Callable[[HybridArch], float],
    lut: LatencyLUT,
    latency_budget: float,
    population: int = 16,
    sample: int = 4,
    children_per_cycle: int = 10,
    cycles: int = 20,
    seed: int = 0,
    max_tries: int = 1000,
) -> SearchResult:
    """Aging evolution under a latency budget (module docstring, item 4); lower fitness is better
    (the paper's short-training PPL).

    The initial population holds ``population`` random *feasible* architectures; each child is a
    one-factor mutation of the best of ``sample`` uniformly drawn members, re-mutated until the LUT
    says it is feasible (at most ``max_tries``; infeasible candidates are never trained or
    returned); the oldest member dies. ``fitness_fn`` is called population + cycles ·
    children_per_cycle times. Same seed ⇒ same result.
    """
    _check_budget(space, lut, latency_budget)
    for name, value in (
        ("population", population),
        ("sample", sample),
        ("children_per_cycle", children_per_cycle),
        ("cycles", cycles),
        ("max_tries", max_tries),
    ):
        check_positive(name, value, integer=True)
    if sample > population:
        raise ValueError(f"sample={sample} must be <= population={population}")
    rng = np.random.default_rng(seed)
    ev = _Evaluator(space, fitness_fn, lut, latency_budget)
    pop: list[tuple[tuple[StageSpec, ...], float]] = []
    while len(pop) < population:
        stages, arch, lat = ev.draw(lambda: space.random(rng), max_tries)
        pop.append((stages, ev(stages, arch, lat)))
    for _ in track(range(cycles), "aging evolution (cycles)"):
        for _ in range(children_per_cycle):
            idx = rng.choice(len(pop), size=sample, replace=False)
            parent = min((pop[i] for i in idx), key=lambda c: c[1])[0]
            child, arch, lat = ev.draw(lambda p=parent: space.mutate(p, rng), max_tries)
            pop.append((child, ev(child, arch, lat)))
            pop.pop(0)  # the oldest dies
    return ev.result()


def random_search(
    space: SearchSpace,
    fitness_fn: Callable[[HybridArch], float],
    lut: LatencyLUT,
    latency_budget: float,
    evaluations: int,
    seed: int = 0,
    max_tries: int = 1000,
) -> SearchResult:
    """The baseline: ``evaluations`` uniform random feasible architectures; the best one."""
    _check_budget(space, lut, latency_budget)
    check_positive("evaluations", evaluations, integer=True)
    rng = np.random.default_rng(seed)
    ev = _Evaluator(space, fitness_fn, lut, latency_budget)
    for _ in track(range(evaluations), "random search (evaluations)"):
        ev(*ev.draw(lambda: space.random(rng), max_tries))
    return ev.result()
