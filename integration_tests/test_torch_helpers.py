"""`eff_shared.torch` and the federated runner on torch state dicts (needs a torch package installed)."""

import numpy as np
import pytest
import torch
from torch import nn

from eff_shared.federated import FedAvg, InProcessRunner
from eff_shared.torch import (
    choose_device,
    choose_dtype,
    count_parameters,
    model_hook,
    numpy_to_state,
    state_to_numpy,
    torch_generator,
)


def test_choose_device_and_dtype():
    assert choose_device("cpu") == torch.device("cpu")
    assert choose_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        choose_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            choose_device("cuda")
        assert choose_dtype("auto") == torch.float32
    assert choose_dtype("bfloat16") == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        choose_dtype("float8")


def test_count_parameters_counts_shared_tensors_once():
    lin = nn.Linear(4, 3)
    model = nn.Sequential(lin, nn.ReLU(), lin, nn.Linear(3, 2))
    assert count_parameters(model) == 15 + 8
    model[3].weight.requires_grad_(False)
    assert count_parameters(model, trainable_only=True) == 15 + 2


def test_state_numpy_roundtrip_keeps_dtype_and_bf16():
    state = {"a": torch.randn(2, 3, dtype=torch.bfloat16), "n": torch.tensor(5)}
    arrays = state_to_numpy(state)
    assert arrays["a"].dtype == np.float32
    back = numpy_to_state(arrays, like=state)
    assert back["a"].dtype == torch.bfloat16 and torch.equal(back["a"], state["a"])
    assert back["n"].dtype == torch.int64


def test_torch_generator_is_reproducible():
    g1 = torch_generator(np.random.default_rng(0))
    g2 = torch_generator(np.random.default_rng(0))
    assert torch.equal(torch.rand(3, generator=g1), torch.rand(3, generator=g2))


def test_runner_fedavg_on_torch_states_with_a_model_hook():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    resets = []

    def reset_bias(m, round_idx, gen):  # a FedPhoenix-style in-place reset of the client's model
        resets.append(round_idx)
        with torch.no_grad():
            m.bias.copy_(torch.rand(1, generator=gen))

    def client_update(state, data, cfg, rng):
        return {"weight": state["weight"] + data, "bias": state["bias"]}, 1 + int(data), {}

    res = InProcessRunner(2, None, 0, pre_local_train=model_hook(model, reset_bias)).run(
        init, client_update, FedAvg(), [0.0, 1.0, 2.0]
    )
    assert resets == [0, 0, 0, 1, 1, 1]
    w = res.final_state["weight"]
    assert isinstance(w, torch.Tensor) and w.dtype == torch.float32
    # each round adds the weighted mean (1*0 + 2*1 + 3*2)/6 = 4/3 to the weight
    torch.testing.assert_close(w, init["weight"] + 8 / 3)
    assert 0.0 <= float(res.final_state["bias"]) <= 1.0
    assert res.comm[0].upload_bytes == 4 * 4


def test_threads_restores_the_previous_count_as_context_and_decorator():
    from eff_shared.torch import threads

    torch.set_num_threads(2)
    with threads(1):
        assert torch.get_num_threads() == 1
        with threads(3):
            assert torch.get_num_threads() == 3
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2

    @threads(1)
    def inside() -> int:
        return torch.get_num_threads()

    assert inside() == 1 and torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2
    for bad, exc in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="n must be"):
            threads(bad)


def test_seeded_forks_the_global_stream_and_derives_keyed_seeds():
    from eff_shared.seeding import derive_seed
    from eff_shared.torch import seeded, torch_generator

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with seeded(7):
        a = torch.rand(4)
    assert torch.equal(torch.rand(3), expected_next), "the caller's stream must be untouched"
    torch.manual_seed(7)
    assert torch.equal(a, torch.rand(4)), "seeded(s) without keys is manual_seed(s)"
    with seeded(7, 2, 5):
        b = torch.rand(4)
    torch.manual_seed(derive_seed(7, 2, 5))
    assert torch.equal(b, torch.rand(4)) and not torch.equal(a, b)

    @seeded(7)
    def draw() -> torch.Tensor:
        return torch.rand(4)

    assert torch.equal(draw(), a)
    assert torch.equal(
        torch.rand(2, generator=torch_generator(7)),
        torch.rand(2, generator=torch.Generator().manual_seed(7)),
    )
    g = torch_generator(7, 2, 5)
    assert torch.equal(torch.rand(4, generator=g), b)
    with pytest.raises(ValueError, match="keys"):
        torch_generator(np.random.default_rng(0), 1)
    with pytest.raises(ValueError, match="seed"):
        seeded(-1)
