"""Synthetic low light (LASQ reproduction).

``low = clip(α·gt^γ·L + N(0, σ²), 0, 1)`` where L = 1, or with ``nonuniform=True`` a smooth random
illumination field in [0.15, 1] (a bicubically upsampled 3×3 random grid).
"""

from __future__ import annotations

import numpy as np

from eff_shared.errors import check_positive
from eff_shared.seeding import make_rng

__all__ = ["illumination_field", "synthetic_low_light"]


def illumination_field(
    shape: tuple[int, int], seed: int = 0, low: float = 0.15, high: float = 1.0, grid: int = 3
) -> np.ndarray:
    """A smooth random field in [low, high]: a grid×grid uniform grid, bicubically upsampled."""
    import cv2

    rng = make_rng(seed, 21)
    g = rng.uniform(low, high, size=(grid, grid)).astype(np.float32)
    field = cv2.resize(g, (shape[1], shape[0]), interpolation=cv2.INTER_CUBIC)
    return np.clip(field, low, high)


def synthetic_low_light(
    img: np.ndarray,
    alpha: float = 0.4,
    gamma: float = 2.0,
    sigma: float = 0.01,
    nonuniform: bool = False,
    seed: int = 0,
) -> np.ndarray:
    """Darken ``img`` (HWC, uint8 or float in [0, 1]) into a float32 low-light image in [0, 1]."""
    from eff_vision.data.images import check_image

    x = check_image("img", img, channels=None).astype(np.float32)
    check_positive("alpha", alpha)
    check_positive("gamma", gamma)
    check_positive("sigma", sigma, strict=False)
    low = alpha * np.power(x, gamma)
    if nonuniform:
        low = low * illumination_field(x.shape[:2], seed)[:, :, None]
    rng = make_rng(seed, 22)
    low = low + sigma * rng.standard_normal(low.shape).astype(np.float32)
    return np.clip(low, 0.0, 1.0).astype(np.float32)
