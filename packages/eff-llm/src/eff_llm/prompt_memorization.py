"""Soft-prompt tuning on a frozen transformer and the memorization study — "Prompt Tuning Transformers
for Data Memorization", Haiyu Wang and Yuanyuan Lin, NeurIPS 2025 (OpenReview ``M5GLj4Fgvp``).
No official code; the paper body was not readable, so the empirical protocol is ours (spec).

Model (names follow peft's ``PromptTuningConfig``): a frozen decoder-only transformer f with token
embedding E (vocabulary V, width d) and a trainable soft prompt P ∈ R^{m×d}
(m = ``num_virtual_tokens``). Example i enters as [P; E(x_i)], x_i ∈ V^N. The readout is tied: the last
hidden state h_i = f([P; E(x_i)])[−1] (after the final norm) scores C reserved label tokens,
logits_i = h_i E[label_ids]ᵀ, so every trainable parameter is in P. Exact memorization of
D = {(x_i, y_i)}_{i≤n} means argmax logits_i = y_i for all i; m*(n) is the shortest prompt of a grid
that memorizes D.

Theory (abstract only): a constant-size transformer memorizes any n pairs with m = Õ(√(nN)) prompt
tokens, and prompt length can be traded for autoregressive steps. That bound is for a *constructed*
backbone; on a random backbone it is an order-of-growth statement only and is not tested here.
The backbone's initialisation scale decides whether a random transformer memorizes at all
(``initializer_range`` 0.02 stays at chance, 0.2 memorizes).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from eff_shared.errors import check_choice, check_int, check_positive
from eff_shared.torch import seeded

__all__ = [
    "FitResult",
    "SoftPromptClassifier",
    "fit_prompt",
    "make_memorization_dataset",
    "make_random_backbone",
    "memorization_sweep",
    "min_prompt_length",
]

ARCHS = ("gpt2", "llama", "qwen2")


def make_random_backbone(
    arch: Literal["gpt2", "llama", "qwen2"] = "gpt2",
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 2,
    vocab_size: int = 32,
    initializer_range: float = 0.2,
    seed: int = 0,
    max_position_embeddings: int = 64,
    intermediate_size: int | None = None,
    num_key_value_heads: int | None = None,
) -> PreTrainedModel:
    """A randomly initialised causal LM built from config, in ``eval()`` with every parameter frozen.

    GPT2: no dropout, ``bos_token_id = eos_token_id = 0`` (transformers warns about the default 50256
    being outside a 32-token vocabulary). ``intermediate_size`` is the FFN width (default
    4·hidden, every arch); ``num_key_value_heads`` (Llama / Qwen2 only, default one per query head)
    must divide ``num_heads``.
    """
    check_choice("arch", arch, ARCHS)
    for name, value in (
        ("hidden_size", hidden_size),
        ("num_layers", num_layers),
        ("num_heads", num_heads),
        ("vocab_size", vocab_size),
        ("max_position_embeddings", max_position_embeddings),
    ):
        check_positive(name, value, integer=True)
    check_positive("initializer_range", initializer_range)
    if hidden_size % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide hidden_size={hidden_size}")
    ffn = 4 * hidden_size if intermediate_size is None else intermediate_size
    check_positive("intermediate_size", ffn, integer=True)
    kv_heads = num_heads if num_key_value_heads is None else num_key_value_heads
    check_positive("num_key_value_heads", kv_heads, integer=True)
    if num_heads % kv_heads:
        raise ValueError(f"num_key_value_heads={kv_heads} must divide num_heads={num_heads}")
    if arch == "gpt2" and num_key_value_heads not in (None, num_heads):
        raise ValueError(
            "num_key_value_heads is for arch 'llama' or 'qwen2'; GPT-2 has one per head"
        )
    if arch == "gpt2":
        config = GPT2Config(
            vocab_size=vocab_size,
            n_positions=max_position_embeddings,
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            n_inner=ffn,
            initializer_range=initializer_range,
            bos_token_id=0,
            eos_token_id=0,
        )
        cls: type[PreTrainedModel] = GPT2LMHeadModel
    else:
        kw = dict(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=ffn,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=max_position_embeddings,
            initializer_range=initializer_range,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )
        config, cls = (
            (LlamaConfig(**kw), LlamaForCausalLM)
            if arch == "llama"
            else (Qwen2Config(**kw), Qwen2ForCausalLM)
        )
    with seeded(seed):
        model = cls(config)
    model.requires_grad_(False)
    return model.eval()


def _max_positions(backbone: PreTrainedModel) -> int:
    cfg = backbone.config
    return int(getattr(cfg, "max_position_embeddings", None) or cfg.n_positions)


class SoftPromptClassifier(nn.Module):
    """Trainable soft prompt on a frozen backbone with a tied label readout (module docstring).

    ``prompt_init="random"``: P ~ N(0, s²) with s the standard deviation of the embedding rows of
    the non-label tokens (spec: std(E(x))); ``"vocab"``: copies of randomly chosen non-label token
    embeddings (as peft's text init). A backbone with trainable parameters is frozen with a
    ``UserWarning``.
    """

    def __init__(
        self,
        backbone: PreTrainedModel,
        num_virtual_tokens: int,
        label_token_ids: Sequence[int],
        prompt_init: Literal["random", "vocab"] = "random",
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_positive("num_virtual_tokens", num_virtual_tokens, integer=True)
        check_choice("prompt_init", prompt_init, ["random", "vocab"])
        if any(p.requires_grad for p in backbone.parameters()):
            warnings.warn(
                "the backbone has trainable parameters; SoftPromptClassifier freezes it",
                UserWarning,
                stacklevel=2,
            )
            backbone.requires_grad_(False)
        self.backbone = backbone.eval()
        emb = backbone.get_input_embeddings().weight
        labels = [int(i) for i in label_token_ids]
        if not labels or len(set(labels)) != len(labels):
            raise ValueError(f"label_token_ids must be distinct token ids, got {label_token_ids!r}")
        if min(labels) < 0 or max(labels) >= emb.shape[0]:
            raise ValueError(f"label_token_ids must lie in [0, {emb.shape[0]}), got {labels}")
        self.register_buffer("label_token_ids", torch.tensor(labels), persistent=False)
        self.num_virtual_tokens = num_virtual_tokens
        others = torch.tensor([i for i in range(emb.shape[0]) if i not in set(labels)])
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            if prompt_init == "random":
                std = float(emb[others].float().std())
                init = torch.randn(num_virtual_tokens, emb.shape[1], generator=gen) * std
            else:
                pick = others[torch.randint(0, len(others), (num_virtual_tokens,), generator=gen)]
                init = emb[pick].detach().float().cpu().clone()
        self.prompt = nn.Parameter(init.to(device=emb.device, dtype=emb.dtype))

    def check_inputs(self, input_ids: torch.Tensor) -> None:
        if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point():
            raise TypeError("input_ids must be an integer tensor (batch, seq_len)")
        if input_ids.ndim != 2:
            raise ValueError(
                f"input_ids must be (batch, seq_len), got shape {tuple(input_ids.shape)}"
            )
        total = self.num_virtual_tokens + input_ids.shape[1]
        if total > _max_positions(self.backbone):
            raise ValueError(
                f"num_virtual_tokens + seq_len = {total} exceeds the backbone's "
                f"max_position_embeddings {_max_positions(self.backbone)}"
            )
        if torch.isin(input_ids, self.label_token_ids.to(input_ids.device)).any():
            raise ValueError(
                "input_ids overlap the label token ids; inputs must avoid label tokens"
            )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``(batch, C)`` label logits."""
        self.check_inputs(input_ids)
        emb = self.backbone.get_input_embeddings()
        x = emb(input_ids)
        prompt = self.prompt.unsqueeze(0).expand(x.shape[0], -1, -1)
        h = self.backbone.base_model(inputs_embeds=torch.cat([prompt, x], dim=1)).last_hidden_state
        return h[:, -1] @ emb.weight[self.label_token_ids].t()


@dataclass(frozen=True)
class FitResult:
    memorized: bool
    steps: int  # optimisation steps taken (the step at which 100 % was first reached, if it was)
    accuracy: float
    loss: float


def _check_labels(labels: torch.Tensor, num_classes: int) -> None:
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point():
        raise TypeError("labels must be an integer tensor")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"labels must lie in [0, {num_classes}), got [{int(labels.min())}, {int(labels.max())}]"
        )


def fit_prompt(
    model: SoftPromptClassifier,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    max_steps: int = 300,
    lr: float = 0.1,
) -> FitResult:
    """Full-batch Adam on the prompt (cross-entropy); stops at the first step with 100 % accuracy."""
    check_positive("max_steps", max_steps, integer=True)
    check_positive("lr", lr)
    model.check_inputs(input_ids)
    _check_labels(labels, len(model.label_token_ids))
    if labels.shape != input_ids.shape[:1]:
        raise ValueError(
            f"labels must have shape ({input_ids.shape[0]},), got {tuple(labels.shape)}"
        )
    opt = torch.optim.Adam([model.prompt], lr=lr)
    for step in range(max_steps + 1):
        logits = model(input_ids)
        loss = nn.functional.cross_entropy(logits, labels)
        acc = float((logits.argmax(-1) == labels).float().mean())
        if acc == 1.0 or step == max_steps:
            return FitResult(acc == 1.0, step, acc, float(loss.detach()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    raise AssertionError("unreachable")  # pragma: no cover


def make_memorization_dataset(
    n: int,
    seq_len: int = 4,
    vocab_size: int = 32,
    num_classes: int = 4,
    structure: Literal["random", "low_rank"] = "random",
    rank: int = 1,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` inputs uniform over token ids [C, V) of length N and their labels in [0, C).

    ``"random"``: uniform labels. ``"low_rank"`` (our design): y = argmax_c (mean_j e(x_ij) W)_c with a
    Gaussian teacher embedding e ∈ R^{V×8} and W = B1 B2 of rank ``rank`` (1 ≤ rank ≤ min(8, C)).
    """
    for name, value in (
        ("n", n),
        ("seq_len", seq_len),
        ("vocab_size", vocab_size),
        ("num_classes", num_classes),
    ):
        check_positive(name, value, integer=True)
    check_choice("structure", structure, ["random", "low_rank"])
    if vocab_size <= num_classes:
        raise ValueError(f"vocab_size={vocab_size} must exceed num_classes={num_classes}")
    check_int("rank", rank, minimum=1, maximum=min(8, num_classes))
    rng = np.random.default_rng(seed)
    x = rng.integers(num_classes, vocab_size, size=(n, seq_len))
    if structure == "random":
        y = rng.integers(0, num_classes, size=n)
    else:
        e = rng.standard_normal((vocab_size, 8))
        w = rng.standard_normal((8, rank)) @ rng.standard_normal((rank, num_classes))
        y = (e[x].mean(1) @ w).argmax(-1)
    return torch.as_tensor(x, dtype=torch.long), torch.as_tensor(y, dtype=torch.long)


def min_prompt_length(
    backbone: PreTrainedModel,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    grid: Sequence[int] = (1, 2, 4, 8, 16, 32),
    *,
    num_classes: int = 4,
    prompt_seed: int = 0,
    history: list[dict] | None = None,
    **fit_kw,
) -> int | None:
    """m*(n): the first prompt length of the (strictly increasing) ``grid`` that memorizes the data,
    or ``None``. Label tokens are ids [0, num_classes). ``history`` collects one row per tried m."""
    grid = _check_grid(grid)
    _check_labels(labels, num_classes)
    for m in grid:
        clf = SoftPromptClassifier(backbone, m, range(num_classes), seed=prompt_seed)
        res = fit_prompt(clf, input_ids, labels, **fit_kw)
        if history is not None:
            history.append({"m": m, **asdict(res)})
        if res.memorized:
            return m
    return None


def _check_grid(grid: Iterable[int]) -> list[int]:
    out = list(grid)
    if not out:
        raise ValueError("grid must not be empty")
    for m in out:
        check_int("grid values", m, minimum=1)
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError(f"grid must be strictly increasing, got {out}")
    return out


def memorization_sweep(
    ns: Sequence[int],
    grid: Sequence[int] = (1, 2, 4, 8, 16, 32),
    structures: Sequence[str] = ("random",),
    init_ranges: Sequence[float] = (0.2,),
    seeds: Sequence[int] = (0,),
    *,
    arch: Literal["gpt2", "llama", "qwen2"] = "gpt2",
    seq_len: int = 4,
    vocab_size: int = 32,
    num_classes: int = 4,
    rank: int = 1,
    backbone_seed: int = 0,
    **fit_kw,
) -> list[dict]:
    """m*(n) for every (init range, structure, data seed, n): one row each with ``m_star`` (None when
    no grid length memorizes), the steps at m*, and the final accuracy of every tried m."""
    grid = _check_grid(grid)
    rows = []
    for init in init_ranges:
        backbone = make_random_backbone(
            arch, vocab_size=vocab_size, initializer_range=init, seed=backbone_seed
        )
        for structure in structures:
            for seed in seeds:
                for n in ns:
                    x, y = make_memorization_dataset(
                        n,
                        seq_len,
                        vocab_size,
                        num_classes,
                        structure,  # type: ignore[arg-type]
                        rank,
                        seed,
                    )
                    tried: list[dict] = []
                    m_star = min_prompt_length(
                        backbone, x, y, grid, num_classes=num_classes, history=tried, **fit_kw
                    )
                    rows.append(
                        {
                            "n": n,
                            "structure": structure,
                            "init_range": init,
                            "seed": seed,
                            "m_star": m_star,
                            "steps": tried[-1]["steps"] if m_star else None,
                            "accuracy_per_m": {t["m"]: t["accuracy"] for t in tried},
                            "bits_per_float": (
                                n * math.log2(num_classes) / (m_star * backbone.config.hidden_size)
                                if m_star
                                else None
                            ),
                        }
                    )
    return rows
