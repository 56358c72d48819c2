"""Continual-RL metrics (CompoNet protocol, Malagon et al. 2024, as used by CKA-RL's ``process_results.py``).

Success is the binarised smoothed return curve of each task's own training; performance is the
mean success; forward transfer compares a method's AUC with training from scratch on the same task.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

__all__ = ["auc", "average_performance", "forgetting", "forward_transfer", "success_curve"]


def success_curve(
    returns: Sequence[float],
    steps: Sequence[int],
    threshold: float,
    bins: int,
    total_steps: int | None = None,
) -> np.ndarray:
    """Success per bin of the step axis: 1 when the mean return of the episodes ending in the bin
    is ≥ ``threshold``. A bin without a finished episode repeats the previous bin (0 at the start).
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    r, s = np.asarray(returns, dtype=float), np.asarray(steps, dtype=float)
    if r.shape != s.shape:
        raise ValueError(
            f"returns and steps must have the same length, got {r.shape} and {s.shape}"
        )
    end = float(total_steps if total_steps is not None else (s.max() if s.size else 1))
    edges = np.linspace(0.0, end, bins + 1)
    idx = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, bins - 1)
    out = np.zeros(bins)
    prev = 0.0
    for b in range(bins):
        sel = r[idx == b]
        prev = float(sel.mean() >= threshold) if sel.size else prev
        out[b] = prev
    return out


def auc(success: np.ndarray) -> float:
    """Area under the success curve, normalised to [0, 1] (the mean over bins)."""
    values = np.asarray(success, dtype=float)
    if values.size == 0:
        raise ValueError("success must hold at least one bin, got an empty curve")
    if not np.isfinite(values).all():
        raise ValueError("success must be finite, got NaN or inf")
    return float(np.mean(values))


def forward_transfer(auc_method: float, auc_baseline: float) -> float:
    """FT = (AUC − AUC_base) / (1 − AUC_base); undefined (NaN, with a warning) when AUC_base = 1."""
    if auc_baseline >= 1.0:
        warnings.warn(
            "forward transfer is undefined when the baseline AUC is 1", RuntimeWarning, stacklevel=2
        )
        return float("nan")
    return (auc_method - auc_baseline) / (1.0 - auc_baseline)


def average_performance(final_success: Sequence[float]) -> float:
    """Mean of the per-task final success."""
    return float(np.mean(final_success))


def forgetting(success_after_task: np.ndarray, success_after_last: np.ndarray) -> np.ndarray:
    """Per task: success right after training it minus success after the last task (> 0 = forgotten)."""
    a, b = np.asarray(success_after_task, dtype=float), np.asarray(success_after_last, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return a - b
