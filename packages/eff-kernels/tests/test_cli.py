import json

from typer.testing import CliRunner

from eff_kernels.cli import app

runner = CliRunner()


def test_sage_attention_prints_the_accuracy_and_kv_memory_tables(tmp_path):
    path = tmp_path / "sage.json"
    res = runner.invoke(
        app,
        ["sage-attention", "--dist", "gauss,outlier", "--seq", "128", "--heads", "1",
         "--formats", "int8-fp16,nvfp4", "--json", str(path)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "SageAttention vs float64" in res.output and "KV cache bytes per token" in res.output
    data = json.loads(path.read_text())
    rows = {(r["dist"], r["format"]): r for r in data["rows"]}
    assert rows[("gauss", "int8-fp16")]["cos"] > 0.999
    kv = {r["format"]: r["ratio_to_fp16"] for r in data["kv_bytes_per_token"]}
    assert abs(kv["nvfp4"] - 0.28125) < 1e-9 and "0.2812" in res.output


def test_sage_attention_backward_table_with_triton():
    res = runner.invoke(
        app,
        [
            "sage-attention",
            "--dist",
            "gauss",
            "--seq",
            "64",
            "--heads",
            "1",
            "--formats",
            "int8-fp8",
            "--backend",
            "triton",
            "--backward",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "SageBwd" in res.output and "dQ cos" in res.output


def test_lrqk_and_paretoq_commands(tmp_path):
    res = runner.invoke(
        app,
        ["lrqk", "--seq", "256", "--decode", "4", "--rank", "8", "--top-k", "16", "--window", "4"],
    )
    assert res.exit_code == 0, res.output
    assert "pca_k" in res.output and "transferred K/V rows per step" in res.output
    gqa = tmp_path / "gqa.json"
    args = ["lrqk", "--seq", "128", "--decode", "3", "--top-k", "16", "--window", "4"]
    res = runner.invoke(
        app, [*args, "--batch", "2", "--heads", "4", "--kv-heads", "2", "--json", str(gqa)]
    )
    assert res.exit_code == 0, res.output
    mha = tmp_path / "mha.json"
    assert runner.invoke(app, [*args, "--heads", "4", "--json", str(mha)]).exit_code == 0
    # GQA shares a K/V head's fetches between its query heads
    assert (
        json.loads(gqa.read_text())["transferred_per_k"]
        < json.loads(mha.read_text())["transferred_per_k"]
    )
    assert runner.invoke(app, ["lrqk", "--heads", "4", "--kv-heads", "3"]).exit_code == 2
    path = tmp_path / "pq.json"
    res = runner.invoke(
        app,
        [
            "paretoq",
            "--bits",
            "2,4",
            "--steps",
            "20",
            "--qat-steps",
            "5",
            "--split",
            "0,0.5",
            "--json",
            str(path),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(path.read_text())
    assert {r["bits"] for r in data["rows"]} == {2.0, 4.0} and len(data["budget_split"]) == 4


def test_bad_cli_input_is_a_usage_error():
    assert runner.invoke(app, ["sage-attention", "--dist", "cauchy"]).exit_code == 2
    assert runner.invoke(app, ["sage-attention", "--formats", "fp6"]).exit_code == 2
    assert runner.invoke(app, ["paretoq", "--bits", "0"]).exit_code == 2
    assert runner.invoke(app, ["lrqk", "--rank", "65"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--sections", "gemm"]).exit_code == 2
    res = runner.invoke(app, ["bench"])  # no CUDA here: the real benchmark refuses
    assert res.exit_code == 2 and "dry-run" in res.output


def test_bench_dry_run_of_one_section(tmp_path):
    path = tmp_path / "b.json"
    res = runner.invoke(app, ["bench", "--dry-run", "--sections", "paretoq", "--json", str(path)])
    assert res.exit_code == 0, res.output
    data = json.loads(path.read_text())
    assert data["ok"] and all(r["ok"] for r in data["paretoq"]["rows"])
