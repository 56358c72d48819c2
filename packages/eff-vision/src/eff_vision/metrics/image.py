"""Image-quality metrics with fixed conventions: HWC float images in [0, 1] (uint8 accepted and
divided by 255), ``data_range=1``, ``channel_axis=-1`` (scikit-image underneath). An optional boolean
``mask`` restricts PSNR to the masked pixels (region PSNR of MoRIC)."""

from __future__ import annotations

import numpy as np

__all__ = ["psnr", "ssim"]


def _as_float(name: str, img: np.ndarray) -> np.ndarray:
    img = np.asarray(img)
    if img.dtype == np.uint8:
        return img.astype(np.float64) / 255.0
    if not np.issubdtype(img.dtype, np.floating):
        raise ValueError(f"{name} must be uint8 or float in [0, 1], got dtype {img.dtype}")
    return img.astype(np.float64)


def _pair(ref: np.ndarray, img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = _as_float("ref", ref), _as_float("img", img)
    if a.shape != b.shape:
        raise ValueError(f"ref and img must have the same shape, got {a.shape} and {b.shape}")
    return a, b


def psnr(ref: np.ndarray, img: np.ndarray, mask: np.ndarray | None = None) -> float:
    """PSNR in dB with peak 1 (over ``mask`` pixels only when given; inf for identical inputs)."""
    a, b = _pair(ref, img)
    err = (a - b) ** 2
    if mask is not None:
        mask = np.asarray(mask, bool)
        if mask.shape != a.shape[:2]:
            raise ValueError(f"mask must have shape {a.shape[:2]}, got {mask.shape}")
        if not mask.any():
            raise ValueError("mask must select at least one pixel")
        err = err[mask]
    mse = float(err.mean())
    return float("inf") if mse == 0 else float(10.0 * np.log10(1.0 / mse))


def ssim(ref: np.ndarray, img: np.ndarray) -> float:
    """SSIM (scikit-image ``structural_similarity``, ``data_range=1``, ``channel_axis=-1``)."""
    from skimage.metrics import structural_similarity

    a, b = _pair(ref, img)
    if a.ndim == 2:
        return float(structural_similarity(a, b, data_range=1.0))
    return float(structural_similarity(a, b, data_range=1.0, channel_axis=-1))
