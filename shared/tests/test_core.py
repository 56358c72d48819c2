import json
import math
from pathlib import Path

import numpy as np
import pytest

from eff_shared import report
from eff_shared.errors import check_choice, check_fraction, check_positive, check_type
from eff_shared.progress import is_interactive, progress_task, track
from eff_shared.reproduce import Claim, Result
from eff_shared.seeding import derive_seed, make_rng, seed_everything


def test_make_rng_streams_are_reproducible_and_independent():
    a = make_rng(1, 2, 3).normal(size=4)
    assert np.array_equal(a, make_rng(1, 2, 3).normal(size=4))
    assert not np.array_equal(a, make_rng(1, 3, 2).normal(size=4))
    assert not np.array_equal(a, make_rng(2, 2, 3).normal(size=4))
    assert derive_seed(0, 1) == derive_seed(0, 1) != derive_seed(0, 2)
    assert 0 <= derive_seed(123) < 2**32


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_seed_validation(bad):
    with pytest.raises((TypeError, ValueError), match="seed"):
        make_rng(bad)


def test_seed_everything_seeds_python_and_numpy():
    import random

    seed_everything(11)
    x = (random.random(), np.random.rand())
    seed_everything(11)
    assert x == (random.random(), np.random.rand())


def test_checks_name_the_argument():
    check_choice("mode", "a", ["a", "b"])
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\], got 'c'"):
        check_choice("mode", "c", ["a", "b"])
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        check_positive("lr", 0.0)
    with pytest.raises(ValueError, match="lr"):
        check_positive("lr", math.nan)
    check_positive("n", 0, strict=False, integer=True)
    with pytest.raises(TypeError, match="n must be int, got float"):
        check_positive("n", 2.0, integer=True)
    with pytest.raises(TypeError, match="got bool"):
        check_type("n", True, int)
    with pytest.raises(ValueError, match=r"p must lie in \(0, 1\)"):
        check_fraction("p", 1.0, closed=False)
    check_fraction("p", 1.0)


def test_progress_off_a_terminal_prints_periodic_lines_and_nothing_when_quiet(capsys, monkeypatch):
    monkeypatch.delenv("EFF_QUIET", raising=False)
    assert not is_interactive()
    clock = iter(range(0, 1000, 4))  # each call to the clock advances 4 s
    monkeypatch.setattr("eff_shared.progress.time.monotonic", lambda: next(clock))
    assert list(track(range(6), "distil", every_s=10)) == list(range(6))
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "a long loop off a terminal must say something"
    assert err[0].startswith("distil: 3/6 (50 %), 12 s elapsed, ~12 s left")
    with progress_task("search", every_s=10) as tick:
        for _ in range(4):
            tick()
    err = capsys.readouterr().err
    assert "search: " in err and " done, " in err  # no total: a count, not a fraction
    monkeypatch.setenv("EFF_QUIET", "1")
    assert list(track(range(6), "distil", every_s=10)) == list(range(6))
    assert list(track(range(6), "distil", every_s=10, quiet=False)) == list(range(6))
    out = capsys.readouterr()
    assert out.out == "" and "distil" in out.err and out.err.count("\n") >= 1
    assert list(track(range(6), "x", quiet=True)) == list(range(6))
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="every_s"):
        list(track(range(2), every_s=0))


def test_progress_only_the_outermost_task_reports_and_silenced_hides_all(capsys, monkeypatch):
    from eff_shared.progress import silenced

    monkeypatch.delenv("EFF_QUIET", raising=False)
    clock = iter(range(0, 10000, 4))
    monkeypatch.setattr("eff_shared.progress.time.monotonic", lambda: next(clock))
    for _ in track(range(3), "rounds", every_s=10):
        assert list(track(range(5), "local steps", every_s=10)) == list(range(5))
    err = capsys.readouterr().err
    assert "rounds: " in err and "local steps" not in err
    with silenced():
        assert list(track(range(6), "distil", every_s=10)) == list(range(6))
    assert capsys.readouterr().err == ""
    with pytest.raises(RuntimeError):  # the depth is restored when a loop raises
        for _ in track(range(3), "boom", every_s=10):
            raise RuntimeError
    assert list(track(range(6), "after", every_s=10)) == list(range(6))
    assert "after: " in capsys.readouterr().err


def test_format_value():
    assert report.format_value(0.123456) == "0.1235"
    assert report.format_value(1e-5) == "1.000e-05"
    assert report.format_value(3) == "3"
    assert report.format_value("x") == "x"


def test_json_and_markdown_reports(tmp_path):
    results = [
        Result(
            "a.m",
            "quick",
            0,
            claims=[Claim("m beats baseline", 0.9, 0.5, ">=", "acc")],
            table=[{"method": "m", "acc": 0.9}, {"method": "base", "acc": 0.5}],
            metrics={"n": np.int64(3), "v": np.float32(0.5)},
            notes=["a note"],
        ),
        Result("b.m", "quick", 0, error="Traceback...\nValueError: broken"),
    ]
    data = json.loads(report.write_json(results, tmp_path / "o.json").read_text())
    assert data["passed"] is False
    claim = data["results"][0]["claims"][0]
    assert claim == {
        "text": "m beats baseline",
        "measured": 0.9,
        "threshold": 0.5,
        "op": ">=",
        "unit": "acc",
        "kind": "check",
        "values": [],
        "seeds": [],
        "statistic": "median",
        "expected": "reproduces",
        "reason": "",
        "paper": "",
        "modes": ["quick", "full"],
        "headline": False,
        "passed": True,
        "verdict": "pass",
    }
    assert data["summary"]["checks_passed"] == 1 and data["summary"]["errors"] == 1
    assert data["results"][0]["metrics"] == {"n": 3, "v": 0.5}
    md = report.write_markdown(results, tmp_path / "r.md").read_text()
    assert "| a.m | check | m beats baseline | 0.9 acc | >= 0.5 | pass |" in md
    assert "| b.m |  | ERROR: ValueError: broken |  |  | FAIL |" in md
    assert "| base | 0.5 |" in md and "- a note" in md


def test_plots_take_their_words_from_plot_labels_and_say_when_skipped(tmp_path, monkeypatch):
    r = Result(
        "a.m",
        "quick",
        0,
        claims=[Claim("c", 1, 0)],
        series={"exploitability": {"x": [1, 10, 100], "CFR+": [1.0, 0.1, 1e-4]}},
        plot_labels={
            "exploitability": {
                "title": "Exploitability vs iterations",
                "xlabel": "iteration",
                "ylabel": "NashConv/2 (chips)",
            }
        },
    )
    seen = {}

    def fake_plot(path, series, **kw):
        seen.update(kw)
        return Path(path)

    monkeypatch.setattr(report, "plot_series", fake_plot)
    written = report.write_plots([r], tmp_path)
    assert list(written) == ["a.m.exploitability"]
    assert seen == {
        "title": "a.m: Exploitability vs iterations",
        "xlabel": "iteration",
        "ylabel": "NashConv/2 (chips)",
        "logy": None,
    }
    assert Result.from_dict(r.to_dict()).plot_labels == r.plot_labels
    r.plot_labels = {}
    report.write_plots([r], tmp_path)
    assert seen["title"] == "a.m: exploitability" and seen["xlabel"] == ""
    monkeypatch.setattr(report, "plots_available", lambda: False)
    assert "matplotlib" in report.PLOTS_SKIPPED


def test_plot_file_names_are_portable(tmp_path, monkeypatch):
    r = Result(name="llm.pm", mode="quick", seed=0)
    r.add_series("m* vs n", {"x": [1.0, 2.0], "seed 2": [1.0, 3.0]},
                 title="t", xlabel="x", ylabel="y")  # fmt: skip
    paths = []
    monkeypatch.setattr(
        report, "plot_series", lambda path, series, **kw: paths.append(path) or path
    )
    report.write_plots([r], tmp_path)
    assert [p.name for p in paths] == ["llm.pm.m_vs_n.png"]


def test_number_checks_return_the_value_and_name_the_argument():
    from eff_shared.errors import check_bool, check_int, check_real, finite_array

    assert check_int("n", np.int64(3), minimum=1) == 3 and type(check_int("n", 3)) is int
    for bad, exc, msg in ((0, ValueError, r"n must be an integer in \[1, inf\], got 0"),
                          (2.0, TypeError, "n must be an int, got float"),
                          (True, TypeError, "got bool")):  # fmt: skip
        with pytest.raises(exc, match=msg):
            check_int("n", bad, minimum=1)
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        check_int("k", 5, 0, 4)
    assert check_real("lr", np.float32(0.5)) == 0.5 and check_real("lr", 2) == 2.0
    for bad, exc in (
        (math.nan, ValueError),
        (math.inf, ValueError),
        ("1", TypeError),
        (False, TypeError),
    ):
        with pytest.raises(exc, match="lr must be"):
            check_real("lr", bad)
    with pytest.raises(ValueError, match=r"lr must lie in \[0, 1\], got 2"):
        check_real("lr", 2.0, 0.0, 1.0)
    assert check_bool("flag", False) is False
    with pytest.raises(TypeError, match="flag must be True or False"):
        check_bool("flag", 1)
    arr = finite_array("x", [[1, 2], [3, 4]], ndim=2)
    assert arr.dtype == np.float64 and arr.shape == (2, 2)
    with pytest.raises(ValueError, match="x must be 1-D or 3-D"):
        finite_array("x", arr, ndim=(1, 3))
    with pytest.raises(ValueError, match="finite"):
        finite_array("x", [1.0, math.nan])
    with pytest.raises(TypeError, match="numeric array"):
        finite_array("x", ["a", object()])


def test_print_rows_table_json_and_parse_csv(tmp_path, capsys):
    from rich.console import Console

    rows = [{"method": "A", "acc": 0.91234567}, {"method": "B", "acc": np.float32(0.5), "n": 3}]
    path = tmp_path / "sub" / "rows.json"
    report.print_rows("title here", rows, path, extra={"seed": 0},
                      console=Console(width=120, force_terminal=False))  # fmt: skip
    out = capsys.readouterr().out
    assert "title here" in out and "0.9123" in out and "n" in out
    data = json.loads(path.read_text())
    assert data["seed"] == 0 and data["rows"][1]["acc"] == 0.5 and data["rows"][1]["n"] == 3
    table = report.rows_table("t", rows, columns=["acc"])
    assert [c.header for c in table.columns] == ["acc"] and table.row_count == 2
    assert report.parse_csv("1, 2,,3", int, name="--k") == [1, 2, 3]
    assert report.parse_csv(["a,b", "c"]) == ["a", "b", "c"]
    assert report.parse_csv("x", allowed=("x", "y")) == ["x"]
    with pytest.raises(ValueError, match="--k: 'z' is not a valid int"):
        report.parse_csv("1,z", int, name="--k")
    with pytest.raises(ValueError, match="--m must be a comma-separated list of x, y; got 'q'"):
        report.parse_csv("x,q", name="--m", allowed=("x", "y"))
    with pytest.raises(ValueError, match="needs at least one value"):
        report.parse_csv(" , ", name="--m")


def test_csv_option_parses_and_reports_a_usage_error_naming_the_option():
    import typer

    from eff_shared.cli import csv_option

    assert csv_option("1, 2,3", int, option="--seeds") == [1, 2, 3]
    assert csv_option(["a", "b"], option="--x", allowed=("a", "b")) == ["a", "b"]
    with pytest.raises(typer.BadParameter, match="'x' is not a valid int") as info:
        csv_option("1,x", int, option="--seeds")
    assert info.value.param_hint == "--seeds"
    with pytest.raises(typer.BadParameter, match="comma-separated list of a, b"):
        csv_option("a,c", option="--x", allowed=("a", "b"))
