"""Bad input to ParetoQ and LRQK gives a clear error, never NaN outputs or a LAPACK trace."""

import pytest
import torch
from torch import nn

from eff_kernels.lrqk import lrqk_prefill
from eff_kernels.paretoq import ParetoQConfig, QATLinear, convert_, quantize_


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_quantize_and_convert_need_a_module():
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module, got str"):
        quantize_("model", ParetoQConfig(bits=2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        convert_("model")  # type: ignore[arg-type]


def test_quantize_checks_finiteness_by_default():
    assert ParetoQConfig(bits=2).check_finite is True
    model = _mlp()
    with torch.no_grad():
        model[2].weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"^2: weight holds NaN or inf"):
        quantize_(model, ParetoQConfig(bits=2))
    quantize_(_mlp(), ParetoQConfig(bits=2, check_finite=False))  # the opt-out still works


def test_qat_forward_with_a_nan_weight_raises():
    model = quantize_(_mlp(), ParetoQConfig(bits=4))
    assert isinstance(model[0], QATLinear)
    with torch.no_grad():
        model[0].weight[1, 1] = float("nan")
    with pytest.raises(FloatingPointError, match="non-finite quantized weight"):
        model(torch.randn(2, 8))


def test_convert_refuses_a_never_quantized_or_converted_model_and_nan_weights():
    with pytest.raises(ValueError, match="never quantized"):
        convert_(_mlp())
    model = convert_(quantize_(_mlp(), ParetoQConfig(bits=2)), backend="reference")
    with pytest.raises(ValueError, match="already converted"):
        convert_(model)
    model = quantize_(_mlp(), ParetoQConfig(bits=2))
    with torch.no_grad():
        model[2].weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"convert_: 2 has a non-finite weight"):
        convert_(model)


@pytest.mark.parametrize("name", ["q", "k"])
def test_lrqk_prefill_rejects_nan_inputs(name):
    q, k = torch.randn(2, 32, 16), torch.randn(2, 32, 16)
    (q if name == "q" else k)[0, 3, 2] = float("nan")
    with pytest.raises(ValueError, match=rf"^{name} must be finite"):
        lrqk_prefill(q, k, rank=4)
