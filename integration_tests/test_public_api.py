"""Every package's public surface: a version, and an ``__all__`` whose names all resolve."""

from __future__ import annotations

import importlib
from collections import Counter
from importlib.metadata import version

import pytest

PACKAGES = {
    "eff_shared": "eff-shared",
    "eff_games": "eff-games",
    "eff_graph": "eff-graph",
    "eff_kernels": "eff-kernels",
    "eff_llm": "eff-llm",
    "eff_rl": "eff-rl",
    "eff_theory": "eff-theory",
    "eff_vision": "eff-vision",
}


@pytest.mark.parametrize(("module", "dist"), sorted(PACKAGES.items()))
def test_every_package_has_its_version_and_a_resolvable_all(module, dist):
    pkg = importlib.import_module(module)
    assert pkg.__version__ == version(dist)
    assert pkg.__all__, f"{module}.__all__ is empty"
    missing = [name for name in pkg.__all__ if not hasattr(pkg, name)]
    assert not missing, f"{module}.__all__ names that do not resolve: {missing}"


def test_eff_vision_exports_every_method_module_public_name():
    import eff_vision

    alls = {m: importlib.import_module(f"eff_vision.{m}").__all__ for m in eff_vision._EXPORTS}
    counts = Counter(n for names in alls.values() for n in names)
    for module, names in alls.items():
        for name in names:
            if counts[name] > 1:  # ambiguous: import it from its module
                assert name not in eff_vision.__all__
                continue
            assert getattr(eff_vision, name) is getattr(
                importlib.import_module(f"eff_vision.{module}"), name
            ), name
    assert "PanLUT" in eff_vision.__all__ and "LCoTTA" in eff_vision.__all__
