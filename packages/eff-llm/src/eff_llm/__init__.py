"""eff-llm: Adapters, decoding, federated fine-tuning and training methods on Hugging Face models (S'MoRE, DEFT, LoRASuite, FedSVD, YOCO, OmniDraft, SVDecode, HeavyWater/SimplexWater, LRC, Nemotron-Flash, GAIN-RL, prompt-tuning memorization).

One module per method (``eff_llm.<method>``; OmniDraft and Nemotron-Flash are subpackages), its
reproduction in ``eff_llm.reproduce.<method>``, the offline docstring corpus and BPE in
:mod:`eff_llm.corpus`, the command line in :mod:`eff_llm.cli` (``eff llm ...``). The names below
are each method's public API, imported on first use (PEP 562) so that ``import eff_llm`` does not
load torch, transformers or peft; every other public name is imported from its module.
"""

from __future__ import annotations

import importlib
from importlib.metadata import version as _version
from typing import Any

__version__ = _version("eff-llm")

# Public names by module: ``from eff_llm.<module> import <name>``, done on first access.
_EXPORTS: dict[str, tuple[str, ...]] = {
    # S'MoRE and its MoLoRA baseline
    "smore": (
        "SMoREConfig",
        "SMoREModel",
        "SMoRELinear",
        "get_smore_model",
        "smore_parameter_count",
        "MoLoRAConfig",
        "get_molora_model",
        "HierarchicalRegression",
        "hierarchical_regression",
    ),
    # DEFT (peft's implementation, checked against the paper)
    "deft": (
        "DeftConfig",
        "get_deft_model",
        "deft_delta",
        "identity_rounding_bound",
        "init_identity_ratio",
    ),
    "lorasuite": (
        "LoRASuiteConfig",
        "TransferReport",
        "transfer_lora",
        "embedding_transfer_matrix",
        "linear_cka",
        "monotone_layer_alignment",
        "head_alignment",
        "prepare_lft_model",
        "derive_updated_model",
    ),
    "prompt_memorization": (
        "SoftPromptClassifier",
        "fit_prompt",
        "make_memorization_dataset",
        "make_random_backbone",
        "memorization_sweep",
        "min_prompt_length",
    ),
    # FedSVD (and its FFA-LoRA / FedAvg-LoRA baselines) and YOCO: federated LoRA
    "fedsvd": (
        "DPConfig",
        "FedSVDAggregator",
        "FFALoRAAggregator",
        "FedAvgLoRAAggregator",
        "make_dp_lora_client",
    ),
    "yoco": (
        "YOCOAggregator",
        "YOCOConfig",
        "make_yoco_client",
    ),
    # OmniDraft (cross-vocabulary speculative decoding)
    "omnidraft": (
        "AcceptanceHead",
        "CrossVocabTranslator",
        "HybridDistillationLoss",
        "NGramCache",
        "OnlineDistiller",
        "OracleDrafter",
        "SpeculativeOutput",
        "distill_drafter",
        "omnidraft_decoding_loop",
        "omnidraft_generate",
    ),
    # SVDecode (steering-vector decoding)
    "svdecode": (
        "SVDecodeLogitsProcessor",
        "calibrate_mu",
        "steering_vector",
        "svdecode_logprobs",
        "warm_start",
    ),
    # HeavyWater / SimplexWater watermarks
    "watermark": (
        "HeavyWaterConfig",
        "HeavyWaterDetector",
        "HeavyWaterLogitsProcessor",
        "SimplexWaterConfig",
        "SimplexWaterDetector",
        "SimplexWaterLogitsProcessor",
    ),
    # LRC (Low-Rank Clone)
    "lrc": (
        "LowRankClone",
        "LowRankCloneConfig",
        "LRCOutput",
        "clone_loss",
        "lrc_trainable_count",
    ),
    "nemotron_flash": (
        "apply_weight_norm_",
        "WeightNormProjector",
        "HybridSLMConfig",
        "HybridSLM",
        "hybrid_param_count",
        "LatencyLUT",
        "HybridArch",
        "SearchSpace",
        "StageSpec",
        "aging_evolution",
        "random_search",
        "fit_depth_width_law",
    ),
    "gain_rl": (
        "angle_concentration",
        "collect_angle_signal",
        "angle_order",
        "GaussianCurriculumSampler",
        "GRPOLite",
        "grpo_train",
        "GainRLCallback",
        "curriculum_trainer",
    ),
}

_MODULE_OF = {name: f"eff_llm.{module}" for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'eff_llm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
