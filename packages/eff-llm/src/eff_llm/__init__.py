"""eff-llm: Adapters, decoding, federated fine-tuning and training methods on Hugging Face models (S'MoRE, DEFT, LoRASuite, FedSVD, YOCO, OmniDraft, SVDecode, HeavyWater/SimplexWater, LRC, Nemotron-Flash, GAIN-RL, prompt-tuning memorization)."""

from importlib.metadata import version as _version

__version__ = _version("eff-llm")

import importlib
from typing import Any

# Public names imported on first use (PEP 562), so ``import eff_llm`` does not load torch,
# transformers or peft: {name: module}.
_LAZY: dict[str, str] = {
    # S'MoRE and its MoLoRA baseline
    "SMoREConfig": "eff_llm.smore",
    "SMoREModel": "eff_llm.smore",
    "SMoRELinear": "eff_llm.smore",
    "get_smore_model": "eff_llm.smore",
    "smore_parameter_count": "eff_llm.smore",
    "MoLoRAConfig": "eff_llm.smore",
    "get_molora_model": "eff_llm.smore",
    "HierarchicalRegression": "eff_llm.smore",
    "hierarchical_regression": "eff_llm.smore",
    # DEFT (peft's implementation, checked against the paper)
    "DeftConfig": "eff_llm.deft",
    "get_deft_model": "eff_llm.deft",
    "deft_delta": "eff_llm.deft",
    "identity_rounding_bound": "eff_llm.deft",
    "init_identity_ratio": "eff_llm.deft",
    # LoRASuite
    "LoRASuiteConfig": "eff_llm.lorasuite",
    "TransferReport": "eff_llm.lorasuite",
    "transfer_lora": "eff_llm.lorasuite",
    "embedding_transfer_matrix": "eff_llm.lorasuite",
    "linear_cka": "eff_llm.lorasuite",
    "monotone_layer_alignment": "eff_llm.lorasuite",
    "head_alignment": "eff_llm.lorasuite",
    "prepare_lft_model": "eff_llm.lorasuite",
    "derive_updated_model": "eff_llm.lorasuite",
    # prompt-tuning memorization
    "SoftPromptClassifier": "eff_llm.prompt_memorization",
    "fit_prompt": "eff_llm.prompt_memorization",
    "make_memorization_dataset": "eff_llm.prompt_memorization",
    "make_random_backbone": "eff_llm.prompt_memorization",
    "memorization_sweep": "eff_llm.prompt_memorization",
    "min_prompt_length": "eff_llm.prompt_memorization",
    # OmniDraft (cross-vocabulary speculative decoding)
    "AcceptanceHead": "eff_llm.omnidraft",
    "CrossVocabTranslator": "eff_llm.omnidraft",
    "HybridDistillationLoss": "eff_llm.omnidraft",
    "NGramCache": "eff_llm.omnidraft",
    "OnlineDistiller": "eff_llm.omnidraft",
    "OracleDrafter": "eff_llm.omnidraft",
    "SpeculativeOutput": "eff_llm.omnidraft",
    "distill_drafter": "eff_llm.omnidraft",
    "omnidraft_decoding_loop": "eff_llm.omnidraft",
    "omnidraft_generate": "eff_llm.omnidraft",
    # SVDecode (steering-vector decoding)
    "SVDecodeLogitsProcessor": "eff_llm.svdecode",
    "calibrate_mu": "eff_llm.svdecode",
    "steering_vector": "eff_llm.svdecode",
    "svdecode_logprobs": "eff_llm.svdecode",
    "warm_start": "eff_llm.svdecode",
    # LRC (Low-Rank Clone)
    "LowRankClone": "eff_llm.lrc",
    "LowRankCloneConfig": "eff_llm.lrc",
    "LRCOutput": "eff_llm.lrc",
    "clone_loss": "eff_llm.lrc",
    "lrc_trainable_count": "eff_llm.lrc",
    # Nemotron-Flash
    "apply_weight_norm_": "eff_llm.nemotron_flash",
    "WeightNormProjector": "eff_llm.nemotron_flash",
    "HybridSLMConfig": "eff_llm.nemotron_flash",
    "HybridSLM": "eff_llm.nemotron_flash",
    "hybrid_param_count": "eff_llm.nemotron_flash",
    "LatencyLUT": "eff_llm.nemotron_flash",
    "HybridArch": "eff_llm.nemotron_flash",
    "SearchSpace": "eff_llm.nemotron_flash",
    "StageSpec": "eff_llm.nemotron_flash",
    "aging_evolution": "eff_llm.nemotron_flash",
    "random_search": "eff_llm.nemotron_flash",
    "fit_depth_width_law": "eff_llm.nemotron_flash",
    # GAIN-RL
    "angle_concentration": "eff_llm.gain_rl",
    "collect_angle_signal": "eff_llm.gain_rl",
    "angle_order": "eff_llm.gain_rl",
    "GaussianCurriculumSampler": "eff_llm.gain_rl",
    "GRPOLite": "eff_llm.gain_rl",
    "grpo_train": "eff_llm.gain_rl",
    "GainRLCallback": "eff_llm.gain_rl",
    "curriculum_trainer": "eff_llm.gain_rl",
}

__all__: list[str] = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'eff_llm' has no attribute {name!r}")
