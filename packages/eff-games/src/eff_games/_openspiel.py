"""OpenSpiel, an optional dependency (extra ``eff-games[openspiel]``): the one place that imports
``pyspiel``, for :func:`eff_games.games.from_openspiel` and
:meth:`eff_games.policy.TabularPolicy.to_openspiel`."""

from __future__ import annotations

from typing import Any

__all__ = ["INSTALL_HINT", "import_pyspiel"]

INSTALL_HINT = "pip install 'eff-games[openspiel]'  (PyPI package open-spiel)"


def import_pyspiel() -> Any:
    """The ``pyspiel`` module; ``ImportError`` with the install hint when OpenSpiel is missing."""
    try:
        import pyspiel
    except ImportError as exc:  # pragma: no cover - exercised in the environment without the extra
        raise ImportError(f"this needs OpenSpiel, which is not installed: {INSTALL_HINT}") from exc
    return pyspiel
