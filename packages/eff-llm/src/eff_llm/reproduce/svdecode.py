"""Reproduction ``llm.svdecode``: steering-vector decoding on top of a short warm start.

Setup (spec): a tiny Llama (h 64, L 2; initializer range 0.1 — at the default 0.02, 400 Adam
steps reached accuracy 1.0 on only some seeds) pre-trained on (a + b) mod 16 (all 256 prompts
``[a, +, b, SEP]``, 400 Adam steps at lr 1e-3, batch 128, accuracy 1.0) is adapted to the
downstream task (a + b + shift) mod 16, shift 5, with a seeded 50/20/30 % train/calibration/test split. Warm start =
full fine-tune (Adam lr 1e-3, batch 32) for w ∈ {4, 8, 16, 32} steps; μ̄ from the calibration split
(``mu_reduction``, default the ratio of sums); α = 0.1, −∞ mask; greedy test accuracy of the warm
start vs warm start + SVDecode, for each seed and warm-start length. θ = the pre-trained base.
The paper's plain-mean μ̄ is reported alongside as information, and so is the fraction of test
prompts whose label lies inside φ's α-mask (only those can SVDecode turn right).

Paper claims (``claims.md``; full mode 12 seeds × 4 warm starts, quick mode 2 seeds × 4): the mean
Δacc ≥ +1.5 points with the ratio-of-sums μ̄ (App. D.3, our default) and, as its own claim, with the
paper's plain-mean μ̄ (App. D.2); min Δacc ≥ −3 points over the same runs (ratio of sums). Each
claim's per-seed value is that seed's mean (or min) over its four warm starts; the mean over seeds
is the mean over all runs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from eff_llm._models import last_token_accuracy, tiny_llama, train_last_token
from eff_llm.svdecode import calibrate_mu, steering_vector, svdecode_logprobs, warm_start
from eff_shared.errors import check_choice, check_positive
from eff_shared.reproduce import Mode, Result, paper_claim
from eff_shared.torch import threads

__all__ = ["SVDecodeReproConfig", "experiment", "run", "splits"]


@dataclass(frozen=True)
class SVDecodeReproConfig:
    modulus: int = 16
    shift: int = 5
    warm_steps: tuple[int, ...] = (4, 8, 16, 32)
    seeds: tuple[int, ...] = (1, 2, 3, 4)
    pretrain_steps: int = 400
    pretrain_lr: float = 1e-3
    init_range: float = 0.1
    warm_lr: float = 1e-3
    batch_size: int = 32
    alpha: float = 0.1
    mu_reduction: str = "ratio"
    hidden_size: int = 64
    num_layers: int = 2
    split: tuple[float, float, float] = field(default=(0.5, 0.2, 0.3))

    def __post_init__(self) -> None:
        check_positive("modulus", self.modulus, integer=True)
        if self.modulus < 2:
            raise ValueError(f"modulus must be >= 2, got {self.modulus}")
        check_positive("shift", self.shift, integer=True)
        for name in ("pretrain_steps", "batch_size", "hidden_size", "num_layers"):
            check_positive(name, getattr(self, name), integer=True)
        for w in self.warm_steps:
            check_positive("warm_steps", w, integer=True)
        if not self.seeds or not self.warm_steps:
            raise ValueError("seeds and warm_steps must not be empty")
        check_positive("pretrain_lr", self.pretrain_lr)
        check_positive("init_range", self.init_range)
        check_positive("warm_lr", self.warm_lr)
        check_choice("mu_reduction", self.mu_reduction, ["ratio", "mean", "median", "trimmed"])
        if len(self.split) != 3 or abs(sum(self.split) - 1) > 1e-9 or min(self.split) <= 0:
            raise ValueError(
                f"split must be three positive fractions summing to 1, got {self.split}"
            )


SVDecodeRunConfig = SVDecodeReproConfig  # old name, kept for compatibility


def addition_table(modulus: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All prompts ``[a, +, b, SEP]`` (ids a, b < modulus, + = modulus, SEP = modulus + 1) and
    (a + b) mod modulus (for modulus 16 the same task as ``eff_llm._data.arithmetic_table``)."""
    a, b = torch.meshgrid(torch.arange(modulus), torch.arange(modulus), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    ids = torch.stack([a, torch.full_like(a, modulus), b, torch.full_like(a, modulus + 1)], 1)
    return ids, (a + b) % modulus


def pretrained_base(cfg: SVDecodeReproConfig, seed: int):
    """θ: the tiny Llama trained on (a + b) mod ``modulus``; returns (model, accuracy)."""
    ids, labels = addition_table(cfg.modulus)
    model = tiny_llama(
        vocab_size=max(32, cfg.modulus + 2),
        hidden_size=cfg.hidden_size,
        num_layers=cfg.num_layers,
        num_heads=4,
        intermediate_size=2 * cfg.hidden_size,
        initializer_range=cfg.init_range,
        seed=seed,
    )
    train_last_token(
        model, ids, labels, steps=cfg.pretrain_steps, lr=cfg.pretrain_lr, batch_size=128, seed=seed
    )
    return model, last_token_accuracy(model, ids, labels)


def splits(cfg: SVDecodeReproConfig, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The task's ``[(ids, labels)]`` for train, calibration and test: the addition table mod
    ``cfg.modulus`` with labels shifted by ``cfg.shift`` (the fine-tuned task), cut by a seeded
    permutation in the proportions ``cfg.split``. Same seed ⇒ same splits."""
    if not isinstance(cfg, SVDecodeReproConfig):
        raise TypeError(f"cfg must be an SVDecodeReproConfig, got {type(cfg).__name__}")
    ids, labels = addition_table(cfg.modulus)
    labels = (labels + cfg.shift) % cfg.modulus
    perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))
    n_tr = round(cfg.split[0] * len(ids))
    n_cal = round(cfg.split[1] * len(ids))
    parts = perm[:n_tr], perm[n_tr : n_tr + n_cal], perm[n_tr + n_cal :]
    return [(ids[p], labels[p]) for p in parts]


@torch.no_grad()
def steered_accuracy(phi, theta, ids, labels, mu: float, alpha: float) -> float:
    logp = svdecode_logprobs(phi, theta, ids, mu, alpha)[:, -1]
    return int((logp.argmax(-1) == labels).sum()) / len(labels)


@torch.no_grad()
def label_in_mask(phi, theta, ids, labels, alpha: float) -> float:
    """Fraction of prompts whose label lies inside the α-mask of φ: the only prompts SVDecode can
    turn right (the −∞ penalty removes every other token)."""
    _, mask = steering_vector(
        phi(input_ids=ids).logits[:, -1], theta(input_ids=ids).logits[:, -1], alpha
    )
    return float(mask.gather(1, labels[:, None]).float().mean())


def experiment(cfg: SVDecodeReproConfig, seed_offset: int = 0) -> dict:
    rows = []
    t0 = time.perf_counter()
    base_acc = []
    for s in cfg.seeds:
        seed = s + seed_offset
        theta, acc0 = pretrained_base(cfg, seed)
        base_acc.append(acc0)
        (x_tr, y_tr), (x_cal, y_cal), (x_te, y_te) = splits(cfg, seed)
        for w in cfg.warm_steps:
            phi = warm_start(
                theta, x_tr, y_tr, steps=w, lr=cfg.warm_lr, batch_size=cfg.batch_size, seed=seed
            )
            mu = calibrate_mu(phi, theta, [(x_cal, y_cal)], cfg.alpha, cfg.mu_reduction)
            mu_mean = calibrate_mu(phi, theta, [(x_cal, y_cal)], cfg.alpha, "mean")
            acc_w = last_token_accuracy(phi, x_te, y_te)
            acc_s = steered_accuracy(phi, theta, x_te, y_te, mu, cfg.alpha)
            acc_m = steered_accuracy(phi, theta, x_te, y_te, mu_mean, cfg.alpha)
            reach = label_in_mask(phi, theta, x_te, y_te, cfg.alpha)
            rows.append(
                {
                    "seed": seed,
                    "warm steps": w,
                    "μ̄": mu,
                    "acc_warm": acc_w,
                    "acc_svdecode": acc_s,
                    "Δ (points)": 100 * (acc_s - acc_w),
                    "label in mask": reach,
                    "μ̄ mean (paper)": mu_mean,
                    "Δ mean-μ̄ (points)": 100 * (acc_m - acc_w),
                }
            )
    return {"rows": rows, "base_accuracy": base_acc, "elapsed_s": time.perf_counter() - t0}


PAPER_TITLE = "Distribution-Aligned Decoding for Efficient LLM Task Adaptation"
PAPER_HEADLINE = (
    "SVDecode on top of a PEFT warm start raises multiple-choice accuracy by up to 5 points "
    "(TruthfulQA MC, Qwen2.5-1.5B + LoRA 46.99 → 49.77; LLaMA3.1-8B + LoRA 42.89 → 47.80)"
)
_PAPER = "TruthfulQA MC +2.78 points (Qwen2.5-1.5B + LoRA 46.99 → 49.77), up to +5 points"
#: The seeds of each mode (offset by the master seed): claims.md asks for 12 in full mode.
FULL_SEEDS = tuple(range(1, 13))
QUICK_SEEDS = (1, 2)


def _per_seed(rows: list[dict], seeds: list[int], key: str, reduce=None) -> list[float]:
    reduce = reduce or (lambda v: sum(v) / len(v))
    return [float(reduce([r[key] for r in rows if r["seed"] == s])) for s in seeds]


@threads(1)
def run(mode: Mode = "quick", seed: int = 0, cfg: SVDecodeReproConfig | None = None) -> Result:
    cfg = cfg or SVDecodeReproConfig(seeds=FULL_SEEDS if mode == "full" else QUICK_SEEDS)
    out = experiment(cfg, seed)
    rows = out["rows"]
    seeds = [s + seed for s in cfg.seeds]
    deltas = [r["Δ (points)"] for r in rows]
    mean_m = [r["Δ mean-μ̄ (points)"] for r in rows]
    result = Result(
        name="llm.svdecode",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    result.table = rows
    runs = f"{len(cfg.seeds)} seeds × {len(cfg.warm_steps)} warm-start lengths"
    ratio_mean = _per_seed(rows, seeds, "Δ (points)")
    plain_mean = _per_seed(rows, seeds, "Δ mean-μ̄ (points)")
    ratio_min = _per_seed(rows, seeds, "Δ (points)", min)
    result.claims += [
        paper_claim(
            f"mean Δ test accuracy, SVDecode (ratio-of-sums μ̄, App. D.3) − warm start, over {runs}",
            ratio_mean,
            1.5,
            seeds=seeds,
            statistic="mean",
            unit="points",
            expected="xfail",
            reason=(
                "+0.70 points over 12 seeds (per seed -0.3 ... +1.6): μ̄ is a small step (-0.24 ... "
                "+0.02) and the short warm starts are weak (label inside φ's α-mask for 9-73 %)"
            ),
            paper=_PAPER,
            headline=True,
        ),
        paper_claim(
            f"mean Δ test accuracy, SVDecode (plain-mean μ̄, App. D.2) − warm start, over {runs}",
            plain_mean,
            1.5,
            seeds=seeds,
            statistic="mean",
            unit="points",
            expected="xfail",
            reason=(
                "+0.92 points over 12 seeds (per seed -0.6 ... +2.9; runs -2.6 ... +7.8): the "
                "plain-mean μ̄ is heavy-tailed, as the spec warns"
            ),
            paper=_PAPER,
            headline=True,
        ),
        paper_claim(
            f"min Δ test accuracy (ratio-of-sums μ̄) over {runs}; per seed: min over its "
            "warm starts; judged on the worst seed",
            [min(ratio_min)],
            -3.0,
            unit="points",
            paper="SVDecode does not hurt the PEFT warm start (no loss in the paper's tables)",
        ),
    ]
    result.metrics.update(
        {
            "mean_delta": sum(deltas) / len(deltas),
            "min_delta": min(deltas),
            "mean_delta_plain_mean_mu": sum(mean_m) / len(mean_m),
            "per_seed_mean_delta": dict(zip(seeds, ratio_mean, strict=True)),
            "per_seed_mean_delta_plain_mean_mu": dict(zip(seeds, plain_mean, strict=True)),
            "per_seed_min_delta": dict(zip(seeds, ratio_min, strict=True)),
            "mu_range": [min(r["μ̄"] for r in rows), max(r["μ̄"] for r in rows)],
            "acc_warm_range": [min(r["acc_warm"] for r in rows), max(r["acc_warm"] for r in rows)],
            "label_in_mask_range": [
                min(r["label in mask"] for r in rows),
                max(r["label in mask"] for r in rows),
            ],
            "base_accuracy": out["base_accuracy"],
            "config": asdict(cfg),
        }
    )
    result.notes += [
        f"pre-trained base accuracy on (a + b) mod 16 per seed: {out['base_accuracy']}",
        f"shift {cfg.shift}, warm steps {list(cfg.warm_steps)}, seeds {seeds}; μ̄ "
        f"({cfg.mu_reduction}) in [{result.metrics['mu_range'][0]:.3f}, "
        f"{result.metrics['mu_range'][1]:.3f}]",
        f"warm-start test accuracy in [{result.metrics['acc_warm_range'][0]:.3f}, "
        f"{result.metrics['acc_warm_range'][1]:.3f}]; the label lies inside φ's α-mask (the only "
        "prompts SVDecode can turn right) for a fraction "
        f"[{result.metrics['label_in_mask_range'][0]:.2f}, "
        f"{result.metrics['label_in_mask_range'][1]:.2f}] of the test prompts",
        "the paper's plain-mean μ̄: mean Δ "
        f"{result.metrics['mean_delta_plain_mean_mu']:+.2f} points (runs "
        f"{min(mean_m):+.1f}…{max(mean_m):+.1f})",
    ]
    return result
