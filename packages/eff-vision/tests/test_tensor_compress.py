import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from eff_vision.tensor_compress import (
    compress_model,
    cp_als_sigma,
    cp_rank_for_ratio,
    cp_to_weight,
    decompose_conv,
    frobenius_error,
    input_covariance,
    sigma_error,
    sqrt_sigma,
    tucker2_als_sigma,
    tucker2_rank_for_ratio,
    tucker2_rank_search,
    tucker2_to_weight,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _noisy_tucker(o, i, r, noise, seed=0):
    g = _gen(seed)
    core = torch.randn(r, r, 3, 3, generator=g, dtype=torch.float64)
    u_o = torch.linalg.qr(torch.randn(o, r, generator=g, dtype=torch.float64))[0]
    u_i = torch.linalg.qr(torch.randn(i, r, generator=g, dtype=torch.float64))[0]
    w = tucker2_to_weight(core, [u_o, u_i])
    return w + noise * w.std() * torch.randn(w.shape, generator=g, dtype=torch.float64)


def _conv(o=10, i=6, k=3, seed=0, **kw):
    conv = nn.Conv2d(i, o, k, **kw).double()
    g = _gen(seed)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=g, dtype=torch.float64))
        if conv.bias is not None:
            conv.bias.copy_(torch.randn(o, generator=g, dtype=torch.float64))
    return conv


def _correlated_patches(d, n=400, seed=0):
    g = _gen(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    mix = torch.randn(d, d, generator=g, dtype=torch.float64) * torch.logspace(0, -3, d)
    return x @ mix


@pytest.mark.parametrize(
    "kw", [dict(padding=1), dict(stride=2, padding=2, dilation=2), dict(padding=1, bias=False)]
)
def test_tucker2_at_full_rank_equals_the_dense_layer(kw):
    conv = _conv(**kw)
    seq = decompose_conv(conv, "tucker2", rank=(10, 6))
    x = torch.randn(2, 6, 9, 11, generator=_gen(1), dtype=torch.float64)
    with torch.no_grad():
        ref, out = conv(x), seq(x)
    assert out.shape == ref.shape
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


def test_factorised_layers_reproduce_the_reconstructed_conv_float32_and_circular():
    conv = _conv(padding=1, padding_mode="circular").float()
    x = torch.randn(2, 6, 7, 7, generator=_gen(2))
    for method, rank in (("tucker2", (3, 2)), ("cp", 4)):
        seq = decompose_conv(conv, method, rank=rank, n_iter_max=10)
        assert seq[1].padding_mode == "circular" and seq[2].bias is not None
        with torch.no_grad():
            ref = F.conv2d(
                F.pad(x, (1, 1, 1, 1), mode="circular"), seq.reconstructed_weight, conv.bias
            )
            assert float((seq(x) - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    assert seq[1].groups == 4  # CP: depthwise spatial conv


def test_frobenius_tucker2_matches_tensorly_partial_tucker():
    tl_tucker = pytest.importorskip("tensorly.decomposition")
    w = _noisy_tucker(24, 12, 5, 0.3)
    core, factors = tucker2_als_sigma(w, (5, 5), None, n_iter_max=500, tol=0.0)
    (tl_core, tl_factors), _ = tl_tucker.partial_tucker(
        w.numpy(), rank=[5, 5], modes=[0, 1], init="svd", n_iter_max=500, tol=1e-14
    )
    ref = tucker2_to_weight(torch.tensor(tl_core), [torch.tensor(f) for f in tl_factors])
    ours = tucker2_to_weight(core, factors)
    assert float((ours - ref).norm() / ref.norm()) <= 1e-6


def test_frobenius_cp_from_tensorlys_solution_stays_there():
    tl = pytest.importorskip("tensorly")
    from tensorly.decomposition import parafac

    g = _gen(3)
    a, b, c = (torch.randn(d, 5, generator=g, dtype=torch.float64) for d in (20, 12, 9))
    w = cp_to_weight(torch.ones(5, dtype=torch.float64), [a, b, c], (3, 3))
    w = w + 0.05 * w.std() * torch.randn(w.shape, generator=g, dtype=torch.float64)
    cpt = parafac(w.numpy().reshape(20, 12, 9), rank=5, init="svd", n_iter_max=2000, tol=1e-14)
    ref = torch.tensor(tl.cp_to_tensor(cpt)).reshape(w.shape)
    init = (torch.tensor(cpt[0]), [torch.tensor(f) for f in cpt[1]])
    lam, factors = cp_als_sigma(w, 5, None, n_iter_max=100, tol=0.0, init=init)
    assert float((cp_to_weight(lam, factors, (3, 3)) - ref).norm() / ref.norm()) <= 1e-6
    # and from its own SVD init it finds the same optimum on this well-posed tensor
    lam, factors = cp_als_sigma(w, 5, None, n_iter_max=500, tol=0.0)
    assert float((cp_to_weight(lam, factors, (3, 3)) - ref).norm() / ref.norm()) <= 1e-5


@pytest.mark.parametrize("method", ["tucker2", "cp"])
def test_sigma_als_is_monotone_and_beats_frobenius_in_the_sigma_norm(method):
    w = _noisy_tucker(16, 8, 6, 0.5, seed=4)
    sigma = torch.cov(_correlated_patches(72, seed=5).T)
    if method == "tucker2":
        frob = tucker2_als_sigma(w, (4, 4), None)
        out, trace = tucker2_als_sigma(w, (4, 4), sigma, 50, init=frob, return_trace=True)
        approx_f, approx_s = tucker2_to_weight(*frob), tucker2_to_weight(*out)
    else:
        frob = cp_als_sigma(w, 8, None)
        out, trace = cp_als_sigma(w, 8, sigma, 50, init=frob, return_trace=True)
        approx_f, approx_s = cp_to_weight(*frob, (3, 3)), cp_to_weight(*out, (3, 3))
    errs = trace.errors
    assert len(errs) > 2 and all(b <= a for a, b in itertools.pairwise(errs))
    assert errs[0] == pytest.approx(sigma_error(w, approx_f, sigma), rel=1e-9)
    assert sigma_error(w, approx_s, sigma) < 0.8 * sigma_error(w, approx_f, sigma)
    # ... at the price of a larger plain Frobenius error
    assert frobenius_error(w, approx_s) > frobenius_error(w, approx_f)


def test_sigma_identity_equals_frobenius():
    w = _noisy_tucker(12, 8, 4, 0.2, seed=6)
    a = tucker2_to_weight(*tucker2_als_sigma(w, (3, 3), None, 20))
    b = tucker2_to_weight(*tucker2_als_sigma(w, (3, 3), torch.eye(72, dtype=torch.float64), 20))
    assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("padding_mode", ["zeros", "circular"])
def test_input_covariance_matches_dense_unfold(centered, padding_mode):
    net = nn.Sequential(_conv(padding=1), nn.ReLU(), _conv(o=4, i=10, padding=1, stride=2))
    net[2].padding_mode = padding_mode
    x = torch.randn(5, 6, 8, 8, generator=_gen(7), dtype=torch.float64)
    sig = input_covariance(net, [x[:2], (x[2:],)], ["2"], centered=centered)["2"]
    h = F.relu(net[0](x)).detach()
    if padding_mode == "circular":
        h = F.pad(h, (1, 1, 1, 1), mode="circular")
        p = F.unfold(h, 3, stride=2)
    else:
        p = F.unfold(h, 3, padding=1, stride=2)
    flat = p.transpose(1, 2).reshape(-1, 90)
    dense = flat.T @ flat / len(flat)
    if centered:
        mu = flat.mean(0)
        dense = dense - torch.outer(mu, mu)
    assert torch.allclose(sig, dense, atol=1e-12, rtol=1e-10)


def test_cholesky_fallback_adds_the_smallest_working_jitter():
    low = torch.randn(30, 4, generator=_gen(8), dtype=torch.float64)
    singular = low @ low.T
    chol, jitter = sqrt_sigma(singular)
    assert jitter > 0
    assert (
        int(
            torch.linalg.cholesky_ex(singular + jitter / 10 * torch.eye(30, dtype=torch.float64))[1]
        )
        != 0
        or jitter == 1e-9
    )
    assert torch.allclose(chol @ chol.T, singular + jitter * torch.eye(30, dtype=torch.float64))
    pd = singular + torch.eye(30, dtype=torch.float64)
    assert sqrt_sigma(pd)[1] == 0.0


def test_ranks_for_ratio_match_the_spec():
    assert tucker2_rank_for_ratio((32, 16, 3, 3), 0.25) == 8
    assert tucker2_rank_for_ratio((32, 32, 3, 3), 0.25) == 12
    assert cp_rank_for_ratio((32, 16, 3, 3), 0.25) == 20
    assert cp_rank_for_ratio((32, 32, 3, 3), 0.25) == 31


@pytest.mark.parametrize("rank", [(24, 1), (1, 1), (5, 1)])
def test_tucker2_with_one_input_rank_matches_hooi(rank):
    # R_I = 1 crashed (torch.kron on the (I, 1) QR factor with strides (1, I)): the strongest
    # ratios give rank 1, e.g. tucker2_rank_for_ratio((32, 16, 3, 3), 0.02) == 1
    from eff_vision.reproduce.tensor_compress import _hooi

    w = _noisy_tucker(24, 12, 5, 0.3, seed=8)
    ours = tucker2_to_weight(*tucker2_als_sigma(w, rank, None, n_iter_max=2000, tol=0.0))
    assert float((ours - _hooi(w, rank)).norm() / w.norm()) <= 1e-6
    sigma = torch.cov(_correlated_patches(108, seed=9).T)
    _, trace = tucker2_als_sigma(w, rank, sigma, 20, return_trace=True)
    assert all(b <= a for a, b in itertools.pairwise(trace.errors))
    assert tucker2_rank_for_ratio((32, 16, 3, 3), 0.02) == 1
    seq = decompose_conv(_conv(o=32, i=16), "tucker2", ratio=0.02)
    assert seq[1].weight.shape[:2] == (1, 1)


def _low_rank_input_sigma(i, k2, directions, seed):
    """Patches whose channels span only ``directions`` directions (a low-effective-rank Σ)."""
    g = _gen(seed)
    mix = torch.randn(directions, i, generator=g, dtype=torch.float64)
    z = torch.randn(4000, directions, k2, generator=g, dtype=torch.float64)
    x = torch.einsum("nds,di->nis", z, mix).reshape(4000, i * k2)
    return x.T @ x / 4000 + 1e-4 * torch.eye(i * k2, dtype=torch.float64)


def test_rank_search_spends_the_budget_where_the_data_live():
    w = torch.randn(32, 16, 3, 3, generator=_gen(10), dtype=torch.float64)
    sigma = _low_rank_input_sigma(16, 9, 3, seed=11)
    pair = tucker2_rank_search(w, 0.15, sigma)
    o, i, k2 = 32, 16, 9
    budget = 0.15 * o * i * k2
    cost = lambda r: r[0] * o + r[0] * r[1] * k2 + r[1] * i  # noqa: E731
    assert cost(pair) <= budget < min(cost((pair[0] + 1, pair[1])), cost((pair[0], pair[1] + 1)))
    assert pair[1] <= 4 < pair[0]  # few input ranks: the inputs span 3 channel directions
    equal = tucker2_rank_for_ratio((o, i, 3, 3), 0.15)

    def err(r):
        return sigma_error(w, tucker2_to_weight(*tucker2_als_sigma(w, r, sigma, 30)), sigma)

    assert err(pair) < 0.8 * err((equal, equal))
    conv = _conv(o=32, i=16)
    with torch.no_grad():
        conv.weight.copy_(w)
    seq = decompose_conv(conv, "tucker2", ratio=0.15, sigma=sigma, rank_selection="search")
    assert tuple(seq[1].weight.shape[:2]) == pair
    assert decompose_conv(conv, "tucker2", ratio=0.15)[1].weight.shape[:2] == (equal, equal)
    net = nn.Sequential(conv)
    x = torch.randn(8, 16, 6, 6, generator=_gen(12), dtype=torch.float64)
    small = compress_model(net, [x], 0.15, rank_selection="search")
    assert small[0][1].weight.shape[0] * small[0][1].weight.shape[1] <= budget / k2
    with pytest.raises(ValueError, match="rank_selection must be one of"):
        decompose_conv(conv, "tucker2", ratio=0.15, rank_selection="best")
    with pytest.raises(ValueError, match="rank_selection must be one of"):
        compress_model(net, [x], 0.15, rank_selection="best")


def test_compress_model_replaces_layers_and_keeps_accuracy_close(digits_cnn):
    from eff_vision._training import accuracy

    model, data = digits_cnn
    base = accuracy(model, data["xte"], data["yte"])
    calib = [data["xtr"][:128], data["xtr"][128:256]]
    small = compress_model(model, calib, 0.25, "cp", layers=["c2", "c3"], n_iter_max=40)
    assert isinstance(small.c2, nn.Sequential) and isinstance(model.c2, nn.Conv2d)
    assert small.c3[1].groups == 31
    assert accuracy(small, data["xte"], data["yte"]) >= base - 0.1
    with pytest.warns(UserWarning, match="1×1"):
        net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 1))
        out = compress_model(net, [data["xtr"][:16]], 0.5, "tucker2", layers=["0", "1"])
    assert isinstance(out[1], nn.Conv2d) and isinstance(out[0], nn.Sequential)


def test_same_seed_same_result():
    w = _noisy_tucker(12, 8, 4, 0.5, seed=9)
    a = cp_als_sigma(w, 6, None, 20, init="random", seed=3)
    b = cp_als_sigma(w, 6, None, 20, init="random", seed=3)
    c = cp_als_sigma(w, 6, None, 20, init="random", seed=4)
    assert torch.equal(a[0], b[0]) and all(
        torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True)
    )
    assert not torch.equal(a[0], c[0])
    from eff_vision.reproduce.tensor_compress import TensorCompressReproConfig, train_digits_cnn

    cfg = TensorCompressReproConfig(n_train=128, n_test=64, epochs=2)
    m1, _ = train_digits_cnn(cfg, 5)
    m2, _ = train_digits_cnn(cfg, 5)
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters(), strict=True))


def test_bad_inputs_raise_naming_the_layer():
    w = torch.randn(8, 4, 3, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="grouped"):
        decompose_conv(nn.Conv2d(4, 8, 3, groups=2), "tucker2", rank=2, name="g")
    with pytest.raises(ValueError, match="grouped"):
        decompose_conv(nn.Conv2d(4, 8, 3, groups=4, dilation=2), "cp", rank=2)
    with pytest.raises(ValueError, match=r"c9.*exceeds the mode dimensions"):
        tucker2_als_sigma(w, (9, 2), None, name="c9")
    with pytest.raises(ValueError, match="exceeds"):
        decompose_conv(nn.Conv2d(4, 8, 3), "tucker2", rank=(2, 5))
    with pytest.raises(ValueError, match="CP rank"):
        cp_als_sigma(w, 37, None)
    for ratio in (0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="ratio must lie in"):
            decompose_conv(nn.Conv2d(4, 8, 3), "cp", ratio=ratio)
        with pytest.raises(ValueError, match="ratio must lie in"):
            compress_model(nn.Sequential(nn.Conv2d(1, 2, 3)), None, ratio)
    with pytest.raises(ValueError, match=r"layer1.*square of side I·k_h·k_w = 36"):
        tucker2_als_sigma(w, (2, 2), torch.eye(35, dtype=torch.float64), name="layer1")
    bad = torch.eye(36, dtype=torch.float64)
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        cp_als_sigma(w, 3, bad, name="layer1")
    with pytest.raises(ValueError, match="not positive definite even after"):
        tucker2_als_sigma(w, (2, 2), -torch.eye(36, dtype=torch.float64), name="layer1")
    with pytest.raises(ValueError, match="method must be one of"):
        decompose_conv(nn.Conv2d(4, 8, 3), "svd", rank=2)
    with pytest.raises(ValueError, match="exactly one of rank and ratio"):
        decompose_conv(nn.Conv2d(4, 8, 3), "cp")
    with pytest.raises(ValueError, match="grouped"):
        compress_model(
            nn.Sequential(nn.Conv2d(4, 8, 3, groups=2)),
            None,
            0.5,
            layers=["0"],
            data_informed=False,
        )
    with pytest.warns(UserWarning, match="1×1"):
        seq = decompose_conv(nn.Conv2d(4, 8, 1), "tucker2", rank=2)
    assert isinstance(seq[0], nn.Conv2d) and seq[0].kernel_size == (1, 1)


def test_bias_correction_removes_the_mean_error():
    conv = _conv(padding=0)
    x = 2.0 + torch.randn(64, 6, 6, 6, generator=_gen(10), dtype=torch.float64)
    sigs, means = input_covariance(nn.Sequential(conv), [x], ["0"], centered=True, return_mean=True)
    plain = decompose_conv(conv, "tucker2", rank=(3, 3), sigma=sigs["0"])
    fixed = decompose_conv(
        copy.deepcopy(conv), "tucker2", rank=(3, 3), sigma=sigs["0"], bias_correction=True,
        mean=means["0"],
    )  # fmt: skip
    with torch.no_grad():
        ref = conv(x)
        err_plain = (plain(x) - ref).mean((0, 2, 3)).abs().max()
        err_fixed = (fixed(x) - ref).mean((0, 2, 3)).abs().max()
    assert err_fixed < 1e-8 < err_plain


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    from eff_vision.reproduce import tensor_compress

    result = tensor_compress.run("quick", seed=0)
    assert result.error is None and result.passed
    failed = [(c.text, c.measured, c.threshold) for c in result.claims if not c.passed]
    assert not failed, failed
    assert all(c.verdict("quick") == "pass" for c in result.claims)
    assert len(result.claims) == 13
    paper = [c for c in result.claims if c.kind == "paper"]
    assert len(paper) == 4 and sum(c.headline for c in paper) == 2 and all(c.paper for c in paper)
    methods = [r["method"] for r in result.table]
    assert methods[:5] == [
        "original",
        "Tucker-2 Frobenius",
        "CPD Frobenius",
        "Tucker-2-ALS-Σ",
        "CPD-ALS-Σ",
    ]


SMALL = dict(
    n_train=300, n_test=120, epochs=3, calib_images=64, frob_iters=30, report_centered=False
)


def test_experiment_takes_a_calibration_set_of_the_users_choice():
    from eff_vision.data.digits import digits_splits
    from eff_vision.reproduce.tensor_compress import TensorCompressReproConfig, experiment

    cfg = TensorCompressReproConfig(**SMALL)
    default = experiment(cfg, 2)
    (xtr, _), _ = digits_splits((300, 120), 2)
    same = experiment(cfg, 2, calib=xtr[:64])
    assert same["results"] == default["results"]  # the default is the first 64 training images
    batches = experiment(cfg, 2, calib=[(xtr[:32], None), xtr[32:64]])  # a loader's batches
    for name, res in default["results"].items():
        for key, value in res.items():
            assert batches["results"][name][key] == pytest.approx(value, rel=1e-9, abs=1e-12)
    other = torch.rand(64, 1, 8, 8, generator=_gen(13))  # Σ from another "dataset"
    moved = experiment(cfg, 2, calib=other)
    for name in ("Tucker-2 Frobenius", "CPD Frobenius"):  # Σ does not enter them
        assert moved["results"][name]["frob_c2"] == default["results"][name]["frob_c2"]
    for name in ("Tucker-2-ALS-Σ", "CPD-ALS-Σ"):
        assert moved["results"][name]["frob_c2"] != default["results"][name]["frob_c2"]
    with pytest.raises(ValueError, match=r"calib batches must be image tensors \(N, 1, 8, 8\)"):
        experiment(cfg, 2, calib=torch.rand(4, 8, 8))
    with pytest.raises(TypeError, match="calib must be None, an image tensor"):
        experiment(cfg, 2, calib=3)


def test_sweep_follows_the_main_protocol_and_within_points():
    from eff_vision.reproduce.tensor_compress import (
        TensorCompressReproConfig,
        experiment,
        within_points,
    )

    cfg = TensorCompressReproConfig(**SMALL, sweep_ratios=(0.15, 0.25))
    out = experiment(cfg, 1)
    sweep = out["sweep"]
    assert sweep["ratios"] == [0.15, 0.25]
    for name in ("Tucker-2 Frobenius", "Tucker-2-ALS-Σ", "CPD Frobenius", "CPD-ALS-Σ"):
        assert sweep["accuracy"][name][1] == out["results"][name]["accuracy"]  # ratio 0.25 = main
    assert sweep["ranks"]["tucker2"][0] == {"c2": [6, 6], "c3": [9, 9]}
    assert sweep["ranks"]["cp"][0] == {"c2": 12, "c3": 18}
    searched = sweep["ranks"]["tucker2_searched"][0]["c2"]
    assert (
        searched != [6, 6]
        and searched[0] * 32 + searched[0] * searched[1] * 9 + searched[1] * 16 <= 0.15 * 4608
    )
    assert within_points([0.1, 0.2, 0.3, 0.4], [0.5, 0.95, 0.93, 0.97], 0.97) == 0.2
    assert within_points([0.1, 0.2, 0.3], [0.96, 0.90, 0.97], 0.97) == 0.3  # must hold above too
    assert within_points([0.1, 0.2], [0.5, 0.6], 0.97) is None
    with pytest.raises(ValueError, match="sweep_ratios must be increasing"):
        TensorCompressReproConfig(sweep_ratios=(0.25, 0.15))
    with pytest.raises(ValueError, match="sweep_ratios must be increasing"):
        TensorCompressReproConfig(sweep_ratios=(0.0,))


def test_full_mode_sweep_report_plot_within_and_strong_ratio_claims():
    from eff_shared.reproduce import Result
    from eff_vision.reproduce.tensor_compress import SWEEP_RATIOS, _add_sweep

    n = len(SWEEP_RATIOS)
    j = SWEEP_RATIOS.index(0.15)
    outs = {}
    for s in range(5):
        acc = {
            "Tucker-2 Frobenius": [0.3] * n,
            "Tucker-2-ALS-Σ": [0.5 + 0.1 * k for k in range(n)],
            "CPD Frobenius": [0.8] * n,
            "CPD-ALS-Σ": [0.96 - 0.01 * s] * n,
            "Tucker-2-ALS-Σ (searched ranks)": [0.9] * n,
        }
        ranks = {"tucker2_searched": [{"c2": [10, 3], "c3": [12, 7]}] * n}
        outs[s] = {"orig_acc": 0.97, "sweep": {"accuracy": acc, "ranks": ranks}}
    result = Result(name="t", mode="full", seed=0)
    _add_sweep(result, outs, [0, 1, 2, 3, 4])
    series = result.series["accuracy_vs_ratio"]
    assert series["x"] == list(SWEEP_RATIOS) and series["original"] == [0.97] * n
    assert series["Tucker-2-ALS-Σ"][j] == pytest.approx(0.5 + 0.1 * j)
    within = result.metrics["sweep"]["within_4_points"]
    first = next(r for r, k in zip(SWEEP_RATIOS, range(n), strict=True) if 0.5 + 0.1 * k >= 0.93)
    assert within["Tucker-2-ALS-Σ"]["median_drop"] == first
    assert within["Tucker-2 Frobenius"]["median_drop"] is None
    assert within["CPD-ALS-Σ"]["per_seed"] == [SWEEP_RATIOS[0]] * 4 + [None]  # 0.92 < 0.97 − 0.04
    claims = {c.text.split(": ", 1)[1]: c for c in result.claims}
    tucker = claims["acc(Tucker-2-ALS-Σ) − acc(Tucker-2 Frobenius), no fine-tuning"]
    assert tucker.values == pytest.approx([0.2 + 0.1 * j] * 5) and tucker.threshold == 0.10
    assert tucker.modes == ("full",) and tucker.kind == "paper"
    cp = claims["acc(CPD-ALS-Σ) − acc(original)"]
    assert (
        cp.values == pytest.approx([-0.01 - 0.01 * s for s in range(5)]) and cp.threshold == -0.02
    )
    assert len(result.claims) == 4 and all(c.seeds == (0, 1, 2, 3, 4) for c in result.claims)
    assert any("searched ranks" in note for note in result.notes)
