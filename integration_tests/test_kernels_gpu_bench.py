"""tools/bench/kernels_gpu.py end to end on CPU (``--dry-run``: tiny shapes, Triton interpreted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_kernels_gpu_bench_dry_run(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "bench" / "kernels_gpu.py"),
            "--dry-run",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["dry_run"] is True and data["ok"] is True and data["failed"] == []
    acc = data["attention"]["accuracy"]
    assert {r["format"] for r in acc} >= {"int8-fp16", "int8-fp8", "nvfp4", "sagebwd dQ/dK/dV"}
    assert all(r["ok"] for r in acc)
    methods = {r["method"] for r in data["attention"]["timing"] if "tops" in r}
    assert "ours int8+fp16 kernel" in methods and "torch sdpa" in methods
    caches = {r["cache"]: r for r in data["lrqk"]["rows"]}
    lrqk = next(r for name, r in caches.items() if name.startswith("LRQK"))
    assert lrqk["decode_tok_s"] > 0 and data["lrqk"]["lrqk_rows_transferred_per_step"] >= 0
    assert all(r["ok"] for r in data["paretoq"]["rows"])
