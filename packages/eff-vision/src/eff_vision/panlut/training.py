"""Training and evaluation of pan-sharpeners under the synthetic Wald protocol.

Training (spec "Models and training"): batches of random HR patches (origins on multiples of R,
random horizontal flip) of the training images, degraded on the fly by ``wald_degrade`` (its noise
seeded per step and patch); Adam with cosine decay; L1 loss (the official config's loss; its FFT
loss is off). Evaluation: the Wald reduced-resolution metrics (PSNR, SAM, ERGAS, Q) against the
ground truth and the full-resolution D_λ, D_s and QNR against the inputs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from eff_shared.errors import check_int
from eff_shared.progress import track
from eff_shared.seeding import derive_seed, make_rng
from eff_vision.data.pansharpen import wald_degrade
from eff_vision.metrics import pansharpen as M

__all__ = ["PanTrainConfig", "evaluate", "sample_batch", "train_pansharpener"]


@dataclass(frozen=True)
class PanTrainConfig:
    """Training settings. The degradation of the training patches is the sensor model the
    pan-sharpener learns to invert; set it to the target sensor's: ``pan_weights`` (the PAN
    spectral response, one weight per MS band), ``pan_nonlinearity`` (the weight of the
    sqrt(first·last band) term), ``mtf_gain`` (MS MTF gain at the LR Nyquist frequency) and
    ``noise`` (std on PAN and MS); the defaults are :func:`wald_degrade`'s."""

    steps: int = 600
    batch: int = 4
    patch: int = 48
    lr: float = 1e-2
    ratio: int = 4
    hflip: bool = True
    seed: int = 0
    pan_weights: tuple[float, ...] = (0.25, 0.45, 0.30)
    pan_nonlinearity: float = 0.3
    mtf_gain: float = 0.3
    noise: float = 0.005

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "patch", "ratio"):
            check_int(name, getattr(self, name), minimum=1)
        if self.patch % self.ratio:
            raise ValueError(
                f"patch must be a multiple of ratio, got {self.patch} and {self.ratio}"
            )
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        w = self.pan_weights
        if (
            not isinstance(w, tuple)
            or not w
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in w)
        ):
            raise ValueError(
                f"pan_weights must be a non-empty tuple of finite floats (one per band), got {w!r}"
            )
        if not (
            isinstance(self.pan_nonlinearity, int | float) and math.isfinite(self.pan_nonlinearity)
        ):
            raise ValueError(
                f"pan_nonlinearity must be a finite float, got {self.pan_nonlinearity!r}"
            )
        if not 0 < self.mtf_gain < 1:
            raise ValueError(f"mtf_gain must lie in (0, 1), got {self.mtf_gain!r}")
        if not self.noise >= 0:
            raise ValueError(f"noise must be >= 0, got {self.noise!r}")


def sample_batch(
    images: list[np.ndarray], cfg: PanTrainConfig, step: int
) -> tuple[Tensor, Tensor, Tensor]:
    """(ms_lr [B, C, p/R, p/R], pan [B, 1, p, p], gt [B, C, p, p]) for training step ``step``."""
    rng = make_rng(cfg.seed, 71, step)
    r, p = cfg.ratio, cfg.patch
    ms_l, pan_l, gt_l = [], [], []
    for i in range(cfg.batch):
        img = images[int(rng.integers(len(images)))]
        h, w = img.shape[:2]
        y = r * int(rng.integers(0, (h - p) // r + 1))
        x = r * int(rng.integers(0, (w - p) // r + 1))
        gt = img[y : y + p, x : x + p]
        if cfg.hflip and rng.random() < 0.5:
            gt = gt[:, ::-1]
        gt = np.ascontiguousarray(gt)
        ms, pan = wald_degrade(
            gt, r, mtf_gain=cfg.mtf_gain, pan_weights=cfg.pan_weights,
            pan_nonlinearity=cfg.pan_nonlinearity, noise=cfg.noise,
            seed=derive_seed(cfg.seed, step, i),
        )  # fmt: skip
        ms_l.append(ms)
        pan_l.append(pan)
        gt_l.append(gt)
    to_t = lambda a: torch.from_numpy(np.stack(a)).permute(0, 3, 1, 2).contiguous()  # noqa: E731
    return to_t(ms_l), torch.from_numpy(np.stack(pan_l))[:, None], to_t(gt_l)


def train_pansharpener(
    model: nn.Module,
    images: list[np.ndarray],
    cfg: PanTrainConfig,
    extra_loss: Callable[[], Tensor] | None = None,
) -> dict[str, Any]:
    """Adam + cosine decay on the L1 loss; returns the loss history and the training time. A
    Pan-LUT trains with its fast ``grid`` lookups (its default ``gather`` path is restored)."""
    torch.manual_seed(cfg.seed)
    impl = getattr(model, "impl", None)
    if impl is not None:
        model.impl = "grid"
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps))
    )
    history = []
    model.train()
    t0 = time.perf_counter()
    for step in track(range(cfg.steps), "Pan-LUT training (steps)"):
        ms, pan, gt = sample_batch(images, cfg, step)
        opt.zero_grad(set_to_none=True)
        loss = (model(ms, pan) - gt).abs().mean()
        if extra_loss is not None:
            loss = loss + extra_loss()
        loss.backward()
        opt.step()
        sched.step()
        history.append(float(loss.detach()))
    seconds = time.perf_counter() - t0
    model.eval()
    if impl is not None:
        model.impl = impl
    return {"history": history, "seconds": seconds}


def evaluate(
    fused: np.ndarray, gt: np.ndarray, ms_lr: np.ndarray, pan: np.ndarray, ratio: int = 4
) -> dict[str, float]:
    """Reduced-resolution PSNR, SAM, ERGAS, Q (vs ``gt``) and full-resolution D_λ, D_s, QNR."""
    out = {
        "PSNR": M.psnr(gt, fused), "SAM": M.sam(gt, fused), "ERGAS": M.ergas(gt, fused, ratio),
        "Q": M.q_index(gt, fused, 32),
    }  # fmt: skip
    full = M.qnr(fused, ms_lr, pan, ratio, block=32)
    out.update({"D_λ": full["d_lambda"], "D_s": full["d_s"], "QNR": full["qnr"]})
    return out
