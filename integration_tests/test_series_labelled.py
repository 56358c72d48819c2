"""Every reproduction's plot goes through ``Result.add_series`` (title and axis words required).

A source scan: no reproduction module assigns to ``.series[...]``, rebinds or updates ``.series``,
or passes ``series=`` to ``Result``, so no PNG of ``eff reproduce --out`` comes out with a raw key
for a title and unlabelled axes.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_MUTATORS = {"update", "setdefault", "__setitem__", "pop", "clear"}


def reproduction_modules() -> list[Path]:
    mods = sorted(ROOT.glob("packages/*/src/*/reproduce/*.py"))
    mods.append(ROOT / "shared/src/eff_shared/federated/reproduce.py")
    return [p for p in mods if p.name != "__init__.py"]


def _is_series(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "series"


def direct_series_writes(source: str) -> list[int]:
    """Line numbers where ``<x>.series`` is written without ``add_series``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(
            node.ctx, (ast.Store, ast.Del)
        ):
            if _is_series(node) or (isinstance(node, ast.Subscript) and _is_series(node.value)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and (
            (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
                and _is_series(node.func.value)
            )
            or (  # Result(..., series={...}) skips the words as well
                isinstance(node.func, ast.Name)
                and node.func.id == "Result"
                and any(k.arg == "series" for k in node.keywords)
            )
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_scan_finds_direct_series_writes():
    bad = (
        "r.series['a'] = {}\n"
        "r.series['a'] += {}\n"
        "r.series = {}\n"
        "r.series.update(a={})\n"
        "r.series.setdefault('a', {})\n"
        "del r.series['a']\n"
        "Result('n', 'quick', 0, series={'a': {}})\n"
    )
    assert direct_series_writes(bad) == [1, 2, 3, 4, 5, 6, 7]
    ok = "r.add_series('a', {}, title='t', xlabel='x', ylabel='y')\nseries['x'] = [1.0]\nr.series['a']\n"
    assert direct_series_writes(ok) == []


def test_no_reproduction_writes_result_series_directly():
    mods = reproduction_modules()
    assert len(mods) > 10, f"the scan found too few reproduction modules: {mods}"
    offenders = {
        str(p.relative_to(ROOT)): lines
        for p in mods
        if (lines := direct_series_writes(p.read_text(encoding="utf-8")))
    }
    assert not offenders, (
        "reproductions must attach plots with Result.add_series(name, series, title=..., "
        f"xlabel=..., ylabel=...), not by writing .series directly: {offenders}"
    )
