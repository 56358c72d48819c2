"""Label-distribution data (RankMatch's reproduction): a synthetic task and a real-image one.

- :func:`make_synthetic_ldl`: ``x ~ N(0, I_F)`` and
  ``d(x) = softmax(W2ᵀ tanh(W1ᵀ x / input_scale) / temperature)`` with random ``W1`` (F × width)
  and ``W2`` (width × C), both N(0, 1) and shared by every split; the labelled, unlabelled and
  test splits are independent draws of x.
- :func:`make_digits_ldl`: scikit-learn's bundled digits (8×8, values /16, flattened to 64
  features) with soft labels from a **nearest-neighbour teacher**: ``d(x)`` is the smoothed label
  histogram of the ``k`` nearest images of a disjoint, hard-labelled teacher pool,
  ``d_c = (n_c(x) + α) / (k + C·α)`` — the vote histogram of ``k`` annotators, the way real LDL
  data sets (facial expressions, ages) are labelled. The images' own classes are not used
  otherwise; pixel-shift views (:class:`eff_vision.rankmatch.RandomShift`) are its augmentations.

The unlabelled split carries no label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eff_shared.errors import check_positive
from eff_shared.seeding import make_rng

__all__ = ["DIGITS_SHAPE", "LDLSplit", "make_digits_ldl", "make_synthetic_ldl"]

DIGITS_SHAPE = (8, 8)  # the image shape behind the 64 features of make_digits_ldl


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


def make_digits_ldl(
    n_labeled: int = 100,
    n_unlabeled: int = 800,
    n_test: int = 397,
    n_teacher: int = 500,
    k: int = 10,
    smoothing: float = 0.5,
    seed: int = 0,
) -> tuple[LDLSplit, LDLSplit, LDLSplit]:
    """``(labeled, unlabeled, test)`` from the 1,797 bundled digits, C = 10 labels.

    A seeded permutation cuts a teacher pool of ``n_teacher`` images and the three splits (the
    four sizes may sum to at most 1,797; the defaults use every image). Each labelled and test
    image gets ``d_c = (n_c + smoothing) / (k + 10·smoothing)``, ``n_c`` the number of its ``k``
    nearest teacher images (Euclidean, pixel space; ties broken by index) of class c. ``x`` is
    the flattened image (n, 64) in [0, 1] (reshape to :data:`DIGITS_SHAPE` for image
    augmentations). Same seed ⇒ same data.
    """
    from sklearn.neighbors import NearestNeighbors

    from eff_vision.data.digits import N_DIGITS, digits_arrays

    for name, v in (("n_labeled", n_labeled), ("n_unlabeled", n_unlabeled), ("n_test", n_test),
                    ("n_teacher", n_teacher), ("k", k)):  # fmt: skip
        check_positive(name, v, integer=True)
    check_positive("smoothing", smoothing)
    if k > n_teacher:
        raise ValueError(f"k ({k}) must not exceed n_teacher ({n_teacher})")
    total = n_labeled + n_unlabeled + n_test + n_teacher
    if total > N_DIGITS:
        raise ValueError(
            f"n_labeled + n_unlabeled + n_test + n_teacher must be <= {N_DIGITS}, got {total}"
        )
    images, classes = digits_arrays()
    x_all = images.reshape(N_DIGITS, -1)
    perm = make_rng(seed, 75).permutation(N_DIGITS)
    cuts = np.cumsum([n_teacher, n_labeled, n_unlabeled, n_test])
    teach, lab, unl, test = (perm[a:b] for a, b in zip([0, *cuts[:-1]], cuts, strict=True))
    n_classes = int(classes.max()) + 1
    knn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(x_all[teach].astype(np.float64))

    def label(idx: np.ndarray) -> np.ndarray:
        nbr = knn.kneighbors(x_all[idx].astype(np.float64), return_distance=False)
        counts = np.zeros((len(idx), n_classes))
        np.add.at(counts, (np.arange(len(idx))[:, None], classes[teach][nbr]), 1.0)
        d = (counts + smoothing) / (k + n_classes * smoothing)
        return (d / d.sum(1, keepdims=True)).astype(np.float32)

    return (
        LDLSplit(x_all[lab].copy(), label(lab)),
        LDLSplit(x_all[unl].copy()),
        LDLSplit(x_all[test].copy(), label(test)),
    )
