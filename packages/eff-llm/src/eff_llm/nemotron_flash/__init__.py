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

Modules, one per item: :mod:`~eff_llm.nemotron_flash.weight_norm`, :mod:`~eff_llm.nemotron_flash.model`,
:mod:`~eff_llm.nemotron_flash.latency`, :mod:`~eff_llm.nemotron_flash.search`,
:mod:`~eff_llm.nemotron_flash.scaling`.
"""

from eff_llm.nemotron_flash.latency import HybridArch, LatencyLUT, decode_latency
from eff_llm.nemotron_flash.model import (
    MIXERS,
    OPERATORS,
    HybridSLM,
    HybridSLMConfig,
    hybrid_param_count,
    parse_operators,
)
from eff_llm.nemotron_flash.scaling import depth_width_law, fit_depth_width_law
from eff_llm.nemotron_flash.search import (
    SearchResult,
    SearchSpace,
    StageSpec,
    aging_evolution,
    random_search,
)
from eff_llm.nemotron_flash.weight_norm import (
    CASE1,
    CASE2,
    DELTANET_CASE1,
    DELTANET_CASE2,
    DELTANET_MODULES,
    HYBRID_CASE1,
    HYBRID_CASE2,
    MAMBA2_CASE1,
    MAMBA2_CASE2,
    WeightNormProjector,
    WeightNormTargets,
    apply_weight_norm_,
    weight_norm_targets,
)

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
