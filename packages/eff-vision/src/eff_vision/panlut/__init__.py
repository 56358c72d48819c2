"""Pan-LUT: learnable look-up tables for pan-sharpening (reconstruction of the network from the
released kernels). See :mod:`eff_vision.panlut.lut` for the method, :mod:`eff_vision.panlut.baselines`
for bicubic/Brovey/IHS/GSA and the PNN CNNs, :mod:`eff_vision.panlut.training` for the Wald-protocol
trainer."""

from eff_vision.panlut.lut import (
    AOLUT,
    PGLUT,
    SDLUT,
    BakedPanLUT,
    PanLUT,
    bicubic_upsample,
    identity_lut,
    lut_regularizer,
    lut_transform,
    peak_tensor_bytes,
    tiled_predict,
)

__all__ = [
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
]
