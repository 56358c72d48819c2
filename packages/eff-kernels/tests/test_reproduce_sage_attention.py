import dataclasses
import math

import pytest
import torch

from eff_kernels.attention import sage_attention
from eff_kernels.reproduce.sage_attention import (
    SageAttentionReproConfig,
    k_smoothing_rows,
    make_qkv,
    run,
    sagebwd_errors,
)


def _verdicts_as_expected(result):
    """Every check passes; a reproduces paper claim passes; an xfail one is run and printed."""
    for c in result.claims:
        ok = ("pass",)
        if c.kind == "paper" and c.expected == "xfail":
            ok = ("xfail", "reproduced (unexpected)")
        assert c.verdict(result.mode) in ok, c


@pytest.mark.slow
def test_quick_reproduction_claims():
    result = run("quick", seed=0)
    assert result.error is None and result.passed and len(result.claims) == 41
    assert all(math.isfinite(c.measured) for c in result.claims)
    _verdicts_as_expected(result)
    by_text = {c.text: c for c in result.claims}
    ks = by_text[
        "K smoothing, outlier, INT8 path (per-thread Q/K): rel-L1(no smooth)/rel-L1(smooth), every seed"
    ]
    assert ks.kind == "check" and ks.seeds == (0, 1, 2)  # specs/claims.md: seeds 0-2 each
    bwd = [c for c in result.claims if c.text.startswith("SageBwd, outlier K, V with Gaussian Q")]
    assert len(bwd) == 3 and all(c.kind == "check" and c.seeds == (0, 1) for c in bwd)
    student = [c for c in result.claims if "Student-t(3) Q" in c.text]
    assert len(student) == 6 and all(c.kind == "paper" for c in student)
    assert sum(c.expected == "xfail" for c in student) == 3  # both min cos, per-block rel-L1
    assert any(c.headline for c in result.claims) and result.paper_title and result.headline
    methods = {(r["dist"], r["method"]) for r in result.table}
    assert ("outlier", "nvfp4-nosmooth") in methods and len(result.table) == 18
    assert result.metrics["kv_bytes_per_token"]["nvfp4"]["ratio_to_fp16"] == pytest.approx(0.28125)
    assert any("per 128-token Q block" in n for n in result.notes)  # per-block ratio, information


def test_reproduction_runs_on_a_small_config():
    cfg = SageAttentionReproConfig(
        heads=1, seq=256, twolevel_seq=256, bwd_seq=128, triton_seq=70, gqa_ratio=1
    )
    result = run("quick", seed=1, cfg=cfg)
    assert result.error is None and all(math.isfinite(c.measured) for c in result.claims)
    # the mechanism claims hold at any size: Triton equals the reference, smoothing fixes outliers
    by_text = {c.text: c for c in result.claims}
    assert by_text["Triton kernels vs PyTorch reference: max rel-L1"].passed
    nosmooth = "SageBwd without K smoothing, outlier K, V with Gaussian Q: dQ cos stays below"
    assert by_text[nosmooth].passed and by_text[nosmooth].seeds == (1, 2)


def test_outlier_gaussian_q_variant_keeps_k_and_v():
    """``outlier_heavy_q=False`` swaps only Q for the Gaussian draw (the SageBwd check's recipe)."""
    cfg = SageAttentionReproConfig(heads=2, seq=64)
    q_t, k_t, v_t = make_qkv("outlier", cfg, 3)
    q_g, k_g, v_g = make_qkv("outlier", dataclasses.replace(cfg, outlier_heavy_q=False), 3)
    q_gauss, _, _ = make_qkv("gauss", cfg, 3)
    assert torch.equal(k_t, k_g) and torch.equal(v_t, v_g)
    assert torch.equal(q_g, q_gauss) and not torch.equal(q_t, q_g)
    assert float(q_t.abs().max()) > 3 * float(q_g.abs().max())  # the heavy Student-t tail


def test_k_smoothing_rows_per_thread_and_per_block():
    cfg = SageAttentionReproConfig(heads=1, seq=256)
    rows = k_smoothing_rows(cfg, [0, 1])
    assert [r["seed"] for r in rows] == [0, 1]
    for row in rows:
        assert row["ratio per_block"] > 1 and row["ratio per_thread"] > 1


def test_sagebwd_gaussian_q_outlier_and_granularity():
    cfg = SageAttentionReproConfig(bwd_heads=1, bwd_seq=128, outlier_heavy_q=False)
    smooth = sagebwd_errors(cfg, "outlier", 0)
    plain = sagebwd_errors(cfg, "outlier", 0, smooth_k=False)
    # with Gaussian Q, K smoothing makes SageBwd as accurate as on `gauss`; without it dQ breaks
    assert min(smooth[n]["cos"] for n in ("O", "dQ", "dV")) > 0.999
    assert plain["dQ"]["cos"] < 0.97
    # SageBwd at per-thread Q/K granularity runs and differs from the per-block default
    thread = sagebwd_errors(cfg, "outlier", 0, qk_granularity="per_thread")
    assert thread["dQ"]["cos"] > 0.999 and thread["dQ"]["rel_l1"] != smooth["dQ"]["rel_l1"]


def test_int8_default_granularity_is_per_thread():
    q, k, v = make_qkv("outlier", SageAttentionReproConfig(heads=1, seq=256), 2)
    default = sage_attention(q, k, v)
    assert torch.equal(default, sage_attention(q, k, v, qk_granularity="per_thread"))
    assert not torch.equal(default, sage_attention(q, k, v, qk_granularity="per_block"))


def test_make_qkv_cross_attention_lengths_and_sage_accuracy_there():
    from eff_kernels.attention import attention_error, attention_fp64

    cfg = SageAttentionReproConfig(heads=2, seq=64)
    q0, k0, v0 = make_qkv("outlier", cfg, 5)
    q1, k1, v1 = make_qkv("outlier", cfg, 5, kv_seq=64)
    assert torch.equal(q0, q1) and torch.equal(k0, k1) and torch.equal(v0, v1)  # default = Q's
    q, k, v = make_qkv("outlier", cfg, 5, kv_seq=160, kv_heads=1)
    assert q.shape[-2] == 64 and k.shape[-2] == v.shape[-2] == 160 and k.shape[1] == 1
    out = sage_attention(q, k, v, enable_gqa=True)
    ref = attention_fp64(q, k, v, enable_gqa=True)
    assert out.shape == q.shape
    assert attention_error(out, ref)["cos"] > 0.999
    with pytest.raises(ValueError, match="kv_seq"):
        make_qkv("gauss", cfg, 0, kv_seq=0)
    with pytest.raises(ValueError, match="kv_heads=3 must divide heads=2"):
        make_qkv("gauss", cfg, 0, kv_heads=3)
