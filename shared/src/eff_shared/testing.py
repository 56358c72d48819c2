"""Test helpers shared by the eff packages (imported only from tests)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distribution
from types import ModuleType

import typer
from typer.testing import CliRunner

__all__ = ["assert_expected_verdicts", "check_domain_package"]


def check_domain_package(
    dist_name: str, module: ModuleType, app: typer.Typer, *, uses_torch: bool
) -> None:
    """The plumbing every domain package owes its users.

    ``eff <domain> info`` prints the distribution's description, version and direct dependencies
    (and, for torch packages, the torch build and the device); the package docstring starts with
    its name; a torch-free package imports (with its CLI) without pulling torch in.
    """
    dist = distribution(dist_name)
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # rich may wrap long lines
    assert " ".join(dist.metadata["Summary"].split()) in out
    assert f"{dist_name} {dist.version}" in out
    assert "eff-shared" in out and "typer" in out
    assert (module.__doc__ or "").startswith(f"{dist_name}:")
    if uses_torch:
        import torch

        assert f"torch {torch.__version__}" in out
        assert "default device: cpu" in out or "default device: cuda" in out
    else:
        # A fresh interpreter: importing the package and its CLI must not pull torch in.
        name = module.__name__
        code = (
            f"import sys, {name}, {name}.cli; assert 'torch' not in sys.modules, 'torch imported'"
        )
        subprocess.run([sys.executable, "-c", code], check=True)


def assert_expected_verdicts(result) -> None:
    """Every claim of ``result`` got its expected verdict: checks and ``reproduces`` paper claims
    pass, an ``xfail`` paper claim is run and printed (held or not), a claim declared for the other
    mode is not judged."""
    for c in result.claims:
        ok: tuple[str, ...] = ("pass",)
        if not c.judged_in(result.mode):
            ok = ("not judged",)
        elif c.kind == "paper" and c.expected == "xfail":
            ok = ("xfail", "reproduced (unexpected)")
        assert c.verdict(result.mode) in ok, c
