"""Reproduction ``kernels.sage_attention``: SageAttention2/3 and SageBwd accuracy vs float64 attention.

Synthetic attention layers (spec recipe): ``gauss`` (N(0,1)), ``peaky`` (q, k × 2.5, score std ≈ 6)
and ``outlier`` (K plus a channel bias 6·N(0,1) shared by all tokens and +40 on 4 channels,
Q ~ 1.5·Student-t(3), V plus a 3·N(0,1) bias); fp16 inputs; reference = softmax attention in
float64. Claims are the spec's "(a)" thresholds, taken at the worst seed (quick: one seed, full:
three). GPU speed is not measured here (``tools/bench/kernels_gpu.py``).
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
from eff_kernels.reproduce import not_reproduced
from eff_shared.errors import check_choice
from eff_shared.reproduce import Claim, Result

__all__ = [
    "FORMATS",
    "SageConfig",
    "accuracy_table",
    "make_qkv",
    "outlier_diagnostics",
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
class SageConfig:
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


def make_qkv(
    dist: str,
    cfg: SageConfig,
    seed: int,
    *,
    heads: int | None = None,
    seq: int | None = None,
    kv_heads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp16 (B, H, N, D) inputs of one distribution (K, V may have fewer heads for GQA)."""
    check_choice("dist", dist, DISTS)
    g = torch.Generator().manual_seed(seed)
    h = heads or cfg.heads
    hk = kv_heads or h
    n, d, b = seq or cfg.seq, cfg.head_dim, cfg.batch
    q = torch.randn(b, h, n, d, generator=g)
    k = torch.randn(b, hk, n, d, generator=g)
    v = torch.randn(b, hk, n, d, generator=g)
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
    cfg: SageConfig, seeds: list[int], dists: tuple[str, ...] = DISTS, formats: tuple[str, ...] = tuple(FORMATS),
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


def two_level_rows(cfg: SageConfig, seeds: list[int]) -> list[dict[str, Any]]:
    """Only P quantized to NVFP4 (Q, K, V exact), two-level (P̃ ∈ [0, 2688]) vs one-level (P ∈ [0, 1])."""
    rows = []
    for std in cfg.twolevel_stds:
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
    cfg: SageConfig, dist: str, seed: int, smooth_k: bool = True, backend: str = "reference"
) -> dict[str, dict[str, float]]:
    """SageBwd forward and gradients vs float64 autograd (random dO)."""
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
            a, b, c, backward="sagebwd", smooth_k=smooth_k, backend=backend
        ),
        torch.float16,
    )
    return {name: attention_error(out[name], ref[name]) for name in ref}


def outlier_diagnostics(cfg: SageConfig, seeds: list[int]) -> dict[str, Any]:
    """Information only (no claims): why the ``outlier`` K-smoothing ratio and SageBwd vary.

    Per seed, the INT8 K-smoothing ratio at per-block and per-thread Q granularity with max|Q|;
    SageBwd on ``outlier`` with Gaussian Q (K and V draws unchanged), with and without K smoothing.
    """
    ks = []
    for s in seeds:
        q, k, v = make_qkv("outlier", cfg, s)
        ref = attention_fp64(q, k, v)
        row: dict[str, Any] = {"seed": s, "max_abs_q": float(q.abs().max())}
        for gran in ("per_block", "per_thread"):
            err = [
                attention_error(
                    sage_attention(q, k, v, pv_dtype="fp16", qk_granularity=gran, smooth_k=sm), ref
                )["rel_l1"]
                for sm in (False, True)
            ]
            row[f"ratio {gran}"] = err[0] / err[1]
        ks.append(row)
    gcfg = replace(cfg, outlier_heavy_q=False)
    smooth = [sagebwd_errors(gcfg, "outlier", s) for s in seeds]
    plain = [sagebwd_errors(gcfg, "outlier", s, smooth_k=False) for s in seeds]
    gq = {
        "min_cos": min(min(e[n]["cos"] for n in ("O", "dQ", "dV")) for e in smooth),
        "max_rel_l1": max(max(x["rel_l1"] for x in e.values()) for e in smooth),
        "dq_cos_nosmooth": max(e["dQ"]["cos"] for e in plain),
    }
    return {"k_smoothing": ks, "sagebwd_gaussian_q": gq}


def triton_check(cfg: SageConfig, seed: int) -> list[dict[str, Any]]:
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


def _worst(rows: list[dict[str, Any]], key: str, worst: str, **match: Any) -> float:
    vals = [r[key] for r in rows if all(r[k] == v for k, v in match.items())]
    return min(vals) if worst == "min" else max(vals)


def run(mode: str = "quick", seed: int = 0, cfg: SageConfig | None = None) -> Result:
    """Run the reproduction; ``full`` uses seeds seed..seed+2, ``quick`` only ``seed``."""
    check_choice("mode", mode, ("quick", "full"))
    torch.set_num_threads(1)
    cfg = cfg or SageConfig()
    seeds = [seed] if mode == "quick" else [seed, seed + 1, seed + 2]
    claims: list[Claim] = []
    acc = accuracy_table(cfg, seeds)

    for fmt, cos_min, l1_max, label in (
        ("int8-fp16", 0.999, 0.04, "Sage2 INT8 QK + FP16 PV"),
        ("int8-fp8", 0.998, 0.06, "INT8 QK + FP8 PV"),
    ):
        for dist in DISTS:
            claims.append(
                Claim(
                    f"{label} vs fp64, {dist}: cos (worst seed)",
                    _worst(acc, "cos", "min", dist=dist, format=fmt),
                    cos_min,
                    ">=",
                )
            )
            claims.append(
                Claim(
                    f"{label} vs fp64, {dist}: rel-L1 (worst seed)",
                    _worst(acc, "rel_l1", "max", dist=dist, format=fmt),
                    l1_max,
                    "<=",
                )
            )

    def ratio(num: str, den: str, dist: str) -> float:
        return min(
            next(
                r["rel_l1"]
                for r in acc
                if r["dist"] == dist and r["format"] == num and r["seed"] == s
            )
            / next(
                r["rel_l1"]
                for r in acc
                if r["dist"] == dist and r["format"] == den and r["seed"] == s
            )
            for s in seeds
        )

    claims.append(
        Claim(
            "K smoothing, outlier, INT8 path: rel-L1(no smooth)/rel-L1(smooth)",
            ratio("int8-fp16-nosmooth", "int8-fp16", "outlier"),
            2.0,
            ">=",
            "x",
        )
    )
    claims.append(
        Claim(
            "K smoothing, outlier, NVFP4 path: rel-L1(no smoothing)/rel-L1(smoothing)",
            ratio("nvfp4-nosmooth", "nvfp4", "outlier"),
            2.0,
            ">=",
            "x",
        )
    )
    claims.append(
        Claim(
            "Sage3 NVFP4 vs fp64, gauss: cos",
            _worst(acc, "cos", "min", dist="gauss", format="nvfp4"),
            0.97,
            ">=",
        )
    )
    claims.append(
        Claim(
            "Sage3 NVFP4 vs fp64, gauss: rel-L1",
            _worst(acc, "rel_l1", "max", dist="gauss", format="nvfp4"),
            0.25,
            "<=",
        )
    )
    claims.append(
        Claim(
            "Sage3 NVFP4 vs fp64, outlier: cos",
            _worst(acc, "cos", "min", dist="outlier", format="nvfp4"),
            0.995,
            ">=",
        )
    )
    claims.append(
        Claim(
            "Sage3 NVFP4 vs fp64, outlier: rel-L1",
            _worst(acc, "rel_l1", "max", dist="outlier", format="nvfp4"),
            0.08,
            "<=",
        )
    )
    for dist in ("gauss", "outlier"):
        claims.append(
            Claim(
                f"NVFP4 rel-L1 / MXFP4 rel-L1, {dist} (worst seed)",
                1.0 / ratio("mxfp4", "nvfp4", dist),
                0.85,
                "<=",
                "x",
            )
        )

    tl = two_level_rows(cfg, seeds)
    top = max(cfg.twolevel_stds)
    claims.append(
        Claim(
            f"two-level P in isolation, score std {top:g}, N={cfg.twolevel_seq}: one-level/two-level rel-L1",
            min(r["ratio"] for r in tl if r["score_std"] == top),
            1.5,
            ">=",
            "x",
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

    bwd_rows = []
    for dist in ("gauss", "outlier"):
        errs = [sagebwd_errors(cfg, dist, s) for s in seeds]
        for s, e in zip(seeds, errs, strict=True):
            bwd_rows.append(
                {
                    "dist": dist,
                    "smooth_k": True,
                    "seed": s,
                    **{f"{n} {m}": v[m] for n, v in e.items() for m in ("cos", "rel_l1")},
                }
            )
        claims.append(
            Claim(
                f"SageBwd, {dist}: min cos of O, dQ, dV vs fp64 autograd",
                min(min(e[n]["cos"] for n in ("O", "dQ", "dV")) for e in errs),
                0.999,
                ">=",
            )
        )
        claims.append(
            Claim(f"SageBwd, {dist}: dK cos", min(e["dK"]["cos"] for e in errs), 0.99, ">=")
        )
        claims.append(
            Claim(
                f"SageBwd, {dist}: max rel-L1 of O, dQ, dK, dV",
                max(max(x["rel_l1"] for x in e.values()) for e in errs),
                0.1,
                "<=",
            )
        )
    ns = [sagebwd_errors(cfg, "outlier", s, smooth_k=False) for s in seeds]
    for s, e in zip(seeds, ns, strict=True):
        bwd_rows.append(
            {
                "dist": "outlier",
                "smooth_k": False,
                "seed": s,
                **{f"{n} {m}": v[m] for n, v in e.items() for m in ("cos", "rel_l1")},
            }
        )
    claims.append(
        Claim(
            "SageBwd without K smoothing, outlier: dQ cos (best seed) stays below",
            max(e["dQ"]["cos"] for e in ns),
            0.97,
            "<",
        )
    )

    diagnostics = outlier_diagnostics(cfg, seeds) if mode == "full" else {}

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
    notes += not_reproduced(claims)
    if diagnostics:
        ks, gq = diagnostics["k_smoothing"], diagnostics["sagebwd_gaussian_q"]
        notes.append(
            "K smoothing ratio per seed (INT8, Q per 128-token block as the spec's Triton path): "
            + ", ".join(f"seed {r['seed']} {r['ratio per_block']:.2f}x (max|Q| {r['max_abs_q']:.0f})" for r in ks)
            + "; one Student-t(3) draw sets a whole block's Q scale. Per-thread Q granularity (SageAttention2's "
            + "CUDA default, no claim): "
            + ", ".join(f"{r['ratio per_thread']:.2f}x" for r in ks)
        )  # fmt: skip
        notes.append(
            "SageBwd on outlier K and V with Gaussian Q (not the spec's recipe, no claim; the prototype's SageBwd "
            f"table matches it): min cos of O, dQ, dV {gq['min_cos']:.4f}, max rel-L1 {gq['max_rel_l1']:.3f}; "
            f"without K smoothing dQ cos {gq['dq_cos_nosmooth']:.3f}. With the spec's Student-t(3) Q, P recomputed "
            "from per-block INT8 Q is what puts dQ/dK rel-L1 near 0.1 at every seed"
        )  # fmt: skip
    notes.append(
        "SageBwd is a reconstruction (code unreleased): Q, K, V, dO INT8 per 64-token block, P̃ per token "
        "(forward), P and dS with scales that factor out of each backward matmul, dP = dO·Vᵀ in FP16"
    )
    notes.append(
        "NVFP4/MXFP4 are emulated (exact FP4 values in fp16 matmuls): accuracy only, no speed"
    )
    return Result(
        name="kernels.sage_attention",
        mode=mode,  # type: ignore[arg-type]
        seed=seed,
        claims=claims,
        metrics={
            "config": asdict(cfg),
            "seeds": seeds,
            "two_level": tl,
            "sagebwd": bwd_rows,
            "triton": tri,
            "kv_bytes_per_token": kv,
            "causal": causal,
            "gqa": gqa,
            "diagnostics": diagnostics,
        },
        table=table,
        notes=notes,
    )
