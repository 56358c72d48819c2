"""Nemotron-Flash hybrid models from transformers' building blocks (item 2 of
:mod:`eff_llm.nemotron_flash`): the operator tokens, :class:`HybridSLMConfig`, :class:`HybridSLM`
and its closed-form :func:`hybrid_param_count`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from eff_shared.errors import check_positive

__all__ = [
    "MIXERS",
    "OPERATORS",
    "HybridSLM",
    "HybridSLMConfig",
    "hybrid_param_count",
    "parse_operators",
]

OPERATORS = {
    "a": "attention (LlamaAttention)",
    "swa": "sliding-window attention (LlamaAttention + window)",
    "m2": "Mamba2 (NemotronHMamba2Mixer)",
    "d": "DeltaNet (Qwen3NextGatedDeltaNet stand-in)",
    "f": "FFN (LlamaMLP, SwiGLU)",
}
MIXERS = ("a", "swa", "m2", "d")
_LAYER_TYPE = {
    "a": "full_attention",
    "swa": "sliding_attention",
    "m2": "linear_attention",
    "d": "linear_attention",
    "f": "mlp",
}


def parse_operators(operators: str | Sequence[str]) -> list[str]:
    """``"d f m2 f"`` (or a list) → validated operator tokens."""
    ops = operators.split() if isinstance(operators, str) else list(operators)
    if not ops:
        raise ValueError("operators must name at least one operator")
    bad = [o for o in ops if o not in OPERATORS]
    if bad:
        raise ValueError(f"unknown operator token(s) {bad}; allowed: {list(OPERATORS)}")
    return ops


@strict
class HybridSLMConfig(PreTrainedConfig):
    """Config of :class:`HybridSLM` (a transformers ``PreTrainedConfig``; ``layer_types`` derived).

    ``operators``: tokens of :data:`OPERATORS`; ``window``: the sliding window of ``swa`` layers
    (required when one is present); ``meta_tokens``: learnable prepended tokens. Mamba2: heads of
    ``mamba_head_dim`` with ``mamba_expand``·hidden channels, state ``ssm_state_size``; DeltaNet:
    ``deltanet_heads`` key/value heads of ``deltanet_head_dim``.
    """

    model_type = "eff_hybrid_slm"

    operators: list[str] | str = "d f m2 f a f m2 f"
    hidden_size: int = 64
    ffn_size: int = 128
    num_heads: int = 4
    num_kv_heads: int | None = None
    head_dim: int | None = None
    window: int | None = None
    meta_tokens: int = 0
    vocab_size: int = 256
    max_position_embeddings: int = 512
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    use_cache: bool = True
    mamba_head_dim: int = 16
    mamba_expand: int = 2
    ssm_state_size: int = 16
    conv_kernel: int = 4
    deltanet_heads: int = 2
    deltanet_head_dim: int = 16
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    layer_types: list[str] | None = None
    num_hidden_layers: int | None = None

    def __post_init__(self, **kwargs):
        self.operators = parse_operators(self.operators)
        for name in (
            "hidden_size",
            "ffn_size",
            "num_heads",
            "vocab_size",
            "max_position_embeddings",
            "mamba_head_dim",
            "mamba_expand",
            "ssm_state_size",
            "conv_kernel",
            "deltanet_heads",
            "deltanet_head_dim",
        ):
            check_positive(name, getattr(self, name), integer=True)
        check_positive("meta_tokens", self.meta_tokens, strict=False, integer=True)
        if self.head_dim is None:
            if self.hidden_size % self.num_heads:
                raise ValueError(
                    f"num_heads={self.num_heads} must divide hidden_size={self.hidden_size} "
                    f"(or set head_dim)"
                )
            self.head_dim = self.hidden_size // self.num_heads
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}"
            )
        if "swa" in self.operators:
            if self.window is None:
                raise ValueError("window must be set (> 0) when the operators contain 'swa'")
            check_positive("window", self.window, integer=True)
        if "m2" in self.operators and (self.mamba_expand * self.hidden_size) % self.mamba_head_dim:
            raise ValueError(
                f"mamba_head_dim={self.mamba_head_dim} must divide mamba_expand·hidden_size="
                f"{self.mamba_expand * self.hidden_size}"
            )
        self.sliding_window = self.window
        self.num_hidden_layers = len(self.operators)
        self.layer_types = [_LAYER_TYPE[o] for o in self.operators]
        super().__post_init__(**kwargs)

    def validate_layer_type(self):
        """``layer_types`` is derived from ``operators`` (it may contain ``"mlp"``)."""
        if self.layer_types != [_LAYER_TYPE[o] for o in parse_operators(self.operators)]:
            raise ValueError("layer_types must be derived from operators")

    # Sub-configs for the transformers modules (built on demand, never serialised).
    def _llama(self, sliding: bool = False):
        from transformers import LlamaConfig

        cfg = LlamaConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.ffn_size,
            num_hidden_layers=1,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rms_norm_eps=self.rms_norm_eps,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )
        cfg._attn_implementation = self._attn_implementation
        return cfg

    def _nemotron_h(self):
        from transformers import NemotronHConfig

        types = ["linear_attention" if o == "m2" else "full_attention" for o in self.operators]
        return NemotronHConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=len(types),
            layers_block_type=types,
            mamba_num_heads=self.mamba_expand * self.hidden_size // self.mamba_head_dim,
            mamba_head_dim=self.mamba_head_dim,
            ssm_state_size=self.ssm_state_size,
            n_groups=1,
            conv_kernel=self.conv_kernel,
            chunk_size=64,
            layer_norm_epsilon=self.rms_norm_eps,
            num_attention_heads=self.num_heads,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )

    def _qwen3_next(self):
        from transformers import Qwen3NextConfig

        types = ["linear_attention" if o == "d" else "full_attention" for o in self.operators]
        return Qwen3NextConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=len(types),
            layer_types=types,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            linear_num_key_heads=self.deltanet_heads,
            linear_num_value_heads=self.deltanet_heads,
            linear_key_head_dim=self.deltanet_head_dim,
            linear_value_head_dim=self.deltanet_head_dim,
            linear_conv_kernel_dim=self.conv_kernel,
            hidden_act="silu",
            rms_norm_eps=self.rms_norm_eps,
            num_experts=0,
            mlp_only_layers=list(range(len(types))),
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )


def hybrid_param_count(config: HybridSLMConfig) -> int:
    """Closed-form parameter count of :class:`HybridSLM` (shared tensors once)."""
    h, f, v = config.hidden_size, config.ffn_size, config.vocab_size
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    mh = config.mamba_expand * h // config.mamba_head_dim
    mi = mh * config.mamba_head_dim  # Mamba2 inner channels
    m_conv = mi + 2 * config.ssm_state_size  # n_groups = 1
    dk = dv = config.deltanet_heads * config.deltanet_head_dim
    d_conv = 2 * dk + dv
    per_op = {
        "a": 2 * h * q + 2 * h * kv,
        "swa": 2 * h * q + 2 * h * kv,
        "f": 3 * h * f,
        # in_proj (gate, x·B·C, dt) + depthwise conv (+bias) + dt_bias, A_log, D + gated norm + out_proj
        "m2": h * (mi + m_conv + mh) + m_conv * (config.conv_kernel + 1) + 3 * mh + mi + mi * h,
        # in_proj_qkvz + in_proj_ba + conv (no bias) + dt_bias, A_log + gated norm (head_v) + out_proj
        "d": h * (2 * dk + 2 * dv)
        + h * 2 * config.deltanet_heads
        + d_conv * config.conv_kernel
        + 2 * config.deltanet_heads
        + config.deltanet_head_dim
        + dv * h,
    }
    blocks = sum(per_op[o] + h for o in config.operators)  # + the pre-norm of each block
    emb = v * h * (1 if config.tie_word_embeddings else 2)
    return blocks + emb + h + config.meta_tokens * h


class _Block(nn.Module):
    """Pre-norm residual block: ``h + op(RMSNorm(h))`` with one operator."""

    def __init__(self, config: HybridSLMConfig, op: str, layer_idx: int, subs: dict) -> None:
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm

        self.op = op
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        if op in ("a", "swa"):
            self.mixer = LlamaAttention(subs["llama"], layer_idx)
        elif op == "m2":
            from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer

            self.mixer = NemotronHMamba2Mixer(subs["nemotron_h"], layer_idx)
        elif op == "d":
            from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

            self.mixer = Qwen3NextGatedDeltaNet(subs["qwen3_next"], layer_idx)
        else:
            self.mixer = LlamaMLP(subs["llama"])
        self.window = config.window

    def forward(self, h: torch.Tensor, masks: dict, position_embeddings, cache) -> torch.Tensor:
        x = self.norm(h)
        if self.op == "a":
            out, _ = self.mixer(
                x,
                position_embeddings=position_embeddings,
                attention_mask=masks["full"],
                cache=cache,
            )
        elif self.op == "swa":
            out, _ = self.mixer(
                x,
                position_embeddings=position_embeddings,
                attention_mask=masks["sliding"],
                cache=cache,
                sliding_window=self.window,
            )
        elif self.op in ("m2", "d"):
            out = self.mixer(x, cache=cache, attention_mask=masks["linear"])
        else:
            out = self.mixer(x)
        return h + out


def _hybrid_cache_class():
    from transformers import DynamicCache
    from transformers.cache_utils import CacheLayerMixin

    class HybridCache(DynamicCache):
        """``DynamicCache`` that counts the tokens it has seen, so ``get_seq_length`` also works
        for hybrids without attention layers (transformers' raises for linear-only caches)."""

        def get_seq_length(self, layer_idx: int = 0) -> int:
            if layer_idx == 0 and not any(isinstance(x, CacheLayerMixin) for x in self.layers):
                return int(getattr(self, "_eff_tokens", 0))
            return super().get_seq_length(layer_idx)

    return HybridCache


class HybridSLM(PreTrainedModel, GenerationMixin):
    """A hybrid causal LM built from transformers operator modules (module docstring, item 2)."""

    config_class = HybridSLMConfig
    config: HybridSLMConfig
    base_model_prefix = "hybrid"
    _supports_sdpa = True
    _no_split_modules = ["_Block"]  # noqa: RUF012 (transformers class attributes)
    _tied_weights_keys = {"lm_head.weight": "embed_tokens.weight"}  # noqa: RUF012

    def __init__(self, config: HybridSLMConfig) -> None:
        super().__init__(config)
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

        subs = {"llama": config._llama()}
        if "m2" in config.operators:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "fast path not available" notices on CPU
                subs["nemotron_h"] = config._nemotron_h()
        if "d" in config.operators:
            subs["qwen3_next"] = config._qwen3_next()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [_Block(config, op, i, subs) for i, op in enumerate(config.operators)]
        )
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(config=subs["llama"])
        if config.meta_tokens:
            self.meta = nn.Parameter(torch.zeros(config.meta_tokens, config.hidden_size))
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is self and self.config.meta_tokens:
            nn.init.normal_(self.meta, std=self.config.initializer_range)

    def generate(self, *args: Any, **kwargs: Any):
        """``GenerationMixin.generate`` with a :func:`HybridCache <_hybrid_cache_class>` by default."""
        if kwargs.get("cache") is None and kwargs.get("use_cache", True):
            kwargs["cache"] = _hybrid_cache_class()(config=self.config)
        return super().generate(*args, **kwargs)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        past_key_values=None,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        from transformers.masking_utils import (
            create_causal_mask,
            create_recurrent_attention_mask,
            create_sliding_window_causal_mask,
        )

        cache = cache if cache is not None else past_key_values
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        if use_cache is None:  # no cache while training (full sequences)
            use_cache = self.config.use_cache and not self.training
        if use_cache and cache is None:
            cache = _hybrid_cache_class()(config=self.config)
        m = self.config.meta_tokens
        first = cache is None or not getattr(cache, "_eff_started", False)
        if m and first:  # Hymba meta tokens, prepended once per sequence
            x = torch.cat([self.meta.to(x.dtype).expand(x.shape[0], -1, -1), x], dim=1)
        if m and attention_mask is not None:
            ones = attention_mask.new_ones(attention_mask.shape[0], m)
            attention_mask = torch.cat([ones, attention_mask], dim=1)
        past = 0 if first else cache._eff_tokens
        if position_ids is None or m:
            position_ids = torch.arange(past, past + x.shape[1], device=x.device).unsqueeze(0)
        mask_kw = {
            "config": self.config,
            "inputs_embeds": x,
            "attention_mask": attention_mask,
            "cache": cache,
            "position_ids": position_ids,
        }
        masks = {
            "full": create_causal_mask(**mask_kw) if "a" in self.config.operators else None,
            "sliding": create_sliding_window_causal_mask(**mask_kw)
            if "swa" in self.config.operators
            else None,
            "linear": create_recurrent_attention_mask(**mask_kw),
        }
        pe = self.rotary_emb(x, position_ids=position_ids)
        for block in self.layers:
            x = block(x, masks, pe, cache)
        x = self.norm(x)
        if m and first:
            x = x[:, m:]
        if cache is not None:
            cache._eff_started = True
            cache._eff_tokens = past + x.shape[1] + (m if m and first else 0)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        logits = self.lm_head(x)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1)
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache if use_cache else None)
