"""The shared helpers of eff-llm's adapter reproductions (_models, _data, _adapters)."""

import pytest
import torch
from torch import nn

from eff_llm._adapters import find_target_modules
from eff_llm._data import (
    MINUS,
    PLUS,
    SEP,
    arithmetic_table,
    arithmetic_vocab,
    hierarchical_regression,
)
from eff_llm._models import last_token_accuracy, tiny_llama, tiny_qwen2, train_last_token


def test_arithmetic_tables():
    ids, labels = arithmetic_table("-")
    assert (
        ids.shape == (256, 4)
        and bool((ids[:, 1] == MINUS).all())
        and bool((ids[:, 3] == SEP).all())
    )
    a, b = ids[:, 0], ids[:, 2]
    assert torch.equal(labels, (a - b) % 16)
    ids, labels = arithmetic_table("+", with_op_token=False)
    assert ids.shape == (256, 3) and torch.equal(labels, (ids[:, 0] + ids[:, 1]) % 16)
    vocab = arithmetic_vocab(64)
    assert (
        vocab["+"] == PLUS
        and vocab["<sep>"] == SEP
        and len(vocab) == 64 == len(set(vocab.values()))
    )
    with pytest.raises(ValueError, match="op must be one of"):
        arithmetic_table("*")  # type: ignore[arg-type]


def test_tiny_models_are_seeded_and_token_zero_is_trainable():
    for maker in (tiny_llama, tiny_qwen2):
        a, b = maker(seed=1), maker(seed=1)
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
        assert a.get_input_embeddings().padding_idx is None
    with pytest.raises(ValueError, match="num_kv_heads=3"):
        tiny_llama(num_kv_heads=3)


def test_training_is_deterministic_and_learns():
    ids, labels = arithmetic_table("+")
    runs = []
    for _ in range(2):
        model = tiny_llama(seed=0)
        runs.append(train_last_token(model, ids, labels, steps=30, lr=3e-3, seed=4))
    assert runs[0] == runs[1]
    assert runs[0][-1] < runs[0][0]
    assert 0.0 <= last_token_accuracy(model, ids, labels) <= 1.0
    with pytest.raises(ValueError, match="no trainable parameters"):
        train_last_token(model.requires_grad_(False), ids, labels, steps=1, lr=1e-3)


def test_hierarchical_regression_scales():
    base = hierarchical_regression(seed=1)
    t = hierarchical_regression(
        seed=1, centre_scale=2.0, delta_norm="per_direction", delta_scale=0.5
    )
    for c, c0 in zip(t.centres, base.centres, strict=True):
        assert torch.allclose(c, 2 * c0)
    assert torch.equal(t.w0, base.w0)
    # frobenius: U Vᵀ / √(k·D); per_direction: U Vᵀ / D -> ratio 0.5 · √(k·D) / D
    for delta, d0, k in (
        (t.level_deltas[0], base.level_deltas[0], 2),
        (t.path_deltas[0], base.path_deltas[0], 1),
    ):
        assert torch.allclose(delta, d0 * 0.5 * (k * 32) ** 0.5 / 32, atol=1e-6)
        assert int(torch.linalg.matrix_rank(delta.reshape(-1, 32, 32)[0])) == k
    with pytest.raises(ValueError):
        hierarchical_regression(delta_norm="spectral")  # type: ignore[arg-type]


def test_hierarchical_regression_is_seeded():
    t1, t2 = hierarchical_regression(seed=3), hierarchical_regression(seed=3)
    x1, y1 = t1.sample(10, torch.Generator().manual_seed(0))
    x2, y2 = t2.sample(10, torch.Generator().manual_seed(0))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.allclose(y1, x1 @ t1.w0.t())  # the deltas change the teacher


def test_target_module_matching_follows_peft_rules():
    model = tiny_llama()
    assert find_target_modules(model, ["q_proj"]) == [
        "model.layers.0.self_attn.q_proj",
        "model.layers.1.self_attn.q_proj",
    ]
    assert find_target_modules(model, r"model\.layers\.1\.mlp\.(up|down)_proj") == [
        "model.layers.1.mlp.up_proj",
        "model.layers.1.mlp.down_proj",
    ]
    assert "lm_head" in find_target_modules(model, ["lm_head"])
    names = find_target_modules(model, "all-linear", exclude_modules=["o_proj"])
    assert len(names) == 12 and "lm_head" not in names
    assert find_target_modules(nn.Sequential(nn.Linear(2, 2)), ["0"]) == ["0"]
