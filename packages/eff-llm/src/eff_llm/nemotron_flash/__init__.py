"""Nemotron-Flash — latency-optimal hybrid small LMs: weight normalisation, hybrid builder, LUT, search.

Fu et al. (NVIDIA), "Nemotron-Flash: Towards Latency-Optimal Hybrid Small Language Models",
arXiv 2511.18890 (§2.1–2.4, §3, App. C.1–C.4, D.1). The paper releases models, **no training or
search code**: everything below is our implementation of the paper's description.

1. **Weight normalisation (§2.3).** After *every* optimiser step, project the weights back onto the
   unit sphere: Case-1 matrices W ∈ R^{C_out×C_in} whose outputs feed a non-residual path
   (q, k, v, gate, up) get unit-norm **rows**; Case-2 matrices whose outputs are added to the residual
   stream (o, down) get unit-norm **columns**. Used with Adam without weight decay (a simplified
   nGPT: weights only). The paper does not say what happens to embeddings and the LM head, so
   ``include_embeddings=False`` by default. :func:`apply_weight_norm_` does one projection;
   :class:`WeightNormProjector` is the training-loop component (an optimizer step post-hook).
   The paper states the rule, not the module names: for the hybrid operators the same rule gives
   :data:`HYBRID_CASE1` / :data:`HYBRID_CASE2` (Mamba2 ``in_proj`` rows / ``out_proj`` columns, Gated
   DeltaNet ``in_proj_qkvz``, ``in_proj_ba`` rows / ``out_proj`` columns), which apply to Llama,
   NemotronH, Qwen3-Next and :class:`HybridSLM` models as they are (:func:`weight_norm_targets`:
   library names a model lacks are skipped and reported). Layers inside transformers' Gated DeltaNet
   are left alone by default (``exclude_modules``): on a tiny Qwen3-Next hybrid (h 128, GDN +
   attention, 300 steps, seeds 0-2) normalising them costs +0.65 [+0.57, +0.76] nats of validation
   CE over attention + MLP only (``in_proj_qkvz`` alone +0.32, ``out_proj`` +0.01, ``in_proj_ba``
   +0.00), ours, not the paper's.
2. **Hybrid models from transformers' building blocks.** :class:`HybridSLM` stacks pre-norm residual
   blocks, one operator each, from an operator string such as ``"d f m2 f a f m2 f"``:
   ``a`` = ``LlamaAttention`` (full), ``swa`` = ``LlamaAttention`` with a sliding-window mask and cache
   (``window``), ``m2`` = ``NemotronHMamba2Mixer`` (Mamba2), ``d`` = ``Qwen3NextGatedDeltaNet`` (the
   paper's DeltaNet; transformers has no plain DeltaNet, so Gated DeltaNet stands in — the paper finds
   them equivalent in hybrids), ``f`` = ``LlamaMLP`` (SwiGLU FFN). The unified transformers
   ``DynamicCache`` (``config.layer_types``) holds KV caches and conv/recurrent states, so ``generate``
   works. Without ``mamba_ssm`` / ``causal_conv1d`` / ``fla`` the PyTorch paths run (CPU). Optional
   ``meta_tokens`` learnable tokens are prepended (Hymba; the paper uses 256). Linear-attention/Mamba
   hybrids cannot be HF assisted-decoding targets (their cache cannot be cropped).
3. **Latency LUT (§2.4).** :meth:`LatencyLUT.measure` times single-token decode of every operator on
   the current device (after a ``seq_len``-token prefill) as the difference of 3-block and 1-block
   models, plus the per-hidden-size overhead (embedding, norm, LM head); :meth:`LatencyLUT.predict`
   sums them for an architecture.
4. **Aging-evolution search (§2.4).** :class:`SearchSpace`: operators {DeltaNet, attention, Mamba2},
   **3 stages**, each repeating one block type; a block has ≤ 2 operator types in ratio 0:1, 1:1,
   1:2 or 1:3 and 0/1/2 FFNs after each mixer; ≤ 30 operators (the last stage is trimmed); the hidden
   size is the **largest** of {1024, 1280, …, 2560} whose LUT latency meets the budget.
   :func:`aging_evolution` (Real et al.): population P, each cycle ``children_per_cycle`` children,
   each from a uniform sample S of the population, parent = the best (lowest fitness) feasible member,
   one mutated factor (an operator of a block type, the hybrid ratio, the FFN count, a block count),
   the oldest member dies; returns the best feasible architecture ever evaluated.
   :func:`random_search` is the baseline at equal evaluations.
5. **Depth–width law (§2.1).** L(D, W) = L0 + a·D^−α + b·W^−β, fitted by
   :func:`fit_depth_width_law` (``scipy.optimize.least_squares`` on several starts).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from eff_shared.errors import check_positive, check_type
from eff_shared.progress import track

__all__ = [
    "CASE1",
    "CASE2",
    "DELTANET_CASE1",
    "DELTANET_CASE2",
    "DELTANET_MODULES",
    "HYBRID_CASE1",
    "HYBRID_CASE2",
    "MAMBA2_CASE1",
    "MAMBA2_CASE2",
    "MIXERS",
    "OPERATORS",
    "HybridArch",
    "HybridSLM",
    "HybridSLMConfig",
    "LatencyLUT",
    "SearchResult",
    "SearchSpace",
    "StageSpec",
    "WeightNormProjector",
    "WeightNormTargets",
    "aging_evolution",
    "apply_weight_norm_",
    "decode_latency",
    "depth_width_law",
    "fit_depth_width_law",
    "hybrid_param_count",
    "parse_operators",
    "random_search",
    "weight_norm_targets",
]

# -- 1. weight normalisation -------------------------------------------------------------------

CASE1 = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
CASE2 = ("o_proj", "down_proj")
# The paper's rule on the hybrid operators (outputs added to the residual stream → Case-2):
# Mamba2 (NemotronH, HybridSLM "m2") in_proj rows / out_proj columns; Gated DeltaNet (Qwen3-Next,
# HybridSLM "d") in_proj_qkvz and in_proj_ba rows / out_proj columns.
MAMBA2_CASE1 = ("in_proj",)
MAMBA2_CASE2 = ("out_proj",)
DELTANET_CASE1 = ("in_proj_qkvz", "in_proj_ba")
DELTANET_CASE2 = ("out_proj",)
HYBRID_CASE1 = (*CASE1, *MAMBA2_CASE1, *DELTANET_CASE1)
HYBRID_CASE2 = (*CASE2, *MAMBA2_CASE2)
# Module classes whose linears are left alone by default: normalising transformers' Gated DeltaNet
# projections costs +0.65 nats of validation CE on a tiny Qwen3-Next hybrid over normalising its
# attention and MLP only (module docstring). ``exclude_modules=()`` applies the rule to them too.
DELTANET_MODULES = ("Qwen3NextGatedDeltaNet",)
# Names of the library's cases: one that a model lacks is skipped (reported), any other name that
# matches nothing raises (most likely a misspelling).
_LIBRARY_NAMES = frozenset(HYBRID_CASE1) | frozenset(HYBRID_CASE2)


@dataclass(frozen=True)
class WeightNormTargets:
    """The matrices the weight-norm split resolves to on one model (:func:`weight_norm_targets`).

    ``case1`` / ``case2``: full module names of the ``nn.Linear`` layers normalised by rows /
    columns; ``skipped``: library case names the model has no layer of; ``excluded``: full names of
    matching layers inside ``exclude_modules`` (left alone).
    """

    case1: tuple[str, ...]
    case2: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()


def _excluded_prefixes(model: nn.Module, exclude_modules: Sequence[str | type]) -> list[str]:
    if isinstance(exclude_modules, (str, type)):
        exclude_modules = (exclude_modules,)
    for item in exclude_modules:
        if not isinstance(item, (str, type)):
            raise TypeError(
                f"exclude_modules must hold module class names or classes, got "
                f"{type(item).__name__}"
            )
    names = {x for x in exclude_modules if isinstance(x, str)}
    types = tuple(x for x in exclude_modules if isinstance(x, type))
    return [
        full + "."
        for full, mod in model.named_modules()
        if type(mod).__name__ in names or (types and isinstance(mod, types))
    ]


def weight_norm_targets(
    model: nn.Module,
    case1: Sequence[str] = CASE1,
    case2: Sequence[str] = CASE2,
    exclude_modules: Sequence[str | type] = DELTANET_MODULES,
    strict: bool = False,
) -> WeightNormTargets:
    """Resolve the Case-1 / Case-2 names (``nn.Linear`` leaf names) on ``model``.

    Layers inside a module whose class is in ``exclude_modules`` (class names or classes) are left
    alone. A name of the library's cases (:data:`HYBRID_CASE1` ∪ :data:`HYBRID_CASE2`) that the model
    lacks is skipped and reported, so the hybrid cases apply to Llama, NemotronH, Qwen3-Next and
    :class:`HybridSLM` models as they are; with ``strict`` every name must match. Raises
    ``ValueError`` when a name outside the library's cases matches no layer (a misspelling), when
    the cases overlap, or when nothing at all is left to normalise.
    """
    check_type("strict", strict, bool)
    case1, case2 = tuple(case1), tuple(case2)
    for arg, names in (("case1", case1), ("case2", case2)):
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise TypeError(f"{arg} must hold module names (str), got {bad}")
    overlap = set(case1) & set(case2)
    if overlap:
        raise ValueError(f"case1 and case2 must be disjoint, both contain {sorted(overlap)}")
    prefixes = _excluded_prefixes(model, exclude_modules)
    found: dict[str, list[str]] = {n: [] for n in (*case1, *case2)}
    excluded: dict[str, list[str]] = {n: [] for n in found}
    for full, mod in model.named_modules():
        leaf = full.rsplit(".", 1)[-1]
        if leaf in found and isinstance(mod, nn.Linear):
            inside = any(full.startswith(p) for p in prefixes)
            (excluded if inside else found)[leaf].append(full)
    missing = [n for n, mods in found.items() if not mods]
    unknown = [n for n in missing if strict or n not in _LIBRARY_NAMES]
    if unknown:
        lib = [n for n in unknown if n in _LIBRARY_NAMES]
        raise ValueError(
            f"weight-norm targets missing from the model (no nn.Linear named): {unknown}"
            + ("" if strict else " (not a name of the library's cases: misspelt?)")
            + (f"; {lib} only inside exclude_modules" if any(excluded[n] for n in lib) else "")
            + "; pass case1/case2 with the names the model uses"
        )
    targets = WeightNormTargets(
        case1=tuple(m for n in case1 for m in found[n]),
        case2=tuple(m for n in case2 for m in found[n]),
        skipped=tuple(n for n in missing if not excluded[n]),
        excluded=tuple(m for mods in excluded.values() for m in mods),
    )
    if not targets.case1 and not targets.case2:
        raise ValueError(
            f"no weight-norm target matches the model: none of case1={list(case1)} / "
            f"case2={list(case2)} names an nn.Linear outside exclude_modules"
        )
    return targets


def _normalise_(w: torch.Tensor, dim: int, eps: float, name: str) -> None:
    norms = w.norm(dim=dim, keepdim=True)
    if bool((norms < eps).any()):
        warnings.warn(
            f"weight norm: {int((norms < eps).sum())} zero-norm {'rows' if dim == 1 else 'columns'} "
            f"in {name} were left at zero (norm clamped to eps={eps})",
            RuntimeWarning,
            stacklevel=3,
        )
    w.div_(norms.clamp_min(eps))


@torch.no_grad()
def apply_weight_norm_(
    model: nn.Module,
    case1: Sequence[str] = CASE1,
    case2: Sequence[str] = CASE2,
    include_embeddings: bool = False,
    eps: float = 1e-12,
    exclude_modules: Sequence[str | type] = DELTANET_MODULES,
    strict: bool = False,
) -> list[str]:
    """Project ``model``'s weights in place (§2.3): Case-1 ``nn.Linear`` (names ending in ``case1``)
    to unit-norm rows, Case-2 to unit-norm columns; with ``include_embeddings`` the input embedding
    rows and the (untied) LM-head rows too. Returns the normalised parameter names.

    The names resolve as :func:`weight_norm_targets` does: layers inside ``exclude_modules``
    (default: transformers' Gated DeltaNet) are left alone; library case names the model lacks are
    skipped unless ``strict``; ``ValueError`` for a name outside the library's cases that matches
    nothing (listing them) or when nothing matches. A zero-norm row/column stays zero (its norm is
    clamped to ``eps``) and a ``RuntimeWarning`` is issued.
    """
    check_type("include_embeddings", include_embeddings, bool)
    check_positive("eps", eps)
    targets = weight_norm_targets(model, case1, case2, exclude_modules, strict)
    names: list[str] = []
    for full_names, dim in ((targets.case1, 1), (targets.case2, 0)):
        for full in full_names:
            _normalise_(model.get_submodule(full).weight, dim, eps, full)
            names.append(full + ".weight")
    if include_embeddings:
        emb = model.get_input_embeddings()
        _normalise_(emb.weight, 1, eps, "input embeddings")
        names.append("input_embeddings.weight")
        out = model.get_output_embeddings()
        if out is not None and out.weight is not emb.weight:
            _normalise_(out.weight, 1, eps, "output embeddings")
            names.append("output_embeddings.weight")
    return names


class WeightNormProjector:
    """The weight-norm projection as a training-loop component.

    ``optimizer.register_step_post_hook(WeightNormProjector(model))`` (or :meth:`attach`) re-projects
    after every ``optimizer.step()``; calling it with no argument projects once. Construction
    validates the targets and projects the initial weights; ``targets`` (a
    :class:`WeightNormTargets`) reports what was matched, skipped and excluded, ``names`` the
    normalised parameters. Arguments as :func:`apply_weight_norm_`.
    """

    def __init__(
        self,
        model: nn.Module,
        case1: Sequence[str] = CASE1,
        case2: Sequence[str] = CASE2,
        include_embeddings: bool = False,
        eps: float = 1e-12,
        exclude_modules: Sequence[str | type] = DELTANET_MODULES,
        strict: bool = False,
    ) -> None:
        self.model = model
        self.kwargs = {
            "case1": tuple(case1),
            "case2": tuple(case2),
            "include_embeddings": include_embeddings,
            "eps": eps,
            "exclude_modules": tuple(exclude_modules)
            if not isinstance(exclude_modules, (str, type))
            else (exclude_modules,),
            "strict": strict,
        }
        self.names = apply_weight_norm_(model, **self.kwargs)
        self.targets = weight_norm_targets(
            model,
            self.kwargs["case1"],
            self.kwargs["case2"],
            self.kwargs["exclude_modules"],
            strict,
        )
        self.calls = 0

    def __call__(self, *_args: Any, **_kwargs: Any) -> None:
        apply_weight_norm_(self.model, **self.kwargs)
        self.calls += 1

    def attach(self, optimizer: torch.optim.Optimizer):
        """Register as a step post-hook of ``optimizer``; returns the removable handle."""
        return optimizer.register_step_post_hook(self)


# -- 2. hybrid models --------------------------------------------------------------------------

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


# -- 3. latency LUT ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HybridArch:
    """A concrete architecture: operator sequence and hidden size (the LUT's unit)."""

    operators: tuple[str, ...]
    hidden_size: int

    @property
    def num_mixers(self) -> int:
        return sum(o in MIXERS for o in self.operators)


@dataclass
class LatencyLUT:
    """Per-operator decode latency (ms per token) by hidden size, plus a per-hidden-size overhead.

    ``table[(op, hidden)]`` and ``overhead[hidden]``; build it with :meth:`measure` (timed on this
    device) or directly (a synthetic LUT). ``predict`` interpolates linearly between hidden sizes.
    """

    table: dict[tuple[str, int], float]
    overhead: dict[int, float] = field(default_factory=dict)
    device: str = "synthetic"
    seq_len: int = 0

    def hidden_sizes(self) -> list[int]:
        return sorted({h for _, h in self.table})

    def _at(self, values: dict[int, float], hidden: int) -> float:
        hs = sorted(values)
        if hidden in values:
            return values[hidden]
        if not hs or hidden < hs[0] or hidden > hs[-1]:
            raise ValueError(f"hidden size {hidden} is outside the LUT's range {hs}")
        return float(np.interp(hidden, hs, [values[h] for h in hs]))

    def op_latency(self, op: str, hidden: int) -> float:
        values = {h: t for (o, h), t in self.table.items() if o == op}
        if not values:
            raise ValueError(
                f"operator {op!r} is not in the LUT (has {sorted({o for o, _ in self.table})})"
            )
        return self._at(values, hidden)

    def predict(self, arch: HybridArch) -> float:
        """Predicted decode latency (ms/token) of ``arch``: overhead + Σ per-operator latencies."""
        base = self._at(self.overhead, arch.hidden_size) if self.overhead else 0.0
        return base + sum(self.op_latency(o, arch.hidden_size) for o in arch.operators)

    @classmethod
    def measure(
        cls,
        ops: Sequence[str] = ("a", "d", "m2", "f"),
        hidden_sizes: Sequence[int] = (64, 128),
        device: str | torch.device = "cpu",
        seq_len: int = 64,
        decode_tokens: int = 8,
        repeats: int = 3,
        window: int = 32,
        seed: int = 0,
    ) -> LatencyLUT:
        """Time single-token decode after a ``seq_len`` prefill on ``device``: per operator,
        (t(3 blocks) − t(1 block)) / 2; overhead = t(1 block of ``f``) − LUT[f]. Median of ``repeats``."""
        ops = parse_operators(list(ops))
        table: dict[tuple[str, int], float] = {}
        overhead: dict[int, float] = {}
        for h in hidden_sizes:
            check_positive("hidden_sizes", h, integer=True)
            one: dict[str, float] = {}
            for op in dict.fromkeys([*ops, "f"]):
                t1 = decode_latency([op], h, device, seq_len, decode_tokens, repeats, window, seed)
                t3 = decode_latency(
                    [op] * 3, h, device, seq_len, decode_tokens, repeats, window, seed
                )
                table[(op, h)] = max((t3 - t1) / 2, 0.0)
                one[op] = t1
            overhead[h] = max(one["f"] - table[("f", h)], 0.0)
        table = {k: v for k, v in table.items() if k[0] in ops}
        return cls(table=table, overhead=overhead, device=str(device), seq_len=seq_len)


def _lut_config(operators: Sequence[str], hidden: int, window: int) -> HybridSLMConfig:
    heads = max(1, hidden // 32)
    return HybridSLMConfig(
        operators=list(operators),
        hidden_size=hidden,
        ffn_size=2 * hidden,
        num_heads=heads,
        window=window if "swa" in operators else None,
        vocab_size=256,
        mamba_head_dim=min(32, 2 * hidden),
        deltanet_heads=heads,
        deltanet_head_dim=hidden // heads,
    )


@torch.no_grad()
def decode_latency(
    operators: Sequence[str],
    hidden: int,
    device: str | torch.device = "cpu",
    seq_len: int = 64,
    decode_tokens: int = 8,
    repeats: int = 3,
    window: int = 32,
    seed: int = 0,
    model: HybridSLM | None = None,
) -> float:
    """Median wall time (ms) of one cached single-token decode step of a (seeded) hybrid model."""
    dev = torch.device(device)
    if model is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = HybridSLM(_lut_config(operators, hidden, window))
    model = model.to(dev).eval()
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), generator=gen).to(dev)
    times = []
    for _ in range(repeats):
        cache = DynamicCache(config=model.config)
        out = model(input_ids=ids, cache=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        model(input_ids=nxt, cache=cache, use_cache=True)  # warm-up step
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        for _ in range(decode_tokens):
            out = model(input_ids=nxt, cache=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(1000 * (time.perf_counter() - start) / decode_tokens)
    return float(np.median(times))


# -- 4. search space and aging evolution -------------------------------------------------------

_RATIOS = ((0, 1), (1, 1), (1, 2), (1, 3))


@dataclass(frozen=True)
class StageSpec:
    """One stage: ``blocks`` repetitions of a block of ``first``:``second`` mixers in ``ratio``
    (0:1 = only ``second``), each mixer followed by ``ffn`` FFNs."""

    first: str
    second: str
    ratio: tuple[int, int]
    ffn: int
    blocks: int

    @classmethod
    def from_block(cls, block: str | Sequence[str], blocks: int = 1) -> StageSpec:
        """Parse one block, e.g. ``"d f a f a f"`` (mixers, each followed by the same number of
        FFNs); raises ``ValueError`` for > 2 mixer types, an FFN count ∉ {0, 1, 2}, a ratio other
        than 0:1, 1:1, 1:2, 1:3 or an unknown token."""
        ops = parse_operators(block)
        check_positive("blocks", blocks, integer=True)
        if ops[0] not in MIXERS:
            raise ValueError(f"a block starts with a mixer, got {ops[0]!r}")
        mixers, ffns = [], []
        for o in ops:
            if o == "f":
                ffns[-1] += 1
            else:
                mixers.append(o)
                ffns.append(0)
        types = list(dict.fromkeys(mixers))
        if len(types) > 2:
            raise ValueError(f"a block has at most 2 mixer types, got {types}")
        if len(set(ffns)) != 1 or ffns[0] not in (0, 1, 2):
            raise ValueError(f"FFN count after each mixer must be one of {{0, 1, 2}}, got {ffns}")
        if len(types) == 1:
            if len(mixers) != 1:
                raise ValueError(f"a one-type block has one mixer (ratio 0:1), got {len(mixers)}")
            return cls(types[0], types[0], (0, 1), ffns[0], blocks)
        first = mixers[0]
        x, y = mixers.count(first), len(mixers) - mixers.count(first)
        spec = cls(first, types[1], (x, y), ffns[0], blocks)
        if (x, y) not in _RATIOS or spec.block() != ops:
            raise ValueError(
                f"block {' '.join(ops)} is not 'first×x second×y' in a ratio of {list(_RATIOS)}"
            )
        return spec

    def block(self) -> list[str]:
        x, y = self.ratio
        mixers = [self.first] * x + [self.second] * y
        return [tok for m in mixers for tok in [m, *(["f"] * self.ffn)]]

    def operators(self) -> list[str]:
        return self.block() * self.blocks


@dataclass(frozen=True)
class SearchSpace:
    """The paper's space (§2.4): 3 stages, operators {d, a, m2}, ratios 0:1/1:1/1:2/1:3, 0–2 FFNs
    per mixer, ``1..max_blocks`` blocks per stage, ≤ ``max_operators`` operators (last stage
    trimmed), hidden size = the largest of ``hidden_sizes`` meeting the latency budget."""

    operators: tuple[str, ...] = ("d", "a", "m2")
    stages: int = 3
    max_blocks: int = 4
    ffn_choices: tuple[int, ...] = (0, 1, 2)
    ratios: tuple[tuple[int, int], ...] = _RATIOS
    max_operators: int = 30
    hidden_sizes: tuple[int, ...] = (1024, 1280, 1536, 1792, 2048, 2304, 2560)

    def __post_init__(self) -> None:
        bad = [o for o in self.operators if o not in MIXERS]
        if bad or not self.operators:
            raise ValueError(
                f"operators must be mixers from {list(MIXERS)}, got {list(self.operators)}"
            )
        for name in ("stages", "max_blocks", "max_operators"):
            check_positive(name, getattr(self, name), integer=True)
        bad_ffn = [f for f in self.ffn_choices if f not in (0, 1, 2)]
        if bad_ffn or not self.ffn_choices:
            raise ValueError(f"FFN count must be in {{0, 1, 2}}, got {list(self.ffn_choices)}")
        bad_r = [r for r in self.ratios if tuple(r) not in _RATIOS]
        if bad_r or not self.ratios:
            raise ValueError(f"ratios must be among {list(_RATIOS)}, got {list(self.ratios)}")
        if not self.hidden_sizes:
            raise ValueError("hidden_sizes must not be empty")

    def stage_options(self) -> list[StageSpec]:
        """Every distinct stage (0:1 blocks have one operator type; others two different ones)."""
        out = []
        for ratio in self.ratios:
            pairs = (
                [(o, o) for o in self.operators]
                if ratio == (0, 1)
                else [(a, b) for a in self.operators for b in self.operators if a != b]
            )
            for a, b in pairs:
                for f in self.ffn_choices:
                    for n in range(1, self.max_blocks + 1):
                        out.append(StageSpec(a, b, tuple(ratio), f, n))
        return out

    def validate(self, stages: Sequence[StageSpec]) -> None:
        if len(stages) != self.stages:
            raise ValueError(f"an architecture has {self.stages} stages, got {len(stages)}")
        for s in stages:
            if s.ratio not in self.ratios:
                raise ValueError(f"hybrid ratio {s.ratio} is not in {list(self.ratios)}")
            types = {s.second} if s.ratio == (0, 1) else {s.first, s.second}
            if s.ratio != (0, 1) and s.first == s.second:
                raise ValueError("a two-type block needs two different operators")
            if len(types) > 2:
                raise ValueError("a block has at most 2 mixer types")
            if not types <= set(self.operators):
                raise ValueError(f"unknown operator in {s}; allowed: {list(self.operators)}")
            if s.ffn not in self.ffn_choices:
                raise ValueError(f"FFN count must be in {list(self.ffn_choices)}, got {s.ffn}")
            if not 1 <= s.blocks <= self.max_blocks:
                raise ValueError(f"blocks must be in 1..{self.max_blocks}, got {s.blocks}")

    def stages_from_blocks(
        self, blocks: Sequence[tuple[str | Sequence[str], int]], trim: bool = False
    ) -> tuple[StageSpec, ...]:
        """Stages from ``[(block, count), ...]`` (see :meth:`StageSpec.from_block`); more than
        ``max_operators`` operators raise ``ValueError`` unless ``trim`` (the search trims the last
        stage)."""
        stages = tuple(StageSpec.from_block(b, n) for b, n in blocks)
        self.validate(stages)
        total = sum(len(s.operators()) for s in stages)
        if total > self.max_operators and not trim:
            raise ValueError(
                f"too many operators: {total} > max_operators={self.max_operators} (pass trim=True "
                f"to trim the last stage)"
            )
        return stages

    def operators_of(self, stages: Sequence[StageSpec]) -> tuple[str, ...]:
        """The operator sequence, the last stage trimmed to ``max_operators`` in total."""
        self.validate(stages)
        ops = [o for s in stages for o in s.operators()]
        return tuple(ops[: self.max_operators])

    def random(self, rng: np.random.Generator) -> tuple[StageSpec, ...]:
        opts = self.stage_options()
        return tuple(opts[int(rng.integers(len(opts)))] for _ in range(self.stages))

    def mutate(
        self, stages: Sequence[StageSpec], rng: np.random.Generator
    ) -> tuple[StageSpec, ...]:
        """Change one factor of one stage: an operator, the hybrid ratio, the FFN count or the
        block count (always a different architecture)."""
        stages = list(stages)
        while True:
            i = int(rng.integers(len(stages)))
            s = stages[i]
            kind = ("operator", "ratio", "ffn", "blocks")[int(rng.integers(4))]
            if kind == "operator":
                slot = "second" if s.ratio == (0, 1) else ("first", "second")[int(rng.integers(2))]
                other = s.first if slot == "second" else s.second
                choices = [
                    o
                    for o in self.operators
                    if o != getattr(s, slot) and (s.ratio == (0, 1) or o != other)
                ]
                if not choices:
                    continue
                new = replace(s, **{slot: choices[int(rng.integers(len(choices)))]})
                if new.ratio == (0, 1):
                    new = replace(new, first=new.second)
            elif kind == "ratio":
                choices = [r for r in self.ratios if r != s.ratio]
                if not choices:
                    continue
                r = choices[int(rng.integers(len(choices)))]
                first, second = s.first, s.second
                if r == (0, 1):
                    first = second
                elif first == second:
                    first = next(o for o in self.operators if o != second)
                new = replace(s, ratio=tuple(r), first=first, second=second)
            elif kind == "ffn":
                choices = [f for f in self.ffn_choices if f != s.ffn]
                if not choices:
                    continue
                new = replace(s, ffn=choices[int(rng.integers(len(choices)))])
            else:
                choices = [n for n in range(1, self.max_blocks + 1) if n != s.blocks]
                if not choices:
                    continue
                new = replace(s, blocks=choices[int(rng.integers(len(choices)))])
            stages[i] = new
            return tuple(stages)

    def realise(
        self, stages: Sequence[StageSpec], lut: LatencyLUT, budget_ms: float
    ) -> tuple[HybridArch | None, float]:
        """(arch at the largest feasible hidden size, its predicted latency), or (None, latency at
        the smallest hidden size) when no hidden size meets ``budget_ms``."""
        ops = self.operators_of(stages)
        lat = math.inf
        for h in sorted(self.hidden_sizes, reverse=True):
            arch = HybridArch(ops, h)
            lat = lut.predict(arch)
            if lat <= budget_ms:
                return arch, lat
        return None, lat


@dataclass
class SearchResult:
    """Best feasible architecture found, with the history of every evaluated candidate."""

    stages: tuple[StageSpec, ...]
    arch: HybridArch
    fitness: float
    latency_ms: float
    evaluations: int
    history: list[tuple[float, float, bool]] = field(default_factory=list)  # fitness, ms, feasible


class _Evaluator:
    """Realises candidates through the LUT (free) and calls ``fitness_fn`` only on feasible ones
    (the expensive short training); memoised, but every call counts as an evaluation."""

    def __init__(self, space, fitness_fn, lut, budget):
        self.space, self.fitness_fn, self.lut, self.budget = space, fitness_fn, lut, budget
        self.memo: dict[tuple[StageSpec, ...], float] = {}
        self.count = 0
        self.history: list[tuple[float, float, bool]] = []
        self.best: tuple[float, tuple[StageSpec, ...], HybridArch, float] | None = None

    def feasible(self, stages: tuple[StageSpec, ...]) -> tuple[HybridArch | None, float]:
        return self.space.realise(stages, self.lut, self.budget)

    def __call__(self, stages: tuple[StageSpec, ...], arch: HybridArch, lat: float) -> float:
        if stages not in self.memo:
            self.memo[stages] = float(self.fitness_fn(arch))
        fit = self.memo[stages]
        self.count += 1
        self.history.append((fit, lat, True))
        if self.best is None or fit < self.best[0]:
            self.best = (fit, stages, arch, lat)
        return fit

    def draw(self, propose: Callable[[], tuple[StageSpec, ...]], tries: int):
        """The first feasible proposal (infeasible ones are rejected by the LUT, not evaluated)."""
        for _ in range(tries):
            stages = propose()
            arch, lat = self.feasible(stages)
            if arch is not None:
                return stages, arch, lat
        raise ValueError(
            f"no architecture meets the budget of {self.budget} ms in {tries} proposals"
        )

    def result(self) -> SearchResult:
        assert self.best is not None
        fit, stages, arch, lat = self.best
        return SearchResult(stages, arch, fit, lat, self.count, self.history)


def _check_budget(space: SearchSpace, lut: LatencyLUT, budget: float) -> None:
    check_type("space", space, SearchSpace)
    check_type("lut", lut, LatencyLUT)
    check_positive("latency_budget", budget)
    h = min(space.hidden_sizes)
    cheapest = lut.predict(
        HybridArch((min(space.operators, key=lambda o: lut.op_latency(o, h)),), h)
    )
    if cheapest > budget:
        raise ValueError(
            f"no architecture meets the budget: latency_budget={budget} ms is below the cheapest "
            f"single-operator model ({cheapest:.4g} ms)"
        )


def aging_evolution(
    space: SearchSpace,
    fitness_fn: Callable[[HybridArch], float],
    lut: LatencyLUT,
    latency_budget: float,
    population: int = 16,
    sample: int = 4,
    children_per_cycle: int = 10,
    cycles: int = 20,
    seed: int = 0,
    max_tries: int = 1000,
) -> SearchResult:
    """Aging evolution under a latency budget (module docstring, item 4); lower fitness is better
    (the paper's short-training PPL).

    The initial population holds ``population`` random *feasible* architectures; each child is a
    one-factor mutation of the best of ``sample`` uniformly drawn members, re-mutated until the LUT
    says it is feasible (at most ``max_tries``; infeasible candidates are never trained or
    returned); the oldest member dies. ``fitness_fn`` is called population + cycles ·
    children_per_cycle times. Same seed ⇒ same result.
    """
    _check_budget(space, lut, latency_budget)
    for name, value in (
        ("population", population),
        ("sample", sample),
        ("children_per_cycle", children_per_cycle),
        ("cycles", cycles),
        ("max_tries", max_tries),
    ):
        check_positive(name, value, integer=True)
    if sample > population:
        raise ValueError(f"sample={sample} must be <= population={population}")
    rng = np.random.default_rng(seed)
    ev = _Evaluator(space, fitness_fn, lut, latency_budget)
    pop: list[tuple[tuple[StageSpec, ...], float]] = []
    while len(pop) < population:
        stages, arch, lat = ev.draw(lambda: space.random(rng), max_tries)
        pop.append((stages, ev(stages, arch, lat)))
    for _ in track(range(cycles), "aging evolution (cycles)"):
        for _ in range(children_per_cycle):
            idx = rng.choice(len(pop), size=sample, replace=False)
            parent = min((pop[i] for i in idx), key=lambda c: c[1])[0]
            child, arch, lat = ev.draw(lambda p=parent: space.mutate(p, rng), max_tries)
            pop.append((child, ev(child, arch, lat)))
            pop.pop(0)  # the oldest dies
    return ev.result()


def random_search(
    space: SearchSpace,
    fitness_fn: Callable[[HybridArch], float],
    lut: LatencyLUT,
    latency_budget: float,
    evaluations: int,
    seed: int = 0,
    max_tries: int = 1000,
) -> SearchResult:
    """The baseline: ``evaluations`` uniform random feasible architectures; the best one."""
    _check_budget(space, lut, latency_budget)
    check_positive("evaluations", evaluations, integer=True)
    rng = np.random.default_rng(seed)
    ev = _Evaluator(space, fitness_fn, lut, latency_budget)
    for _ in track(range(evaluations), "random search (evaluations)"):
        ev(*ev.draw(lambda: space.random(rng), max_tries))
    return ev.result()


# -- 5. depth-width scaling law ----------------------------------------------------------------


def depth_width_law(params: Sequence[float], depth, width):
    """L(D, W) = L0 + a·D^−α + b·W^−β (``params`` = (L0, a, α, b, β))."""
    l0, a, alpha, b, beta = params
    return l0 + a * np.asarray(depth, float) ** -alpha + b * np.asarray(width, float) ** -beta


def fit_depth_width_law(
    depth: Iterable[float],
    width: Iterable[float],
    loss: Iterable[float],
    starts: int = 16,
    seed: int = 0,
) -> tuple[float, float, float, float, float]:
    """Least-squares fit of :func:`depth_width_law` to (D, W, loss) → (L0, a, α, b, β).

    Fits on the log of the loss residual scale with ``scipy.optimize.least_squares`` from
    ``starts`` seeded initial points (exponents in (0.05, 2)); returns the best fit.
    """
    from scipy.optimize import least_squares

    d, w, y = (np.asarray(list(v), float) for v in (depth, width, loss))
    if not (len(d) == len(w) == len(y)) or len(d) < 5:
        raise ValueError(
            f"need >= 5 (D, W, loss) triples of equal length, got {len(d)}, {len(w)}, {len(y)}"
        )
    if (d <= 0).any() or (w <= 0).any():
        raise ValueError("depth and width must be > 0")
    rng = np.random.default_rng(seed)
    best = None
    span = float(y.max() - y.min()) or 1.0

    def resid(p):
        return (depth_width_law(p, d, w) - y) / y

    for _ in range(starts):
        alpha, beta = rng.uniform(0.1, 1.5, size=2)
        x0 = [
            float(y.min()) * 0.9,
            span * float(d.min()) ** alpha,
            alpha,
            span * float(w.min()) ** beta,
            beta,
        ]
        try:
            fit = least_squares(
                resid,
                x0,
                bounds=([0, 0, 0.01, 0, 0.01], [np.inf, np.inf, 4.0, np.inf, 4.0]),
                x_scale="jac",
                max_nfev=5000,
            )
        except ValueError:
            continue
        if best is None or fit.cost < best.cost:
            best = fit
    if best is None:
        raise ValueError("the depth-width law fit did not converge")
    return tuple(float(v) for v in best.x)  # type: ignore[return-value]
