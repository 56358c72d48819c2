"""Tests of eff_theory.spam_select: truncation levels, χ² calibration, the exact simulator, the
selectors' guarantees, the regression front-end and bad input."""

import math

import numpy as np
import pytest
from scipy import stats

from eff_shared.testing import assert_expected_verdicts
from eff_theory.spam_select import (
    SpAMSelector,
    cosine_coefficients,
    cosine_design_coefficients,
    fdr_fnr,
    minimax_separation_rate,
    simulate_sequence_model,
    spam_select,
    truncation_level,
    wrong_recovery,
)

SIGMA2 = 1 / 300


def brute_level(mu, sigma2, L, kind):
    k = 1
    while mu(k) > sigma2 * (math.sqrt(k) if kind == "sqrt" else k) * L:
        k += 1
    return k


def test_truncation_levels_match_the_definitions_and_the_spec_values():
    p, s = 10_000, 5
    sobolev = lambda k: 1.0 / k  # noqa: E731
    cases = {
        "K'": (math.log(p), "sqrt", 11),
        "K": (math.log(p / s), "sqrt", 12),
        "K_u": (1.0, "sqrt", 45),
        "K_e": (1.0, "linear", 18),
    }
    for name, (L, kind, spec_value) in cases.items():
        level = truncation_level(None, SIGMA2, L, kind=kind)
        assert level == brute_level(sobolev, SIGMA2, L, kind) == spec_value, name
    # A sequence μ and a callable μ agree with the Sobolev default.
    mu_seq = 1.0 / np.arange(1, 200)
    assert truncation_level(mu_seq, SIGMA2, math.log(p)) == 11
    assert truncation_level(lambda k: k**-2.0, SIGMA2, math.log(p), smoothness=1.0) == brute_level(
        lambda k: k**-2.0, SIGMA2, math.log(p), "sqrt"
    )


def test_selector_plans_use_the_papers_thresholds():
    p = 10_000
    ks, taus = SpAMSelector("recovery", sigma2=SIGMA2).plan(p)
    L = math.log(2 * p / 0.1)
    assert ks == [11] and taus[0] == pytest.approx(11 + 2 * math.sqrt(11 * L) + 2 * L)
    ks, taus = SpAMSelector("testing", sigma2=SIGMA2, sparsity=5).plan(p)
    L = math.log(p / (5 * 0.1))
    assert ks == [12] and taus[0] == pytest.approx(12 + 2 * math.sqrt(5 * 12 * L) + 10 * L)
    _, taus_lm = SpAMSelector("testing", sigma2=SIGMA2, sparsity=5, threshold="lm").plan(p)
    assert taus_lm[0] == pytest.approx(12 + 2 * math.sqrt(12 * L) + 2 * L) and taus_lm[0] < taus[0]
    ks, taus = SpAMSelector("adaptive", sigma2=SIGMA2).plan(p)
    assert ks == [2**j for j in range(1, 20)]  # 2^19 = K_max for σ² = 1/300, p = 1e4
    L = math.log(8 * p * math.log(300) / 0.1)
    np.testing.assert_allclose(taus, np.array(ks) + 2 * np.sqrt(np.array(ks) * L) + 2 * L)


def test_fit_on_coefficients_computes_truncated_energy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 7)) * 0.1
    X[:, 3] += 1.0
    sel = SpAMSelector("recovery", sigma2=0.01, truncation=5).fit(X)
    np.testing.assert_allclose(sel.statistics_[0], (X[:5] ** 2).sum(axis=0) / 0.01)
    assert sel.truncation_ == 5 and sel.n_coefficients_used_ == 5
    assert sel.support_.tolist() == [False, False, False, True, False, False, False]
    assert sel.selected_.tolist() == [3]


def test_null_false_selection_rate_at_most_half_delta_on_explicit_gaussians():
    # Global null with explicit N(0, σ²) coefficients (not the simulator): P(Ŝ ≠ ∅) ≤ δ/2 for (11)
    # and (13). A threshold without the 2L term would select something in ~40% of the runs.
    p, reps, delta = 1000, 300, 0.1
    rng = np.random.default_rng(1)
    recovery = SpAMSelector("recovery", sigma2=SIGMA2, delta=delta)
    adaptive = SpAMSelector("adaptive", sigma2=SIGMA2, delta=delta, k_max=64)
    any_rec = any_ad = 0
    for _ in range(reps):
        coefs = math.sqrt(SIGMA2) * rng.standard_normal((64, p))
        any_rec += recovery.fit(coefs).support_.any()
        any_ad += adaptive.fit(coefs).support_.any()
    assert any_rec / reps <= delta / 2
    assert any_ad / reps <= delta / 2
    # The bound is tight enough to bite: at δ = 1 the per-coordinate level e^{-L} = 1/(2p) gives
    # a family-wise rate well above zero.
    loose = SpAMSelector("recovery", sigma2=SIGMA2, delta=0.999, truncation=13)
    hits = sum(
        loose.fit(math.sqrt(SIGMA2) * rng.standard_normal((13, p))).support_.any()
        for _ in range(200)
    )
    assert 0 < hits / 200 <= 0.5


def test_null_statistics_of_the_simulator_are_chi_squared():
    ks = [3, 11, 4096, 2**15]
    T = np.concatenate(
        [simulate_sequence_model(500, 0, 0.0, SIGMA2, ks=ks, rng=r).statistics for r in range(4)],
        axis=1,
    )
    for m, k in enumerate(ks):
        assert stats.kstest(T[m], stats.chi2(k).cdf).pvalue > 1e-3, k


def test_signal_statistics_match_explicit_gaussians():
    # The χ²-increment simulator vs the plain sequence model, on one signal coordinate.
    a, k_small, k_big = 0.7, 11, 6000  # k_big > 4096 exercises the non-central tail increment
    theta = a * cosine_coefficients(lambda x: np.sin(2 * np.pi * x), k_big)
    rng = np.random.default_rng(2)
    sims = np.array(
        [
            simulate_sequence_model(1, 1, a, SIGMA2, ks=[k_small, k_big], rng=rng).statistics[:, 0]
            for _ in range(1500)
        ]
    )
    explicit = theta + math.sqrt(SIGMA2) * rng.standard_normal((1500, k_big))
    energy = np.cumsum(explicit**2, axis=1) / SIGMA2
    for col, k in enumerate((k_small, k_big)):
        assert stats.ks_2samp(sims[:, col], energy[:, k - 1]).pvalue > 1e-3
        mean = k + (theta[:k] ** 2).sum() / SIGMA2
        assert sims[:, col].mean() == pytest.approx(mean, rel=0.02)


def test_simulator_and_risk_helpers_are_bit_reproducible():
    ks = [2, 11, 2**19]
    one = simulate_sequence_model(200, 5, 0.7, SIGMA2, ks=ks, rng=7)
    two = simulate_sequence_model(200, 5, 0.7, SIGMA2, ks=ks, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(one.statistics, two.statistics)
    other = simulate_sequence_model(200, 5, 0.7, SIGMA2, ks=ks, rng=8)
    assert not np.array_equal(one.statistics, other.statistics)
    assert one.support.sum() == 5 and one.ks == ks


def test_cosine_coefficients_against_closed_forms():
    theta = cosine_coefficients(lambda x: np.cos(2 * np.pi * x), 6)
    np.testing.assert_allclose(theta, [0, 1 / math.sqrt(2), 0, 0, 0, 0], atol=1e-12)
    i = np.arange(1, 41)
    lin = cosine_coefficients(lambda x: 2 * x - 1, 40)
    expected = np.where(i % 2 == 1, -4 * math.sqrt(2) / (math.pi**2 * i**2), 0.0)
    np.testing.assert_allclose(lin, expected, atol=1e-9)
    # f is centred before projecting: a constant adds nothing.
    np.testing.assert_allclose(cosine_coefficients(lambda x: 2 * x + 5, 40), lin, atol=1e-12)


def test_recurrence_coefficients_equal_direct_cosines():
    rng = np.random.default_rng(3)
    X = rng.random((300, 4))
    y = rng.normal(size=300)
    C = cosine_design_coefficients(X, y, 25)
    i = np.arange(1, 26)
    direct = np.stack(
        [
            ((y - y.mean())[:, None] * math.sqrt(2) * np.cos(np.pi * np.outer(X[:, j], i))).mean(0)
            for j in range(4)
        ],
        axis=1,
    )
    np.testing.assert_allclose(C, direct, atol=1e-10)


def test_recovery_is_exact_above_the_rate_and_estimation_truncation_is_worse():
    # Theorem 7 at the mechanism level: at a = 0.7, p = 1e4 the K_e-truncated selector misses more.
    p, reps = 10_000, 60
    rec = SpAMSelector("recovery", sigma2=SIGMA2)
    sub = SpAMSelector("recovery", sigma2=SIGMA2, truncation="estimation")
    ks = [11, 18]
    rng = np.random.default_rng(4)
    wrong = {"rec_strong": 0, "rec": 0, "sub": 0}
    for _ in range(reps):
        strong = simulate_sequence_model(p, 5, 1.5, SIGMA2, ks=ks, rng=rng)
        wrong["rec_strong"] += wrong_recovery(
            rec.fit_statistics(strong.statistics, ks).support_, strong.support
        )
        mid = simulate_sequence_model(p, 5, 0.7, SIGMA2, ks=ks, rng=rng)
        wrong["rec"] += wrong_recovery(rec.fit_statistics(mid.statistics, ks).support_, mid.support)
        wrong["sub"] += wrong_recovery(sub.fit_statistics(mid.statistics, ks).support_, mid.support)
    assert wrong["rec_strong"] == 0
    assert wrong["sub"] > wrong["rec"]


def test_minimax_rate_scales_like_the_sobolev_formula():
    # Recovery rate σ^{8α/(4α+1)} (log p)^{2α/(4α+1)} for α = 1/2 when log p ≲ σ^{-2/(2α+1)}.
    p, alpha = 1000, 0.5
    ratios = []
    for sigma2 in (1e-3, 1e-4, 1e-5, 1e-6):
        sigma = math.sqrt(sigma2)
        formula = sigma ** (8 * alpha / (4 * alpha + 1)) * math.log(p) ** (
            2 * alpha / (4 * alpha + 1)
        )
        ratios.append(minimax_separation_rate(sigma2, p) / formula)
    assert max(ratios) / min(ratios) < 1.5
    assert minimax_separation_rate(SIGMA2, p, 5, kind="testing") < minimax_separation_rate(
        SIGMA2, p
    )


def test_fdr_fnr_and_wrong_recovery():
    truth = np.array([1, 1, 0, 0, 0], dtype=bool)
    sel = np.array([1, 0, 1, 1, 0], dtype=bool)
    fdr, fnr = fdr_fnr(sel, truth)
    assert fdr == pytest.approx(2 / 3) and fnr == pytest.approx(1 / 2)
    assert fdr_fnr(np.zeros(5, bool), truth) == (0.0, 1.0)
    assert wrong_recovery(sel, truth) and not wrong_recovery(truth, truth)
    batch = np.stack([sel, truth])
    np.testing.assert_array_equal(wrong_recovery(batch, truth), [True, False])


def test_regression_front_end_selects_the_active_covariates():
    rng = np.random.default_rng(5)
    N, p = 2000, 40
    X = rng.random((N, p))
    y = 1.5 * np.sin(2 * np.pi * X[:, 3]) + 2.0 * (X[:, 17] - 0.5) ** 2 * 12 + rng.normal(0, 0.5, N)
    for mode in ("recovery", "adaptive"):
        res = spam_select(X, y, mode=mode)
        assert res.selected.tolist() == [3, 17], mode
    null = spam_select(X, rng.normal(size=N), mode="recovery")
    assert null.selected.size == 0
    scaled = spam_select(3 * X - 1, y, mode="recovery", rescale=True)
    assert scaled.selected.tolist() == [3, 17]


def test_adaptive_truncation_warns_and_keeps_the_available_levels():
    coefs = math.sqrt(SIGMA2) * np.random.default_rng(6).standard_normal((100, 50))
    with pytest.warns(UserWarning, match="truncating K_rec at 64"):
        sel = SpAMSelector("adaptive", sigma2=SIGMA2).fit(coefs)
    assert sel.truncation_ == [2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma2": 0.0}, "sigma2"),
        ({"sigma2": -1.0}, "sigma2"),
        ({"sigma2": SIGMA2, "delta": 0.0}, "delta"),
        ({"sigma2": SIGMA2, "delta": 1.0}, "delta"),
        ({"sigma2": SIGMA2, "smoothness": 0.0}, "smoothness"),
        ({"sigma2": SIGMA2, "mode": "lasso"}, "mode"),
        ({"sigma2": SIGMA2, "mode": "testing"}, "sparsity"),
        ({"sigma2": SIGMA2, "threshold": "bh"}, "threshold"),
        ({"sigma2": SIGMA2, "truncation": "oracle"}, "truncation"),
        ({"sigma2": SIGMA2, "mu": [1.0, 2.0]}, "non-increasing"),
        ({"sigma2": 0.5, "mode": "adaptive"}, "sigma2"),
    ],
)
def test_selector_rejects_bad_configuration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SpAMSelector(**kwargs)


def test_bad_input_to_fit_and_front_end():
    sel = SpAMSelector("recovery", sigma2=SIGMA2)
    with pytest.raises(ValueError, match="K=11"):
        sel.fit(np.zeros((5, 10_000)))
    bad = np.zeros((20, 100))
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        sel.fit(bad)
    with pytest.raises(ValueError, match=r"sparsity must lie in \[1, p\)"):
        SpAMSelector("testing", sigma2=SIGMA2, sparsity=100).fit(np.zeros((20, 100)))
    X = np.random.default_rng(0).random((50, 3))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        spam_select(X + 1, np.zeros(50))
    with pytest.raises(ValueError, match="len\\(y\\)"):
        spam_select(X, np.zeros(49))
    with pytest.raises(ValueError, match="finite"):
        spam_select(X, np.full(50, np.inf))
    with pytest.raises(ValueError, match="s="):
        simulate_sequence_model(100, 6, 0.5, SIGMA2, ks=[11], rng=0)
    with pytest.raises(ValueError, match="sigma2"):
        simulate_sequence_model(100, 5, 0.5, 0.0, ks=[11], rng=0)


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    from eff_theory.reproduce.spam_select import run

    result = run("quick", seed=0)
    assert result.error is None and result.passed and len(result.claims) == 12
    assert_expected_verdicts(result)  # checks pass; paper claims as expected
    assert any(c.kind == "paper" and c.headline for c in result.claims)
    assert result.paper_title and result.headline


def test_cli_prints_table_and_writes_json_and_plot(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_theory.cli import app

    out, png = tmp_path / "spam.json", tmp_path / "spam.png"
    args = ["spam-select", "--p", "100", "--a", "0.7,1.5", "--reps", "5", "--json", str(out)]
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # the default install has no `plot` extra
        no_plot = CliRunner().invoke(app, [*args, "--plot", str(png)])
        assert no_plot.exit_code == 2 and "matplotlib" in no_plot.output
        result = CliRunner().invoke(app, args)
    else:
        result = CliRunner().invoke(app, [*args, "--plot", str(png)])
        assert png.exists()
    assert result.exit_code == 0, result.output
    assert "recovery" in result.output and "FDR+FNR" in result.output
    payload = json.loads(out.read_text())
    assert {r["selector"] for r in payload["rows"]} == {"recovery", "adaptive", "suboptimal"}
    assert len(payload["rows"]) == 6 and payload["params"]["reps"] == 5
    bad = CliRunner().invoke(app, ["spam-select", "--p", "100", "--reps", "2", "--delta", "1.5"])
    assert bad.exit_code == 2 and "delta" in bad.output
