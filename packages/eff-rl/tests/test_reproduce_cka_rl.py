import math

import pytest

from eff_rl.reproduce.cka_rl import RunConfig, run


@pytest.mark.slow
def test_quick_reproduction_mechanics_hold_and_comparisons_are_measured():
    result = run("quick", seed=0, workers=2, cfg=RunConfig(steps_per_task=20_000))
    by_text = {c.text: c for c in result.claims}
    assert len(result.claims) == 7
    # Mechanism and memory claims must hold at any scale.
    for key in ("most vectors ever held", "pool bytes after the last task", "pool sizes per task"):
        (claim,) = [c for t, c in by_text.items() if key in t]
        assert claim.passed, claim
    # The comparisons with fine-tuning are measured on the same seed; whether CKA-RL wins is the
    # paper's claim (reported, not asserted here: it did not reproduce at this scale, see README).
    assert all(math.isfinite(c.measured) for c in result.claims)
    methods = [row["method"] for row in result.table]
    assert methods == ["from scratch", "fine-tune", "CKA-RL (pool 3)", "CKA-RL (pool 2)"]
    assert (
        result.table[0]["AUC T0"] == result.table[1]["AUC T0"] == result.table[2]["AUC T0"]
    )  # shared T0
