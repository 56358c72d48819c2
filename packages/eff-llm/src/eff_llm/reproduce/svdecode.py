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
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from eff_llm._models import last_token_accuracy, tiny_llama, train_last_token
from eff_llm.svdecode import calibrate_mu, steering_vector, svdecode_logprobs, warm_start
from eff_shared.errors import check_choice, check_positive
from eff_shared.reproduce import Claim, Result

__all__ = ["SVDecodeRunConfig", "experiment", "run"]


@dataclass(frozen=True)
class SVDecodeRunConfig:
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


def addition_table(modulus: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All prompts ``[a, +, b, SEP]`` (ids a, b < modulus, + = modulus, SEP = modulus + 1) and
    (a + b) mod modulus (for modulus 16 the same task as ``eff_llm._data.arithmetic_table``)."""
    a, b = torch.meshgrid(torch.arange(modulus), torch.arange(modulus), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    ids = torch.stack([a, torch.full_like(a, modulus), b, torch.full_like(a, modulus + 1)], 1)
    return ids, (a + b) % modulus


def pretrained_base(cfg: SVDecodeRunConfig, seed: int):
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


def _splits(cfg: SVDecodeRunConfig, seed: int):
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


def experiment(cfg: SVDecodeRunConfig, seed_offset: int = 0) -> dict:
    rows = []
    t0 = time.perf_counter()
    base_acc = []
    for s in cfg.seeds:
        seed = s + seed_offset
        theta, acc0 = pretrained_base(cfg, seed)
        base_acc.append(acc0)
        (x_tr, y_tr), (x_cal, y_cal), (x_te, y_te) = _splits(cfg, seed)
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


def run(mode: str = "quick", seed: int = 0, cfg: SVDecodeRunConfig | None = None) -> Result:
    cfg = cfg or (SVDecodeRunConfig() if mode == "full" else SVDecodeRunConfig(seeds=(1, 2)))
    torch.set_num_threads(1)
    out = experiment(cfg, seed)
    rows = out["rows"]
    deltas = [r["Δ (points)"] for r in rows]
    result = Result(name="llm.svdecode", mode=mode, seed=seed)  # type: ignore[arg-type]
    result.table = rows
    mean_d = sum(deltas) / len(deltas)
    result.claims += [
        Claim(
            f"mean Δ test accuracy, SVDecode ({cfg.mu_reduction} μ̄) − warm start, over "
            f"{len(cfg.seeds)} seeds × {len(cfg.warm_steps)} warm-start lengths (points)",
            mean_d,
            1.5,
        ),
        Claim("min Δ test accuracy over all runs (points)", min(deltas), -3.0),
    ]
    mean_m = [r["Δ mean-μ̄ (points)"] for r in rows]
    result.metrics.update(
        {
            "mean_delta": mean_d,
            "min_delta": min(deltas),
            "mean_delta_plain_mean_mu": sum(mean_m) / len(mean_m),
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
        f"shift {cfg.shift}, warm steps {list(cfg.warm_steps)}, seeds "
        f"{[s + seed for s in cfg.seeds]}; μ̄ ({cfg.mu_reduction}) in "
        f"[{result.metrics['mu_range'][0]:.3f}, {result.metrics['mu_range'][1]:.3f}]",
        f"warm-start test accuracy in [{result.metrics['acc_warm_range'][0]:.3f}, "
        f"{result.metrics['acc_warm_range'][1]:.3f}]; the label lies inside φ's α-mask (the only "
        "prompts SVDecode can turn right) for a fraction "
        f"[{result.metrics['label_in_mask_range'][0]:.2f}, "
        f"{result.metrics['label_in_mask_range'][1]:.2f}] of the test prompts",
        "information: the paper's plain-mean μ̄ gives mean Δ "
        f"{result.metrics['mean_delta_plain_mean_mu']:+.2f} points (range "
        f"{min(mean_m):+.1f}…{max(mean_m):+.1f})",
    ]
    return result
