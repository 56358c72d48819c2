import math

import pytest

from eff_rl.reproduce.cka_rl import CKARLReproConfig, run


@pytest.mark.slow
def test_quick_reproduction_mechanics_hold_and_comparisons_are_measured():
    result = run("quick", seed=0, cfg=CKARLReproConfig(steps_per_task=20_000, workers=2))
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


@pytest.mark.slow
def test_steps_per_task_sweep_reports_the_gains_per_budget():
    """Issue #26: the gains over fine-tuning are reported against the number of steps per task."""
    from eff_rl.reproduce import cka_rl
    from eff_shared.reproduce import Result

    cfg = CKARLReproConfig(steps_per_task=1024, eval_episodes=2)
    main = cka_rl._gains(cka_rl._train(cfg, [0], cka_rl.METHODS[:3], 2))
    for a, b, gap in zip(main["ft_cka"], main["ft_finetune"], main["ft_gap"], strict=True):
        assert gap == a - b
    auc = main["mean_auc"]
    assert main["auc_gap"] == [auc["cka_rl"][0] - auc["finetune"][0]]
    result = Result("rl.cka_rl", "full", 0)
    cka_rl._steps_section(result, cfg, [0], 2, main, sweep=(512, 1024))
    series = result.series["gains_vs_steps_per_task"]
    assert series["x"] == [512.0, 1024.0]
    assert series["FT(CKA-RL) - FT(fine-tune)"][1] == main["ft_gap"][0]
    sweep = cka_rl.steps_sweep([0], (512,), 2, cfg)[512]
    assert series["mean AUC(CKA-RL) - mean AUC(fine-tune)"][0] == sweep["auc_gap"][0]
    claims = [c for c in result.claims if c.kind == "paper"]
    assert [c.text.split(":")[0] for c in claims] == ["512 steps per task"] * 2
    assert claims[0].values == tuple(sweep["ft_gap"]) and claims[0].threshold == 0.1
    assert claims[1].values == tuple(sweep["auc_gap"]) and claims[1].threshold == 0.03
    assert all(c.modes == ("full",) for c in claims)
    assert set(result.metrics["steps_sweep"]) == {"512", "1024"}


def test_per_budget_claims_carry_the_first_full_runs_expected_verdicts(monkeypatch):
    """The first full run's per-seed gains (seeds 0-5, 2026-12-05) judged by ``_steps_section``:
    the FT gap at 10k steps is the one xfail, the other three reproduce, and the result passes."""
    from eff_rl.reproduce import cka_rl
    from eff_shared.reproduce import Result

    measured = {
        10_000: {
            "ft_gap": [0.0, 0.0444, 0.0833, 0.1167, 0.1042, 0.0444],
            "auc_gap": [0.0, 0.0375, 0.05, 0.0875, 0.0625, 0.025],
        },
        20_000: {
            "ft_gap": [0.147, 0.045, 0.532, 0.306, 0.292, 0.185],
            "auc_gap": [0.0625, -0.0125, 0.1875, 0.1375, 0.1125, 0.0875],
        },
    }
    seen = {}

    def fake_sweep(seeds, budgets, workers, cfg):
        seen["budgets"] = budgets
        return {b: measured[b] for b in budgets}

    monkeypatch.setattr(cka_rl, "steps_sweep", fake_sweep)
    main = {"ft_gap": [0.0] * 6, "auc_gap": [0.0] * 6}
    result = Result("rl.cka_rl", "full", 0)
    cka_rl._steps_section(result, CKARLReproConfig(), list(range(6)), 1, main)
    assert seen["budgets"] == (10_000, 20_000)
    claims = {
        c.text.split(":")[0] + (" ft" if "FT" in c.text else " auc"): c for c in result.claims
    }
    assert sorted(claims) == [
        "10,000 steps per task auc",
        "10,000 steps per task ft",
        "20,000 steps per task auc",
        "20,000 steps per task ft",
    ]
    verdicts = {k: c.verdict("full") for k, c in claims.items()}
    assert verdicts == {
        "10,000 steps per task ft": "xfail",
        "10,000 steps per task auc": "pass",
        "20,000 steps per task ft": "pass",
        "20,000 steps per task auc": "pass",
    }
    assert "+0.064" in claims["10,000 steps per task ft"].reason
    assert result.passed
