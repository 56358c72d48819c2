"""Reproduction ``vision.lasq``: the training-free LASQ prior vs classic low-light baselines on
synthetic low light made from scikit-image's bundled images.

Data (spec): astronaut, coffee, chelsea, rocket, immunohistochemistry, resized to a maximum side of
256 with even dimensions; ``low = clip(α·gt^γ + N(0, σ²))`` with α = 0.4, γ = 2, σ = 0.01 (noise seed
derived from the run seed and the image index). Metrics: PSNR and SSIM (scikit-image,
``channel_axis=2, data_range=1``) averaged over the images. Baselines: automatic global gamma,
CLAHE on L of Lab, HE on Y, gamma + CLAHE, MSRCR. The learned student (CTDN + DDPM) runs as a smoke
test only (16 channels, T = 100, 10 DDIM steps, 64² patches).

Honest reading (spec): the prior wins SSIM clearly, but automatic gamma wins PSNR because the
synthetic degradation is itself a global power law; the table prints every row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed, make_rng
from eff_vision.data.images import sample_image
from eff_vision.data.lowlight import synthetic_low_light
from eff_vision.lasq._ops import msrcr as msrcr255
from eff_vision.lasq.baselines import BASELINES
from eff_vision.lasq.prior import LASQPrior, gamma_energy, partition
from eff_vision.metrics.image import psnr, ssim

__all__ = ["IMAGES", "LASQReproConfig", "experiment", "haar_fusion", "run", "smoke_learned"]

IMAGES = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry")


@dataclass(frozen=True)
class LASQReproConfig:
    images: tuple[str, ...] = IMAGES
    max_side: int = 256
    alpha: float = 0.4
    gamma: float = 2.0
    sigma: float = 0.01
    nonuniform: bool = False
    regions: int = 16
    smoke_pretrain_steps: int = 30
    smoke_steps: int = 40

    def __post_init__(self) -> None:
        if not self.images:
            raise ValueError("images must not be empty")
        check_int("regions", self.regions, minimum=1)


def experiment(cfg: LASQReproConfig, seed: int) -> dict[str, Any]:
    scores: dict[str, list[tuple[float, float]]] = {}
    times: dict[str, float] = {}
    pixels = 0
    gammas, low_first = [], None
    for idx, name in enumerate(cfg.images):
        gt = sample_image(name, multiple_of=2, max_side=cfg.max_side)
        low = synthetic_low_light(
            gt, cfg.alpha, cfg.gamma, cfg.sigma, cfg.nonuniform, seed=derive_seed(seed, idx)
        )
        low_first = low if low_first is None else low_first
        pixels += gt.shape[0] * gt.shape[1]
        outs: dict[str, np.ndarray] = {}
        for label, fn in BASELINES.items():
            t0 = time.perf_counter()
            outs[label] = fn(low)
            times[label] = times.get(label, 0.0) + time.perf_counter() - t0
        prior = LASQPrior(seed=derive_seed(seed, idx))
        x = low.astype(np.float64)
        t0 = time.perf_counter()
        gamma = prior.gamma_map(x)
        msr = msrcr255(x * 255.0)
        shared = time.perf_counter() - t0
        gammas.append(gamma)
        for label, regions in (
            ("LASQ prior, per pixel", None),
            (f"LASQ prior, {cfg.regions} regions", cfg.regions),
        ):
            t0 = time.perf_counter()
            outs[label] = prior._finish(x, gamma, msr, regions)
            times[label] = times.get(label, 0.0) + shared + time.perf_counter() - t0
        for label, out in outs.items():
            scores.setdefault(label, []).append((psnr(gt, out), ssim(gt, out)))
    rows = [
        {"method": label, "PSNR": float(np.mean([p for p, _ in v])),
         "SSIM": float(np.mean([s for _, s in v])), "ms/MP": 1e3 * times[label] / (pixels / 1e6)}
        for label, v in scores.items()
    ]  # fmt: skip
    return {"rows": rows, "gammas": gammas, "low": low_first}


def haar_fusion(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    """The official fusion written out: 1-level Haar DWT of both images (per channel), the same
    weight on every sub-band, inverse DWT (H, W even). Used to check that it equals w·a + (1−w)·b."""

    def dwt(x: np.ndarray) -> tuple[np.ndarray, ...]:
        p, q = x[0::2, 0::2], x[0::2, 1::2]
        r, s = x[1::2, 0::2], x[1::2, 1::2]
        return (p + q + r + s) / 2, (p - q + r - s) / 2, (p + q - r - s) / 2, (p - q - r + s) / 2

    def idwt(ll, lh, hl, hh) -> np.ndarray:
        out = np.empty((2 * ll.shape[0], 2 * ll.shape[1], *ll.shape[2:]))
        out[0::2, 0::2] = (ll + lh + hl + hh) / 2
        out[0::2, 1::2] = (ll - lh + hl - hh) / 2
        out[1::2, 0::2] = (ll + lh - hl - hh) / 2
        out[1::2, 1::2] = (ll - lh - hl + hh) / 2
        return out

    bands = [w * x + (1 - w) * y for x, y in zip(dwt(a), dwt(b), strict=True)]
    return np.clip(idwt(*bands), 0.0, 255.0)


def smoke_learned(pretrain_steps: int, steps: int, seed: int) -> dict[str, Any]:
    """CTDN + DDPM at smoke scale on 64² patches of one synthetic low-light image (unpaired
    normal-light patches from another image): loss history and whether the output is finite."""
    import torch

    from eff_vision.lasq.model import LASQConfig, LASQModel

    cfg = LASQConfig(
        ctdn_channels=16, unet_channels=16, ch_mult=(1, 2), num_res_blocks=1, timesteps=100,
        sampling_steps=10, lr=1e-3, prior_mcmc_steps=20, seed=seed,
    )  # fmt: skip
    model = LASQModel(cfg)
    low = synthetic_low_light(sample_image("astronaut", max_side=128), seed=seed)
    normal = sample_image("coffee", max_side=128)
    rng = make_rng(seed, 62)

    def patches(img: np.ndarray, n: int, size: int = 64):
        out = []
        for _ in range(n):
            y = int(rng.integers(0, img.shape[0] - size + 1))
            x = int(rng.integers(0, img.shape[1] - size + 1))
            out.append(img[y : y + size, x : x + size])
        return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).float().contiguous()

    recon = [float(model.pretrain_step(patches(low, 2))["recon"]) for _ in range(pretrain_steps)]
    hist = [
        float(model.training_step(patches(low, 2), patches(normal, 2))["total"])
        for _ in range(steps)
    ]
    out = model.enhance(patches(low, 1), steps=10)
    k = max(1, min(10, steps // 4))
    return {
        "recon": recon, "loss": hist, "first": float(np.mean(hist[:k])),
        "last": float(np.mean(hist[-k:])), "finite": bool(torch.isfinite(out).all()),
    }  # fmt: skip


def _mechanics(low: np.ndarray, gammas: list[np.ndarray], seed: int) -> dict[str, float]:
    g = gammas[0]
    one = partition(g, 1)
    global_dev = float(np.abs(one - g.mean(axis=(0, 1), keepdims=True)).max())
    cold = LASQPrior(mcmc_temp=1e-12, mcmc_steps=60, seed=seed)
    cold.refine(low, cold.base_gamma(low))
    e = cold.last_energies
    rng = make_rng(seed, 63)
    a, b = rng.uniform(0, 255, (32, 48, 3)), rng.uniform(0, 255, (32, 48, 3))
    prior = LASQPrior(seed=seed)
    fusion_err = float(np.abs(prior.fuse(a, b) - haar_fusion(a, b, prior.fuse_weight)).max())
    small = low[:64, :64]
    r1 = LASQPrior(seed=seed, mcmc_steps=30).enhance(small)
    r2 = LASQPrior(seed=seed, mcmc_steps=30).enhance(small)
    r3 = LASQPrior(seed=seed + 1, mcmc_steps=30).enhance(small)
    return {
        "gamma_min": float(min(x.min() for x in gammas)),
        "gamma_max": float(max(x.max() for x in gammas)),
        "global_dev": global_dev,
        "cold_max_increase": float(max(np.diff(e).max(), 0.0) if len(e) > 1 else 0.0),
        "cold_energy_drop": float(e[0] - e[-1]),
        "base_energy": float(gamma_energy(cold.base_gamma(low), low.astype(np.float64))),
        "fusion_err": fusion_err,
        "same_seed_diff": float(np.abs(r1 - r2).max()),
        "other_seed_diff": float(np.abs(r1 - r3).max()),
    }


PAPER = ("LOL / LSRW-style benchmarks: unsupervised LASQ beats classic and unsupervised low-light "
         "enhancement in PSNR and SSIM (numbers not retrieved)")  # fmt: skip


def _one_seed(cfg: LASQReproConfig, seed: int) -> dict[str, Any]:
    """Every method on the low-light images of one seed (the seed draws the noise)."""
    out = experiment(cfg, seed)
    rows = {r["method"]: r for r in out["rows"]}
    regions = f"LASQ prior, {cfg.regions} regions"
    per_pixel = rows["LASQ prior, per pixel"]["PSNR"]
    return {
        "out": out, "rows": rows,
        "ssim": rows[regions]["SSIM"] - max(rows[b]["SSIM"] for b in BASELINES),
        "psnr_weak": per_pixel - max(rows[b]["PSNR"] for b in ("CLAHE", "HE", "MSRCR")),
        "psnr_all": per_pixel - max(rows[b]["PSNR"] for b in BASELINES),
    }  # fmt: skip


def run(mode: Mode = "quick", seed: int = 0, cfg: LASQReproConfig | None = None) -> Result:
    """Paper claims over seeds (quick: 1 seed; full: seeds seed..seed+4; the seed draws the
    low-light noise); the prior's mechanics and the learned student's smoke test are checks.
    ``cfg`` (default: the mode's) replaces the configuration; ``mode`` still picks the seeds."""
    check_choice("mode", mode, ["quick", "full"])
    if cfg is None:
        cfg = LASQReproConfig(
            smoke_pretrain_steps=60 if mode == "full" else 30,
            smoke_steps=300 if mode == "full" else 40,
        )
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {s: _one_seed(cfg, s) for s in seeds}
    out, rows = per[seed]["out"], per[seed]["rows"]
    result = Result(
        name="vision.lasq", mode=mode, seed=seed,
        paper_title="LASQ: Unsupervised Hierarchical Learning for Illumination Enhancement",
        headline="a training-free luminance-adaptive prior (power-law γ map, MCMC refinement, "
        "hierarchical luminance layers) guides an unsupervised diffusion student that beats unsupervised "
        "low-light enhancement methods in PSNR and SSIM (numbers not retrieved)",
    )  # fmt: skip
    result.table = out["rows"]
    regions = f"LASQ prior, {cfg.regions} regions"
    mech = _mechanics(out["low"], out["gammas"], seed)
    smoke = smoke_learned(cfg.smoke_pretrain_steps, cfg.smoke_steps, seed)
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731
    result.claims += [
        paper_claim(f"SSIM({regions}) − max SSIM of all baselines", vals("ssim"), 0.05, ">=", seeds=seeds,
                    paper=PAPER, headline=True),
        paper_claim("PSNR(LASQ prior, per pixel) − max PSNR(CLAHE, HE, MSRCR), dB", vals("psnr_weak"), 1.0, ">=",
                    seeds=seeds, paper=PAPER),
        paper_claim("PSNR(LASQ prior, per pixel) − max PSNR of all baselines (automatic gamma included), dB",
                    vals("psnr_all"), 0.0, ">=", seeds=seeds, paper=PAPER, headline=True, expected="xfail",
                    reason="the synthetic degradation is itself a global power law, so automatic gamma wins "
                    "PSNR (seed 0: 17.81 vs 16.05 dB)"),
        Claim("refined γ map: minimum over the images", mech["gamma_min"], 0.3, ">="),
        Claim("refined γ map: maximum over the images", mech["gamma_max"], 3.5, "<="),
        Claim("partition(γ, 1) vs the per-channel global mean γ, max abs difference", mech["global_dev"], 1e-12, "<="),
        Claim("MCMC at temperature 1e-12: largest energy increase over 60 steps", mech["cold_max_increase"], 0.0, "<="),
        Claim("fusion vs the official 1-level Haar DWT fusion, max abs difference (0–255)", mech["fusion_err"], 1e-6, "<="),
        Claim("same seed ⇒ same output: max abs difference of two runs", mech["same_seed_diff"], 0.0, "<="),
        Claim("learned model smoke test: mean loss of the last / first steps", smoke["last"] / smoke["first"], 1.0, "<"),
        Claim("learned model smoke test: output finite (1 = yes)", float(smoke["finite"]), 1.0, ">="),
    ]  # fmt: skip
    result.metrics = {
        "best_baseline_psnr": max(rows[b]["PSNR"] for b in BASELINES),
        "auto_gamma_minus_prior_psnr": rows["auto gamma"]["PSNR"] - rows["LASQ prior, per pixel"]["PSNR"],
        "mechanics": mech, "smoke_first_loss": smoke["first"], "smoke_last_loss": smoke["last"],
        "seeds": seeds,
        "per_seed": {str(s): {k: per[s][k] for k in ("ssim", "psnr_weak", "psnr_all")} for s in seeds},
    }  # fmt: skip
    result.add_series(
        "lasq_smoke_loss",
        {"x": list(range(len(smoke["loss"]))), "total": smoke["loss"]},
        title="LASQ learned student (CTDN + DDPM), smoke-test training loss",
        xlabel="training step",
        ylabel="total training loss",
    )
    result.notes += [
        f"Automatic gamma has the best PSNR ({rows['auto gamma']['PSNR']:.2f} dB vs the prior's "
        f"{rows['LASQ prior, per pixel']['PSNR']:.2f} dB): the synthetic degradation is itself a "
        "global power law (spec: the paper's PSNR claim is not expected to hold here).",
        "The learned CTDN + DDPM student runs only as a smoke test (the paper trains it for 2500 "
        "epochs on 4 GPUs); no quality threshold.",
        f"Seeds {seeds} change only the noise of the synthetic low light (the table is seed {seed}).",
    ]
    return result
