"""HeavyWater and SimplexWater: optimal-transport watermarks for low-entropy text (arXiv 2506.06409),
with the Kirchenbauer red/green (KGW) and Aaronson/Gumbel baselines.

Every generation step is a coupling between the next-token distribution P_X and uniform side
information S ∈ {0..k−1} (derived from the context by a keyed PRNG) that maximises the expected
score E[f(X, S)]; the token is then sampled from the column S = s of the coupling (paper §3, the
"score-maximising coupling" problem, solved with entropic OT):

    Π* = argmin_{Π ∈ U(a, 1/k)} ⟨Π, C⟩ − reg·H(Π),   C = −f (scaled to [0, 1]),   P(x | s) ∝ Π*[x, s].

Because the columns of Π* sum to 1/k, averaging P(· | s) over a uniform s gives back the row
marginal a = P_X: the scheme is distortion-free in expectation over s (up to the Sinkhorn
tolerance and the top-p truncation). The detector knows the key, recomputes s_t from the context
and sums the scores:

- **HeavyWater:** f(x, s) = F[x, s], F ∈ R^{V×k} i.i.d. LogNormal(0, 1) (or Gamma(0.2), Pareto(2.5))
  drawn from the key, each row standardised over s; z = Σ_t F[x_t, s_t] / √T.
- **SimplexWater:** n = ⌈log2 V⌉, s ∈ {1..2^n − 1} (k = 2^n − 1 nonzero n-bit words, the simplex
  code), f(x, s) = popcount(x AND s) mod 2; z = (Σ f − T/2) / √(T/4).

p-values are **calibrated by default**: HeavyWater's ``pvalue="monte_carlo"`` redraws s uniformly
for the observed tokens (the exact null: under H0 the text is independent of the key) and returns
(1 + #{z* ≥ z}) / (1 + n); SimplexWater's ``"exact"`` uses the exact null P(f = 1) =
2^{n−1}/(2^n − 1) for x ≠ 0 (0 for x = 0) and the Poisson-binomial tail. ``pvalue="normal"``
(1 − Φ(z), the repository's choice) stays available; it is **anti-conservative** for HeavyWater at
short T (sums of standardised log-normals are right-skewed: null FPR ≈ 0.025 at α = 0.01, T = 50).

Tilt δ ≥ 0 (the distortion knob): HeavyWater P(x|s) ∝ Π[x, s]·exp(δ F[x, s]); SimplexWater
P(x|s) ∝ Π[x, s]·(1 + δ) if f = 1 else (1 − δ). δ = 0 is the distortion-free scheme.

Usable as a transformers ``watermarking_config`` (``generate(..., do_sample=True,
watermarking_config=HeavyWaterConfig())`` — transformers appends the processor last, after every
warper, so p = softmax(scores) is the final sampling distribution) or as a ``LogitsProcessor``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
from scipy import stats
from transformers import LogitsProcessor
from transformers.generation import BaseWatermarkingConfig
from transformers.generation.watermarking import WatermarkDetectorOutput

from eff_shared.errors import check_choice, check_fraction, check_int, check_positive, check_type

__all__ = [
    "GumbelWatermarkLogitsProcessor",
    "HeavyWaterConfig",
    "HeavyWaterDetector",
    "HeavyWaterLogitsProcessor",
    "KGWDetector",
    "KGWLogitsProcessor",
    "SimplexWaterConfig",
    "SimplexWaterDetector",
    "SimplexWaterLogitsProcessor",
    "WatermarkDetectorOutput",
    "context_seeds",
    "heavywater_conditional",
    "heavywater_scores",
    "kgw_greenlists",
    "parity",
    "simplex_bits",
    "simplexwater_conditional",
    "sinkhorn",
    "top_p_support",
]

_SCHEMES = ("lefthash", "min", "sum", "prod")
_DISTS = ("lognormal", "gamma", "pareto")
_MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------
# Side information


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 output function (a keyed PRNG step), vectorised over uint64."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def context_seeds(
    input_ids: torch.Tensor, hashing_key: int, context_width: int = 1, scheme: str = "lefthash"
) -> np.ndarray:
    """The per-row seed of the next step: ``key · x_{t−1}`` ("lefthash", the repository's
    ``markov_1`` = HF lefthash) or ``key · agg(last context_width tokens)`` for agg ∈ min/sum/prod
    (the repository's ``agg_hash``). Returns uint64 of shape (batch,)."""
    check_choice("seeding_scheme", scheme, _SCHEMES)
    if input_ids.ndim != 2 or input_ids.shape[1] < context_width:
        raise ValueError(
            f"input_ids must be (batch, seq) with seq >= context_width={context_width}, "
            f"got shape {tuple(input_ids.shape)}"
        )
    ctx = input_ids[:, -context_width:].to("cpu", torch.int64).numpy().astype(np.uint64)
    if scheme == "lefthash":
        agg = ctx[:, -1]
    elif scheme == "min":
        agg = ctx.min(1)
    elif scheme == "sum":
        agg = ctx.sum(1)
    else:
        with np.errstate(over="ignore"):
            agg = np.prod(ctx + np.uint64(1), axis=1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return agg * np.uint64(hashing_key & _MASK64)


def _side_info(seeds: np.ndarray, k: int, offset: int = 0) -> np.ndarray:
    """s = PRNG(seed) uniform on {0..k−1} (splitmix64, then modulo k; bias < k / 2^64)."""
    return (_splitmix64(seeds) % np.uint64(k)).astype(np.int64) + offset


# ---------------------------------------------------------------------------------------------
# Sinkhorn


def sinkhorn(
    a: torch.Tensor,
    b: torch.Tensor,
    cost: torch.Tensor,
    reg: float = 0.05,
    tol: float = 1e-5,
    max_iter: int = 2000,
) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Batched entropic OT (Cuturi 2013): Π = diag(u) K diag(v), K = exp(−C/reg).

    ``a`` (B, m) row marginals (zeros allowed for padding), ``b`` (B, k) or (k,) column marginals,
    ``cost`` (B, m, k). Each iteration updates u then v, so on return the **column** marginals are
    exact and the row marginals carry the error; iterations stop when the row-marginal L1 error of
    every batch row is ≤ ``tol`` (checked every 10 iterations, as POT does) or at ``max_iter``.
    Returns ``(plan, iterations, row_l1_error)``. Runs in the dtype of ``cost`` (use float64 for
    small ``reg``).
    """
    check_positive("reg", reg)
    check_positive("tol", tol)
    check_positive("max_iter", max_iter, integer=True)
    if cost.ndim != 3 or a.shape != cost.shape[:2]:
        raise ValueError(
            f"cost must be (B, m, k) and a (B, m), got {tuple(cost.shape)} and {tuple(a.shape)}"
        )
    bsz, _, k = cost.shape
    b = b.expand(bsz, k).to(cost.dtype)
    a = a.to(cost.dtype)
    # Subtracting the per-row minimum cost leaves the plan unchanged and keeps K in range.
    kmat = torch.exp(-(cost - cost.amin(dim=(1, 2), keepdim=True)) / reg)
    kmat = kmat * (a > 0).unsqueeze(-1)
    v = torch.ones_like(b)
    u = torch.ones_like(a)
    tiny = torch.finfo(cost.dtype).tiny
    it = 0
    err = torch.full((bsz,), float("inf"), dtype=cost.dtype)
    for it in range(1, max_iter + 1):
        u = a / (torch.bmm(kmat, v.unsqueeze(-1)).squeeze(-1)).clamp_min(tiny)
        v = b / (torch.bmm(kmat.transpose(1, 2), u.unsqueeze(-1)).squeeze(-1)).clamp_min(tiny)
        if it % 10 == 0 or it == max_iter:
            row = u * torch.bmm(kmat, v.unsqueeze(-1)).squeeze(-1)
            err = (row - a).abs().sum(-1)
            if bool((err <= tol).all()):
                break
    plan = u.unsqueeze(-1) * kmat * v.unsqueeze(1)
    return plan, it, err


def top_p_support(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Minimal prefix of the sorted distribution with mass ≥ ``top_p`` (the repository's
    ``top_p_indices``): returns ``(sorted_ids (B, V), keep (B, V) bool)``."""
    sorted_p, sorted_ids = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p
    keep = before < top_p
    keep[:, 0] = True
    return sorted_ids, keep & (sorted_p > 0)


def _check_logits(scores: torch.Tensor) -> None:
    if scores.ndim != 2:
        raise ValueError(f"scores must be (batch, vocab), got shape {tuple(scores.shape)}")
    bad = torch.isneginf(scores).all(-1) | torch.isnan(scores).any(-1)
    if bool(bad.any()):
        raise ValueError(
            "scores has a row that is all -inf (or NaN): no token can be sampled; "
            f"rows {bad.nonzero().flatten().tolist()}"
        )


def _ot_conditional(
    probs: torch.Tensor,
    s: torch.Tensor,
    score_fn,
    *,
    k: int,
    top_p: float,
    reg: float,
    tol: float,
    max_iter: int,
    tilt_fn,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, dict]:
    """P(x | s) ∝ Π*[x, s] (· tilt) for each row, −inf off the top-p support; support sizes are
    bucketed (powers of two) so that one padded Sinkhorn runs per bucket. ``score_fn(ids)`` gives
    the (B, m, k) score f of the support tokens ``ids`` (B, m)."""
    bsz, vocab = probs.shape
    sorted_ids, keep = top_p_support(probs, top_p)
    sizes = keep.sum(-1)
    out = torch.full((bsz, vocab), float("-inf"), dtype=torch.float64)
    info = {"iterations": [], "row_l1_error": 0.0, "support": sizes.tolist()}
    single = sizes == 1
    if bool(single.any()):  # m = 1: the coupling is trivial, return p unchanged
        rows = single.nonzero().flatten()
        out[rows, sorted_ids[rows, 0]] = 0.0
    buckets: dict[int, list[int]] = {}
    for r in (~single).nonzero().flatten().tolist():
        buckets.setdefault(1 << (int(sizes[r]) - 1).bit_length(), []).append(r)
    for m, rows_list in sorted(buckets.items()):
        rows = torch.tensor(rows_list)
        ids = sorted_ids[rows, :m]
        mask = keep[rows, :m]
        a = torch.where(mask, probs[rows].gather(1, ids).to(dtype), 0.0)
        a = a / a.sum(-1, keepdim=True)
        f = score_fn(ids).to(dtype)  # (R, m, k)
        c = -f
        big = torch.finfo(dtype).max
        cmin = torch.where(mask.unsqueeze(-1), c, big).amin(dim=(1, 2), keepdim=True)
        cmax = torch.where(mask.unsqueeze(-1), c, -big).amax(dim=(1, 2), keepdim=True)
        c = (c - cmin) / (cmax - cmin).clamp_min(1e-12)  # C -= C.min(); C /= C.max()
        c = torch.where(mask.unsqueeze(-1), c, 0.0)
        plan, iters, err = sinkhorn(
            a, torch.full((k,), 1.0 / k, dtype=dtype), c, reg, tol, max_iter
        )
        info["iterations"].append(iters)
        info["row_l1_error"] = max(info["row_l1_error"], float(err.max()))
        s_rows = s[rows].to(torch.int64)
        col = plan[torch.arange(len(rows)), :, s_rows]  # (R, m)
        fs = f[torch.arange(len(rows)), :, s_rows]
        w = col * tilt_fn(fs)
        w = torch.where(mask, w, 0.0)
        total = w.sum(-1, keepdim=True)
        # A column with no mass on the support (possible only through under-flow) falls back to a.
        w = torch.where(total > 0, w / total.clamp_min(1e-300), a)
        logw = torch.where(w > 0, w.log(), float("-inf"))
        out[rows.unsqueeze(-1).expand_as(ids), ids] = torch.where(mask, logw, float("-inf"))
    return out, info


# ---------------------------------------------------------------------------------------------
# Configurations


def _check_common(cfg) -> None:
    check_type("top_p", cfg.top_p, (int, float))
    if not 0 < cfg.top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {cfg.top_p!r}")
    check_positive("sinkhorn_reg", cfg.sinkhorn_reg)
    check_positive("sinkhorn_tol", cfg.sinkhorn_tol)
    check_positive("max_iter", cfg.max_iter, integer=True)
    check_type("tilt", cfg.tilt, (int, float))
    if not math.isfinite(cfg.tilt) or cfg.tilt < 0:
        raise ValueError(f"tilt must be a finite number >= 0, got {cfg.tilt!r}")
    check_type("hashing_key", cfg.hashing_key, int)
    check_int("context_width", cfg.context_width, minimum=1)
    check_choice("seeding_scheme", cfg.seeding_scheme, _SCHEMES)


class _OTConfig(BaseWatermarkingConfig):
    def fingerprint(self) -> str:
        """A hash of every parameter; the detector compares it with the generator's."""
        blob = json.dumps({"type": type(self).__name__, **self.to_dict()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return asdict(self)  # type: ignore[call-overload]


@dataclass
class HeavyWaterConfig(_OTConfig):
    """HeavyWater parameters (defaults: the repository's ``pred.py``; the spec's reproduction uses
    ``sinkhorn_reg=0.01`` in float64 because 0.05 blurs the max-normalised heavy-tailed costs)."""

    k: int = 1024
    dist: Literal["lognormal", "gamma", "pareto"] = "lognormal"
    top_p: float = 0.999
    sinkhorn_reg: float = 0.05
    sinkhorn_tol: float = 1e-5
    max_iter: int = 2000
    tilt: float = 0.0
    hashing_key: int = 15485863
    context_width: int = 1
    seeding_scheme: str = "lefthash"

    def validate(self) -> None:
        _check_common(self)
        check_type("k", self.k, int)
        if self.k < 2:
            raise ValueError(f"k must be >= 2, got {self.k!r}")
        check_choice("dist", self.dist, _DISTS)

    def construct_processor(self, vocab_size: int, device=None) -> HeavyWaterLogitsProcessor:
        return HeavyWaterLogitsProcessor(vocab_size, self, device=device)


@dataclass
class SimplexWaterConfig(_OTConfig):
    """SimplexWater parameters (k = 2^⌈log2 V⌉ − 1 follows from the vocabulary size)."""

    top_p: float = 0.999
    sinkhorn_reg: float = 0.05
    sinkhorn_tol: float = 1e-5
    max_iter: int = 2000
    tilt: float = 0.0
    hashing_key: int = 15485863
    context_width: int = 1
    seeding_scheme: str = "lefthash"

    def validate(self) -> None:
        _check_common(self)
        if self.tilt >= 1:
            raise ValueError(f"tilt must lie in [0, 1) for SimplexWater, got {self.tilt!r}")

    def construct_processor(self, vocab_size: int, device=None) -> SimplexWaterLogitsProcessor:
        return SimplexWaterLogitsProcessor(vocab_size, self, device=device)


def _check_vocab(vocab_size) -> None:
    check_type("vocab_size", vocab_size, int)
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size!r}")


def heavywater_scores(
    vocab_size: int, k: int = 1024, dist: str = "lognormal", key: int = 15485863
) -> torch.Tensor:
    """F ∈ R^{V×k} (float64): i.i.d. LogNormal(0, 1) / Gamma(0.2) / Pareto(2.5) from the key, each
    row standardised over s (mean 0, variance 1), so that z = Σ F / √T is N(0, 1)-scaled under H0."""
    _check_vocab(vocab_size)
    check_choice("dist", dist, _DISTS)
    rng = np.random.default_rng(key)
    if dist == "lognormal":
        f = rng.lognormal(0.0, 1.0, size=(vocab_size, k))
    elif dist == "gamma":
        f = rng.gamma(0.2, 1.0, size=(vocab_size, k))
    else:
        f = rng.pareto(2.5, size=(vocab_size, k))
    f = (f - f.mean(1, keepdims=True)) / f.std(1, keepdims=True).clip(1e-12)
    return torch.from_numpy(f)


def simplex_bits(vocab_size: int) -> int:
    """n = ⌈log2 V⌉ (k = 2^n − 1 side-information values)."""
    _check_vocab(vocab_size)
    return max(1, math.ceil(math.log2(vocab_size)))


def parity(x: torch.Tensor) -> torch.Tensor:
    """popcount(x) mod 2 for non-negative int64 tensors."""
    x = x.clone()
    p = torch.zeros_like(x)
    while bool((x > 0).any()):
        p ^= x & 1
        x >>= 1
    return p


def _simplex_f(ids: torch.Tensor, s_values: torch.Tensor) -> torch.Tensor:
    return parity(ids.unsqueeze(-1) & s_values)


def heavywater_conditional(
    probs: torch.Tensor, s: torch.Tensor, table: torch.Tensor, cfg: HeavyWaterConfig
) -> tuple[torch.Tensor, dict]:
    """log P(x | s) of HeavyWater for rows of ``probs`` (B, V) and side information ``s`` (B,)."""
    tilt = float(cfg.tilt)
    return _ot_conditional(
        probs,
        s,
        lambda ids: table[ids],
        k=cfg.k,
        top_p=cfg.top_p,
        reg=cfg.sinkhorn_reg,
        tol=cfg.sinkhorn_tol,
        max_iter=cfg.max_iter,
        tilt_fn=lambda fs: torch.exp(tilt * fs),
    )


def simplexwater_conditional(
    probs: torch.Tensor, s: torch.Tensor, cfg: SimplexWaterConfig
) -> tuple[torch.Tensor, dict]:
    """log P(x | s) of SimplexWater; ``s`` holds side-information words in {1..2^n − 1}."""
    n = simplex_bits(probs.shape[1])
    words = torch.arange(1, 2**n, dtype=torch.int64)
    tilt = float(cfg.tilt)
    return _ot_conditional(
        probs,
        s - 1,  # column index of word s
        lambda ids: _simplex_f(ids, words),
        k=2**n - 1,
        top_p=cfg.top_p,
        reg=cfg.sinkhorn_reg,
        tol=cfg.sinkhorn_tol,
        max_iter=cfg.max_iter,
        tilt_fn=lambda fs: 1.0 + tilt * (2.0 * fs - 1.0),
    )


# ---------------------------------------------------------------------------------------------
# Logits processors


class _OTProcessor(LogitsProcessor):
    config: HeavyWaterConfig | SimplexWaterConfig

    def __init__(self, vocab_size: int, config, device=None) -> None:
        _check_vocab(vocab_size)
        config.validate()
        self.vocab_size = vocab_size
        self.config = config
        self.device = device
        self.last_info: dict = {}

    def side_info(self, input_ids: torch.Tensor) -> torch.Tensor:
        c = self.config
        seeds = context_seeds(input_ids, c.hashing_key, c.context_width, c.seeding_scheme)
        return torch.from_numpy(self._side(seeds))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        _check_logits(scores)
        probs = torch.softmax(scores.detach().to("cpu", torch.float64), dim=-1)
        logp, self.last_info = self._conditional(probs, self.side_info(input_ids))
        return logp.to(scores.device, scores.dtype)


class HeavyWaterLogitsProcessor(_OTProcessor):
    """Replaces the scores by log P(x | s) of HeavyWater (−inf off the top-p support)."""

    def __init__(self, vocab_size: int, config: HeavyWaterConfig | None = None, device=None):
        super().__init__(vocab_size, config or HeavyWaterConfig(), device)
        c = self.config
        self.table = heavywater_scores(vocab_size, c.k, c.dist, c.hashing_key)  # type: ignore[attr-defined]

    def _side(self, seeds):
        return _side_info(seeds, self.config.k)  # type: ignore[union-attr]

    def _conditional(self, probs, s):
        return heavywater_conditional(probs, s, self.table, self.config)  # type: ignore[arg-type]


class SimplexWaterLogitsProcessor(_OTProcessor):
    """Replaces the scores by log P(x | s) of SimplexWater (−inf off the top-p support)."""

    def __init__(self, vocab_size: int, config: SimplexWaterConfig | None = None, device=None):
        super().__init__(vocab_size, config or SimplexWaterConfig(), device)
        self.n_bits = simplex_bits(vocab_size)

    def _side(self, seeds):
        return _side_info(seeds, 2**self.n_bits - 1, offset=1)

    def _conditional(self, probs, s):
        return simplexwater_conditional(probs, s, self.config)  # type: ignore[arg-type]


def _uniforms(seeds: np.ndarray, vocab_size: int) -> torch.Tensor:
    """r ∈ (0, 1)^{B×V} from per-row seeds (a torch.Generator per row)."""
    out = torch.empty(len(seeds), vocab_size, dtype=torch.float64)
    g = torch.Generator()
    for i, seed in enumerate(seeds.tolist()):
        g.manual_seed(int(seed) % (2**63))
        out[i] = torch.rand(vocab_size, generator=g, dtype=torch.float64)
    return out.clamp(1e-12, 1 - 1e-12)


def kgw_greenlists(seeds: np.ndarray, vocab_size: int, gamma: float) -> torch.Tensor:
    """KGW green mask (B, V): ``randperm(V)[: γV]`` of a generator seeded per row (as HF does);
    ``seeds`` is a 1-D integer array of per-row seeds (e.g. :func:`context_seeds`)."""
    seeds = np.asarray(seeds)
    if seeds.ndim != 1 or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(
            f"seeds must be a 1-D integer array, got shape {seeds.shape} {seeds.dtype}"
        )
    _check_vocab(vocab_size)
    check_fraction("gamma", gamma, closed=False)
    mask = torch.zeros(len(seeds), vocab_size, dtype=torch.bool)
    g = torch.Generator()
    n = int(gamma * vocab_size)
    for i, seed in enumerate(seeds.tolist()):
        g.manual_seed(int(seed) % (2**64 - 1))
        mask[i, torch.randperm(vocab_size, generator=g)[:n]] = True
    return mask


class GumbelWatermarkLogitsProcessor(LogitsProcessor):
    """Aaronson's Gumbel-max watermark: x = argmax_i r_i^{1/p_i}, r = PRNG(seed(context)); the
    scores become 0 on x and −inf elsewhere (deterministic given the context). Score Σ −log(1 − r_x),
    Gamma(T, 1) under H0. The special case of the OT framework with an exponential score."""

    def __init__(self, vocab_size: int, hashing_key: int = 15485863, context_width: int = 1):
        _check_vocab(vocab_size)
        self.vocab_size, self.hashing_key, self.context_width = (
            vocab_size,
            hashing_key,
            context_width,
        )

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        _check_logits(scores)
        seeds = context_seeds(input_ids, self.hashing_key, self.context_width)
        logp = torch.log_softmax(scores.detach().to("cpu", torch.float64), -1)
        x = gumbel_choice(logp, _uniforms(seeds, scores.shape[1]))
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(len(x)), x.to(scores.device)] = 0.0
        return out


def gumbel_choice(logp: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """argmax_i log(r_i) / p_i (= argmax r_i^{1/p_i})."""
    return (r.log() / logp.exp().clamp_min(1e-300)).argmax(-1)


class KGWLogitsProcessor(LogitsProcessor):
    """Kirchenbauer red/green (the baseline, as HF's ``WatermarkLogitsProcessor`` lefthash): +δ on a
    green list of γV tokens from ``randperm`` seeded by ``key · x_{t−1}``. ``bias=0`` returns the
    scores unchanged, so generation equals plain sampling with the same seed."""

    def __init__(self, vocab_size: int, greenlist_ratio: float = 0.25, bias: float = 2.0,
                 hashing_key: int = 15485863, context_width: int = 1):  # fmt: skip
        _check_vocab(vocab_size)
        if not 0 < greenlist_ratio < 1:
            raise ValueError(f"greenlist_ratio must lie in (0, 1), got {greenlist_ratio!r}")
        if not math.isfinite(bias) or bias < 0:
            raise ValueError(f"bias must be a finite number >= 0, got {bias!r}")
        self.vocab_size, self.gamma, self.bias = vocab_size, greenlist_ratio, bias
        self.hashing_key, self.context_width = hashing_key, context_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.bias == 0:
            return scores
        seeds = context_seeds(input_ids, self.hashing_key, self.context_width)
        green = kgw_greenlists(seeds, scores.shape[1], self.gamma).to(scores.device)
        return scores + self.bias * green.to(scores.dtype)


# ---------------------------------------------------------------------------------------------
# Detectors


def _scored_positions(
    input_ids: torch.Tensor, context_width: int, ignore_repeated_ngrams: bool
) -> list[list[int]]:
    """Positions t ≥ context_width scored per row; with ``ignore_repeated_ngrams`` only the first
    occurrence of each (context, token) n-gram counts (repeats carry the same s and no new evidence)."""
    rows = []
    ids = input_ids.tolist()
    for seq in ids:
        seen: set[tuple[int, ...]] = set()
        keep = []
        for t in range(context_width, len(seq)):
            gram = tuple(seq[t - context_width : t + 1])
            if ignore_repeated_ngrams and gram in seen:
                continue
            seen.add(gram)
            keep.append(t)
        rows.append(keep)
    return rows


class _OTDetector:
    def __init__(self, vocab_size, config, ignore_repeated_ngrams, pvalue, allowed, n_mc, seed):
        _check_vocab(vocab_size)
        config.validate()
        check_choice("pvalue", pvalue, allowed)
        check_positive("n_monte_carlo", n_mc, integer=True)
        self.vocab_size, self.config = vocab_size, config
        self.ignore_repeated_ngrams, self.pvalue = ignore_repeated_ngrams, pvalue
        self.n_monte_carlo, self.seed = n_mc, seed

    def _prepare(self, input_ids, fingerprint):
        if fingerprint is not None and fingerprint != self.config.fingerprint():
            raise ValueError(
                f"fingerprint {fingerprint!r} does not match the detector's config "
                f"({self.config.fingerprint()!r}): generator and detector configs differ"
            )
        if input_ids.ndim == 1:
            input_ids = input_ids.unsqueeze(0)
        cw = self.config.context_width
        if input_ids.ndim != 2 or input_ids.shape[1] < cw + 1:
            raise ValueError(
                f"input_ids must be (batch, seq) with seq >= context_width + 1 = {cw + 1}, "
                f"got shape {tuple(input_ids.shape)}"
            )
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= self.vocab_size:
            raise ValueError(f"input_ids must lie in [0, vocab_size={self.vocab_size})")
        input_ids = input_ids.to("cpu", torch.int64)
        positions = _scored_positions(input_ids, cw, self.ignore_repeated_ngrams)
        c = self.config
        tokens, sides = [], []
        for row, pos in zip(input_ids, positions, strict=True):
            pos_t = torch.tensor(pos, dtype=torch.int64)
            windows = torch.stack([row[p - cw : p] for p in pos]) if pos else row[:0].view(0, cw)
            seeds = context_seeds(windows, c.hashing_key, cw, c.seeding_scheme)
            tokens.append(row[pos_t])
            sides.append(torch.from_numpy(self._side(seeds)))
        return tokens, sides

    def __call__(
        self,
        input_ids: torch.Tensor,
        z_threshold: float = 2.326,
        return_dict: bool = True,
        fingerprint: str | None = None,
    ):
        """Score each row: z, p-value (``self.pvalue``), ``prediction = z > z_threshold``."""
        tokens, sides = self._prepare(input_ids, fingerprint)
        out = self.score_tokens(tokens, sides)
        out.prediction = out.z_score > z_threshold
        return out if return_dict else out.prediction

    def score_tokens(self, tokens, sides) -> WatermarkDetectorOutput:
        """Detector statistics of given (token, side-information) sequences (lists of 1-D tensors)."""
        n = np.array([len(t) for t in tokens])
        z = np.zeros(len(tokens))
        p = np.ones(len(tokens))
        green = np.zeros(len(tokens))
        gen = np.random.default_rng(self.seed)
        for i, (x, s) in enumerate(zip(tokens, sides, strict=True)):
            if len(x) == 0:
                z[i], p[i] = float("nan"), float("nan")
                continue
            z[i], green[i] = self._z(x, s)
            p[i] = self._p(x, z[i], gen)
        return WatermarkDetectorOutput(
            num_tokens_scored=n,
            num_green_tokens=green,
            green_fraction=green / np.maximum(n, 1),
            z_score=z,
            p_value=p,
            confidence=1 - p,
        )


class HeavyWaterDetector(_OTDetector):
    """z = Σ_t F[x_t, s_t] / √T; ``pvalue="monte_carlo"`` (the default: s redrawn uniformly
    ``n_monte_carlo`` times for the observed tokens, a calibrated p-value) or ``"normal"``
    (1 − Φ(z), anti-conservative at short T).
    ``num_green_tokens`` counts F[x_t, s_t] > 0."""

    def __init__(
        self,
        vocab_size: int,
        config: HeavyWaterConfig | None = None,
        ignore_repeated_ngrams: bool = True,
        pvalue: str = "monte_carlo",
        n_monte_carlo: int = 2000,
        seed: int = 0,
    ):
        config = config or HeavyWaterConfig()
        super().__init__(
            vocab_size,
            config,
            ignore_repeated_ngrams,
            pvalue,
            ("normal", "monte_carlo"),
            n_monte_carlo,
            seed,
        )
        self.table = heavywater_scores(vocab_size, config.k, config.dist, config.hashing_key)

    def _side(self, seeds):
        return _side_info(seeds, self.config.k)

    def _z(self, x, s):
        vals = self.table[x, s]
        return float(vals.sum() / math.sqrt(len(x))), float((vals > 0).sum())

    def _p(self, x, z, gen):
        if self.pvalue == "normal":
            return float(stats.norm.sf(z))
        rows = self.table[x].numpy()  # (T, k)
        draws = gen.integers(0, rows.shape[1], size=(self.n_monte_carlo, len(x)))
        null = rows[np.arange(len(x)), draws].sum(1) / math.sqrt(len(x))
        return float((1 + (null >= z - 1e-12).sum()) / (1 + self.n_monte_carlo))


class SimplexWaterDetector(_OTDetector):
    """z = (Σ_t f(x_t, s_t) − T/2) / √(T/4); ``pvalue="exact"`` (the default: Poisson-binomial
    tail with P(f = 1) = 2^{n−1}/(2^n − 1) for x ≠ 0 and 0 for x = 0, the exact null over s) or
    ``"normal"`` (1 − Φ(z))."""

    def __init__(
        self,
        vocab_size: int,
        config: SimplexWaterConfig | None = None,
        ignore_repeated_ngrams: bool = True,
        pvalue: str = "exact",
        seed: int = 0,
    ):
        super().__init__(
            vocab_size,
            config or SimplexWaterConfig(),
            ignore_repeated_ngrams,
            pvalue,
            ("normal", "exact"),
            1,
            seed,
        )
        self.n_bits = simplex_bits(vocab_size)

    def _side(self, seeds):
        return _side_info(seeds, 2**self.n_bits - 1, offset=1)

    def _z(self, x, s):
        f = parity(x & s).sum()
        t = len(x)
        return float((f - t / 2) / math.sqrt(t / 4)), float(f)

    def _p(self, x, z, gen):
        if self.pvalue == "normal":
            return float(stats.norm.sf(z))
        t = len(x)
        count = round(z * math.sqrt(t / 4) + t / 2)
        pi = 2 ** (self.n_bits - 1) / (2**self.n_bits - 1)
        nonzero = int((x != 0).sum())
        return float(stats.binom.sf(count - 1, nonzero, pi))  # P(Σ f ≥ count)


class KGWDetector(_OTDetector):
    """The KGW z-test (γ green fraction): z = (G − γT)/√(Tγ(1−γ)), one-sided normal or exact
    binomial p-value. Same seeding as :class:`KGWLogitsProcessor`."""

    def __init__(self, vocab_size: int, greenlist_ratio: float = 0.25, hashing_key: int = 15485863,
                 ignore_repeated_ngrams: bool = True, pvalue: str = "normal"):  # fmt: skip
        cfg = SimplexWaterConfig(hashing_key=hashing_key)
        super().__init__(vocab_size, cfg, ignore_repeated_ngrams, pvalue, ("normal", "exact"), 1, 0)
        self.gamma = greenlist_ratio

    def _side(self, seeds):  # the side information of KGW is the seed itself
        return seeds.astype(np.int64)

    def _z(self, x, s):
        seeds = s.numpy().astype(np.uint64)
        green = kgw_greenlists(seeds, self.vocab_size, self.gamma)[torch.arange(len(x)), x]
        g, t = float(green.sum()), len(x)
        return (g - self.gamma * t) / math.sqrt(t * self.gamma * (1 - self.gamma)), g

    def _p(self, x, z, gen):
        if self.pvalue == "normal":
            return float(stats.norm.sf(z))
        t = len(x)
        count = round(z * math.sqrt(t * self.gamma * (1 - self.gamma)) + self.gamma * t)
        return float(stats.binom.sf(count - 1, t, self.gamma))
