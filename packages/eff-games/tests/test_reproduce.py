"""The ``games.rtcfr`` reproduction: registered, its quick mode passes, and its claims can fail."""

from __future__ import annotations

from eff_games.reproduce.rtcfr import claims_for, run
from eff_shared.reproduce import available


def test_registered_under_eff_reproductions():
    ep = available()["games.rtcfr"]
    assert ep.value == "eff_games.reproduce.rtcfr:run"


def test_quick_reproduction_claims_hold():
    result = run("quick", seed=0)
    assert result.error is None and result.passed
    texts = [c.text for c in result.claims]
    assert len(result.claims) == 5, texts
    for c in result.claims:  # every check and every reproduces paper claim passes
        assert c.passed and c.verdict(result.mode) == "pass", c
    assert [c.kind for c in result.claims].count("check") == 1
    headline = [c for c in result.claims if c.headline]
    assert len(headline) == 1 and headline[0].kind == "paper" and "average" in headline[0].text
    assert result.paper_title and result.headline
    # the method and the baselines sit on the same game and iterations
    kuhn_10k = {
        r["method"]: r["exploitability"]
        for r in result.table
        if r["game"] == "kuhn_poker" and r["T"] == 10000
    }
    assert set(kuhn_10k) == {"rtcfr+ last", "cfr+ last", "cfr+ average"}
    assert kuhn_10k["rtcfr+ last"] < kuhn_10k["cfr+ average"] < kuhn_10k["cfr+ last"]
    assert set(result.series) == {"kuhn_poker_exploitability", "leduc_poker_exploitability"}
    leduc = result.series["leduc_poker_exploitability"]
    assert len(leduc["x"]) == len(leduc["rtcfr+ last"]) == len(leduc["cfr+ average"]) == 10


def test_claims_fail_when_the_method_does_not_converge():
    rows = [
        {"iteration": 10000, "algo": "rtcfr+", "iterate": "last", "exploitability": 1e-3},
        {"iteration": 10000, "algo": "cfr+", "iterate": "last", "exploitability": 1e-4},
        {"iteration": 10000, "algo": "cfr+", "iterate": "average", "exploitability": 1e-5},
    ]
    claims = claims_for("leduc_poker", rows)
    assert len(claims) == 3
    assert [c.passed for c in claims] == [False, False, False]
    vs_avg = next(c for c in claims if "average" in c.text)
    assert vs_avg.threshold == 1e-5 and vs_avg.op == "<="
    assert claims_for("goofspiel", rows) == []
