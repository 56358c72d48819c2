"""Reproduction ``llm.watermark``: HeavyWater and SimplexWater vs KGW and Gumbel on a synthetic
low-entropy LM.

The LM (spec): logits = scale·N(0, 1) over V = 1000 tokens, drawn fresh at each step (entropy
≈ 0.78 nats at scale 9); T tokens per sequence; side information i.i.d. uniform per step (known to
the detector); top-p 0.99; Sinkhorn reg 0.05 (SimplexWater) and 0.01 in float64 (HeavyWater).
Watermarked and unwatermarked sequences share the logits (paired). ΔNLL is measured exactly per
step as E_{x∼P_wm(·|s)}[−log p(x)] − H(p) (the expected NLL of the watermarked sampling
distribution minus that of plain sampling), averaged over steps, so it carries no sampling noise
from the token draw. The reference of the OT methods is plain sampling from the same top-p (0.99)
truncation, so ΔNLL isolates the coupling (the truncation alone, reported as "ΔNLL vs
untruncated", lowers the NLL by ≈ 0.05 nats on this LM). The null FPR uses 2000 plain sequences
of T = 50 scored with the real detectors (lefthash seeding, repeated n-grams ignored).

Claims (``claims.md``). Checks, at every seed: distortion-free at δ = 0 (|ΔNLL| ≤ 0.06), KGW's
distortion, the tilt trade-off, the Sinkhorn marginals, and the null FPR at α = 0.01 of the
detectors' calibrated default p-values (HeavyWater Monte-Carlo, SimplexWater exact; master seed;
the normal approximation's FPR is printed as information). Paper claims, median over seeds (full
mode 5 seeds of 100 sequences): TPR and AUC of both watermarks and their TPR gains over KGW (the
headline). Quick mode (16 sequences, one seed) cannot resolve them: they are judged in full mode
only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from eff_llm.watermark import (
    HeavyWaterConfig,
    HeavyWaterDetector,
    SimplexWaterConfig,
    SimplexWaterDetector,
    gumbel_choice,
    heavywater_conditional,
    heavywater_scores,
    kgw_greenlists,
    parity,
    simplex_bits,
    simplexwater_conditional,
    top_p_support,
)
from eff_shared.errors import check_choice, check_fraction, check_positive, check_type
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim

__all__ = [
    "METHODS",
    "WatermarkReproConfig",
    "null_fpr",
    "run",
    "simulate",
    "synthetic_logits",
]

Z_1PCT = 2.326
#: The watermarks :func:`simulate` runs ("heavywater_tilt": HeavyWater with ``heavy_tilt``).
METHODS = ("kgw", "gumbel", "simplexwater", "heavywater", "heavywater_tilt")


@dataclass(frozen=True)
class WatermarkReproConfig:
    vocab: int = 1000
    entropy_scale: float = 9.0
    tokens: int = 30
    seqs: int = 100
    top_p: float = 0.99
    simplex_reg: float = 0.05
    heavy_reg: float = 0.01
    heavy_tilt: float = 0.5
    kgw_gamma: float = 0.25
    kgw_delta: float = 2.0
    null_seqs: int = 2000
    null_tokens: int = 50
    n_monte_carlo: int = 2000
    #: Paper claims over this many seeds (``seed, seed + 1, ...``); checks hold at every one.
    n_seeds: int = 5
    methods: tuple[str, ...] = field(default=METHODS)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "methods":
                if isinstance(value, str) or not value:
                    raise ValueError(f"methods must be a non-empty tuple of {list(METHODS)}")
                for m in value:
                    check_choice("methods", m, list(METHODS))
            elif f.name == "kgw_gamma":
                check_fraction(f.name, value, closed=False)
            elif f.name == "top_p":
                check_positive(f.name, value)
                check_fraction(f.name, value)
            elif f.name == "heavy_tilt":
                check_positive(f.name, value, strict=False)
            else:
                check_positive(f.name, value, integer=isinstance(value, int))


WatermarkRunConfig = WatermarkReproConfig  # old name, kept for compatibility


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Mann–Whitney AUC = P(z_wm > z_null) + ½ P(tie)."""
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def synthetic_logits(cfg: WatermarkReproConfig, seed: int) -> torch.Tensor:
    """The synthetic low-entropy LM (module docstring): ``(cfg.seqs, cfg.tokens, cfg.vocab)``
    float64 logits ``cfg.entropy_scale``·N(0, 1), drawn from ``seed``."""
    check_type("cfg", cfg, WatermarkReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    g = torch.Generator().manual_seed(seed)
    return cfg.entropy_scale * torch.randn(
        cfg.seqs, cfg.tokens, cfg.vocab, generator=g, dtype=torch.float64
    )


def simulate(method: str, logits: torch.Tensor, cfg: WatermarkReproConfig, seed: int) -> dict:
    """Generate N watermarked sequences step by step from next-token ``logits`` (N, T, V) (e.g.
    :func:`synthetic_logits`, or a real LM's logits along its own sequences) with ``method`` (of
    :data:`METHODS`); return the TPR at z > 2.326 and the AUC against plain (null) sampling of the
    same logits under the same side information, the mean z, ΔNLL (exact per step) and Sinkhorn
    diagnostics. Side information and sampling are seeded from ``seed``."""
    check_choice("method", method, list(METHODS))
    check_type("logits", logits, torch.Tensor)
    check_type("cfg", cfg, WatermarkReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    if logits.ndim != 3 or not logits.is_floating_point() or logits.shape[-1] < 2:
        raise ValueError(
            f"logits must be a float (N, T, V) tensor with V >= 2, got {tuple(logits.shape)} "
            f"{logits.dtype}"
        )
    if not bool(torch.isfinite(logits).all()):
        raise ValueError("logits must be finite")
    n, t_len, vocab = logits.shape
    gen = torch.Generator().manual_seed(seed + 1)
    side_gen = torch.Generator().manual_seed(seed + 2)
    logp_all = torch.log_softmax(logits, -1)
    tokens = torch.empty(n, t_len, dtype=torch.int64)
    plain = torch.empty(n, t_len, dtype=torch.int64)
    sides = torch.empty(n, t_len, dtype=torch.int64)
    dnll, dnll_full, iters, err = [], [], [], 0.0
    n_bits = simplex_bits(vocab)
    table = None
    if method.startswith("heavywater"):
        hcfg = HeavyWaterConfig(
            top_p=cfg.top_p,
            sinkhorn_reg=cfg.heavy_reg,
            tilt=cfg.heavy_tilt if method == "heavywater_tilt" else 0.0,
        )
        table = heavywater_scores(vocab, hcfg.k, hcfg.dist, hcfg.hashing_key)
    scfg = SimplexWaterConfig(top_p=cfg.top_p, sinkhorn_reg=cfg.simplex_reg)
    t0 = time.perf_counter()
    for t in range(t_len):
        logp = logp_all[:, t]
        p = logp.exp()
        entropy = -(p * logp).sum(-1)
        plain[:, t] = torch.multinomial(p, 1, generator=gen).squeeze(-1)
        if method == "kgw":
            s = torch.randint(0, 2**62, (n,), generator=side_gen)
            green = kgw_greenlists(s.numpy().astype(np.uint64), vocab, cfg.kgw_gamma)
            q = torch.softmax(logits[:, t] + cfg.kgw_delta * green, -1)
            tokens[:, t] = torch.multinomial(q, 1, generator=gen).squeeze(-1)
            dnll.append(float((-(q * logp).sum(-1) - entropy).mean()))
        elif method == "gumbel":
            s = torch.randint(0, 2**62, (n,), generator=side_gen)
            r = torch.rand(n, vocab, generator=side_gen, dtype=torch.float64).clamp(
                1e-12, 1 - 1e-12
            )
            x = gumbel_choice(logp, r)
            tokens[:, t] = x
            dnll.append(float((-logp[torch.arange(n), x] - entropy).mean()))
            sides[:, t] = s  # unused for scoring; r is kept below
            if t == 0:
                r_all = torch.empty(n, t_len, vocab, dtype=torch.float64)
            r_all[:, t] = r
            continue
        else:
            if method == "simplexwater":
                s = torch.randint(1, 2**n_bits, (n,), generator=side_gen)
                lq, info = simplexwater_conditional(p, s, scfg)
            else:
                s = torch.randint(0, hcfg.k, (n,), generator=side_gen)
                lq, info = heavywater_conditional(p, s, table, hcfg)
            iters += info["iterations"]
            err = max(err, info["row_l1_error"])
            q = lq.exp()
            tokens[:, t] = torch.multinomial(q, 1, generator=gen).squeeze(-1)
            nll_wm = -(q * torch.where(q > 0, logp, 0.0)).sum(-1)
            # Reference: plain sampling from the same top-p truncation (isolates the coupling).
            ids, keep = top_p_support(p, cfg.top_p)
            a = torch.zeros_like(p).scatter(1, ids, torch.where(keep, p.gather(1, ids), 0.0))
            a = a / a.sum(-1, keepdim=True)
            nll_topp = -(a * torch.where(a > 0, logp, 0.0)).sum(-1)
            dnll.append(float((nll_wm - nll_topp).mean()))
            dnll_full.append(float((nll_wm - entropy).mean()))
        sides[:, t] = s
    elapsed = time.perf_counter() - t0

    def z_of(tok: torch.Tensor) -> np.ndarray:
        if method == "kgw":
            zs = []
            for i in range(n):
                green = kgw_greenlists(sides[i].numpy().astype(np.uint64), vocab, cfg.kgw_gamma)
                g = float(green[torch.arange(t_len), tok[i]].sum())
                zs.append((g - cfg.kgw_gamma * t_len) / math.sqrt(t_len * cfg.kgw_gamma * 0.75))
            return np.array(zs)
        if method == "gumbel":
            r_x = r_all.gather(2, tok.unsqueeze(-1)).squeeze(-1)
            score = (-torch.log1p(-r_x)).sum(-1).numpy()  # Gamma(T, 1) under H0
            return (score - t_len) / math.sqrt(t_len)
        if method == "simplexwater":
            f = parity(tok & sides).sum(-1).double().numpy()
            return (f - t_len / 2) / math.sqrt(t_len / 4)
        return (table[tok, sides].sum(-1) / math.sqrt(t_len)).numpy()

    z_wm, z_null = z_of(tokens), z_of(plain)
    return {
        "tpr": float((z_wm > Z_1PCT).mean()),
        "fpr_paired": float((z_null > Z_1PCT).mean()),
        "auc": _auc(z_wm, z_null),
        "mean_z": float(z_wm.mean()),
        "dnll": float(np.mean(dnll)),
        "dnll_vs_untruncated": float(np.mean(dnll_full)) if dnll_full else float(np.mean(dnll)),
        "ms_per_token": 1000 * elapsed / (n * t_len),
        "sinkhorn_iterations": float(np.mean(iters)) if iters else 0.0,
        "row_l1_error": err,
    }


def null_fpr(cfg: WatermarkReproConfig, seed: int) -> dict:
    """FPR at z > 2.326 of the lefthash detectors on ≥ 1000 unwatermarked sequences (plus the
    calibrated p-values: SimplexWater exact, HeavyWater Monte-Carlo, both at α = 0.01)."""
    check_type("cfg", cfg, WatermarkReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    g = torch.Generator().manual_seed(seed + 10)
    n, t_len = cfg.null_seqs, cfg.null_tokens + 1  # +1: the prompt token that seeds step 1
    logits = cfg.entropy_scale * torch.randn(n, t_len, cfg.vocab, generator=g, dtype=torch.float64)
    ids = torch.multinomial(torch.softmax(logits, -1).view(-1, cfg.vocab), 1, generator=g)
    ids = ids.view(n, t_len)
    out = {}
    sw = SimplexWaterDetector(cfg.vocab, SimplexWaterConfig(top_p=cfg.top_p), pvalue="exact")
    res = sw(ids)
    out["simplexwater_normal"] = float((res.z_score > Z_1PCT).mean())
    out["simplexwater_exact"] = float((res.p_value <= 0.01).mean())
    hcfg = HeavyWaterConfig(top_p=cfg.top_p, sinkhorn_reg=cfg.heavy_reg)
    hw = HeavyWaterDetector(
        cfg.vocab, hcfg, pvalue="monte_carlo", n_monte_carlo=cfg.n_monte_carlo, seed=seed
    )
    res = hw(ids)
    out["heavywater_normal"] = float((res.z_score > Z_1PCT).mean())
    out["heavywater_monte_carlo"] = float((res.p_value <= 0.01).mean())
    out["mean_tokens_scored"] = float(res.num_tokens_scored.mean())
    return out


PAPER_TITLE = "HeavyWater and SimplexWater: Watermarking Low-Entropy Text Distributions"
PAPER_HEADLINE = (
    "HeavyWater and SimplexWater detect watermarks better than KGW and Gumbel at minimal "
    "distortion, above all in low-entropy generation (coding, MarkMyWords / WaterBench)"
)
_PAPER = "HeavyWater / SimplexWater above KGW in detection at equal or lower distortion, low-entropy tasks"


def _quick_config() -> WatermarkReproConfig:
    # Quick mode: 16 watermarked sequences at one seed (checks only; the paper claims need the
    # full 100 sequences x 5 seeds) and 1000 Monte-Carlo draws per null sequence (p-value
    # resolution 0.001 at alpha = 0.01); still 2000 null sequences.
    return WatermarkReproConfig(seqs=16, n_monte_carlo=1000, n_seeds=1)


def _one_seed(cfg: WatermarkReproConfig, seed: int) -> tuple[dict[str, dict], float]:
    """Every method on the same synthetic LM draw at ``seed``; and the LM's entropy."""
    logits = synthetic_logits(cfg, seed)
    p = torch.softmax(logits, -1)
    entropy = float(-(p * p.clamp_min(1e-300).log()).sum(-1).mean())
    return {m: simulate(m, logits, cfg, seed) for m in cfg.methods}, entropy


def run(mode: Mode = "quick", seed: int = 0, cfg: WatermarkReproConfig | None = None) -> Result:
    cfg = cfg or (WatermarkReproConfig() if mode == "full" else _quick_config())
    seeds = claim_seeds(mode, seed, quick=cfg.n_seeds, full=cfg.n_seeds)
    per_seed = {s: _one_seed(cfg, s) for s in seeds}
    rows, entropy = per_seed[seed]
    null = null_fpr(cfg, seed)

    result = Result(
        name="llm.watermark",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    names = {
        "kgw": f"KGW (γ {cfg.kgw_gamma}, δ {cfg.kgw_delta})",
        "gumbel": "Gumbel (Aaronson)",
        "simplexwater": f"SimplexWater (reg {cfg.simplex_reg})",
        "heavywater": f"HeavyWater (reg {cfg.heavy_reg})",
        "heavywater_tilt": f"HeavyWater tilt δ {cfg.heavy_tilt} (reg {cfg.heavy_reg})",
    }
    result.table = [
        {
            "method": names[m],
            "TPR@1%": r["tpr"],
            "FPR (paired null)": r["fpr_paired"],
            "AUC": r["auc"],
            "mean z": r["mean_z"],
            "ΔNLL": r["dnll"],
            "ΔNLL vs untruncated": r["dnll_vs_untruncated"],
            "ms/token": r["ms_per_token"],
            "Sinkhorn iters": r["sinkhorn_iterations"],
        }
        for m, r in rows.items()
    ]

    def vals(fn) -> dict:
        return {"values": [float(fn(per_seed[s][0])) for s in seeds], "seeds": seeds}

    def paper(text, fn, threshold, headline=False, **kw):
        return paper_claim(
            text,
            threshold=threshold,
            paper=_PAPER,
            headline=headline,
            modes=("full",),
            **vals(fn),
            **kw,
        )

    t = cfg.tokens
    result.claims += [
        Claim(
            "|ΔNLL| SimplexWater at δ = 0 (nats/token)",
            0.0,
            0.06,
            "<=",
            **vals(lambda r: abs(r["simplexwater"]["dnll"])),
        ),
        Claim(
            "|ΔNLL| HeavyWater at δ = 0 (nats/token)",
            0.0,
            0.06,
            "<=",
            **vals(lambda r: abs(r["heavywater"]["dnll"])),
        ),
        Claim("KGW ΔNLL (nats/token)", 0.0, 0.10, ">=", **vals(lambda r: r["kgw"]["dnll"])),
        Claim(
            f"HeavyWater mean z: tilt δ {cfg.heavy_tilt} − δ 0",
            0.0,
            0.0,
            ">",
            **vals(lambda r: r["heavywater_tilt"]["mean_z"] - r["heavywater"]["mean_z"]),
        ),
        Claim(
            f"HeavyWater ΔNLL: tilt δ {cfg.heavy_tilt} − δ 0",
            0.0,
            0.0,
            ">",
            **vals(lambda r: r["heavywater_tilt"]["dnll"] - r["heavywater"]["dnll"]),
        ),
        Claim(
            "Sinkhorn row-marginal L1 error (max over SimplexWater and HeavyWater steps)",
            0.0,
            1e-2,
            "<=",
            **vals(
                lambda r: max(
                    r[m]["row_l1_error"] for m in ("simplexwater", "heavywater", "heavywater_tilt")
                )
            ),
        ),
        Claim(
            f"SimplexWater null FPR at α = 0.01, exact p-value (the default; {cfg.null_seqs} "
            f"unwatermarked sequences, T = {cfg.null_tokens})",
            null["simplexwater_exact"],
            0.02,
            "<=",
        ),
        Claim(
            f"HeavyWater null FPR at α = 0.01, Monte-Carlo p-value (the default, "
            f"{cfg.n_monte_carlo} draws; {cfg.null_seqs} unwatermarked sequences, T = "
            f"{cfg.null_tokens})",
            null["heavywater_monte_carlo"],
            0.02,
            "<=",
        ),
        paper(
            f"SimplexWater TPR − KGW TPR at z > 2.326 (T = {t})",
            lambda r: r["simplexwater"]["tpr"] - r["kgw"]["tpr"],
            0.25,
            headline=True,
            expected="xfail",
            reason=(
                "+0.21 over seeds 0-4 (per seed +0.11 ... +0.33; SimplexWater TPR 0.46-0.60 vs "
                "KGW 0.24-0.35): the margin is within seed noise at 100 sequences"
            ),
        ),
        paper(
            f"HeavyWater TPR − KGW TPR at z > 2.326 (T = {t})",
            lambda r: r["heavywater"]["tpr"] - r["kgw"]["tpr"],
            0.25,
            headline=True,
        ),
        paper(f"SimplexWater TPR at z > 2.326 (T = {t})", lambda r: r["simplexwater"]["tpr"], 0.50),
        paper(f"HeavyWater TPR at z > 2.326 (T = {t})", lambda r: r["heavywater"]["tpr"], 0.50),
        paper(
            "SimplexWater AUC (watermarked vs unwatermarked z)",
            lambda r: r["simplexwater"]["auc"],
            0.95,
        ),
        paper(
            "HeavyWater AUC (watermarked vs unwatermarked z)",
            lambda r: r["heavywater"]["auc"],
            0.90,
        ),
    ]
    result.metrics.update(
        {
            "lm_entropy_nats": entropy,
            "methods": rows,
            "per_seed": {
                s: {m: {k: r[k] for k in ("tpr", "auc", "dnll")} for m, r in per_seed[s][0].items()}
                for s in seeds
            },
            "null": null,
            "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        }
    )
    result.notes += [
        f"synthetic LM: logits = {cfg.entropy_scale}·N(0,1) over V = {cfg.vocab}, entropy "
        f"{entropy:.3f} nats; {cfg.seqs} sequences × T = {cfg.tokens} per seed, seeds {seeds}; "
        "i.i.d. side information",
        "information, normal-approximation null FPR at z > 2.326 (anti-conservative for "
        f"HeavyWater at T = {cfg.null_tokens}, expected ≈ 0.025): SimplexWater "
        f"{null['simplexwater_normal']:.4f}, HeavyWater {null['heavywater_normal']:.4f}",
    ]
    for s in seeds:
        r = per_seed[s][0]
        result.notes.append(
            f"seed {s}: TPR KGW {r['kgw']['tpr']:.3f}, Gumbel {r['gumbel']['tpr']:.3f}, "
            f"SimplexWater {r['simplexwater']['tpr']:.3f}, HeavyWater {r['heavywater']['tpr']:.3f}"
        )
    return result
