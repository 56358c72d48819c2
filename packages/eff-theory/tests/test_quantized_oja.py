"""Tests of eff_theory.quantized_oja: stochastic-rounding grids and (batched) quantized Oja."""

import numpy as np
import pytest

from eff_shared.testing import assert_expected_verdicts
from eff_theory.quantized_oja import (
    LinearQuantizer,
    LogQuantizer,
    QuantizedOja,
    oja_learning_rate,
    optimal_log_grid_params,
    quantization_lower_bound,
    quantized_oja,
    sin2_error,
    spiked_covariance_stream,
    stochastic_round,
    success_boost,
)

QUANTIZERS = [
    LinearQuantizer(4),
    LinearQuantizer(8),
    LogQuantizer(6, dim=50),
    LogQuantizer(8, dim=500),
]


def _cell(grid, x):
    """The grid points ℓ ≤ x ≤ u around an in-range x."""
    i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(grid) - 2)
    return grid[i], grid[i + 1]


# --- quantizers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("q", QUANTIZERS, ids=repr)
def test_quantizer_is_unbiased_on_grid_and_within_one_gap(q):
    grid = q.grid()
    assert np.all(np.diff(grid) > 0)
    lo, hi = q.range
    xs = np.array([0.0, 0.3, -0.77, 1e-3, 0.999 * hi, 0.999 * lo, grid[3], grid[-5]])
    draws = q.quantize(np.repeat(xs[:, None], 100_000, axis=1), rng=0)
    assert np.all(np.isin(draws, grid))  # outputs on the grid
    for x, row in zip(xs, draws, strict=True):
        low, up = _cell(grid, x)
        assert np.all(
            (row == low) | (row == up)
        )  # |Q(x) − x| ≤ local gap: one of the two neighbours
        p = (x - low) / (up - low)
        se = (up - low) * np.sqrt(p * (1 - p) / row.size)
        # unbiased; a grid point is kept exactly (the slack covers the summation error of the mean)
        assert abs(row.mean() - x) <= 4 * se + 1e-12 * max(1.0, abs(x))


@pytest.mark.parametrize("q", QUANTIZERS, ids=repr)
def test_quantizer_saturates_outside_its_range(q):
    lo, hi = q.range
    out = q.quantize(np.array([10 * hi, 10 * lo, np.inf, -np.inf]), rng=1)
    np.testing.assert_array_equal(out, [hi, lo, hi, lo])


def test_linear_grid_is_delta_times_k():
    q = LinearQuantizer(8)
    assert q.resolution == 2.0**-6 and q.range == (-2.0, 2.0 - 2.0**-6)
    np.testing.assert_array_equal(q.grid(), 2.0**-6 * np.arange(-128, 128))


def test_log_grid_follows_the_recurrence_and_reaches_2():
    q = LogQuantizer(8, dim=100)
    pos = q.grid()[q.grid() >= 0]
    assert pos[0] == 0 and len(pos) == 2**7
    np.testing.assert_allclose(pos[1:], (1 + q.zeta) * pos[:-1] + q.delta0, rtol=1e-12)
    assert q.range[1] >= 2
    # values exactly on a level stay there (the closed-form index is corrected at the edges)
    assert np.array_equal(q.quantize(np.tile(pos, 50), rng=3), np.tile(pos, 50))


@pytest.mark.parametrize(("bits", "split"), [(6, (4, 2)), (8, (5, 3)), (10, (5, 5))])
@pytest.mark.parametrize("dim", [50, 500])
def test_log_grid_split_matches_the_brute_force_of_the_spec(bits, split, dim):
    zeta, delta0, beta_e, beta_m = optimal_log_grid_params(bits, dim)
    assert (beta_e, beta_m) == split
    assert zeta == 2.0**-beta_m and delta0 == 4 * 2.0 ** -(2 ** (beta_e - 1))


def test_lower_bounds_linear_grows_with_d_log_is_nearly_flat():
    assert quantization_lower_bound(500, 8) / quantization_lower_bound(50, 8) == pytest.approx(10)
    assert quantization_lower_bound(500, 8, "log") / quantization_lower_bound(50, 8, "log") < 1.01
    assert quantization_lower_bound(50, 10, "log") < quantization_lower_bound(50, 8, "log")


def test_stochastic_round_is_unbiased_and_checks_its_bracket():
    x = np.full(200_000, 0.25)
    out = stochastic_round(x, 0.0, 1.0, rng=0)
    assert set(np.unique(out)) == {0.0, 1.0} and out.mean() == pytest.approx(0.25, abs=4e-3)
    np.testing.assert_array_equal(stochastic_round([2.0], [2.0], [2.0]), [2.0])
    with pytest.raises(ValueError, match="lower <= x <= upper"):
        stochastic_round([1.5], [0.0], [1.0])


def test_quantizers_are_bit_reproducible():
    x = np.random.default_rng(0).standard_normal(1000)
    for q in QUANTIZERS:
        assert np.array_equal(q.quantize(x, rng=7), q.quantize(x, rng=7))
        assert not np.array_equal(q.quantize(x, rng=7), q.quantize(x, rng=8))


# speed (#25): the buffered kernels (``quantize``) against the reference kernels, bit for bit
FAST_QUANTIZERS = [
    *QUANTIZERS,
    LinearQuantizer(8, delta=0.3),  # not a power of two
    LogQuantizer(6, zeta=1.3, delta0=0.01),  # q_i + gap_i != q_{i+1}: the multiply-and-add branch
]


def _hard_inputs(q, size):
    """Normal draws at three scales, exact grid points, midpoints, the range, beyond it, ±0, ±inf."""
    gen = np.random.default_rng(5)
    grid = q.grid()
    hi = q.range[1]
    special = np.concatenate(
        [grid, (grid[1:] + grid[:-1]) / 2, np.nextafter(grid, np.inf), [0.0, -0.0, np.inf, -np.inf]]
    )
    special = np.concatenate([special, 3 * hi * np.array([1, -1]), hi * np.array([1, -1])])
    x = np.concatenate(
        [gen.standard_normal(size) * s for s in (1e-3 * hi, 0.1 * hi, 0.7 * hi)] + [special]
    )
    return gen.permutation(x)


@pytest.mark.parametrize("q", FAST_QUANTIZERS, ids=repr)
@pytest.mark.parametrize("size", [100, 3000, 40_000])  # small (reference), one and several blocks
def test_buffered_kernel_is_bit_identical_to_the_reference(q, size):
    x = _hard_inputs(q, size)
    g_fast, g_ref = np.random.default_rng(11), np.random.default_rng(11)
    fast, ref = q.quantize(x, g_fast), q._quantize_reference(x, g_ref)
    assert fast.dtype == ref.dtype == np.float64
    np.testing.assert_array_equal(fast, ref)
    assert np.array_equal(np.signbit(fast), np.signbit(ref))  # -0.0 stays -0.0
    assert g_fast.random() == g_ref.random()  # the same number of uniforms was drawn
    if isinstance(q, LogQuantizer):
        assert q._next_exact == (repr(q) != "LogQuantizer(bits=6, zeta=1.3, delta0=0.01)")


def _reference_step(original):
    def step(u, Xb, eta, q, gen, accumulate, on_zero):
        q = getattr(getattr(q, "__self__", None), "_quantize_reference", q)
        return original(u, Xb, eta, q, gen, accumulate, on_zero, fused=False)

    return step


@pytest.mark.parametrize("q", [LinearQuantizer(8), LogQuantizer(8, dim=100)], ids=repr)
@pytest.mark.parametrize("accumulate", ["update", "sum"])
def test_fused_batched_oja_is_bit_identical_to_the_reference(q, accumulate, monkeypatch):
    import eff_theory.quantized_oja as qo

    # 3 runs x 350 samples x 100 features per batch: above _FUSE_MIN, chunks of 327 rows = 1 + partial
    assert qo._FUSE_MIN < 3 * 350 * 100
    X = spiked_covariance_stream(2100, 100, n_trials=3, rng=4).X
    kw = dict(n_batches=6, learning_rate=0.3, quantizer=q, rng=9, accumulate=accumulate)
    calls = []
    fused = qo._fused_quantized_mean
    monkeypatch.setattr(qo, "_fused_quantized_mean", lambda *a: calls.append(1) or fused(*a))
    fast = quantized_oja(X, **kw)
    assert len(calls) == 6  # the fused path ran on every batch
    monkeypatch.setattr(qo, "_oja_step", _reference_step(qo._oja_step))
    ref = quantized_oja(X, **kw)
    np.testing.assert_array_equal(fast, ref)


def test_fused_mean_matches_the_whole_array_mean_with_ragged_chunks(monkeypatch):
    import eff_theory.quantized_oja as qo

    monkeypatch.setattr(qo, "_BLOCK", 7 * 13)  # 7 rows per chunk, B = 23: 3 full chunks + 2 rows
    gen = np.random.default_rng(2)
    Xb, w = gen.standard_normal((2, 23, 13)), gen.standard_normal((2, 13))
    proj = np.einsum("rbd,rd->rb", Xb, w)
    for q in (LinearQuantizer(6), LogQuantizer(6, dim=13)):
        got = qo._fused_quantized_mean(Xb, proj, q, np.random.default_rng(3))
        want = q._quantize_reference(Xb * proj[..., None], np.random.default_rng(3)).mean(axis=1)
        np.testing.assert_array_equal(got, want)


# --- Oja --------------------------------------------------------------------------------------


class _CountingIdentity:
    """Records every quantization call; returns the input unchanged."""

    def __init__(self):
        self.calls = []

    def quantize(self, x, rng=None):
        self.calls.append(np.shape(x))
        return np.array(x, dtype=float)


@pytest.mark.parametrize("accumulate", ["update", "sum"])
def test_three_quantizations_per_batched_step(accumulate):
    X = spiked_covariance_stream(60, 5, rng=0).X
    counter = _CountingIdentity()
    u = quantized_oja(
        X, n_batches=4, learning_rate=0.5, quantizer=counter, rng=1, accumulate=accumulate
    )
    # per step: the iterate (d), every per-sample update (batch × d), the step (d); then Q(u_b)
    assert counter.calls == [(1, 5), (1, 15, 5), (1, 5)] * 4 + [(1, 5)]
    np.testing.assert_array_equal(u, quantized_oja(X, n_batches=4, learning_rate=0.5, rng=1))


def test_full_precision_batched_oja_finds_the_top_eigenvector():
    stream = spiked_covariance_stream(3000, 20, rng=0)
    assert stream.eigengap == pytest.approx(0.75)
    u = quantized_oja(
        stream.X, n_batches=25, learning_rate=oja_learning_rate(3000, 25, 0.75), rng=1
    )
    assert sin2_error(u, stream.v1) < 0.01


def test_batching_cuts_the_quantization_error():
    # Theorem 2 vs 3: at few bits, batch-size-1 Oja accumulates n times more rounding noise.
    stream = spiked_covariance_stream(3000, 30, n_trials=4, rng=0)
    q = LinearQuantizer(7)
    errs = {}
    for b in (25, 3000):
        u = quantized_oja(
            stream.X,
            n_batches=b,
            learning_rate=oja_learning_rate(3000, b, 0.75),
            quantizer=q,
            rng=1,
        )
        errs[b] = float(np.mean(sin2_error(u, stream.v1)))
    assert errs[3000] > 3 * errs[25]


def test_vectorised_trials_equal_a_single_run():
    X = spiked_covariance_stream(200, 6, rng=0).X
    q = LogQuantizer(8, dim=6)
    single = quantized_oja(X, n_batches=10, learning_rate=0.5, quantizer=q, rng=4)
    stacked = quantized_oja(X[None], n_batches=10, learning_rate=0.5, quantizer=q, rng=4)
    assert np.array_equal(single, stacked[0])


def test_estimator_fit_partial_fit_and_transform():
    stream = spiked_covariance_stream(400, 8, rng=0)
    eta = oja_learning_rate(400, 10, 0.75)
    fitted = QuantizedOja(8, n_batches=10, eigengap=0.75, rng=3).fit(stream.X)
    assert fitted.learning_rate_ == pytest.approx(eta) and fitted.n_steps_ == 10
    streamed = QuantizedOja(8, learning_rate=eta, rng=3)
    for batch in np.split(stream.X, 10):
        streamed.partial_fit(batch)
    np.testing.assert_allclose(streamed.components_, fitted.components_, atol=1e-12)
    assert fitted.components_.shape == (1, 8) and np.linalg.norm(
        fitted.components_
    ) == pytest.approx(1)
    np.testing.assert_allclose(fitted.transform(stream.X), stream.X @ fitted.components_.T)
    direct = quantized_oja(stream.X, n_batches=10, learning_rate=eta, rng=3)
    np.testing.assert_allclose(fitted.components_[0], direct / np.linalg.norm(direct), atol=1e-12)


def test_estimator_and_function_are_bit_reproducible():
    X = spiked_covariance_stream(300, 10, rng=0).X
    q = LinearQuantizer(8)
    a = QuantizedOja(10, quantizer=q, n_batches=5, learning_rate=0.5, rng=2).fit(X).components_
    b = QuantizedOja(10, quantizer=q, n_batches=5, learning_rate=0.5, rng=2).fit(X).components_
    c = QuantizedOja(10, quantizer=q, n_batches=5, learning_rate=0.5, rng=3).fit(X).components_
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    s1, s2 = spiked_covariance_stream(5, 4, rng=1), spiked_covariance_stream(5, 4, rng=1)
    assert np.array_equal(s1.X, s2.X) and np.array_equal(s1.basis, s2.basis)


def test_zero_iterate_raises_or_is_kept_and_counted():
    X = spiked_covariance_stream(20, 4, rng=0).X
    coarse = LinearQuantizer(2, delta=100.0)  # grid {−200, −100, 0, 100}: unit vectors round to 0
    with pytest.raises(FloatingPointError, match="zero vector"):
        quantized_oja(X, n_batches=2, learning_rate=0.1, quantizer=coarse, rng=0)
    est = QuantizedOja(4, quantizer=coarse, learning_rate=0.1, on_zero="keep", rng=0).partial_fit(
        X[:10]
    )
    first = est.components_.copy()
    est.partial_fit(X[10:])
    assert est.n_zero_events_ >= 1 and np.all(np.isfinite(est.components_))
    if est.n_zero_events_ == 2:
        np.testing.assert_array_equal(est.components_, first)


def test_sin2_error():
    assert sin2_error([1.0, 0.0], [0.0, 2.0]) == pytest.approx(1.0)
    assert sin2_error([1.0, 1.0], [-3.0, -3.0]) == pytest.approx(0.0)
    assert sin2_error([1.0, 0.0], [1.0, 1.0]) == pytest.approx(0.5)


def test_success_boost_returns_an_estimate_of_the_majority():
    rng = np.random.default_rng(0)
    truth = np.eye(20)[0]
    good = truth + 0.01 * rng.standard_normal((7, 20))
    bad = rng.standard_normal((4, 20))
    chosen = success_boost(np.vstack([bad[:2], good, bad[2:]]), 0.01, rng=1)
    assert chosen is not None and sin2_error(chosen, truth) < 0.01
    assert success_boost(rng.standard_normal((6, 20)), 0.01, rng=1) is None


# --- bad input -----------------------------------------------------------------------------------

_X = spiked_covariance_stream(50, 4, rng=0).X


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: LinearQuantizer(1), "bits"),
        (lambda: LogQuantizer(1, dim=10), "bits"),
        (lambda: LogQuantizer(8), "dim"),
        (lambda: LogQuantizer(8, zeta=0.1), "delta0"),
        (lambda: quantized_oja(_X, n_batches=0, learning_rate=0.1), "n_batches"),
        (lambda: quantized_oja(_X, n_batches=51, learning_rate=0.1), "n_batches"),
        (lambda: quantized_oja(_X, n_batches=5, learning_rate=0.0), "learning_rate"),
        (lambda: quantized_oja(_X[0], n_batches=1, learning_rate=0.1), "X"),
        (
            lambda: quantized_oja(np.where(_X > 1, np.nan, _X), n_batches=5, learning_rate=0.1),
            "finite",
        ),
        (
            lambda: quantized_oja(_X, n_batches=5, learning_rate=0.1, accumulate="mean"),
            "accumulate",
        ),
        (lambda: QuantizedOja(4, eigengap=0.0), "eigengap"),
        (lambda: QuantizedOja(4, learning_rate=-1.0), "learning_rate"),
        (lambda: QuantizedOja(4, eigengap=0.5).fit(_X[None]), "2-D"),
        (lambda: QuantizedOja(5, eigengap=0.5).fit(_X), "features"),
        (lambda: QuantizedOja(4, n_batches=60, eigengap=0.5).fit(_X), "n_batches"),
        (lambda: QuantizedOja(4).fit(_X), "learning_rate or eigengap"),
        (lambda: QuantizedOja(4, eigengap=0.5).partial_fit(_X), "learning_rate"),
        (lambda: success_boost(_X[:5], 0.01, bits=3), "bits"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_quantizer_type_raises_type_error():
    with pytest.raises(TypeError, match="quantizer"):
        quantized_oja(_X, n_batches=5, learning_rate=0.1, quantizer="8bit")
    with pytest.raises(TypeError, match="bits"):
        LinearQuantizer(8.0)


def test_components_before_fit_raise():
    with pytest.raises(AttributeError, match="not fitted"):
        QuantizedOja(4, learning_rate=0.1).components_  # noqa: B018


# --- reproduction --------------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    from eff_theory.reproduce.quantized_oja import run

    result = run("quick", seed=0)
    assert result.error is None and result.passed and len(result.claims) == 12
    assert_expected_verdicts(result)  # checks pass; paper claims as expected
    assert any(c.kind == "paper" and c.headline for c in result.claims)
    assert result.paper_title and result.headline


def test_cli_prints_the_table_and_writes_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_theory.cli import app

    out = tmp_path / "q.json"
    args = ["quantized-oja", "--dims", "8", "--bits", "6,10", "--n", "200", "--batches", "5"]
    result = CliRunner().invoke(app, [*args, "--trials", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "batched NLQ" in result.output and "standard LQ" in result.output
    payload = json.loads(out.read_text())
    assert len(payload["rows"]) == 6 and set(payload["rows"][0]) == {
        "d",
        "variant",
        "6 bits",
        "10 bits",
    }
    bad = CliRunner().invoke(app, [*args, "--bits", "x"])
    assert bad.exit_code == 2 and "--bits" in bad.output


def test_sweep_spectrum_decay_is_a_parameter():
    from eff_theory.reproduce.quantized_oja import sweep

    kw = dict(dims=(20,), bits=(8,), n=400, n_batches=10, trials=2, chunk=2, seed=1)
    paper = sweep(**kw)
    assert sweep(**kw, decay=2.0) == paper  # the default is the paper's decay
    flat = sweep(**kw, decay=1.0)
    assert set(flat) == set(paper)
    # a flatter spectrum (smaller gap 1/2 instead of 3/4) is harder for full-precision Oja
    full = [k for k in paper if k[2] is None]
    assert all(0 <= flat[k] <= 1 for k in flat)
    assert np.mean([flat[k] for k in full]) > np.mean([paper[k] for k in full])
    with pytest.raises(ValueError, match="decay"):
        sweep(**kw, decay=0.0)


def test_flat_spectrum_outlier_comes_from_a_step_size_set_for_the_wrong_gap():
    """Issue: at λ_i = 1/i, d = 500, one batched 10-bit linear-grid run of ten ended far from v₁
    (sin² 0.16 while the 12-bit run reached 0.02) — error not monotone in bits. Cause: η set with
    the paper's gap 0.75 (decay 2) instead of this spectrum's 0.5, i.e. 1.5× too small. From an
    unlucky start (u₀·v₁ ≈ 0) v₂ grows first and v₁ must overtake it at (1+ηλ₁)/(1+ηλ₂) per step;
    unbiased rounding noise re-draws the tiny v₁ component early on, so with the smaller η some runs
    end mid-overtake. With η from the true gap every run converges at 10 and 12 bits."""
    from eff_shared.seeding import make_rng

    n, b, d, seed = 5000, 25, 500, 5
    first = spiked_covariance_stream(1, d, decay=1.0, rng=make_rng(seed, 0, d))
    X = spiked_covariance_stream(
        n, d, decay=1.0, n_trials=10, basis=first.basis, rng=make_rng(seed, 2, d, 0)
    ).X
    assert first.eigengap == pytest.approx(0.5)

    def worst(gap, bits):
        q = None if bits is None else LinearQuantizer(bits)
        u = quantized_oja(X, n_batches=b, learning_rate=oja_learning_rate(n, b, gap),
                          quantizer=q, rng=make_rng(seed, 1, d, 0), on_zero="keep")  # fmt: skip
        return max(float(sin2_error(u[i], first.basis[:, 0])) for i in range(10))

    assert worst(0.75, 10) > 0.1  # the reported outlier, with the wrong gap
    for bits in (10, 12, None):
        assert worst(first.eigengap, bits) < 0.05, bits


@pytest.mark.parametrize(
    "q",
    [
        LogQuantizer(8, dim=500),
        LogQuantizer(16, dim=50),
        LogQuantizer(6, zeta=1.3, delta0=0.01),
        LogQuantizer(12, zeta=1e-4, delta0=1e-6),
    ],
    ids=repr,
)
def test_compiled_cell_lookup_steps_where_the_reference_index_steps(q):
    """The kernels read the log grid's cell from thresholds found on the reference's own numpy
    expression: the reference index is k at thr[k] and k − 1 one float below, for every k."""
    from eff_theory import _rounding

    thr = q._kernel_args[3]
    k = np.arange(1, q.n_levels)
    assert thr[0] == 0 and thr[-1] == np.inf and np.all(np.diff(thr) > 0)
    np.testing.assert_array_equal(q._cell_index(thr[1:-1].copy()), k)
    np.testing.assert_array_equal(q._cell_index(np.nextafter(thr[1:-1], 0)), k - 1)
    # the compiled rounding agrees with the reference right at and just below every step
    x = np.concatenate([thr[1:-1], np.nextafter(thr[1:-1], 0), -thr[1:-1]])
    out = np.empty_like(x)
    u = np.random.default_rng(0).random(x.size)
    _rounding.log_round(x, u, *q._kernel_args, out)
    np.testing.assert_array_equal(out, q._quantize_block(x, _FixedUniforms(u)))


class _FixedUniforms:
    """A generator stand-in that hands out the given uniforms (the reference draws one per element)."""

    def __init__(self, u):
        self.u = u

    def random(self, shape):
        assert np.prod(shape) == self.u.size
        return self.u.reshape(shape)


@pytest.mark.parametrize("q", [LinearQuantizer(8), LogQuantizer(8, dim=50)], ids=repr)
def test_quantize_rejects_nan_and_saturates_inf(q):
    x = np.array([0.3, np.nan, -0.2])
    with pytest.raises(ValueError, match="NaN"):
        q.quantize(x, 0)
    lo, hi = q.range
    np.testing.assert_array_equal(q.quantize(np.array([np.inf, -np.inf]), 0), [hi, lo])
