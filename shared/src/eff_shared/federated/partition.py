"""Partitioners: how a data set is split across federated clients.

Both return one array of sample indices per client; the partitions are disjoint and cover every
index. The same seed gives the same split.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eff_shared.errors import check_positive
from eff_shared.seeding import make_rng

__all__ = ["dirichlet_partition", "iid_partition"]

_MAX_DRAWS = 1000


def _labels_array(labels: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D sequence, got shape {arr.shape}")
    return arr


def iid_partition(n_samples: int, n_clients: int, seed: int) -> list[np.ndarray]:
    """Shuffle ``range(n_samples)`` and cut it into ``n_clients`` nearly equal parts."""
    check_positive("n_samples", n_samples, integer=True)
    check_positive("n_clients", n_clients, integer=True)
    if n_clients > n_samples:
        raise ValueError(f"n_clients ({n_clients}) must not exceed n_samples ({n_samples})")
    perm = make_rng(seed, 0).permutation(n_samples)
    return [np.sort(part) for part in np.array_split(perm, n_clients)]


def dirichlet_partition(
    labels: Sequence[int] | np.ndarray, n_clients: int, alpha: float, seed: int, min_size: int = 1
) -> list[np.ndarray]:
    """Label-skewed non-IID split: each class is divided among clients by Dirichlet(α) proportions.

    Smaller α gives more skew (α → ∞ approaches IID). The proportions are re-drawn until every
    client holds at least ``min_size`` samples (the usual FL-benchmark recipe, e.g. Hsu et al. 2019).

    Raises ``ValueError`` for α ≤ 0, ``n_clients < 1`` or a ``min_size`` that cannot be met
    (``n_clients * min_size`` above the number of samples, or not reached in 1000 draws).
    """
    y = _labels_array(labels)
    check_positive("n_clients", n_clients, integer=True)
    check_positive("alpha", alpha)
    check_positive("min_size", min_size, strict=False, integer=True)
    if n_clients * min_size > y.size:
        raise ValueError(
            f"min_size={min_size} cannot be met: {n_clients} clients x {min_size} > {y.size} samples"
        )
    rng = make_rng(seed, 1)
    classes = np.unique(y)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    for _ in range(_MAX_DRAWS):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for idx in by_class:
            props = rng.dirichlet(np.full(n_clients, float(alpha)))
            cuts = (np.cumsum(props)[:-1] * idx.size).astype(int)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        sizes = [sum(c.size for c in p) for p in parts]
        if min(sizes) >= min_size:
            return [np.sort(np.concatenate(p)) for p in parts]
    raise ValueError(
        f"min_size={min_size} was not met in {_MAX_DRAWS} Dirichlet draws with alpha={alpha} and "
        f"{n_clients} clients; lower min_size, raise alpha or use fewer clients"
    )
