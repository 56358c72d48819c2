"""Deterministic seeding.

Every random stream in eff derives from one master seed plus a tuple of integer keys through
numpy's ``SeedSequence``, so streams for (round, client), (task, worker), ... are independent
and reproducible regardless of the order in which they are created.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np

__all__ = ["derive_seed", "make_rng", "seed_everything"]

_MAX_SEED = 2**32


def _entropy(seed: int, keys: tuple[int, ...]) -> list[int]:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    for k in keys:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
            raise ValueError(f"seed keys must be non-negative ints, got {keys!r}")
    return [int(seed), *map(int, keys)]


def make_rng(seed: int, *keys: int) -> np.random.Generator:
    """A numpy ``Generator`` for the stream identified by ``(seed, *keys)``."""
    return np.random.default_rng(np.random.SeedSequence(_entropy(seed, keys)))


def derive_seed(seed: int, *keys: int) -> int:
    """A 32-bit integer seed for the stream ``(seed, *keys)`` (for libraries that take ints)."""
    state = np.random.SeedSequence(_entropy(seed, keys)).generate_state(1, dtype=np.uint32)
    return int(state[0]) % _MAX_SEED


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's legacy global stream and, if already imported, torch.

    torch is seeded only when some torch package has imported it: eff-shared never imports torch.
    """
    _entropy(seed, ())
    random.seed(seed)
    np.random.seed(seed % _MAX_SEED)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
