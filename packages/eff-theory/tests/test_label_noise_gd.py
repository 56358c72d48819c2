"""Tests of eff_theory.label_noise_gd: data model, the patch network, LNGD and its baselines."""

import math

import numpy as np
import pytest

from eff_shared.testing import assert_expected_verdicts
from eff_theory.label_noise_gd import (
    LNGDConfig,
    PatchCNN,
    SignalNoiseData,
    lngd_experiment,
    logistic_loss,
    make_signal_noise_data,
    train,
)


def _naive_f(W, X, power):
    """f(W, x) = (1/m) Σ_r Σ_p [σ(⟨w_{+1,r}, x_p⟩) − σ(⟨w_{−1,r}, x_p⟩)], written as loops."""
    m = W.shape[1]
    out = np.zeros(len(X))
    for i, x in enumerate(X):
        for j, sign in ((0, 1.0), (1, -1.0)):
            for r in range(m):
                for patch in x:
                    out[i] += sign * max(0.0, W[j, r] @ patch) ** power / m
    return out


# --- data -----------------------------------------------------------------------------------------


def test_data_follow_definition_2_1():
    data = make_signal_noise_data(400, 50, mu_norm=2.0, sigma_p=0.5, rng=0)
    assert set(np.unique(data.y)) == {-1, 1}
    np.testing.assert_allclose(data.signal, data.y[:, None] * data.mu)
    assert np.linalg.norm(data.mu) == pytest.approx(2.0)
    np.testing.assert_allclose(data.noise @ data.mu, 0.0, atol=1e-12)  # ξ ⟂ μ
    assert np.std(data.noise[:, 1:]) == pytest.approx(0.5, rel=0.03)
    assert data.snr == pytest.approx(2.0 / (0.5 * math.sqrt(50)), rel=0.03)
    x = data.patches()
    assert x.shape == (400, 2, 50)
    first = data.signal_first
    assert 0.4 < first.mean() < 0.6  # the signal patch position is random
    np.testing.assert_array_equal(x[first, 0], data.signal[first])
    np.testing.assert_array_equal(x[~first, 1], data.signal[~first])
    np.testing.assert_array_equal(data.patches(shuffle=False)[:, 0], data.signal)


def test_data_and_init_are_bit_reproducible():
    a, b = make_signal_noise_data(30, 40, rng=3), make_signal_noise_data(30, 40, rng=3)
    assert np.array_equal(a.patches(), b.patches()) and np.array_equal(a.y, b.y)
    assert not np.array_equal(a.noise, make_signal_noise_data(30, 40, rng=4).noise)
    assert np.array_equal(PatchCNN(40, 3, rng=5).W, PatchCNN(40, 3, rng=5).W)


# --- model ------------------------------------------------------------------------------------


@pytest.mark.parametrize("power", [2, 3])
def test_forward_matches_the_definition_and_order_of_patches_is_irrelevant(power):
    data = make_signal_noise_data(6, 8, rng=1)
    model = PatchCNN(8, 3, sigma0=0.5, power=power, rng=2)
    X = data.patches()
    np.testing.assert_allclose(model.forward(X), _naive_f(model.W, X, power), rtol=1e-12)
    np.testing.assert_allclose(model.forward(X[:, ::-1]), model.forward(X), rtol=1e-12)


@pytest.mark.parametrize("power", [2, 3])
def test_gradient_matches_finite_differences(power):
    data = make_signal_noise_data(5, 6, rng=1)
    model = PatchCNN(6, 2, sigma0=0.5, power=power, rng=3)
    X, coef = data.patches(), np.random.default_rng(4).standard_normal(5)
    grad = model.grad(X, coef)
    num = np.zeros_like(model.W)
    for idx in np.ndindex(model.W.shape):
        for step in (1e-6, -1e-6):
            model.W[idx] += step
            num[idx] += np.sign(step) * (coef @ model.forward(X)) / 2e-6
            model.W[idx] -= step
    np.testing.assert_allclose(grad, num, atol=1e-6)


def test_signal_and_noise_coefficients():
    model = PatchCNN(5, 2, rng=0)
    mu = np.array([1.0, 0, 0, 0, 0])
    np.testing.assert_allclose(model.signal_coeffs(mu), [model.W[0, :, 0], -model.W[1, :, 0]])
    xi = np.random.default_rng(1).standard_normal((3, 5))
    np.testing.assert_allclose(model.noise_coeffs(xi)[1, 0], xi @ model.W[1, 0])


def test_logistic_loss_is_stable():
    z = np.array([-1000.0, 0.0, 1000.0])
    np.testing.assert_allclose(logistic_loss(z), [1000.0, math.log(2), 0.0], atol=1e-12)


# --- training ---------------------------------------------------------------------------------


class _RecordingGenerator(np.random.Generator):
    """A Generator that records the size of every uniform draw (to see when labels are flipped)."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))
        self.sizes = []

    def random(self, size=None, *args, **kwargs):
        self.sizes.append(size)
        return super().random(size, *args, **kwargs)


def test_lngd_draws_fresh_flips_for_every_sample_at_every_step():
    data = make_signal_noise_data(12, 20, rng=0)
    gen = _RecordingGenerator(1)
    train(PatchCNN(20, 2, rng=2), data, method="label_noise", steps=7, rng=gen)
    assert gen.sizes == [12] * 7


def test_lngd_without_flips_is_gd_and_runs_are_bit_reproducible():
    data = make_signal_noise_data(20, 30, rng=0)
    init = PatchCNN(30, 3, rng=1)
    runs = {}
    for key, method, p, seed in (
        ("gd", "gd", 0.1, 0),
        ("p0", "label_noise", 0.0, 5),
        ("a", "label_noise", 0.2, 7),
        ("b", "label_noise", 0.2, 7),
        ("c", "label_noise", 0.2, 8),
    ):
        model = init.copy()
        runs[key] = (
            train(model, data, method=method, flip_prob=p, steps=50, log_every=10, rng=seed),
            model.W,
        )
    assert np.array_equal(runs["gd"][1], runs["p0"][1])
    assert (
        np.array_equal(runs["a"][1], runs["b"][1]) and runs["a"][0].history == runs["b"][0].history
    )
    assert not np.array_equal(runs["a"][1], runs["c"][1])
    assert runs["a"][0].history["step"] == [0, 10, 20, 30, 40, 50]


def test_label_smoothing_gradient_is_the_expected_lngd_gradient():
    data = make_signal_noise_data(10, 15, rng=0)
    init = PatchCNN(15, 2, sigma0=0.3, rng=1)

    def first_step(method, seed):
        model = init.copy()
        train(model, data, method=method, flip_prob=0.2, lr=1.0, steps=1, rng=seed)
        return init.W - model.W  # = the gradient (lr = 1)

    smooth = first_step("label_smoothing", 0)
    mc = np.mean([first_step("label_noise", s) for s in range(3000)], axis=0)
    assert np.abs(mc - smooth).max() < 0.05 * np.abs(smooth).max()


def test_label_smoothing_stalls_at_the_margin_log_one_minus_p_over_p():
    # The trap: the expected loss has an interior minimum at y·f = log((1−p)/p) and stops there.
    data = make_signal_noise_data(20, 200, mu_norm=1.0, rng=0)
    model = PatchCNN(200, 5, rng=1)
    result = train(model, data, method="label_smoothing", flip_prob=0.1, steps=1500, log_every=500)
    np.testing.assert_allclose(data.y * model.forward(data.patches()), math.log(9), atol=1e-3)
    assert result.final["clean_loss"] == pytest.approx(-math.log(0.9), abs=1e-3)


def test_gd_memorises_noise_while_training_loss_vanishes():
    cfg = LNGDConfig(n=40, d=400, m=5, steps=600, n_test=200, log_every=200, methods=("gd",))
    gd = lngd_experiment(cfg)["gd"]
    assert gd.final["train_error"] == 0 and gd.final["clean_loss"] < 0.05
    assert gd.final["max_rho"] > 10 * gd.final["max_gamma"]  # ρ ≫ γ: noise, not signal, is learnt
    assert gd.final["test_error"] > 0.3


def test_non_finite_loss_warns_and_stops():
    data = make_signal_noise_data(10, 20, mu_norm=5.0, rng=0)
    with pytest.warns(RuntimeWarning, match="non-finite"):
        # flipped labels keep pushing the weights, so a huge lr overflows them within ~30 steps
        result = train(
            PatchCNN(20, 2, sigma0=1.0, rng=0),
            data,
            method="label_noise",
            flip_prob=0.3,
            lr=1e6,
            steps=300,
            rng=0,
        )
    assert result.stopped_early


# --- bad input -----------------------------------------------------------------------------------

_DATA = make_signal_noise_data(4, 6, rng=0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: train(PatchCNN(6, 2), _DATA, flip_prob=0.5), "flip_prob"),
        (lambda: train(PatchCNN(6, 2), _DATA, flip_prob=-0.1), "flip_prob"),
        (lambda: train(PatchCNN(6, 2), _DATA, lr=0.0), "lr"),
        (lambda: train(PatchCNN(6, 2), _DATA, steps=0), "steps"),
        (lambda: train(PatchCNN(6, 2), _DATA, method="sgd"), "method"),
        (lambda: train(PatchCNN(7, 2), _DATA), "d="),
        (lambda: make_signal_noise_data(4, 1), "d"),
        (lambda: make_signal_noise_data(0, 5), "n"),
        (lambda: make_signal_noise_data(4, 5, sigma_p=0.0), "sigma_p"),
        (lambda: make_signal_noise_data(4, 5, mu_norm=-1.0), "mu_norm"),
        (lambda: PatchCNN(6, 0), "m"),
        (lambda: PatchCNN(6, 2, sigma0=-0.1), "sigma0"),
        (lambda: PatchCNN(6, 2).forward(np.zeros((3, 2, 5))), "X"),
        (
            lambda: SignalNoiseData(
                np.array([0, 1]), np.zeros((2, 3)), np.zeros((2, 3)), np.ones(3), np.ones(2, bool)
            ),
            "y",
        ),
        (lambda: LNGDConfig(flip_prob=0.7), "flip_prob"),
        (lambda: LNGDConfig(methods=("adam",)), "methods"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_wrong_types_raise_type_error():
    with pytest.raises(TypeError, match="model"):
        train("net", _DATA)
    with pytest.raises(TypeError, match="n"):
        make_signal_noise_data(4.5, 10)


# --- reproduction --------------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    from eff_theory.reproduce.label_noise_gd import run

    result = run("quick", seed=0)
    assert result.error is None and result.passed and len(result.claims) == 10
    assert_expected_verdicts(result)  # checks pass; paper claims as expected
    assert any(c.kind == "paper" and c.headline for c in result.claims)
    assert result.paper_title and result.headline


def test_cli_prints_the_table_and_writes_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_theory.cli import app

    out = tmp_path / "l.json"
    args = [
        "label-noise-gd",
        "--n",
        "20",
        "--d",
        "50",
        "--m",
        "2",
        "--steps",
        "30",
        "--seeds",
        "0,1",
    ]
    result = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "LNGD" in result.output and "label smoothing" in result.output
    rows = json.loads(out.read_text())["rows"]
    assert [(r["method"], r["seed"]) for r in rows] == [
        (m, s) for s in (0, 1) for m in ("GD", "LNGD", "label smoothing")
    ]
    bad = CliRunner().invoke(app, [*args, "--flip-prob", "0.5"])
    assert bad.exit_code == 2 and "flip_prob" in bad.output
