"""Tiny Hugging Face causal LMs built from config, and the small training loop the reproductions share.

Nothing is downloaded: every model is built from a ``LlamaConfig`` / ``Qwen2Config`` and trained from
scratch on a synthetic task (see :mod:`eff_llm._data`). All tasks here are *last-token*
classification: the model reads a short prompt and the label is the next token after it, so the loss
is the cross-entropy of the logits at the last position.

Shared helpers (reused by later eff-llm methods):

- :func:`tiny_llama`, :func:`tiny_qwen2` — seeded tiny models (no padding token, so token 0 is an
  ordinary token and its embedding is trained);
- :func:`train_last_token` — Adam on the last-token cross-entropy, with an optional extra loss
  (e.g. an adapter's routing balance loss) and a seeded batch sampler;
- :func:`last_token_accuracy`, :func:`last_token_logits`.

A seeded block of torch's global RNG is the core's :func:`eff_shared.torch.seeded`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from eff_shared.errors import check_positive
from eff_shared.torch import seeded

__all__ = [
    "last_token_accuracy",
    "last_token_logits",
    "tiny_llama",
    "tiny_qwen2",
    "train_last_token",
]


def _build(
    config_cls, model_cls, seed: int, num_kv_heads: int | None, tie_word_embeddings=False, **kw
):
    """Validate the sizes, build ``model_cls(config_cls(...))`` under ``seed`` (global RNG untouched)."""
    for name in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
    ):
        check_positive(name, kw[name], integer=True)
    check_positive("initializer_range", kw["initializer_range"])
    heads = kw["num_attention_heads"]
    kv = heads if num_kv_heads is None else num_kv_heads
    if kw["hidden_size"] % heads:
        raise ValueError(f"num_heads={heads} must divide hidden_size={kw['hidden_size']}")
    if kv < 1 or heads % kv:
        raise ValueError(f"num_kv_heads={kv} must be >= 1 and divide num_heads={heads}")
    # No padding token: token 0 is an ordinary token (with padding_idx its embedding would stay 0).
    config = config_cls(
        **kw,
        num_key_value_heads=kv,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=tie_word_embeddings,
    )
    with seeded(seed):
        return model_cls(config)


def tiny_llama(
    vocab_size: int = 64,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int = 64,
    max_position_embeddings: int = 64,
    initializer_range: float = 0.02,
    seed: int = 0,
    tie_word_embeddings: bool = False,
) -> LlamaForCausalLM:
    """A seeded ``LlamaForCausalLM`` built from config (default: d = 32, 2 layers, 4 heads of 8;
    untied input/output embeddings unless ``tie_word_embeddings``)."""
    return _build(
        LlamaConfig,
        LlamaForCausalLM,
        seed,
        num_kv_heads,
        tie_word_embeddings,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        initializer_range=initializer_range,
        max_position_embeddings=max_position_embeddings,
    )


def tiny_qwen2(
    vocab_size: int = 64,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = 2,
    intermediate_size: int = 64,
    max_position_embeddings: int = 64,
    initializer_range: float = 0.02,
    seed: int = 0,
    tie_word_embeddings: bool = False,
) -> Qwen2ForCausalLM:
    """A seeded ``Qwen2ForCausalLM`` built from config (q/k/v biases, grouped-query attention;
    untied input/output embeddings unless ``tie_word_embeddings``, as Qwen2.5-0.5B–3B tie them)."""
    if not isinstance(tie_word_embeddings, bool):
        raise TypeError(
            f"tie_word_embeddings must be a bool, got {type(tie_word_embeddings).__name__}"
        )
    return _build(
        Qwen2Config,
        Qwen2ForCausalLM,
        seed,
        num_kv_heads,
        tie_word_embeddings,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        initializer_range=initializer_range,
        max_position_embeddings=max_position_embeddings,
    )


def last_token_logits(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits of the next token after each prompt, shape ``(batch, vocab)``."""
    return model(input_ids=input_ids).logits[:, -1, :]


@torch.no_grad()
def last_token_accuracy(
    model: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor, batch_size: int = 1024
) -> float:
    """Fraction of prompts whose greedy next token equals the label (model left in its mode)."""
    hits = 0
    for i in range(0, len(input_ids), batch_size):
        logits = last_token_logits(model, input_ids[i : i + batch_size])
        hits += int((logits.argmax(-1) == labels[i : i + batch_size]).sum())
    return hits / max(len(input_ids), 1)


def train_last_token(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    lr: float,
    batch_size: int = 128,
    seed: int = 0,
    params: Iterable[nn.Parameter] | None = None,
    extra_loss: Callable[[], torch.Tensor] | None = None,
    max_grad_norm: float | None = None,
    stop_when: Callable[[int], bool] | None = None,
) -> list[float]:
    """Adam on the last-token cross-entropy; batches drawn with replacement from a seeded generator.

    ``params`` defaults to the model's trainable parameters. ``extra_loss`` is called after each
    forward and added to the loss (S'MoRE's balance loss). ``stop_when(k)`` is called after step k
    (1-based) and ends training early when it returns True (e.g. a gate checked every 500 steps);
    the steps run until then are those of a longer run, so stopping at k equals ``steps=k``.
    Returns the loss per step.
    """
    check_positive("steps", steps, integer=True)
    check_positive("lr", lr)
    check_positive("batch_size", batch_size, integer=True)
    if input_ids.ndim != 2 or labels.shape != input_ids.shape[:1]:
        raise ValueError(
            f"input_ids must be (n, seq) and labels (n,), got {tuple(input_ids.shape)} and "
            f"{tuple(labels.shape)}"
        )
    trainable = [
        p for p in (params if params is not None else model.parameters()) if p.requires_grad
    ]
    if not trainable:
        raise ValueError("the model has no trainable parameters")
    opt = torch.optim.Adam(trainable, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(input_ids), (batch_size,), generator=gen)
        logits = last_token_logits(model, input_ids[idx])
        loss = nn.functional.cross_entropy(logits, labels[idx])
        if extra_loss is not None:
            loss = loss + extra_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(trainable, max_grad_norm)
        opt.step()
        losses.append(float(loss.detach()))
        if stop_when is not None and stop_when(len(losses)):
            break
    model.eval()
    return losses
