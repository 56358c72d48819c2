import math

import pytest

from eff_rl.reproduce.cka_rl import RunConfig, run


@pytest.mark.slow
def test_quick_reproduction_mechanics_hold_and_comparisons_are_measured():
    result = run("quick", seed=0, workers=2, cfg=RunConfig(steps_per_task=20_000))
    assert result.passed and len(result.claims) == 7
    assert "FAIL" not in result.verdicts()
    checks = [c for c in result.claims if c.kind == "check"]
    papers = [c for c in result.claims if c.kind == "paper"]
    # Mechanism and memory checks hold at any scale.
    assert len(checks) == 3 and all(c.verdict("quick") == "pass" for c in checks)
    # The paper's comparisons are measured per seed on the same seed's runs and judged in full
    # mode only (seeds 0-5, specs/claims.md); quick mode prints them.
    assert len(papers) == 4 and all(c.verdict("quick") == "not judged" for c in papers)
    assert all(c.modes == ("full",) and c.seeds == (0,) and c.paper for c in papers)
    assert sum(c.headline for c in papers) == 2 and result.paper_title and result.headline
    assert all(math.isfinite(c.measured) for c in result.claims)
    methods = [row["method"] for row in result.table]
    assert methods == ["from scratch", "fine-tune", "CKA-RL (pool 3)", "CKA-RL (pool 2)"]
    assert (
        result.table[0]["AUC T0"] == result.table[1]["AUC T0"] == result.table[2]["AUC T0"]
    )  # shared T0
