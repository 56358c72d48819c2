from importlib.metadata import distribution

from typer.testing import CliRunner

import eff_vision
from eff_vision.cli import app


def test_info_prints_description_version_and_dependencies():
    dist = distribution("eff-vision")
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # rich may wrap long lines
    assert " ".join(dist.metadata["Summary"].split()) in out
    assert f"eff-vision {dist.version}" in out
    assert "eff-shared" in out and "typer" in out


def test_package_docstring_names_the_package():
    assert eff_vision.__doc__.startswith("eff-vision:")


def test_info_reports_torch_and_device():
    import torch

    out = CliRunner().invoke(app, ["info"]).output
    assert f"torch {torch.__version__}" in out
    assert "default device: cpu" in out or "default device: cuda" in out
