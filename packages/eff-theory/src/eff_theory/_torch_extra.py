"""Lazy loading of the torch parts of eff-theory (extra ``eff-theory[torch]``).

The numpy modules expose their torch-only names through a module ``__getattr__`` that calls
:func:`import_torch_part`, so importing them never imports torch, and using a torch-only name without
torch installed raises ``ImportError`` with the install hint.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["TORCH_HINT", "import_torch_part"]

TORCH_HINT = 'pip install "eff-theory[torch]"'


def import_torch_part(module: str, what: str) -> ModuleType:
    """Import ``module`` (which imports torch); ``ImportError`` naming ``what`` when torch is absent."""
    if importlib.util.find_spec("torch") is None:
        raise ImportError(f"{what} needs torch: {TORCH_HINT}")
    return importlib.import_module(module)
