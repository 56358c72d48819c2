"""The Flower bridge (``eff_shared.federated.flower``) against the in-process runtime.

Fast tests build real ``flwr`` messages by hand (no Ray); one slow smoke test runs Flower's
simulation engine. Skipped when the ``flower`` extra is not installed.
"""

from __future__ import annotations

import gc
import os
import time

# Flower reads this at import: no usage telemetry from the test suite (and no network).
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest

pytest.importorskip("flwr")
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

from eff_shared.federated import FedAvg, InProcessRunner, RunResult
from eff_shared.federated.flower import (
    arrays_to_state,
    make_client_app,
    make_server_app,
    run_simulation,
    state_to_arrays,
    to_flower_strategy,
)
from eff_shared.seeding import make_rng

# --------------------------------------------------------------------------- helpers


def _metadata(src: int, dst: int, message_type: str = MessageType.TRAIN) -> Metadata:
    return Metadata(
        run_id=1,
        message_id=f"{src}->{dst}",
        src_node_id=src,
        dst_node_id=dst,
        reply_to_message_id="",
        group_id="",
        created_at=time.time(),
        ttl=3600.0,
        message_type=message_type,
    )


def _reply(state, n: int, node: int, partition: int | None = None, **metrics) -> Message:
    content = RecordDict(
        {"arrays": state_to_arrays(state), "metrics": MetricRecord({"num-examples": n, **metrics})}
    )
    if partition is not None:
        content["client"] = ConfigRecord({"partition-id": partition})
    return Message(content=content, metadata=_metadata(node, 0))


def _error_reply(node: int) -> Message:
    return Message(error=Error(code=1, reason="client exploded"), metadata=_metadata(node, 0))


def _states(seed: int = 0, k: int = 3):
    rng = np.random.default_rng(seed)
    glob = {"w": rng.normal(size=(4, 3)), "b": rng.normal(size=3), "steps": np.array(7)}
    clients = [
        {"w": rng.normal(size=(4, 3)), "b": rng.normal(size=3), "steps": np.array(7 + i)}
        for i in range(k)
    ]
    return glob, clients


def _assert_states_close(a, b, atol=1e-12):
    assert set(a) == set(b)
    for k in a:
        assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, k
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=atol, err_msg=k)


class _Doubling:
    """A custom aggregator: twice FedAvg, recording the round indices it is called with."""

    def __init__(self) -> None:
        self.rounds: list[int] = []

    def aggregate(self, global_state, replies, round_idx):
        self.rounds.append(round_idx)
        return {k: 2 * v for k, v in FedAvg().aggregate(global_state, replies, round_idx).items()}


# A tiny method: move a vector toward the client's data mean, plus seeded noise.
def toward_mean(global_state, data, cfg, rng):
    step = 0.5 if cfg is None else cfg["step"]
    w = global_state["w"]
    new = w + step * (data.mean(axis=0) - w) + 0.01 * rng.normal(size=w.shape)
    return (
        {"w": new},
        len(data),
        {"dist": float(np.linalg.norm(new - data.mean(axis=0))), "tag": "x"},
    )


def load_partition(partition_id: int, num_partitions: int):
    rng = make_rng(123, partition_id, num_partitions)
    return rng.normal(loc=float(partition_id), size=(10 + 5 * partition_id, 3))


def _in_process(num_clients: int, rounds: int, seed: int, aggregator=None) -> RunResult:
    runner = InProcessRunner(rounds=rounds, clients_per_round=None, seed=seed)
    data = [load_partition(c, num_clients) for c in range(num_clients)]
    return runner.run({"w": np.zeros(3)}, toward_mean, aggregator or FedAvg(), data)


# --------------------------------------------------------------------------- strategy


def test_import_without_flower_names_the_extra(monkeypatch):
    import importlib
    import sys

    for name in [m for m in sys.modules if m == "flwr" or m.startswith("flwr.")]:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import flwr...` fail
    monkeypatch.delitem(sys.modules, "eff_shared.federated.flower")
    with pytest.raises(ImportError, match=r'pip install "eff-shared\[flower\]"'):
        importlib.import_module("eff_shared.federated.flower")


def test_conversion_roundtrip_keeps_keys_and_dtypes():
    state = {"a.weight": np.arange(6.0).reshape(2, 3), "n": np.array(3, dtype=np.int64), "s": 1.5}
    back = arrays_to_state(state_to_arrays(state))
    assert list(back) == ["a.weight", "n", "s"]
    _assert_states_close(back, {k: np.asarray(v) for k, v in state.items()}, atol=0)
    back["a.weight"][0, 0] = 9.0  # writable


def test_strategy_is_a_flower_fedavg():
    strategy = to_flower_strategy(FedAvg(), min_available_nodes=3)
    assert isinstance(strategy, FlowerFedAvg)
    assert strategy.min_available_nodes == 3
    with pytest.raises(TypeError, match="aggregate"):
        to_flower_strategy(object())


@pytest.mark.parametrize("delta", [False, True])
def test_aggregate_train_matches_fedavg(delta):
    glob, clients = _states()
    ns = [5, 11, 2]
    # Replies arrive out of partition order; the strategy reorders them.
    replies = [
        _reply(clients[c], ns[c], node=50 - c, partition=c, loss=float(c)) for c in (2, 0, 1)
    ]
    strategy = to_flower_strategy(FedAvg(delta=delta), initial_state=glob)
    arrays, metrics = strategy.aggregate_train(1, replies)
    expected = FedAvg(delta=delta).aggregate(glob, list(zip(clients, ns, strict=True)), 0)
    assert isinstance(arrays, ArrayRecord)
    _assert_states_close(arrays_to_state(arrays), expected)
    _assert_states_close(strategy.global_state, expected)
    # Metrics: Flower's example-weighted mean, without the weight itself.
    assert isinstance(metrics, MetricRecord)
    assert metrics["loss"] == pytest.approx((0 * 5 + 1 * 11 + 2 * 2) / 18)
    assert "num-examples" not in metrics
    record = strategy.rounds[-1]
    assert record.round == 0 and record.clients == [0, 1, 2]
    assert record.num_examples == {0: 5, 1: 11, 2: 2}
    assert record.client_metrics[1] == {"loss": 1.0}


def test_aggregate_train_calls_our_aggregator_with_zero_based_round():
    glob, clients = _states(seed=1)
    ns = [3, 4, 9]
    replies = [
        _reply(s, n, node=10 + i, partition=i)
        for i, (s, n) in enumerate(zip(clients, ns, strict=True))
    ]
    agg = _Doubling()
    strategy = to_flower_strategy(agg, initial_state=glob)
    arrays, _ = strategy.aggregate_train(3, replies)
    assert agg.rounds == [2]
    fedavg = FedAvg().aggregate(glob, list(zip(clients, ns, strict=True)), 2)
    _assert_states_close(arrays_to_state(arrays), {k: 2 * v for k, v in fedavg.items()})


def test_aggregate_train_skips_error_replies():
    glob, clients = _states(seed=2)
    replies = [
        _reply(clients[0], 4, node=10, partition=0),
        _error_reply(node=11),
        _reply(clients[2], 6, node=12, partition=2),
    ]
    strategy = to_flower_strategy(FedAvg(), initial_state=glob)
    arrays, _ = strategy.aggregate_train(1, replies)
    expected = FedAvg().aggregate(glob, [(clients[0], 4), (clients[2], 6)], 0)
    _assert_states_close(arrays_to_state(arrays), expected)
    assert strategy.rounds[-1].clients == [0, 2]
    assert "client exploded" in strategy.rounds[-1].dropped[11]

    # Every client failed: Flower keeps its arrays (None) and so does our global state.
    arrays, metrics = strategy.aggregate_train(2, [_error_reply(node=10)])
    assert arrays is None and metrics is None
    _assert_states_close(strategy.global_state, expected)


def test_aggregate_train_without_partition_ids_orders_by_node():
    glob, clients = _states(seed=3)
    replies = [_reply(clients[i], 2 + i, node=node) for i, node in enumerate((30, 10, 20))]
    strategy = to_flower_strategy(FedAvg(), initial_state=glob)
    strategy.aggregate_train(1, replies)
    assert strategy.rounds[-1].clients == [10, 20, 30]


def test_aggregate_train_rejects_replies_without_num_examples():
    glob, clients = _states()
    bad = Message(
        content=RecordDict(
            {"arrays": state_to_arrays(clients[0]), "metrics": MetricRecord({"loss": 1.0})}
        ),
        metadata=_metadata(5, 0),
    )
    with pytest.raises(ValueError, match="num-examples"):
        to_flower_strategy(FedAvg(), initial_state=glob).aggregate_train(1, [bad])
    with pytest.raises(RuntimeError, match="global state"):
        to_flower_strategy(FedAvg()).aggregate_train(1, [_reply(clients[0], 1, node=5)])


def test_configure_train_tracks_global_state_and_sends_round(task_identity, fake_grid):
    glob, clients = _states(seed=4)
    strategy = to_flower_strategy(FedAvg(), min_available_nodes=2, min_train_nodes=2)
    grid = fake_grid(client_app=None, num_nodes=2)
    messages = list(strategy.configure_train(1, state_to_arrays(glob), ConfigRecord(), grid))
    assert sorted(m.metadata.dst_node_id for m in messages) == [100, 101]
    assert all(m.content["config"]["server-round"] == 1 for m in messages)
    _assert_states_close(strategy.global_state, glob, atol=0)

    arrays, _ = strategy.aggregate_train(1, [_reply(clients[0], 3, node=100, partition=0)])
    state_after = strategy.global_state
    list(strategy.configure_train(2, arrays, ConfigRecord(), grid))
    assert strategy.global_state is state_after  # start() hands back our aggregate: no re-decode


# --------------------------------------------------------------------------- client app


def test_client_app_train_handler():
    seed, round_idx, partition = 7, 2, 1
    app = make_client_app(toward_mean, load_partition, cfg={"step": 0.25}, seed=seed)
    glob = {"w": np.array([1.0, -2.0, 0.5])}
    msg = Message(
        content=RecordDict(
            {
                "arrays": state_to_arrays(glob),
                "config": ConfigRecord({"server-round": round_idx + 1}),
            }
        ),
        metadata=_metadata(0, 101),
    )
    context = Context(
        run_id=1,
        node_id=101,
        node_config={"partition-id": partition, "num-partitions": 3},
        state=RecordDict(),
        run_config={},
    )
    reply = app(msg, context)

    data = load_partition(partition, 3)
    expected, n, metrics = toward_mean(
        {"w": glob["w"].copy()}, data, {"step": 0.25}, make_rng(seed, 1, round_idx, partition)
    )
    assert not reply.has_error()
    assert reply.metadata.dst_node_id == 0 and reply.metadata.src_node_id == 101
    _assert_states_close(arrays_to_state(reply.content["arrays"]), expected, atol=0)
    sent = reply.content["metrics"]
    assert sent["num-examples"] == n == len(data)
    assert sent["dist"] == metrics["dist"]
    assert "tag" not in sent  # non-numeric metrics do not travel
    assert reply.content["client"]["partition-id"] == partition


def test_client_app_needs_partition_id_and_round():
    app = make_client_app(toward_mean, load_partition)
    glob = {"w": np.zeros(3)}
    msg = Message(
        content=RecordDict(
            {"arrays": state_to_arrays(glob), "config": ConfigRecord({"server-round": 1})}
        ),
        metadata=_metadata(0, 5),
    )
    context = Context(run_id=1, node_id=5, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(KeyError, match="partition-id"):
        app(msg, context)
    no_round = Message(
        content=RecordDict({"arrays": state_to_arrays(glob), "config": ConfigRecord()}),
        metadata=_metadata(0, 5),
    )
    with pytest.raises(ValueError, match="server-round"):
        app(no_round, context)


# --------------------------------------------------------------------------- whole federation


def test_server_app_with_in_memory_grid_matches_in_process_runner(task_identity, fake_grid):
    """ServerApp + ClientApp over a fake Grid (no Ray) reproduce the in-process runner exactly."""
    seed, rounds, num_clients = 3, 3, 3
    results: list[RunResult] = []
    evals: list[int] = []
    server_app = make_server_app(
        FedAvg(),
        {"w": np.zeros(3)},
        num_rounds=rounds,
        evaluate_fn=lambda state, r: (evals.append(r), {"norm": float(np.linalg.norm(state["w"]))})[
            1
        ],
        on_finish=results.append,
        min_available_nodes=num_clients,
    )
    client_app = make_client_app(toward_mean, load_partition, seed=seed)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    server_app(fake_grid(client_app, num_clients), context)

    (flower,) = results
    local = _in_process(num_clients, rounds, seed)
    _assert_states_close(flower.final_state, local.final_state)
    assert evals == list(range(rounds))
    assert [r.clients for r in flower.rounds] == [r.clients for r in local.rounds]
    assert [r.num_examples for r in flower.rounds] == [r.num_examples for r in local.rounds]
    assert flower.rounds[-1].eval["norm"] == pytest.approx(np.linalg.norm(local.final_state["w"]))
    assert flower.total_upload_bytes > 0


def test_failing_client_is_dropped_like_the_runner(task_identity, fake_grid):
    def flaky(global_state, data, cfg, rng):
        if len(data) == 15:  # partition 1
            raise RuntimeError("out of memory")
        return toward_mean(global_state, data, cfg, rng)

    results: list[RunResult] = []
    server_app = make_server_app(FedAvg(), {"w": np.zeros(3)}, 2, on_finish=results.append)
    client_app = make_client_app(flaky, load_partition, seed=0)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    server_app(fake_grid(client_app, 3), context)

    runner = InProcessRunner(rounds=2, clients_per_round=None, seed=0)
    local = runner.run(
        {"w": np.zeros(3)}, flaky, FedAvg(), [load_partition(c, 3) for c in range(3)]
    )
    _assert_states_close(results[0].final_state, local.final_state)
    assert [r.clients for r in results[0].rounds] == [[0, 2], [0, 2]]
    assert all(list(r.dropped) == [101] for r in results[0].rounds)  # keyed by node id


@pytest.mark.flower
@pytest.mark.slow
# ray.init() warns about a future change of CUDA_VISIBLE_DEVICES handling (irrelevant on CPU)...
@pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning")
# ...and ray.shutdown() drops its daemons' Popen objects and /dev/null handles unclosed
# (ResourceWarnings from their __del__ at gc).
@pytest.mark.filterwarnings(r"ignore:unclosed file <_io.\w+ name='/dev/null':ResourceWarning")
@pytest.mark.filterwarnings(r"ignore:subprocess \d+ is still running:ResourceWarning")
def test_flower_simulation_matches_in_process_runner():
    """Flower's simulation engine (Ray), 2 supernodes x 2 rounds == InProcessRunner."""
    seed, rounds, num_clients = 11, 2, 2
    results: list[RunResult] = []
    server_app = make_server_app(
        FedAvg(), {"w": np.zeros(3)}, num_rounds=rounds, on_finish=results.append, timeout=900.0
    )
    client_app = make_client_app(toward_mean, load_partition, seed=seed)
    try:
        run_simulation(server_app, client_app, num_supernodes=num_clients)
    finally:
        import ray

        if ray.is_initialized():  # Flower shuts Ray down itself; be sure, and free the CPUs
            ray.shutdown()
        gc.collect()  # surface Ray's leaked handles inside this test, under its filters

    assert len(results) == 1, "the ServerApp did not finish"
    local = _in_process(num_clients, rounds, seed)
    _assert_states_close(results[0].final_state, local.final_state)
    assert [r.clients for r in results[0].rounds] == [[0, 1]] * rounds
