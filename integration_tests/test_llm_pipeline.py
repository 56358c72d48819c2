"""The efficient-LLM pipeline end to end: teacher → LRC → ParetoQ → Sage / LRQK → OmniDraft →
HeavyWater, composed through the packages' public APIs.

The pipeline lives in ``tools/pipelines/llm_efficiency.py`` (a runnable script; ``tools/`` is not a
package, so it is loaded from its path). It runs once per module at the script's default sizes,
and each test asserts one group of its checks; the thresholds and the values they were set from are
the constants at the top of the script. About 1.5–2 minutes on one CPU thread.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "pipelines" / "llm_efficiency.py"
# one worker runs every test of this module (CI: --dist loadgroup), so the module fixture — the
# whole pipeline, ~140 s — is built once, not once per xdist worker
pytestmark = pytest.mark.xdist_group("llm_pipeline")

PRIVATE = re.compile(r"^\s*(?:from|import)\s+eff_\w+(?:\.\w+)*\._\w+", re.M)


def _load():
    spec = importlib.util.spec_from_file_location("llm_efficiency_pipeline", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pipeline():
    import torch

    mod = _load()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = mod.run_pipeline(mod.PipelineConfig(), echo=None)
    finally:
        torch.set_num_threads(threads)
    return mod, res


def _check(res: dict, name: str) -> dict:
    (row,) = [c for c in res["checks"] if c["name"] == name]
    return row


def test_pipeline_uses_public_names_only():
    for path in (SCRIPT, Path(__file__)):
        hit = PRIVATE.search(path.read_text())
        assert hit is None, f"{path.name} imports a private module: {hit[0]}"


@pytest.mark.slow
def test_pipeline_validation_ce_per_stage(pipeline):
    mod, res = pipeline
    for name in (
        "val CE LRC student / teacher",
        "val CE 4-bit packed / LRC student",
        "val CE 2-bit packed / LRC student",
        "val CE Sage INT8 / sdpa (quantized student)",
        "decode CE LRQK / full cache",
    ):
        row = _check(res, name)
        assert row["ok"], row
    assert res["lrc"]["export_max_logit_diff"] < 1e-4  # to_student() is the trained student
    for bits in ("4", "2"):
        q = res["qat"][bits]
        assert q["packed_linears"] == 7 * mod.PipelineConfig().layers
        assert abs(q["val_ce"] - q["val_ce_qat"]) <= mod.PACKED_CE_TOL  # convert_ keeps the model


@pytest.mark.slow
def test_pipeline_speculative_greedy_equals_teacher_greedy(pipeline):
    """Identity under exact attention; under Sage INT8 a greedy path of the exact teacher up to
    Sage's own logit error (see SAGE_REGRET_FACTOR in the script for why not identity)."""
    mod, res = pipeline
    spec = res["speculative"]
    assert set(spec["backends"]) == set(mod.SPEC_BACKENDS)
    for backend in mod.SPEC_EXACT_BACKENDS:
        row = spec["backends"][backend]
        assert row["identical"] == row["prompts"], (backend, row)
    sage = spec["backends"]["sage"]
    assert sage["exact_teacher_regret"] <= mod.SAGE_REGRET_FACTOR * spec["sage_max_logit_error"]
    for row in spec["backends"].values():
        assert 1.0 <= row["tokens_per_target_forward"] <= mod.PipelineConfig().draft_tokens + 1


@pytest.mark.slow
def test_pipeline_lrqk_memory_and_recall(pipeline):
    _, res = pipeline
    for name in ("LRQK device KV bytes/token / full cache", "LRQK recall@k / random selection"):
        row = _check(res, name)
        assert row["ok"], row
    lq = res["kernels"]["lrqk"]
    assert 0.0 < lq["recall_at_k"] <= 1.0
    assert lq["kv_bytes_per_token_lrqk_asymptotic"] < lq["kv_bytes_per_token_full"]


@pytest.mark.slow
def test_pipeline_watermark_detected_and_calibrated(pipeline):
    mod, res = pipeline
    w = res["watermark"]
    for s in w["samples"]:
        assert s["p_value"] < mod.WM_PVALUE_MAX, s
    assert w["null_sequences"] >= 200
    assert w["null_fpr"] <= mod.WM_FPR_MAX
    assert all(c["ok"] for c in res["checks"]), [c for c in res["checks"] if not c["ok"]]
