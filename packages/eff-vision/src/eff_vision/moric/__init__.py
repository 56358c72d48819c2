"""MoRIC: a modular region-based implicit codec with adaptive chain coding (**our design** on top
of Cool-Chic/C3; the paper's code was not available).

- :mod:`eff_vision.moric.codec` — :class:`MoRIC`, :class:`RegionCodecConfig`: per-region overfitted
  latent pyramids with an ARM entropy model and a synthesis, a shared global modulator, quantised
  and entropy-coded parameters, decoder-exact ARM arithmetic.
- :mod:`eff_vision.moric.chain` — :class:`ChainCoder`: lossless crack-code partition coding (shared
  boundaries once), lossy Douglas–Peucker polygons, adaptive mode choice.
- :mod:`eff_vision.moric.bitstream` — the container (magic, version, sections with CRC32):
  :class:`Bitstream`, :class:`MoRICDecodeError`.
- :mod:`eff_vision.moric.rangecoder` — the integer range coder and its models.
- :mod:`eff_vision.moric.baselines` — JPEG/WebP (OpenCV) at matched bpp, 1-bit PNG masks.
"""

from eff_vision.moric.bitstream import Bitstream, MoRICDecodeError
from eff_vision.moric.chain import ChainCoder, boundary_pixels, iou
from eff_vision.moric.codec import MoRIC, RegionCodecConfig, decode_macs_per_pixel

__all__ = [
    "Bitstream",
    "ChainCoder",
    "MoRIC",
    "MoRICDecodeError",
    "RegionCodecConfig",
    "boundary_pixels",
    "decode_macs_per_pixel",
    "iou",
]
