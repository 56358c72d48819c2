"""Reproduction ``llm.prompt_memorization``: how long must a soft prompt be to memorize n examples?

Backbone (spec): a frozen random GPT2 (vocab 32, 64 positions, d = 32, 2 layers, 2 heads, no
dropout); data x_i uniform over token ids [4, 32), N = 4, labels in [0, 4); Adam lr 0.1, full batch,
≤ 300 steps, stop at 100 % train accuracy. Claims (the spec's thresholds), all paper claims judged
over data seeds (the backbone is fixed; ``seed`` offsets the data seeds), median unless said:

- **A1 (initialisation):** n = 32, m = 16: accuracy with ``initializer_range=0.02`` ≤ 0.6, with 0.2 = 1
  (data seeds 0–4 in full mode, 0 in quick mode).
- **A2 (growth, the headline):** m*(8) ≤ 2; decreases of m*(n) over n = 8, 16, 32 ≤ 0; m*(32) ≥
  2·m*(8) (data seeds 2–6 in full mode — the spec's 2 and 3 and three more — 2–4 in quick mode).
  m*(n) is a per-data-seed quantity and need not be monotone at every seed (a draw of 8 easy
  examples and 16 hard ones can give m* = 2, 1, 4), so each part is judged on the median over the
  data seeds, never on one; the table prints m*(n) per data seed with its median and min–max.
- **A3 (low rank, weak):** mean of acc(rank-1 teacher) − acc(random labels) at n = 32, m = 2 ≥ 0.05
  (data seeds 1–5 in full mode — the spec's 1–3 and two more — 1–3 in quick mode).

The paper's Õ(√(nN)) bound is for a constructed backbone and is not tested (the spec's prototype saw
roughly linear growth of m* on a random backbone).
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from eff_shared.reproduce import Claim, Mode, Result, paper_claim
from eff_shared.torch import threads

__all__ = ["PromptMemReproConfig", "growth_claims", "run"]


@dataclass(frozen=True)
class PromptMemReproConfig:
    arch: str = "gpt2"
    vocab_size: int = 32
    num_classes: int = 4
    seq_len: int = 4
    max_steps: int = 300
    lr: float = 0.1
    grid: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    ns: tuple[int, ...] = (8, 16, 32)
    init_ranges: tuple[float, float] = (0.02, 0.2)
    a1_n: int = 32
    a1_m: int = 16
    growth_seeds: tuple[int, ...] = (2, 3)
    low_rank_seeds: tuple[int, ...] = (1, 2, 3)
    a1_seeds: tuple[int, ...] = (0,)
    low_rank_n: int = 32
    low_rank_m: int = 2
    rank: int = 1


def _fit(backbone, m: int, x, y, cfg: PromptMemReproConfig):
    from eff_llm.prompt_memorization import SoftPromptClassifier, fit_prompt

    clf = SoftPromptClassifier(backbone, m, range(cfg.num_classes))
    return fit_prompt(clf, x, y, max_steps=cfg.max_steps, lr=cfg.lr)


def experiment(cfg: PromptMemReproConfig, growth_seeds: tuple[int, ...]) -> dict[str, Any]:
    from eff_llm.prompt_memorization import (
        make_memorization_dataset,
        make_random_backbone,
        min_prompt_length,
    )

    def data(n: int, seed: int, structure: str = "random"):
        return make_memorization_dataset(
            n,
            cfg.seq_len,
            cfg.vocab_size,
            cfg.num_classes,
            structure,
            cfg.rank,
            seed,  # type: ignore[arg-type]
        )

    rows: list[dict[str, Any]] = []
    backbones = {
        r: make_random_backbone(cfg.arch, vocab_size=cfg.vocab_size, initializer_range=r)
        for r in cfg.init_ranges
    }
    a1: dict[float, list[float]] = {r: [] for r in backbones}
    for a1_seed in cfg.a1_seeds:
        x, y = data(cfg.a1_n, a1_seed)
        for r, bb in backbones.items():
            res = _fit(bb, cfg.a1_m, x, y, cfg)
            a1[r].append(res.accuracy)
            rows.append(
                {
                    "experiment": "A1 init",
                    "setting": f"init {r}, data seed {a1_seed}, n={cfg.a1_n}, m={cfg.a1_m}",
                    "m*": None,
                    "accuracy": res.accuracy,
                    "steps": res.steps,
                }
            )
    bb = backbones[max(cfg.init_ranges)]
    growth: dict[int, list[int | None]] = {}
    for seed in growth_seeds:
        growth[seed] = []
        for n in cfg.ns:
            x, y = data(n, seed)
            tried: list[dict] = []
            m_star = min_prompt_length(
                bb,
                x,
                y,
                cfg.grid,
                num_classes=cfg.num_classes,
                history=tried,
                max_steps=cfg.max_steps,
                lr=cfg.lr,
            )
            growth[seed].append(m_star)
            rows.append(
                {
                    "experiment": "A2 growth",
                    "setting": f"data seed {seed}, n={n}",
                    "m*": m_star,
                    "accuracy": tried[-1]["accuracy"],
                    "steps": tried[-1]["steps"],
                }
            )
    gaps = []
    for seed in cfg.low_rank_seeds:
        acc = {}
        for structure in ("low_rank", "random"):
            x, y = data(cfg.low_rank_n, seed, structure)
            res = _fit(bb, cfg.low_rank_m, x, y, cfg)
            acc[structure] = res.accuracy
            rows.append(
                {
                    "experiment": "A3 low rank",
                    "setting": f"{structure}, data seed {seed}, n={cfg.low_rank_n}, m={cfg.low_rank_m}",
                    "m*": None,
                    "accuracy": res.accuracy,
                    "steps": res.steps,
                }
            )
        gaps.append(acc["low_rank"] - acc["random"])
    return {"rows": rows, "a1": a1, "growth": growth, "a3": sum(gaps) / len(gaps), "a3_gaps": gaps}


def _m(value: int | None) -> float:
    return math.inf if value is None else float(value)


PAPER_TITLE = "Prompt Tuning Transformers for Data Memorization"
PAPER_HEADLINE = (
    "a constant-size Transformer memorizes n input-output pairs with prompts of length "
    "Õ(√(nN)); prompt-tuned random Transformers memorize finite datasets, need shorter prompts "
    "for low-rank data, and depend on the backbone's initialization"
)
_PAPER = "prompt length Õ(√(nN)) suffices for exact memorization of n sequences of length N (theory + random-Transformer experiments)"


def growth_claims(
    ns: tuple[int, ...], growth: dict[int, list[int | None]]
) -> tuple[list[Claim], list[dict[str, Any]], list[str]]:
    """A2 judged over the data seeds of ``growth`` ({data seed: [m*(n) for n in ns]}, None = no
    prompt length of the grid memorized): the three paper claims (median over the seeds), a table
    row per n with m*(n) per data seed, its median and min–max, and a note naming the data seeds
    where m*(n) decreases. A seed with an unknown m* gives NaN where it is needed (not judged as
    a pass)."""
    seeds = list(growth)
    m_star = {s: [_m(v) for v in ms] for s, ms in growth.items()}
    drops = [
        sum(int(b < a) for a, b in itertools.pairwise(v))
        if all(math.isfinite(x) for x in v)
        else math.nan
        for v in m_star.values()
    ]
    ratios = [
        v[-1] / v[0] if math.isfinite(v[-1]) and math.isfinite(v[0]) else math.nan
        for v in m_star.values()
    ]
    claims = [
        paper_claim(
            f"A2: m*(n={ns[0]})",
            [v[0] for v in m_star.values()],
            2,
            "<=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            f"A2: decreases of m*(n) over n={list(ns)}, per data seed (0 = non-decreasing; "
            "m* per seed in the table)",
            drops,
            0,
            "<=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            f"A2: m*(n={ns[-1]}) / m*(n={ns[0]})",
            ratios,
            2,
            ">=",
            seeds=seeds,
            paper=_PAPER,
            headline=True,
        ),
    ]
    rows = []
    for i, n in enumerate(ns):
        per = [m_star[s][i] for s in seeds]
        known = [v for v in per if math.isfinite(v)]
        shown = ", ".join(f"{s}: {growth[s][i]}" for s in seeds)
        rows.append(
            {
                "experiment": "A2 over seeds",
                "setting": f"n={n}, m* per data seed {{{shown}}}; min–max "
                + (f"{min(known):g}–{max(known):g}" if known else "n/a"),
                # the median of every seed (an unknown m* is above the grid: it counts as +inf)
                "m*": statistics.median(per) if per else None,
                "accuracy": None,
                "steps": None,
            }
        )
    bad = [s for s, d in zip(seeds, drops, strict=True) if d > 0]
    unknown = [s for s, d in zip(seeds, drops, strict=True) if math.isnan(d)]
    notes = [
        f"A2: m*(n) decreases over n={list(ns)} at data seeds {bad} of {seeds} "
        f"({', '.join(f'{s}: {growth[s]}' for s in bad)}); the growth claims are judged on the "
        "median over the data seeds"
        if bad
        else f"A2: m*(n) never decreases over n={list(ns)} at data seeds {seeds}"
    ]
    if unknown:
        notes.append(
            f"A2: no prompt length of the grid memorized some n at data seeds {unknown}: their "
            "decrease count and ratio are unknown (NaN)"
        )
    return claims, rows, notes


def _seeds(base: tuple[int, ...], n: int, offset: int) -> tuple[int, ...]:
    """The spec's data seeds extended to ``n`` (consecutive), shifted by ``offset``."""
    out = list(base)
    while len(out) < n:
        out.append(out[-1] + 1)
    return tuple(s + offset for s in out[:n])


@threads(1)
def run(mode: Mode = "quick", seed: int = 0, cfg: PromptMemReproConfig | None = None) -> Result:
    """``seed`` offsets the data seeds of each claim (the spec's are the config fields)."""
    if cfg is None:
        full = mode == "full"
        cfg = PromptMemReproConfig(
            a1_seeds=_seeds((0,), 5 if full else 1, seed),
            # quick mode: 3 data seeds, so that one seed's non-monotone m*(n) cannot decide
            growth_seeds=_seeds((2, 3), 5 if full else 3, seed),
            low_rank_seeds=_seeds((1, 2, 3), 5 if full else 3, seed),
        )
    out = experiment(cfg, cfg.growth_seeds)
    lo, hi = min(cfg.init_ranges), max(cfg.init_ranges)
    result = Result(
        name="llm.prompt_memorization",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    a1_seeds = list(cfg.a1_seeds)
    init_paper = "the backbone's initialization decides whether prompt tuning memorizes (paper §5)"
    result.claims = [
        paper_claim(
            f"A1: accuracy at n={cfg.a1_n}, m={cfg.a1_m} with initializer_range={lo}",
            out["a1"][lo],
            0.6,
            "<=",
            seeds=a1_seeds,
            paper=init_paper,
        ),
        paper_claim(
            f"A1: accuracy at n={cfg.a1_n}, m={cfg.a1_m} with initializer_range={hi}",
            out["a1"][hi],
            1.0,
            ">=",
            seeds=a1_seeds,
            paper=init_paper,
        ),
    ]
    claims, rows, notes = growth_claims(cfg.ns, out["growth"])
    result.claims += [
        *claims,
        paper_claim(
            f"A3: mean over data seeds of acc(rank-{cfg.rank} teacher) - acc(random labels), "
            f"n={cfg.low_rank_n}, m={cfg.low_rank_m}",
            out["a3_gaps"],
            0.05,
            ">=",
            seeds=list(cfg.low_rank_seeds),
            statistic="mean",
            paper="low-rank data needs shorter prompts than random data",
        ),
    ]
    result.table = out["rows"] + rows
    result.notes += notes
    result.metrics = {"config": asdict(cfg), "m_star": out["growth"], "a3_gaps": out["a3_gaps"]}
    result.add_series(
        "m* vs n",
        {"x": [float(n) for n in cfg.ns]}
        | {
            f"data seed {s}": [math.nan if v is None else float(v) for v in ms]
            for s, ms in out["growth"].items()
        },
        title="Shortest soft prompt that memorizes n examples (frozen random GPT-2)",
        xlabel="examples to memorize, n",
        ylabel="prompt length m* (tokens)",
        yscale="linear",
    )
    result.notes.append(
        "The paper's bound m = Õ(√(nN)) is for a constructed backbone: not tested. The rank-1 teacher "
        "uses fewer classes than random labels (less information), a confound of the A3 comparison."
    )
    return result
