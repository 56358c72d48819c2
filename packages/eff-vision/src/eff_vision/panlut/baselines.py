"""Pan-sharpening baselines (spec "Reproduction (vision.panlut)").

Classic (numpy, H×W×B float images): EXP (bicubic upsampling, clamped), Brovey (ratio
substitution), IHS (fast IHS; PAN histogram-matched to the intensity by mean and std) and GSA
(Gram–Schmidt adaptive, Aiazzi et al.: intensity weights by least-squares regression of the degraded
PAN on the LR MS plus a constant; injection gains cov(MS_b, I)/var(I)). Outputs are clipped to [0, 1].

Learned: :class:`PNN` — ``variant="lite"`` (conv 4→32 5×5 → ReLU → 16 3×3 → ReLU → B 3×3, ~8.3K
parameters for B = 3) and ``variant="full"`` (PNN, Masi et al. 2016: 9-5-5 kernels, 64/32
channels), both residual on the upsampled MS (input = concat(upsampled MS, PAN)).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from eff_vision.data.pansharpen import degrade_pan

__all__ = ["PNN", "bicubic", "brovey", "gsa", "ihs"]


def _pan2d(pan: np.ndarray) -> np.ndarray:
    pan = np.asarray(pan, np.float64)
    return pan[:, :, 0] if pan.ndim == 3 else pan


def bicubic(ms_lr: np.ndarray, ratio: int = 4) -> np.ndarray:
    """EXP: bicubic upsampling (``interpolate(..., "bicubic", align_corners=False)``), clamped."""
    from eff_vision.panlut.lut import bicubic_upsample

    t = torch.from_numpy(np.ascontiguousarray(ms_lr, np.float32)).permute(2, 0, 1)[None]
    return bicubic_upsample(t, ratio)[0].permute(1, 2, 0).numpy().astype(np.float64)


def brovey(ms_up: np.ndarray, pan: np.ndarray) -> np.ndarray:
    """Brovey: F_b = MS_b · PAN / mean_b(MS_b)."""
    p = _pan2d(pan)
    intensity = ms_up.mean(-1)
    return np.clip(ms_up * (p / np.maximum(intensity, 1e-6))[:, :, None], 0.0, 1.0)


def ihs(ms_up: np.ndarray, pan: np.ndarray) -> np.ndarray:
    """Fast IHS: F = MS + (P' − I), I = mean_b(MS), P' = PAN matched to I by mean and std."""
    p = _pan2d(pan)
    intensity = ms_up.mean(-1)
    matched = (p - p.mean()) * (intensity.std() / max(p.std(), 1e-12)) + intensity.mean()
    return np.clip(ms_up + (matched - intensity)[:, :, None], 0.0, 1.0)


def gsa(ms_up: np.ndarray, pan: np.ndarray, ms_lr: np.ndarray, ratio: int = 4) -> np.ndarray:
    """GSA: I = Σ_b w_b·MS_b + c with (w, c) regressing the degraded PAN on the LR MS; PAN matched
    to I by mean and std; F_b = MS_b + g_b·(P' − I), g_b = cov(MS_b, I) / var(I)."""
    p = _pan2d(pan)
    p_lr = degrade_pan(p, ratio).astype(np.float64)
    design = np.concatenate([ms_lr.reshape(-1, ms_lr.shape[2]), np.ones((p_lr.size, 1))], axis=1)
    coef, *_ = np.linalg.lstsq(design, p_lr.reshape(-1), rcond=None)
    intensity = ms_up @ coef[:-1] + coef[-1]
    matched = (p - p.mean()) * (intensity.std() / max(p.std(), 1e-12)) + intensity.mean()
    ic = intensity - intensity.mean()
    gains = np.array(
        [((ms_up[:, :, b] - ms_up[:, :, b].mean()) * ic).mean() / max(ic.var(), 1e-12)
         for b in range(ms_up.shape[2])]
    )  # fmt: skip
    return np.clip(ms_up + gains * (matched - intensity)[:, :, None], 0.0, 1.0)


class PNN(nn.Module):
    """PNN pan-sharpener, residual on the upsampled MS: out = clamp(MS_up + net([MS_up, PAN]))."""

    def __init__(
        self, n_bands: int, variant: Literal["lite", "full"] = "lite", ratio: int = 4
    ) -> None:
        super().__init__()
        if variant not in ("lite", "full"):
            raise ValueError(f"variant must be one of ['lite', 'full'], got {variant!r}")
        c = n_bands + 1
        k, ch = ((5, 3, 3), (32, 16)) if variant == "lite" else ((9, 5, 5), (64, 32))
        self.net = nn.Sequential(
            nn.Conv2d(c, ch[0], k[0], padding=k[0] // 2), nn.ReLU(),
            nn.Conv2d(ch[0], ch[1], k[1], padding=k[1] // 2), nn.ReLU(),
            nn.Conv2d(ch[1], n_bands, k[2], padding=k[2] // 2),
        )  # fmt: skip
        self.n_bands, self.ratio, self.variant = n_bands, ratio, variant
        self.halo = sum(kk // 2 for kk in k)

    def fuse(self, ms_up: Tensor, pan: Tensor) -> Tensor:
        return torch.clamp(ms_up + self.net(torch.cat([ms_up, pan], 1)), 0, 1)

    def forward(self, ms: Tensor, pan: Tensor, upsample: bool = True) -> Tensor:
        from eff_vision.panlut.lut import bicubic_upsample

        ms_up = bicubic_upsample(ms, self.ratio) if upsample else ms
        return self.fuse(ms_up, pan)

    def macs_per_pixel(self) -> int:
        return sum(
            m.in_channels * m.out_channels * m.kernel_size[0] * m.kernel_size[1]
            for m in self.net
            if isinstance(m, nn.Conv2d)
        )

    @torch.no_grad()
    def predict_tiled(
        self, ms_lr: np.ndarray, pan: np.ndarray, tile: int = 512, out=None
    ) -> np.ndarray:
        from eff_vision.panlut.lut import tiled_predict

        return tiled_predict(self, self.fuse, ms_lr, pan, tile, out)
