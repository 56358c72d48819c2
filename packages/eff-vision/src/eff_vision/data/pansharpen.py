"""The synthetic Wald protocol for pan-sharpening (Pan-LUT reproduction).

Wald's protocol evaluates a pan-sharpener at reduced resolution: the available multispectral image
plays the ground truth, and the inputs are degraded copies of it. ``wald_degrade(gt)`` (spec
"Reproduction (vision.panlut)"):

- MS_lr = Gaussian MTF blur of gain ``mtf_gain`` at the LR Nyquist frequency,
  σ = R·sqrt(−2 ln g)/π/2, kernel 4R+1, reflect padding, then decimation by R at phase R//2;
- PAN = Σ_b w_b·gt_b + ``pan_nonlinearity``·(sqrt(red·blue) − 0.25) (red and blue = the first and last band;
  with the default 0.3 this is the spec's 0.3·sqrt(red·blue) − 0.075). The nonlinear term matters:
  with a purely linear PAN, component substitution (GSA/IHS) is near-oracle;
- Gaussian noise of std ``noise`` on PAN and MS (explicit ``seed``), then clamp to [0, 1].
"""

from __future__ import annotations

import math

import numpy as np

from eff_shared.errors import check_int, check_positive
from eff_shared.seeding import make_rng

__all__ = ["degrade_pan", "mtf_kernel", "wald_degrade"]


def mtf_kernel(ratio: int, mtf_gain: float = 0.3) -> np.ndarray:
    """The separable 1-D Gaussian MTF kernel (length 4R+1, sums to 1)."""
    sigma = ratio * math.sqrt(-2.0 * math.log(mtf_gain)) / math.pi / 2.0
    half = 2 * ratio
    x = np.arange(-half, half + 1, dtype=np.float64)
    k = np.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def degrade_pan(pan: np.ndarray, ratio: int = 4, mtf_gain: float = 0.3) -> np.ndarray:
    """PAN (H×W) through the same MTF blur and decimation as the MS of the protocol (for GSA's
    regression and the full-resolution D_s)."""
    import cv2

    k = mtf_kernel(ratio, mtf_gain).astype(np.float32)
    blurred = cv2.sepFilter2D(np.asarray(pan, np.float32), -1, k, k, borderType=cv2.BORDER_REFLECT)
    return blurred[ratio // 2 :: ratio, ratio // 2 :: ratio]


def _check_ratio(ratio: object) -> int:
    return check_int("ratio", ratio, minimum=1)


def wald_degrade(
    hrms: np.ndarray,
    ratio: int = 4,
    mtf_gain: float = 0.3,
    pan_weights: tuple[float, ...] = (0.25, 0.45, 0.30),
    pan_nonlinearity: float = 0.3,
    noise: float = 0.005,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Degrade a ground-truth HR multispectral image ``hrms`` (H×W×B float in [0, 1]).

    Returns ``(ms_lr, pan)``: ms_lr is (H/R)×(W/R)×B, pan is H×W; both float32 in [0, 1].
    ``ValueError`` when H or W is not divisible by ``ratio``, ``ratio`` is not a positive integer,
    the band count differs from ``len(pan_weights)``, or values lie outside [0, 1].
    """
    import cv2

    from eff_vision.data.images import check_image

    ratio = _check_ratio(ratio)
    if not 0.0 < mtf_gain < 1.0:
        raise ValueError(f"mtf_gain must lie in (0, 1), got {mtf_gain!r}")
    check_positive("noise", noise, strict=False)
    gt = check_image("hrms", hrms, channels=None, allow_uint8=False).astype(np.float32)
    h, w, bands = gt.shape
    if h % ratio or w % ratio:
        raise ValueError(
            f"hrms height and width must be divisible by ratio={ratio}, got {h}×{w} "
            f"(crop to {h - h % ratio}×{w - w % ratio})"
        )
    if len(pan_weights) != bands:
        raise ValueError(
            f"pan_weights must have one weight per band ({bands}), got {len(pan_weights)}"
        )
    k = mtf_kernel(ratio, mtf_gain).astype(np.float32)
    blurred = cv2.sepFilter2D(gt, -1, k, k, borderType=cv2.BORDER_REFLECT)
    if blurred.ndim == 2:
        blurred = blurred[:, :, None]
    ph = ratio // 2
    ms_lr = blurred[ph::ratio, ph::ratio]
    pan = gt @ np.asarray(pan_weights, dtype=np.float32)
    if pan_nonlinearity:
        pan = pan + pan_nonlinearity * (np.sqrt(gt[:, :, 0] * gt[:, :, -1]) - 0.25)
    rng = make_rng(seed, 11)
    pan = pan + noise * rng.standard_normal(pan.shape).astype(np.float32)
    ms_lr = ms_lr + noise * rng.standard_normal(ms_lr.shape).astype(np.float32)
    return (
        np.clip(ms_lr, 0.0, 1.0).astype(np.float32),
        np.clip(pan, 0.0, 1.0).astype(np.float32),
    )
