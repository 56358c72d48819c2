from importlib.metadata import distribution

from typer.testing import CliRunner

import eff_theory
from eff_theory.cli import app


def test_info_prints_description_version_and_dependencies():
    dist = distribution("eff-theory")
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # rich may wrap long lines
    assert " ".join(dist.metadata["Summary"].split()) in out
    assert f"eff-theory {dist.version}" in out
    assert "eff-shared" in out and "typer" in out


def test_package_docstring_names_the_package():
    assert eff_theory.__doc__.startswith("eff-theory:")


def test_imports_without_torch():
    import subprocess
    import sys

    # A fresh interpreter: importing the package and its CLI must not pull torch in.
    code = "import sys, eff_theory, eff_theory.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
