import numpy as np
import pytest
import torch

from eff_llm._lora import lora_pairs, lora_state
from eff_llm._lowrank_task import lora_model, make_lowrank_task, trainable_names
from eff_llm.fedsvd import (
    DPConfig,
    FedAvgLoRAAggregator,
    FedSVDAggregator,
    FFALoRAAggregator,
    dp_sgd_local_train,
    make_dp_lora_client,
    param_to_state_key,
    per_sample_clipped_grad_sum,
    svd_refactor,
)
from eff_shared.federated import InProcessRunner

TASK = make_lowrank_task(0, n_train=600, n_test=200)
KEY = "base_model.model.proj"


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("economical", [True, False])
def test_svd_refactor_preserves_the_product_and_orthonormalises_a(economical):
    a, b = _rand(4, 64, seed=1), _rand(32, 4, seed=2)
    a2, b2 = svd_refactor(a, b, economical=economical)
    torch.testing.assert_close(b2 @ a2, b @ a, atol=1e-10, rtol=0)
    torch.testing.assert_close(a2 @ a2.T, torch.eye(4, dtype=a.dtype), atol=1e-12, rtol=0)
    # B' = U_r diag(S_r): its columns are orthogonal with decreasing norms (the singular values)
    norms = b2.norm(dim=0)
    assert torch.all(norms[:-1] >= norms[1:])
    gram = b2.T @ b2
    torch.testing.assert_close(gram, torch.diag(torch.diag(gram)), atol=1e-9, rtol=0)


def test_server_step_keeps_ba_and_row_space_of_a():
    state = {
        f"{KEY}.lora_A.weight": _rand(4, 64, seed=3).float(),
        f"{KEY}.lora_B.weight": _rand(32, 4, seed=4).float(),
    }
    replies = [
        ({f"{KEY}.lora_B.weight": _rand(32, 4, seed=5 + i).float() * 0.1}, 10 * (i + 1))
        for i in range(3)
    ]
    new = FedSVDAggregator().aggregate(state, replies, 0)
    ffa = FFALoRAAggregator().aggregate(
        state, replies, 0
    )  # B + mean ΔB with A kept = the product FedSVD must keep
    a, b = new[f"{KEY}.lora_A.weight"], new[f"{KEY}.lora_B.weight"]
    torch.testing.assert_close(
        b @ a, ffa[f"{KEY}.lora_B.weight"] @ ffa[f"{KEY}.lora_A.weight"], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(a @ a.T, torch.eye(4), atol=1e-5, rtol=0)
    # row space(A') == row space(A): projecting A' onto row space(A) changes nothing
    q, _ = torch.linalg.qr(state[f"{KEY}.lora_A.weight"].double().T)
    torch.testing.assert_close((a.double() @ q) @ q.T, a.double(), atol=1e-5, rtol=0)


def test_fedavg_lora_averages_both_factors_and_fedsvd_rejects_a():
    state = {f"{KEY}.lora_A.weight": torch.zeros(2, 3), f"{KEY}.lora_B.weight": torch.zeros(3, 2)}
    replies = [
        ({f"{KEY}.lora_A.weight": torch.ones(2, 3), f"{KEY}.lora_B.weight": torch.ones(3, 2)}, 1),
        (
            {
                f"{KEY}.lora_A.weight": 3 * torch.ones(2, 3),
                f"{KEY}.lora_B.weight": -torch.ones(3, 2),
            },
            3,
        ),
    ]
    out = FedAvgLoRAAggregator().aggregate(state, replies, 0)
    torch.testing.assert_close(out[f"{KEY}.lora_A.weight"], torch.full((2, 3), 2.5))
    torch.testing.assert_close(out[f"{KEY}.lora_B.weight"], torch.full((3, 2), -0.5))
    with pytest.raises(ValueError, match="only lora_B"):
        FedSVDAggregator().aggregate(state, replies, 0)


def test_per_sample_gradients_equal_opacus_grad_sample_module():
    pytest.importorskip("opacus")
    from eff_llm.reproduce.fedsvd import _opacus_crosscheck

    model = lora_model(TASK, 4, 0)
    with torch.no_grad():  # a non-zero B so that A's influence shows too
        dict(model.named_parameters())[f"{KEY}.lora_B.default.weight"].normal_()
    assert _opacus_crosscheck(model, TASK.x_train[:32], TASK.y_train[:32], 1.0) <= 1e-6


def test_clipping_bounds_every_per_sample_gradient():
    model = lora_model(TASK, 4, 0)
    names = trainable_names(model, "AB")
    sums, norms = per_sample_clipped_grad_sum(
        model, names, TASK.x_train[:16], TASK.y_train[:16], 0.01
    )
    assert norms.shape == (16,) and (norms > 0.01).any()
    total = torch.sqrt(sum(v.pow(2).sum() for v in sums.values()))
    assert total <= 16 * 0.01 + 1e-6


def test_accountant_reproduces_opacus_epsilon():
    pytest.importorskip("opacus")
    from opacus.accountants import RDPAccountant

    from eff_llm.fedsvd import account_epsilon, calibrate_noise

    sigma = calibrate_noise(DPConfig(6.0, 1e-5), 0.05, 400)
    assert sigma == pytest.approx(1.1182, abs=2e-3)  # the spec's Opacus reference value
    acc = RDPAccountant()
    for _ in range(400):
        acc.step(noise_multiplier=sigma, sample_rate=0.05)
    assert account_epsilon(sigma, 0.05, 400, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert acc.get_epsilon(1e-5) == pytest.approx(6.0, rel=0.01)


def test_dp_noise_touches_only_trainable_tensors_and_is_seeded():
    model = lora_model(TASK, 4, 0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    b_names = trainable_names(model, "B")

    def go(seed):
        for n, p in model.named_parameters():
            p.data.copy_(before[n])
        return dp_sgd_local_train(
            model,
            b_names,
            (TASK.x_train, TASK.y_train),
            sigma=5.0,
            max_grad_norm=1.0,
            lr=0.5,
            steps=3,
            batch_size=64,
            generator=torch.Generator().manual_seed(seed),
        )

    d1 = go(1)
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    for n in before:
        changed = not torch.equal(before[n], after[n])
        assert changed == (n in b_names), n
    d2, d3 = go(1), go(2)
    assert all(torch.equal(d1[k], d2[k]) for k in d1)
    assert not all(torch.equal(d1[k], d3[k]) for k in d1)


def test_dp_noise_is_gaussian_with_std_sigma_c_over_the_expected_batch():
    # One step from the same start with the same generator: the per-sample part is identical, so
    # Δ(σ) − Δ(0) = −lr·N(0, σ²C²)/(q·n) exactly, with q·n = batch_size the expected batch.
    model = lora_model(TASK, 4, 0)
    names = trainable_names(model, "B")
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    sigma, clip, lr, batch = 3.0, 2.0, 0.5, 32

    def step(s, seed):
        for n, p in model.named_parameters():
            p.data.copy_(start[n])
        return dp_sgd_local_train(
            model,
            names,
            (TASK.x_train[:128], TASK.y_train[:128]),
            sigma=s,
            max_grad_norm=clip,
            lr=lr,
            steps=1,
            batch_size=batch,
            generator=torch.Generator().manual_seed(seed),
        )

    noise = torch.cat(
        [(step(sigma, seed)[k] - step(0.0, seed)[k]).flatten() for seed in range(8) for k in names]
    ) * (-batch / lr)
    assert noise.numel() == 8 * 32 * 4
    assert noise.std().item() == pytest.approx(sigma * clip, rel=0.08)
    assert abs(noise.mean().item()) < 0.8  # 4 standard errors of the mean


def _one_dp_step(model, names, start, optimizer, *, sigma=3.0, steps=1):
    for n, p in model.named_parameters():
        p.data.copy_(start[n])
    return dp_sgd_local_train(
        model,
        names,
        (TASK.x_train[:128], TASK.y_train[:128]),
        sigma=sigma,
        max_grad_norm=1.0,
        lr=0.05,
        steps=steps,
        batch_size=32,
        generator=torch.Generator().manual_seed(3),
        optimizer=optimizer,
    )


def test_dp_optimizer_consumes_the_privatised_gradient():
    model = lora_model(TASK, 4, 0)
    names = trainable_names(model, "B")
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    sgd = _one_dp_step(model, names, start, "sgd")
    # the privatised gradient ĝ = (Σ clip + noise)/(q n) of that step (same generator ⇒ same noise)
    g = {k: -v / 0.05 for k, v in sgd.items()}
    # torch's SGD on ĝ: the written-out default, up to rounding
    ref = _one_dp_step(model, names, start, lambda ps: torch.optim.SGD(ps, lr=0.05))
    for k in names:
        torch.testing.assert_close(ref[k], sgd[k], atol=1e-7, rtol=0)
    # Adam's first step is −lr·ĝ/(|ĝ| + eps): a different update, built on the noisy ĝ
    adam = _one_dp_step(model, names, start, "adam")
    for k in names:
        torch.testing.assert_close(adam[k], -0.05 * g[k] / (g[k].abs() + 1e-8), atol=1e-6, rtol=0)
        assert (adam[k] - sgd[k]).abs().max() > 1e-2
    # AdamW = Adam plus decoupled weight decay (0.01 · lr · θ)
    adamw = _one_dp_step(model, names, start, "adamw")
    for k in names:
        torch.testing.assert_close(adamw[k], adam[k] - 0.05 * 0.01 * start[k], atol=1e-6, rtol=0)
    assert all(dict(model.named_parameters())[k].grad is None for k in names)


def test_dp_optimizer_factory_gets_the_trainable_tensors_and_is_fresh_each_round():
    model = lora_model(TASK, 4, 0)
    built: list[list[torch.Tensor]] = []

    def factory(params):
        built.append(params)
        return torch.optim.SGD(params, lr=0.5, momentum=0.9)

    client = make_dp_lora_client(
        model,
        "fedsvd",
        sigma=0.5,
        max_grad_norm=1.0,
        lr=0.5,
        steps=3,
        batch_size=32,
        optimizer=factory,
    )
    data = [(TASK.x_train[:300], TASK.y_train[:300]), (TASK.x_train[300:], TASK.y_train[300:])]
    res = InProcessRunner(2, None, 0).run(dict(lora_state(model)), client, FedSVDAggregator(), data)
    params = dict(model.named_parameters())
    assert len(built) == 2 * 2  # one optimizer per client per round (no state carried over)
    assert all(
        [id(p) for p in ps] == [id(params[n]) for n in trainable_names(model, "B")] for ps in built
    )
    plain = make_dp_lora_client(
        lora_model(TASK, 4, 0),
        "fedsvd",
        sigma=0.5,
        max_grad_norm=1.0,
        lr=0.5,
        steps=3,
        batch_size=32,
    )
    res0 = InProcessRunner(2, None, 0).run(
        dict(lora_state(lora_model(TASK, 4, 0))), plain, FedSVDAggregator(), data
    )
    key = f"{KEY}.lora_B.weight"
    assert not torch.allclose(res.final_state[key], res0.final_state[key], atol=1e-4)


@pytest.mark.parametrize(
    ("optimizer", "exc", "match"),
    [
        ("rmsprop", ValueError, r"optimizer must be one of \['sgd', 'adam', 'adamw'\]"),
        ("SGD", ValueError, "optimizer must be one of"),
        (0.5, TypeError, "optimizer must be one of .* or a callable"),
        (lambda ps: None, TypeError, "must return a torch.optim.Optimizer"),
    ],
)
def test_dp_optimizer_bad_values(optimizer, exc, match):
    model = lora_model(TASK, 4, 0)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(exc, match=match):
        _one_dp_step(model, trainable_names(model, "B"), start, optimizer)
    if not callable(optimizer):
        with pytest.raises(exc, match=match):
            make_dp_lora_client(
                model,
                "fedsvd",
                sigma=1,
                max_grad_norm=1,
                lr=1,
                steps=1,
                batch_size=1,
                optimizer=optimizer,
            )
        from eff_llm.reproduce.fedsvd import FedSVDReproConfig

        with pytest.raises(exc, match=match):
            FedSVDReproConfig(optimizer=optimizer)


def test_client_trains_on_the_broadcast_a():
    # FedSVD's clients must receive the re-factorised A (and B), not keep their initial A.
    model = lora_model(TASK, 4, 0)
    client = make_dp_lora_client(
        model, "fedsvd", sigma=0.0, max_grad_norm=1.0, lr=0.5, steps=1, batch_size=32
    )
    state = lora_state(model)
    a_key, b_key = f"{KEY}.lora_A.weight", f"{KEY}.lora_B.weight"
    q, _ = torch.linalg.qr(_rand(64, 4, seed=7).float())
    state[a_key], state[b_key] = q.T.contiguous(), _rand(32, 4, seed=8).float()
    update, n, _ = client(
        dict(state), (TASK.x_train[:64], TASK.y_train[:64]), None, np.random.default_rng(0)
    )
    params = dict(model.named_parameters())
    torch.testing.assert_close(params[f"{KEY}.lora_A.default.weight"], state[a_key], atol=0, rtol=0)
    torch.testing.assert_close(
        params[f"{KEY}.lora_B.default.weight"], state[b_key] + update[b_key], atol=1e-6, rtol=0
    )
    assert set(update) == {b_key} and n == 64


def test_client_sends_only_b_in_fedsvd_mode_and_runs_on_the_runner():
    model = lora_model(TASK, 4, 0)
    client = make_dp_lora_client(
        model, "fedsvd", sigma=0.5, max_grad_norm=1.0, lr=0.5, steps=2, batch_size=32
    )
    init = lora_state(model)
    data = [(TASK.x_train[:300], TASK.y_train[:300]), (TASK.x_train[300:], TASK.y_train[300:])]
    res = InProcessRunner(2, None, 0).run(dict(init), client, FedSVDAggregator(), data)
    assert all(c.upload_bytes == 32 * 4 * 4 for c in res.comm)
    assert param_to_state_key(f"{KEY}.lora_B.default.weight") == f"{KEY}.lora_B.weight"
    a = res.final_state[f"{KEY}.lora_A.weight"]
    torch.testing.assert_close(a @ a.T, torch.eye(4), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target_epsilon": 0.0}, "target_epsilon"),
        ({"target_epsilon": 1.0, "target_delta": 1.0}, "target_delta"),
        ({"target_epsilon": 1.0, "max_grad_norm": 0.0}, "max_grad_norm"),
        ({"target_epsilon": 1.0, "accountant": "gdp"}, "accountant"),
    ],
)
def test_dp_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPConfig(**kwargs)


def test_other_bad_inputs():
    from eff_llm.fedsvd import calibrate_noise

    with pytest.raises(ValueError, match="sample_rate"):
        calibrate_noise(DPConfig(1.0), 1.5, 10)
    with pytest.warns(UserWarning, match="1/n_samples"):
        pytest.importorskip("opacus")
        calibrate_noise(DPConfig(1.0, target_delta=0.01), 0.1, 10, n_samples=1000)
    with pytest.raises(ValueError, match="rank r=8 exceeds"):
        svd_refactor(torch.zeros(8, 4), torch.zeros(6, 8))
    with pytest.raises(RuntimeError, match="module proj"):
        svd_refactor(torch.full((2, 4), float("nan")), torch.zeros(6, 2), name="proj")
    with pytest.raises(ValueError, match="has no lora_B"):
        lora_pairs({f"{KEY}.lora_A.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="mode"):
        make_dp_lora_client(
            lora_model(TASK, 4, 0), "fedprox", sigma=1, max_grad_norm=1, lr=1, steps=1, batch_size=1
        )  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="period"):
        FedSVDAggregator(period=0)


@pytest.mark.slow
def test_quick_reproduction_claims():
    pytest.importorskip("opacus")
    from eff_llm.reproduce.fedsvd import run

    result = run("quick", 0)
    assert result.passed and "FAIL" not in result.verdicts(), [
        c.to_dict("quick") for c in result.claims
    ]
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 7 and all(c.verdict("quick") == "pass" for c in checks)
    by_text = {c.text.split(" (")[0].split(" under")[0]: c for c in result.claims}
    headline = by_text["accuracy FedSVD - FedAvg-LoRA"]
    assert headline.headline and headline.expected == "xfail"
    assert headline.verdict("quick") == "xfail" and headline.seeds == (0,)
    assert by_text["accuracy FedSVD - FFA-LoRA"].verdict("quick") == "pass"
    # FedSVD - base is judged over seeds 0-4 in full mode only (seed 0 alone is +0.008).
    assert by_text["accuracy FedSVD - base"].verdict("quick") == "not judged"
    # the learning comparisons are measured on the same seed and sigma for every method
    sigmas = {row["sigma"] for row in result.table if row["method"] != "base (no adaptation)"}
    assert len(sigmas) == 1 and np.isfinite(result.metrics["epsilon_spent"])


def test_public_setup_and_federate_run_a_user_experiment():
    """A user's experiment through the public reproduction functions: the default setup, then
    another σ (no noise) and fewer clients on the same task, FedSVD only."""
    pytest.importorskip("opacus")  # setup() calibrates σ with Opacus' accountant (the [dp] extra)
    from dataclasses import replace

    from eff_llm.reproduce.fedsvd import (
        METHODS,
        FederationResult,
        FedSVDReproConfig,
        FedSVDSetup,
        federate,
        setup,
    )

    cfg = FedSVDReproConfig(rounds=2, local_steps=2, n_train=600, clients=4, clients_per_round=2)
    data = setup(cfg, 3)
    assert isinstance(data, FedSVDSetup) and len(data.client_data) == 4
    assert data.steps == 4 and data.sigma > 0
    assert sum(len(x) for x, _ in data.client_data) == 600
    out = federate(cfg, 3, data)
    assert isinstance(out, FederationResult)
    assert set(out.accuracy) == {"base (no adaptation)", *METHODS}
    assert out.upload_bytes["FedSVD"] == [32 * 4 * 4] and out.upload_bytes["FedAvg-LoRA"] == [
        (32 + 64) * 4 * 4
    ]
    assert all(0.0 <= a <= 1.0 for a in out.accuracy.values())
    # the same call again is the same result (seeded), and σ = 0 changes it
    assert federate(cfg, 3, data).accuracy == out.accuracy
    quiet = replace(data, sigma=0.0, client_data=data.client_data[:2])
    only = federate(cfg, 3, quiet, methods=("FedSVD",))
    assert set(only.accuracy) == {"base (no adaptation)", "FedSVD"}
    assert only.accuracy["base (no adaptation)"] == out.accuracy["base (no adaptation)"]
    with pytest.raises(ValueError, match="methods must be a non-empty subset"):
        federate(cfg, 3, data, methods=("FedProx",))
    with pytest.raises(TypeError, match="data"):
        federate(cfg, 3, data={"sigma": 1.0})
    with pytest.raises(TypeError, match="cfg"):
        setup({"rank": 4}, 0)
    with pytest.raises(ValueError, match="sigma"):
        replace(data, sigma=-1.0)
    with pytest.raises(ValueError, match=r"client_data\[0\]"):
        replace(data, client_data=[(data.task.x_train[:3], data.task.y_train[:2])])
    with pytest.raises(ValueError, match="clients_per_round"):
        FedSVDReproConfig(clients=2, clients_per_round=3)
    with pytest.raises(ValueError, match="rounds"):
        FedSVDReproConfig(rounds=0)


def test_cli_optimizer_option(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_llm.cli import app

    bad = CliRunner().invoke(app, ["fedsvd", "--optimizer", "lion"])
    assert bad.exit_code != 0 and "optimizer must be one of" in bad.output
    pytest.importorskip("opacus")  # the run calibrates σ with Opacus' accountant
    outs = {}
    for opt in ("sgd", "adam"):
        path = tmp_path / f"{opt}.json"
        res = CliRunner().invoke(app, ["fedsvd", "--rounds", "2", "--clients", "2",
                                       "--optimizer", opt, "--json", str(path)])  # fmt: skip
        assert res.exit_code == 0, res.output
        outs[opt] = json.loads(path.read_text())["results"][0]["table"]
    assert outs["sgd"][0] == outs["adam"][0]  # the unadapted base row does not train
    assert outs["sgd"][1:] != outs["adam"][1:]  # the optimizer reaches the clients
