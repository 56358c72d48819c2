import math

import pytest
from typer.testing import CliRunner

import eff_shared.reproduce as rep
from eff_shared.cli import build_app
from eff_shared.errors import ReproductionError
from eff_shared.reproduce import Claim, Result


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
        claims=[Claim("a", 1.5, 1, ">=", unit="x")],
        metrics={"k": 2},
        table=[{"method": "a", "v": 1.0}],
        series={"p": {"x": [1, 2], "a": [0.1, 0.2]}},
    )
    back = Result.from_dict(r.to_dict())
    assert back == r
    assert r.to_dict()["claims"][0]["passed"] is True


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

    res = runner.invoke(app, ["reproduce", "x", "--out", str(tmp_path / "rep")])
    assert res.exit_code == 1
    assert "FAIL" in res.output and "x.bad" in res.output
    assert (tmp_path / "rep" / "report.md").read_text().count("FAIL") == 1

    res = runner.invoke(app, ["reproduce", "nope"])
    assert res.exit_code == 2
    assert "no reproduction named" in res.output


def test_reproduce_runs_torch_with_the_requested_threads_and_restores_them(monkeypatch):
    """`eff reproduce --threads N` pins torch's intra-op threads for the run (a fake torch module
    stands in, so this runs in the torch-free eff-shared environment too)."""
    import importlib.util
    import sys
    import types

    from eff_shared import cli

    calls = []
    fake = types.ModuleType("torch")
    fake.get_num_threads = lambda: 8
    fake.set_num_threads = calls.append
    monkeypatch.setitem(sys.modules, "torch", fake)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n, *a: object() if n == "torch" else real_find_spec(n, *a),
    )
    with cli._torch_threads(1):
        assert calls == [1]
    assert calls == [1, 8]
    with cli._torch_threads(0):  # 0 leaves torch alone
        pass
    assert calls == [1, 8]
