"""Tests of eff_theory.heavy_rnn: the α-stable sampler, g*, the QR Lyapunov spectrum, dimensions."""

import math

import numpy as np
import pytest
from scipy import stats

from eff_shared.testing import assert_expected_verdicts
from eff_theory.heavy_rnn import (
    HeavyTailedRNN,
    kaplan_yorke_dimension,
    levy_weight_matrix,
    lyapunov_spectrum,
    max_lyapunov_exponent,
    participation_ratio,
    predicted_transition_gain,
    quenched_statistic,
    quenched_transition_gain,
    quiescent_instability_gain,
    sample_levy_stable,
    transition_gain_from_sweep,
)

# --- sampler ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.75, 1.0, 1.5, 2.0])
def test_sampler_has_the_stated_characteristic_function(alpha):
    # E cos(kZ) = exp(−|σk|^α) is the definition of L_α(σ); 2·10⁵ draws give a standard error < 0.002.
    z = sample_levy_stable(alpha, 200_000, scale=0.7, rng=3)
    for k in (0.5, 1.0, 2.0):
        assert np.mean(np.cos(k * z)) == pytest.approx(math.exp(-(abs(0.7 * k) ** alpha)), abs=0.01)


def test_sampler_matches_scipy_levy_stable_and_cauchy():
    ours = sample_levy_stable(1.5, 20_000, rng=0)
    ref = stats.levy_stable.rvs(1.5, 0.0, size=20_000, random_state=np.random.default_rng(1))
    assert stats.ks_2samp(ours, ref).pvalue > 1e-3
    assert stats.kstest(sample_levy_stable(1.0, 20_000, rng=2), "cauchy").pvalue > 1e-3
    gauss = sample_levy_stable(2.0, 100_000, scale=1.0, rng=4)
    assert np.var(gauss) == pytest.approx(2.0, rel=0.03)  # α = 2 is N(0, 2σ²)


def test_sampler_is_bit_reproducible_and_warns_for_small_alpha():
    assert np.array_equal(
        sample_levy_stable(1.3, 1000, rng=5), sample_levy_stable(1.3, 1000, rng=5)
    )
    assert not np.array_equal(
        sample_levy_stable(1.3, 1000, rng=5), sample_levy_stable(1.3, 1000, rng=6)
    )
    with pytest.warns(RuntimeWarning, match="0.5"):
        z = sample_levy_stable(0.3, 10_000, rng=0)
    assert np.all(np.isfinite(z)) and np.abs(z).max() <= 1e300


def test_weight_matrix_follows_the_sqrt2_convention():
    W = levy_weight_matrix(400, 2.0, 0.5, rng=0)
    assert W.shape == (400, 400)
    assert np.var(W) == pytest.approx(2 * 0.5**2 / 400, rel=0.02)  # variance 2g²/N


# --- predicted transition gain -----------------------------------------------------------------


def test_gaussian_gstar_is_one_over_sqrt2_and_heavy_tails_lower_it():
    assert predicted_transition_gain(2.0, 1000, n_samples=4000, rng=1) == pytest.approx(
        1 / math.sqrt(2), abs=0.005
    )
    g1, se = predicted_transition_gain(1.0, 500, n_samples=10_000, rng=1, return_stderr=True)
    assert g1 == pytest.approx(0.178, abs=0.006)  # the spec's prototype value
    assert 0 < se < 0.003
    small, large = (predicted_transition_gain(1.0, n, n_samples=3000, rng=2) for n in (100, 2000))
    assert small - large > 0.05  # g* → 0 logarithmically in N for α < 2


def test_gstar_is_where_the_annealed_linear_dynamics_switch():
    # Independent check of g* = exp(−E Ξ): redraw W every step (annealed) and measure the long-run
    # growth rate of ‖δx‖₂ at g = g*; it must vanish (spread over seeds ≈ 0.01 at 1500 steps).
    alpha, n, steps = 1.5, 100, 1500
    gstar = predicted_transition_gain(alpha, n, n_samples=10_000, rng=0)
    rng = np.random.default_rng(7)
    dx, log_growth = np.ones(n), 0.0
    for _ in range(steps):
        dx = levy_weight_matrix(n, alpha, gstar, rng=rng) @ dx
        norm = np.linalg.norm(dx)
        log_growth += math.log(norm)
        dx /= norm
    assert abs(log_growth / steps) < 0.04  # a g* off by 4 % would shift the rate by ±0.04


def test_gstar_asymptotic_warns_and_is_the_leading_order():
    with pytest.warns(UserWarning, match="far off"):
        g = predicted_transition_gain(1.0, 1000, method="asymptotic")
    assert g == pytest.approx(math.pi / (2 * math.log(1000)))  # (2 C_1 ln N)^{-1}, C_1 = 1/π


def test_gstar_is_reproducible():
    a = predicted_transition_gain(1.2, 300, n_samples=500, rng=9)
    assert a == predicted_transition_gain(1.2, 300, n_samples=500, rng=9)
    assert a != predicted_transition_gain(1.2, 300, n_samples=500, rng=10)


# --- Lyapunov spectrum -------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0])
def test_linear_regime_exponents_equal_log_eigenvalue_moduli(alpha):
    W = levy_weight_matrix(100, alpha, 1.0, rng=11)
    eig = np.linalg.eigvals(W)
    rho = np.abs(eig).max()
    g = 0.7 / rho  # x → 0, so J_t → gW and the exponents are ln|eig(gW)|
    exps = lyapunov_spectrum(W, g, n_steps=3000, warmup=500, k=6, rng=0)
    np.testing.assert_allclose(exps, np.sort(np.log(np.abs(g * eig)))[::-1][:6], atol=0.01)
    assert max_lyapunov_exponent(W, 0.8 / rho, n_steps=3000, warmup=500, rng=1) == pytest.approx(
        math.log(0.8), abs=0.01
    )


def test_mle_matches_finite_differences_along_the_same_trajectory():
    # Chaotic regime: the tangent map must be J_t = diag(1 − x_{t+1}²)·gW applied to Q (not Jᵀ, not
    # the Jacobian of the next step). Reference: propagate a tiny perturbation through the true map.
    n, g, warmup, steps = 50, 1.5, 100, 600
    W = levy_weight_matrix(n, 1.5, 1.0, rng=1)
    mle, traj = lyapunov_spectrum(
        W, g, n_steps=steps, warmup=warmup, k=1, rng=2, return_trajectory=True
    )
    eps, v, fd = 1e-7, np.eye(n)[0], 0.0
    for t in range(warmup, steps):
        x_t = traj[t - 1]
        diff = (np.tanh(g * W @ (x_t + eps * v)) - np.tanh(g * W @ x_t)) / eps
        fd += math.log(np.linalg.norm(diff))
        v = diff / np.linalg.norm(diff)
    fd /= steps - warmup
    assert mle[0] == pytest.approx(fd, abs=1e-5)
    # the published code's one-step-late Jacobian gives a measurably different value on this trajectory
    v, late = np.eye(n)[0], 0.0
    for t in range(warmup, steps - 1):
        v = (1 - traj[t + 1] ** 2) * (g * W @ v)
        late += math.log(np.linalg.norm(v))
        v /= np.linalg.norm(v)
    assert abs(late / (steps - warmup - 1) - fd) > 1e-3


def test_full_spectrum_sums_to_the_mean_log_determinant():
    n, g, warmup, steps = 30, 2.0, 50, 250
    W = levy_weight_matrix(n, 1.0, 1.0, rng=4)
    exps, traj = lyapunov_spectrum(
        W, g, n_steps=steps, warmup=warmup, rng=5, return_trajectory=True
    )
    assert exps.shape == (n,) and np.all(np.diff(exps) <= 0)
    logdet = np.linalg.slogdet(g * W)[1]
    ref = np.mean([np.sum(np.log(1 - traj[t] ** 2)) + logdet for t in range(warmup, steps)])
    # rel 1e-6: 1 − x² of saturated units loses digits in the reference (the library uses sech² of
    # the pre-activation); a Jacobian one step off would move the sum by ~1e-1.
    assert exps.sum() == pytest.approx(ref, rel=1e-6)


def test_k1_fast_path_equals_the_first_qr_exponent():
    W = levy_weight_matrix(40, 1.5, 1.0, rng=3)
    full = lyapunov_spectrum(W, 2.0, n_steps=300, warmup=100, k=3, rng=0)
    assert max_lyapunov_exponent(W, 2.0, n_steps=300, warmup=100, rng=0) == pytest.approx(
        full[0], abs=1e-10
    )


def test_batched_weights_and_gains_equal_single_runs():
    rng = np.random.default_rng(0)
    Ws = np.stack([levy_weight_matrix(30, 1.0, 1.0, rng=rng) for _ in range(2)])
    gains = np.array([0.5, 1.0, 2.0])
    x0 = np.linspace(-1, 1, 30)
    # short runs: at g = 2 the dynamics are chaotic and amplify GEMM-vs-GEMV rounding differences
    batched = lyapunov_spectrum(Ws, gains, n_steps=60, warmup=20, k=2, x0=x0)
    assert batched.shape == (2, 3, 2)
    for r in range(2):
        for j, g in enumerate(gains):
            single = lyapunov_spectrum(Ws[r], g, n_steps=60, warmup=20, k=2, x0=x0)
            np.testing.assert_allclose(batched[r, j], single, atol=1e-9)


def test_lyapunov_is_bit_reproducible_with_input_noise():
    W = levy_weight_matrix(40, 1.5, 1.0, rng=3)
    a = lyapunov_spectrum(W, 1.0, n_steps=200, warmup=100, k=4, input_std=0.1, rng=8)
    b = lyapunov_spectrum(W, 1.0, n_steps=200, warmup=100, k=4, input_std=0.1, rng=8)
    c = lyapunov_spectrum(W, 1.0, n_steps=200, warmup=100, k=4, input_std=0.1, rng=9)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


# --- network object, dimensions, sweep ---------------------------------------------------------


def test_rnn_step_jacobian_and_simulate():
    net = HeavyTailedRNN(20, 1.5, 1.2, rng=0)
    x = np.random.default_rng(1).standard_normal(20)
    x_next = net.step(x)
    num = np.empty((20, 20))
    for j in range(20):
        e = np.zeros(20)
        e[j] = 1e-6
        num[:, j] = (net.step(x + e) - net.step(x - e)) / 2e-6
    np.testing.assert_allclose(net.jacobian(x_next), num, atol=1e-7)
    states = net.simulate(50)
    assert states.shape == (50, 20) and np.all(np.abs(states) < 1)
    again = HeavyTailedRNN(20, 1.5, 1.2, rng=0).simulate(50)
    assert np.array_equal(states, again)
    noisy = HeavyTailedRNN(20, 1.5, 1.2, input_std=0.1, rng=0)
    assert not np.array_equal(noisy.simulate(50), states)


def test_quiescent_instability_gain_is_inverse_spectral_radius():
    assert quiescent_instability_gain(np.diag([2.0, -0.5])) == pytest.approx(0.5)
    stack = np.stack([np.diag([2.0, 1.0]), np.array([[0.0, 4.0], [-1.0, 0.0]])])  # eig ±2i
    np.testing.assert_allclose(quiescent_instability_gain(stack), [0.5, 0.5])


def test_quenched_statistics_by_hand():
    e = math.e
    g, se = quenched_statistic([1.0, e, e * e], "log_mean")
    assert g == pytest.approx(e) and se == pytest.approx(e / math.sqrt(3))  # sd(0, 1, 2) = 1
    g, se = quenched_statistic([1.0, 2.0, 3.0, 4.0, 100.0], "median")
    assert g == 3.0 and se > 0
    with pytest.raises(ValueError, match="statistic"):
        quenched_statistic([1.0, 2.0], "mean")
    with pytest.raises(ValueError, match="positive"):
        quenched_statistic([1.0, -2.0])


def test_quenched_log_mean_tracks_gstar_where_the_median_drifts_above_it():
    # g* is the annealed *mean* log growth: the quenched average of the log matches it at every α;
    # for α < 1 the median network is far more stable (ln ρ is right-skewed), at α = 1.5 it is not
    for alpha, median_gap in ((0.5, (0.15, 1.0)), (1.5, (-0.10, 0.10))):
        gstar = predicted_transition_gain(alpha, 100, n_samples=10_000, rng=1)
        logm, se = quenched_transition_gain(alpha, 100, n_networks=300, rng=2, return_stderr=True)
        med = quenched_transition_gain(alpha, 100, n_networks=300, statistic="median", rng=2)
        assert abs(logm - gstar) / gstar <= 0.10 and 0 < se < 0.1 * logm
        assert median_gap[0] <= (med - gstar) / gstar <= median_gap[1], (alpha, med, gstar)
    assert quenched_transition_gain(1.0, 50, n_networks=5, rng=3) == quenched_transition_gain(
        1.0, 50, n_networks=5, rng=3
    )
    with pytest.raises(ValueError, match="n_networks"):
        quenched_transition_gain(1.0, 50, n_networks=1)


def test_quenched_drift_and_its_full_mode_claims(monkeypatch):
    from eff_shared.reproduce import Result
    from eff_theory.reproduce import heavy_rnn as repro

    d = repro.quenched_drift(0, alphas=(0.5,), sizes=(40, 80), trials=12)
    assert set(d) == {(0.5, 40), (0.5, 80)}
    for v in d.values():
        assert v["median_rel"] == pytest.approx(v["median"] / v["gstar"] - 1)
        assert v["log_mean_rel"] == pytest.approx(v["log_mean"] / v["gstar"] - 1)
    fake = {
        (a, n): {"gstar": 1.0, "median": 1.3, "log_mean": 1.02, "median_rel": 0.3 if a < 1 else 0.05,
                 "log_mean_rel": -0.02 - 0.01 * (n == 800)}
        for a in repro.DRIFT_ALPHAS for n in repro.DRIFT_SIZES
    }  # fmt: skip
    monkeypatch.setattr(repro, "quenched_drift", lambda s, trials: fake)
    result = Result(name="t", mode="full", seed=0)
    repro._drift_claims(result, repro._MODES["full"], [0, 1, 2])
    assert len(result.claims) == 4 and all(c.modes == ("full",) for c in result.claims)
    med_claim, log_claim = result.claims[0], result.claims[2]
    assert "median 1/ρ(W)" in med_claim.text and med_claim.values == pytest.approx([0.3] * 3)
    # |mean over N| of the signed deviation: (−0.02 − 0.02 − 0.02 − 0.03) / 4
    assert "exp(E ln 1/ρ(W))" in log_claim.text and log_claim.values == pytest.approx([0.0225] * 3)
    series = result.series["quenched_estimator_drift_vs_n"]
    assert series["x"] == [100.0, 200.0, 400.0, 800.0]
    assert series["alpha=1.5 median"] == pytest.approx([0.05] * 4)
    assert len(result.table) == len(repro.DRIFT_ALPHAS)


@pytest.mark.parametrize(
    ("exps", "expected"),
    [
        ([1.0, -2.0], 1.5),
        ([-0.1, 0.5, 0.2, -1.0], 3 + 0.6 / 1.0),  # sorted: 0.5, 0.2, −0.1, −1; c = .5, .7, .6, −.4
        ([-0.1, -0.2], 0.0),
        ([0.3, 0.1], 2.0),
    ],
)
def test_kaplan_yorke_dimension(exps, expected):
    assert kaplan_yorke_dimension(exps) == pytest.approx(expected)


def test_participation_ratio_counts_effective_dimensions():
    rng = np.random.default_rng(0)
    scales = np.array([3.0, 2.0, 1.0, 0.5])
    states = rng.standard_normal((20_000, 4)) * scales
    lam = np.linalg.eigvalsh(np.cov(states, rowvar=False))
    assert participation_ratio(states) == pytest.approx(lam.sum() ** 2 / np.sum(lam**2))
    assert participation_ratio(
        np.outer(rng.standard_normal(100), [1.0, 2.0, 3.0])
    ) == pytest.approx(1.0)
    iso = rng.standard_normal((50_000, 10))
    assert participation_ratio(
        np.vstack([np.full((5, 10), 100.0), iso]), warmup=5
    ) == pytest.approx(10, rel=0.02)


def test_transition_gain_from_sweep_interpolates_in_log_gain():
    gains = np.array([0.2, 0.4, 0.8, 1.6])
    assert transition_gain_from_sweep(gains, np.log(gains / 0.5)) == pytest.approx(0.5)
    assert transition_gain_from_sweep(gains, [-1.0, 0.1, -0.2, 0.3]) == pytest.approx(
        math.exp(math.log(0.2) + (1 / 1.1) * math.log(2))
    )  # the first root
    assert math.isnan(transition_gain_from_sweep(gains, [-1.0, -0.5, -0.2, -0.1]))
    assert transition_gain_from_sweep(gains, [0.1, 0.2, 0.3, 0.4]) == 0.2


# --- bad input ----------------------------------------------------------------------------------

_W = np.eye(4) * 0.5


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: sample_levy_stable(0.0, 10), "alpha"),
        (lambda: sample_levy_stable(2.5, 10), "alpha"),
        (lambda: levy_weight_matrix(1, 1.0, 1.0), "n"),
        (lambda: levy_weight_matrix(10, 1.0, 0.0), "gain"),
        (lambda: levy_weight_matrix(10, 1.0, -1.0), "gain"),
        (lambda: predicted_transition_gain(1.0, 100, n_samples=1), "n_samples"),
        (lambda: predicted_transition_gain(1.0, 100, method="exact"), "method"),
        (lambda: lyapunov_spectrum(_W, k=0), "k"),
        (lambda: lyapunov_spectrum(_W, k=5), "k"),
        (lambda: lyapunov_spectrum(np.ones((3, 4))), "square"),
        (lambda: lyapunov_spectrum(np.full((3, 3), np.nan)), "finite"),
        (lambda: lyapunov_spectrum(_W, n_steps=10, warmup=10), "n_steps"),
        (lambda: lyapunov_spectrum(_W, n_steps=10, warmup=5, x0=[0, np.inf, 0, 0]), "x0"),
        (lambda: lyapunov_spectrum(_W, gain=0.0, n_steps=10, warmup=5), "gain"),
        (lambda: HeavyTailedRNN(10, 3.0, 1.0), "alpha"),
        (lambda: transition_gain_from_sweep([0.2, 0.1], [0.0, 1.0]), "increasing"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_non_numeric_alpha_raises_type_error():
    with pytest.raises(TypeError, match="alpha"):
        sample_levy_stable("1.5", 10)
    with pytest.raises(TypeError, match="alpha"):
        predicted_transition_gain(None, 100)


# --- reproduction --------------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    from eff_theory.reproduce.heavy_rnn import run

    result = run("quick", seed=0)
    assert result.error is None and result.passed and len(result.claims) == 20
    assert_expected_verdicts(result)  # checks pass; paper claims as expected
    assert any(c.kind == "paper" and c.headline for c in result.claims)
    assert result.paper_title and result.headline


def test_cli_prints_the_table_and_writes_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_theory.cli import app

    out = tmp_path / "h.json"
    args = ["heavy-rnn", "--alphas", "1,2", "--n", "40", "--trials", "1", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "g_c/g*" in result.output and "median 1/rho" in result.output
    payload = json.loads(out.read_text())
    assert [row["alpha"] for row in payload["rows"]] == [1.0, 2.0]
    assert len(payload["series"]["mean_mle"]["alpha=2.0"]) == 11
    bad = CliRunner().invoke(app, ["heavy-rnn", "--alphas", "2.5", "--n", "40", "--trials", "1"])
    assert bad.exit_code == 2 and "alpha" in bad.output


def test_annealed_mle_changes_sign_around_the_transition_and_is_seeded():
    from eff_theory.heavy_rnn import annealed_max_lyapunov_exponent as annealed

    kw = dict(n_steps=400, warmup=300)
    for alpha in (1.0, 2.0):
        below = annealed(60, alpha, 0.3, rng=1, **kw)
        above = annealed(60, alpha, 3.0, rng=1, **kw)
        assert below < 0 < above, (alpha, below, above)  # e.g. α = 1: −0.09 vs +0.05
    assert annealed(60, 1.5, 1.0, rng=4, **kw) == annealed(60, 1.5, 1.0, rng=4, **kw)
    assert annealed(60, 1.5, 1.0, rng=4, **kw) != annealed(60, 1.5, 1.0, rng=5, **kw)
    with pytest.raises(ValueError, match="n_steps must exceed warmup"):
        annealed(60, 1.5, 1.0, n_steps=10, warmup=10)
    with pytest.raises(ValueError, match="input_std"):
        annealed(60, 1.5, 1.0, input_std=-1.0)


def test_dimension_check_takes_the_input_noise_level():
    from eff_theory.reproduce.heavy_rnn import dimension_check

    kw = dict(n=40, trials=1, n_steps=120, warmup=60, seed=2)
    quiet = dimension_check(1.5, **kw)
    assert dimension_check(1.5, **kw, input_std=0.0) == quiet  # the default is autonomous
    driven = dimension_check(1.5, **kw, input_std=0.5)
    assert driven["pr"] != quiet["pr"]
    with pytest.raises(ValueError, match="input_std"):
        dimension_check(1.5, **kw, input_std=-0.1)
