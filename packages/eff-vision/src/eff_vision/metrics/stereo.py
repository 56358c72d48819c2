"""Stereo disparity metrics: end-point error, bad-pixel rate and KITTI's D1.

``pred`` and ``gt`` are disparity maps of the same shape (numpy arrays or torch tensors, any
leading batch dimensions); ``mask`` (bool, same shape) selects the pixels where the ground truth is
defined (e.g. ``x ≥ max_disp`` for a correlation cost volume, or non-occluded pixels). ``D1`` is
KITTI 2015's outlier rate: ``|e| > 3 px`` **and** ``|e| > 5 %`` of the true disparity.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["bad_px", "d1", "epe", "valid_columns"]


def _errors(pred: Any, gt: Any, mask: Any | None) -> tuple[np.ndarray, np.ndarray]:
    def arr(x: Any) -> np.ndarray:
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        return np.asarray(x, dtype=np.float64)

    p, g = arr(pred), arr(gt)
    if p.shape != g.shape:
        raise ValueError(f"pred and gt must have the same shape, got {p.shape} and {g.shape}")
    if mask is not None:
        m = np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask, bool)
        if m.shape != p.shape:
            raise ValueError(f"mask must have shape {p.shape}, got {m.shape}")
        if not m.any():
            raise ValueError("mask must select at least one pixel")
        return np.abs(p - g)[m], np.abs(g)[m]
    return np.abs(p - g).ravel(), np.abs(g).ravel()


def epe(pred: Any, gt: Any, mask: Any | None = None) -> float:
    """Mean absolute disparity error in pixels."""
    err, _ = _errors(pred, gt, mask)
    return float(err.mean())


def bad_px(pred: Any, gt: Any, th: float = 1.0, mask: Any | None = None) -> float:
    """Fraction of pixels with ``|error| > th`` (bad-1 for ``th = 1``)."""
    if not th >= 0:
        raise ValueError(f"th must be >= 0, got {th}")
    err, _ = _errors(pred, gt, mask)
    return float((err > th).mean())


def d1(pred: Any, gt: Any, mask: Any | None = None) -> float:
    """KITTI D1: fraction with ``|e| > 3`` px and ``|e| > 0.05·|gt|``."""
    err, g = _errors(pred, gt, mask)
    return float(((err > 3.0) & (err > 0.05 * g)).mean())


def valid_columns(shape: tuple[int, ...], max_disp: int) -> np.ndarray:
    """Boolean mask of the pixels with ``x ≥ max_disp`` (last axis), where a cost volume over
    ``max_disp`` disparities sees every candidate match."""
    mask = np.zeros(shape, bool)
    mask[..., max_disp:] = True
    return mask
