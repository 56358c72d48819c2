"""tools/compare_results.py: two ``eff reproduce --json`` files compared, timing aside."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location(
        "eff_compare", ROOT / "tools" / "compare_results.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result() -> dict:
    claim = {"text": "gain", "kind": "paper", "values": [0.1, 0.2], "seeds": [0, 1],
             "measured": 0.15, "threshold": 0.0, "op": ">=", "statistic": "median",
             "expected": "reproduces", "modes": ["full"], "headline": True, "verdict": "pass"}  # fmt: skip
    return {"results": [{
        "name": "vision.x", "mode": "quick", "seed": 0, "error": None, "headline": "h",
        "claims": [claim], "elapsed_s": 3.0,
        "metrics": {"acc": 0.9, "cpu_s": 1.0, "per_seed": {"0": {"wall_s": 2.0, "final": 0.5}}},
        "table": [{"method": "A", "PSNR": 30.0, "CPU s/epoch": 0.3, "MP/s": 2.0}],
        "series": {}, "notes": ["took 12.5 s; gain 0.150"],
    }]}  # fmt: skip


def _write(tmp: Path, name: str, data: dict) -> Path:
    (tmp / name).write_text(json.dumps(data))
    return tmp / name


def test_timing_differences_are_ignored_and_number_changes_are_not(tmp_path, capsys):
    tool = _tool()
    a = _result()
    b = copy.deepcopy(a)
    r = b["results"][0]
    r["elapsed_s"], r["metrics"]["cpu_s"], r["metrics"]["per_seed"]["0"]["wall_s"] = 9.0, 7.0, 5.0
    r["table"][0]["CPU s/epoch"], r["table"][0]["MP/s"] = 0.9, 4.0
    r["notes"] = ["took 3.1 s; gain 0.150"]
    timing = {
        "times": {"teacher": 26.9},
        "ms_per_iteration[kuhn]": 0.2,
        "ppr_build_s_target": 3.9,
        "s per run": 3.4,
        "ms/q": 21.0,
    }
    a["results"][0]["metrics"].update(timing)
    r["metrics"].update(
        {k: 2 * v if k != "times" else {"teacher": 43.6} for k, v in timing.items()}
    )
    for res, measured in ((a["results"][0], "17.4 / 20.2"), (r, "38.9 / 39.8")):  # timings row
        res["table"].append({"item": "LUT demo: predicted / measured ms", "value": measured})
    slowest = {"text": "slowest case", "kind": "check", "values": [], "seeds": [], "measured": 0.03,
               "threshold": 5.0, "op": "<=", "unit": "s", "verdict": "pass"}  # fmt: skip
    a["results"][0]["claims"].append(slowest)
    r["claims"].append(dict(slowest, measured=0.11))  # a duration claim: its value is a timing
    before, after = _write(tmp_path, "a.json", a), _write(tmp_path, "b.json", b)
    assert tool.main([str(before), str(after)]) == 0
    assert "1/1 identical" in capsys.readouterr().out
    for change in (
        lambda r: r["claims"][0]["values"].__setitem__(1, 0.2000001),
        lambda r: r["claims"][0].__setitem__("expected", "xfail"),
        lambda r: r["metrics"]["per_seed"]["0"].__setitem__("final", 0.6),
        lambda r: r["table"][0].__setitem__("PSNR", 30.5),
        lambda r: r["table"][1].__setitem__("item", "LUT demo: predicted ms"),  # label compared
        lambda r: r["notes"].__setitem__(0, "took 3.1 s; gain 0.151"),
        lambda r: r["claims"].append(dict(r["claims"][0], text="new")),
        lambda r: r["claims"][1].__setitem__("verdict", "FAIL"),  # the duration claim's verdict
        lambda r: r["metrics"].__setitem__("build_size_target", 1.0),  # not a timing key
    ):
        c = copy.deepcopy(b)
        change(c["results"][0])
        assert tool.main([str(before), str(_write(tmp_path, "c.json", c))]) == 1
        assert "DIFFERENT  vision.x" in capsys.readouterr().out
    other = copy.deepcopy(a)
    other["results"][0]["name"] = "vision.y"
    assert tool.main([str(before), str(_write(tmp_path, "d.json", other))]) == 1
    assert "only in after: vision.y" in capsys.readouterr().out


def test_ignore_names_keys_and_notes(tmp_path, capsys):
    """``--ignore`` skips a metric key and a note matched by text; the rest is still compared."""
    tool = _tool()
    a = _result()
    b = copy.deepcopy(a)
    a["results"][0]["metrics"]["data_share"], b["results"][0]["metrics"]["data_share"] = 0.17, 0.16
    a["results"][0]["notes"] = ["Step ratio 2.18.", "gain 0.150"]
    b["results"][0]["notes"] = ["Step ratio 2.33.", "gain 0.150"]
    before, after = _write(tmp_path, "a.json", a), _write(tmp_path, "b.json", b)
    assert tool.main([str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "metrics/data_share" in out and "notes[0]" in out
    assert (
        tool.main([str(before), str(after), "--ignore", "data_share", "--ignore", "^Step ratio"])
        == 0
    )
    b["results"][0]["notes"][1] = "gain 0.151"
    after = _write(tmp_path, "c.json", b)
    assert (
        tool.main([str(before), str(after), "--ignore", "data_share", "--ignore", "^Step ratio"])
        == 1
    )
