"""Errors and argument checks shared by every eff package.

Bad input must fail early with a message that names the argument and the allowed values,
never deep inside numpy or torch. These helpers keep those messages uniform.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = [
    "EffError",
    "ReproductionError",
    "check_choice",
    "check_fraction",
    "check_positive",
    "check_type",
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


def _type_names(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__
