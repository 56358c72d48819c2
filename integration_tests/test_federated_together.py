"""One federated runtime, two domains: FedSVD (eff-llm) and FedPhoenix (eff-vision).

Each method runs a short federation through ``eff_shared.federated.InProcessRunner`` and through
the Flower bridge (``make_server_app`` / ``make_client_app``): over an in-process grid with a client
that raises (dropped the same way by both), and on Flower's simulation engine (slow). The final
global states must agree; FedPhoenix's reset goes through the same ``pre_local_train`` hook in both.
Only public names of the two packages are used.
"""

from __future__ import annotations

import gc
import itertools
import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no usage telemetry (and no network)

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from eff_llm.fedsvd import FedSVDAggregator, lora_state, make_dp_lora_client
from eff_shared.federated import FedAvg, InProcessRunner, dirichlet_partition
from eff_shared.federated.flower import make_client_app, make_server_app, run_simulation
from eff_shared.torch import torch_generator
from eff_vision.data.digits import digits_splits
from eff_vision.fedphoenix import PhoenixReset, phoenix_pre_local_train

N_CLIENTS = 3


# --------------------------------------------------------------------------- FedSVD (eff-llm)


def _fedsvd():
    """A peft LoRA classifier, its DP client update and three client datasets."""
    from peft import LoraConfig, get_peft_model

    g = torch.Generator().manual_seed(0)
    x = torch.randn(360, 16, generator=g)
    y = (x[:, :4] @ torch.randn(4, 3, generator=g)).argmax(-1)
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=4, target_modules=["0"]))
    client = make_dp_lora_client(
        model, "fedsvd", sigma=0.5, max_grad_norm=1.0, lr=0.5, steps=3, batch_size=32
    )
    bounds = [0, 100, 220, 360]  # unequal sizes: the weights of the average matter
    data = [(x[a:b], y[a:b]) for a, b in itertools.pairwise(bounds)]
    return lora_state(model), client, FedSVDAggregator(), data, None


# --------------------------------------------------------------------------- FedPhoenix (eff-vision)


class _DigitsCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc(x.flatten(1))


def _local_sgd(global_state, data, cfg, rng):
    model = _DigitsCNN()
    model.load_state_dict({k: torch.as_tensor(v) for k, v in global_state.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = data
    gen = torch_generator(rng)
    for batch in torch.randperm(len(x), generator=gen).split(16):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, len(x), {}


def _fedphoenix():
    """Digits split over three clients (Dirichlet), local SGD, the stair reset as the hook."""
    ((x, y),) = digits_splits((300,), seed=0)
    parts = dirichlet_partition(y.numpy(), N_CLIENTS, 0.5, seed=0, min_size=20)
    data = [(x[p], y[p]) for p in parts]
    torch.manual_seed(0)
    init = {k: v.clone() for k, v in _DigitsCNN().state_dict().items()}
    hook = phoenix_pre_local_train(_DigitsCNN(), PhoenixReset(theta=0.25, stop_round=10))
    return init, _local_sgd, FedAvg(), data, hook


DOMAINS = {"fedsvd": _fedsvd, "fedphoenix": _fedphoenix}


def _flaky(update, bad_size: int):
    def client_update(global_state, data, cfg, rng):
        if len(data[0]) == bad_size:
            raise RuntimeError("client out of memory")
        return update(global_state, data, cfg, rng)

    return client_update


def _assert_same_states(a, b, atol):
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_allclose(
            np.asarray(a[k], dtype=np.float64),
            np.asarray(torch.as_tensor(b[k]), dtype=np.float64),
            rtol=0,
            atol=atol,
            err_msg=k,
        )


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_same_aggregates_in_process_and_through_flower_and_a_failing_client_is_dropped(
    domain, task_identity, fake_grid
):
    init, update, aggregator, data, hook = DOMAINS[domain]()
    rounds, bad = 2, len(data[1][0])
    flaky = _flaky(update, bad)

    local = InProcessRunner(rounds, None, seed=7, pre_local_train=hook).run(
        {k: v.clone() for k, v in init.items()}, flaky, aggregator, data
    )
    assert all(list(r.dropped) == [1] for r in local.rounds), "the runner must drop client 1"
    assert all(sorted(r.num_examples) == [0, 2] for r in local.rounds)

    results = []
    init2, _, aggregator2, _, hook2 = DOMAINS[domain]()
    server = make_server_app(aggregator2, init2, rounds, on_finish=results.append)
    client_app = make_client_app(flaky, lambda pid, n: data[pid], seed=7, pre_local_train=hook2)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    server(fake_grid(client_app, len(data)), context)

    (flower,) = results
    assert all(len(r.dropped) == 1 for r in flower.rounds), "Flower must drop the raising client"
    assert [sorted(r.num_examples.values()) for r in flower.rounds] == [
        sorted(r.num_examples.values()) for r in local.rounds
    ]
    _assert_same_states(flower.final_state, local.final_state, atol=1e-5)
    moved = max(float((torch.as_tensor(local.final_state[k]) - init[k]).abs().max()) for k in init)
    assert moved > 1e-3, "the federation did not change the global state"


@pytest.mark.flower
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning")
@pytest.mark.filterwarnings(r"ignore:unclosed file <_io.\w+ name='/dev/null':ResourceWarning")
@pytest.mark.filterwarnings(r"ignore:subprocess \d+ is still running:ResourceWarning")
def test_fedphoenix_on_a_flower_simulation_matches_the_in_process_runner():
    # FedSVD's simulation run is integration_tests/test_fedsvd_flower.py
    init, update, aggregator, data, hook = _fedphoenix()
    results = []
    # every node in every round, as the in-process runner: Flower's FedAvg samples as soon as
    # min_available_nodes (default 2) have connected, so a slow third node would miss round 1
    n = len(data)
    server = make_server_app(aggregator, init, 2, on_finish=results.append, timeout=900.0,
                             min_available_nodes=n, min_train_nodes=n)  # fmt: skip
    client_app = make_client_app(update, lambda pid, n: data[pid], seed=3, pre_local_train=hook)
    try:
        run_simulation(server, client_app, num_supernodes=len(data))
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        gc.collect()
    assert len(results) == 1, "the ServerApp did not finish"
    init2, _, _, _, hook2 = _fedphoenix()
    local = InProcessRunner(2, None, seed=3, pre_local_train=hook2).run(
        init2, update, FedAvg(), data
    )
    _assert_same_states(results[0].final_state, local.final_state, atol=1e-5)
