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
