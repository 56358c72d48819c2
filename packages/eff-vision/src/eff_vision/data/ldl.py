"""Synthetic label-distribution data (RankMatch's reproduction).

``x ~ N(0, I_F)`` and ``d(x) = softmax(W2ᵀ tanh(W1ᵀ x / input_scale) / temperature)`` with random
``W1`` (F × width) and ``W2`` (width × C), both N(0, 1) and shared by every split; the labelled,
unlabelled and test splits are independent draws of x. The unlabelled split carries no label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eff_shared.errors import check_positive
from eff_shared.seeding import make_rng

__all__ = ["LDLSplit", "make_synthetic_ldl"]


@dataclass(frozen=True)
class LDLSplit:
    """One split: inputs ``x`` (n, F) float32 and, for labelled/test splits, ``d`` (n, C)."""

    x: np.ndarray
    d: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.x)


def make_synthetic_ldl(
    n_labeled: int = 100,
    n_unlabeled: int = 3000,
    n_test: int = 3000,
    n_features: int = 20,
    n_labels: int = 6,
    width: int = 32,
    input_scale: float = 4.0,
    temperature: float = 1.5,
    seed: int = 0,
) -> tuple[LDLSplit, LDLSplit, LDLSplit]:
    """``(labeled, unlabeled, test)``; ``unlabeled.d`` is ``None``. Same seed ⇒ same data."""
    for name, v in (("n_labeled", n_labeled), ("n_unlabeled", n_unlabeled), ("n_test", n_test),
                    ("n_features", n_features), ("width", width)):  # fmt: skip
        check_positive(name, v, integer=True)
    check_positive("n_labels", n_labels, integer=True)
    if n_labels < 2:
        raise ValueError(f"n_labels must be >= 2, got {n_labels}")
    check_positive("input_scale", input_scale)
    check_positive("temperature", temperature)
    rng = make_rng(seed, 71)
    w1 = rng.normal(size=(n_features, width))
    w2 = rng.normal(size=(width, n_labels))

    def label(x: np.ndarray) -> np.ndarray:
        z = np.tanh(x @ w1 / input_scale) @ w2 / temperature
        z -= z.max(1, keepdims=True)
        e = np.exp(z)
        return (e / e.sum(1, keepdims=True)).astype(np.float32)

    xs = [
        rng.normal(size=(n, n_features)).astype(np.float32)
        for n in (n_labeled, n_unlabeled, n_test)
    ]
    d_lab, d_test = label(xs[0].astype(np.float64)), label(xs[2].astype(np.float64))
    # float32 rounding can leave a row sum 1 ± 1e-7: renormalise once in float64.
    d_lab = (d_lab / d_lab.sum(1, keepdims=True, dtype=np.float64)).astype(np.float32)
    d_test = (d_test / d_test.sum(1, keepdims=True, dtype=np.float64)).astype(np.float32)
    return LDLSplit(xs[0], d_lab), LDLSplit(xs[1]), LDLSplit(xs[2], d_test)
