import pytest

from eff_llm.smore import SMoREConfig, get_smore_model

CFG = SMoREConfig(num_experts=[2, 2], num_active=[1, 1], expert_ranks=[2, 2])


def test_get_smore_model_needs_a_module_and_a_config():
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module.*got str"):
        get_smore_model("llama", CFG)  # type: ignore[arg-type]
    import torch

    with pytest.raises(TypeError, match="config must be an SMoREConfig, got dict"):
        get_smore_model(torch.nn.Linear(4, 4), {"rank": 2})  # type: ignore[arg-type]
