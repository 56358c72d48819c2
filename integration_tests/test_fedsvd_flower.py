"""FedSVD (eff-llm) through the Flower bridge of eff-shared: same aggregates as the in-process
runtime for fixed replies, and one real Flower simulation round."""

from __future__ import annotations

import gc
import os
import time

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no usage telemetry (and no network)

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Message, MessageType, Metadata, MetricRecord, RecordDict

from eff_llm._lora import lora_state
from eff_llm._lowrank_task import lora_model, make_lowrank_task
from eff_llm.fedsvd import FedSVDAggregator, make_dp_lora_client
from eff_shared.federated import InProcessRunner
from eff_shared.federated.flower import (
    make_client_app,
    make_server_app,
    run_simulation,
    state_to_arrays,
    to_flower_strategy,
)

KEY = "base_model.model.proj"


def _reply(state, n: int, node: int) -> Message:
    meta = Metadata(
        run_id=1,
        message_id=f"{node}->0",
        src_node_id=node,
        dst_node_id=0,
        reply_to_message_id="",
        group_id="",
        created_at=time.time(),
        ttl=3600.0,
        message_type=MessageType.TRAIN,
    )
    content = RecordDict(
        {"arrays": state_to_arrays(state), "metrics": MetricRecord({"num-examples": n})}
    )
    return Message(content=content, metadata=meta)


def test_fedsvd_round_is_identical_in_process_and_through_the_flower_strategy():
    g = torch.Generator().manual_seed(0)
    glob = {
        f"{KEY}.lora_A.weight": torch.randn(4, 64, generator=g),
        f"{KEY}.lora_B.weight": torch.randn(32, 4, generator=g),
    }
    replies = [
        ({f"{KEY}.lora_B.weight": 0.1 * torch.randn(32, 4, generator=g)}, n) for n in (30, 50, 20)
    ]
    ours = FedSVDAggregator().aggregate(dict(glob), replies, 0)
    strategy = to_flower_strategy(
        FedSVDAggregator(), initial_state={k: v.numpy() for k, v in glob.items()}
    )
    record, _ = strategy.aggregate_train(
        1,
        [
            _reply({k: v.numpy() for k, v in s.items()}, n, i + 1)
            for i, (s, n) in enumerate(replies)
        ],
    )
    theirs = {k: np.asarray(v.numpy()) for k, v in record.items()}
    for k in ours:
        np.testing.assert_allclose(theirs[k], ours[k].numpy(), rtol=0, atol=1e-6, err_msg=k)


@pytest.mark.flower
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning")
@pytest.mark.filterwarnings(r"ignore:unclosed file <_io.\w+ name='/dev/null':ResourceWarning")
@pytest.mark.filterwarnings(r"ignore:subprocess \d+ is still running:ResourceWarning")
def test_one_fedsvd_round_on_a_flower_simulation_matches_the_in_process_runner():
    task = make_lowrank_task(0, n_train=400, n_test=100)
    parts = [np.arange(0, 200), np.arange(200, 400)]
    model = lora_model(task, 4, 0)
    client = make_dp_lora_client(
        model, "fedsvd", sigma=0.5, max_grad_norm=1.0, lr=0.5, steps=2, batch_size=32
    )
    init = lora_state(model)

    def load_partition(pid: int, n: int):
        return task.x_train[parts[pid]], task.y_train[parts[pid]]

    results = []
    server = make_server_app(
        FedSVDAggregator(), init, num_rounds=1, on_finish=results.append, timeout=900.0
    )
    try:
        run_simulation(server, make_client_app(client, load_partition, seed=5), num_supernodes=2)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        gc.collect()
    assert len(results) == 1, "the ServerApp did not finish"
    local = InProcessRunner(1, None, 5).run(
        dict(init), client, FedSVDAggregator(), [load_partition(0, 2), load_partition(1, 2)]
    )
    for k, v in local.final_state.items():
        np.testing.assert_allclose(
            np.asarray(results[0].final_state[k]), v.numpy(), rtol=0, atol=1e-5, err_msg=k
        )
