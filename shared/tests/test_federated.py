import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eff_shared.federated import (
    FedAvg,
    InProcessRunner,
    dirichlet_partition,
    iid_partition,
    state_nbytes,
    weighted_mean,
)
from eff_shared.federated.reproduce import run as run_fedavg_reproduction

LABELS = np.repeat(np.arange(5), 100)


# ---------------------------------------------------------------- partitioners
@pytest.mark.parametrize("alpha", [0.05, 0.5, 10.0])
def test_dirichlet_partition_disjoint_cover_min_size(alpha):
    parts = dirichlet_partition(LABELS, n_clients=8, alpha=alpha, seed=3, min_size=5)
    allidx = np.concatenate(parts)
    assert len(parts) == 8
    assert np.array_equal(np.sort(allidx), np.arange(LABELS.size))  # disjoint and covering
    assert min(p.size for p in parts) >= 5


def test_dirichlet_partition_seeded():
    a = dirichlet_partition(LABELS, 6, 0.3, seed=1, min_size=1)
    b = dirichlet_partition(LABELS, 6, 0.3, seed=1, min_size=1)
    c = dirichlet_partition(LABELS, 6, 0.3, seed=2, min_size=1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def _mean_label_skew(parts):
    # Total-variation distance between each client's label distribution and the global one.
    glob = np.bincount(LABELS, minlength=5) / LABELS.size
    tv = [0.5 * np.abs(np.bincount(LABELS[p], minlength=5) / p.size - glob).sum() for p in parts]
    return float(np.mean(tv))


def test_smaller_alpha_gives_more_skew():
    skews = [
        np.mean(
            [
                _mean_label_skew(dirichlet_partition(LABELS, 10, a, seed=s, min_size=1))
                for s in range(5)
            ]
        )
        for a in (0.05, 0.5, 100.0)
    ]
    assert skews[0] > skews[1] > skews[2]
    assert skews[2] < 0.15  # near IID


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": -1.0}, "alpha"),
        ({"n_clients": 0}, "n_clients"),
        ({"min_size": 200}, "min_size"),
        ({"min_size": 60}, "min_size"),  # 8*60 <= 500, but unreachable with alpha=0.01
    ],
)
def test_dirichlet_partition_errors(kwargs, match):
    args = {"labels": LABELS, "n_clients": 8, "alpha": 0.01, "seed": 0, "min_size": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        dirichlet_partition(**args)


def test_iid_partition():
    parts = iid_partition(103, 4, seed=0)
    assert sorted(p.size for p in parts) == [25, 26, 26, 26]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(103))
    with pytest.raises(ValueError, match="n_clients"):
        iid_partition(3, 4, seed=0)


# ---------------------------------------------------------------- aggregation
@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_fedavg_is_the_sample_weighted_mean(ns, seed):
    rng = np.random.default_rng(seed)
    states = [{"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)} for _ in ns]
    out = FedAvg().aggregate(
        {"w": np.zeros((3, 2)), "b": np.zeros(2)}, list(zip(states, ns, strict=True)), 0
    )
    expected_w = sum(n * s["w"] for s, n in zip(states, ns, strict=True)) / sum(ns)
    np.testing.assert_allclose(out["w"], expected_w, rtol=1e-12, atol=1e-12)


def test_fedavg_delta_keeps_unsent_keys_and_integer_dtypes():
    glob = {"w": np.ones(2), "frozen": np.full(2, 7.0), "count": np.array(10, dtype=np.int64)}
    replies = [
        ({"w": np.array([1.0, 0.0]), "count": np.array(2)}, 1),
        ({"w": np.array([0.0, 3.0]), "count": np.array(4)}, 3),
    ]
    out = FedAvg(delta=True).aggregate(glob, replies, 0)
    np.testing.assert_allclose(out["w"], [1.25, 3.25])
    np.testing.assert_array_equal(out["frozen"], glob["frozen"])
    assert out["count"].dtype == np.int64 and int(out["count"]) == 14  # 10 + round(3.5) = 14


def test_weighted_mean_errors():
    with pytest.raises(ValueError, match="at least one"):
        weighted_mean([], [])
    with pytest.raises(ValueError, match="positive"):
        weighted_mean([{"a": np.ones(1)}], [0])
    with pytest.raises(ValueError, match="keys"):
        weighted_mean([{"a": np.ones(1)}, {"b": np.ones(1)}], [1, 1])


# ---------------------------------------------------------------- runner
def _toward_mean(state, data, cfg, rng):
    """Move w halfway toward the client's data mean plus a little client noise."""
    target = np.asarray(data, dtype=float).mean()
    w = state["w"] + 0.5 * (target - state["w"]) + 0.01 * rng.normal(size=state["w"].shape)
    return {"w": w}, len(data), {"target": target}


CLIENTS = [np.arange(10) + 10 * c for c in range(6)]


def test_runner_is_deterministic_and_seed_dependent():
    def go(seed):
        return InProcessRunner(4, 3, seed).run({"w": np.zeros(2)}, _toward_mean, FedAvg(), CLIENTS)

    a, b, c = go(0), go(0), go(1)
    assert [r.clients for r in a.rounds] == [r.clients for r in b.rounds]
    np.testing.assert_array_equal(a.final_state["w"], b.final_state["w"])
    assert not np.array_equal(a.final_state["w"], c.final_state["w"])
    assert all(len(r.clients) == 3 for r in a.rounds)


def test_runner_matches_manual_fedavg_with_all_clients():
    res = InProcessRunner(2, None, 5).run({"w": np.zeros(1)}, _toward_mean, FedAvg(), CLIENTS)
    w = np.zeros(1)
    for r in range(2):
        outs = [
            _toward_mean(
                {"w": w}, d, None, np.random.default_rng(np.random.SeedSequence([5, 1, r, c]))
            )
            for c, d in enumerate(CLIENTS)
        ]
        w = sum(o[0]["w"] * o[1] for o in outs) / sum(o[1] for o in outs)
    np.testing.assert_allclose(res.final_state["w"], w, rtol=0, atol=1e-14)


def test_failing_client_is_dropped_and_run_completes(caplog):
    def flaky(state, data, cfg, rng):
        if data[0] == 20:  # client 2 always fails
            raise RuntimeError("disk full")
        return _toward_mean(state, data, cfg, rng)

    with caplog.at_level(logging.WARNING, logger="eff_shared.federated"):
        res = InProcessRunner(3, None, 0, evaluate_fn=lambda s, r: {"w": float(s["w"][0])}).run(
            {"w": np.zeros(1)}, flaky, FedAvg(), CLIENTS
        )
    assert len(res.rounds) == 3
    for rec in res.rounds:
        assert 2 in rec.dropped and "disk full" in rec.dropped[2]
        assert 2 not in rec.num_examples and len(rec.num_examples) == 5
    assert "client 2 raised" in caplog.text
    # the aggregate is the mean over the five healthy clients only
    healthy = [d for c, d in enumerate(CLIENTS) if c != 2]
    assert res.final_state["w"][0] == pytest.approx(
        np.mean([d.mean() for d in healthy]) * (1 - 0.5**3), abs=0.05
    )
    assert all(v is not None for v in res.history("w"))


def test_all_clients_failing_keeps_global_state():
    def dead(state, data, cfg, rng):
        raise ValueError("nope")

    res = InProcessRunner(2, 2, 0).run({"w": np.ones(1)}, dead, FedAvg(), CLIENTS)
    np.testing.assert_array_equal(res.final_state["w"], np.ones(1))
    assert res.total_upload_bytes == 0 and res.total_download_bytes == 2 * 2 * 8


def test_malformed_reply_is_a_bug_not_a_dropped_client():
    with pytest.raises(TypeError, match="must return"):
        InProcessRunner(1, 1, 0).run({"w": np.ones(1)}, lambda s, d, c, r: s, FedAvg(), CLIENTS)


def test_pre_local_train_hook_gets_distinct_generators_and_its_state_is_used():
    seen = []

    def hook(state, round_idx, rng):
        seen.append((round_idx, rng.integers(0, 2**62)))
        state["w"] = state["w"] + 100.0  # the client must train from the hooked copy

    def echo(state, data, cfg, rng):
        return {"w": state["w"].copy()}, 1, {}

    res = InProcessRunner(2, 3, 0, pre_local_train=hook).run(
        {"w": np.zeros(1)}, echo, FedAvg(), CLIENTS
    )
    assert len(seen) == 6
    assert len({draw for _, draw in seen}) == 6  # every (round, client) has its own stream
    assert res.final_state["w"][0] == pytest.approx(200.0)


def test_communication_accounting():
    def upload_half(state, data, cfg, rng):  # like FedSVD: only part of the state goes up
        return {"b": state["b"] + 1}, len(data), {}

    init = {"a": np.zeros(2, dtype=np.float32), "b": np.zeros(2, dtype=np.float32)}
    res = InProcessRunner(2, 3, 0).run(init, upload_half, FedAvg(), CLIENTS)
    assert len(res.comm) == 6
    assert all(c.download_bytes == 16 and c.upload_bytes == 8 for c in res.comm)
    assert res.total_upload_bytes == 48
    assert state_nbytes({"a": np.zeros((3, 5))}) == 120
    s = res.summary()
    assert s["total_download_bytes"] == 96 and len(s["rounds"]) == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rounds": 0}, "rounds"),
        ({"clients_per_round": 0}, "clients_per_round"),
        ({"seed": -1}, "seed"),
    ],
)
def test_runner_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InProcessRunner(**{"rounds": 1, "clients_per_round": 1, "seed": 0, **kwargs})


def test_runner_rejects_too_many_clients_per_round():
    with pytest.raises(ValueError, match="clients_per_round"):
        InProcessRunner(1, 7, 0).run({"w": np.zeros(1)}, _toward_mean, FedAvg(), CLIENTS)


# ---------------------------------------------------------------- reproduction
def test_fedavg_quick_reproduction_claims_hold():
    result = run_fedavg_reproduction("quick", seed=0)
    assert result.passed, [c.to_dict() for c in result.claims]
    fed = result.metrics["fedavg_accuracy[alpha=0.5]"]
    local = result.metrics["mean_local_accuracy[alpha=0.5]"]
    assert fed > local
    assert (
        fed <= result.metrics["central_accuracy"] + 0.02
    )  # FedAvg cannot beat the pooled model by much
