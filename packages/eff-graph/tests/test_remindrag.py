import copy
import math
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from eff_graph.remindrag import (
    Completion,
    HashingEmbedder,
    KnowledgeGraph,
    LLMProtocolError,
    NaiveKGTraversal,
    ReMindRAG,
    ScriptedReader,
    build_world_kg,
    edge_weight,
    enhance_memory,
    memory_coefficient,
    punish_memory,
)

EMB = HashingEmbedder(4096)


def _rag(world, **kw: Any) -> ReMindRAG:
    chunks, triples, questions = world
    reader = ScriptedReader([q for qs in questions.values() for q in qs])
    return ReMindRAG(build_world_kg(chunks, triples), reader, EMB, **kw)


def _unit(rng: np.random.Generator, d: int = 32) -> np.ndarray:
    v = rng.standard_normal(d)
    return v / np.linalg.norm(v)


# ------------------------------------------------------------------ memory arithmetic
def test_enhancement_norms_follow_the_cosine_schedule_and_stay_bounded():
    rng = np.random.default_rng(0)
    q, e = _unit(rng), np.zeros(32)
    norms = []
    for _ in range(4):
        e = enhance_memory(e, q)
        norms.append(float(np.linalg.norm(e)))
    assert norms[0] == pytest.approx(2 / math.pi)
    assert norms[1] == pytest.approx(0.9806, abs=1e-4)
    assert norms[2] == pytest.approx(1.0, abs=1e-3) and norms[3] <= 1.0
    for _ in range(300):  # random queries: the norm never exceeds 1 (f(x) <= 1 - x)
        e = enhance_memory(e, _unit(rng))
        assert np.linalg.norm(e) <= 1.0 + 1e-12


def test_one_enhancement_replays_exactly_when_node_cosine_exceeds_minus_0_23():
    critical = (0.55 - 0.9 * memory_coefficient(0.0)) / 0.1
    assert critical == pytest.approx(-0.2296, abs=1e-4)
    rng = np.random.default_rng(1)
    q = _unit(rng)
    e = enhance_memory(np.zeros(32), q)
    for c in (-0.5, -0.24, -0.22, 0.0, 0.9):
        h_u = np.eye(32)[0]
        h_v = c * np.eye(32)[0] + math.sqrt(1 - c * c) * np.eye(32)[1]
        assert (edge_weight(h_u, h_v, q, e, 0.1) > 0.55) == (c > -0.23)


def test_intended_punishment_shrinks_the_query_component_only_when_positive():
    rng = np.random.default_rng(2)
    q = _unit(rng)
    for _ in range(50):
        e = rng.uniform(0.1, 1.0) * _unit(rng) + 0.5 * q
        s = float(q @ e)
        out = punish_memory(e, q)
        assert float(q @ out) == pytest.approx(s * (1 - max(abs(memory_coefficient(s)), s)))
        perp = e - s * q  # the orthogonal part is untouched
        assert np.allclose(out - float(q @ out) * q, perp)
    neg = -0.3 * q + 0.2 * _unit(rng)
    assert np.array_equal(punish_memory(neg, q), neg)


# ------------------------------------------------------------------ knowledge graph
def test_graph_builds_anchors_unique_edge_ids_and_merges_synonyms():
    kg = KnowledgeGraph()
    kg.add_chunk("1", "Acme is made by Bolt. Acme is sold by Bolt.", "Acme facts")
    e1 = kg.add_relation("Acme", "is made by", "Bolt", "1")
    e2 = kg.add_relation("Acme", "is sold by", "Bolt", "1")
    assert e1 != e2 and {e1, e2} <= {r.id for r in kg.relations("Bolt")}
    assert kg.add_relation("Acme", "is made by", "Bolt", "1") == e1  # same triple, same edge
    assert {r.to for r in kg.relations("Acme")} == {"Bolt", "anchor-1"}
    conn = kg.connection("anchor-1")
    assert conn is not None and conn.to == "1" and kg.graph.nodes["anchor-1"]["doc"] == "Acme facts"
    merging = KnowledgeGraph(embedder=HashingEmbedder(256))
    merging.add_chunk("1", "x")
    assert merging.add_entity("Acme Corp") == "Acme Corp"
    assert merging.add_entity("acme corp") == "Acme Corp"  # cosine 1 > 0.7
    assert merging.add_entity("Acme Industries") == "Acme Industries"  # cosine 1/3
    assert KnowledgeGraph().add_entity("acme corp") == "acme corp"  # no embedder, no merging


def test_graph_rejects_bad_names_and_references():
    kg = KnowledgeGraph()
    kg.add_chunk("1", "text")
    for bad in ("a|b", "x:y", "anchor-3", "  "):
        with pytest.raises(ValueError):
            kg.add_entity(bad)
    with pytest.raises(ValueError, match="already exists"):
        kg.add_chunk("1", "again")
    with pytest.raises(ValueError, match="unknown chunk_id"):
        kg.add_relation("A", "r", "B", "9")
    with pytest.raises(ValueError, match="itself"):
        kg.add_relation("A", "r", "A", "1")
    with pytest.raises(TypeError):
        kg.add_entity(3)  # type: ignore[arg-type]


def test_memory_in_edge_embeddings_survives_save_and_load(world, tmp_path):
    rag = _rag(world)
    questions = world[2]["original"]
    for q in questions[:6]:
        rag.query(q.text)
    kg = rag.kg
    assert sum(np.linalg.norm(v) > 0 for v in kg.edge_memory.values()) >= 5
    kg.save(tmp_path / "kg")
    loaded = KnowledgeGraph.load(tmp_path / "kg")
    assert set(loaded.edge_memory) == set(kg.edge_memory)
    assert all(np.array_equal(loaded.edge_memory[k], v) for k, v in kg.edge_memory.items())
    assert all(np.array_equal(loaded.node_embedding[k], v) for k, v in kg.node_embedding.items())
    assert list(loaded.edges) == list(kg.edges) and loaded.chunks == kg.chunks
    # the loaded graph replays exactly like the original
    reader = ScriptedReader(questions)
    a = ReMindRAG(copy.deepcopy(kg), reader, EMB).query(questions[0].text)
    b = ReMindRAG(loaded, reader, EMB).query(questions[0].text)
    assert (a.answer, a.llm_calls, a.prompt_tokens, a.path) == (
        b.answer,
        b.llm_calls,
        b.prompt_tokens,
        b.path,
    )
    assert a.replayed_edges > 0


# ------------------------------------------------------------------ traversal
def test_a_fully_memorised_query_costs_judge_plus_answer(world):
    rag = _rag(world)
    q = next(q for q in world[2]["original"] if rag.query(q.text).answer == q.answer)
    again = rag.query(q.text)
    assert again.jumps == 0 and again.replayed_edges > 0
    assert again.llm_calls == 2 and again.answer == q.answer and again.sufficient
    check = ReMindRAG(rag.kg, rag.meter.client, EMB, force_do_rag=False).query(q.text)
    assert check.llm_calls == 3  # need_rag + judge + answer


def test_naive_traversal_never_writes_memory_and_release_rule_never_punishes(world):
    naive = NaiveKGTraversal(build_world_kg(*world[:2]), _rag(world).meter.client, EMB)
    for q in world[2]["original"][:5]:
        assert naive.query(q.text).enhanced == []
    assert all(not np.any(v) for v in naive.kg.edge_memory.values())

    def punished_changes(punish: bool) -> tuple[float, int]:
        rag = _rag(world, punish=punish)
        worst, touched = 0.0, 0
        for p in ("original", "para2"):
            for q in world[2][p]:
                before = {k: v.copy() for k, v in rag.kg.edge_memory.items()}
                r = rag.query(q.text)
                for e in set(r.punished) - set(r.enhanced):
                    if e in before and np.any(before[e]):
                        touched += 1
                        worst = max(worst, float(np.abs(rag.kg.edge_memory[e] - before[e]).max()))
        return worst, touched

    worst, touched = punished_changes(False)
    assert touched > 0 and worst == 0.0
    worst, touched = punished_changes(True)
    assert touched > 0 and worst > 0.0


def test_repeat_queries_cost_fewer_calls_with_memory(world):
    rag, naive = _rag(world), _rag(world, memorize=False)
    questions = world[2]["original"]
    first = [rag.query(q.text).llm_calls for q in questions]
    repeat = [rag.query(q.text).llm_calls for q in questions]
    naive_calls = [naive.query(q.text).llm_calls for q in questions]
    assert sum(repeat) < sum(first)
    assert (
        sum(naive_calls) < sum(first) <= sum(naive_calls) + len(questions)
    )  # + memorisation calls


class _Recorder:
    """Wraps a client and keeps every (task, prompt text, context) it was sent."""

    def __init__(self, client: Any) -> None:
        self.client, self.sent = client, []

    def complete(self, messages, **kw):  # type: ignore[no-untyped-def]
        self.sent.append((kw.get("task"), messages[0]["content"], kw.get("context")))
        return self.client.complete(messages, **kw)


def test_next_node_prompt_shows_edge_weights_not_question_similarity(world):
    # The official find_next_node_prompt asks the LLM to weigh the edge weights of the current
    # node's edges; it shows no question-node similarity, so neither do the prompt and context.
    rec = _Recorder(_rag(world).meter.client)
    naive = NaiveKGTraversal(build_world_kg(*world[:2]), rec, EMB)
    for q in world[2]["original"][:6]:
        naive.query(q.text)
    steps = [(prompt, ctx) for task, prompt, ctx in rec.sent if task == "next_node"]
    with_cands = [(p, c) for p, c in steps if c["candidates"]]
    assert with_cands
    for prompt, ctx in with_cands:
        assert "similarity" not in prompt and "edge weight" in prompt
        for c in ctx["candidates"]:
            assert set(c) == {"to", "id", "relation", "weight"}
            assert (
                f"entity:{c['to']} via '{c['relation']}' (edge weight {c['weight']:.3f})" in prompt
            )


def test_reader_falls_back_on_the_highest_edge_weight():
    from eff_graph.data import Question

    q = Question("Who founded the company that makes Pim?", "Pim", ("is made by",), "Co", 1, "x")
    reader = ScriptedReader([q])
    cands = [
        {"to": "anchor-1", "id": "a|mentioned in|anchor-1", "relation": "a", "weight": 0.02},
        {"to": "anchor-2", "id": "a|mentioned in|anchor-2", "relation": "a", "weight": 0.05},
        {"to": "Zed", "id": "a|r|Zed", "relation": "was born in", "weight": 0.05},
    ]
    context = {
        "question": q.text, "summaries": {}, "current": "Co", "candidates": cands,
        "out_degree": {}, "unread_anchor_chunks": [], "entities": ["Pim", "Co"], "history": [],
    }  # fmt: skip
    reply = reader.complete([{"role": "user", "content": "x"}], task="next_node", context=context)
    assert reply.text.strip().endswith("```cot-ans\nentity:anchor-2\n```")  # first of equals


def test_naive_traversal_depends_on_the_wording_only_through_the_seeds(world):
    # Without memory every edge weight is α·h_u·h_v, independent of q̂: a reworded question that
    # gets the same two seeds is traversed exactly as the original (same path, same call count).
    questions = world[2]
    naive = _rag(world, memorize=False)
    first = [naive.query(q.text) for q in questions["original"]]
    same = 0
    for p in ("para1", "para2"):
        for a, q in zip(first, questions[p], strict=True):
            b = naive.query(q.text)
            if a.seeds == b.seeds:
                same += 1
                assert (b.llm_calls, b.path, b.answer) == (a.llm_calls, a.path, a.answer), q.text
    assert same >= 10


def test_same_inputs_give_identical_counts(world):
    def totals():
        rag = _rag(world)
        rs = [rag.query(q.text) for p in ("original", "repeat") for q in world[2][p]]
        return [(r.llm_calls, r.prompt_tokens, r.completion_tokens, r.answer) for r in rs]

    assert totals() == totals()


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"strong_threshold": 1.0}, "strong_threshold"),
        ({"max_jumps": -1}, "max_jumps"),
        ({"seeds": 0}, "seeds"),
        ({"confirm": "some"}, "confirm"),
    ],
)
def test_bad_settings_raise(world, kw, match):
    with pytest.raises(ValueError, match=match):
        _rag(world, **kw)


class _Scaled:
    def __init__(self, factor: float = 2.0, dim: int = 64) -> None:
        self.inner, self.factor = HashingEmbedder(dim), factor

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.factor * self.inner.encode(texts)


def test_bad_embedders_and_texts_raise(world):
    chunks, triples, questions = world
    with pytest.raises(ValueError, match="not L2-normalised"):
        ReMindRAG(build_world_kg(chunks, triples), ScriptedReader([]), _Scaled())
    rag = ReMindRAG(
        build_world_kg(chunks, triples), ScriptedReader(questions["original"]), HashingEmbedder(64)
    )
    rag.embedder = HashingEmbedder(32)  # wrong dimension for the graph's embeddings
    with pytest.raises(ValueError, match=r"shape \(1, 32\), expected \(1, 64\)"):
        rag.query(questions["original"][0].text)
    for text in ("", "?! ..."):
        with pytest.raises(ValueError, match="empty text"):
            HashingEmbedder().encode([text])
    with pytest.raises(TypeError, match="list of strings"):
        HashingEmbedder().encode("a text")  # type: ignore[arg-type]


def test_querying_an_empty_graph_raises():
    with pytest.raises(RuntimeError, match="no data loaded"):
        ReMindRAG(KnowledgeGraph(), ScriptedReader([]), EMB).query("anything?")


class _Broken:
    """Replies without a cot-ans block, or with an unknown node for next_node."""

    def __init__(self, mode: str) -> None:
        self.mode, self.seen = mode, []

    def complete(self, messages, *, task=None, context=None, **kw):
        self.seen.append((task, messages))
        if self.mode == "noblock":
            return Completion("I think the answer is yes.", 10, 5)
        if task == "judge":
            return Completion("```cot-ans\nno\n```", 10, 2)
        return Completion("```cot-ans\nentity:Nowhere\n```", 10, 2)


def test_unusable_replies_are_retried_three_times_then_raise(world):
    chunks, triples, questions = world
    for mode, task in (("noblock", "judge"), ("unknown", "next_node")):
        llm = _Broken(mode)
        rag = ReMindRAG(build_world_kg(chunks, triples), llm, EMB)
        with pytest.raises(LLMProtocolError, match=f"{task}: no usable reply after 3 attempts"):
            rag.query(questions["original"][0].text)
        attempts = [m for t, m in llm.seen if t == task]
        assert len(attempts) == 3
        assert "cannot be used" in attempts[-1][-1]["content"]  # the reason is sent back


def test_hashing_embedder_is_deterministic_across_processes():
    code = (
        "from eff_graph.remindrag.embed import HashingEmbedder;"
        "v = HashingEmbedder(64).encode(['Who founded the company that makes Vorlax?'])[0];"
        "print(','.join(f'{x:.12f}' for x in v))"
    )
    here = HashingEmbedder(64).encode(["Who founded the company that makes Vorlax?"])[0]
    for hashseed in ("1", "987"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert np.allclose([float(x) for x in out.stdout.strip().split(",")], here, atol=1e-11)
