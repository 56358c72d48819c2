import math

import numpy as np
import pytest
import torch
from scipy.stats import kstest
from torch import nn

from eff_shared.federated import FedAvg, InProcessRunner
from eff_vision.fedphoenix import PhoenixReset, phoenix_pre_local_train


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 32, 3),
        nn.Conv2d(32, 64, 1), nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


CONV_KEYS = ("0.weight", "3.weight", "4.weight")


def test_resets_exactly_floor_theta_cout_kernels_per_active_layer():
    model = _net()
    before = _snapshot(model)
    reset = PhoenixReset(theta=0.1, stop_round=100)
    trace = reset(model, 0, _gen(1))
    assert [layer.name for layer in trace.layers] == ["0", "3", "4"]
    for layer, key in zip(trace.layers, CONV_KEYS, strict=True):
        n = math.floor(0.1 * layer.out_channels)
        assert len(layer.indices) == n == len(set(layer.indices))
        w, w0 = model.state_dict()[key], before[key]
        changed = [i for i in range(layer.out_channels) if not torch.equal(w[i], w0[i])]
        assert changed == sorted(layer.indices)
    assert trace.total_reset == 1 + 3 + 6


def test_everything_else_is_bit_identical():
    model = _net()
    before = _snapshot(model)
    PhoenixReset(theta=0.5, stop_round=10)(model, 0, _gen(2))
    for k, v in model.state_dict().items():
        if k not in CONV_KEYS:  # conv biases, BatchNorm (affine + running stats), fc
            assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("stop_round", [10, 7, 0])
def test_stair_schedule_stops_shallow_layers_first(stop_round):
    reset = PhoenixReset(theta=0.25, stop_round=stop_round)
    model = _net()
    for t in range(12):
        snap = _snapshot(model)
        trace = reset(model, t, _gen(t))
        for d, (layer, key) in enumerate(zip(trace.layers, CONV_KEYS, strict=True)):
            expected = t < (d + 1) * stop_round / 3  # exact: t·3 < (d+1)·r_s
            assert layer.active == (t * 3 < (d + 1) * stop_round) == expected
            assert (not torch.equal(model.state_dict()[key], snap[key])) == expected, (t, d)


def test_reset_values_follow_the_layer_statistics():
    torch.manual_seed(0)
    conv = nn.Conv2d(64, 128, 3)
    with torch.no_grad():
        conv.weight.mul_(3.0).add_(0.2)  # a layer whose statistics differ from N(0, 1)
    model = nn.Sequential(conv)
    w0 = conv.weight.detach().clone()
    trace = PhoenixReset(theta=0.25)(model, 0, _gen(3))
    layer = trace.layers[0]
    assert layer.mean == pytest.approx(float(w0.mean()))
    assert layer.std == pytest.approx(float(w0.std()))
    vals = conv.weight[list(layer.indices)].detach().flatten().double().numpy()
    assert kstest(vals, "norm", args=(layer.mean, layer.std)).pvalue > 0.01
    # the old kernels' values are not what was drawn, and a wrong σ is rejected
    assert kstest(vals, "norm", args=(layer.mean, 2 * layer.std)).pvalue < 1e-6


@pytest.mark.parametrize("init", ["uniform", "kaiming_uniform", "kaiming_normal"])
def test_other_inits(init):
    torch.manual_seed(0)
    conv = nn.Conv2d(32, 64, 3)
    trace = PhoenixReset(theta=0.5, init=init, scale=2.0)(nn.Sequential(conv), 0, _gen(4))
    layer = trace.layers[0]
    vals = conv.weight[list(layer.indices)].detach().flatten().double()
    fan_in = 32 * 9
    if init == "uniform":
        half = math.sqrt(3) * 2.0 * layer.std
        assert vals.min() >= layer.mean - half and vals.max() <= layer.mean + half
        assert float(vals.std()) == pytest.approx(2.0 * layer.std, rel=0.05)
    elif init == "kaiming_uniform":
        bound = 2.0 * math.sqrt(2.0) * math.sqrt(3.0 / fan_in)
        assert float(vals.abs().max()) <= bound and float(vals.abs().max()) > 0.95 * bound
    else:
        assert float(vals.std()) == pytest.approx(2.0 * math.sqrt(2.0 / fan_in), rel=0.05)


def test_linear_rows_are_opt_in_and_at_least_one():
    model = _net()
    before = _snapshot(model)
    trace = PhoenixReset(theta=0.01, target_types=(nn.Linear,), at_least_one=True)(
        model, 0, _gen(5)
    )
    assert [layer.name for layer in trace.layers] == ["6"]
    assert len(trace.layers[0].indices) == 1
    for k in CONV_KEYS:
        assert torch.equal(model.state_dict()[k], before[k])


def test_generators_decide_the_kernel_sets():
    reset = PhoenixReset(theta=0.25)
    a = reset(_net(), 0, _gen(10)).indices()
    b = reset(_net(), 0, _gen(10)).indices()
    c = reset(_net(), 0, _gen(11)).indices()
    assert a == b and a != c


def test_bad_inputs():
    with pytest.raises(ValueError, match="theta"):
        PhoenixReset(theta=1.5)
    with pytest.raises(ValueError, match="theta"):
        PhoenixReset(theta=-0.1)
    with pytest.raises(ValueError, match="stop_round"):
        PhoenixReset(stop_round=-1)
    with pytest.raises(ValueError, match="init"):
        PhoenixReset(init="xavier")
    with pytest.raises(ValueError, match="no module of target_types"):
        PhoenixReset()(nn.Sequential(nn.Linear(3, 3)), 0, _gen(0))
    with pytest.raises(ValueError, match="round_idx"):
        PhoenixReset()(_net(), -1, _gen(0))
    with pytest.raises(ValueError, match="no module of target_types"):
        phoenix_pre_local_train(nn.Linear(2, 2), PhoenixReset())
    reset = PhoenixReset(theta=1 / 32)  # floor(8/32) = floor(16/32) = 0
    small = nn.Sequential(nn.Conv2d(1, 8, 3), nn.Conv2d(8, 16, 3))
    with pytest.warns(UserWarning, match="no-op"):
        trace = reset(small, 0, _gen(0))
    assert trace.total_reset == 0


def _client_update(state, data, cfg, rng):
    return {k: v.clone() for k, v in state.items()}, 1, {}


def test_runner_hook_resets_each_client_copy_with_its_own_stream():
    model = _net()
    init = _snapshot(model)
    traces = []
    hook = phoenix_pre_local_train(_net(1), PhoenixReset(theta=0.25, stop_round=3), traces)
    runner = InProcessRunner(4, 3, seed=7, pre_local_train=hook)
    res = runner.run(init, _client_update, FedAvg(), [None] * 6)
    assert all(not r.dropped for r in res.rounds)
    assert len(traces) == 4 * 3
    for r in range(4):
        round_traces = [t for rr, t in traces if rr == r]
        assert len(round_traces) == 3
        if r == 0:
            sets = [t.indices() for t in round_traces]
            assert sets[0] != sets[1] and sets[1] != sets[2] and sets[0] != sets[2]
        if r >= 3:  # every layer stopped at r_s = 3
            assert all(t.total_reset == 0 for t in round_traces)
    # the global model moved only in conv weights (client copies were reset, then averaged; the
    # weighted mean of identical copies is exact only up to float rounding)
    for k, v in res.final_state.items():
        same = torch.allclose(v.double(), init[k].double(), rtol=1e-6, atol=1e-7)
        assert same == (k not in CONV_KEYS), k
    # same seed, same trace
    traces2 = []
    hook2 = phoenix_pre_local_train(_net(1), PhoenixReset(theta=0.25, stop_round=3), traces2)
    res2 = InProcessRunner(4, 3, seed=7, pre_local_train=hook2).run(
        init, _client_update, FedAvg(), [None] * 6
    )
    assert traces == traces2
    assert all(torch.equal(res.final_state[k], res2.final_state[k]) for k in init)


def test_numpy_states_round_trip_through_the_hook():
    init = {k: v.numpy().copy() for k, v in _snapshot(_net()).items()}
    hook = phoenix_pre_local_train(_net(), PhoenixReset(theta=0.25))
    out = hook(dict(init), 0, np.random.default_rng(0))
    assert isinstance(out["0.weight"], np.ndarray)
    assert not np.array_equal(out["0.weight"], init["0.weight"])
    assert np.array_equal(out["6.weight"], init["6.weight"])


def test_federation_same_seed_identical():
    from eff_vision.reproduce.fedphoenix import FedPhoenixReproConfig, federate

    cfg = FedPhoenixReproConfig(rounds=3)
    t1, t2 = [], []
    a = federate(cfg, 0, PhoenixReset(theta=2 / 32, stop_round=2), t1)
    b = federate(cfg, 0, PhoenixReset(theta=2 / 32, stop_round=2), t2)
    assert t1 == t2 and a["accuracy"] == b["accuracy"]
    assert all(torch.equal(a["final_state"][k], b["final_state"][k]) for k in a["final_state"])
    c = federate(cfg, 1, PhoenixReset(theta=2 / 32, stop_round=2), [])
    assert c["accuracy"] != a["accuracy"]


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    """Every check holds; the non-inferiority paper claim reproduces and the paper's gain over
    FedAvg is an xfail paper claim (no FAIL)."""
    from eff_vision.reproduce import fedphoenix

    result = fedphoenix.run("quick", seed=0)
    assert result.error is None and result.passed
    verdicts = {c.text: c.verdict("quick") for c in result.claims}
    assert "FAIL" not in verdicts.values(), verdicts
    assert len(result.claims) == 9
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 7 and all(c.passed for c in checks)
    non_inf, gain = [c for c in result.claims if c.kind == "paper"]
    assert non_inf.expected == "reproduces" and non_inf.verdict("quick") == "pass"
    assert gain.expected == "xfail" and gain.headline and "20.73" in gain.paper
    assert gain.values == non_inf.values  # the same per-seed differences
    assert [r["method"] for r in result.table] == ["FedAvg", "FedPhoenix r_s=0.4·R"]


def test_transform_hook_adds_a_client_specific_spurious_feature():
    """The setting the paper motivates: on each client a marker pixel (its position specific to
    the client) encodes the label; the test set has none. The hook must reach what clients train
    on, and only that."""
    from eff_vision.reproduce.fedphoenix import (
        ClientConfig,
        FedPhoenixReproConfig,
        accuracy,
        client_update,
        federate,
    )

    marker = 2.0  # digits are scaled to [0, 1]: 2.0 never occurs naturally
    calls, seen, tested = [], [], []

    def spurious(x, y, client_id, rng):
        assert isinstance(rng, np.random.Generator)
        calls.append(client_id)
        x = x.clone()
        x[torch.arange(len(y)), 0, client_id % 8, y % 8] = marker
        return x, y

    def test_transform(x, y):
        tested.append(x)
        return x, y

    def recording_update(state, data, cfg, rng):
        assert isinstance(cfg, ClientConfig)
        seen.append(data)
        return client_update(state, data, cfg, rng)

    cfg = FedPhoenixReproConfig(rounds=2)
    out = federate(cfg, 0, PhoenixReset(theta=2 / 32, stop_round=2), rounds=2,
                   transform=spurious, test_transform=test_transform, update=recording_update)  # fmt: skip
    assert calls == list(range(cfg.n_clients))
    assert len(seen) == 2 * cfg.clients_per_round and len(out["accuracy"]) == 2
    for x, y in seen:  # the marker sits where the client's transform put it, and only there
        rows, cols = (x[:, 0] == marker).nonzero(as_tuple=True)[1:]
        assert len(rows) == len(y) and torch.equal(cols, y % 8)
        assert len(set(rows.tolist())) == 1  # one client-specific row
    assert len(tested) == 1 and not (tested[0] == marker).any()  # absent at test
    # the public pieces work on their own
    state, n, metrics = client_update(
        out["final_state"], seen[0], ClientConfig(), np.random.default_rng(0)
    )
    assert n == len(seen[0][1]) and metrics["loss"] > 0
    assert 0.0 <= accuracy(state, *seen[0]) <= 1.0
    # without hooks the federation is the default one
    plain = federate(cfg, 0, PhoenixReset(theta=2 / 32, stop_round=2), rounds=2)
    again = federate(cfg, 0, PhoenixReset(theta=2 / 32, stop_round=2), rounds=2,
                     test_transform=lambda x, y: (x, y))  # fmt: skip
    assert plain["accuracy"] == again["accuracy"]


def test_marker_setting_and_section_bookkeeping():
    """Full mode's spurious-marker section (issue #26): the marker sits at the client's row and
    the label's column; the claim holds FedPhoenix − FedAvg of the marker federations per seed."""
    from eff_shared.reproduce import Result
    from eff_vision.data.digits import digits_splits
    from eff_vision.reproduce import fedphoenix as fp

    x, y = torch.zeros(3, 1, 8, 8), torch.tensor([0, 9, 3])
    m = fp.with_marker(x, y, 2)
    assert (x == 0).all() and int((m == fp.MARKER).sum()) == 3  # a copy, one pixel per image
    assert [m[i, 0, 2, c].item() for i, c in enumerate((0, 1, 3))] == [fp.MARKER] * 3
    off = fp.with_marker(x, y, 2, shift=1)
    assert [off[i, 0, 2, c].item() for i, c in enumerate((1, 2, 4))] == [fp.MARKER] * 3
    xt, yt = fp.marker_transform()(x, y, 11, np.random.default_rng(0))
    assert torch.equal(xt, fp.with_marker(x, y, 3)) and yt is y  # client 11 -> row 3
    with pytest.raises(ValueError, match="value"):
        fp.marker_transform(0.5)  # inside the digits' range: not a marker
    with pytest.raises(ValueError, match="row"):
        fp.with_marker(x, y, 8)

    cfg = fp.FedPhoenixReproConfig()
    seeds, rounds = [0, 1], 2
    section = fp.marker_section(cfg, seeds, rounds=rounds)
    for s in seeds:
        ref = fp.federate(cfg, s, None, rounds=rounds, transform=fp.marker_transform())
        assert section[s]["final"]["FedAvg"] == ref["final"]
        assert section[s]["gain"] == section[s]["final"]["FedPhoenix"] - ref["final"]
        rel = fp.marker_reliance(cfg, s, ref["final_state"])
        assert section[s]["reliance"]["FedAvg"] == rel
        _, (xte, yte) = digits_splits((cfg.n_train, cfg.n_test), s)
        assert rel["clean"] == fp.accuracy(ref["final_state"], xte, yte)
        marked = [
            fp.accuracy(ref["final_state"], fp.with_marker(xte, yte, r), yte) for r in range(8)
        ]
        assert rel["marked"] == pytest.approx(float(np.mean(marked)), abs=1e-12)
    assert section[0]["final"] != section[1]["final"]
    result = Result(name="vision.fedphoenix", mode="full", seed=0)
    fp._marker_claims(result, section, seeds, rounds)
    (claim,) = result.claims
    assert claim.kind == "paper" and claim.op == ">" and claim.threshold == 0.0
    assert claim.modes == ("full",) and claim.seeds == (0, 1)
    assert claim.values == tuple(section[s]["gain"] for s in seeds)
    assert (claim.expected == "xfail") == bool(fp.MARKER_REASON)
    assert result.metrics["marker"]["rounds"] == rounds
    for s in seeds:
        assert f"{s}: {section[s]['gain']:+.3f}" in result.notes[-1]
