"""MoRIC: a modular region-based implicit codec with adaptive chain coding (**our design** on top
of Cool-Chic/C3; the paper's code was not available).

- :mod:`eff_vision.moric.codec` — :class:`MoRIC`, :class:`RegionCodecConfig`: per-region overfitted
  latent pyramids with an ARM entropy model and a synthesis, a shared global modulator, quantised
  and entropy-coded parameters, decoder-exact ARM arithmetic.
- :mod:`eff_vision.moric.chain` — :class:`ChainCoder`: contour streams with lossless crack-code
  partition coding (shared boundaries once), lossy Douglas–Peucker polygons, adaptive mode choice;
  the payload coding itself is :mod:`eff_vision.moric.contours`.
- :mod:`eff_vision.moric.bitstream` — the container (magic, version, sections with CRC32):
  :class:`Bitstream`, :func:`coded_region_pixels`, :class:`MoRICDecodeError` (defined in
  :mod:`eff_vision.moric.errors`).
- :mod:`eff_vision.moric.rangecoder` — the integer range coder and its models.
- :mod:`eff_vision.moric.baselines` — JPEG/WebP (OpenCV) at matched bpp, 1-bit PNG masks.
"""

from eff_vision.moric.bitstream import Bitstream, MoRICDecodeError
from eff_vision.moric.chain import ChainCoder
from eff_vision.moric.codec import MoRIC, RegionCodecConfig, decode_macs_per_pixel
from eff_vision.moric.contours import boundary_pixels, iou

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
