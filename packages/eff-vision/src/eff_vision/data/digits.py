"""Seeded splits of scikit-learn's bundled digits (8×8, values /16), as torch tensors.

Used by the tensor-compression and fingerprinting reproductions (and later by LCoTTA, ComBo, HAWAII
and FedPhoenix): ``digits_splits((1200, 597), seed)`` permutes the 1,797 images with ``seed`` and
cuts consecutive splits of the given sizes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from eff_shared.errors import check_int
from eff_shared.seeding import make_rng

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["N_DIGITS", "digits_arrays", "digits_splits", "rotate90"]

N_DIGITS = 1797


@lru_cache(maxsize=1)
def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 scikit-learn digits: images (N, 1, 8, 8) in [0, 1] and labels (read-only, cached)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]
    y = d.target.astype(np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def digits_splits(sizes: tuple[int, ...], seed: int = 0) -> list[tuple[Tensor, Tensor]]:
    """Disjoint seeded splits ``[(x [n,1,8,8] float32, y [n] int64), ...]`` of the given sizes."""
    import torch

    sizes = tuple(sizes)
    if not sizes:
        raise ValueError("sizes must name at least one split, got ()")
    for s in sizes:
        check_int("sizes", s, minimum=1)
    if sum(sizes) > N_DIGITS:
        raise ValueError(f"sizes must sum to at most {N_DIGITS}, got {sum(sizes)}")
    x, y = digits_arrays()
    perm = make_rng(seed, 31).permutation(N_DIGITS)
    out, start = [], 0
    for s in sizes:
        idx = perm[start : start + s]
        out.append((torch.from_numpy(x[idx].copy()), torch.from_numpy(y[idx].copy())))
        start += s
    return out


def rotate90(x: Tensor, k: int = 1) -> Tensor:
    """Rotate NCHW images by k·90° (the fingerprint reproduction's new task)."""
    import torch

    return torch.rot90(x, k, dims=(-2, -1)).contiguous()
