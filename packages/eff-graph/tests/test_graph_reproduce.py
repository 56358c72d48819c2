import math

import pytest

from eff_graph.reproduce import imgda as imgda_repro
from eff_graph.reproduce import remindrag as remindrag_repro

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
    assert result.name == "graph.remindrag" and result.error is None
    by_key = {key: [c for c in result.claims if key in c.text] for key in MECHANICS}
    for key, claims in by_key.items():
        assert len(claims) == 1 and claims[0].passed, (key, claims)
    # The memory-vs-naive comparisons are the paper's claims, measured in the same run; naive
    # stability across paraphrases does not reproduce (the seeds depend on the wording; see the
    # package README), so only that they are measured is asserted here.
    comparisons = [c for c in result.claims if c.text.startswith("hashing:")]
    assert len(comparisons) == 4 and all(math.isfinite(c.measured) for c in comparisons)
    first = next(c for c in comparisons if "first-pass calls/q / naive" in c.text)
    assert first.passed  # memorisation costs one extra call per traversed query, not more
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
    assert result.error is None
    failed = [(c.text, c.measured, c.threshold) for c in result.claims if not c.passed]
    assert not failed, failed
    assert len(result.claims) == 13
    assert [r["method"] for r in result.table] == list(imgda_repro.METHODS)
