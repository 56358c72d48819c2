"""Classic low-light baselines (spec "LASQ — Reproduction"): automatic global gamma
(γ = ln 0.5 / ln mean), CLAHE on L of Lab (clip 2, 8×8 tiles, OpenCV), histogram equalisation of Y
(YCrCb, OpenCV), gamma + CLAHE, and MSRCR (the same Retinex as the LASQ prior, σ = 15, 80, 250).
Inputs: H×W×3 RGB, uint8 or float in [0, 1]; outputs float32 in [0, 1].
"""

from __future__ import annotations

import math

import numpy as np

from eff_vision.lasq._ops import msrcr as _msrcr255
from eff_vision.lasq.prior import check_rgb

__all__ = ["BASELINES", "clahe", "gamma_auto", "gamma_clahe", "he", "msrcr"]


def _to_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)


def gamma_auto(img: np.ndarray) -> np.ndarray:
    """Global gamma that maps the mean intensity to 0.5: γ = ln 0.5 / ln mean(I)."""
    x = check_rgb("img", img)
    mean = float(np.clip(x.mean(), 1e-6, 1 - 1e-6))
    return np.power(x, math.log(0.5) / math.log(mean)).astype(np.float32)


def clahe(img: np.ndarray, clip: float = 2.0, tiles: int = 8) -> np.ndarray:
    """CLAHE on the L channel of Lab (OpenCV ``createCLAHE``)."""
    import cv2

    x = _to_u8(check_rgb("img", img))
    lab = cv2.cvtColor(x, cv2.COLOR_RGB2LAB)
    lab[:, :, 0] = cv2.createCLAHE(clipLimit=clip, tileGridSize=(tiles, tiles)).apply(lab[:, :, 0])
    return (cv2.cvtColor(lab, cv2.COLOR_LAB2RGB) / 255.0).astype(np.float32)


def he(img: np.ndarray) -> np.ndarray:
    """Histogram equalisation of Y (YCrCb)."""
    import cv2

    x = _to_u8(check_rgb("img", img))
    ycc = cv2.cvtColor(x, cv2.COLOR_RGB2YCrCb)
    ycc[:, :, 0] = cv2.equalizeHist(ycc[:, :, 0])
    return (cv2.cvtColor(ycc, cv2.COLOR_YCrCb2RGB) / 255.0).astype(np.float32)


def gamma_clahe(img: np.ndarray) -> np.ndarray:
    """Automatic gamma followed by CLAHE."""
    return clahe(gamma_auto(img))


def msrcr(img: np.ndarray) -> np.ndarray:
    """MSRCR with the official parameters (σ = 15, 80, 250; G = 4, b = 25, α = 125, β = 46)."""
    x = check_rgb("img", img)
    return (_msrcr255(x * 255.0) / 255.0).astype(np.float32)


BASELINES = {
    "auto gamma": gamma_auto,
    "CLAHE": clahe,
    "HE": he,
    "gamma + CLAHE": gamma_clahe,
    "MSRCR": msrcr,
}
