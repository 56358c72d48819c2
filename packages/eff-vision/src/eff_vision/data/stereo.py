"""Procedural rectified stereo pairs with exact disparity, stereo corruptions, a continual domain
stream, and the tiny stereo network of RobIA's reproduction.

**Scenes** (:class:`SyntheticStereo`, numpy-vectorised over the batch and the surfaces): a slanted
background plane ``d(x, y) = a + b·x/W + c·y/H`` (disparity in ``bg_disp``, default 2–8) and
``n_objects`` fronto-parallel rectangles (disparity in ``obj_disp``, default 8 – max_disp − 1), each
surface with its own texture (``"noise"``: Gaussian-blurred white noise with a random mean and
contrast; ``"flat"``: a constant grey, the textureless hard case; ``"stripes"``: a square-wave
grating of random period and orientation — periodic along the row (ambiguous matches) or constant
along it (nothing to match), the repetitive-texture hard case). ``texture`` is one kind for every
surface, a **mix** ``{"noise": 0.7, "flat": 0.15, "stripes": 0.15}`` (each surface draws its kind
independently with these probabilities) or a callable ``texture(rng, (n, S, H, W_t)) -> array`` in
[0, 1] (surface 0 is the background; ``W_t = W + max_disp + 2`` columns). Textures live in
left-image coordinates. Both views are rendered with a **z-buffer** (the largest disparity wins), so
occlusions are real: the right view samples surface k at ``x_l = x_r + d_k`` (the background's
``x_l`` solves ``x_l − d(x_l, y) = x_r`` in closed form), with linear interpolation along the row.
Images are grey, float32 in [0, 1], shape ``(n, H, W)``; the ground truth is the left view's
disparity.

**Corruptions** (:func:`stereo_corruptions`, both views, at severity ``s``; the spec's values at
``s = 1.5`` in brackets): ``noise`` N(0, (0.08 s)²) [σ 0.12, independent per view], ``blur``
Gaussian σ = 1.2 s [1.8], ``dark`` × (1 − 0.5133 s) [× 0.23], ``fog`` ``(1 − m)·x + m·A`` with
m = 0.6 s, A = 0.8 [m 0.9]; every output clipped to [0, 1]. Two more kinds, beyond the spec's
stream *(ours)*: ``jpeg`` — OpenCV JPEG round trip of each view at quality ``round(100 − 60 s)``
(≥ 1) [10]; ``rain`` — streaks: a Poisson number of drops (mean 0.004 s per pixel) at random
depths (disparity U(0, 8) px, so the same drop lands ``d`` columns apart in the two views),
smeared along one slant per pair (U(−20°, 20°)) over ``round(4 + 4 s)`` px, blended towards 0.9
with opacity 0.6 over a scene dimmed by ``1 − 0.1 s`` [streaks 10 px, dim × 0.85].

**Stream** (:func:`stereo_stream`): the domains in order (default noise → blur → dark → fog),
``pairs_per_domain`` new scenes each, repeated ``cycles`` times; everything from ``seed``.

:class:`TinyStereoNet` (spec: about 25k parameters at D = 24): a shared 3-layer feature net (16
channels, BatchNorm), an optional module slot ``moe`` applied to the stacked left/right features
(``nn.Identity`` by default; RobIA puts its AttEx-MoE there), a correlation cost volume over D
disparities, a residual 2-D aggregation over the D channels (D → 48 → D) and soft-argmin.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_positive
from eff_shared.seeding import make_rng

__all__ = [
    "STEREO_CORRUPTIONS",
    "TEXTURES",
    "StereoBatch",
    "SyntheticStereo",
    "TinyStereoNet",
    "jpeg_quality",
    "stereo_corruptions",
    "stereo_stream",
]

STEREO_CORRUPTIONS = ("clean", "noise", "blur", "dark", "fog", "jpeg", "rain")
TEXTURES = ("noise", "flat", "stripes")
TextureFn = Callable[[np.random.Generator, tuple[int, int, int, int]], np.ndarray]
Texture = str | Mapping[str, float] | tuple[tuple[str, float], ...] | TextureFn


@dataclass(frozen=True)
class StereoBatch:
    """``left``, ``right``: ``(n, H, W)`` float32 in [0, 1]; ``disp``: left-view disparity;
    ``texture_kind``: ``(n, H, W)`` index into :data:`TEXTURES` of the texture seen at each left
    pixel (−1 for a texture callable)."""

    left: np.ndarray
    right: np.ndarray
    disp: np.ndarray
    texture_kind: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.left)

    def tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        """NCHW float tensors ``(left, right)`` and the ``(n, H, W)`` disparity."""
        return (
            torch.from_numpy(self.left[:, None].copy()),
            torch.from_numpy(self.right[:, None].copy()),
            torch.from_numpy(self.disp.copy()),
        )


@dataclass(frozen=True)
class SyntheticStereo:
    """Generator of procedural stereo scenes; every knob is a field (see the module docstring)."""

    height: int = 64
    width: int = 128
    max_disp: int = 24
    n_objects: int = 3
    texture: Texture = "noise"
    bg_disp: tuple[float, float] = (2.0, 8.0)
    obj_disp: tuple[float, float] | None = None  # None -> (8, max_disp - 1)
    obj_width: tuple[float, float] = (1 / 6, 1 / 3)  # fractions of the width
    obj_height: tuple[float, float] = (1 / 4, 1 / 2)  # fractions of the height
    texture_sigma: float = 1.2
    texture_mean: tuple[float, float] = (0.3, 0.7)
    texture_contrast: tuple[float, float] = (0.12, 0.22)
    stripe_period: tuple[float, float] = (3.0, 8.0)  # pixels, "stripes" only
    stripe_angle: tuple[float, float] = (0.0, 180.0)  # degrees; 0 = vertical stripes
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("height", "width", "max_disp"):
            check_positive(name, getattr(self, name), integer=True)
        check_positive("n_objects", self.n_objects, strict=False, integer=True)
        if self.max_disp >= self.width:
            raise ValueError(f"max_disp ({self.max_disp}) must be < width ({self.width})")
        tex = self.texture
        if isinstance(tex, str):
            check_choice("texture", tex, TEXTURES)
        elif isinstance(tex, Mapping | tuple):
            # a mix: stored as ((kind, fraction), ...) in TEXTURES order so the config stays hashable
            mix = dict(tex)
            for kind, frac in mix.items():
                check_choice("texture kind", kind, TEXTURES)
                if not (isinstance(frac, int | float) and math.isfinite(frac) and frac >= 0):
                    raise ValueError(f"texture fraction of {kind!r} must be >= 0, got {frac!r}")
            if abs(sum(mix.values()) - 1.0) > 1e-6:
                raise ValueError(f"texture fractions must sum to 1, got {sum(mix.values())!r}")
            norm = tuple((k, float(mix[k])) for k in TEXTURES if k in mix)
            object.__setattr__(self, "texture", norm)
        elif not callable(tex):
            raise TypeError(
                f"texture must be one of {list(TEXTURES)}, a mapping kind -> fraction or a "
                f"callable (rng, shape) -> array, got {type(tex).__name__}"
            )
        p_lo, p_hi = self.stripe_period
        if not 2 <= p_lo <= p_hi:
            raise ValueError(f"stripe_period must satisfy 2 <= lo <= hi, got {self.stripe_period}")
        lo, hi = self.bg_disp
        if not 0 <= lo <= hi < self.max_disp:
            raise ValueError(f"bg_disp must satisfy 0 <= lo <= hi < max_disp, got {self.bg_disp}")
        o_lo, o_hi = self.object_disparities
        if not 0 <= o_lo <= o_hi < self.max_disp:
            raise ValueError(f"obj_disp must lie in [0, max_disp), got {(o_lo, o_hi)}")

    @property
    def object_disparities(self) -> tuple[float, float]:
        return self.obj_disp if self.obj_disp is not None else (8.0, float(self.max_disp - 1))

    def _textures(
        self, rng: np.random.Generator, n: int, s: int, wt: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(n, S, H, W_t)`` textures and the ``(n, S)`` kind of each surface (TEXTURES index)."""
        h = self.height
        tex = self.texture
        if callable(tex) and not isinstance(tex, str | tuple):
            out = np.asarray(tex(rng, (n, s, h, wt)))
            if out.shape != (n, s, h, wt):
                raise ValueError(
                    f"texture callable must return shape {(n, s, h, wt)}, got {out.shape}"
                )
            if not np.issubdtype(out.dtype, np.floating) or out.min() < 0 or out.max() > 1:
                raise ValueError("texture callable must return floats in [0, 1]")
            return out.astype(np.float32), np.full((n, s), -1, np.int8)
        mean = rng.uniform(*self.texture_mean, size=(n, s, 1, 1))
        if tex == "flat":
            kinds = np.full((n, s), TEXTURES.index("flat"), np.int8)
            return np.broadcast_to(mean, (n, s, h, wt)).astype(np.float32), kinds
        if tex == "noise":  # the original single-kind path, unchanged draw for draw
            noise = self._noise(rng, (n, s, h, wt))
            contrast = rng.uniform(*self.texture_contrast, size=(n, s, 1, 1))
            kinds = np.zeros((n, s), np.int8)
            return np.clip(mean + contrast * noise, 0.0, 1.0).astype(np.float32), kinds
        if tex == "stripes":
            contrast = rng.uniform(*self.texture_contrast, size=(n, s, 1, 1))
            kinds = np.full((n, s), TEXTURES.index("stripes"), np.int8)
            return self._stripes(rng, mean, contrast, (n, s, h, wt)), kinds
        names = [k for k, _ in tex]
        kinds = np.asarray([TEXTURES.index(k) for k in names], np.int8)[
            rng.choice(len(names), size=(n, s), p=[f for _, f in tex])
        ]
        contrast = rng.uniform(*self.texture_contrast, size=(n, s, 1, 1))
        out = np.broadcast_to(mean, (n, s, h, wt)).astype(np.float32)  # flat
        is_kind = lambda name: (kinds == TEXTURES.index(name))[:, :, None, None]  # noqa: E731
        if "noise" in names:
            noisy = np.clip(mean + contrast * self._noise(rng, (n, s, h, wt)), 0.0, 1.0)
            out = np.where(is_kind("noise"), noisy.astype(np.float32), out)
        if "stripes" in names:
            striped = self._stripes(rng, mean, contrast, (n, s, h, wt))
            out = np.where(is_kind("stripes"), striped, out)
        return out, kinds

    def _noise(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Gaussian-blurred white noise, unit standard deviation per surface."""
        from scipy.ndimage import gaussian_filter

        noise = rng.normal(size=shape)
        noise = gaussian_filter(noise, sigma=(0, 0, self.texture_sigma, self.texture_sigma))
        noise /= noise.std(axis=(2, 3), keepdims=True) + 1e-12
        return noise

    def _stripes(
        self, rng: np.random.Generator, mean: np.ndarray, contrast: np.ndarray, shape: tuple
    ) -> np.ndarray:
        """Square-wave gratings ``mean ± contrast`` with a period and angle per surface."""
        n, s, h, wt = shape
        period = rng.uniform(*self.stripe_period, size=(n, s, 1, 1))
        theta = np.deg2rad(rng.uniform(*self.stripe_angle, size=(n, s, 1, 1)))
        phase = rng.uniform(0, 2 * np.pi, size=(n, s, 1, 1))
        yy = np.arange(h, dtype=np.float64)[:, None]
        xx = np.arange(wt, dtype=np.float64)[None, :]
        u = xx * np.cos(theta) + yy * np.sin(theta)  # 0° → periodic along the row
        wave = np.where(np.sin(2 * np.pi * u / period + phase) >= 0, 1.0, -1.0)
        return np.clip(mean + contrast * wave, 0.0, 1.0).astype(np.float32)

    def render(self, n: int, seed: int | None = None) -> StereoBatch:
        """``n`` independent scenes (``seed`` defaults to the generator's own)."""
        check_positive("n", n, integer=True)
        rng = make_rng(self.seed if seed is None else seed, 61)
        h, w, k = self.height, self.width, self.n_objects
        s = 1 + k
        margin = self.max_disp + 2
        wt = w + margin
        tex, kinds = self._textures(rng, n, s, wt)
        # background plane d = a + b·(x/W − ½) + c·(y/H − ½), corners inside bg_disp
        lo, hi = self.bg_disp
        mid, half = (lo + hi) / 2, (hi - lo) / 2
        a = rng.uniform(mid - half / 3, mid + half / 3, size=n)[:, None, None]
        b = rng.uniform(-2 * half / 3, 2 * half / 3, size=n)[:, None, None]
        c = rng.uniform(-2 * half / 3, 2 * half / 3, size=n)[:, None, None]
        ys = np.arange(h, dtype=np.float64)[None, :, None]
        xs = np.broadcast_to(np.arange(w, dtype=np.float64)[None, None, :], (n, h, w))
        d_bg_left = a + b * (xs / w - 0.5) + c * (ys / h - 0.5)
        # right view: x_r = x_l − d(x_l, y)  ⇒  x_l = (x_r + a − b/2 + c(y/H − ½)) / (1 − b/W)
        x_l_bg = (xs + a - b / 2 + c * (ys / h - 0.5)) / (1 - b / w)
        d_bg_right = x_l_bg - xs
        # rectangles (fronto-parallel)
        o_lo, o_hi = self.object_disparities
        dk = rng.uniform(o_lo, o_hi, size=(n, k))
        wk = np.rint(rng.uniform(*self.obj_width, size=(n, k)) * w).astype(int).clip(2, w)
        hk = np.rint(rng.uniform(*self.obj_height, size=(n, k)) * h).astype(int).clip(2, h)
        x0 = rng.integers(0, w - wk + 1)
        y0 = rng.integers(0, h - hk + 1)
        n_idx = np.arange(n)[:, None, None]
        y_idx = np.arange(h)[None, :, None]

        def inside(shift: np.ndarray) -> np.ndarray:
            """(n, k, H, W): pixel (y, x) sees rectangle j at left column x + shift_j."""
            xx = xs[:, None] + shift[:, :, None, None]
            yy = ys[:, None]
            in_y = (yy >= y0[:, :, None, None]) & (yy < (y0 + hk)[:, :, None, None])
            in_x = (xx >= x0[:, :, None, None]) & (xx < (x0 + wk)[:, :, None, None])
            return in_y & in_x

        def compose(d_bg: np.ndarray, cover: np.ndarray, x_tex: np.ndarray):
            """z-buffer over the S surfaces; ``x_tex`` (n, S, H, W) = texture column per surface."""
            disp = np.concatenate(
                [d_bg[:, None], np.where(cover, dk[:, :, None, None], -np.inf)], 1
            )
            win = disp.argmax(1)  # the closest surface (largest disparity)
            depth = np.take_along_axis(disp, win[:, None], 1)[:, 0]
            x_sel = np.take_along_axis(x_tex, win[:, None], 1)[:, 0]
            i0 = np.clip(np.floor(x_sel).astype(int), 0, wt - 2)
            f = np.clip(x_sel - i0, 0.0, 1.0)
            v0 = tex[n_idx, win, y_idx, i0]
            v1 = tex[n_idx, win, y_idx, i0 + 1]
            return ((1 - f) * v0 + f * v1).astype(np.float32), depth.astype(np.float32), win

        left, disp, win = compose(d_bg_left, inside(np.zeros((n, k))), np.repeat(xs[:, None], s, 1))
        x_right = np.concatenate([x_l_bg[:, None], xs[:, None] + dk[:, :, None, None]], 1)
        right, _, _ = compose(d_bg_right, inside(dk), x_right)
        return StereoBatch(left, right, disp, kinds[n_idx, win])


def _check_stereo_images(left: np.ndarray, right: np.ndarray) -> None:
    if left.shape != right.shape:
        raise ValueError(
            f"left and right must have the same shape, got {left.shape} and {right.shape}"
        )


def stereo_corruptions(kind: str, severity: float) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """A corruption ``f(left, right, rng) -> (left, right)`` of float images in [0, 1]."""
    check_choice("kind", kind, STEREO_CORRUPTIONS)
    check_positive("severity", severity, strict=False)
    s = float(severity)

    def apply(left: np.ndarray, right: np.ndarray, rng: np.random.Generator):
        left, right = np.asarray(left, np.float32), np.asarray(right, np.float32)
        _check_stereo_images(left, right)
        if kind == "clean":
            return left.copy(), right.copy()
        if kind == "noise":
            sig = 0.08 * s
            out = [x + rng.normal(0, sig, x.shape).astype(np.float32) for x in (left, right)]
        elif kind == "blur":
            from scipy.ndimage import gaussian_filter

            sigma = [0.0] * (left.ndim - 2) + [1.2 * s, 1.2 * s]
            out = [gaussian_filter(x, sigma=sigma, mode="nearest") for x in (left, right)]
        elif kind == "dark":
            gain = max(0.02, 1.0 - 0.5133 * s)
            out = [x * gain for x in (left, right)]
        elif kind == "fog":
            m = min(1.0, 0.6 * s)
            out = [(1 - m) * x + m * 0.8 for x in (left, right)]
        elif kind == "jpeg":
            quality = jpeg_quality(s)
            out = [_jpeg(x, quality) for x in (left, right)]
        else:  # rain
            out = list(_rain(left, right, s, rng))
        return tuple(np.clip(x, 0.0, 1.0).astype(np.float32) for x in out)

    apply.kind = kind  # type: ignore[attr-defined]
    apply.severity = s  # type: ignore[attr-defined]
    return apply


def jpeg_quality(severity: float) -> int:
    """The ``jpeg`` corruption's OpenCV quality at a severity: ``round(100 − 60 s)``, at least 1."""
    return int(min(100, max(1, round(100 - 60 * float(severity)))))


def _jpeg(x: np.ndarray, quality: int) -> np.ndarray:
    """JPEG round trip (OpenCV, grey) of every ``(H, W)`` image in ``x``."""
    import cv2

    flat = np.rint(np.clip(x, 0, 1) * 255).astype(np.uint8).reshape(-1, *x.shape[-2:])
    out = np.empty(flat.shape, np.float32)
    for i, img in enumerate(flat):
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:  # pragma: no cover - OpenCV always encodes a grey uint8 image
            raise RuntimeError("OpenCV failed to encode a JPEG")
        out[i] = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE).astype(np.float32) / 255.0
    return out.reshape(x.shape)


def _streak_kernel(length: int, angle_deg: float) -> np.ndarray:
    """A normalised-to-peak-1 line of ``length`` px at ``angle_deg`` from the vertical."""
    import cv2

    size = length + 2 - length % 2  # odd, so the line is centred
    k = np.zeros((size + 1, size + 1), np.float32)
    c = size // 2
    dx = 0.5 * (length - 1) * math.sin(math.radians(angle_deg))
    dy = 0.5 * (length - 1) * math.cos(math.radians(angle_deg))
    p0 = (round(c - dx), round(c - dy))
    p1 = (round(c + dx), round(c + dy))
    cv2.line(k, p0, p1, 1.0, 1, lineType=cv2.LINE_AA)
    return k / k.max()


def _rain(
    left: np.ndarray, right: np.ndarray, s: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Rain streaks seen by both views: each drop has its own disparity (see the module doc)."""
    import cv2

    h, w = left.shape[-2:]
    lf, rf = left.reshape(-1, h, w), right.reshape(-1, h, w)
    out_l, out_r = np.empty_like(lf), np.empty_like(rf)
    length = max(2, round(4 + 4 * s))
    dim, alpha = max(0.0, 1.0 - 0.1 * s), 0.6
    for i in range(len(lf)):
        n_drops = int(rng.poisson(0.004 * s * h * w))
        ys, xs = rng.integers(0, h, n_drops), rng.integers(0, w, n_drops)
        x_r = np.rint(xs - rng.uniform(0.0, 8.0, n_drops)).astype(int)
        kernel = _streak_kernel(length, float(rng.uniform(-20.0, 20.0)))
        for x_drop, src, dst in ((xs, lf, out_l), (x_r, rf, out_r)):
            seeds = np.zeros((h, w), np.float32)
            keep = x_drop >= 0
            seeds[ys[keep], x_drop[keep]] = 1.0
            a = alpha * np.clip(cv2.filter2D(seeds, -1, kernel), 0.0, 1.0)
            dst[i] = (1 - a) * (dim * src[i]) + a * 0.9
    return out_l.reshape(left.shape), out_r.reshape(right.shape)


def stereo_stream(
    domains: tuple[str, ...] = ("noise", "blur", "dark", "fog"),
    cycles: int = 2,
    pairs_per_domain: int = 20,
    severity: float = 1.5,
    seed: int = 0,
    scene: SyntheticStereo | None = None,
    texture_kinds: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """Yield ``(left, right, disp, domain)`` frames (each ``(H, W)``), domain by domain;
    ``texture_kinds=True`` appends the ``(H, W)`` texture kind of each left pixel
    (:attr:`StereoBatch.texture_kind`) to every frame (same frames otherwise)."""
    check_positive("cycles", cycles, integer=True)
    check_positive("pairs_per_domain", pairs_per_domain, integer=True)
    if not domains:
        raise ValueError("domains must name at least one domain")
    for d in domains:
        check_choice("domain", d, STEREO_CORRUPTIONS)
    scene = scene if scene is not None else SyntheticStereo()
    rng = make_rng(seed, 62)
    for _ in range(cycles):
        for dom in domains:
            batch = scene.render(pairs_per_domain, seed=int(rng.integers(2**31)))
            corrupt = stereo_corruptions(dom, severity)
            left, right = corrupt(batch.left, batch.right, rng)
            for i in range(pairs_per_domain):
                if texture_kinds:
                    yield left[i], right[i], batch.disp[i], dom, batch.texture_kind[i]
                else:
                    yield left[i], right[i], batch.disp[i], dom


class TinyStereoNet(nn.Module):
    """Shared features → (moe slot) → correlation cost volume → residual aggregation → soft-argmin."""

    def __init__(self, max_disp: int = 24, channels: int = 16, agg_channels: int = 48) -> None:
        super().__init__()
        check_positive("max_disp", max_disp, integer=True)
        check_positive("channels", channels, integer=True)
        self.max_disp = max_disp
        c = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c),
        )  # fmt: skip
        self.moe: nn.Module = nn.Identity()
        self.aggregate = nn.Sequential(
            nn.Conv2d(max_disp, agg_channels, 3, padding=1), nn.BatchNorm2d(agg_channels), nn.ReLU(),
            nn.Conv2d(agg_channels, max_disp, 3, padding=1),
        )  # fmt: skip
        self.register_buffer(
            "disp_values", torch.arange(max_disp, dtype=torch.float32), persistent=False
        )

    def extract(self, left: Tensor, right: Tensor) -> tuple[Tensor, Tensor]:
        """Features of both views (one batch through the shared extractor and the moe slot)."""
        if left.shape != right.shape:
            raise ValueError(
                f"left and right must have the same shape, got {tuple(left.shape)} and {tuple(right.shape)}"
            )
        if left.dim() != 4:
            raise ValueError(f"inputs must be NCHW tensors, got shape {tuple(left.shape)}")
        if self.max_disp >= left.shape[-1]:
            raise ValueError(
                f"max_disp ({self.max_disp}) must be < the image width ({left.shape[-1]})"
            )
        b = left.shape[0]
        feats = self.features(torch.cat([left, right], 0))
        if not isinstance(self.moe, nn.Identity):
            feats = self.moe(feats, views=2)
        return feats[:b], feats[b:]

    def cost_volume(self, fl: Tensor, fr: Tensor) -> Tensor:
        """``cost[:, d, y, x] = mean_c fl[:, c, y, x] · fr[:, c, y, x − d]`` (0 where x < d)."""
        w = fl.shape[-1]
        vols = [(fl * fr).mean(1)]
        for d in range(1, self.max_disp):
            vols.append(F.pad((fl[..., d:] * fr[..., : w - d]).mean(1), (d, 0)))
        return torch.stack(vols, 1)

    def forward_full(self, left: Tensor, right: Tensor) -> tuple[Tensor, Tensor]:
        """``(disparity (B, H, W), probability volume (B, D, H, W))``."""
        fl, fr = self.extract(left, right)
        cost = self.cost_volume(fl, fr)
        cost = cost + self.aggregate(cost)
        prob = cost.softmax(1)
        disp = (prob * self.disp_values.to(prob.dtype)[None, :, None, None]).sum(1)
        return disp, prob

    def forward(self, left: Tensor, right: Tensor) -> Tensor:
        return self.forward_full(left, right)[0]


def render_dataset(scene: SyntheticStereo, n: int, seed: int, chunk: int = 64) -> dict[str, Any]:
    """Pre-render ``n`` clean pairs (in chunks) as a dict of arrays (cache it as ``.npz``)."""
    parts = [scene.render(min(chunk, n - i), seed=seed * 1000 + i) for i in range(0, n, chunk)]
    return {
        "left": np.concatenate([p.left for p in parts]),
        "right": np.concatenate([p.right for p in parts]),
        "disp": np.concatenate([p.disp for p in parts]),
    }
