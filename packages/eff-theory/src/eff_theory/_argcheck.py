"""Argument checks shared by the numpy modules of eff-theory (heavy_rnn, label_noise_gd,
quantized_oja): integers with a lower bound, finite arrays of a given rank, seeds.

The generic checks (type, choice, positive, fraction) live in :mod:`eff_shared.errors`; these add
the array- and count-shaped ones the numerical modules need, with the same message style.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eff_shared.errors import check_type

__all__ = ["RngLike", "check_int", "check_real", "finite_array"]

RngLike = int | np.random.Generator | None


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as ``int``; ``TypeError`` unless it is an integer, ``ValueError`` outside
    ``[minimum, maximum]``."""
    check_type(name, value, (int, np.integer))
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "-inf" if minimum is None else str(minimum)
        hi = "inf" if maximum is None else str(maximum)
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value}")
    return value


def check_real(name: str, value: Any) -> float:
    """Return ``value`` as a finite ``float``; ``TypeError`` for non-numbers, ``ValueError`` for NaN/inf."""
    check_type(name, value, (int, float, np.integer, np.floating))
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return value


def finite_array(name: str, value: Any, ndim: int | tuple[int, ...] | None = None) -> np.ndarray:
    """``value`` as a float64 array; ``ValueError`` if its rank is not ``ndim`` or it holds NaN/inf."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a numeric array, got {type(value).__name__}") from None
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if allowed is not None and arr.ndim not in allowed:
        ranks = " or ".join(f"{d}-D" for d in allowed)
        raise ValueError(f"{name} must be {ranks}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr
