"""Errors and argument checks shared by every eff package.

Bad input must fail early with a message that names the argument and the allowed values,
never deep inside numpy or torch. These helpers keep those messages uniform.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

__all__ = [
    "EffError",
    "ReproductionError",
    "check_bool",
    "check_choice",
    "check_fraction",
    "check_int",
    "check_positive",
    "check_real",
    "check_type",
    "finite_array",
]


class EffError(Exception):
    """Base class of the errors eff raises that are not plain argument errors."""


class ReproductionError(EffError):
    """A reproduction could not be found, loaded or run."""


def check_type(name: str, value: Any, types: type | tuple[type, ...]) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``value`` is an instance of ``types``."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        # bool is an int subclass; a flag passed where a count is expected is a bug.
        raise TypeError(f"{name} must be {_type_names(types)}, got bool")
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {_type_names(types)}, got {type(value).__name__}")


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise ``ValueError`` naming ``name`` and the allowed values unless ``value`` is one of them."""
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed!r}, got {value!r}")


def check_positive(name: str, value: Any, *, strict: bool = True, integer: bool = False) -> None:
    """Raise unless ``value`` is a finite number > 0 (``strict``) or >= 0; ``integer`` requires an int."""
    check_type(name, value, int if integer else (int, float))
    if not math.isfinite(value) or (value <= 0 if strict else value < 0):
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")


def check_fraction(name: str, value: Any, *, closed: bool = True) -> None:
    """Raise unless ``value`` lies in [0, 1] (``closed``) or (0, 1)."""
    check_type(name, value, (int, float))
    ok = 0 <= value <= 1 if closed else 0 < value < 1
    if not ok:
        interval = "[0, 1]" if closed else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")


def check_bool(name: str, value: Any) -> bool:
    """Return ``value``; ``TypeError`` unless it is a ``bool`` (not 0/1 or a string)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as ``int``: ``TypeError`` unless it is an integer (numpy integers too, not
    bool), ``ValueError`` outside ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "-inf" if minimum is None else str(minimum)
        hi = "inf" if maximum is None else str(maximum)
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value}")
    return value


def check_real(
    name: str, value: Any, minimum: float | None = None, maximum: float | None = None
) -> float:
    """Return ``value`` as a finite ``float``: ``TypeError`` for a non-number (or bool),
    ``ValueError`` for NaN/inf or outside ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "-inf" if minimum is None else f"{minimum:g}"
        hi = "inf" if maximum is None else f"{maximum:g}"
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got {value:g}")
    return value


def finite_array(name: str, value: Any, ndim: int | tuple[int, ...] | None = None) -> Any:
    """``value`` as a float64 numpy array: ``TypeError`` if it is not numeric, ``ValueError`` if
    its rank is not ``ndim`` (one or several) or it holds NaN/inf."""
    import numpy as np  # lazily: the CLI's start-up imports this module

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


def _type_names(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__
