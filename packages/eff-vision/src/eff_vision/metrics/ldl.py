"""The six standard label-distribution-learning metrics (Geng, "Label Distribution Learning",
IEEE TKDE 2016), used by RankMatch.

Lower is better: Chebyshev ``max_j |p_j − d_j|``, Clark ``sqrt(Σ_j (p_j − d_j)² / (p_j + d_j)²)``,
Canberra ``Σ_j |p_j − d_j| / (p_j + d_j)``, KL ``Σ_j d_j ln(d_j / p_j)``. Higher is better: Cosine
``⟨p, d⟩ / (‖p‖ ‖d‖)`` and Intersection ``Σ_j min(p_j, d_j)``. Each is computed per sample and
averaged; ``EPS = 1e-12`` is added to denominators and inside logarithms (so a zero entry never
divides by zero).

Inputs are ``(n, C)`` arrays or tensors of probability rows (``C ≥ 2``). The target must be a
distribution (entries ≥ 0, rows summing to 1 ± 1e-4); a prediction whose rows do not sum to 1 is
rejected with the hint "apply softmax" (logits passed by mistake), never renormalised silently.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "EPS",
    "LOWER_IS_BETTER",
    "METRICS",
    "canberra",
    "chebyshev",
    "check_distributions",
    "clark",
    "cosine",
    "intersection",
    "kl_divergence",
    "ldl_report",
]

EPS = 1e-12
SUM_TOL = 1e-4
PRED_SUM_TOL = 1e-3  # predictions are often float32 softmax outputs


def _as_array(name: str, x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a (n, C) array of distributions, got shape {arr.shape}")
    return arr


def check_distributions(pred: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate and return ``(pred, target)`` as float64 ``(n, C)`` arrays.

    ``ValueError`` when the shapes differ, C < 2, a target row is not a distribution (negative
    entries or a sum ≠ 1 ± 1e-4), or a prediction row is negative or does not sum to 1 (logits).
    """
    p, d = _as_array("pred", pred), _as_array("target", target)
    if p.shape != d.shape:
        raise ValueError(f"pred and target must have the same shape, got {p.shape} and {d.shape}")
    if p.shape[1] < 2:
        raise ValueError(f"the number of labels C must be >= 2, got {p.shape[1]}")
    if not (np.isfinite(p).all() and np.isfinite(d).all()):
        raise ValueError("pred and target must be finite")
    if (d < 0).any() or np.abs(d.sum(1) - 1).max() > SUM_TOL:
        raise ValueError(
            "every target row must be a distribution (entries >= 0, sum 1 ± 1e-4); "
            f"got min entry {d.min():.3g}, row sums in [{d.sum(1).min():.6g}, {d.sum(1).max():.6g}]"
        )
    if (p < 0).any() or np.abs(p.sum(1) - 1).max() > PRED_SUM_TOL:
        raise ValueError(
            "pred rows must be probability distributions (>= 0, summing to 1); got row sums in "
            f"[{p.sum(1).min():.4g}, {p.sum(1).max():.4g}] and min entry {p.min():.3g}: "
            "apply softmax to logits first"
        )
    return p, d


def chebyshev(pred: Any, target: Any) -> float:
    """Mean over samples of ``max_j |p_j − d_j|`` (lower is better)."""
    p, d = check_distributions(pred, target)
    return float(np.abs(p - d).max(1).mean())


def clark(pred: Any, target: Any) -> float:
    """Mean of ``sqrt(Σ_j (p_j − d_j)² / ((p_j + d_j)² + eps))`` (lower is better)."""
    p, d = check_distributions(pred, target)
    return float(np.sqrt(((p - d) ** 2 / ((p + d) ** 2 + EPS)).sum(1)).mean())


def canberra(pred: Any, target: Any) -> float:
    """Mean of ``Σ_j |p_j − d_j| / (p_j + d_j + eps)`` (lower is better)."""
    p, d = check_distributions(pred, target)
    return float((np.abs(p - d) / (p + d + EPS)).sum(1).mean())


def kl_divergence(pred: Any, target: Any) -> float:
    """Mean of ``KL(d ‖ p) = Σ_j d_j ln((d_j + eps) / (p_j + eps))`` (lower is better)."""
    p, d = check_distributions(pred, target)
    return float((d * np.log((d + EPS) / (p + EPS))).sum(1).mean())


def cosine(pred: Any, target: Any) -> float:
    """Mean cosine similarity ``⟨p, d⟩ / (‖p‖ ‖d‖ + eps)`` (higher is better)."""
    p, d = check_distributions(pred, target)
    num = (p * d).sum(1)
    return float((num / (np.linalg.norm(p, axis=1) * np.linalg.norm(d, axis=1) + EPS)).mean())


def intersection(pred: Any, target: Any) -> float:
    """Mean of ``Σ_j min(p_j, d_j)`` (higher is better)."""
    p, d = check_distributions(pred, target)
    return float(np.minimum(p, d).sum(1).mean())


METRICS = {
    "chebyshev": chebyshev,
    "clark": clark,
    "canberra": canberra,
    "kl": kl_divergence,
    "cosine": cosine,
    "intersection": intersection,
}
LOWER_IS_BETTER = {
    "chebyshev": True,
    "clark": True,
    "canberra": True,
    "kl": True,
    "cosine": False,
    "intersection": False,
}


def ldl_report(pred: Any, target: Any) -> dict[str, float]:
    """All six metrics, keyed ``chebyshev, clark, canberra, kl, cosine, intersection``."""
    return {name: fn(pred, target) for name, fn in METRICS.items()}
