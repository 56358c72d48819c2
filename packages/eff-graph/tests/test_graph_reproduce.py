import math

import pytest

from eff_graph.reproduce import imgda as imgda_repro
from eff_graph.reproduce import remindrag as remindrag_repro
from eff_shared.testing import assert_expected_verdicts

MECHANICS = (
    "enhancement norms",
    "largest memory norm",
    "against the rule",
    "after punishment",
    "punish=False",
    "memorize=False",
    "repeat-pass queries answered by replay alone",
    "force_do_rag",
    "rerun with the same seed",
)


def test_remindrag_quick_reproduction_mechanics_hold_and_comparisons_are_measured():
    result = remindrag_repro.run("quick", seed=0)
    assert result.name == "graph.remindrag" and result.error is None and result.passed
    assert_expected_verdicts(result)
    by_key = {key: [c for c in result.claims if key in c.text] for key in MECHANICS}
    for key, claims in by_key.items():
        assert len(claims) == 1 and claims[0].kind == "check" and claims[0].passed, (key, claims)
    # The memory-vs-naive comparisons are the paper's claims, per world seed, same questions
    comparisons = [c for c in result.claims if c.text.startswith("hashing")]
    assert len(comparisons) == 6 and all(c.kind == "paper" for c in comparisons)
    assert all(c.seeds == (0,) and math.isfinite(c.measured) for c in comparisons)
    # the withdrawn naive-stability claim is replaced by the paired per-pass claim
    assert not any("naive traversal, largest" in c.text for c in result.claims)
    paired = [c for c in comparisons if "ReMindRAG calls/q - naive calls/q" in c.text]
    assert [c.text.split(",")[1].split()[0] for c in paired] == ["repeat", "para1", "para2"]
    first = next(c for c in comparisons if "first-pass calls/q / naive" in c.text)
    assert first.passed  # memorisation costs one extra call per traversed query, not more
    assert any(c.headline for c in comparisons) and result.paper_title and result.headline
    rows = {(r["pass"], r["method"]): r for r in result.table}
    assert len(rows) == 12
    assert rows[("repeat", "ReMindRAG")]["calls/q"] < rows[("original", "ReMindRAG")]["calls/q"]
    assert (
        rows[("repeat", "naive traversal")]["calls/q"]
        == rows[("original", "naive traversal")]["calls/q"]
    )
    # the naive traversal sees the wording only through its seeds
    dep = result.metrics["naive_seed_dependence_hashing"]
    assert set(dep) == {"repeat", "para1", "para2"} and dep["repeat"]["seeds_differ"] == 0
    assert all(d["same_seed_max_calls_gap"] == 0 for d in dep.values())


@pytest.mark.slow
def test_imgda_quick_reproduction_claims_hold():
    result = imgda_repro.run("quick", seed=0)
    assert result.error is None and result.passed
    assert_expected_verdicts(result)
    assert len(result.claims) == 11
    papers = [c for c in result.claims if c.kind == "paper"]
    assert len(papers) == 4 and all(c.seeds == (0,) for c in papers)
    assert sum(c.headline for c in papers) == 2 and result.paper_title and result.headline
    det = next(c for c in result.claims if "same seed => same result" in c.text)
    assert det.kind == "check" and det.measured == 0.0
    assert [r["method"] for r in result.table] == [
        m for m in imgda_repro.METHODS if m != "GCN class-balanced"
    ]
