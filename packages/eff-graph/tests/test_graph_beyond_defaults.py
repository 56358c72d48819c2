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
    assert data["settings"]["num_classes"] == 3 and len(data["runs"]) == 5
