"""Metrics of eff-vision, one submodule per family (methods add their own):

- :mod:`eff_vision.metrics.image` — PSNR/SSIM with fixed conventions (``data_range=1``,
  ``channel_axis=-1``; scikit-image underneath).
- :mod:`eff_vision.metrics.pansharpen` — PSNR, SAM, ERGAS, Q (UIQI), Q2n, D_λ, D_s, QNR (Vivone
  toolbox conventions).
- :mod:`eff_vision.metrics.ldl` — the six label-distribution metrics (RankMatch).
- :mod:`eff_vision.metrics.reid` — CMC / mAP with torchreid's ``evaluate_rank`` conventions (SVIP).
- :mod:`eff_vision.metrics.stereo` — EPE, bad-pixel rate, D1 (RobIA).
"""

from __future__ import annotations

from eff_vision.metrics import image, ldl, pansharpen, reid, stereo

__all__ = ["image", "ldl", "pansharpen", "reid", "stereo"]
