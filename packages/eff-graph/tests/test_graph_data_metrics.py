import math

import numpy as np
import pytest
import torch

from eff_graph.data import (
    BORN_IN,
    FOUNDED_BY,
    MADE_BY,
    PASSES,
    csbm_domain_pair,
    long_tail_sizes,
    make_long_tailed,
    multihop_world,
)
from eff_graph.metrics import accuracy, answer_correct, macro_f1, per_class_recall


def test_csbm_pair_has_the_specified_sizes_degrees_and_shift():
    source, target = csbm_domain_pair(seed=0)
    assert torch.bincount(source.y).tolist() == [400, 189, 89, 42, 20]
    assert torch.bincount(target.y).tolist() == [300] * 5
    assert source.x.shape == (740, 32) and target.x.shape == (1500, 32)
    # spec: mean degree ~10.2 (source) and ~9.3 (target)
    assert 9.0 < source.edge_index.size(1) / 740 < 11.5
    assert 8.3 < target.edge_index.size(1) / 1500 < 10.3
    for g in (source, target):
        ei = g.edge_index
        assert not bool((ei[0] == ei[1]).any())
        fwd = set(map(tuple, ei.T.tolist()))
        assert fwd == {(b, a) for a, b in fwd}  # undirected

    # structure shift: the target is less homophilous
    def homophily(g):
        return float((g.y[g.edge_index[0]] == g.y[g.edge_index[1]]).float().mean())

    assert homophily(target) < homophily(source) - 0.1
    # feature shift: class means move between domains
    mu_s = torch.stack([source.x[source.y == c].mean(0) for c in range(5)])
    mu_t = torch.stack([target.x[target.y == c].mean(0) for c in range(5)])
    assert float((mu_s - mu_t).norm(dim=1).mean()) > 0.8


def test_csbm_pair_is_deterministic_per_seed():
    a, b = csbm_domain_pair(seed=4), csbm_domain_pair(seed=4)
    c = csbm_domain_pair(seed=5)
    for g1, g2 in zip(a, b, strict=True):
        assert torch.equal(g1.x, g2.x) and torch.equal(g1.edge_index, g2.edge_index)
    assert not torch.equal(a[0].x, c[0].x)


def test_long_tail_sizes_follow_graphens_rule():
    assert long_tail_sizes(400, 5, 20.0) == [400, 189, 89, 42, 20]
    assert long_tail_sizes(100, 3, 1.0) == [100, 100, 100]
    with pytest.raises(ValueError, match="imbalance"):
        long_tail_sizes(100, 3, 0.5)
    with pytest.raises(ValueError, match="class 3 empty; lower imbalance"):
        long_tail_sizes(10, 5, 100.0)  # 10 * 100^(-3/4) = 0.32
    with pytest.raises(ValueError, match="imbalance"):
        csbm_domain_pair(imbalance=0.9)
    with pytest.raises(ValueError, match="empty; lower imbalance"):
        csbm_domain_pair(source_max=10, imbalance=50.0)


def test_make_long_tailed_keeps_graphens_sizes_and_removes_low_degree_nodes():
    balanced, _ = csbm_domain_pair(num_classes=4, imbalance=1.0, source_max=100, seed=1)
    out = make_long_tailed(balanced, 8.0)
    sizes = torch.bincount(out.y).tolist()
    assert sizes == [int(100 * (1 / 8) ** (r / 3) + 1e-9) for r in range(4)]
    assert out.x.size(0) == sum(sizes) and out.edge_index.max() < out.x.size(0)
    # the kept nodes of the minority class had higher degree than the removed ones
    deg = torch.bincount(balanced.edge_index[1], minlength=balanced.num_nodes).float()
    kept = {tuple(r.tolist()) for r in out.x}
    members = (balanced.y == 3).nonzero().flatten().tolist()
    kept_deg = [deg[i] for i in members if tuple(balanced.x[i].tolist()) in kept]
    removed_deg = [deg[i] for i in members if tuple(balanced.x[i].tolist()) not in kept]
    assert np.mean(kept_deg) > np.mean(removed_deg) + 1.0
    # edges only between kept nodes, re-indexed consistently
    random_removal = make_long_tailed(balanced, 8.0, remove_low_degree=False, seed=0)
    assert torch.bincount(random_removal.y).tolist() == sizes
    assert not torch.equal(random_removal.x, out.x)
    with pytest.raises(ValueError, match="class 3 empty; lower imbalance"):
        make_long_tailed(balanced, 1000.0)
    with pytest.raises(ValueError, match="imbalance"):
        make_long_tailed(balanced, 0.5)


def test_metrics_match_hand_computation():
    pred = np.array([0, 0, 1, 1, 2, 2])
    true = np.array([0, 1, 1, 1, 2, 0])
    assert accuracy(pred, true) == pytest.approx(4 / 6)
    # F1: class0 tp1 fp1 fn1 -> 0.5; class1 tp2 fp0 fn1 -> 0.8; class2 tp1 fp1 fn0 -> 2/3
    assert macro_f1(pred, true) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    rec = per_class_recall(torch.tensor(pred), torch.tensor(true), 4)
    assert rec[:3] == pytest.approx([0.5, 2 / 3, 1.0]) and math.isnan(rec[3])
    with pytest.raises(ValueError, match="same length"):
        accuracy(pred, true[:3])
    with pytest.raises(TypeError, match="integer"):
        macro_f1(pred.astype(float), true)
    assert answer_correct("It was Zolera.", "zolera") and not answer_correct("Zoleras", "Zolera")


def test_multihop_world_is_consistent_and_deterministic():
    chunks, triples, questions = multihop_world(seed=0)
    assert len(triples) == 100 and len(chunks) == 50
    assert all(len(c.text.split(". ")) == 2 for c in chunks)
    facts = {(t.subject, t.relation): t.object for t in triples}
    for t in triples:  # every fact is written in its chunk
        text = next(c.text for c in chunks if c.chunk_id == t.chunk_id)
        assert f"{t.subject} {t.relation} {t.object}." in text
    assert set(questions) == set(PASSES)
    for p in PASSES:
        assert len(questions[p]) == 20
        for q in questions[p]:
            node = q.start
            for rel in q.relations:
                node = facts[(node, rel)]
            assert node == q.answer
            assert q.relations == (MADE_BY, FOUNDED_BY, BORN_IN)[: q.hops]
    assert [q.text for q in questions["repeat"]] == [q.text for q in questions["original"]]
    assert all(
        a.text != b.text for a, b in zip(questions["original"], questions["para1"], strict=True)
    )
    assert sorted({q.hops for q in questions["original"]}) == [2, 3]
    again = multihop_world(seed=0)
    assert again[0] == chunks and again[2] == questions
    assert multihop_world(seed=1)[0] != chunks
    with pytest.raises(ValueError, match="hops"):
        multihop_world(hops=(6,))
    with pytest.raises(ValueError, match="n_products"):
        multihop_world(n_products=40)
