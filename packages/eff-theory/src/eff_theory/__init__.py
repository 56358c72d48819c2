"""eff-theory: Numerical-science methods as a numpy/scipy library: heavy-tailed RNNs, label-noise GD, quantized streaming PCA, SpAM selection, LoRA-ML, polynomial-network identifiability; no torch."""

from importlib.metadata import version as _version

__version__ = _version("eff-theory")

from eff_theory.heavy_rnn import (
    HeavyTailedRNN,
    annealed_max_lyapunov_exponent,
    kaplan_yorke_dimension,
    levy_weight_matrix,
    lyapunov_spectrum,
    max_lyapunov_exponent,
    participation_ratio,
    predicted_transition_gain,
    quenched_statistic,
    quenched_transition_gain,
    quiescent_instability_gain,
    sample_levy_stable,
    transition_gain_from_sweep,
)
from eff_theory.label_noise_gd import (
    LNGDConfig,
    PatchCNN,
    SignalNoiseData,
    TrainResult,
    lngd_experiment,
    make_signal_noise_data,
    train,
)
from eff_theory.lora_meta import (
    LoRAMetaLearner,
    LowRankTaskFamily,
    adapt_lora,
    excess_risk,
    make_lowrank_task_family,
    sample_task,
    standard_retraining,
)
from eff_theory.pnn_identifiability import (
    IdentifiabilityReport,
    alignment_error,
    check_identifiability,
    expected_dimension,
    identify_shallow,
    kruskal_block_condition,
    neurovariety_dimension,
    shallow_tensor,
)
from eff_theory.quantized_oja import (
    LinearQuantizer,
    LogQuantizer,
    QuantizedOja,
    optimal_log_grid_params,
    quantization_lower_bound,
    sin2_error,
    spiked_covariance_stream,
    stochastic_round,
    success_boost,
)
from eff_theory.spam_select import (
    SpAMSelector,
    fdr_fnr,
    minimax_separation_rate,
    simulate_sequence_model,
    truncation_level,
    wrong_recovery,
)

# The torch parts load lazily from eff_theory.lora_meta (MultiTaskLoRA, meta_retrain) and
# eff_theory.pnn_identifiability (PolynomialNetwork, shallow_tensor_from_function) with the
# extra [torch]. The functions quantized_oja and spam_select are not re-exported: their names
# would shadow the submodules eff_theory.quantized_oja / .spam_select.
__all__ = [
    "HeavyTailedRNN",
    "IdentifiabilityReport",
    "LNGDConfig",
    "LinearQuantizer",
    "LoRAMetaLearner",
    "LogQuantizer",
    "LowRankTaskFamily",
    "PatchCNN",
    "QuantizedOja",
    "SignalNoiseData",
    "SpAMSelector",
    "TrainResult",
    "adapt_lora",
    "alignment_error",
    "annealed_max_lyapunov_exponent",
    "check_identifiability",
    "excess_risk",
    "expected_dimension",
    "fdr_fnr",
    "identify_shallow",
    "kaplan_yorke_dimension",
    "kruskal_block_condition",
    "levy_weight_matrix",
    "lngd_experiment",
    "lyapunov_spectrum",
    "make_lowrank_task_family",
    "make_signal_noise_data",
    "max_lyapunov_exponent",
    "minimax_separation_rate",
    "neurovariety_dimension",
    "optimal_log_grid_params",
    "participation_ratio",
    "predicted_transition_gain",
    "quantization_lower_bound",
    "quenched_statistic",
    "quenched_transition_gain",
    "quiescent_instability_gain",
    "sample_levy_stable",
    "sample_task",
    "shallow_tensor",
    "simulate_sequence_model",
    "sin2_error",
    "spiked_covariance_stream",
    "standard_retraining",
    "stochastic_round",
    "success_boost",
    "train",
    "transition_gain_from_sweep",
    "truncation_level",
    "wrong_recovery",
]
