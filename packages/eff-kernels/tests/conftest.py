"""eff-kernels test settings: Triton kernels run interpreted (``TRITON_INTERPRET=1``) on CPU.

The package's loader (``eff_kernels._triton.kernels``) already interprets kernels for CPU tensors
and sets the variable around each launch; this fixture also sets it for the duration of every test
in this directory only (monkeypatch restores it), so nothing leaks into other packages' tests.
"""

import pytest


@pytest.fixture(autouse=True)
def _triton_interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def tiny_llama():
    """A 2-layer Llama with GQA (4 query heads, 2 KV heads) built from config, random weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)
