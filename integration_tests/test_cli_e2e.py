"""The `eff` command end to end, as a user runs it (a subprocess of the installed script)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

EFF = str(Path(sys.executable).with_name("eff"))
DOMAINS = ["llm", "kernels", "vision", "graph", "rl", "games", "theory"]


def eff(*args, check=True):
    return subprocess.run([EFF, *args], capture_output=True, text=True, check=check, timeout=600)


def test_list_shows_the_fedavg_reproduction():
    out = eff("list", "--json").stdout
    names = {row["name"]: row["package"] for row in json.loads(out)}
    assert names["shared.fedavg"] == "eff-shared"
    assert "shared.fedavg" in eff("list").stdout


def test_reproduce_fedavg_writes_claims_json(tmp_path):
    path = tmp_path / "out.json"
    proc = eff("reproduce", "shared.fedavg", "--json", str(path), "--seed", "1")
    assert "shared.fedavg" in proc.stdout and "pass" in proc.stdout
    data = json.loads(path.read_text())
    assert data["passed"] is True
    (result,) = data["results"]
    assert result["seed"] == 1 and result["mode"] == "quick"
    claim = result["claims"][0]
    assert claim["passed"] is True and claim["measured"] > claim["threshold"] == 0.0


def test_reproduce_unknown_name_fails_with_a_clear_message():
    proc = eff("reproduce", "nope.nothing", check=False)
    assert proc.returncode == 2
    assert "no reproduction named 'nope.nothing'" in proc.stdout + proc.stderr


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_domain_has_info(domain):
    from importlib.metadata import distribution

    out = " ".join(eff(domain, "info").stdout.split())
    summary = " ".join(distribution(f"eff-{domain}").metadata["Summary"].split())
    assert summary in out


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "eff_shared", "--help"], capture_output=True, text=True, check=True
    )
    assert "reproduce" in proc.stdout and "games" in proc.stdout


_IMPORTS_AFTER = """
import sys
from eff_shared.cli import main
sys.argv = ["eff", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = sorted(m for m in ("torch", "transformers", "eff_llm", "eff_kernels", "eff_vision") if m in sys.modules)
print("HEAVY:", ",".join(heavy))
"""


@pytest.mark.parametrize("args", [["--help"], ["list"], ["games", "info"], ["games", "--help"]])
def test_fast_commands_import_no_torch_and_no_other_domain(args):
    """`eff --help`, `eff list` and `eff games ...` load only what they use: the domain apps are
    imported lazily, so none of them pays torch's import time."""
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AFTER, *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY:", proc.stdout[-500:]


def test_a_domain_command_loads_its_domain_on_demand():
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AFTER, "kernels", "info"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "eff_kernels" in proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["reproduce", "--seed", "-1"], "'--seed'"),
        (["reproduce", "nope.nothing"], "NAMES"),
        (["games", "info", "--bogus"], "'--bogus'"),
        (["theory", "info", "--bogus"], "'--bogus'"),
        (["rl", "cka-rl", "--pool-size", "-1"], "'--pool-size'"),
        (["vision", "moric", "decode", "missing.moric", "-o", "x.png"], "'STREAM'"),
        (["vision", "moric", "encode", "missing.png", "--mask", "m.png", "-o", "x"], "IMAGE"),
        (["theory", "lora-meta", "--n-finetune", "0"], "--n-finetune"),
    ],
)
def test_usage_errors_are_one_line_naming_the_flag_with_exit_2(args, named):
    """One error style for every CLI, the domains' included: no box, no traceback."""
    proc = eff(*args, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], proc.stderr


def test_help_shows_extras_in_brackets():
    """rich markup must not swallow `[openspiel]` in a help string."""
    assert "eff-games[openspiel]" in eff("games", "solve", "--help").stdout.replace("\n", "")
