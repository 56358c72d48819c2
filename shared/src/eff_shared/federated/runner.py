"""The federated protocol, FedAvg and the deterministic in-process runner.

Methods are two objects over state dicts (``Mapping[str, array]`` whose values are numpy arrays
or torch tensors; only arithmetic both support is used here, so the core needs no torch):

* ``client_update(global_state, data, cfg, rng) -> (update_state, num_examples, metrics)``
* an aggregator with ``aggregate(global_state, replies, round_idx) -> new_global_state``
  where ``replies`` is a list of ``(update_state, num_examples)``.

Updates may be full states or deltas; the aggregator owns the interpretation (``FedAvg(delta=True)``
adds the weighted mean delta to the global state).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from eff_shared.errors import check_positive, check_type
from eff_shared.progress import track
from eff_shared.seeding import make_rng

__all__ = [
    "CLIENT_STREAM",
    "Aggregator",
    "ClientUpdate",
    "CommRecord",
    "FedAvg",
    "InProcessRunner",
    "RoundRecord",
    "RunResult",
    "check_reply",
    "copy_state",
    "state_nbytes",
    "weighted_mean",
]

log = logging.getLogger("eff_shared.federated")

State = dict[str, Any]
Reply = tuple[Mapping[str, Any], int]

# Stream ids under the master seed: one for client sampling, one per (round, client).
_SAMPLING_STREAM = 0
CLIENT_STREAM = 1


class ClientUpdate(Protocol):
    def __call__(
        self, global_state: State, data: Any, cfg: Any, rng: np.random.Generator
    ) -> tuple[Mapping[str, Any], int, Mapping[str, Any]]: ...


@runtime_checkable
class Aggregator(Protocol):
    def aggregate(self, global_state: State, replies: list[Reply], round_idx: int) -> State: ...


def _is_floating(value: Any) -> bool:
    if hasattr(value, "is_floating_point"):  # torch tensor
        return bool(value.is_floating_point())
    return np.issubdtype(np.asarray(value).dtype, np.inexact)


def _cast_like(value: Any, like: Any) -> Any:
    """Round back to ``like``'s integer dtype (e.g. BatchNorm's ``num_batches_tracked``)."""
    if _is_floating(like):
        return value
    if hasattr(like, "is_floating_point"):
        return value.round().to(like.dtype)
    return np.rint(value).astype(np.asarray(like).dtype)


def copy_state(state: Mapping[str, Any]) -> State:
    """A deep copy of a state dict of numpy arrays or torch tensors."""
    return {
        k: v.clone() if hasattr(v, "clone") else np.array(v, copy=True) for k, v in state.items()
    }


def state_nbytes(state: Mapping[str, Any]) -> int:
    """Bytes needed to transmit ``state`` (raw tensor payloads)."""
    total = 0
    for v in state.values():
        if hasattr(v, "element_size"):  # torch tensor
            total += v.element_size() * v.numel()
        else:
            total += np.asarray(v).nbytes
    return total


def weighted_mean(states: Sequence[Mapping[str, Any]], weights: Sequence[float]) -> State:
    """Σ_i w_i·s_i / Σ_i w_i per key, over the keys of the first state."""
    if not states:
        raise ValueError("weighted_mean needs at least one state")
    if len(states) != len(weights):
        raise ValueError(f"got {len(states)} states but {len(weights)} weights")
    total = float(sum(weights))
    if not total > 0:
        raise ValueError(f"weights must sum to a positive number, got {total}")
    keys = list(states[0])
    for s in states[1:]:
        if set(s) != set(keys):
            raise ValueError(f"states disagree on keys: {sorted(set(s) ^ set(keys))}")
    out: State = {}
    for k in keys:
        acc = sum((float(w) / total) * s[k] for s, w in zip(states, weights, strict=True))
        out[k] = _cast_like(acc, states[0][k])
    return out


class FedAvg:
    """Federated averaging (McMahan et al., 2017): the sample-size-weighted mean of client states.

    With ``delta=True`` clients send ``local - global`` and the new global state is
    ``global + Σ_k (n_k/n) Δ_k``. Keys a client does not send are kept from the global state.
    """

    def __init__(self, delta: bool = False) -> None:
        check_type("delta", delta, bool)
        self.delta = delta

    def aggregate(self, global_state: State, replies: list[Reply], round_idx: int) -> State:
        if not replies:
            raise ValueError("FedAvg.aggregate needs at least one reply")
        mean = weighted_mean([s for s, _ in replies], [n for _, n in replies])
        new = dict(global_state)
        for k, v in mean.items():
            if self.delta:
                new[k] = _cast_like(global_state[k] + v, global_state[k])
            else:
                new[k] = v
        return new


@dataclass
class CommRecord:
    round: int
    client: int
    download_bytes: int
    upload_bytes: int


@dataclass
class RoundRecord:
    round: int
    clients: list[int]
    num_examples: dict[int, int] = field(default_factory=dict)
    client_metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    dropped: dict[int, str] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    """What ``InProcessRunner.run`` returns: per-round records, the final state, communication log."""

    rounds: list[RoundRecord]
    final_state: State
    comm: list[CommRecord]

    @property
    def total_upload_bytes(self) -> int:
        return sum(c.upload_bytes for c in self.comm)

    @property
    def total_download_bytes(self) -> int:
        return sum(c.download_bytes for c in self.comm)

    def history(self, metric: str) -> list[Any]:
        """The value of an evaluation metric after each round (``None`` where absent)."""
        return [r.eval.get(metric) for r in self.rounds]

    def summary(self) -> dict[str, Any]:
        """A JSON-serialisable summary (everything but the final state)."""

        def plain(v: Any) -> Any:
            return v.item() if hasattr(v, "item") and getattr(v, "ndim", 0) == 0 else v

        return {
            "rounds": [
                {
                    "round": r.round,
                    "clients": [int(c) for c in r.clients],
                    "num_examples": {str(k): int(v) for k, v in r.num_examples.items()},
                    "client_metrics": {
                        str(k): {m: plain(v) for m, v in ms.items()}
                        for k, ms in r.client_metrics.items()
                    },
                    "dropped": {str(k): v for k, v in r.dropped.items()},
                    "eval": {k: plain(v) for k, v in r.eval.items()},
                }
                for r in self.rounds
            ],
            "comm": [vars(c) for c in self.comm],
            "total_upload_bytes": self.total_upload_bytes,
            "total_download_bytes": self.total_download_bytes,
        }


PreLocalTrain = Callable[[State, int, np.random.Generator], State | None]
EvaluateFn = Callable[[State, int], Mapping[str, Any]]


class InProcessRunner:
    """A deterministic single-process federation; used by every test and reproduction.

    Each round it samples ``clients_per_round`` clients from a seeded stream, hands each its own
    copy of the global state and its own generator derived from ``(seed, round, client)``, calls
    ``pre_local_train(state, round_idx, rng)`` on that copy (it may modify it in place or return a
    new state), runs ``client_update``, aggregates and optionally evaluates. A client whose hook or
    update raises is dropped from that round and logged; the round goes on with the others (if
    every client fails, the global state is kept).
    """

    def __init__(
        self,
        rounds: int,
        clients_per_round: int | None,
        seed: int,
        *,
        pre_local_train: PreLocalTrain | None = None,
        evaluate_fn: EvaluateFn | None = None,
    ) -> None:
        check_positive("rounds", rounds, integer=True)
        if clients_per_round is not None:
            check_positive("clients_per_round", clients_per_round, integer=True)
        check_positive("seed", seed, strict=False, integer=True)
        self.rounds = rounds
        self.clients_per_round = clients_per_round
        self.seed = seed
        self.pre_local_train = pre_local_train
        self.evaluate_fn = evaluate_fn

    def sample_clients(self, round_idx: int, n_clients: int) -> list[int]:
        """The clients of one round (sorted); all of them when ``clients_per_round`` is ``None``."""
        k = n_clients if self.clients_per_round is None else self.clients_per_round
        if k > n_clients:
            raise ValueError(f"clients_per_round={k} exceeds the number of clients ({n_clients})")
        if k == n_clients:
            return list(range(n_clients))
        rng = make_rng(self.seed, _SAMPLING_STREAM, round_idx)
        return sorted(int(c) for c in rng.choice(n_clients, size=k, replace=False))

    def client_rng(self, round_idx: int, client: int) -> np.random.Generator:
        return make_rng(self.seed, CLIENT_STREAM, round_idx, client)

    def run(
        self,
        initial_state: Mapping[str, Any],
        client_update: ClientUpdate,
        aggregator: Aggregator,
        client_data: Sequence[Any],
        cfg: Any = None,
    ) -> RunResult:
        if not callable(client_update):
            raise TypeError("client_update must be callable")
        if not isinstance(aggregator, Aggregator):
            raise TypeError(
                f"aggregator must have an aggregate() method, got {type(aggregator).__name__}"
            )
        if len(client_data) == 0:
            raise ValueError("client_data must hold at least one client")
        global_state: State = dict(initial_state)
        records: list[RoundRecord] = []
        comm: list[CommRecord] = []
        for r in track(range(self.rounds), "federation (rounds)"):
            record = RoundRecord(round=r, clients=self.sample_clients(r, len(client_data)))
            replies: list[Reply] = []
            down = state_nbytes(global_state)
            for c in record.clients:
                rng = self.client_rng(r, c)
                try:
                    local = copy_state(global_state)
                    if self.pre_local_train is not None:
                        hooked = self.pre_local_train(local, r, rng)
                        local = local if hooked is None else dict(hooked)
                    reply = client_update(local, client_data[c], cfg, rng)
                except Exception as exc:  # a failing client must not stop the federation
                    log.warning("round %d: client %d raised %r and is dropped", r, c, exc)
                    record.dropped[c] = repr(exc)
                    comm.append(CommRecord(r, c, down, 0))
                    continue
                update, n, metrics = check_reply(reply, c)
                replies.append((update, n))
                record.num_examples[c] = n
                record.client_metrics[c] = dict(metrics)
                comm.append(CommRecord(r, c, down, state_nbytes(update)))
            if replies:
                global_state = aggregator.aggregate(global_state, replies, r)
            else:
                log.warning("round %d: every selected client failed; the global state is kept", r)
            if self.evaluate_fn is not None:
                record.eval = dict(self.evaluate_fn(global_state, r))
            records.append(record)
        return RunResult(rounds=records, final_state=global_state, comm=comm)


def check_reply(reply: Any, client: int) -> tuple[Mapping[str, Any], int, Mapping[str, Any]]:
    """A client update's reply ``(state, num_examples, metrics)`` checked (``TypeError`` /
    ``ValueError`` naming the client), as every runner reads it."""
    if not (isinstance(reply, tuple) and len(reply) == 3):
        raise TypeError(
            f"client_update must return (update_state, num_examples, metrics); client {client} "
            f"returned {type(reply).__name__}"
        )
    update, n, metrics = reply
    if not isinstance(update, Mapping):
        raise TypeError(
            f"client {client}: update_state must be a mapping, got {type(update).__name__}"
        )
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise TypeError(f"client {client}: num_examples must be a non-negative int, got {n!r}")
    if not isinstance(metrics, Mapping):
        raise TypeError(f"client {client}: metrics must be a mapping, got {type(metrics).__name__}")
    return update, int(n), metrics
