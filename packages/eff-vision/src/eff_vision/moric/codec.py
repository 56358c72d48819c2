"""MoRIC: a modular region-based implicit codec (our design on top of Cool-Chic / C3).

Paper: "MoRIC: A Modular Region-based Implicit Codec for Image Compression", NeurIPS 2025 (no code
was found; only the abstract and review excerpts). **Everything below about the internals is our
design** (spec "MoRIC — Algorithm (our design)"), built on the overfitted codecs Cool-Chic
(Ladune et al.) and C3 (Kim et al.) that the paper extends.

- **Regions.** An image and a label map with N regions (the background is a region). Each coded region
  r has its own overfitted model: a latent pyramid y_r^l (l = 0..L−1, one channel at stride 2^l, on
  the image-aligned grid), of which only the latents whose 2^l×2^l footprint touches the region mask
  (dilated by ``dilate`` px) are coded; an auto-regressive entropy model (ARM: an MLP over
  ``arm_context`` causal neighbours of the same level → Laplace μ and ln b); fixed bilinear
  upsampling; a synthesis (1×1 conv L → ``syn_width`` → 3, then two residual 3×3 convs).
- **Shared global modulator.** One small network reads the coarsest latents of *all* coded regions
  (stacked on the common coarsest grid, where every region's latents are aligned) and produces
  per-level FiLM maps (scale γ_l, shift β_l) at that coarse resolution; coarse to fine, each level's
  latents are modulated, y_l·(1 + γ_l) + β_l, with the maps upsampled bilinearly to the level's grid,
  before the region's synthesis. Its weights are coded once.
- **Loss** (encoder-side overfitting): Σ_r [SSE_r + λ_r·bits_r] / |coded pixels| (MSE + λ·bpp for a
  single λ; a per-region λ_r gives fine-grained RD control; ``only=r`` codes a single object).
  Rounding schedule as in C3: additive uniform noise → soft rounding with decreasing temperature →
  hard rounding with a straight-through estimator. Adam with cosine decay; the latents use a 10×
  larger learning rate than the networks (``latent_lr_scale``; our choice: at the CPU scale of a
  few hundred iterations, latents initialised at 0 otherwise barely leave the rounding dead zone).
- **Network parameters** are quantised after training with a step 2^−k searched per network (ARM: the
  step that minimises the total bits; synthesis and modulator: the one that minimises D + λ·R) and
  entropy-coded with a Laplace model (one scale per tensor).

**Decoder determinism** (the trap): the decoder recomputes the ARM's μ and b from decoded latents.
Latents are coded coarsest level first, each level in wavefront order (t = a·y + x, a = 1 + the
largest column offset of the causal rows), so that the decoder evaluates the ARM once per wavefront
instead of once per latent. The ARM is evaluated in exact dyadic arithmetic — integer latents, weights on the 2^−k grid, hidden
activations rounded to the 2^−8 grid — so every sum is exact in float64 regardless of summation order
(BLAS, batch shape); μ and b are then quantised to the range coder's tables (μ to 1/8, b to a 64-step
log grid) by comparisons and a division only. The encoder codes with the same function, vectorised.
The decoded image is 8-bit; the encoder's reconstruction is produced by the decoder's own synthesis
path, so ``MoRIC.decode(bytes)`` reproduces it bit-exactly.

Contours: the label map (or the single object's mask) is coded losslessly by
:class:`~eff_vision.moric.chain.ChainCoder`'s partition coder (shared boundaries once); the rate is
8·len(bytes) of the whole container (:class:`~eff_vision.moric.bitstream.Bitstream`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_bool, check_int, check_positive
from eff_shared.progress import track
from eff_vision.moric._fast import (
    decode_laplace_zero_center,
    decode_latent_level,
    encode_laplace_array,
    wavefront_positions,
)
from eff_vision.moric.bitstream import (
    FLAG_MODULATOR,
    FLAG_SINGLE,
    Bitstream,
    MoRICDecodeError,
    Section,
    Tag,
    coded_region_pixels,
    read_varint,
    write_varint,
)
from eff_vision.moric.contours import (
    check_labels,
    decode_partition_payload,
    encode_partition_payload,
)
from eff_vision.moric.rangecoder import (
    B_MAX,
    B_MIN,
    LAPLACE_FRACTIONS,
    LAPLACE_SCALES,
    LOG_MIN,
    LOG_STEP,
    RangeDecodeError,
    RangeDecoder,
    RangeEncoder,
    decode_laplace,
    encode_laplace,
    laplace_scale_index,
)

__all__ = [
    "MoRIC",
    "RegionCodecConfig",
    "arm_offsets",
    "coded_region_pixels",
    "decode_macs_per_pixel",
]

_HIDDEN_FRAC_BITS = 8  # ARM hidden activations live on the 2^-8 grid
_STEPS = tuple(range(4, 13))  # candidate parameter steps 2^-k


@dataclass
class RegionCodecConfig:
    """Validated configuration of the region codec (defaults: the spec's Cool-Chic-like sizes)."""

    levels: int = 7
    arm_context: int = 16
    arm_hidden: int = 16
    syn_width: int = 40
    modulator: bool = True
    modulator_width: int = 8
    lam: float = 0.02
    iters: int = 1200
    lr: float = 1e-2
    seed: int = 0
    dilate: int = 2
    noise_frac: float = 0.6
    soft_frac: float = 0.3
    latent_lr_scale: float = 10.0

    def __post_init__(self) -> None:
        for name, lo, hi in (("levels", 1, 12), ("arm_context", 1, 24), ("arm_hidden", 1, 256),
                             ("syn_width", 1, 512), ("modulator_width", 1, 256), ("iters", 1, 10**7),
                             ("dilate", 0, 64)):  # fmt: skip
            check_int(name, getattr(self, name), lo, hi)
        check_positive("lam", self.lam)
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not self.latent_lr_scale > 0:
            raise ValueError(f"latent_lr_scale must be > 0, got {self.latent_lr_scale!r}")
        if not (
            0 <= self.noise_frac <= 1
            and 0 <= self.soft_frac <= 1
            and self.noise_frac + self.soft_frac <= 1
        ):
            raise ValueError("noise_frac and soft_frac must lie in [0, 1] and sum to at most 1")


def arm_offsets(n: int) -> list[tuple[int, int]]:
    """The ``n`` nearest causal neighbours (dy, dx) in raster order, by distance."""
    cand = [(dy, dx) for dy in range(-4, 1) for dx in range(-4, 5) if dy < 0 or dx < 0]
    cand.sort(key=lambda o: (o[0] ** 2 + o[1] ** 2, o[0], o[1]))
    return cand[:n]


_PAD = 4  # zero margin around latent grids (covers every ARM offset)


# --------------------------------------------------------------------------------------------
# Networks
# --------------------------------------------------------------------------------------------


class _ARM(nn.Module):
    def __init__(self, context: int, hidden: int) -> None:
        super().__init__()
        self.l1, self.l2, self.l3 = (
            nn.Linear(context, hidden),
            nn.Linear(hidden, hidden),
            nn.Linear(hidden, 2),
        )
        with torch.no_grad():
            self.l3.weight.mul_(0.1)
            self.l3.bias.copy_(torch.tensor([0.0, 0.0]))

    def forward(self, ctx: Tensor) -> tuple[Tensor, Tensor]:
        out = self.l3(F.relu(self.l2(F.relu(self.l1(ctx)))))
        return out[:, 0], out[:, 1]


class _Synthesis(nn.Module):
    def __init__(self, levels: int, width: int) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(levels, width, 1)
        self.conv_out = nn.Conv2d(width, 3, 1)
        self.res1 = nn.Conv2d(3, 3, 3, padding=1, padding_mode="replicate")
        self.res2 = nn.Conv2d(3, 3, 3, padding=1, padding_mode="replicate")
        with torch.no_grad():
            for conv in (self.res1, self.res2):
                conv.weight.mul_(0.1)
                conv.bias.zero_()
            self.conv_out.bias.fill_(0.5)

    def forward(self, z: Tensor) -> Tensor:
        x = self.conv_out(F.relu(self.conv_in(z)))
        x = x + self.res1(x)
        return x + self.res2(F.relu(x))

    def forward_at(self, z: Tensor, need: np.ndarray) -> Tensor:
        """``forward(z)`` (z ``[1, L, H, W]``) with the pointwise layers run only where ``need``
        (H×W bool) holds and 0 elsewhere: equal to ``forward(z)`` at every pixel whose 5×5
        neighbourhood lies in ``need`` (two 3×3 convolutions read 2 pixels around), at a fraction
        of its cost when a region fills a small part of its box. The 3×3 layers still run on
        the whole box, so their border padding and arithmetic are those of ``forward``."""
        levels, h, w = z.shape[1:]
        idx = torch.from_numpy(np.flatnonzero(need))
        zf = z.reshape(levels, h * w).index_select(1, idx)[None, :, None]  # [1, L, 1, N]
        p = self.conv_out(torch.relu_(self.conv_in(zf)))
        x = z.new_zeros(1, 3, h, w)
        x.view(3, h * w).index_copy_(1, idx, p.reshape(3, -1))
        x = x + self.res1(x)
        return x + self.res2(F.relu(x))


class _Modulator(nn.Module):
    """Coarsest latents of every coded region [1, N, h, w] → per-level FiLM maps [1, 2L, h, w]."""

    def __init__(self, inputs: int, width: int, levels: int) -> None:
        super().__init__()
        self.levels = levels
        self.c1, self.c2 = nn.Conv2d(inputs, width, 1), nn.Conv2d(width, 2 * levels, 1)
        with torch.no_grad():  # start at the identity modulation
            self.c2.weight.zero_()
            self.c2.bias.zero_()

    def forward(self, coarse: Tensor) -> Tensor:
        return self.c2(F.relu(self.c1(coarse)))


def _modulate(latents: list[Tensor], film: Tensor | None) -> list[Tensor]:
    """FiLM per level, coarse to fine: y_l ← y_l·(1 + γ_l) + β_l, the coarse maps upsampled
    (bilinear) to each level's grid."""
    if film is None:
        return latents
    top = len(latents) - 1
    out = []
    for level, y in enumerate(latents):
        f = _up(film[:, 2 * level : 2 * level + 2], top - level, y.shape[-2], y.shape[-1])
        out.append(y * (1 + f[:, :1]) + f[:, 1:])
    return out


def _ordered_params(module: nn.Module) -> list[tuple[str, Tensor]]:
    return [(n, p) for n, p in module.named_parameters()]


# --------------------------------------------------------------------------------------------
# Geometry: footprints, upsampling, bounding boxes
# --------------------------------------------------------------------------------------------


@dataclass
class _Region:
    index: int  # id in the decoded label map
    mask: np.ndarray  # bool H×W (exact)
    bbox: tuple[int, int, int, int]  # y0, y1, x0, x1 of the dilated mask
    footprints: list[np.ndarray] = field(default_factory=list)  # per level, bool on the level grid


def _grid_shape(h: int, w: int, level: int) -> tuple[int, int]:
    s = 1 << level
    return -(-h // s), -(-w // s)


def _make_region(index: int, mask: np.ndarray, levels: int, dilate: int) -> _Region:
    import cv2

    grown = mask
    if dilate:
        kernel = np.ones((2 * dilate + 1, 2 * dilate + 1), np.uint8)
        grown = cv2.dilate(mask.astype(np.uint8), kernel).astype(bool)
    ys, xs = np.nonzero(grown)
    bbox = (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1)
    fps = [grown]
    for _ in range(1, levels):  # a cell of level l is the union of its four cells of level l − 1
        prev = fps[-1]
        gh, gw = -(-prev.shape[0] // 2), -(-prev.shape[1] // 2)
        padded = np.zeros((2 * gh, 2 * gw), bool)
        padded[: prev.shape[0], : prev.shape[1]] = prev
        fps.append(padded.reshape(gh, 2, gw, 2).any(axis=(1, 3)))
    return _Region(index, mask, bbox, fps)


def _up(t: Tensor, level: int, h: int, w: int) -> Tensor:
    """Bilinear upsampling of a level-``level`` map to H×W (align_corners=False, cropped)."""
    if level == 0:
        return t[..., :h, :w]
    u = F.interpolate(t, scale_factor=float(1 << level), mode="bilinear", align_corners=False)
    return u[..., :h, :w]


def _upsample(latents: list[Tensor], h: int, w: int) -> Tensor:
    """Every level upsampled to H×W and stacked → [1, L, H, W]."""
    return torch.cat([_up(y, level, h, w) for level, y in enumerate(latents)], dim=1)


def _upsample_box(latents: list[Tensor], box: tuple[int, int, int, int], h: int, w: int) -> Tensor:
    """``_upsample(latents)[..., y0:y1, x0:x1]`` computed from a crop of each level with a margin
    of one cell (bilinear support), so the cost follows the box, not the image."""
    y0, y1, x0, x1 = box
    out = []
    for level, y in enumerate(latents):
        s = 1 << level
        gh, gw = y.shape[-2:]
        cy0, cx0 = max(0, y0 // s - 1), max(0, x0 // s - 1)
        cy1, cx1 = min(gh, -(-y1 // s) + 1), min(gw, -(-x1 // s) + 1)
        crop = y[..., cy0:cy1, cx0:cx1]
        u = (
            crop
            if level == 0
            else F.interpolate(crop, scale_factor=float(s), mode="bilinear", align_corners=False)
        )
        out.append(u[..., y0 - cy0 * s : y1 - cy0 * s, x0 - cx0 * s : x1 - cx0 * s])
    return torch.cat(out, dim=1)


# --------------------------------------------------------------------------------------------
# Exact ARM (decoder determinism)
# --------------------------------------------------------------------------------------------


def _arm_exact(
    ctx: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]], k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(center, frac, scale) arrays of the Laplace tables from integer contexts [P, C] and integer
    weights on the 2^−k grid; every sum is exact in float64."""
    step = 2.0**-k
    grid = float(1 << _HIDDEN_FRAC_BITS)
    h = ctx.astype(np.float64)
    for i, (wq, bq) in enumerate(layers):
        h = h @ (wq.astype(np.float64) * step).T + bq.astype(np.float64) * step
        if i < len(layers) - 1:
            h = np.floor(np.clip(np.maximum(h, 0.0), 0.0, 2.0**20) * grid + 0.5) / grid
    mu = np.clip(h[:, 0], -(2.0**20), 2.0**20)
    log_b = h[:, 1]
    center = np.floor(mu)
    frac = np.floor((mu - center) * LAPLACE_FRACTIONS).astype(np.int64)
    # the same IEEE double operations as rangecoder.laplace_scale_index, elementwise
    scale = np.clip(np.floor((log_b - LOG_MIN) / LOG_STEP + 0.5), 0, LAPLACE_SCALES - 1).astype(
        np.int64
    )
    return center.astype(np.int64), frac, scale


def _contexts(
    grid: np.ndarray, ys: np.ndarray, xs: np.ndarray, offsets: list[tuple[int, int]]
) -> np.ndarray:
    """Causal contexts [P, C] from a zero-padded latent grid (padding _PAD)."""
    return np.stack([grid[ys + _PAD + dy, xs + _PAD + dx] for dy, dx in offsets], axis=1)


# --------------------------------------------------------------------------------------------
# Parameter (de)serialisation
# --------------------------------------------------------------------------------------------


def _quantise(t: Tensor, k: int) -> np.ndarray:
    return np.rint(t.detach().to(torch.float64).numpy() * (1 << k)).astype(np.int64)


def _encode_ints(enc: RangeEncoder, values: np.ndarray, reference: bool = False) -> None:
    flat = values.ravel()
    b = max(float(np.abs(flat).mean()) if flat.size else 0.0, B_MIN)
    scale = laplace_scale_index(math.log(min(b, B_MAX)))
    enc.encode_bits(scale, 6)
    if not reference:
        encode_laplace_array(enc, flat, 0, scale, 0)
        return
    for v in flat.tolist():
        encode_laplace(enc, int(v), 0, scale, 0)


def _decode_ints(dec: RangeDecoder, shape: tuple[int, ...], reference: bool = False) -> np.ndarray:
    scale = dec.decode_bits(6)
    n = int(np.prod(shape))
    if not reference:
        return decode_laplace_zero_center(dec, scale, n).reshape(shape)
    return np.array([decode_laplace(dec, 0, scale, 0) for _ in range(n)], np.int64).reshape(shape)


def _encode_module(
    module: nn.Module, k: int, reference: bool = False
) -> tuple[bytes, list[np.ndarray]]:
    enc = RangeEncoder()
    ints = []
    for _, p in _ordered_params(module):
        q = _quantise(p, k)
        _encode_ints(enc, q, reference)
        ints.append(q)
    return enc.finish(), ints


def _load_ints(module: nn.Module, ints: list[np.ndarray], k: int) -> None:
    with torch.no_grad():
        for (_, p), q in zip(_ordered_params(module), ints, strict=True):
            p.copy_(torch.from_numpy(q.astype(np.float64) / (1 << k)).to(p.dtype))


def _decode_module(
    dec: RangeDecoder, module: nn.Module, reference: bool = False
) -> list[np.ndarray]:
    return [_decode_ints(dec, tuple(p.shape), reference) for _, p in _ordered_params(module)]


# --------------------------------------------------------------------------------------------
# Shared decoder path: latents + parameters → image
# --------------------------------------------------------------------------------------------


@dataclass
class _Coded:
    """Everything the decoder reconstructs: regions, their nets (dequantised) and integer latents."""

    height: int
    width: int
    regions: list[_Region]
    nets: list[_Synthesis]
    latents: list[list[np.ndarray]]
    modulator: _Modulator | None


_HALO = np.ones((5, 5), np.uint8)  # the synthesis' receptive field: two 3×3 convolutions


@torch.no_grad()
def _synthesize(coded: _Coded, masked: bool = True) -> np.ndarray:
    """The decoded 8-bit image (pixels outside every coded region are 0). ``masked``: each
    region's pointwise layers run only on its pixels and the 2-pixel ring around them
    (:meth:`_Synthesis.forward_at`; speed, issue #25); ``False``: on its whole bounding box (the
    reference; the same image, tested)."""
    import cv2

    h, w = coded.height, coded.width
    lats = [
        [torch.from_numpy(a.astype(np.float32))[None, None] for a in lat] for lat in coded.latents
    ]
    film = None
    if coded.modulator is not None:
        film = coded.modulator(torch.cat([lat[-1] for lat in lats], dim=1))
    out = np.zeros((h, w, 3), np.float32)
    for region, net, lat in zip(coded.regions, coded.nets, lats, strict=True):
        y0, y1, x0, x1 = region.bbox
        z = _upsample_box(_modulate(lat, film), region.bbox, h, w)
        m = region.mask[y0:y1, x0:x1]
        need = cv2.dilate(m.view(np.uint8), _HALO).view(bool) if masked else None
        x = net(z) if need is None else net.forward_at(z, need)
        out[y0:y1, x0:x1][m] = x[0].permute(1, 2, 0).numpy()[m]
    return np.clip(np.rint(np.clip(out, 0.0, 1.0) * 255.0), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def _soft_round(x: Tensor, t: float) -> Tensor:
    f = torch.floor(x)
    r = x - f - 0.5
    return f + 0.5 + torch.tanh(r / t) / (2 * math.tanh(1 / (2 * t)))


def _laplace_bits(y: Tensor, mu: Tensor, log_b: Tensor) -> Tensor:
    b = torch.exp(log_b).clamp(B_MIN, B_MAX)

    def cdf(v: Tensor) -> Tensor:
        z = (v - mu) / b
        return 0.5 - 0.5 * torch.sign(z) * torch.expm1(-z.abs())

    p = (cdf(y + 0.5) - cdf(y - 0.5)).clamp_min(2.0**-16)
    return -torch.log2(p).sum()


class _Trainer:
    """Joint overfitting of every coded region's latents, ARM and synthesis, and the modulator."""

    def __init__(
        self, x: np.ndarray, regions: list[_Region], lams: list[float], cfg: RegionCodecConfig
    ) -> None:
        self.cfg, self.regions, self.lams = cfg, regions, lams
        self.h, self.w = x.shape[:2]
        torch.manual_seed(cfg.seed)
        self.x = torch.from_numpy(np.ascontiguousarray(x, np.float32)).permute(2, 0, 1)[None]
        self.offsets = arm_offsets(cfg.arm_context)
        self.latents = nn.ParameterList()
        self.fp_t: list[list[Tensor]] = []
        for r in regions:
            fps = []
            for level in range(cfg.levels):
                gh, gw = _grid_shape(self.h, self.w, level)
                self.latents.append(nn.Parameter(torch.zeros(1, 1, gh, gw)))
                fps.append(torch.from_numpy(r.footprints[level].astype(np.float32))[None, None])
            self.fp_t.append(fps)
        self.arms = nn.ModuleList([_ARM(cfg.arm_context, cfg.arm_hidden) for _ in regions])
        self.nets = nn.ModuleList([_Synthesis(cfg.levels, cfg.syn_width) for _ in regions])
        self.modulator = (
            _Modulator(len(regions), cfg.modulator_width, cfg.levels) if cfg.modulator else None
        )
        self.coords, self.ctx_index = [], []
        for r in regions:
            per, idx = [], []
            for level in range(cfg.levels):
                ys, xs = np.nonzero(r.footprints[level])
                per.append((torch.from_numpy(ys + _PAD), torch.from_numpy(xs + _PAD)))
                pw = _grid_shape(self.h, self.w, level)[1] + 2 * _PAD
                flat = (ys + _PAD) * pw + xs + _PAD
                ctx = np.stack([flat + dy * pw + dx for dy, dx in self.offsets], axis=1)
                idx.append((torch.from_numpy(ctx), torch.from_numpy(flat)))
            self.coords.append(per)
            self.ctx_index.append(idx)
        self.masks = [torch.from_numpy(r.mask) for r in regions]
        self.n_coded = float(sum(int(r.mask.sum()) for r in regions))

    def region_latents(self, i: int) -> list[Tensor]:
        lv = self.cfg.levels
        return [self.latents[i * lv + level] for level in range(lv)]

    def modules(self) -> list[nn.Module]:
        mods: list[nn.Module] = [self.latents, self.arms, self.nets]
        return mods + ([self.modulator] if self.modulator is not None else [])

    def _quant(self, y: Tensor, it: int) -> Tensor:
        c = self.cfg
        n1, n2 = int(c.noise_frac * c.iters), int((c.noise_frac + c.soft_frac) * c.iters)
        if it < n1:
            return y + (torch.rand(y.shape) - 0.5)
        if it < n2:
            t = 0.3 - 0.2 * (it - n1) / max(1, n2 - n1)
            return _soft_round(_soft_round(y, t) + (torch.rand(y.shape) - 0.5), t)
        return y + (torch.round(y) - y).detach()

    def rate(self, i: int, yq: list[Tensor]) -> Tensor:
        arm = self.arms[i]
        total = torch.zeros(())
        for level, y in enumerate(yq):
            ys, _ = self.coords[i][level]
            if ys.numel() == 0:
                continue
            grid = F.pad(y[0, 0], (_PAD, _PAD, _PAD, _PAD)).reshape(-1)
            ctx_idx, val_idx = self.ctx_index[i][level]
            mu, log_b = arm(grid[ctx_idx])
            total = total + _laplace_bits(grid[val_idx], mu, log_b)
        return total

    def film(self, yqs: list[list[Tensor]]) -> Tensor | None:
        if self.modulator is None:
            return None
        return self.modulator(torch.cat([yq[-1] for yq in yqs], dim=1))

    def distortion(self, i: int, yq: list[Tensor], film: Tensor | None) -> Tensor:
        y0, y1, x0, x1 = self.regions[i].bbox
        z = _upsample_box(_modulate(yq, film), self.regions[i].bbox, self.h, self.w)
        xh = self.nets[i](z)
        err = ((xh - self.x[..., y0:y1, x0:x1]) ** 2).mean(1)[0]
        return err[self.masks[i][y0:y1, x0:x1]].sum()

    def fit(self) -> list[float]:
        c = self.cfg
        nets = [p for m in self.modules()[1:] for p in m.parameters()]
        opt = torch.optim.Adam(
            [{"params": list(self.latents.parameters()), "lr": c.lr * c.latent_lr_scale},
             {"params": nets, "lr": c.lr}]
        )  # fmt: skip
        n_final = c.iters - int((c.noise_frac + c.soft_frac) * c.iters)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt,
            lambda s: (
                0.5
                * (1 + math.cos(math.pi * min(s, c.iters) / c.iters))
                * (0.3 if s >= c.iters - n_final else 1.0)
            ),
        )
        history = []
        for it in track(range(c.iters), "MoRIC overfitting (iterations)"):
            opt.zero_grad(set_to_none=True)
            yqs = []
            for i in range(len(self.regions)):
                lat = self.region_latents(i)
                yqs.append(
                    [self._quant(y, it) * fp for y, fp in zip(lat, self.fp_t[i], strict=True)]
                )
            film = self.film(yqs)
            loss = torch.zeros(())
            for i in range(len(self.regions)):
                loss = loss + self.distortion(i, yqs[i], film) + self.lams[i] * self.rate(i, yqs[i])
            loss = loss / self.n_coded
            loss.backward()
            opt.step()
            sched.step()
            history.append(float(loss.detach()))
        return history


# --------------------------------------------------------------------------------------------
# The codec
# --------------------------------------------------------------------------------------------


def _check_image(image: object) -> np.ndarray:
    from eff_vision.data.images import check_image

    return check_image("image", image, channels=(3,), min_side=2).astype(np.float32)


def _regions_from_labels(
    labels: np.ndarray, coded: list[int], levels: int, dilate: int
) -> list[_Region]:
    return [_make_region(r, labels == r, levels, dilate) for r in coded]


def _wavefront_order(ys: np.ndarray, xs: np.ndarray, offsets) -> tuple[np.ndarray, np.ndarray]:
    """Coding order of a level's coded positions: wavefronts t = a·y + x with a = 1 + max dx of the
    rows above, so every causal neighbour has a smaller t; positions of one wavefront are mutually
    independent (the decoder evaluates their ARM in one batch). Returns (order, wavefront ids)."""
    t = _wave_slope(offsets) * ys + xs
    order = np.lexsort((ys, t))
    return order, t[order]


def _wave_slope(offsets) -> int:
    """a of the wavefronts t = a·y + x: 1 + the largest dx among the contexts of the rows above."""
    return 1 + max([dx for dy, dx in offsets if dy < 0] or [0])


def _latent_payload(
    region: _Region, lat: list[np.ndarray], arm_ints, k: int, offsets, reference: bool = False
) -> bytes:
    layers = [(arm_ints[2 * j], arm_ints[2 * j + 1]) for j in range(3)]
    enc = RangeEncoder()
    for level in reversed(range(len(lat))):
        ys, xs = np.nonzero(region.footprints[level])
        if ys.size == 0:
            continue
        order, _ = _wavefront_order(ys, xs, offsets)
        ys, xs = ys[order], xs[order]
        grid = np.pad(lat[level], _PAD)
        center, frac, scale = _arm_exact(_contexts(grid, ys, xs, offsets), layers, k)
        vals = lat[level][ys, xs]
        if not reference:  # the compiled loop (byte-identical)
            encode_laplace_array(enc, vals, center, scale, frac)
            continue
        for v, c, f, sc in zip(
            vals.tolist(), center.tolist(), frac.tolist(), scale.tolist(), strict=True
        ):
            encode_laplace(enc, int(v), int(c), int(sc), int(f))
    return enc.finish()


def _decode_latents(
    payload: bytes, region: _Region, shapes, arm_ints, k: int, offsets, name: str,
    reference: bool = False,
) -> list[np.ndarray]:  # fmt: skip
    """Sequential range decoding in wavefront order. Reference path: the ARM runs once per
    wavefront (batched, exact, so it equals the encoder's vectorised evaluation); default: one
    compiled loop per level (exact ARM per latent, the same symbols), which hands any stream it
    cannot finish cleanly (malformed) back to the reference path, so the errors are the same."""
    layers = [(arm_ints[2 * j], arm_ints[2 * j + 1]) for j in range(3)]
    dec = RangeDecoder(payload)
    lat = [np.zeros(sh, np.int64) for sh in shapes]
    for level in reversed(range(len(shapes))):
        grid = np.pad(lat[level], _PAD)
        if reference:
            ys, xs = np.nonzero(region.footprints[level])
            order, waves = _wavefront_order(ys, xs, offsets)
            ys, xs = ys[order], xs[order]
        else:  # the same positions in the same order, compiled
            ys, xs, waves = wavefront_positions(region.footprints[level], _wave_slope(offsets))
        if ys.size == 0:
            continue
        if not reference:
            if not decode_latent_level(dec, grid, ys, xs, waves, offsets, layers, k, _PAD):
                return _decode_latents(payload, region, shapes, arm_ints, k, offsets, name, True)
            lat[level] = grid[_PAD:-_PAD, _PAD:-_PAD].copy()
            continue
        bounds = np.flatnonzero(np.diff(waves)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, ys.size], strict=True):
            wy, wx = ys[lo:hi], xs[lo:hi]
            center, frac, scale = _arm_exact(_contexts(grid, wy, wx, offsets), layers, k)
            vals = [
                decode_laplace(dec, c, sc, f)
                for c, f, sc in zip(center.tolist(), frac.tolist(), scale.tolist(), strict=True)
            ]
            if any(abs(v) > 1 << 20 for v in vals):
                raise MoRICDecodeError(f"{name}: latent value out of range")
            grid[wy + _PAD, wx + _PAD] = vals
        lat[level] = grid[_PAD:-_PAD, _PAD:-_PAD].copy()
    if not dec.exhausted():
        raise MoRICDecodeError(f"{name}: payload has unread bytes")
    return lat


def _arch_bytes(values: list[int]) -> bytes:
    return b"".join(write_varint(v) for v in values)


def _read_arch(payload: bytes, n: int, name: str) -> tuple[list[int], int]:
    pos, vals = 0, []
    for _ in range(n):
        v, pos = read_varint(payload, pos, name)
        vals.append(v)
    return vals, pos


class MoRIC:
    """The region codec (our design; see the module docstring).

    ``encode(image, regions, lam=None, only=None) -> Bitstream`` overfits the models and writes the
    stream (``lam``: one λ, or ``{region id: λ_r}``; ``only``: single-object mode);
    ``MoRIC.decode(data) -> uint8 image`` reads it back (regions come from the stream).
    """

    def __init__(self, config: RegionCodecConfig | None = None) -> None:
        self.config = config or RegionCodecConfig()
        self.last_history: list[float] = []
        self.last_encode_s = 0.0

    # -- encoder ---------------------------------------------------------------------------------

    def encode(
        self,
        image: np.ndarray,
        regions: np.ndarray,
        lam: float | dict[int, float] | None = None,
        only: int | None = None,
    ) -> Bitstream:
        cfg = self.config
        x = _check_image(image)
        if not isinstance(regions, np.ndarray) or regions.shape != x.shape[:2]:
            shape = getattr(regions, "shape", None)
            raise ValueError(
                f"regions (label map) must have the image's shape {x.shape[:2]}, got {shape}"
            )
        labels, n = check_labels(regions, "regions")
        if only is not None:
            check_int("only", only, 0, n - 1)
        coded_ids = list(range(n)) if only is None else [only]
        lams = self._lams(lam, coded_ids, cfg.lam)
        h, w = labels.shape
        if only is None:
            contour_payload = encode_partition_payload(labels, n)
            dec_labels = decode_partition_payload(contour_payload, h, w, n)
            regions_ = _regions_from_labels(dec_labels, coded_ids, cfg.levels, cfg.dilate)
        else:
            mask = (labels == only).astype(np.int32)
            contour_payload = encode_partition_payload(mask, 2)
            dec_mask = decode_partition_payload(contour_payload, h, w, 2, require_all=False)
            regions_ = [_make_region(1, dec_mask == 1, cfg.levels, cfg.dilate)]
        cell = 4 ** (cfg.levels - 1)
        for rid, r in zip(coded_ids, regions_, strict=True):
            if int(r.mask.sum()) < cell:
                raise ValueError(
                    f"region {rid} has {int(r.mask.sum())} px, fewer than the coarsest latent cell "
                    f"({1 << (cfg.levels - 1)}² = {cell} px); lower RegionCodecConfig.levels"
                )
        t0 = time.perf_counter()
        trainer = _Trainer(x, regions_, lams, cfg)
        self.last_history = trainer.fit()
        coded, sections = self._quantise_and_code(trainer, regions_, lams)
        self.last_encode_s = time.perf_counter() - t0
        flags = (FLAG_MODULATOR if cfg.modulator else 0) | (FLAG_SINGLE if only is not None else 0)
        bs = Bitstream(
            1, flags, h, w, n if only is None else 2,
            [Section(Tag.CONTOURS, 0, contour_payload), *sections],
        )  # fmt: skip
        bs.reconstruction = _synthesize(coded)
        bs.region_pixels = int(sum(int(r.mask.sum()) for r in regions_))
        return bs

    @staticmethod
    def _lams(
        lam: float | dict[int, float] | None, coded_ids: list[int], default: float
    ) -> list[float]:
        def check(v: object, what: str) -> float:
            check_positive(what, v)
            return float(v)

        if lam is None:
            return [check(default, "lam")] * len(coded_ids)
        if isinstance(lam, dict):
            unknown = sorted(set(lam) - set(coded_ids))
            if unknown:
                raise ValueError(f"lam has entries for regions {unknown} that are not coded")
            return [check(lam.get(r, default), f"lam[{r}]") for r in coded_ids]
        return [check(lam, "lam")] * len(coded_ids)

    def _quantise_and_code(
        self, trainer: _Trainer, regions: list[_Region], lams: list[float]
    ) -> tuple[_Coded, list[Section]]:
        import copy

        cfg = self.config
        h, w = trainer.h, trainer.w
        offsets = trainer.offsets
        lat_int = []
        for i, r in enumerate(regions):
            lat_int.append(
                [(np.rint(y.detach().numpy()[0, 0]) * r.footprints[lv]).astype(np.int64)
                 for lv, y in enumerate(trainer.region_latents(i))]
            )  # fmt: skip
        # ARM step: the one that minimises the total bits (it only affects the rate)
        arm_best = []
        for i, r in enumerate(regions):
            best = None
            for k in (6, 7, 8, 9, 10):
                arm_payload, ints = _encode_module(trainer.arms[i], k)
                lat_payload = _latent_payload(r, lat_int[i], ints, k, offsets)
                total = len(arm_payload) + len(lat_payload)
                if best is None or total < best[0]:
                    best = (total, k, arm_payload, lat_payload)
            arm_best.append(best)
        # synthesis / modulator steps: minimise SSE + λ·bits on the decoded 8-bit image
        x255 = np.rint(trainer.x[0].permute(1, 2, 0).numpy() * 255.0)

        def sse(img: np.ndarray, region: _Region) -> float:
            d = (img.astype(np.float64) - x255) / 255.0
            return float((d[region.mask] ** 2).mean(-1).sum())

        nets = [copy.deepcopy(n) for n in trainer.nets]
        modulator = copy.deepcopy(trainer.modulator) if trainer.modulator is not None else None
        mod_choice = None
        if modulator is not None:
            best = None
            lam_mean = float(np.mean(lams))
            for k in _STEPS:
                payload, ints = _encode_module(trainer.modulator, k)
                _load_ints(modulator, ints, k)
                img = _synthesize(_Coded(h, w, regions, nets, lat_int, modulator))
                cost = sum(sse(img, r) for r in regions) + lam_mean * 8 * len(payload)
                if best is None or cost < best[0]:
                    best = (cost, k, payload, ints)
            mod_choice = best
            _load_ints(modulator, best[3], best[1])
        syn_choice = []
        for i, r in enumerate(regions):
            best = None
            for k in _STEPS:
                payload, ints = _encode_module(trainer.nets[i], k)
                _load_ints(nets[i], ints, k)
                if modulator is None:
                    img = _synthesize(_Coded(h, w, [r], [nets[i]], [lat_int[i]], None))
                else:  # the FiLM maps read every region's coarse latents
                    img = _synthesize(_Coded(h, w, regions, nets, lat_int, modulator))
                cost = sse(img, r) + lams[i] * 8 * len(payload)
                if best is None or cost < best[0]:
                    best = (cost, k, payload, ints)
            syn_choice.append(best)
            _load_ints(nets[i], best[3], best[1])
        sections = []
        for i, r in enumerate(regions):
            _, k_arm, arm_payload, lat_payload = arm_best[i]
            _, k_syn, syn_payload, _ = syn_choice[i]
            arch = _arch_bytes(
                [cfg.levels, cfg.arm_context, cfg.arm_hidden, cfg.syn_width, cfg.dilate, k_arm, k_syn,
                 len(arm_payload)]
            )  # fmt: skip
            sections.append(Section(Tag.REGION_PARAMS, r.index, arch + arm_payload + syn_payload))
            sections.append(Section(Tag.REGION_LATENTS, r.index, lat_payload))
        if modulator is not None:
            _, k_mod, payload, _ = mod_choice
            head = _arch_bytes([len(regions), cfg.modulator_width, cfg.levels, k_mod])
            sections.append(Section(Tag.MODULATOR, 0, head + payload))
        return _Coded(h, w, regions, nets, lat_int, modulator), sections

    # -- decoder ---------------------------------------------------------------------------------

    @staticmethod
    def decode(data: bytes | Bitstream, reference: bool = False) -> np.ndarray:
        """The decoded uint8 H×W×3 image (``MoRICDecodeError`` for any malformed stream).

        ``reference=True`` runs the pure-Python range decoder, contour-path loop and the
        per-wavefront numpy ARM instead of the compiled loops (the same image bit for bit; kept
        for tests and benches)."""
        check_bool("reference", reference)
        bs = data if isinstance(data, Bitstream) else Bitstream.from_bytes(data)
        if bs.kind != 1:
            raise MoRICDecodeError("header: this is a contour stream, not an image stream")
        return _synthesize(_parse_image_stream(bs, reference))


def _parse_image_stream(bs: Bitstream, reference: bool = False) -> _Coded:
    h, w = bs.height, bs.width
    single = bool(bs.flags & FLAG_SINGLE)
    if bs.flags & ~(FLAG_SINGLE | FLAG_MODULATOR):
        raise MoRICDecodeError(f"header: unknown flags {bs.flags}")
    sec = bs.section(Tag.CONTOURS)
    try:
        labels = decode_partition_payload(
            sec.payload, h, w, bs.n_regions, require_all=not single, reference=reference
        )
    except MoRICDecodeError:
        raise
    except Exception as exc:  # never let a malformed payload surface as IndexError & co.
        raise MoRICDecodeError(
            f"contours: malformed payload ({type(exc).__name__}: {exc})"
        ) from exc
    params = [s for s in bs.sections if s.tag == Tag.REGION_PARAMS]
    if not params:
        raise MoRICDecodeError("stream: no REGION_PARAMS section")
    regions, nets, latents, levels_seen = [], [], [], set()
    for s in params:
        name = s.name
        try:
            if (single and s.index != 1) or (not single and s.index >= bs.n_regions):
                raise MoRICDecodeError(f"{name}: region id {s.index} does not exist")
            arch, pos = _read_arch(s.payload, 8, name)
            levels, ctx, hidden, width, dilate, k_arm, k_syn, arm_len = arch
            if not (1 <= levels <= 12 and 1 <= ctx <= 24 and 1 <= hidden <= 256 and 1 <= width <= 512
                    and dilate <= 64 and k_arm <= 30 and k_syn <= 30):  # fmt: skip
                raise MoRICDecodeError(f"{name}: implausible architecture {arch}")
            if pos + arm_len > len(s.payload):
                raise MoRICDecodeError(f"{name}: truncated ARM parameters")
            arm, net = _ARM(ctx, hidden), _Synthesis(levels, width)
            arm_ints = _decode_module(RangeDecoder(s.payload[pos : pos + arm_len]), arm, reference)
            dec = RangeDecoder(s.payload[pos + arm_len :])
            syn_ints = _decode_module(dec, net, reference)
            if not dec.exhausted():
                raise MoRICDecodeError(f"{name}: payload has unread bytes")
            _load_ints(net, syn_ints, k_syn)
            mask = labels == s.index
            if not mask.any():
                raise MoRICDecodeError(f"{name}: region {s.index} is empty in the decoded contours")
            region = _make_region(s.index, mask, levels, dilate)
            lat_sec = bs.section(Tag.REGION_LATENTS, s.index)
        except MoRICDecodeError:
            raise
        except (RangeDecodeError, ValueError, IndexError, OverflowError, RuntimeError) as exc:
            raise MoRICDecodeError(
                f"{name}: malformed payload ({type(exc).__name__}: {exc})"
            ) from exc
        try:
            shapes = [_grid_shape(h, w, lv) for lv in range(levels)]
            lat = _decode_latents(
                lat_sec.payload,
                region,
                shapes,
                arm_ints,
                k_arm,
                arm_offsets(ctx),
                lat_sec.name,
                reference,
            )
        except MoRICDecodeError:
            raise
        except (RangeDecodeError, ValueError, IndexError, OverflowError) as exc:
            raise MoRICDecodeError(
                f"{lat_sec.name}: malformed payload ({type(exc).__name__}: {exc})"
            ) from exc
        levels_seen.add(levels)
        regions.append(region)
        nets.append(net)
        latents.append(lat)
    if len(levels_seen) != 1:
        raise MoRICDecodeError("stream: regions with different latent depths")
    modulator = None
    if bs.flags & FLAG_MODULATOR:
        s = bs.section(Tag.MODULATOR)
        try:
            (n_in, width, levels, k), pos = _read_arch(s.payload, 4, "MODULATOR")
            if n_in != len(regions) or not 1 <= width <= 256 or levels not in levels_seen or k > 30:
                raise MoRICDecodeError(
                    f"MODULATOR: does not match the regions ({n_in}, {width}, {levels})"
                )
            modulator = _Modulator(n_in, width, levels)
            dec = RangeDecoder(s.payload[pos:])
            _load_ints(modulator, _decode_module(dec, modulator, reference), k)
            if not dec.exhausted():
                raise MoRICDecodeError("MODULATOR: payload has unread bytes")
        except MoRICDecodeError:
            raise
        except (RangeDecodeError, ValueError, IndexError, OverflowError, RuntimeError) as exc:
            raise MoRICDecodeError(
                f"MODULATOR: malformed payload ({type(exc).__name__}: {exc})"
            ) from exc
    expected = len(params) * 2 + 1 + (1 if modulator is not None else 0)
    if len(bs.sections) != expected:
        raise MoRICDecodeError(f"stream: {len(bs.sections)} sections, expected {expected}")
    return _Coded(h, w, regions, nets, latents, modulator)


def decode_macs_per_pixel(
    config: RegionCodecConfig | None = None, n_regions: int = 1
) -> dict[str, float]:
    """Decoding MACs per pixel, counted analytically, for regions that tile the image: ARM (per coded
    latent; Σ_l 4^−l latents per pixel), bilinear upsampling (4 per level ≥ 1), synthesis (1×1
    convs and two residual 3×3 convs), modulator (at the coarsest resolution) and its FiLM maps
    (upsampled to every level's grid, 4 MACs per value, plus the multiply-add)."""
    c = config or RegionCodecConfig()
    lat_per_px = sum(4.0**-lv for lv in range(c.levels))
    arm = lat_per_px * (
        c.arm_context * c.arm_hidden + c.arm_hidden * c.arm_hidden + 2 * c.arm_hidden
    )
    ups = 4.0 * (c.levels - 1)
    syn = c.levels * c.syn_width + 3 * c.syn_width + 2 * 27 * 3
    mod = 0.0
    if c.modulator:
        coarse = n_regions * c.modulator_width + c.modulator_width * 2 * c.levels
        mod = coarse / 4.0 ** (c.levels - 1) + lat_per_px * (2 * 4 + 2)
    parts = {"arm": arm, "upsampling": ups, "synthesis": syn, "modulator": mod}
    parts["total"] = float(sum(parts.values()))
    return parts
