import dataclasses
import math

import pytest
import torch

from eff_kernels.reproduce.sage_attention import SageConfig, make_qkv, outlier_diagnostics, run

# Measured, not reproduced (see the package README): SageBwd on the `outlier` inputs reaches
# dQ cos ~0.995 (needs >= 0.999); INT8 Q·Kᵀ of the Student-t(3) queries dominates that error.
KNOWN_NOT_REPRODUCED = ("SageBwd, outlier: min cos of O, dQ, dV",)


@pytest.mark.slow
def test_quick_reproduction_claims():
    result = run("quick", seed=0)
    assert result.error is None and len(result.claims) == 35
    for claim in result.claims:
        assert math.isfinite(claim.measured), claim
        if claim.text.startswith(KNOWN_NOT_REPRODUCED):
            assert claim.text in " ".join(result.notes) or claim.passed
            continue
        assert claim.passed, claim
    methods = {(r["dist"], r["method"]) for r in result.table}
    assert ("outlier", "nvfp4-nosmooth") in methods and len(result.table) == 18
    assert result.metrics["kv_bytes_per_token"]["nvfp4"]["ratio_to_fp16"] == pytest.approx(0.28125)


def test_reproduction_runs_on_a_small_config():
    cfg = SageConfig(heads=1, seq=256, twolevel_seq=256, bwd_seq=128, triton_seq=70, gqa_ratio=1)
    result = run("quick", seed=1, cfg=cfg)
    assert result.error is None and all(math.isfinite(c.measured) for c in result.claims)
    # the mechanism claims hold at any size: Triton equals the reference, smoothing fixes outliers
    by_text = {c.text: c for c in result.claims}
    assert by_text["Triton kernels vs PyTorch reference: max rel-L1"].passed
    assert by_text["SageBwd without K smoothing, outlier: dQ cos (best seed) stays below"].passed


def test_outlier_gaussian_q_variant_keeps_k_and_v():
    """``outlier_heavy_q=False`` swaps only Q for the Gaussian draw (the full-mode diagnostic)."""
    cfg = SageConfig(heads=2, seq=64)
    q_t, k_t, v_t = make_qkv("outlier", cfg, 3)
    q_g, k_g, v_g = make_qkv("outlier", dataclasses.replace(cfg, outlier_heavy_q=False), 3)
    q_gauss, _, _ = make_qkv("gauss", cfg, 3)
    assert torch.equal(k_t, k_g) and torch.equal(v_t, v_g)
    assert torch.equal(q_g, q_gauss) and not torch.equal(q_t, q_g)
    assert float(q_t.abs().max()) > 3 * float(q_g.abs().max())  # the heavy Student-t tail


def test_outlier_diagnostics_report_per_seed_ratios():
    cfg = SageConfig(heads=1, seq=256, bwd_heads=1, bwd_seq=128)
    diag = outlier_diagnostics(cfg, [0, 1])
    assert [r["seed"] for r in diag["k_smoothing"]] == [0, 1]
    for row in diag["k_smoothing"]:
        assert row["ratio per_block"] > 1 and row["ratio per_thread"] > 1
    gq = diag["sagebwd_gaussian_q"]
    # with Gaussian Q, K smoothing makes SageBwd as accurate as on `gauss`; without it dQ breaks
    assert gq["min_cos"] > 0.999 and gq["dq_cos_nosmooth"] < 0.97
