"""eff-vision: Efficient vision methods: compression and restoration (Pan-LUT, MoRIC, LASQ, tensor compression, filter fingerprinting), adaptation (RobIA, LCoTTA, SVIP, RankMatch, FedPhoenix) and representations (HAWAII, ComBo, CLIC).

Modules (import them directly; this package imports nothing heavy on its own):

- ``eff_vision.panlut`` — Pan-LUT learnable look-up tables for pan-sharpening (network: reconstruction).
- ``eff_vision.moric`` — MoRIC region-based implicit codec and adaptive chain coding (our design).
- ``eff_vision.lasq`` — LASQ luminance prior for low-light enhancement (+ a smoke-scale student).
- ``eff_vision.tensor_compress`` — data-informed Tucker-2 / CPD compression of conv layers.
- ``eff_vision.fingerprint`` — fine-tuning-resistant filter-frequency fingerprints (our construction).
- ``eff_vision.robia``, ``eff_vision.lcotta`` (with the TTA baselines in ``eff_vision.tta``),
  ``eff_vision.svip``, ``eff_vision.rankmatch``, ``eff_vision.fedphoenix`` — adaptation under shift.
- ``eff_vision.data`` and ``eff_vision.metrics`` — seeded generators and metrics shared by the methods.
- ``eff_vision.models`` — the small models the reproductions train (digits CNNs and MLPs, the
  fingerprinted net, a tiny-CLIP teacher).
"""

from __future__ import annotations

import importlib
from importlib.metadata import version
from typing import Any

__version__ = version("eff-vision")

# Public names by module, imported on first use so `import eff_vision` stays light (torch, OpenCV
# and scikit-image load only with the method that needs them). A name exported by two modules
# (`embed`: fingerprint and svip) is left out here: import it from its module.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "panlut": (
        "AOLUT",
        "PGLUT",
        "SDLUT",
        "BakedPanLUT",
        "PanLUT",
        "bicubic_upsample",
        "identity_lut",
        "lut_regularizer",
        "lut_transform",
        "peak_tensor_bytes",
        "tiled_predict",
    ),
    "moric": (
        "Bitstream",
        "ChainCoder",
        "MoRIC",
        "MoRICDecodeError",
        "RegionCodecConfig",
        "boundary_pixels",
        "decode_macs_per_pixel",
        "iou",
    ),
    "lasq": (
        "LASQConfig",
        "LASQModel",
        "LASQPrior",
        "gamma_energy",
        "partition",
    ),
    "tensor_compress": (
        "ALSTrace",
        "compress_model",
        "conv_flops",
        "cp_als_sigma",
        "cp_rank_for_ratio",
        "cp_to_weight",
        "decompose_conv",
        "frobenius_error",
        "input_covariance",
        "sigma_error",
        "sqrt_sigma",
        "tucker2_als_sigma",
        "tucker2_rank_for_ratio",
        "tucker2_rank_search",
        "tucker2_to_weight",
    ),
    "fingerprint": (
        "PADDING_MODES",
        "FingerprintModule",
        "FingerprintRecord",
        "UchidaWatermark",
        "VerifyResult",
        "extract",
        "invariant_basis",
        "invariant_coords",
        "low_pass_mask",
        "revised_fourier",
        "verify",
    ),
    "robia": (
        "EXPERT_FAMILIES",
        "AttExMoE",
        "FullFineTune",
        "RobIA",
        "RobustAdaptBNTeacher",
        "StereoBNAdapt",
        "augment_family",
        "robia_loss",
        "sgbm_batch",
        "sgbm_sparse_labels",
        "stream_eval",
        "train_experts",
    ),
    "lcotta": (
        "GradientSubspaceTracker",
        "LCoTTA",
    ),
    "tta": (
        "EATA",
        "NORM_TYPES",
        "NormAdapt",
        "TTAMethod",
        "Tent",
        "check_batch",
        "configure_norm_adaptation",
        "norm_parameters",
        "select_parameters",
        "softmax_entropy",
    ),
    "svip": (
        "ClusterMemoryContrast",
        "ReIDNet",
        "ResidualTransfer",
        "SVIPAdapter",
        "ShotBaseline",
        "UnsupervisedVIBaseline",
        "knn_indices",
        "reliable_cross_modal_pairs",
        "source_guided_clusters",
        "train_source_reid",
    ),
    "rankmatch": (
        "GaussianNoise",
        "RandomShift",
        "RankMatchLoss",
        "RankMatchTrainer",
        "canberra",
        "chebyshev",
        "clark",
        "cosine",
        "intersection",
        "kl_divergence",
        "ldl_report",
        "prr_loss",
        "split_xd",
    ),
    "fedphoenix": (
        "INITS",
        "LayerReset",
        "PhoenixReset",
        "ResetTrace",
        "phoenix_pre_local_train",
    ),
    "hawaii": (
        "HawaiiConfig",
        "HawaiiDistiller",
        "HawaiiModel",
        "TeacherAdapter",
        "TeacherSpecificLoRALinear",
        "TinyViT",
        "balance_loss",
        "get_hawaii_model",
        "merge_and_unload",
        "token_importance",
    ),
    "combo": (
        "ComBo",
        "ConstantDecoy",
        "DecoyBackbone",
        "LinearProbe",
        "MultiBackboneFeatures",
        "NoiseDecoy",
        "evaluate_probe",
        "fit_probe",
        "load_features",
        "resample_grid",
        "select_backbones",
        "select_columns",
    ),
    "clic": (
        "CLICConfig",
        "CLICTrainer",
        "ConcatPairDataset",
        "SwapFallbackWarning",
        "TinyCLIP",
        "WordTokenizer",
        "alternation_pattern",
        "clic_loss",
        "clip_loss",
        "collate_pairs",
        "compositional_eval",
        "concat_texts",
        "cosine_schedule",
        "negclip_loss",
        "orientation",
        "param_groups",
        "pretrained_tiny_clip",
        "swap_candidates",
        "swap_negative",
        "swap_within",
    ),
    "models": (
        "ClipImageTeacher",
        "DigitsCNN",
        "FedDigitsCNN",
        "FingerprintNet",
        "LNDigitsMLP",
        "LoRAConv",
        "ldl_mlp",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'eff_vision' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"eff_vision.{module}"), name)
    globals()[name] = value  # cache: the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
