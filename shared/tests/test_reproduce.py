import json
import math

import pytest
from typer.testing import CliRunner

import eff_shared.reproduce as rep
from eff_shared.cli import build_app
from eff_shared.errors import ReproductionError
from eff_shared.reproduce import Claim, Result, claim_seeds, paper_claim


@pytest.mark.parametrize(
    ("op", "measured", "threshold", "expected"),
    [
        (">=", 1.0, 1.0, True),
        (">", 1.0, 1.0, False),
        ("<=", 0.5, 1.0, True),
        ("<", 2.0, 1.0, False),
    ],
)
def test_claim_comparisons(op, measured, threshold, expected):
    assert Claim("x", measured, threshold, op).passed is expected


def test_claim_nan_and_inf_never_pass():
    assert not Claim("nan", math.nan, 0.0, ">=").passed
    assert not Claim("inf", math.inf, 0.0, ">=").passed
    assert not Claim("-inf", -math.inf, 0.0, "<=").passed


def test_claim_rejects_bad_op_and_empty_text():
    with pytest.raises(ValueError, match="op"):
        Claim("x", 1.0, 0.0, "==")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="text"):
        Claim("", 1.0, 0.0)


def test_result_passes_only_with_claims_all_holding_and_no_error():
    ok, bad = Claim("a", 1, 0, ">"), Claim("b", 0, 1, ">")
    assert Result("m", "quick", 0, claims=[ok]).passed
    assert not Result("m", "quick", 0, claims=[ok, bad]).passed
    assert not Result("m", "quick", 0, claims=[]).passed
    assert not Result("m", "quick", 0, claims=[ok], error="boom").passed


def test_result_roundtrip():
    r = Result(
        "m",
        "full",
        3,
        claims=[
            Claim("a", 1.5, 1, ">=", unit="x"),
            paper_claim(
                "b beats c",
                [0.1, -0.2, 0.3],
                0.0,
                seeds=[3, 4, 5],
                expected="xfail",
                reason="seed noise at this scale",
                paper="+2.8 points, Qwen2.5-1.5B + LoRA",
                modes=["full"],
                headline=True,
            ),
            Claim("c", 0, 1, "<=", values=(0.5, 0.9)),
        ],
        paper_title="A paper",
        headline="+2.8 points",
        metrics={"k": 2},
        table=[{"method": "a", "v": 1.0}],
        series={"p": {"x": [1, 2], "a": [0.1, 0.2]}},
    )
    data = json.loads(json.dumps(r.to_dict()))
    back = Result.from_dict(data)
    assert back == r
    assert data["claims"][0]["passed"] is True
    assert data["claims"][1]["verdict"] == "reproduced (unexpected)"
    assert data["claims"][1]["values"] == [0.1, -0.2, 0.3] and data["claims"][1]["kind"] == "paper"
    assert data["counts"]["paper_unexpected"] == 1 and data["counts"]["checks_passed"] == 2


def _fake_registry(monkeypatch, runs):
    class FakeEP:
        def __init__(self, name, fn):
            self.name, self.fn, self.value, self.dist = name, fn, f"fake:{name}", None

        def load(self):
            return self.fn

    monkeypatch.setattr(
        rep, "available", lambda: {n: FakeEP(n, f) for n, f in sorted(runs.items())}
    )


def test_resolve_names_by_domain_prefix(monkeypatch):
    _fake_registry(monkeypatch, {"games.a": None, "games.b": None, "theory.c": None})
    assert rep.resolve_names(["games"]) == ["games.a", "games.b"]
    assert rep.resolve_names(["theory.c", "games.a", "theory"]) == ["theory.c", "games.a"]
    assert rep.resolve_names(None) == ["games.a", "games.b", "theory.c"]
    with pytest.raises(ReproductionError, match=r"available: games\.a"):
        rep.resolve_names(["gam"])


def test_run_one_turns_exceptions_and_wrong_types_into_failed_results(monkeypatch):
    def boom(mode, seed):
        raise RuntimeError("kaput")

    _fake_registry(monkeypatch, {"x.boom": boom, "x.wrong": lambda mode, seed: 42})
    r = rep.run_one("x.boom")
    assert not r.passed and "kaput" in r.error
    r = rep.run_one("x.wrong")
    assert not r.passed and "expected Result" in r.error
    with pytest.raises(ValueError, match="mode"):
        rep.run_one("x.boom", mode="medium")  # type: ignore[arg-type]


def test_cli_exit_status_follows_claims(monkeypatch, tmp_path):
    seen = {}

    def good(mode, seed):
        seen["args"] = (mode, seed)
        return Result("x.good", mode, seed, claims=[Claim("good holds", 2.0, 1.0, ">")])

    def bad(mode, seed):
        return Result("x.bad", mode, seed, claims=[Claim("bad holds", 0.0, 1.0, ">")])

    _fake_registry(monkeypatch, {"x.good": good, "x.bad": bad})
    runner = CliRunner()
    app = build_app()
    res = runner.invoke(
        app, ["reproduce", "x.good", "--full", "--seed", "7", "--json", str(tmp_path / "o.json")]
    )
    assert res.exit_code == 0, res.output
    assert seen["args"] == ("full", 7)
    assert "good holds" in res.output and "pass" in res.output
    assert (tmp_path / "o.json").exists()

    res = runner.invoke(app, ["reproduce", "x", "-j", "1", "--out", str(tmp_path / "rep")])
    assert res.exit_code == 1
    assert "FAIL" in res.output and "x.bad" in res.output
    assert (tmp_path / "rep" / "report.md").read_text().count("| FAIL |") == 1

    res = runner.invoke(app, ["reproduce", "nope"])
    assert res.exit_code == 2
    assert "no reproduction named" in res.output


def test_reproduce_runs_torch_with_the_requested_threads_and_restores_them(monkeypatch):
    """`eff reproduce --threads N` pins torch's intra-op threads for the run (a fake torch module
    stands in, so this runs in the torch-free eff-shared environment too)."""
    import importlib.util
    import sys
    import types

    import eff_shared
    from eff_shared import cli

    calls = []
    fake = types.ModuleType("torch")
    fake.get_num_threads = lambda: 8
    fake.set_num_threads = calls.append
    fake.nn = types.ModuleType("torch.nn")  # what eff_shared.torch reads at import
    fake.float32 = fake.float16 = fake.bfloat16 = fake.float64 = object()
    monkeypatch.setitem(sys.modules, "torch", fake)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n, *a: object() if n == "torch" else real_find_spec(n, *a),
    )
    # the CLI imports the core's torch helper, which must see the stand-in: import it afresh and
    # drop that copy afterwards (monkeypatch puts back a real one that was there before)
    monkeypatch.delitem(sys.modules, "eff_shared.torch", raising=False)
    monkeypatch.delattr(eff_shared, "torch", raising=False)
    try:
        with cli._torch_threads(1):
            assert calls == [1]
        assert calls == [1, 8]
        with cli._torch_threads(0):  # 0 leaves torch alone
            pass
        assert calls == [1, 8]
    finally:
        sys.modules.pop("eff_shared.torch", None)
        if "torch" in vars(eff_shared):
            delattr(eff_shared, "torch")


def test_paper_claim_statistics_over_seeds():
    c = paper_claim("gain", [0.3, -0.1, 0.05, 0.2, 0.01], 0.03, seeds=range(5))
    assert c.measured == pytest.approx(0.05)  # the median
    assert c.spread == (-0.1, 0.3)
    assert (c.k_on_side, c.n_seeds) == (3, 5)
    assert c.passed
    mean = paper_claim("gain", [0.3, -0.1, 0.05, 0.2, 0.01], 0.1, statistic="mean")
    assert mean.measured == pytest.approx(0.092) and not mean.passed
    even = paper_claim("gain", [1.0, 2.0, 4.0, 8.0], 3.0, op="<=")
    assert even.measured == pytest.approx(3.0) and even.passed and even.k_on_side == 2
    assert not paper_claim("nan seed", [0.1, math.nan, 0.2], 0.0).passed
    with pytest.raises(ValueError, match="values"):
        paper_claim("empty", [], 0.0)
    with pytest.raises(ValueError, match="seeds"):
        paper_claim("mismatch", [1.0, 2.0], 0.0, seeds=[0])
    with pytest.raises(ValueError, match="reason"):
        paper_claim("no reason", [1.0], 0.0, expected="xfail")
    with pytest.raises(ValueError, match="statistic"):
        paper_claim("bad", [1.0], 0.0, statistic="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected"):
        paper_claim("bad", [1.0], 0.0, expected="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="modes"):
        paper_claim("bad", [1.0], 0.0, modes=["slow"])  # type: ignore[list-item]


def test_check_over_seeds_must_hold_at_every_seed():
    c = Claim("gain >= 2 at every seed", 0.0, 2.0, ">=", values=(3.1, 2.6, 1.9))
    assert not c.passed and c.measured == pytest.approx(1.9) and c.k_on_side == 2
    ok = Claim("err <= 1e-3", 0.0, 1e-3, "<=", values=(1e-4, 5e-4))
    assert ok.passed and ok.measured == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="xfail"):
        Claim("a check", 1.0, 0.0, expected="xfail", reason="r")


def test_verdicts_and_what_gates_a_run():
    check_fail = Claim("check", 0.0, 1.0)
    repro_fail = paper_claim("p", [0.0, 0.1], 1.0)
    xfail_fail = paper_claim("x", [0.0, 0.1], 1.0, expected="xfail", reason="r")
    xfail_hold = paper_claim("y", [2.0, 3.0], 1.0, expected="xfail", reason="r")
    full_only = paper_claim("z", [0.0], 1.0, modes=["full"])
    assert check_fail.verdict("quick") == "FAIL"
    assert repro_fail.verdict("quick") == "FAIL"
    assert xfail_fail.verdict("quick") == "xfail"
    assert xfail_hold.verdict("quick") == "reproduced (unexpected)"
    assert full_only.verdict("quick") == "not judged" and full_only.verdict("full") == "FAIL"
    ok = Claim("ok", 1.0, 0.0)
    assert Result("m", "quick", 0, claims=[ok, xfail_fail, xfail_hold, full_only]).passed
    assert not Result("m", "full", 0, claims=[ok, full_only]).passed
    assert not Result("m", "quick", 0, claims=[ok, check_fail]).passed
    assert not Result("m", "quick", 0, claims=[ok, repro_fail]).passed
    with pytest.raises(ValueError, match="mode"):
        Result("m", "medium", 0)  # type: ignore[arg-type]


def test_claim_seeds_follow_the_mode():
    assert claim_seeds("quick", 7) == [7, 8]
    assert claim_seeds("full", 7) == [7, 8, 9, 10, 11]
    assert claim_seeds("quick", 0, quick=1) == [0]
    with pytest.raises(ValueError, match="mode"):
        claim_seeds("slow", 0)
    with pytest.raises(ValueError, match="seeds"):
        claim_seeds("full", 0, full=0)


def _paper_runs():
    def check_fails(mode, seed):
        return Result("y.check", mode, seed, claims=[Claim("check holds", 0.0, 1.0)])

    def paper_fails(mode, seed):
        return Result(
            "y.paper", mode, seed, claims=[Claim("ok", 1, 0), paper_claim("gain", [0.0], 1.0)]
        )

    def xfail_fails(mode, seed):
        claims = [
            Claim("ok", 1, 0),
            paper_claim("gain xf", [0.1, 0.2], 1.0, expected="xfail", reason="too small here"),
        ]
        return Result("y.xfail", mode, seed, claims=claims)

    def xfail_holds(mode, seed):
        claims = [
            Claim("ok", 1, 0),
            paper_claim("gain xp", [2.0, 3.0], 1.0, expected="xfail", reason="too small here"),
        ]
        return Result("y.xpass", mode, seed, claims=claims)

    return {
        "y.check": check_fails,
        "y.paper": paper_fails,
        "y.xfail": xfail_fails,
        "y.xpass": xfail_holds,
    }


@pytest.mark.parametrize(
    ("name", "exit_code", "printed"),
    [
        ("y.check", 1, "FAIL"),
        ("y.paper", 1, "FAIL"),
        ("y.xfail", 0, "xfail (not reproduced)"),
        ("y.xpass", 0, "reproduced (unexpected)"),
    ],
)
def test_cli_exit_status_follows_claim_kind_and_expected_verdict(
    monkeypatch, name, exit_code, printed
):
    _fake_registry(monkeypatch, _paper_runs())
    res = CliRunner().invoke(build_app(), ["reproduce", name, "-j", "1"])
    assert res.exit_code == exit_code, res.output
    assert printed in res.output
    last = res.output.strip().splitlines()[-1]
    assert "checks" in res.output.strip().splitlines()[-2] + last  # the summary closes the output


def test_summary_line_counts_every_verdict(monkeypatch):
    from eff_shared import report

    _fake_registry(monkeypatch, _paper_runs())
    results = rep.run_many(list(_paper_runs()), "quick", 0)
    line = report.summary_line(results)
    assert "checks 3/4 passed" in line
    assert "1 reproduced (unexpected)" in line and "1 not reproduced (xfail)" in line
    assert "regressions: 2" in line


def test_unwritable_out_or_json_fails_before_any_reproduction_runs(monkeypatch, tmp_path):
    ran = []

    def good(mode, seed):
        ran.append(seed)
        return Result("x.good", mode, seed, claims=[Claim("good holds", 2.0, 1.0, ">")])

    _fake_registry(monkeypatch, {"x.good": good})
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    app = build_app()
    res = CliRunner().invoke(app, ["reproduce", "x.good", "--out", str(blocker / "out")])
    assert res.exit_code == 2 and "--out" in res.output and ran == []
    res = CliRunner().invoke(app, ["reproduce", "x.good", "--json", str(blocker / "r.json")])
    assert res.exit_code == 2 and "--json" in res.output and ran == []
    res = CliRunner().invoke(app, ["reproduce", "x.good", "--json", str(tmp_path)])
    assert res.exit_code == 2 and "directory" in res.output and ran == []


def test_out_writes_the_ledger_with_paper_claims(monkeypatch, tmp_path):
    def method(mode, seed):
        return Result(
            "z.m",
            mode,
            seed,
            paper_title="A paper on z",
            headline="z beats w by 3 points on ImageNet",
            claims=[
                Claim("exact", 0.0, 1e-6, "<="),
                paper_claim(
                    "z - w accuracy",
                    [0.01, 0.02, -0.01],
                    0.03,
                    seeds=[0, 1, 2],
                    expected="xfail",
                    reason="too few samples at this scale",
                    paper="+3 points, ImageNet",
                    headline=True,
                ),
            ],
        )

    _fake_registry(monkeypatch, {"z.m": method})
    res = CliRunner().invoke(build_app(), ["reproduce", "z", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    ledger = (tmp_path / "o" / "ledger.md").read_text()
    assert "## z.m — A paper on z" in ledger
    assert "z beats w by 3 points on ImageNet" in ledger
    assert "median 0.01 [-0.01, 0.02], 0/3 seeds" in ledger
    assert "xfail (not reproduced)" in ledger and "too few samples at this scale" in ledger
    assert "Headline at this scale: **not reproduced**" in ledger
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert Result.from_dict(data["results"][0]).claims[1].values == (0.01, 0.02, -0.01)


def test_run_many_in_worker_processes_keeps_the_order_and_the_results():
    """The core's own reproduction, twice in two spawned workers and once in-process: same claims
    (the workers pin one thread; FedAvg's numbers do not depend on it)."""
    assert "shared.fedavg" in rep.available()
    seq = rep.run_many(["shared.fedavg"], "quick", 1)
    done = []
    par = rep.run_many(["shared.fedavg"] * 2, "quick", 1, on_done=done.append, jobs=2)
    assert len(par) == 2 and len(done) == 2
    for r in par:
        assert r.error is None and r.name == "shared.fedavg"
        assert [c.measured for c in r.claims] == [c.measured for c in seq[0].claims]
    with pytest.raises(ValueError, match="jobs"):
        rep.run_many(["shared.fedavg"], "quick", 0, jobs=0)


def test_add_series_keeps_the_words_through_to_dict_and_from_dict():
    r = Result("z.m", "quick", 0)
    curve = {"x": [1.0, 2.0, 3.0], "CFR+": [1.0, 0.1, 0.01]}
    r.add_series(
        "leduc",
        curve,
        title="Exploitability on Leduc poker",
        xlabel="iteration",
        ylabel="exploitability (chips)",
        yscale="log",
    )
    r.add_series(
        "acc", {"x": [1.0], "a": [0.5]}, title="Accuracy", xlabel="round", ylabel="test accuracy"
    )
    assert r.series["leduc"] is curve
    assert r.plot_labels == {
        "leduc": {
            "title": "Exploitability on Leduc poker",
            "xlabel": "iteration",
            "ylabel": "exploitability (chips)",
            "yscale": "log",
        },
        "acc": {"title": "Accuracy", "xlabel": "round", "ylabel": "test accuracy"},
    }
    back = Result.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.series == r.series and back.plot_labels == r.plot_labels


@pytest.mark.parametrize("arg", ["title", "xlabel", "ylabel"])
@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_add_series_requires_its_words(arg, bad):
    r = Result("z.m", "quick", 0)
    words = {"title": "T", "xlabel": "x (s)", "ylabel": "y"} | {arg: bad}
    with pytest.raises(ValueError, match=arg):
        r.add_series("p", {"x": [0.0], "a": [1.0]}, **words)
    assert r.series == {} and r.plot_labels == {}


def test_add_series_yscale_is_log_linear_or_automatic():
    r = Result("z.m", "quick", 0)
    words = {"title": "T", "xlabel": "x", "ylabel": "y"}
    with pytest.raises(ValueError, match="yscale"):
        r.add_series("p", {"a": [1.0]}, yscale="symlog", **words)
    r.add_series("p", {"a": [1.0]}, yscale="linear", **words)
    assert r.plot_labels["p"]["yscale"] == "linear"
    r.add_series("p", {"a": [2.0]}, **words)  # re-adding replaces; no yscale = automatic
    assert r.series["p"] == {"a": [2.0]} and "yscale" not in r.plot_labels["p"]


def test_add_series_plots_end_to_end_with_a_long_title(tmp_path):
    pytest.importorskip("matplotlib")
    from eff_shared import report

    r = Result("z.m", "quick", 0)
    r.add_series(
        "acc",
        {"x": [1, 2, 3], "FedAvg": [0.5, 0.7, 0.8]},
        title="FedAvg test accuracy per round, Dirichlet α = 0.5, seed 0, a title longer than a line",
        xlabel="communication round",
        ylabel="test accuracy",
    )
    written = report.write_plots([r], tmp_path)
    assert written["z.m.acc"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
