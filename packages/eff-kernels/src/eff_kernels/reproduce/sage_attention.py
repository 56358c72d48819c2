"""Reproduction ``kernels.sage_attention``: SageAttention2/3 and SageBwd accuracy vs float64 attention.

Synthetic attention layers (spec recipe): ``gauss`` (N(0,1)), ``peaky`` (q, k × 2.5, score std ≈ 6)
and ``outlier`` (K plus a channel bias 6·N(0,1) shared by all tokens and +40 on 4 channels,
Q ~ 1.5·Student-t(3), V plus a 3·N(0,1) bias); fp16 inputs; reference = softmax attention in
float64. INT8 Q·Kᵀ is quantized per thread (the library default, ``specs/claims.md``).

Checks (kernel accuracy, must hold at every seed): the spec's thresholds for INT8/FP8/NVFP4
accuracy, K smoothing (INT8 at seeds 0–2, per-block ratio printed), Triton = reference, causal,
GQA, and SageBwd on ``outlier`` K, V with Gaussian Q (seeds 0–4 in full mode). Paper claims over
seeds (median): NVFP4 vs MXFP4, two-level P, and SageBwd with the spec's Student-t(3) Q (xfail).
GPU speed is not measured here (``tools/bench/kernels_gpu.py``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from eff_kernels._triton import triton_available
from eff_kernels.attention import (
    FP4EmulationWarning,
    attention_error,
    attention_fp64,
    kv_bytes_per_token,
    p_quant_attention,
    sage_attention,
)
from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import threads

__all__ = [
    "FORMATS",
    "SageAttentionReproConfig",
    "SageConfig",
    "accuracy_table",
    "k_smoothing_rows",
    "make_qkv",
    "run",
    "sagebwd_errors",
    "triton_check",
    "two_level_rows",
]

DISTS = ("gauss", "peaky", "outlier")
# format name -> sage_attention keyword arguments
FORMATS: dict[str, dict[str, Any]] = {
    "int8-fp16": {"pv_dtype": "fp16"},
    "int8-fp16-nosmooth": {"pv_dtype": "fp16", "smooth_k": False},
    "int8-fp8": {"pv_dtype": "fp8"},
    "nvfp4": {"pv_dtype": "fp4"},
    "nvfp4-nosmooth": {"pv_dtype": "fp4", "smooth_k": False, "smooth_q": False},
    "mxfp4": {"pv_dtype": "fp4", "fp4_format": "mxfp4"},
}


@dataclass(frozen=True)
class SageAttentionReproConfig:
    """Every knob of the synthetic data and of the experiments."""

    batch: int = 1
    heads: int = 4
    seq: int = 1024
    head_dim: int = 64
    peaky_scale: float = 2.5
    outlier_bias: float = 6.0
    outlier_shift: float = 40.0
    outlier_channels: int = 4
    q_t_dof: float = 3.0
    q_t_scale: float = 1.5
    # False: ``outlier`` keeps Gaussian Q (outliers in K and V only), with the same K and V draws.
    # Not the spec's recipe; full mode reports SageBwd on it because the prototype's SageBwd table
    # (outlier = gauss with K smoothing, dQ cos 0.91 without) is what this variant gives.
    outlier_heavy_q: bool = True
    v_bias: float = 3.0
    twolevel_seq: int = 2048
    twolevel_stds: tuple[float, ...] = (1.0, 3.0, 5.0)
    bwd_heads: int = 2
    bwd_seq: int = 512
    triton_heads: int = 2
    triton_seq: int = 200
    gqa_ratio: int = 4


#: the former name, kept for existing callers
SageConfig = SageAttentionReproConfig


def make_qkv(
    dist: str,
    cfg: SageAttentionReproConfig,
    seed: int,
    *,
    heads: int | None = None,
    seq: int | None = None,
    kv_heads: int | None = None,
    kv_seq: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp16 inputs of one distribution: Q (B, H, N, D), K and V (B, H_kv, N_kv, D).

    K, V may have fewer heads (``kv_heads``, GQA) and another length (``kv_seq``, cross-attention
    or decoding against a longer cache); both default to Q's.
    """
    check_choice("dist", dist, DISTS)
    for name, value in (("heads", heads), ("seq", seq), ("kv_heads", kv_heads), ("kv_seq", kv_seq)):
        if value is not None:
            check_int(name, value, minimum=1)
    g = torch.Generator().manual_seed(seed)
    h = heads or cfg.heads
    hk = kv_heads or h
    if h % hk:
        raise ValueError(f"kv_heads={hk} must divide heads={h}")
    n, d, b = seq or cfg.seq, cfg.head_dim, cfg.batch
    nk = kv_seq or n
    q = torch.randn(b, h, n, d, generator=g)
    k = torch.randn(b, hk, nk, d, generator=g)
    v = torch.randn(b, hk, nk, d, generator=g)
    if dist == "peaky":
        q, k = q * cfg.peaky_scale, k * cfg.peaky_scale
    elif dist == "outlier":
        bias = cfg.outlier_bias * torch.randn(b, hk, 1, d, generator=g)
        bias[..., : cfg.outlier_channels] += cfg.outlier_shift
        k = k + bias
        chi2 = (torch.randn(b, h, n, d, int(cfg.q_t_dof), generator=g) ** 2).sum(-1) / cfg.q_t_dof
        q_t = cfg.q_t_scale * torch.randn(b, h, n, d, generator=g) / chi2.sqrt()
        q = q_t if cfg.outlier_heavy_q else q
        v = v + cfg.v_bias * torch.randn(b, hk, 1, d, generator=g)
    return q.half(), k.half(), v.half()


def accuracy_table(
    cfg: SageAttentionReproConfig, seeds: list[int], dists: tuple[str, ...] = DISTS, formats: tuple[str, ...] = tuple(FORMATS),
    backend: str = "reference", is_causal: bool = False, gqa: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    """cos / rel-L1 / RMSE vs float64 per (dist, format, seed)."""
    rows = []
    for dist in dists:
        for seed in seeds:
            kvh = cfg.heads // cfg.gqa_ratio if gqa else None
            q, k, v = make_qkv(dist, cfg, seed, kv_heads=kvh)
            ref = attention_fp64(q, k, v, is_causal=is_causal, enable_gqa=gqa)
            for fmt in formats:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FP4EmulationWarning)
                    out = sage_attention(
                        q,
                        k,
                        v,
                        is_causal=is_causal,
                        enable_gqa=gqa,
                        backend=backend,
                        **FORMATS[fmt],
                    )
                rows.append(
                    {"dist": dist, "format": fmt, "seed": seed, **attention_error(out, ref)}
                )
    return rows


def two_level_rows(
    cfg: SageAttentionReproConfig, seeds: list[int], stds: tuple[float, ...] | None = None
) -> list[dict[str, Any]]:
    """Only P quantized to NVFP4 (Q, K, V exact), two-level (P̃ ∈ [0, 2688]) vs one-level (P ∈ [0, 1]),
    at each score std of ``stds`` (default ``cfg.twolevel_stds``)."""
    rows = []
    for std in cfg.twolevel_stds if stds is None else stds:
        for seed in seeds:
            g = torch.Generator().manual_seed(10_000 + seed)
            shape = (cfg.batch, cfg.heads, cfg.twolevel_seq, cfg.head_dim)
            c = math.sqrt(std)  # score q·k/√D has std c²
            q, k, v = (torch.randn(shape, generator=g) * s for s in (c, c, 1.0))
            ref = attention_fp64(q, k, v)
            two = attention_error(p_quant_attention(q, k, v, two_level=True), ref)["rel_l1"]
            one = attention_error(p_quant_attention(q, k, v, two_level=False), ref)["rel_l1"]
            rows.append(
                {
                    "score_std": std,
                    "seed": seed,
                    "two_level_rel_l1": two,
                    "one_level_rel_l1": one,
                    "ratio": one / two,
                }
            )
    return rows


def sagebwd_errors(
    cfg: SageAttentionReproConfig,
    dist: str,
    seed: int,
    smooth_k: bool = True,
    backend: str = "reference",
    qk_granularity: str | None = None,
) -> dict[str, dict[str, float]]:
    """SageBwd forward and gradients vs float64 autograd (random dO); ``qk_granularity`` None is
    SageBwd's default (Q and K per 64-token block)."""
    q, k, v = make_qkv(dist, cfg, seed, heads=cfg.bwd_heads, seq=cfg.bwd_seq)
    g = torch.Generator().manual_seed(20_000 + seed)
    do = torch.randn(q.shape, generator=g).half()

    def grads(fn, dtype):
        qq, kk, vv = (t.detach().to(dtype).clone().requires_grad_() for t in (q, k, v))
        o = fn(qq, kk, vv)
        o.backward(do.to(dtype))
        return {"O": o.detach(), "dQ": qq.grad, "dK": kk.grad, "dV": vv.grad}

    ref = grads(attention_fp64, torch.float64)
    out = grads(
        lambda a, b, c: sage_attention(
            a,
            b,
            c,
            backward="sagebwd",
            smooth_k=smooth_k,
            backend=backend,
            qk_granularity=qk_granularity,
        ),
        torch.float16,
    )
    return {name: attention_error(out[name], ref[name]) for name in ref}


def k_smoothing_rows(cfg: SageAttentionReproConfig, seeds: list[int]) -> list[dict[str, Any]]:
    """INT8 Q·Kᵀ + FP16 P·V on ``outlier``, per seed: rel-L1 without / with K smoothing at per-thread
    Q/K granularity (the default) and per block (the Triton path's), and max|Q|."""
    rows = []
    for s in seeds:
        q, k, v = make_qkv("outlier", cfg, s)
        ref = attention_fp64(q, k, v)
        row: dict[str, Any] = {"seed": s, "max_abs_q": float(q.abs().max())}
        for gran in ("per_thread", "per_block"):
            err = [
                attention_error(
                    sage_attention(q, k, v, pv_dtype="fp16", qk_granularity=gran, smooth_k=sm), ref
                )["rel_l1"]
                for sm in (False, True)
            ]
            row[f"ratio {gran}"] = err[0] / err[1]
        rows.append(row)
    return rows


def triton_check(cfg: SageAttentionReproConfig, seed: int) -> list[dict[str, Any]]:
    """Triton kernels (interpreted on CPU) vs the PyTorch reference of the same scheme, ragged N."""
    rows = []
    q, k, v = make_qkv("gauss", cfg, seed, heads=cfg.triton_heads, seq=cfg.triton_seq)
    for causal in (False, True):
        ref64 = attention_fp64(q, k, v, is_causal=causal)
        for fmt in ("int8-fp16", "int8-fp8", "nvfp4"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FP4EmulationWarning)
                tri = sage_attention(q, k, v, is_causal=causal, backend="triton", **FORMATS[fmt])
                ref = sage_attention(q, k, v, is_causal=causal, backend="reference", **FORMATS[fmt])
            e = attention_error(tri, ref)
            rows.append(
                {
                    "format": fmt,
                    "causal": causal,
                    "cos_vs_ref": e["cos"],
                    "rel_l1_vs_ref": e["rel_l1"],
                    "cos_vs_fp64": attention_error(tri, ref64)["cos"],
                }
            )
    return rows


def _pick(rows: list[dict[str, Any]], key: str, seeds: list[int], **match: Any) -> list[float]:
    """``key`` of the row matching ``match`` at each seed, in the order of ``seeds``."""
    out = []
    for s in seeds:
        hit = [r for r in rows if r["seed"] == s and all(r[k] == v for k, v in match.items())]
        out.append(hit[0][key])
    return out


_BWD_METRICS = (
    ("min cos of O, dQ, dV vs fp64 autograd", 0.999, ">="),
    ("dK cos", 0.99, ">="),
    ("max rel-L1 of O, dQ, dK, dV", 0.1, "<="),
)


def _bwd_values(errs: list[dict[str, dict[str, float]]]) -> list[list[float]]:
    """Per-seed values of the three SageBwd metrics of ``_BWD_METRICS``."""
    return [
        [min(e[n]["cos"] for n in ("O", "dQ", "dV")) for e in errs],
        [e["dK"]["cos"] for e in errs],
        [max(x["rel_l1"] for x in e.values()) for e in errs],
    ]


def _bwd_rows(label: str, seeds: list[int], errs: list[dict[str, dict[str, float]]]) -> list[dict]:
    return [
        {
            "variant": label,
            "seed": s,
            **{f"{n} {m}": v[m] for n, v in e.items() for m in ("cos", "rel_l1")},
        }
        for s, e in zip(seeds, errs, strict=True)
    ]


PAPER_TITLE = (
    "SageAttention3: Microscaling FP4 Attention for Inference and An Exploration of 8-Bit Training"
)
HEADLINE = (
    "FP4 attention (NVFP4 microscaling, two-level P scaling) runs at 1038 TOPS on RTX5090, 5x over "
    "FlashAttention2, plug-and-play on video/image/text models; 8-bit attention training (SageBwd) is "
    "lossless in fine-tuning. Speed is not measured here (CPU); the accuracy mechanisms are"
)
# (granularity, metric) -> reason; the others reproduced in the first full run (seeds 0-4)
_SAGEBWD_XFAIL = {
    ("per_block", "min"): "per-block INT8 Q under heavy-tailed Q perturbs the recomputed P; dQ cos "
    "≈ 0.994 (Gaussian Q with the same outlier K, V meets every threshold)",
    ("per_block", "max"): "per-block INT8 Q under heavy-tailed Q: dQ/dK rel-L1 median 0.111 "
    "[0.096, 0.122] over seeds 0-4 (Gaussian Q: 0.02)",
    ("per_thread", "min"): "INT8 Q of heavy-tailed Q perturbs the recomputed P at per-thread "
    "granularity too: min cos median 0.9961 [0.9961, 0.9965] over seeds 0-4",
}


def run(mode: Mode = "quick", seed: int = 0, cfg: SageAttentionReproConfig | None = None) -> Result:
    """Run the reproduction.

    Kernel-accuracy checks at ``seed`` (quick) or seeds seed..seed+2 (full); the INT8 K-smoothing
    check at seeds seed..seed+2 in both modes; SageBwd on ``outlier`` K, V with Gaussian Q (the
    recipe the threshold applies to, ``specs/claims.md``) over 2 (quick) or 5 (full) seeds; paper
    claims (NVFP4 vs MXFP4, two-level P, SageBwd with the spec's Student-t(3) Q) over 2 / 5 seeds.
    """
    with threads(1):  # one torch thread: faster here, and the numbers do not depend on the machine
        return _run(mode, seed, cfg)


def _run(mode: Mode, seed: int, cfg: SageAttentionReproConfig | None) -> Result:
    check_choice("mode", mode, ("quick", "full"))
    # quick mode interprets the Triton kernels on one head (half the time)
    cfg = cfg or (
        SageAttentionReproConfig() if mode == "full" else SageAttentionReproConfig(triton_heads=1)
    )
    seeds = [seed] if mode == "quick" else [seed, seed + 1, seed + 2]
    pseeds = claim_seeds(mode, seed, quick=2, full=5)
    ks_seeds = [seed, seed + 1, seed + 2]
    claims: list[Claim] = []
    acc = accuracy_table(cfg, seeds)
    extra = [s for s in pseeds if s not in seeds]
    acc_fp4 = acc + accuracy_table(cfg, extra, ("gauss", "outlier"), ("nvfp4", "mxfp4"))

    for fmt, cos_min, l1_max, label in (
        ("int8-fp16", 0.999, 0.04, "Sage2 INT8 QK (per-thread) + FP16 PV"),
        ("int8-fp8", 0.998, 0.06, "INT8 QK (per-thread) + FP8 PV"),
    ):
        for dist in DISTS:
            claims.append(
                Claim(
                    f"{label} vs fp64, {dist}: cos",
                    math.nan,
                    cos_min,
                    ">=",
                    values=_pick(acc, "cos", seeds, dist=dist, format=fmt),
                    seeds=seeds,
                )
            )
            claims.append(
                Claim(
                    f"{label} vs fp64, {dist}: rel-L1",
                    math.nan,
                    l1_max,
                    "<=",
                    values=_pick(acc, "rel_l1", seeds, dist=dist, format=fmt),
                    seeds=seeds,
                )
            )

    ks = k_smoothing_rows(cfg, ks_seeds)
    claims.append(
        Claim(
            "K smoothing, outlier, INT8 path (per-thread Q/K): rel-L1(no smooth)/rel-L1(smooth), every seed",
            math.nan,
            2.0,
            ">=",
            "x",
            values=[r["ratio per_thread"] for r in ks],
            seeds=ks_seeds,
        )
    )

    def ratios(
        num: str, den: str, dist: str, rows: list[dict[str, Any]], ss: list[int]
    ) -> list[float]:
        a = _pick(rows, "rel_l1", ss, dist=dist, format=num)
        b = _pick(rows, "rel_l1", ss, dist=dist, format=den)
        return [x / y for x, y in zip(a, b, strict=True)]

    claims.append(
        Claim(
            "K smoothing, outlier, NVFP4 path: rel-L1(no smoothing)/rel-L1(smoothing)",
            math.nan,
            2.0,
            ">=",
            "x",
            values=ratios("nvfp4-nosmooth", "nvfp4", "outlier", acc, seeds),
            seeds=seeds,
        )
    )
    for dist, cos_min, l1_max in (("gauss", 0.97, 0.25), ("outlier", 0.995, 0.08)):
        claims.append(
            Claim(
                f"Sage3 NVFP4 vs fp64, {dist}: cos",
                math.nan,
                cos_min,
                ">=",
                values=_pick(acc, "cos", seeds, dist=dist, format="nvfp4"),
                seeds=seeds,
            )
        )
        claims.append(
            Claim(
                f"Sage3 NVFP4 vs fp64, {dist}: rel-L1",
                math.nan,
                l1_max,
                "<=",
                values=_pick(acc, "rel_l1", seeds, dist=dist, format="nvfp4"),
                seeds=seeds,
            )
        )
    for dist in ("gauss", "outlier"):
        claims.append(
            paper_claim(
                f"NVFP4 rel-L1 / MXFP4 rel-L1 vs fp64, {dist}",
                ratios("nvfp4", "mxfp4", dist, acc_fp4, pseeds),
                0.85,
                "<=",
                seeds=pseeds,
                unit="x",
                paper="Table 1: NVFP4 (1x16, E4M3 scale) more accurate than MXFP4 (1x32, E8M0) on "
                "CogVideoX attention layers (the spec's recalled numbers were not re-verified)",
                headline=True,
            )
        )

    top = max(cfg.twolevel_stds)
    tseeds = claim_seeds(mode, seed, quick=1, full=5)  # ~1.5 s per seed and level
    tl = two_level_rows(cfg, tseeds, None if mode == "full" else (top,))
    claims.append(
        paper_claim(
            f"two-level P in isolation, score std {top:g}, N={cfg.twolevel_seq}: one-level/two-level rel-L1",
            _pick(tl, "ratio", tseeds, score_std=top),
            1.5,
            ">=",
            seeds=tseeds,
            unit="x",
            paper="two-level scaling of P (P̃ in [0, 2688]) reduces FP4 attention error vs direct "
            "per-block P quantization (ablation on CogVideoX layers)",
            headline=True,
        )
    )

    notes: list[str] = []
    tri: list[dict[str, Any]] = []
    if triton_available():
        tri = triton_check(cfg, seeds[0])
        claims.append(
            Claim(
                f"Triton kernels (interpreted) vs PyTorch reference, N={cfg.triton_seq}, causal and not: min cos",
                min(r["cos_vs_ref"] for r in tri),
                0.9999,
                ">=",
            )
        )
        claims.append(
            Claim(
                "Triton kernels vs PyTorch reference: max rel-L1",
                max(r["rel_l1_vs_ref"] for r in tri),
                0.01,
                "<=",
            )
        )
        claims.append(
            Claim(
                "Triton INT8+FP16 kernel vs fp64 SDPA: min cos",
                min(r["cos_vs_fp64"] for r in tri if r["format"] == "int8-fp16"),
                0.999,
                ">=",
            )
        )
    else:
        notes.append("triton is not installed: the Triton-vs-reference claims were not measured")

    # SageBwd: the threshold (spec item 7) on gauss and on outlier K, V with Gaussian Q
    bwd_rows: list[dict[str, Any]] = []
    gcfg = replace(cfg, outlier_heavy_q=False)
    bseeds = claim_seeds(mode, seed, quick=2, full=5)
    for dist, dcfg, ss, label in (
        ("gauss", cfg, seeds, "gauss"),
        ("outlier", gcfg, bseeds, "outlier K, V with Gaussian Q"),
    ):
        errs = [sagebwd_errors(dcfg, dist, s) for s in ss]
        bwd_rows += _bwd_rows(label, ss, errs)
        for (what, thr, op), vals in zip(_BWD_METRICS, _bwd_values(errs), strict=True):
            claims.append(
                Claim(f"SageBwd, {label}: {what}", math.nan, thr, op, values=vals, seeds=ss)
            )
    ns = [sagebwd_errors(gcfg, "outlier", s, smooth_k=False) for s in bseeds]
    bwd_rows += _bwd_rows("outlier K, V with Gaussian Q, no K smoothing", bseeds, ns)
    claims.append(
        Claim(
            "SageBwd without K smoothing, outlier K, V with Gaussian Q: dQ cos stays below",
            math.nan,
            0.97,
            "<",
            values=[e["dQ"]["cos"] for e in ns],
            seeds=bseeds,
        )
    )
    # SageBwd with the spec's Student-t(3) Q: the same metrics, paper claims (xfail)
    for gran, glabel in (
        ("per_block", "Q, K per 64-token block"),
        ("per_thread", "per-thread Q/K"),
    ):
        errs = [sagebwd_errors(cfg, "outlier", s, qk_granularity=gran) for s in pseeds]
        bwd_rows += _bwd_rows(f"outlier (Student-t(3) Q), {gran}", pseeds, errs)
        for (what, thr, op), vals in zip(_BWD_METRICS, _bwd_values(errs), strict=True):
            # specs/claims.md: min cos xfail; dK cos and rel-L1: the first full run (seeds 0-4)
            key = (gran, what.split()[0])
            reason = _SAGEBWD_XFAIL.get(key, "")
            claims.append(
                paper_claim(
                    f"SageBwd, outlier with Student-t(3) Q, {glabel}: {what}",
                    vals,
                    thr,
                    op,
                    seeds=pseeds,
                    expected="xfail" if reason else "reproduces",
                    reason=reason,
                    paper="SageBwd fine-tuning matches FA2 bf16 fwd+bwd (lossless on GSM8K, DROP, MMLU, "
                    "HellaSwag; Qwen2.5/Llama); no per-layer gradient accuracy published",
                )
            )

    causal = accuracy_table(cfg, seeds, formats=("int8-fp16",), is_causal=True)
    gqa = accuracy_table(cfg, seeds, formats=("int8-fp16",), gqa=True)
    claims.append(
        Claim(
            "is_causal=True, INT8+FP16 vs fp64: worst cos over dists",
            min(r["cos"] for r in causal),
            0.999,
            ">=",
        )
    )
    claims.append(
        Claim(
            "is_causal=True, INT8+FP16 vs fp64: worst rel-L1 over dists",
            max(r["rel_l1"] for r in causal),
            0.04,
            "<=",
        )
    )
    claims.append(
        Claim(
            f"GQA (Hq = {cfg.gqa_ratio}·Hkv), INT8+FP16 vs fp64: worst cos over dists",
            min(r["cos"] for r in gqa),
            0.999,
            ">=",
        )
    )
    claims.append(
        Claim(
            f"GQA (Hq = {cfg.gqa_ratio}·Hkv), INT8+FP16 vs fp64: worst rel-L1 over dists",
            max(r["rel_l1"] for r in gqa),
            0.04,
            "<=",
        )
    )

    table = []
    for dist in DISTS:
        for fmt in FORMATS:
            sel = [r for r in acc if r["dist"] == dist and r["format"] == fmt]
            table.append(
                {
                    "dist": dist,
                    "method": fmt,
                    **{m: sum(r[m] for r in sel) / len(sel) for m in ("cos", "rel_l1", "rmse")},
                }
            )
    kv = {
        fmt: kv_bytes_per_token(fmt, cfg.head_dim)
        for fmt in ("fp16", "int8-fp16", "int8-fp8", "nvfp4", "mxfp4")
    }
    notes.append(
        "K smoothing ratio (INT8, outlier) per seed, per-thread Q/K (the default; claim) vs per 128-token "
        "Q block (the Triton path's granularity; information): "
        + ", ".join(
            f"seed {r['seed']} {r['ratio per_thread']:.2f}x vs {r['ratio per_block']:.2f}x "
            f"(max|Q| {r['max_abs_q']:.0f})"
            for r in ks
        )
        + "; per block, one Student-t(3) draw sets a whole block's Q scale"
    )
    notes.append(
        "SageBwd is a reconstruction (code unreleased): Q, K, V, dO INT8 per 64-token block, P̃ per token "
        "(forward), P and dS with scales that factor out of each backward matmul, dP = dO·Vᵀ in FP16"
    )
    notes.append(
        "NVFP4/MXFP4 are emulated (exact FP4 values in fp16 matmuls): accuracy only, no speed"
    )
    return Result(
        name="kernels.sage_attention",
        mode=mode,
        seed=seed,
        claims=claims,
        metrics={
            "config": asdict(cfg),
            "seeds": seeds,
            "paper_seeds": pseeds,
            "k_smoothing": ks,
            "two_level": tl,
            "sagebwd": bwd_rows,
            "triton": tri,
            "kv_bytes_per_token": kv,
            "causal": causal,
            "gqa": gqa,
        },
        table=table,
        notes=notes,
        paper_title=PAPER_TITLE,
        headline=HEADLINE,
    )
