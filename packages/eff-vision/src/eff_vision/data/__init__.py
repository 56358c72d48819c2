"""Seeded data generators and fixtures of eff-vision (nothing is downloaded).

One submodule per data family, so that the methods of the package add their own without touching
each other's code:

- :mod:`eff_vision.data.images` — ``sample_image``: scikit-image's **bundled** sample images (they
  ship inside the wheel), as float32 HWC arrays in [0, 1], resized/cropped on request.
- :mod:`eff_vision.data.pansharpen` — the synthetic Wald protocol (Pan-LUT).
- :mod:`eff_vision.data.lowlight` — synthetic low light (LASQ).
- :mod:`eff_vision.data.masks` — region masks, random masks and label maps (MoRIC).
- :mod:`eff_vision.data.digits` — seeded splits of scikit-learn's bundled digits (tensor compression,
  fingerprinting, and later LCoTTA, ComBo, HAWAII, FedPhoenix).
- :mod:`eff_vision.data.corruptions` — corrupted-digits streams (LCoTTA).
- :mod:`eff_vision.data.stereo` — procedural stereo pairs, stereo corruptions and streams, and
  ``TinyStereoNet`` (RobIA; imports torch, so it is not re-exported here).
- :mod:`eff_vision.data.synthetic_persons` — visible/infrared persons (SVIP).
- :mod:`eff_vision.data.ldl` — synthetic label distributions (RankMatch).

Every stochastic generator takes an explicit ``seed``; same seed ⇒ same data.
"""

from __future__ import annotations

from eff_vision.data.digits import digits_splits, rotate90
from eff_vision.data.images import BUNDLED_IMAGES, check_image, sample_image
from eff_vision.data.lowlight import synthetic_low_light
from eff_vision.data.masks import (
    RANDOM_MASK_KINDS,
    astronaut_suit_mask,
    coffee_mask,
    disk_with_hole,
    random_mask,
    smooth_label_map,
)
from eff_vision.data.pansharpen import wald_degrade

__all__ = [
    "BUNDLED_IMAGES",
    "RANDOM_MASK_KINDS",
    "astronaut_suit_mask",
    "check_image",
    "coffee_mask",
    "digits_splits",
    "disk_with_hole",
    "random_mask",
    "rotate90",
    "sample_image",
    "smooth_label_map",
    "synthetic_low_light",
    "wald_degrade",
]
