"""Tests of eff_theory.lora_meta: task family, SR closed form, LoRA-ML retraining, reduced-rank
adaptation, the torch wrapper (with the torch extra) and bad input."""

import numpy as np
import pytest

from eff_shared.testing import assert_expected_verdicts
from eff_theory.lora_meta import (
    LoRAMetaLearner,
    LowRankTaskFamily,
    adapt_lora,
    excess_risk,
    make_lowrank_task_family,
    sample_task,
    standard_retraining,
)


def small_problem(seed=0, d=6, k=1, tasks=3, n=800, noise=0.05):
    fam = make_lowrank_task_family(d, k, tasks, seed=seed)
    rng = np.random.default_rng(seed + 100)
    return fam, [sample_task(fam, t, n, noise, rng) for t in range(tasks)]


def test_family_matches_the_official_construction_and_is_reproducible():
    fam = make_lowrank_task_family(8, 2, 4, seed=3)
    assert fam.A_star.shape == (8, 8) and fam.U_star.shape == (5, 8, 2)
    np.testing.assert_array_equal(fam.A_star, fam.A_star.T)
    np.testing.assert_allclose(fam.task_matrix(4), fam.A_star + fam.U_star[4] @ fam.U_star[4].T)
    again = make_lowrank_task_family(8, 2, 4, seed=3)
    np.testing.assert_array_equal(fam.U_star, again.U_star)
    X1, Y1 = sample_task(fam, 1, 50, 0.1, rng=9)
    _, Y2 = sample_task(fam, 1, 50, 0.1, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(Y1, Y2)
    np.testing.assert_allclose(Y1, fam.task_matrix(1) @ X1, atol=0.6)  # noise std 0.1


def test_standard_retraining_is_the_pooled_least_squares_fit():
    fam, data = small_problem(noise=0.0)
    A_sr = standard_retraining(data)
    X = np.hstack([x for x, _ in data])
    Y = np.hstack([y for _, y in data])
    np.testing.assert_allclose(A_sr, np.linalg.lstsq(X.T, Y.T, rcond=None)[0].T, atol=1e-10)
    # Population value A* + mean_t U_t U_tᵀ: SR is biased away from A*.
    pop = fam.A_star + np.mean([fam.U_star[t] @ fam.U_star[t].T for t in range(3)], axis=0)
    assert np.sum((A_sr - pop) ** 2) < 0.05 * np.sum((pop - fam.A_star) ** 2)
    assert np.sum((A_sr - fam.A_star) ** 2) > 0.01 * np.sum(fam.A_star**2)


def test_lora_ml_recovers_the_shared_base_and_sr_does_not():
    fam, data = small_problem()
    learner = LoRAMetaLearner(rank=1, outer_steps=1500, seed=0).fit(data)
    rel = lambda A: np.sum((A - fam.A_star) ** 2) / np.sum(fam.A_star**2)  # noqa: E731
    assert rel(learner.base_) < 1e-3
    assert rel(standard_retraining(data)) > 100 * rel(learner.base_)
    # The retraining adapters found the task directions: U_t U_tᵀ ≈ U*_t U*_tᵀ.
    for t in range(3):
        found = learner.adapters_[t] @ learner.adapters_[t].T
        true = fam.U_star[t] @ fam.U_star[t].T
        assert np.linalg.norm(found - true) < 0.02 * np.linalg.norm(true)
    # The loss history falls to the noise floor d·σ² (joint minimisation converged).
    assert learner.history_[-1] < 1.5 * 6 * 0.05**2 < learner.history_[0]


def test_lora_ml_is_bit_reproducible_and_seed_dependent_in_its_path():
    _, data = small_problem(n=200)
    a = LoRAMetaLearner(outer_steps=50, seed=1).fit(data)
    b = LoRAMetaLearner(outer_steps=50, seed=np.random.default_rng(1)).fit(data)
    c = LoRAMetaLearner(outer_steps=50, seed=2).fit(data)
    np.testing.assert_array_equal(a.base_, b.base_)
    np.testing.assert_array_equal(a.history_, b.history_)
    assert not np.array_equal(a.base_, c.base_)


def test_asymmetric_retraining_adapters_also_fit_the_tasks():
    _, data = small_problem(n=400)
    learner = LoRAMetaLearner(outer_steps=300, symmetric=False, seed=0).fit(data)
    assert learner.adapters_v_.shape == learner.adapters_.shape
    assert learner.history_[-1] < 0.1 * learner.history_[0]


def test_reduced_rank_regression_is_the_rank_k_least_squares_optimum():
    rng = np.random.default_rng(4)
    d, n, k = 6, 40, 2
    base = rng.normal(size=(d, d))
    X = rng.normal(size=(d, n))
    Y = (base + rng.normal(size=(d, k)) @ rng.normal(size=(k, d))) @ X + 0.3 * rng.normal(
        size=(d, n)
    )
    U, V = adapt_lora(base, X, Y, k)
    assert U.shape == V.shape == (d, k)
    loss = lambda D: np.sum((Y - (base + D) @ X) ** 2)  # noqa: E731
    best = loss(U @ V.T)
    # No rank-k perturbation of the optimum (and no GD solution) does better.
    for _ in range(50):
        dU, dV = 1e-3 * rng.normal(size=(d, k)), 1e-3 * rng.normal(size=(d, k))
        assert loss((U + dU) @ (V + dV).T) >= best - 1e-9
    Ug, Vg = adapt_lora(base, X, Y, k, method="gd", steps=4000, lr=0.02, seed=0)
    Ug2, _ = adapt_lora(base, X, Y, k, method="gd", steps=4000, lr=0.02, seed=0)
    np.testing.assert_array_equal(Ug, Ug2)  # same seed, same path
    assert loss(Ug @ Vg.T) >= best - 1e-9
    assert loss(Ug @ Vg.T) < 1.01 * best


def test_excess_risk_is_the_frobenius_error_and_meta_learning_beats_sr_after_adaptation():
    fam, data = small_problem()
    A_ml = LoRAMetaLearner(outer_steps=1500).fit(data).base_
    A_sr = standard_retraining(data)
    X, Y = sample_task(fam, 3, 200, 0.05, rng=0)
    A_test = fam.task_matrix(3)
    risks = {}
    for name, base in (("oracle", fam.A_star), ("ml", A_ml), ("sr", A_sr)):
        U, V = adapt_lora(base, X, Y, 1)
        risks[name] = excess_risk(A_test, base, U, V)
        assert risks[name] == pytest.approx(np.sum((A_test - base - U @ V.T) ** 2))
    assert risks["ml"] < 2 * risks["oracle"]
    assert risks["sr"] > 100 * risks["ml"]


def test_two_tasks_warn_that_recovery_needs_three():
    _, data = small_problem(tasks=2, n=100)
    with pytest.warns(UserWarning, match="T >= 3"):
        LoRAMetaLearner(outer_steps=5).fit(data)


def test_bad_input_raises_value_errors():
    fam, data = small_problem(n=50)
    with pytest.raises(ValueError, match="rank"):
        LoRAMetaLearner(rank=0)
    with pytest.raises(ValueError, match="rank must lie in"):
        LoRAMetaLearner(rank=6).fit(data)
    with pytest.raises(ValueError, match="at least 2 tasks"):
        LoRAMetaLearner().fit(data[:1])
    with pytest.raises(ValueError, match="num_tasks"):
        make_lowrank_task_family(6, 1, 1)
    with pytest.raises(ValueError, match="k must be"):
        make_lowrank_task_family(6, 6, 3)
    X, Y = data[0]
    with pytest.raises(ValueError, match="X and Y"):
        standard_retraining([(X, Y[:, :-1])])
    with pytest.raises(ValueError, match="share d"):
        standard_retraining([(X, Y), (X[:-1], Y[:-1])])
    bad = Y.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        LoRAMetaLearner().fit([(X, bad), (X, Y)])
    with pytest.raises(ValueError, match="noise_std"):
        sample_task(fam, 0, 10, noise_std=-0.1)
    with pytest.raises(ValueError, match="rank"):
        adapt_lora(fam.A_star, X, Y, 6)
    with pytest.raises(ValueError, match="method"):
        adapt_lora(fam.A_star, X, Y, 1, method="sgd")
    with pytest.raises(ValueError):
        LowRankTaskFamily(np.zeros((3, 4)), np.zeros((2, 3, 1)))


# --------------------------------------------------------------------------- torch extra


def test_torch_names_are_lazy_and_hint_the_extra(monkeypatch):
    import importlib.util

    import eff_theory.lora_meta as lm

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r'pip install "eff-theory\[torch\]"'):
        lm.MultiTaskLoRA  # noqa: B018


def test_multitask_lora_meta_retrain_recovers_the_base():
    torch = pytest.importorskip("torch")
    from eff_theory.lora_meta import MultiTaskLoRA, meta_retrain

    fam, data = small_problem(d=4, n=300)
    batches = [(torch.tensor(X.T), torch.tensor(Y.T)) for X, Y in data]
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False).double())
    model = MultiTaskLoRA(net, num_tasks=3, r=1, lora_alpha=1, symmetric=True, seed=0)
    losses = meta_retrain(model, batches, steps=500, lr=1e-2)
    assert losses[-1] < 0.01 * losses[0]
    base = model.strip_adapters()[0].weight.detach().numpy()
    rel = lambda A: np.sum((A - fam.A_star) ** 2) / np.sum(fam.A_star**2)  # noqa: E731
    assert rel(base) < 1e-2 and rel(standard_retraining(data)) > 10 * rel(base)


def test_multitask_lora_routing_export_and_errors():
    torch = pytest.importorskip("torch")
    from eff_theory.lora_meta import MultiTaskLoRA

    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    model = MultiTaskLoRA(net, num_tasks=2, r=2, lora_alpha=4, target_modules=["0"], seed=0)
    assert model.target_names == ["0"]
    layer = net[0]
    with torch.no_grad():
        layer.lora_B[1].fill_(0.5)
    x = torch.randn(7, 3)
    model.set_task(0)
    y0 = model(x)
    model.set_task(1)
    y1 = model(x)
    stripped = model.strip_adapters()
    torch.testing.assert_close(y0, stripped(x))  # task 0 adapter is still zero (peft init)
    sd = model.adapter_state_dict(1)
    A, B = sd["base_model.model.0.lora_A.weight"], sd["base_model.model.0.lora_B.weight"]
    assert A.shape == (2, 3) and B.shape == (5, 2)
    delta = (4 / 2) * (B @ A)
    expected = (
        torch.relu(x @ (layer.base.weight + delta).T + layer.base.bias) @ net[2].weight.T
        + net[2].bias
    )
    torch.testing.assert_close(y1, expected)
    twin = MultiTaskLoRA(
        torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2)),
        num_tasks=2,
        r=2,
        lora_alpha=4,
        target_modules=["0"],
        seed=0,
    )
    torch.testing.assert_close(twin.model[0].lora_A[0], layer.lora_A[0], rtol=0, atol=0)
    base_ids = {id(p) for p in model.base_parameters()}
    assert all(id(p) not in base_ids for p in model.adapter_parameters())
    assert len(model.adapter_parameters(1)) == 2
    with pytest.raises(IndexError):
        model.set_task(2)
    with pytest.raises(ValueError, match=r"matches no nn\.Linear"):
        MultiTaskLoRA(torch.nn.Sequential(torch.nn.Linear(3, 3)), 2, target_modules=["q_proj"])
    with pytest.raises(ValueError, match="square"):
        MultiTaskLoRA(torch.nn.Sequential(torch.nn.Linear(3, 4)), 2, symmetric=True)


def test_quick_reproduction_claims_hold():
    from eff_theory.reproduce.lora_meta import run

    result = run("quick", seed=0)
    assert result.error is None and result.passed and len(result.claims) == 5
    assert_expected_verdicts(result)  # checks pass; paper claims as expected
    assert any(c.kind == "paper" and c.headline for c in result.claims)
    assert result.paper_title and result.headline


def test_cli_prints_table_and_writes_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_theory.cli import app

    out = tmp_path / "lora.json"
    args = ["lora-meta", "--d", "5", "--n-retrain", "300", "--n-finetune", "50", "--seeds", "0"]
    result = CliRunner().invoke(app, [*args, "--outer-steps", "300", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"oracle", "SR", "LoRA-ML"}
    assert rows["SR"]["n'=50"] > 10 * rows["LoRA-ML"]["n'=50"]
    bad = CliRunner().invoke(app, ["lora-meta", "--k", "0", "--seeds", "0", "--outer-steps", "1"])
    assert bad.exit_code == 2 and "k" in bad.output
