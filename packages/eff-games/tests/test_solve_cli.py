"""``solve``/``compare``, ``load_game``, the ``eff games`` CLI and their bad-input errors."""

from __future__ import annotations

import importlib.util
import json
import sys
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from eff_games import compare, from_openspiel, load_game, solve
from eff_games.cli import app
from eff_games.solve import default_checkpoints, resolve_checkpoints

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, list(args))


def test_solve_rows_and_json(kuhn):
    res = solve(kuhn, "rtcfr+", 200, checkpoints=[10, 100])
    assert [c["iteration"] for c in res.checkpoints] == [10, 100, 200]
    assert set(res.checkpoints[0]) == {"iteration", "exploitability", "nash_conv", "wall_s"}
    for c in res.checkpoints:
        assert c["nash_conv"] == 2 * c["exploitability"]
    doc = json.loads(res.to_json())
    assert doc["game"] == "kuhn_poker" and doc["units"].startswith("exploitability = nash_conv/2")
    assert doc["sizes"]["histories"] == 58 and doc["version"]
    assert doc["params"] == {"algo": "rtcfr+", "iterate": "last"}
    assert doc["rows"][-1]["algo"] == "rtcfr+"
    # the same iterations give the same numbers as driving the solver by hand
    by_name = solve("kuhn_poker", "cfr+", 100, checkpoints=[100], iterate="average")
    assert by_name.checkpoints[-1]["exploitability"] == pytest.approx(0.00119440410111, abs=1e-9)


def test_default_checkpoints():
    assert default_checkpoints(1000) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert default_checkpoints(30) == [1, 2, 5, 10, 20, 30]
    assert resolve_checkpoints(100, every=40) == [40, 80, 100]


def test_compare_rows(kuhn):
    rows = compare(kuhn, ["cfr", "rtcfr+"], 50, checkpoints=[50])
    assert [(r["algo"], r["iterate"]) for r in rows] == [
        ("cfr", "last"),
        ("cfr", "average"),
        ("rtcfr+", "last"),
    ]


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda g: solve(g, "cfr++", 10), ValueError, r"algo must be one of \['cfr', 'cfr\+'"),
        (
            lambda g: solve(g, "cfr+", 0),
            ValueError,
            r"iterations must be an integer in \[1, inf\], got 0",
        ),
        (lambda g: solve(g, "cfr+", 10.0), TypeError, "iterations must be an int"),
        (lambda g: solve(g, "cfr+", True), TypeError, "iterations must be an int"),
        (
            lambda g: solve(g, "cfr+", 10, checkpoints=[0]),
            ValueError,
            r"checkpoints must be an integer in \[1, 10\], got 0",
        ),
        (
            lambda g: solve(g, "cfr+", 10, checkpoints=[11]),
            ValueError,
            r"checkpoints must be an integer in \[1, 10\], got 11",
        ),
        (lambda g: solve(g, "rtcfr+", 10, iterate="average"), ValueError, "no average"),
        (lambda g: solve(g, "cfr+", 10, iterate="best"), ValueError, "iterate must be one of"),
        (lambda g: solve(g, "cfr+", 10, mu=1e-3), ValueError, r"cfr\+ takes the parameters"),
        (lambda g: solve(g, "rtcfr+", 10, mu=-1.0), ValueError, "mu"),
        (lambda g: solve(3, "cfr+", 10), TypeError, "game must be"),
        (lambda g: compare(g, "cfr", 10), ValueError, "non-empty list"),
    ],
)
def test_solve_bad_input(kuhn, call, exc, match):
    with pytest.raises(exc, match=match):
        call(kuhn)


@pytest.mark.parametrize(
    "args,kw,exc,match",
    [
        (
            ("chess",),
            {},
            ValueError,
            r"name must be one of \['kuhn_poker', 'leduc_poker', 'liars_dice'\]",
        ),
        (("kuhn_poker",), {"players": 3}, ValueError, "players must be 2"),
        (("leduc_poker",), {"foo": 1}, ValueError, r"unknown parameter.*allowed"),
        (("leduc_poker",), {"suit_isomorphism": 1}, TypeError, "suit_isomorphism"),
        (("leduc_poker(starting_player=2)",), {}, ValueError, "starting_player"),
        ((5,), {}, TypeError, "name must be a str"),
    ],
)
def test_load_game_bad_input(args, kw, exc, match):
    with pytest.raises(exc, match=match):
        load_game(*args, **kw)


def test_from_openspiel_without_open_spiel_raises_with_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspiel", None)  # makes `import pyspiel` fail
    with pytest.raises(ImportError, match=r"pip install 'eff-games\[openspiel\]'"):
        from_openspiel("kuhn_poker")


# ---- CLI ----------------------------------------------------------------------------------------


def test_info_prints_leduc_facts():
    res = _run("info", "--game", "leduc_poker")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "infosets per player: 468 / 468" in out
    assert "decision nodes: 3780" in out and "terminals: 5520" in out
    assert "LP value (player 0, chips): -0.085606424078" in out
    assert "exploitability = nash_conv/2" in out


def test_info_prints_kuhn_facts_and_json(tmp_path):
    path = tmp_path / "info.json"
    res = _run("info", "--game", "kuhn_poker", "--json", str(path))
    assert res.exit_code == 0, res.output
    assert "infosets per player: 6 / 6" in res.output and "histories: 58" in res.output
    assert "LP value (player 0, chips): -0.055555555556" in res.output
    facts = json.loads(path.read_text())
    assert facts["lp_value_player0"] == pytest.approx(-1 / 18, abs=1e-9)
    assert facts["uniform_nash_conv"] == pytest.approx(0.9166666666667, abs=1e-12)


def test_solve_writes_json_and_svg(tmp_path):
    jpath, spath = tmp_path / "r.json", tmp_path / "r.svg"
    res = _run(
        "solve", "--game", "kuhn_poker", "--algo", "rtcfr+", "--iterations", "300",
        "--every", "100", "--mu", "1e-2", "--json", str(jpath), "--plot", str(spath),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    header = next(line for line in res.output.splitlines() if "iteration" in line)
    assert header.replace("┃", " ").split() == [
        "iteration", "algo", "iterate", "exploitability", "nash_conv", "wall_s"
    ]  # fmt: skip
    doc = json.loads(jpath.read_text())
    assert [r["iteration"] for r in doc["rows"]] == [100, 200, 300]
    assert doc["params"]["mu"] == 1e-2 and "nash_conv/2" in doc["units"]
    svg = ET.parse(spath).getroot()
    assert svg.tag.endswith("svg")
    assert len([e for e in svg.iter() if e.tag.endswith("polyline")]) == 1


def test_png_plot_needs_matplotlib(tmp_path):
    path = tmp_path / "c.png"
    res = _run(
        "compare",
        "--game",
        "kuhn_poker",
        "--algos",
        "cfr,rtcfr+",
        "--iterations",
        "50",
        "--plot",
        str(path),
    )
    if importlib.util.find_spec("matplotlib") is None:
        assert res.exit_code == 2 and "matplotlib" in res.output
    else:
        assert res.exit_code == 0, res.output
        assert path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "args,match",
    [
        (["solve", "--algo", "nope", "--game", "kuhn_poker"], "algo must be one of"),
        (
            ["solve", "--iterations", "0", "--game", "kuhn_poker"],
            "iterations must be an integer in [1, inf], got 0",
        ),
        (
            ["solve", "--checkpoints", "0,5", "--iterations", "5", "--game", "kuhn_poker"],
            "checkpoints must be an integer in [1, 5], got 0",
        ),
        (
            ["solve", "--checkpoints", "a,b", "--game", "kuhn_poker"],
            "--checkpoints: 'a' is not a valid int",
        ),
        (
            ["solve", "--algo", "cfr+", "--mu", "0.1", "--game", "kuhn_poker"],
            "takes the parameters",
        ),
        (["solve", "--gamma", "0.9", "--game", "kuhn_poker"], "gamma must satisfy"),
        (
            ["solve", "--game", "kuhn_poker", "--iterations", "5", "--plot", "x.pdf"],
            "must end in .svg or .png",
        ),
        (["compare", "--algos", "cfr,bogus", "--game", "kuhn_poker"], "algo must be one of"),
        (["info", "--game", "chess"], "name must be one of"),
    ],
)
def test_cli_bad_input_exits_2(args, match):
    res = _run(*args)
    assert res.exit_code == 2, res.output
    assert match in res.output


def test_rtcfr_check_passes_on_kuhn_and_fails_when_a_threshold_does(monkeypatch):
    res = _run("rtcfr", "--game", "kuhn_poker", "--iterations", "10000", "--check")
    assert res.exit_code == 0, res.output
    # three thresholds of the spec plus the headline (RTCFR+ last iterate vs CFR+ average)
    assert res.output.count("[pass]") == 4 and "FAIL" not in res.output
    assert "vs CFR+ average-iterate exploitability" in res.output

    import eff_games.reproduce.rtcfr as repro

    impossible = repro.Threshold("kuhn_poker", 100, "rtcfr+", "last", "<=", 1e-30)
    monkeypatch.setattr(repro, "THRESHOLDS", (impossible,))
    res = _run("rtcfr", "--game", "kuhn_poker", "--iterations", "100", "--check")
    assert res.exit_code == 1, res.output
    assert "[FAIL]" in res.output
