import math

import pytest

from eff_kernels.reproduce.sage_attention import SageConfig, run

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
