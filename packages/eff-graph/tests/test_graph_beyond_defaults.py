"""Settings beyond the reproductions' defaults (issue #26): 4- and 5-hop worlds, ReMindRAG's jump
budget, ImGDA's number of classes and imbalance."""

import pytest

from eff_graph.data import BORN_IN, CHAIN, HQ_IN, LOCATED_IN, PART_OF, multihop_world
from eff_graph.remindrag import HashingEmbedder, ReMindRAG, ScriptedReader, build_world_kg
from eff_graph.reproduce import imgda as imgda_repro
from eff_graph.reproduce import remindrag as remindrag_repro


def _follow(triples, start, relations):
    """Every entity reached from ``start`` by following exactly ``relations`` in the fact graph."""
    nodes = {start}
    for rel in relations:
        nodes = {t.object for t in triples if t.subject in nodes and t.relation == rel}
    return nodes


def test_four_hop_world_gold_answer_is_reached_by_exactly_four_relations():
    chunks, triples, questions = multihop_world(hops=(4,), seed=0)
    # the default world plus one "is located in" fact per city
    assert len(triples) == 100 + 12
    assert {t.relation for t in triples} == {*CHAIN[:4], HQ_IN}
    for p, qs in questions.items():
        assert len(qs) == 20
        for q in qs:
            assert q.hops == 4 and q.relations == CHAIN[:4] and q.relations[-1] == LOCATED_IN
            assert _follow(triples, q.start, q.relations) == {q.answer}
            assert q.answer not in _follow(triples, q.start, q.relations[:3])  # not a 3-hop answer
            assert "country" in q.text or p == "para1"
    for t in triples:  # every fact is written in its chunk
        text = next(c.text for c in chunks if c.chunk_id == t.chunk_id)
        assert f"{t.subject} {t.relation} {t.object}." in text
    # the 2/3-hop questions of a mixed world are the default world's
    mixed = multihop_world(hops=(2, 3, 4), seed=0)[2]["original"]
    assert [q.hops for q in mixed[:6]] == [2, 3, 4, 2, 3, 4]


def test_five_hop_world_and_default_world_unchanged():
    _, triples, questions = multihop_world(hops=(5, 2), seed=1)
    q5 = [q for q in questions["original"] if q.hops == 5]
    assert q5 and all(q.relations == CHAIN and q.relations[-1] == PART_OF for q in q5)
    for q in questions["original"]:
        assert _follow(triples, q.start, q.relations) == {q.answer}
    # the default world has no further relation
    _, default_triples, default_q = multihop_world(seed=0)
    assert {t.relation for t in default_triples} == {*CHAIN[:3], HQ_IN}
    assert {q.relations[-1] for q in default_q["original"] if q.hops == 3} == {BORN_IN}
    with pytest.raises(ValueError, match="hops"):
        multihop_world(hops=(1,))


def test_four_hop_questions_are_answered_with_a_larger_jump_budget():
    chunks, triples, questions = multihop_world(hops=(4,), n_products=4, seed=0)
    qs = questions["original"]
    emb = HashingEmbedder(remindrag_repro.HASH_DIM)
    answered = {}
    for max_jumps in (10, 40):
        rag = ReMindRAG(
            build_world_kg(chunks, triples), ScriptedReader(qs), emb, max_jumps=max_jumps
        )
        answered[max_jumps] = sum(rag.query(q.text).answer == q.answer for q in qs)
    assert answered[40] >= answered[10] and answered[40] > 0
    out = remindrag_repro.run_world(
        0, emb, {remindrag_repro.NAIVE: {"memorize": False}}, hops=(4,), max_jumps=40
    )
    assert out["passes"][remindrag_repro.NAIVE]["original"]["accuracy"] > 0


@pytest.mark.parametrize("num_classes", [3, 7])
def test_imgda_experiment_runs_with_other_class_counts(num_classes):
    methods = {k: imgda_repro.METHODS[k] for k in (imgda_repro.SRC, imgda_repro.IMGDA)}
    out = imgda_repro.run_seed(0, methods, num_classes=num_classes, imbalance=10.0, epochs=3)
    assert set(out) == set(methods)
    for r in out.values():
        assert len(r["recall"]) == num_classes
        assert 0.0 <= r["f1"] <= 1.0 and 0.0 <= r["acc"] <= 1.0
    with pytest.raises(ValueError, match="empty"):
        imgda_repro.run_seed(0, methods, num_classes=7, imbalance=1000.0, epochs=1)


def test_cli_reaches_the_new_settings(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_graph.cli import app

    runner = CliRunner()
    out = tmp_path / "r.json"
    args = ["remindrag", "--passes", "repeat", "--hops", "4", "--max-jumps", "40"]
    res = runner.invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["settings"]["hops"] == [4] and data["settings"]["max_jumps"] == 40
    bad = runner.invoke(app, ["remindrag", "--hops", "6"])
    assert bad.exit_code != 0 and "--hops" in bad.output
    out = tmp_path / "i.json"
    res = runner.invoke(
        app, ["imgda", "--num-classes", "3", "--seeds", "0", "--epochs", "2", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["settings"]["num_classes"] == 3 and len(data["rows"]) == 5
    runs = {}
    for shift in ("both", "structure"):
        args = ["imgda", "--shift", shift, "--seeds", "0", "--epochs", "2"]
        res = runner.invoke(app, [*args, "--json", str(out)])
        assert res.exit_code == 0, res.output
        data = json.loads(out.read_text())
        assert data["settings"]["shift"] == shift
        runs[shift] = [r["macro_f1"] for r in data["rows"]]
    assert runs["structure"] != runs["both"]  # another target graph than the default's
    bad = runner.invoke(app, ["imgda", "--shift", "edges"])
    assert bad.exit_code != 0 and "--shift" in bad.output


def test_structure_only_shift_keeps_the_source_features_and_the_sparser_target_graph():
    import numpy as np
    import torch

    from eff_graph.data import csbm_domain_pair
    from eff_shared.seeding import make_rng

    src0, tgt0 = csbm_domain_pair(seed=3)
    src, tgt = csbm_domain_pair(seed=3, shift="structure")
    assert torch.equal(src.x, src0.x) and torch.equal(src.edge_index, src0.edge_index)
    assert torch.equal(tgt.edge_index, tgt0.edge_index)  # the same sparser target graph
    y = tgt.y.numpy()
    mu = 0.45 * make_rng(3, 0).standard_normal((5, 32))  # the source's class means
    eps = tgt.x.double().numpy() - mu[y]  # structure-only: source means, source noise 1.0
    assert 0.9 < eps.std() < 1.1
    # the default target draws the same noise (x 1.2) around shifted means: removing it leaves a
    # per-class constant, away from the source mean
    shifted = tgt0.x.double().numpy() - 1.2 * eps
    for c in range(5):
        assert shifted[y == c].std(axis=0).max() < 1e-5
        assert np.linalg.norm(shifted[y == c][0] - mu[c]) > 0.5

    def homophily(g):
        ei = g.edge_index
        return float((g.y[ei[0]] == g.y[ei[1]]).float().mean())

    _, feat = csbm_domain_pair(seed=3, shift="feature")  # shifted features, source homophily
    assert torch.equal(feat.x, tgt0.x)
    assert homophily(feat) > homophily(tgt0) + 0.1
    assert feat.edge_index.shape[1] > 1.3 * tgt0.edge_index.shape[1]
    with pytest.raises(ValueError, match="shift"):
        csbm_domain_pair(shift="edges")
    with pytest.raises(ValueError, match="shift"):
        imgda_repro.run_seed(0, {}, shift="none")


def test_imgda_harder_settings_feed_the_full_mode_claims():
    from eff_graph.data import long_tail_sizes
    from eff_shared.reproduce import Result

    assert long_tail_sizes(400, 5, imgda_repro.STRONG_IMBALANCE) == [400, 150, 56, 21, 8]
    seeds = [0]
    harder = imgda_repro.harder_settings(seeds, epochs=2)
    strong, struct = harder["imbalance 50"][0], harder["structure-only shift"][0]
    assert set(strong) == {imgda_repro.IMGDA, imgda_repro.SRC}
    assert set(struct) == {imgda_repro.IMGDA, imgda_repro.CE_ONLY, imgda_repro.SRC}
    # the settings are the generator's: the same runs as calling run_seed directly
    direct = imgda_repro.run_seed(
        0, {imgda_repro.IMGDA: imgda_repro.METHODS[imgda_repro.IMGDA]}, imbalance=50.0, epochs=2
    )[imgda_repro.IMGDA]
    assert direct["recall"] == strong[imgda_repro.IMGDA]["recall"]
    default = imgda_repro.run_seed(
        0, {imgda_repro.CE_ONLY: imgda_repro.METHODS[imgda_repro.CE_ONLY]}, epochs=2
    )[imgda_repro.CE_ONLY]
    assert default["f1"] != struct[imgda_repro.CE_ONLY]["f1"]  # a different target graph pair
    result = Result("graph.imgda", "full", 0)
    recall, gap = imgda_repro._harder_claims(result, harder, seeds)
    assert recall.values == (strong[imgda_repro.IMGDA]["recall"][-1],)
    assert recall.threshold == 0.4 and recall.expected == "reproduces"
    want = struct[imgda_repro.IMGDA]["f1"] - struct[imgda_repro.CE_ONLY]["f1"]
    assert gap.values == (want,) and gap.threshold == 0.01 and gap.expected == "xfail"
    assert recall.modes == ("full",) and gap.modes == ("full",)
    assert [r["method"] for r in result.table] == [
        "imbalance 50: ImGDA",
        "imbalance 50: GCN source-only",
        "structure-only shift: ImGDA",
        "structure-only shift: dual-branch CE only",
        "structure-only shift: GCN source-only",
    ]


def test_scaled_world_and_the_world_size_sweep():
    from eff_graph.remindrag import HashingEmbedder

    default = multihop_world(seed=0)
    assert multihop_world(seed=0, **remindrag_repro.scaled_world(1, 2)) == default
    chunks, triples, questions = multihop_world(seed=1, **remindrag_repro.scaled_world(2))
    assert len(triples) == 200 and len(chunks) == 67 and len(questions["original"]) == 40
    assert max(sum(t.chunk_id == c.chunk_id for t in triples) for c in chunks) == 3
    with pytest.raises(ValueError, match=r"scale must be an integer in \[1, inf\]"):
        remindrag_repro.scaled_world(0)
    for bad in (True, 1.5):  # a wrong type is a TypeError
        with pytest.raises(TypeError, match="scale must be an int"):
            remindrag_repro.scaled_world(bad)
    emb = HashingEmbedder(remindrag_repro.HASH_DIM)
    systems = {
        k: remindrag_repro.SYSTEMS[k] for k in (remindrag_repro.NAIVE, remindrag_repro.REMIND)
    }
    sweep = remindrag_repro.world_size_sweep([0], emb, systems, scales=(1,))
    direct = remindrag_repro.run_world(0, emb, systems, world=remindrag_repro.scaled_world(1))
    for name, passes in sweep[1][0].items():
        for p, summary in passes.items():
            ok = summary.pop("correct_per_question")
            ref = direct["passes"][name][p]
            for key in set(ref) - {"seconds_excl_llm"}:  # wall time aside
                assert summary[key] == ref[key], key
            assert sum(ok) == round(summary["accuracy"] * len(ok))


def test_world_size_section_claims_are_the_sweep_ratios():
    from eff_graph.remindrag import HashingEmbedder
    from eff_shared.reproduce import Result

    emb = HashingEmbedder(remindrag_repro.HASH_DIM)
    result = Result("graph.remindrag", "full", 0)
    remindrag_repro._world_size(result, [0], emb, None, scales=(1,))
    claims = {c.text.split(":")[0]: c for c in result.claims}
    assert len(result.claims) == 4  # the MiniLM claims need the embedder
    sweep = remindrag_repro.world_size_sweep(
        [0], emb, {remindrag_repro.REMIND: {}}, scales=(1,), max_jumps=20
    )[1][0]
    want = (
        sweep[remindrag_repro.REMIND]["repeat"]["calls"]
        / sweep[remindrag_repro.REMIND]["original"]["calls"]
    )
    key = "hashing, world x1 (100 facts, 3 per chunk), max_jumps 20"
    assert claims[key].values == (want,) and claims[key].threshold == 0.7
    assert claims[key].modes == ("full",) and claims[key].expected == "reproduces"
    hash10 = "hashing, world x1 (100 facts, 3 per chunk), max_jumps 10"
    assert claims[hash10].expected == "xfail" and claims[hash10].reason
    series = result.series["remindrag_repeat_vs_world_size"]
    assert series["x"] == [100.0] and series["hashing, max_jumps 20"] == [want]
    assert "hashing, max_jumps 20, no punishment" in series
    split = result.metrics["world_size"]["answered_split"]["hashing, max_jumps 10"]["1"][0]
    assert 0.0 <= split[0] <= 1.0


def test_punishment_for_a_near_parallel_question_erases_an_earlier_memory():
    """Why hashing loses its saving as the world grows: questions of one template are nearly
    parallel, and the intended punishment of an unused edge for one erases another's replay."""
    import math

    import numpy as np

    from eff_graph.remindrag import KnowledgeGraph, enhance_memory, punish_memory

    kg = KnowledgeGraph()
    kg.add_chunk("1", "u r v")
    edge = kg.add_relation("U", "r", "V", "1")
    kg.embed(HashingEmbedder(8))
    basis = np.eye(8)
    kg.node_embedding["U"], kg.node_embedding["V"] = basis[0], basis[1]  # h_u·h_v = 0
    q1 = basis[2]
    q2 = 0.85 * basis[2] + math.sqrt(1 - 0.85**2) * basis[3]  # cos(q1, q2) = 0.85
    q3 = 0.55 * basis[2] + math.sqrt(1 - 0.55**2) * basis[3]  # MiniLM's same-template cosine
    rag = ReMindRAG(kg, ScriptedReader([]), HashingEmbedder(8))
    twice = enhance_memory(enhance_memory(np.zeros(8), q1), q1)  # confirmed twice for q1
    kg.set_memory(edge, twice)
    assert "V" in rag._replay(q1, "U")[0]
    kg.set_memory(edge, punish_memory(twice, q2))
    assert "V" not in rag._replay(q1, "U")[0]  # one punishment for q2 erases q1's replay
    kg.set_memory(edge, punish_memory(twice, q3))
    assert "V" in rag._replay(q1, "U")[0]  # a less similar question's punishment does not
