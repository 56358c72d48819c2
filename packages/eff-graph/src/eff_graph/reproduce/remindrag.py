"""Reproduction ``graph.remindrag``: memory replay vs naive LLM-guided KG traversal on multi-hop QA.

World (:func:`eff_graph.data.multihop_world`): 30 people, 20 companies, 12 cities, 30 products, 100
facts in 50 chunks of 2; 20 questions (2-hop "who founded the maker of P", 3-hop "where was that
founder born"). Four passes: original templates, an exact repeat, paraphrase 1 (different wording),
paraphrase 2 (close wording). LLM: :class:`ScriptedReader` (exact, deterministic counts). Systems, each
on its own copy of the graph: naive traversal (``memorize=False``), ReMindRAG (intended punishment) and
ReMindRAG with the release's memory rules (``punish=False, confirm="first"``, no claims).

Embedders: ``HashingEmbedder(dim=4096)`` in both modes — at the default 256 buckets the ~90 one-word
entity names collide with question words so often that the question's product is among the two seeds
for only a few questions (measured and reported as a metric; 30 % over world seeds 0–2, with naive
accuracy 0.30 at ~23 calls/q), and traversal starts in the wrong place;
full mode adds the offline MiniLM embedder (extra ``eff-graph[embed]``).

Paper claims (the spec's "(a)" thresholds, median over world seeds: quick 1, full 5): the exact
repeat's calls/q vs the first pass (headline) and its accuracy, ReMindRAG's first pass vs naive
(the memorisation call), ReMindRAG calls/q ≤ naive calls/q on the same questions in every repeat
pass (``specs/claims.md``, replacing the withdrawn naive stability claim) and, in full mode, the
MiniLM paraphrase claims (the loose paraphrase is xfail). Checks: the memory mechanics at the
master seed.

Full mode also measures the saving against world size (issue #26; :func:`world_size_sweep` on
:func:`scaled_world` worlds of 100, 200 and 300 facts, 3 per chunk): the exact-repeat ratio with
hashing at max_jumps 10 and 20 (and without punishment, the diagnosis), with MiniLM at 10, and the
paraphrase passes; paper claims in the largest world. Two causes shrink the hashing saving: the
jump budget (unanswered questions cost it in both passes) and the intended punishment, which erases
other questions' memories because hashing embeds questions of one template nearly parallel.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eff_graph.data import MADE_BY, PASSES, Question, multihop_world
from eff_graph.metrics import answer_correct
from eff_graph.remindrag import (
    Embedder,
    HashingEmbedder,
    KnowledgeGraph,
    ReMindRAG,
    ScriptedReader,
    build_world_kg,
    enhance_memory,
    memory_coefficient,
    punish_memory,
)
from eff_shared.errors import check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim

__all__ = [
    "HASH_DIM",
    "SWEEP_SCALES",
    "SYSTEMS",
    "ReMindRAGReproConfig",
    "run",
    "run_world",
    "scaled_world",
    "world_size_sweep",
]

HASH_DIM = 4096
NAIVE, REMIND, RELEASE = "naive traversal", "ReMindRAG", "ReMindRAG (release memory rules)"
NO_PUNISH = "ReMindRAG (no punishment)"
SYSTEMS: dict[str, dict[str, Any]] = {
    NAIVE: {"memorize": False},
    REMIND: {},
    RELEASE: {"punish": False, "confirm": "first"},
}
#: world-size sweep of full mode (issue #26): scales of the spec's world, 3 facts per chunk
SWEEP_SCALES = (1, 2, 3)
SWEEP_FACTS_PER_CHUNK = 3


@dataclass(frozen=True)
class ReMindRAGReproConfig:
    """The main worlds of the reproduction (:func:`run_world`'s keywords): question ``hops``
    (2–5), every system's ``max_jumps``, further :func:`multihop_world` keywords in ``world``
    (world size, ``facts_per_chunk``; e.g. :func:`scaled_world`) and the hashing embedder's
    ``hash_dim``."""

    hops: tuple[int, ...] = (2, 3)
    max_jumps: int = 10
    world: dict[str, Any] = field(default_factory=dict)
    hash_dim: int = HASH_DIM

    def __post_init__(self) -> None:
        if not self.hops or any(isinstance(h, bool) or h not in (2, 3, 4, 5) for h in self.hops):
            raise ValueError(f"hops must be a non-empty tuple of values in 2..5, got {self.hops!r}")
        check_int("max_jumps", self.max_jumps, minimum=1)
        check_int("hash_dim", self.hash_dim, minimum=1)

    def world_kwargs(self) -> dict[str, Any]:
        return {"hops": tuple(self.hops), "max_jumps": self.max_jumps, "world": dict(self.world)}


def run_world(
    seed: int,
    embedder: Embedder,
    systems: dict[str, dict[str, Any]] | None = None,
    *,
    hops: tuple[int, ...] = (2, 3),
    max_jumps: int = 10,
    world: dict[str, Any] | None = None,
    per_question: bool = False,
) -> dict[str, Any]:
    """Every system over the four passes of world ``seed``: per-pass accuracy, calls/q, tokens/q,
    plus the mechanism measurements taken along the way.

    ``hops`` goes to :func:`multihop_world` (2–5); ``max_jumps`` to every :class:`ReMindRAG` (a
    system's own ``max_jumps`` in ``systems`` wins). At ``max_jumps=10`` 4-hop questions are mostly
    unanswered; the reproduction itself uses the defaults. ``world`` holds further
    :func:`multihop_world` keywords (world size, ``facts_per_chunk``; e.g. :func:`scaled_world`).
    ``per_question=True`` adds ``correct_per_question`` (answer correct, 0/1) to every pass."""
    systems = SYSTEMS if systems is None else systems
    chunks, triples, questions = multihop_world(seed=seed, hops=hops, **(world or {}))
    reader = ScriptedReader([q for p in PASSES for q in questions[p]])
    base = build_world_kg(chunks, triples)
    base.embed(embedder)
    out: dict[str, Any] = {"passes": {}, "checks": {}}
    # the anchor of the chunk that states each question's first hop ("P is made by C")
    first_hop = {t.subject: f"anchor-{t.chunk_id}" for t in triples if t.relation == MADE_BY}
    for name, kw in systems.items():
        kg = copy.deepcopy(base)
        rag = ReMindRAG(kg, reader, embedder, **{"max_jumps": max_jumps, **kw})
        unchanged = (
            0.0  # largest change of a punished (not confirmed) edge's memory with punish=False
        )
        passes = {}
        for p in PASSES:
            results = []
            for q in questions[p]:
                before = {k: v.copy() for k, v in kg.edge_memory.items()}
                r = rag.query(q.text)
                results.append(r)
                if not rag.punish:
                    for e in set(r.punished) - set(r.enhanced):
                        if e in before:
                            unchanged = max(
                                unchanged, float(np.abs(kg.edge_memory[e] - before[e]).max())
                            )
            passes[p] = _summarise(results, questions[p], first_hop)
            if per_question:
                passes[p]["correct_per_question"] = [
                    int(answer_correct(r.answer, q.answer))
                    for r, q in zip(results, questions[p], strict=True)
                ]
        out["passes"][name] = passes
        out["checks"][name] = {
            "max_memory_norm": max(
                (float(np.linalg.norm(v)) for v in kg.edge_memory.values()), default=0.0
            ),
            "max_abs_memory": max(
                (float(np.abs(v).max()) for v in kg.edge_memory.values()), default=0.0
            ),
            "punished_change_without_punish": unchanged,
        }
    out["seed_recall"] = _seed_recall(base, embedder, questions["original"])
    return out


def scaled_world(scale: int, facts_per_chunk: int = SWEEP_FACTS_PER_CHUNK) -> dict[str, int]:
    """:func:`multihop_world` keywords of a world ``scale`` times the spec's: 20·scale questions
    over 30·scale products, 30·scale people, 20·scale companies, 12·scale cities (100·scale facts),
    ``facts_per_chunk`` facts per chunk. ``scaled_world(1, 2)`` is the spec's world."""
    scale = check_int("scale", scale, minimum=1)
    facts_per_chunk = check_int("facts_per_chunk", facts_per_chunk, minimum=1)
    return {
        "n_products": 20 * scale,
        "n_items": 30 * scale,
        "n_people": 30 * scale,
        "n_companies": 20 * scale,
        "n_cities": 12 * scale,
        "facts_per_chunk": facts_per_chunk,
    }


def world_size_sweep(
    seeds: list[int],
    embedder: Embedder,
    systems: dict[str, dict[str, Any]],
    *,
    scales: tuple[int, ...] = SWEEP_SCALES,
    facts_per_chunk: int = SWEEP_FACTS_PER_CHUNK,
    max_jumps: int = 10,
) -> dict[int, dict[int, Any]]:
    """:func:`run_world` on :func:`scaled_world` ``(scale, facts_per_chunk)`` for every scale and
    world seed: ``{scale: {seed: passes}}`` (``passes[system][pass]`` as in :func:`run_world`, with
    ``correct_per_question``)."""
    return {
        k: {
            s: run_world(
                s,
                embedder,
                systems,
                max_jumps=max_jumps,
                world=scaled_world(k, facts_per_chunk),
                per_question=True,
            )["passes"]
            for s in seeds
        }
        for k in scales
    }


def _summarise(
    results: list[Any], questions: list[Question], first_hop: dict[str, str]
) -> dict[str, Any]:
    correct = [answer_correct(r.answer, q.answer) for r, q in zip(results, questions, strict=True)]
    hop_anchor = [first_hop[q.start] in r.seeds for r, q in zip(results, questions, strict=True)]
    replayed = [r for r in results if r.jumps == 0]
    return {
        "accuracy": float(np.mean(correct)),
        "calls": float(np.mean([r.llm_calls for r in results])),
        "tokens": float(np.mean([r.prompt_tokens for r in results])),
        "jumps": float(np.mean([r.jumps for r in results])),
        "replayed_edges": float(np.mean([r.replayed_edges for r in results])),
        "seconds_excl_llm": float(np.mean([r.seconds_excl_llm for r in results])),
        "first_hop_anchor_seed": float(np.mean(hop_anchor)),
        "fully_replayed": len(replayed),
        "fully_replayed_calls": [r.llm_calls for r in replayed],
        "calls_per_question": [r.llm_calls for r in results],
        "seeds_per_question": [list(r.seeds) for r in results],
        "total_calls": int(sum(r.llm_calls for r in results)),
        "total_tokens": int(sum(r.prompt_tokens for r in results)),
    }


def _seed_dependence(worlds: dict[int, Any], seeds: list[int], name: str = NAIVE) -> dict[str, Any]:
    """How a pass's naive traversal differs from the first pass, question by question: the number of
    questions whose two seeds differ, and the largest |calls difference| among questions whose seeds
    are the same (0 when the seeds are the only way the wording enters the naive traversal)."""
    out: dict[str, Any] = {}
    for p in PASSES[1:]:
        differ, same_gap = 0, 0
        for s in seeds:
            a, b = worlds[s]["passes"][name]["original"], worlds[s]["passes"][name][p]
            for sa, sb, ca, cb in zip(
                a["seeds_per_question"], b["seeds_per_question"],
                a["calls_per_question"], b["calls_per_question"], strict=True,
            ):  # fmt: skip
                if sa != sb:
                    differ += 1
                else:
                    same_gap = max(same_gap, abs(ca - cb))
        out[p] = {"seeds_differ": differ, "same_seed_max_calls_gap": same_gap}
    return out


def _seed_recall(kg: KnowledgeGraph, embedder: Embedder, questions: list[Question]) -> float:
    """Fraction of questions whose start entity is among the two seeds."""
    ids, mat = kg.node_matrix()
    hits = 0
    for q in questions:
        v = embedder.encode([q.text])[0]
        top = np.argsort(-(mat @ v), kind="stable")[:2]
        hits += q.start in {ids[i] for i in top}
    return hits / len(questions)


def _mechanics(rng: np.random.Generator) -> dict[str, float]:
    """Memory arithmetic and the replay rule, measured on the implementation."""
    d = 64
    q = rng.standard_normal(d)
    q /= np.linalg.norm(q)
    e = np.zeros(d)
    norms = []
    for _ in range(3):
        e = enhance_memory(e, q)
        norms.append(float(np.linalg.norm(e)))
    expected = [2 / math.pi]
    for _ in range(2):
        expected.append(expected[-1] + memory_coefficient(expected[-1]))
    e, worst = np.zeros(d), 0.0
    for _ in range(200):
        v = rng.standard_normal(d)
        e = enhance_memory(e, v / np.linalg.norm(v))
        worst = max(worst, float(np.linalg.norm(e)))
    punish_err = 0.0
    for _ in range(200):
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        e = rng.uniform(0.1, 1.0) * (0.8 * q + 0.6 * u / np.linalg.norm(u))
        s = float(q @ e)
        if s > 0:
            want = s * (1 - max(abs(memory_coefficient(s)), s))
            punish_err = max(punish_err, abs(float(q @ punish_memory(e, q)) - want))
    return {
        "norm_error": float(np.max(np.abs(np.array(norms) - np.array(expected)))),
        "norms": norms,
        "max_norm_random": worst,
        "punish_error": punish_err,
        "replay_rule_mismatches": float(_replay_rule_mismatches()),
    }


def _replay_rule_mismatches() -> int:
    """Over a grid of h_u·h_v, does an edge enhanced once on q replay for q exactly when
    h_u·h_v > (θ − (1 − α)·2/π)/α ≈ −0.23 (α = 0.1, θ = 0.55)? Counts disagreements."""
    critical = (0.55 - 0.9 * 2 / math.pi) / 0.1
    bad = 0
    for c in np.arange(-1.0, 1.0001, 0.01):
        if abs(c - critical) < 0.005:
            continue
        kg = KnowledgeGraph()
        kg.add_chunk("1", "u r v")
        edge = kg.add_relation("U", "r", "V", "1")
        kg.embed(HashingEmbedder(8))
        basis = np.eye(8)
        kg.node_embedding["U"] = basis[0]
        kg.node_embedding["V"] = c * basis[0] + math.sqrt(max(1 - c * c, 0.0)) * basis[1]
        q = basis[2]
        kg.set_memory(edge, enhance_memory(kg.memory(edge), q))
        rag = ReMindRAG(kg, ScriptedReader([]), HashingEmbedder(8))
        entities, _, _ = rag._replay(q, "U")
        bad += ("V" in entities) != (c > -0.23)
    return bad


PAPER_TITLE = "ReMindRAG: Low-Cost LLM-Guided Knowledge Graph Traversal for Efficient RAG"
HEADLINE = (
    "Memory replay of LLM-guided KG traversal cuts the cost of later similar queries by about 50 % "
    "(LLM tokens -58.8 % on average in multi-turn settings) with accuracy +5-10 % over KG-RAG "
    "baselines (LooGLE, HotpotQA; third-party summaries, not verified)"
)
_PAPER_COST = "about 50 % cost reduction on later similar queries (LooGLE, HotpotQA; not verified)"
#: expected verdicts set by the first full run (world seeds 0-4, hashing embedder)
_XFAIL = {
    "repeat": "median 0.75 [0.39, 0.86] over world seeds 0-4 (0.47, 0.39 at seeds 0-1; 0.75-0.86 at "
    "2-4): questions of one template are near-parallel (hashing cos ~0.85), so punishing an unused "
    "confirmed edge for a later question erases an earlier question's memory",
    "para1": "+1.1 calls/q median [0.0, 1.8] over world seeds 0-4: para1 shares no template word "
    "with the original (hashing), nothing replays, and memorisation costs +1 call per query",
    "para2": "+0.3 calls/q median [-4.75, 1.35] over world seeds 0-4: replay on the close "
    "paraphrase is erased by punishments of near-parallel questions as on the exact repeat",
}


def run(mode: Mode = "quick", seed: int = 0, cfg: ReMindRAGReproConfig | None = None) -> Result:
    """Paper claims over world seeds (quick: 1; full: seed..seed+4 and the sweeps). ``cfg``
    (default :class:`ReMindRAGReproConfig`) sets the main worlds; ``mode`` still picks the seeds
    and the extra sections."""
    cfg = ReMindRAGReproConfig() if cfg is None else cfg
    seeds = claim_seeds(mode, seed, quick=1, full=5)  # quick: ~5 s for one world
    t0 = time.perf_counter()
    hashing = HashingEmbedder(cfg.hash_dim)
    worlds = {s: run_world(s, hashing, **cfg.world_kwargs()) for s in seeds}
    hash_s = time.perf_counter() - t0
    again = run_world(seed, hashing, {k: SYSTEMS[k] for k in (NAIVE, REMIND)}, **cfg.world_kwargs())
    small = {
        s: _seed_recall(_embedded(s, HashingEmbedder()), HashingEmbedder(), _qs(s)) for s in seeds
    }
    result = Result(
        name="graph.remindrag", mode=mode, seed=seed, paper_title=PAPER_TITLE, headline=HEADLINE
    )
    _table(result, "hashing-4096", worlds, seeds)

    def m(name: str, p: str, key: str, w: dict[int, Any] = worlds) -> float:
        return float(np.mean([w[s]["passes"][name][p][key] for s in seeds]))

    def per(fn: Any) -> list[float]:
        return [float(fn(worlds[s]["passes"])) for s in seeds]

    naive_calls = [m(NAIVE, p, "calls") for p in PASSES]
    kw: dict[str, Any] = {"seeds": seeds}
    result.claims += [
        paper_claim(
            "hashing: ReMindRAG exact-repeat calls/q / its first-pass calls/q",
            per(lambda w: w[REMIND]["repeat"]["calls"] / w[REMIND]["original"]["calls"]),
            0.7,
            "<=",
            unit="ratio",
            paper=_PAPER_COST,
            headline=True,
            expected="xfail",
            reason=_XFAIL["repeat"],
            **kw,
        ),
        paper_claim(
            "hashing: ReMindRAG accuracy, exact repeat - first pass",
            per(lambda w: w[REMIND]["repeat"]["accuracy"] - w[REMIND]["original"]["accuracy"]),
            0.0,
            ">=",
            paper="accuracy +5-10 % over KG-RAG baselines (not verified)",
            **kw,
        ),
        paper_claim(
            "hashing: ReMindRAG first-pass calls/q / naive first-pass calls/q (the memorisation call)",
            per(lambda w: w[REMIND]["original"]["calls"] / w[NAIVE]["original"]["calls"]),
            1.15,
            "<=",
            unit="ratio",
            paper="memorisation costs +1 LLM call per traversed query (official code)",
            **kw,
        ),
    ]
    for p in PASSES[1:]:
        result.claims.append(
            paper_claim(
                f"hashing, {p} pass: ReMindRAG calls/q - naive calls/q on the same questions",
                per(lambda w, p=p: w[REMIND][p]["calls"] - w[NAIVE][p]["calls"]),
                0.0,
                "<=",
                unit="calls/q",
                paper=_PAPER_COST,
                expected="xfail" if p in ("para1", "para2") else "reproduces",
                reason=_XFAIL[p] if p in ("para1", "para2") else "",
                **kw,
            )
        )
    mech = _mechanics(np.random.default_rng(seed))
    w0 = worlds[seed]
    full_replay = w0["passes"][REMIND]["repeat"]["fully_replayed_calls"]
    result.claims += [
        Claim(
            "enhancement norms after 1, 2, 3 enhancements: max deviation from 2/π, 0.981, 1.000",
            mech["norm_error"], 1e-9, "<=",
        ),
        Claim("largest memory norm over 200 enhancements with random queries", mech["max_norm_random"], 1.0 + 1e-12, "<="),
        Claim(
            "edges enhanced once that replay (or not) against the rule h_u·h_v > -0.23, grid of 200 cosines",
            mech["replay_rule_mismatches"], 0, "<=", "edges",
        ),
        Claim("max |q·e after punishment - s(1 - max(|f(s)|, s))| over 200 random cases", mech["punish_error"], 1e-12, "<="),
        Claim(
            "punish=False: largest change of a punished edge's memory over all passes",
            w0["checks"][RELEASE]["punished_change_without_punish"], 0.0, "<=",
        ),
        Claim("memorize=False (naive): largest |e| over all edges after all passes", w0["checks"][NAIVE]["max_abs_memory"], 0.0, "<="),
        Claim("repeat-pass queries answered by replay alone (jumps = 0)", len(full_replay), 1, ">=", "queries"),
        Claim(
            "force_do_rag: max |calls - 2| over queries answered by replay alone (judge + answer)",
            max((abs(c - 2) for c in full_replay), default=float("nan")), 0, "<=", "calls",
        ),
        Claim(
            "rerun with the same seed: |difference| in total calls + total prompt tokens",
            sum(
                abs(again["passes"][n][p][k] - w0["passes"][n][p][k])
                for n in (NAIVE, REMIND) for p in PASSES for k in ("total_calls", "total_tokens")
            ),
            0, "<=",
        ),
    ]  # fmt: skip
    result.metrics.update(
        {
            "world_seeds": seeds,
            "hash_dim": HASH_DIM,
            "hashing": {str(s): worlds[s]["passes"] for s in seeds},
            "seed_recall_hashing_4096": float(np.mean([worlds[s]["seed_recall"] for s in seeds])),
            "seed_recall_hashing_256": float(np.mean(list(small.values()))),
            "enhancement_norms": mech["norms"],
            "hashing_run_s": hash_s,
        }
    )
    result.notes.append(
        f"Hashing embedder with {HASH_DIM} buckets: the question's product is a seed for "
        f"{result.metrics['seed_recall_hashing_4096']:.0%} of questions (256 buckets: "
        f"{result.metrics['seed_recall_hashing_256']:.0%})."
    )
    dep = _seed_dependence(worlds, seeds)
    result.metrics["naive_seed_dependence_hashing"] = dep
    n_q = len(seeds) * len(_qs(seed))
    result.notes += [
        "Naive traversal calls/q per pass (original, repeat, para1, para2): "
        + ", ".join(f"{c:.2f}" for c in naive_calls)
        + ". Without memory the reader's fallback (highest edge weight) does not depend on the "
        "wording, so a reworded question is traversed exactly as the original whenever it gets the "
        "same two seeds: questions whose seeds differ from the first pass's / largest calls gap "
        "among those with the same seeds: "
        + ", ".join(
            f"{p} {d['seeds_differ']}/{n_q} / {d['same_seed_max_calls_gap']}"
            for p, d in dep.items()
        )
        + ". The seeds are the 2 entities/anchors nearest to q̂, and an anchor is embedded with its "
        "chunk text (as upstream), so template words shared with the chunk texts ('founded', "
        "'was', 'born') pull other anchors above the anchor of the chunk that states the first hop; "
        "para1 shares none of them. That anchor is a seed for "
        + ", ".join(f"{p} {m(NAIVE, p, 'first_hop_anchor_seed'):.0%}" for p in PASSES)
        + " of the questions. This wording dependence is the method's own seeding (the spec's "
        "prototype saw constant naive calls with hashing; its world and templates are not given).",
        "Exact repeat, ReMindRAG calls/q per world seed: "
        + ", ".join(
            f"{worlds[s]['passes'][REMIND]['repeat']['calls']:.2f} vs first pass "
            f"{worlds[s]['passes'][REMIND]['original']['calls']:.2f}"
            for s in seeds
        )
        + ". Questions of one template are very similar (hashing cosine ~0.85), so a later question "
        "that traverses but does not use an edge confirmed for an earlier one punishes it along a "
        "nearly parallel direction and erases that memory. The release rules keep punished "
        "memories unchanged but confirm only the first useful edge out of each node (their row in "
        "the table).",
    ]
    if mode == "full":
        minilm = _minilm(result, seeds)
        _world_size(result, seeds, hashing, minilm)
    else:
        result.notes.append(
            "Quick mode: hashing embedder only; the MiniLM claims run in full mode."
        )
    return result


def _qs(seed: int) -> list[Question]:
    return multihop_world(seed=seed)[2]["original"]


def _embedded(seed: int, embedder: Embedder) -> KnowledgeGraph:
    chunks, triples, _ = multihop_world(seed=seed)
    kg = build_world_kg(chunks, triples)
    kg.embed(embedder)
    return kg


def _table(result: Result, label: str, worlds: dict[int, Any], seeds: list[int]) -> None:
    for name in next(iter(worlds.values()))["passes"]:
        for p in PASSES:

            def m(key: str, name: str = name, p: str = p) -> float:
                return float(np.mean([worlds[s]["passes"][name][p][key] for s in seeds]))

            naive = float(np.mean([worlds[s]["passes"][NAIVE][p]["calls"] for s in seeds]))
            result.table.append(
                {
                    "embedder": label,
                    "pass": p,
                    "method": name,
                    "accuracy": m("accuracy"),
                    "calls/q": m("calls"),
                    "prompt tokens/q": m("tokens"),
                    "calls vs naive": m("calls") / naive,
                    "jumps/q": m("jumps"),
                    "replayed edges/q": m("replayed_edges"),
                    "ms/q excl. LLM": 1000 * m("seconds_excl_llm"),
                }
            )


def _minilm(result: Result, seeds: list[int]) -> Embedder | None:
    """The MiniLM claims; returns the embedder (``None`` without the extra ``embed``)."""
    try:
        from eff_graph.remindrag import MiniLMEmbedder

        t0 = time.perf_counter()
        embedder = MiniLMEmbedder()
        load_s = time.perf_counter() - t0
    except ImportError as exc:
        result.notes.append(f"MiniLM claims not measured: {exc}")
        for text in (
            "MiniLM: paraphrase calls/q / naive calls/q",
            "MiniLM: paraphrase accuracy - naive",
        ):
            result.claims.append(
                paper_claim(text + " (needs eff-graph[embed])", [math.nan], 0.0, modes=("full",))
            )
        return None
    t0 = time.perf_counter()
    systems = {k: SYSTEMS[k] for k in (NAIVE, REMIND)}
    worlds = {s: run_world(s, embedder, systems) for s in seeds}
    run_s = time.perf_counter() - t0
    _table(result, "MiniLM", worlds, seeds)

    def m(name: str, p: str, key: str) -> float:
        return float(np.mean([worlds[s]["passes"][name][p][key] for s in seeds]))

    def per(fn: Any) -> list[float]:
        return [float(fn(worlds[s]["passes"])) for s in seeds]

    _, _, questions = multihop_world(seed=seeds[0])
    orig = embedder.encode([q.text for q in questions["original"]])
    for p in ("para1", "para2"):
        para = embedder.encode([q.text for q in questions[p]])
        cos = float(np.mean(np.sum(orig * para, axis=1)))
        result.metrics[f"minilm_cos_original_{p}"] = cos
        loose = p == "para1"
        result.claims += [
            paper_claim(
                f"MiniLM: ReMindRAG {p} calls/q / naive {p} calls/q (mean cos to the original {cos:.2f})",
                per(lambda w, p=p: w[REMIND][p]["calls"] / w[NAIVE][p]["calls"]), 0.6, "<=",
                unit="ratio", seeds=seeds, modes=("full",), headline=not loose,
                expected="xfail" if loose else "reproduces",
                reason="the official replay rule needs cos > ~0.91 after one enhancement; the loose "
                "paraphrase (cos 0.87) is mostly traversed again" if loose else "",
                paper="about 50 % cost reduction on later similar queries (not verified)",
            ),
            paper_claim(
                f"MiniLM: ReMindRAG {p} accuracy - naive {p} accuracy",
                per(lambda w, p=p: w[REMIND][p]["accuracy"] - w[NAIVE][p]["accuracy"]), 0.0, ">=",
                seeds=seeds, modes=("full",),
                paper="accuracy +5-10 % over KG-RAG baselines (not verified)",
            ),
        ]  # fmt: skip
    critical = (0.55 - 0.1 * 0.3) / (0.9 * 2 / math.pi)
    result.notes.append(
        "MiniLM paraphrases: mean cosine to the original "
        + ", ".join(
            f"{p} {result.metrics[f'minilm_cos_original_{p}']:.2f}" for p in ("para1", "para2")
        )
        + f". After one enhancement an edge replays for a paraphrase only if 0.9·(2/π)·cos + "
        f"0.1·h_u·h_v > 0.55, i.e. cos > {critical:.2f} at a typical node cosine of 0.3, so para1 is "
        "mostly traversed again: ReMindRAG jumps/q "
        + ", ".join(
            f"{p} {m(REMIND, p, 'jumps'):.2f} (naive {m(NAIVE, p, 'jumps'):.2f}, "
            f"{sum(worlds[s]['passes'][REMIND][p]['fully_replayed'] for s in seeds)}/"
            f"{len(seeds) * len(questions[p])} queries by replay alone)"
            for p in ("para1", "para2")
        )
        + "; below θ the memory still raises the weights of the remembered edges, which the reader "
        "follows when no edge continues the resolved chain. Accuracy, ReMindRAG vs naive: "
        + ", ".join(
            f"{p} {m(REMIND, p, 'accuracy'):.3f} vs {m(NAIVE, p, 'accuracy'):.3f}"
            for p in ("para1", "para2")
        )
        + "."
    )
    result.metrics["minilm"] = {str(s): worlds[s]["passes"] for s in seeds}
    result.metrics["minilm_load_s"] = load_s
    result.metrics["minilm_run_s"] = run_s
    return embedder


#: (label, embedder key, max_jumps, systems) of the full-mode world-size sweep; naive traversal's
#: repeat costs exactly its first pass (no memory), so the budget-20 runs skip it
_SWEEPS = (
    ("hashing, max_jumps 10", "hashing", 10, (NAIVE, REMIND)),
    ("hashing, max_jumps 20", "hashing", 20, (REMIND, NO_PUNISH)),
    ("MiniLM, max_jumps 10", "minilm", 10, (NAIVE, REMIND)),
)
_SWEEP_SYSTEMS = {**SYSTEMS, NO_PUNISH: {"punish": False}}
_SWEEP_KEYS = ("accuracy", "calls", "tokens", "jumps", "replayed_edges", "fully_replayed")
#: expected verdicts of the world-size claims, set by the first full run (world seeds 0-4)
_SWEEP_XFAIL: dict[str, str] = {
    "hash10": "median 0.71 [0.69, 0.89] over world seeds 0-4 (spec world 0.66, 200 facts 0.71): at "
    "max_jumps 10 about half the first-pass questions are not answered (ReMindRAG accuracy 0.45) "
    "and cost the whole budget in both passes; at max_jumps 20 the ratio is 0.64, without "
    "punishment 0.19, with MiniLM 0.49",
    "para1": "+0.72 calls/q median [-0.15, +1.90] over world seeds 0-4: para1 shares no template "
    "word with the original (hashing), nothing replays, and memorisation costs +1 call per query",
}


def _repeat_ratio(w: dict[str, Any], name: str = REMIND) -> float:
    return float(w[name]["repeat"]["calls"] / w[name]["original"]["calls"])


def _nanmedian(values: np.ndarray) -> float:
    """Median of the finite values (NaN when there is none, without numpy's warning)."""
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else math.nan


def _answered_split(w: dict[str, Any], name: str = REMIND) -> tuple[float, float, float]:
    """(share of first-pass questions answered, repeat/first calls over those, mean first-pass
    calls of the unanswered ones)."""
    first, rep = w[name]["original"], w[name]["repeat"]
    ok = np.array(first["correct_per_question"], dtype=bool)
    c1, c2 = np.array(first["calls_per_question"]), np.array(rep["calls_per_question"])
    ratio = float(c2[ok].sum() / c1[ok].sum()) if ok.any() else math.nan
    return float(ok.mean()), ratio, float(c1[~ok].mean()) if (~ok).any() else math.nan


def _world_size(
    result: Result,
    seeds: list[int],
    hashing: Embedder,
    minilm: Embedder | None,
    scales: tuple[int, ...] = SWEEP_SCALES,
) -> None:
    """Full mode (issue #26): the memory's saving against world size. Worlds
    :func:`scaled_world` ``(k, 3)`` for k in ``scales`` (100·k facts, 3 per chunk); the claims are
    judged in the largest."""
    t0 = time.perf_counter()
    embedders = {"hashing": hashing, "minilm": minilm}
    sweeps: dict[str, dict[int, dict[int, Any]]] = {}
    for label, key, budget, names in _SWEEPS:
        if embedders[key] is None:
            continue
        systems = {n: _SWEEP_SYSTEMS[n] for n in names}
        sweeps[label] = world_size_sweep(
            seeds, embedders[key], systems, scales=scales, max_jumps=budget
        )
    facts = [len(multihop_world(seed=seeds[0], **scaled_world(k))[1]) for k in scales]
    big = scales[-1]

    def med(label: str, fn: Any, k: int) -> float:
        return float(np.median([fn(sweeps[label][k][s]) for s in seeds]))

    def per(label: str, fn: Any, k: int = big) -> list[float]:
        return [float(fn(sweeps[label][k][s])) for s in seeds]

    ratio: dict[str, list[float]] = {"x": [float(f) for f in facts]}
    acc: dict[str, list[float]] = {"x": [float(f) for f in facts]}
    para: dict[str, list[float]] = {"x": [float(f) for f in facts]}
    for label, _, _, names in _SWEEPS:
        if label not in sweeps:
            continue
        for name in names:
            if name == NAIVE:
                acc[f"naive, {label}"] = [
                    med(label, lambda w: w[NAIVE]["original"]["accuracy"], k) for k in scales
                ]
                continue
            tag = label if name == REMIND else f"{label}, no punishment"
            ratio[tag] = [med(label, lambda w, n=name: _repeat_ratio(w, n), k) for k in scales]
            acc[f"ReMindRAG, {tag}"] = [
                med(label, lambda w, n=name: w[n]["original"]["accuracy"], k) for k in scales
            ]
        if NAIVE in names:
            for p in ("para1", "para2"):
                para[f"{p}, {label}"] = [
                    med(label, lambda w, p=p: w[REMIND][p]["calls"] - w[NAIVE][p]["calls"], k)
                    for k in scales
                ]
    sub = "median over world seeds " + ", ".join(map(str, seeds)) + "; 3 facts per chunk"
    result.add_series(
        "remindrag_repeat_vs_world_size", ratio,
        title=f"ReMindRAG exact-repeat calls/q over its first pass vs world size ({sub})",
        xlabel="facts in the world", ylabel="repeat / first-pass LLM calls per question (ratio)",
        yscale="linear",
    )  # fmt: skip
    result.add_series(
        "remindrag_first_pass_accuracy_vs_world_size", acc,
        title=f"First-pass accuracy vs world size: questions answered within the jump budget ({sub})",
        xlabel="facts in the world", ylabel="first-pass accuracy (fraction)", yscale="linear",
    )  # fmt: skip
    result.add_series(
        "remindrag_paraphrase_vs_world_size", para,
        title=f"Paraphrase passes: ReMindRAG minus naive LLM calls per question vs world size ({sub})",
        xlabel="facts in the world", ylabel="ReMindRAG - naive LLM calls per question (calls/q)",
        yscale="linear",
    )  # fmt: skip
    where = f"world x{big} ({facts[-1]} facts, 3 per chunk)"
    kw: dict[str, Any] = {"seeds": seeds, "modes": ("full",), "paper": _PAPER_COST}

    def claim(key: str, text: str, values: list[float], threshold: float, **more: Any) -> Claim:
        xf = key in _SWEEP_XFAIL
        return paper_claim(
            text, values, threshold, "<=", expected="xfail" if xf else "reproduces",
            reason=_SWEEP_XFAIL.get(key, ""), **more, **kw,
        )  # fmt: skip

    h10, h20, m10 = (lab for lab, _, _, _ in _SWEEPS)
    result.claims += [
        claim("hash10", f"hashing, {where}, max_jumps 10: ReMindRAG exact-repeat calls/q / its first-pass calls/q",
              per(h10, _repeat_ratio), 0.7, unit="ratio"),
        claim("hash20", f"hashing, {where}, max_jumps 20: ReMindRAG exact-repeat calls/q / its first-pass calls/q",
              per(h20, _repeat_ratio), 0.7, unit="ratio"),
        claim("para1", f"hashing, {where}, max_jumps 10, para1 pass: ReMindRAG calls/q - naive calls/q",
              per(h10, lambda w: w[REMIND]["para1"]["calls"] - w[NAIVE]["para1"]["calls"]), 0.0, unit="calls/q"),
        claim("para2", f"hashing, {where}, max_jumps 10, para2 pass: ReMindRAG calls/q - naive calls/q",
              per(h10, lambda w: w[REMIND]["para2"]["calls"] - w[NAIVE]["para2"]["calls"]), 0.0, unit="calls/q"),
    ]  # fmt: skip
    if m10 in sweeps:
        result.claims += [
            claim("minilm", f"MiniLM, {where}, max_jumps 10: ReMindRAG exact-repeat calls/q / its first-pass calls/q",
                  per(m10, _repeat_ratio), 0.7, unit="ratio"),
            claim("minilm_para2", f"MiniLM, {where}, max_jumps 10: ReMindRAG para2 calls/q / naive para2 calls/q",
                  per(m10, lambda w: w[REMIND]["para2"]["calls"] / w[NAIVE]["para2"]["calls"]), 0.6, unit="ratio"),
        ]  # fmt: skip
    split = {
        label: {str(k): [list(_answered_split(sweeps[label][k][s])) for s in seeds] for k in scales}
        for label in sweeps
    }

    def split_text(label: str) -> str:
        rows = []
        for k, f in zip(scales, facts, strict=True):
            arr = np.array(split[label][str(k)])
            cost = _nanmedian(arr[:, 2])
            rows.append(
                f"{f} facts: answered {np.median(arr[:, 0]):.0%}, repeat/first on those "
                f"{_nanmedian(arr[:, 1]):.2f}, "
                + (
                    "none unanswered"
                    if math.isnan(cost)
                    else f"an unanswered one costs {cost:.1f} calls"
                )
            )
        return f"{label}: " + "; ".join(rows)

    result.notes.append(
        "World size (issue #26; full mode; worlds scaled_world(k, 3), k = "
        + ", ".join(map(str, scales))
        + "; medians over the world seeds). Repeat/first-pass ratio: "
        + "; ".join(
            f"{lab} " + ", ".join(f"{v:.2f}" for v in vals)
            for lab, vals in ratio.items()
            if lab != "x"
        )
        + ". Why the saving shrinks with hashing: (1) the jump budget — a question not answered "
        "within max_jumps costs the whole budget in both passes, and the share of such questions grows "
        "with the world; (2) the intended punishment — hashing embeds all questions of one template "
        "nearly parallel (cosine 0.85-0.87 at any bucket count >= 1024, set by the template's share "
        "of the word features, not by d), so punishing an edge one question traversed but did not "
        "use erases the memories other questions confirmed on it (without punishment the ratio stays "
        "low); MiniLM embeds them far apart (cosine ~0.55-0.6) and keeps most of its saving. The replay "
        "threshold is the official fixed 0.55 and depends on cosines only. Answered split (ReMindRAG): "
        + " | ".join(split_text(label) for label in sweeps)
        + "."
    )
    result.metrics["world_size"] = {
        "facts": facts,
        "scales": list(scales),
        "facts_per_chunk": SWEEP_FACTS_PER_CHUNK,
        "answered_split": split,
        "passes": {  # the per-pass summaries without the per-question lists
            label: {
                str(k): {
                    str(s): {
                        n: {p: {m: v[m] for m in _SWEEP_KEYS} for p, v in ps.items()}
                        for n, ps in d[s].items()
                    }
                    for s in seeds
                }
                for k, d in sw.items()
            }
            for label, sw in sweeps.items()
        },
        "run_s": time.perf_counter() - t0,
    }
