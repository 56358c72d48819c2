"""Run eff's federated methods on a real Flower federation (extra ``flower``).

The same two objects that drive the :class:`~eff_shared.federated.runner.InProcessRunner` drive
Flower (``flwr>=1.42``, message API):

* :func:`to_flower_strategy` wraps an eff aggregator in a subclass of
  ``flwr.serverapp.strategy.FedAvg`` whose ``aggregate_train`` calls ``aggregator.aggregate``;
* :func:`make_client_app` wraps ``client_update`` and a data loader in a ``flwr.clientapp.ClientApp``;
* :func:`make_server_app` builds a ``flwr.serverapp.ServerApp`` that runs the strategy.

States travel as ``ArrayRecord`` (keys kept, numpy payloads); clients receive numpy arrays. Round
and client numbering match the in-process runner: Flower's ``server_round`` is 1-based, eff's
``round_idx`` is ``server_round - 1``, and the client of partition ``c`` draws its randomness from
``make_rng(seed, 1, round_idx, c)``, so a Flower run where every partition takes part in every round
reproduces ``InProcessRunner(clients_per_round=None)`` up to float summation order (the strategy
orders replies by partition id, so in practice the results are identical).

Real deployments use ``flwr run`` with the apps declared in the project's ``pyproject.toml``::

    [tool.flwr.app.components]
    serverapp = "my_pkg.app:server_app"   # = make_server_app(...)
    clientapp = "my_pkg.app:client_app"   # = make_client_app(...)

:func:`run_simulation` is a convenience for tests and notebooks: it calls Flower's in-process
``flwr.simulation.run_simulation`` (Ray backend; deprecated by Flower in favour of ``flwr run``).
Flower sends anonymous usage telemetry unless ``FLWR_TELEMETRY_ENABLED=0`` is set before it is
imported.

Importing this module without Flower installed raises ``ImportError``; nothing else in
``eff_shared`` imports ``flwr``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

try:
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg as _FlowerFedAvg
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'eff_shared.federated.flower needs Flower (flwr>=1.42): pip install "eff-shared[flower]"'
    ) from exc

from eff_shared.errors import check_positive
from eff_shared.federated.runner import (
    CLIENT_STREAM,
    Aggregator,
    ClientUpdate,
    CommRecord,
    EvaluateFn,
    PreLocalTrain,
    RoundRecord,
    RunResult,
    check_reply,
    state_nbytes,
)
from eff_shared.seeding import make_rng

__all__ = [
    "EffFlowerStrategy",
    "arrays_to_state",
    "make_client_app",
    "make_server_app",
    "run_simulation",
    "state_to_arrays",
    "to_flower_strategy",
]

log = logging.getLogger("eff_shared.federated")

State = dict[str, Any]
LoadPartition = Callable[[int, int], Any]

#: Record keys of the messages the bridge exchanges (Flower's defaults for the first two).
ARRAYS_KEY = "arrays"
METRICS_KEY = "metrics"
CONFIG_KEY = "config"
#: A ``ConfigRecord`` in each train reply naming the client (``{"partition-id": c}``).
CLIENT_KEY = "client"
NUM_EXAMPLES_KEY = "num-examples"
SERVER_ROUND_KEY = "server-round"


# --------------------------------------------------------------------------- conversions


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensor (bfloat16 has no numpy dtype: cast it first)
        return value.detach().cpu().numpy()
    return np.asarray(value)


def state_to_arrays(state: Mapping[str, Any]) -> ArrayRecord:
    """An ``ArrayRecord`` holding ``state`` (numpy arrays or torch tensors), keys kept."""
    return ArrayRecord(
        {str(k): Array(np.ascontiguousarray(_to_numpy(v))) for k, v in state.items()}
    )


def arrays_to_state(record: ArrayRecord) -> State:
    """The state dict (fresh, writable numpy arrays) held by an ``ArrayRecord``, keys kept."""
    return {k: arr.numpy() for k, arr in record.items()}


def _metric_value(value: Any) -> int | float | list[int] | list[float] | None:
    """``value`` as a ``MetricRecord`` value, or ``None`` if it is not numeric."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, list | tuple) and value:
        items = [_metric_value(v) for v in value]
        if any(v is None or isinstance(v, list) for v in items):
            return None
        if all(isinstance(v, int) for v in items):
            return [int(v) for v in items]  # type: ignore[arg-type]
        return [float(v) for v in items]  # type: ignore[arg-type]
    return None


def _metric_record(metrics: Mapping[str, Any]) -> MetricRecord:
    """The numeric entries of ``metrics`` as a ``MetricRecord`` (others are dropped)."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        mv = _metric_value(v)
        if mv is None:
            log.debug("metric %r is not numeric and is not sent through Flower", k)
        else:
            out[str(k)] = mv
    return MetricRecord(out)


def _single(records: Mapping[str, Any], key: str, what: str) -> Any:
    if key in records:
        return records[key]
    if len(records) == 1:
        return next(iter(records.values()))
    raise ValueError(f"message content has no {what} under {key!r} (found {sorted(records)})")


# --------------------------------------------------------------------------- server side


class EffFlowerStrategy(_FlowerFedAvg):
    """Flower's ``FedAvg`` sampling and messaging with an eff aggregator doing the aggregation.

    Built by :func:`to_flower_strategy`. Besides what Flower's ``FedAvg`` does it keeps:

    * ``global_state``: the current global state as a dict of numpy arrays (taken from the
      ``arrays`` that ``Strategy.start`` passes to ``configure_train``, then the aggregate);
    * ``rounds`` and ``comm``: the same per-round records as the in-process runner
      (``RoundRecord``/``CommRecord``, clients named by partition id; a failed client's error
      reply names no partition, so ``dropped`` is keyed by node id); :meth:`run_result` packs
      them into a :class:`~eff_shared.federated.runner.RunResult`.
    """

    def __init__(
        self,
        aggregator: Aggregator,
        *,
        initial_state: Mapping[str, Any] | None = None,
        **fedavg_kwargs: Any,
    ) -> None:
        if not isinstance(aggregator, Aggregator):
            raise TypeError(
                f"aggregator must have an aggregate() method, got {type(aggregator).__name__}"
            )
        # The bridge's client app only trains; skip Flower's client-side evaluation unless asked.
        fedavg_kwargs.setdefault("fraction_evaluate", 0.0)
        super().__init__(**fedavg_kwargs)
        self.aggregator = aggregator
        self.global_state: State | None = (
            None
            if initial_state is None
            else {k: _to_numpy(v).copy() for k, v in initial_state.items()}
        )
        self.rounds: list[RoundRecord] = []
        self.comm: list[CommRecord] = []
        self._last_aggregate: ArrayRecord | None = None

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Record the global state being sent, then sample nodes and build messages as FedAvg.

        ``Strategy.start`` passes the current global arrays here (``initial_arrays`` in round 1,
        the previous aggregate afterwards); ``aggregate_train`` receives only the replies.
        """
        if arrays is not self._last_aggregate:  # else global_state already is this aggregate
            self.global_state = arrays_to_state(arrays)
        config[SERVER_ROUND_KEY] = server_round  # Flower's FedAvg sets it too; clients need it
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate the train replies of round ``server_round`` (1-based) with the eff aggregator.

        Replies carrying an error (a failed client) are dropped and logged, as the in-process
        runner drops a client that raises; if none is left the global state is kept
        (``(None, None)`` is returned). The others are ordered by partition id and passed as
        ``[(state, num_examples), ...]`` to ``aggregator.aggregate(global_state, replies,
        server_round - 1)``. Returns the new global state as an ``ArrayRecord`` and the
        example-weighted mean of the clients' numeric metrics as a ``MetricRecord``.
        """
        round_idx = server_round - 1
        if self.global_state is None:
            raise RuntimeError(
                "the strategy does not know the global state: pass initial_state or let "
                "Strategy.start() call configure_train first"
            )
        down = state_nbytes(self.global_state)
        record = RoundRecord(round=round_idx, clients=[])
        parsed: list[tuple[tuple[int, int], int, State, int, Message]] = []
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            if msg.has_error():
                reason = msg.error.reason
                log.warning("round %d: node %d failed and is dropped: %s", round_idx, node, reason)
                record.dropped[node] = str(reason)
                self.comm.append(CommRecord(round_idx, node, down, 0))
                continue
            client, state, n = self._parse_reply(msg)
            parsed.append(((client, node), client, state, n, msg))
        parsed.sort(key=lambda p: p[0])
        for _, client, state, n, msg in parsed:
            record.clients.append(client)
            record.num_examples[client] = n
            sent = _single(msg.content.metric_records, METRICS_KEY, "MetricRecord")
            record.client_metrics[client] = {
                k: v for k, v in sent.items() if k != self.weighted_by_key
            }
            self.comm.append(CommRecord(round_idx, client, down, state_nbytes(state)))
        self.rounds.append(record)
        if not parsed:
            log.warning(
                "round %d: every selected client failed; the global state is kept", round_idx
            )
            return None, None
        new_state = self.aggregator.aggregate(
            self.global_state, [(state, n) for _, _, state, n, _ in parsed], round_idx
        )
        self.global_state = {k: _to_numpy(v) for k, v in new_state.items()}
        arrays = state_to_arrays(self.global_state)
        self._last_aggregate = arrays
        metrics = self.train_metrics_aggr_fn([p[4].content for p in parsed], self.weighted_by_key)
        return arrays, metrics

    def _parse_reply(self, msg: Message) -> tuple[int, State, int]:
        content = msg.content
        state = arrays_to_state(_single(content.array_records, self.arrayrecord_key, "ArrayRecord"))
        metrics = _single(content.metric_records, METRICS_KEY, "MetricRecord")
        if self.weighted_by_key not in metrics:
            raise ValueError(
                f"train reply from node {msg.metadata.src_node_id} has no {self.weighted_by_key!r} metric"
            )
        n = metrics[self.weighted_by_key]
        if isinstance(n, list) or n < 0 or float(n) != int(n):
            raise ValueError(f"{self.weighted_by_key!r} must be a non-negative integer, got {n!r}")
        info = content.config_records.get(CLIENT_KEY)
        client = int(info["partition-id"]) if info is not None and "partition-id" in info else -1
        if client < 0:  # not one of our client apps: name it by its node id
            client = int(msg.metadata.src_node_id)
        return client, state, int(n)

    def run_result(self) -> RunResult:
        """The records of the rounds run so far and the current global state."""
        if self.global_state is None:
            raise RuntimeError("no global state yet")
        return RunResult(
            rounds=list(self.rounds), final_state=dict(self.global_state), comm=list(self.comm)
        )


def to_flower_strategy(
    aggregator: Aggregator,
    *,
    initial_state: Mapping[str, Any] | None = None,
    **fedavg_kwargs: Any,
) -> EffFlowerStrategy:
    """A Flower strategy (subclass of ``flwr.serverapp.strategy.FedAvg``) aggregating with ``aggregator``.

    Node sampling, message construction and ``start()`` are Flower's ``FedAvg``; ``aggregate_train``
    calls ``aggregator.aggregate(global_state, [(state, num_examples), ...], server_round - 1)``
    (see :class:`EffFlowerStrategy`). ``fedavg_kwargs`` go to Flower's ``FedAvg``
    (``fraction_train``, ``min_train_nodes``, ``min_available_nodes``, ...); ``fraction_evaluate``
    defaults to 0 because :func:`make_client_app` registers no evaluate handler. ``initial_state``
    is needed only when ``aggregate_train`` is called without ``start()``/``configure_train``.

    Use it in a ``ServerApp`` main (or take :func:`make_server_app`); deploy with ``flwr run`` and
    ``[tool.flwr.app.components]``.
    """
    return EffFlowerStrategy(aggregator, initial_state=initial_state, **fedavg_kwargs)


def make_server_app(
    aggregator: Aggregator,
    initial_state: Mapping[str, Any],
    num_rounds: int,
    evaluate_fn: EvaluateFn | None = None,
    *,
    on_finish: Callable[[RunResult], None] | None = None,
    train_config: Mapping[str, Any] | None = None,
    timeout: float = 3600.0,
    **strategy_kwargs: Any,
) -> ServerApp:
    """A ``ServerApp`` whose main runs :func:`to_flower_strategy` for ``num_rounds`` rounds.

    ``evaluate_fn(global_state, round_idx)`` is the in-process runner's evaluation hook, called
    after each round (its numeric results become Flower's server-side evaluation metrics and the
    ``eval`` of that round's record). ``train_config`` entries are sent to every client with each
    train message (next to ``server-round``). ``on_finish`` receives the run as a
    :class:`~eff_shared.federated.runner.RunResult` (per-round records, final state, communication
    log) when the strategy ends; in a ``flwr run`` deployment the ServerApp runs in its own
    process, so save results from there. ``strategy_kwargs`` go to :func:`to_flower_strategy`.

    To train every node in every round (as :class:`InProcessRunner` does), pass
    ``min_available_nodes=n`` and ``min_train_nodes=n``: Flower's ``FedAvg`` samples as soon as
    ``min_available_nodes`` (default 2) nodes have connected, so a node that connects later misses
    that round.

    Deploy with ``flwr run`` and ``[tool.flwr.app.components] serverapp = "pkg.mod:server_app"``.
    """
    check_positive("num_rounds", num_rounds, integer=True)
    if evaluate_fn is not None and not callable(evaluate_fn):
        raise TypeError("evaluate_fn must be callable")
    initial = {k: _to_numpy(v).copy() for k, v in initial_state.items()}
    config = dict(train_config or {})
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = to_flower_strategy(aggregator, **strategy_kwargs)

        def flower_eval(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            if server_round == 0 or evaluate_fn is None:  # the runner evaluates after rounds only
                return None
            assert strategy.global_state is not None
            metrics = dict(evaluate_fn(strategy.global_state, server_round - 1))
            if strategy.rounds and strategy.rounds[-1].round == server_round - 1:
                strategy.rounds[-1].eval = metrics
            return _metric_record(metrics)

        strategy.start(
            grid=grid,
            initial_arrays=state_to_arrays(initial),
            num_rounds=num_rounds,
            timeout=timeout,
            train_config=ConfigRecord(dict(config)),
            evaluate_fn=flower_eval if evaluate_fn is not None else None,
        )
        if on_finish is not None:
            on_finish(strategy.run_result())

    return app


# --------------------------------------------------------------------------- client side


def make_client_app(
    client_update: ClientUpdate,
    load_partition: LoadPartition,
    cfg: Any = None,
    seed: int = 0,
    *,
    pre_local_train: PreLocalTrain | None = None,
) -> ClientApp:
    """A ``ClientApp`` whose train handler runs ``client_update`` on this node's partition.

    For each train message it reads the global arrays as a dict of numpy arrays, takes the
    partition from ``context.node_config["partition-id"]`` and ``["num-partitions"]`` (set by the
    simulation engine; pass ``--node-config "partition-id=0 num-partitions=N"`` to a deployed
    SuperNode), loads ``data = load_partition(partition_id, num_partitions)`` (called every round:
    cache it yourself if loading is costly), derives ``rng = make_rng(seed, 1, round_idx,
    partition_id)`` with ``round_idx = server-round - 1`` from the message's config (the in-process
    runner's stream), applies ``pre_local_train`` as the runner does, calls ``client_update(state,
    data, cfg, rng)`` and replies with the update (``arrays``), a ``MetricRecord`` with
    ``num-examples`` and the numeric client metrics (``metrics``) and the partition id
    (``client``). Entries of the message's config other than ``server-round`` are ignored; a
    ``client_update`` that raises makes Flower send an error reply, which the strategy drops.

    Deploy with ``flwr run`` and ``[tool.flwr.app.components] clientapp = "pkg.mod:client_app"``.
    """
    if not callable(client_update):
        raise TypeError("client_update must be callable")
    if not callable(load_partition):
        raise TypeError("load_partition must be callable")
    check_positive("seed", seed, strict=False, integer=True)
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        content = msg.content
        global_state = arrays_to_state(_single(content.array_records, ARRAYS_KEY, "ArrayRecord"))
        config = _single(content.config_records, CONFIG_KEY, "ConfigRecord")
        if SERVER_ROUND_KEY not in config:
            raise ValueError(
                f"the train message's config has no {SERVER_ROUND_KEY!r}; serve it with to_flower_strategy"
            )
        round_idx = int(config[SERVER_ROUND_KEY]) - 1
        try:
            partition_id = int(context.node_config["partition-id"])
            num_partitions = int(context.node_config["num-partitions"])
        except KeyError as exc:
            raise KeyError(
                f"node_config lacks {exc.args[0]!r}; start the SuperNode with "
                '--node-config "partition-id=<c> num-partitions=<n>"'
            ) from exc
        data = load_partition(partition_id, num_partitions)
        rng = make_rng(seed, CLIENT_STREAM, round_idx, partition_id)
        local = global_state
        if pre_local_train is not None:
            hooked = pre_local_train(local, round_idx, rng)
            local = local if hooked is None else dict(hooked)
        update, n, metrics = check_reply(client_update(local, data, cfg, rng), partition_id)
        metric_record = _metric_record({k: v for k, v in metrics.items() if k != NUM_EXAMPLES_KEY})
        metric_record[NUM_EXAMPLES_KEY] = n
        reply = RecordDict(
            {
                ARRAYS_KEY: state_to_arrays(update),
                METRICS_KEY: metric_record,
                CLIENT_KEY: ConfigRecord({"partition-id": partition_id}),
            }
        )
        return Message(reply, reply_to=msg)

    return app


# --------------------------------------------------------------------------- simulation


def run_simulation(
    server_app: ServerApp,
    client_app: ClientApp,
    num_supernodes: int,
    *,
    num_cpus: int = 2,
    client_num_cpus: int = 1,
    verbose_logging: bool = False,
) -> None:
    """Run ``server_app`` against ``num_supernodes`` simulated nodes in this process.

    Calls ``flwr.simulation.run_simulation`` with the Ray backend (Ray gets ``num_cpus`` CPUs and
    each client ``client_num_cpus``); Flower deprecates it in favour of ``flwr run``, which real
    deployments should use with ``[tool.flwr.app.components]``. Node ``c`` gets
    ``partition-id=c`` and ``num-partitions=num_supernodes``. Get results out through
    :func:`make_server_app`'s ``on_finish``. Start-up (Ray) takes tens of seconds.
    """
    check_positive("num_supernodes", num_supernodes, integer=True)
    check_positive("num_cpus", num_cpus, integer=True)
    check_positive("client_num_cpus", client_num_cpus, integer=True)
    from flwr.simulation import run_simulation as _flower_run_simulation

    _flower_run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=num_supernodes,
        backend_config={
            "client_resources": {"num_cpus": client_num_cpus},
            "init_args": {"num_cpus": num_cpus},
        },
        verbose_logging=verbose_logging,
    )
