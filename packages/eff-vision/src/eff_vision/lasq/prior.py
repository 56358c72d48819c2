"""LASQ part 1: the training-free luminance prior ``enhance_with_gamma`` (official
``models/Gamma_Diff.py``, read in full; spec "LASQ — Algorithm (from the code)").

For I ∈ [0, 1]^{H×W×3}:

1. illumination L = mean over σ ∈ {20, 50, 150, 250} of Gaussian blur(I, σ) (kernel 4σ+1 capped at
   min(H, W), kept odd; per channel);
2. power-law base gamma map γ₀ = (3.5 + L)^(2L − 1);
3. Metropolis refinement of the whole map as one state: γ' = clip(γ + 0.03·N(0, 1), 0.3, 3.5)
   (per-pixel noise), accepted with probability exp(−(E(γ') − E(γ))/T), T = 0.02, with
   E = |mean(I^γ) − 0.55| + 0.1·TV(γ) + 0.1·|Σ|∇I| − Σ|∇I^γ||;
4. "luminance layers": average-pool γ on a g×g grid, g = int(sqrt(num_regions)), nearest upsampling
   (per pixel when num_regions ≥ H·W); I^γ·255 and a 3×3 bilateral filter (σ = 45);
5. colour denoising (YUV, 5×5 Gaussian σ = 1 on U, V), MSRCR (σ = 15, 80, 250) of I·255 + 1, and the
   "wavelet fusion" 0.64·gamma image + 0.36·MSRCR: the official 1-level Haar DWT with the same weights
   on every sub-band is linear and perfectly reconstructing, so it **is** this pixelwise convex
   combination (implemented as one); final 3×3 bilateral filter, /255.

What the abstract gets wrong: the "power-law distribution / stratified power functions" are this
explicit gamma map plus grid pooling, and the "statistical sampling" is the Metropolis walk.
kornia (blur, bilateral, YUV) is replaced by OpenCV/numpy with kornia's border handling; the only
difference is float32 blurs (kornia runs in the input dtype).
"""

from __future__ import annotations

import math

import numpy as np

from eff_shared.errors import check_int, check_positive
from eff_vision.lasq._ops import bilateral3, color_denoise, gaussian_blur, msrcr

__all__ = ["LASQPrior", "check_rgb", "gamma_energy", "partition"]


def check_rgb(name: str, img: object) -> np.ndarray:
    """An H×W×3 image, uint8 or float in [0, 1], at least 8 px per side → float64 in [0, 1]."""
    from eff_vision.data.images import check_image

    return check_image(name, img, channels=(3,), min_side=8).astype(np.float64)


def gamma_energy(gamma: np.ndarray, img: np.ndarray, exposure: float = 0.55) -> float:
    """E(γ) = |mean(clip(I^γ)) − exposure| + 0.1·TV(γ) + 0.1·|Σ|∇I| − Σ|∇I^γ||."""
    enh = np.clip(np.power(img, gamma), 0.0, 1.0)
    exposure_loss = abs(float(enh.mean()) - exposure)
    smooth = float(np.abs(np.diff(gamma, axis=0)).mean() + np.abs(np.diff(gamma, axis=1)).mean())
    g_in = float(np.abs(np.diff(img, axis=0)).mean() + np.abs(np.diff(img, axis=1)).mean())
    g_out = float(np.abs(np.diff(enh, axis=0)).mean() + np.abs(np.diff(enh, axis=1)).mean())
    return exposure_loss + 0.1 * smooth + 0.1 * abs(g_in - g_out)


def partition(gamma: np.ndarray, num_regions: int) -> np.ndarray:
    """Average-pool γ (H×W×C) on a g×g grid (g = int(sqrt(num_regions)); kernel = stride =
    (H//g, W//g), as ``F.avg_pool2d``) and upsample by nearest neighbour (``F.interpolate``);
    ``num_regions ≥ H·W`` returns γ unchanged."""
    check_int("num_regions", num_regions, minimum=1)
    h, w = gamma.shape[:2]
    if num_regions >= h * w:
        return gamma.copy()
    g = max(1, int(math.sqrt(num_regions)))
    ph, pw = max(1, h // g), max(1, w // g)
    nh, nw = h // ph, w // pw
    pooled = gamma[: nh * ph, : nw * pw].reshape(nh, ph, nw, pw, -1).mean(axis=(1, 3))
    rows = np.minimum((np.arange(h) * (nh / h)).astype(np.int64), nh - 1)
    cols = np.minimum((np.arange(w) * (nw / w)).astype(np.int64), nw - 1)
    return pooled[rows][:, cols].reshape(gamma.shape)


class LASQPrior:
    """The training-free LASQ prior (see the module docstring). ``seed`` seeds the Metropolis walk
    (``None`` = 0); same seed ⇒ same output."""

    def __init__(
        self,
        mcmc_steps: int = 100,
        mcmc_std: float = 0.03,
        mcmc_temp: float = 0.02,
        exposure: float = 0.55,
        sigmas: tuple[float, ...] = (20, 50, 150, 250),
        fuse_weight: float = 0.64,
        seed: int | None = None,
    ) -> None:
        check_positive("mcmc_steps", mcmc_steps, strict=False, integer=True)
        check_positive("mcmc_std", mcmc_std, strict=False)
        if not isinstance(mcmc_temp, int | float) or not mcmc_temp > 0:
            raise ValueError(f"mcmc_temp must be > 0, got {mcmc_temp!r}")
        if not 0 <= fuse_weight <= 1:
            raise ValueError(f"fuse_weight must lie in [0, 1], got {fuse_weight!r}")
        if not sigmas:
            raise ValueError("sigmas must not be empty")
        self.mcmc_steps, self.mcmc_std, self.mcmc_temp = mcmc_steps, mcmc_std, float(mcmc_temp)
        self.exposure, self.sigmas, self.fuse_weight = exposure, tuple(sigmas), fuse_weight
        self.seed = 0 if seed is None else seed
        self.last_energies: list[float] = []
        self.last_acceptance = 0.0

    def illumination(self, img: np.ndarray) -> np.ndarray:
        x = check_rgb("img", img)
        h, w = x.shape[:2]
        blurs = []
        for s in self.sigmas:
            k = min(int(4 * s + 1), min(h, w))
            if k % 2 == 0:
                k -= 1
            blurs.append(gaussian_blur(x, k, float(s)))
        return np.mean(blurs, axis=0)

    def base_gamma(self, img: np.ndarray) -> np.ndarray:
        """γ₀ = (3.5 + L)^(2L − 1), per pixel and channel."""
        lum = self.illumination(img)
        return np.power(3.5 + lum, 2.0 * lum - 1.0)

    def refine(self, img: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        """The Metropolis walk on the whole γ map (records ``last_energies``, ``last_acceptance``)."""
        x = check_rgb("img", img)
        if gamma.shape != x.shape:
            raise ValueError(f"gamma must have the image's shape {x.shape}, got {gamma.shape}")
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 61]))
        cur = gamma.astype(np.float64).copy()
        e_cur = gamma_energy(cur, x, self.exposure)
        energies, accepted = [e_cur], 0
        for _ in range(self.mcmc_steps):
            prop = np.clip(cur + self.mcmc_std * rng.standard_normal(cur.shape), 0.3, 3.5)
            e_new = gamma_energy(prop, x, self.exposure)
            delta = e_new - e_cur
            u = rng.random()
            if delta <= 0 or u < math.exp(-delta / self.mcmc_temp):
                cur, e_cur = prop, e_new
                accepted += 1
            energies.append(e_cur)
        self.last_energies = energies
        self.last_acceptance = accepted / max(1, self.mcmc_steps)
        return cur

    def gamma_map(self, img: np.ndarray) -> np.ndarray:
        """The refined γ map (base map, then the Metropolis walk)."""
        return self.refine(img, self.base_gamma(img))

    def gamma_image(
        self, img: np.ndarray, gamma: np.ndarray, num_regions: int | None
    ) -> np.ndarray:
        """Step 4: bilateral(clip(I^partition(γ)·255)) on the 0–255 scale."""
        x = check_rgb("img", img)
        n = x.shape[0] * x.shape[1] if num_regions is None else num_regions
        g = partition(gamma, n)
        return bilateral3(np.clip(np.power(x, g) * 255.0, 0.0, 255.0))

    def fuse(self, gamma_img255: np.ndarray, msrcr255: np.ndarray) -> np.ndarray:
        """The official Haar "wavelet fusion": exactly w·a + (1 − w)·b, clamped to 0–255."""
        w = self.fuse_weight
        return np.clip(w * gamma_img255 + (1.0 - w) * msrcr255, 0.0, 255.0)

    def enhance(self, img: np.ndarray, num_regions: int | None = None) -> np.ndarray:
        """The enhanced image (float32 H×W×3 in [0, 1]); ``num_regions=None`` = per pixel."""
        x = check_rgb("img", img)
        _check_regions(num_regions)
        return self._finish(x, self.gamma_map(x), msrcr(x * 255.0), num_regions)

    def _finish(
        self, x: np.ndarray, gamma: np.ndarray, msr: np.ndarray, num_regions: int | None
    ) -> np.ndarray:
        gimg = color_denoise(self.gamma_image(x, gamma, num_regions))
        fused = self.fuse(gimg, msr)
        return np.clip(bilateral3(fused) / 255.0, 0.0, 1.0).astype(np.float32)

    def layers(self, img: np.ndarray, n_layers: int = 10) -> list[np.ndarray]:
        """The luminance layers used as diffusion targets: ``enhance(img, 2**i)``, i < n_layers
        (the γ map and MSRCR are computed once)."""
        check_positive("n_layers", n_layers, integer=True)
        x = check_rgb("img", img)
        gamma, msr = self.gamma_map(x), msrcr(x * 255.0)
        return [self._finish(x, gamma, msr, 2**i) for i in range(n_layers)]


def _check_regions(num_regions: object) -> None:
    if num_regions is not None:
        check_int("num_regions", num_regions, minimum=1)
