"""Procedurally generated visible / infrared "persons" for VI-ReID (SVIP's reproduction).

An **identity** is a random draw of (shirt RGB, trouser RGB, shirt and trouser material ids, body
height, body width, stripes off / on with a period of 2, 4 or 6 rows, long trousers or shorts, a hat
or not, bag left/right/none). The shape and pattern attributes (size, stripes, shorts, hat, bag)
are what both modalities share. A **visible** image (3 × 32 × 16, float
in [0, 1]) renders the identity's colours with pose jitter (±2 px shift, ±10 % scale), a background
colour from the domain's palette plus per-pixel noise, a random lighting gain, and the domain's
contrast. An **infrared** image maps each body region to a "temperature" — skin (head) hot,
clothes by material id, the stripes by a second material, the bag cool, the background cold —
ignores RGB, then applies a Gaussian blur (σ 0.8) and noise (σ 0.05) in one channel, replicated to
3 channels: colour is lost in IR, shape and pattern survive.

Domains: ``"source"`` (light background palette, full contrast, body heights 0.75–0.95 and widths
0.35–0.55 of the frame) and ``"target"`` (a darker, greenish palette, contrast × 0.7, heights
0.65–0.88, widths 0.45–0.65). Every knob is an argument of :func:`make_vi_reid`. Identities drawn
with different seeds are disjoint (continuous random attributes). Everything is numpy-vectorised
over the images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from eff_shared.errors import check_choice, check_positive
from eff_shared.seeding import make_rng

__all__ = ["DOMAINS", "VIReIDSet", "make_vi_reid"]

H, W = 32, 16
REGION_ORDER = ("legs", "skin_legs", "torso", "stripes", "bag", "head", "hat")
MATERIAL_TEMPS = (0.35, 0.5, 0.65, 0.8)

DOMAINS: dict[str, dict[str, Any]] = {
    "source": {
        "bg_palette": ((0.6, 0.6, 0.6), (0.9, 0.9, 0.9)),
        "contrast": 1.0,
        "height": (0.75, 0.95),
        "width": (0.35, 0.55),
        "ir_background": (0.05, 0.15),
    },
    "target": {
        "bg_palette": ((0.15, 0.3, 0.15), (0.4, 0.55, 0.35)),
        "contrast": 0.7,
        "height": (0.65, 0.88),
        "width": (0.45, 0.65),
        "ir_background": (0.1, 0.25),
    },
}


@dataclass(frozen=True)
class VIReIDSet:
    """Visible and infrared images (N, 3, 32, 16) float32 with their identity labels."""

    vis: np.ndarray
    vis_ids: np.ndarray
    ir: np.ndarray
    ir_ids: np.ndarray
    num_ids: int

    def tensors(self):
        import torch

        return (
            torch.from_numpy(self.vis),
            torch.from_numpy(self.vis_ids),
            torch.from_numpy(self.ir),
            torch.from_numpy(self.ir_ids),
        )


def _identities(rng: np.random.Generator, n: int, height, width) -> dict[str, np.ndarray]:
    return {
        "shirt": rng.uniform(0.0, 1.0, size=(n, 3)),
        "trouser": rng.uniform(0.0, 1.0, size=(n, 3)),
        "shirt_mat": rng.integers(0, len(MATERIAL_TEMPS), size=n),
        "trouser_mat": rng.integers(0, len(MATERIAL_TEMPS), size=n),
        "height": rng.uniform(*height, size=n),
        "width": rng.uniform(*width, size=n),
        "stripes": rng.integers(0, 4, size=n),  # 0 none, else half-period in rows
        "shorts": rng.random(n) < 0.5,
        "hat": rng.random(n) < 0.5,
        "bag": rng.integers(0, 3, size=n),  # 0 none, 1 left, 2 right
    }


def _regions(ident: dict[str, np.ndarray], idx: np.ndarray, rng: np.random.Generator,
             shift: float, scale: float) -> dict[str, np.ndarray]:  # fmt: skip
    """Boolean region masks (N, H, W) for the images of identities ``idx`` with pose jitter."""
    n = len(idx)
    dx = rng.uniform(-shift, shift, size=n)[:, None, None]
    dy = rng.uniform(-shift, shift, size=n)[:, None, None]
    sc = rng.uniform(1 - scale, 1 + scale, size=n)[:, None, None]
    yy = np.arange(H, dtype=np.float64)[None, :, None]
    xx = np.arange(W, dtype=np.float64)[None, None, :]
    # body coordinates: u horizontal from the centre, v from the feet (1 = top of the frame)
    u = (xx + 0.5 - W / 2 - dx) / (W * sc)
    v = (H - 0.5 - yy + dy) / (H * sc)
    h = ident["height"][idx][:, None, None]
    w = ident["width"][idx][:, None, None]
    head_c, head_r = h - 0.08, 0.08
    head = (u / (0.32 * w)) ** 2 + ((v - head_c) / head_r) ** 2 <= 1.0
    hat = head & ident["hat"][idx][:, None, None] & (v >= head_c + 0.02)
    torso = (np.abs(u) <= w / 2) & (v >= 0.45 * h) & (v < h - 0.16)
    legs = (np.abs(u) <= 0.4 * w) & (np.abs(u) >= 0.06 * w) & (v >= 0.02) & (v < 0.45 * h)
    bare = legs & ident["shorts"][idx][:, None, None] & (v < 0.3 * h)  # skin below the shorts
    period = ident["stripes"][idx][:, None, None]
    stripes = torso & (period > 0) & (np.floor(yy / np.maximum(period, 1)) % 2 == 0)
    bag_side = ident["bag"][idx][:, None, None]
    bag_x = np.where(bag_side == 1, -1.0, 1.0) * (w / 2 + 0.09)
    bag = (bag_side > 0) & (np.abs(u - bag_x) <= 0.09) & (v >= 0.45 * h) & (v < 0.7 * h)
    return {"head": head & ~hat, "hat": hat, "torso": torso & ~stripes, "stripes": stripes,
            "legs": legs & ~bare, "skin_legs": bare, "bag": bag}  # fmt: skip


def make_vi_reid(
    num_ids: int,
    per_id: int | tuple[int, int],
    domain: Literal["source", "target"],
    seed: int,
    *,
    shift: float = 2.0,
    scale: float = 0.1,
    bg_noise: float = 0.05,
    lighting: tuple[float, float] = (0.75, 1.25),
    ir_blur: float = 0.8,
    ir_noise: float = 0.05,
    bg_palette: tuple[tuple[float, float, float], tuple[float, float, float]] | None = None,
    contrast: float | None = None,
    height: tuple[float, float] | None = None,
    width: tuple[float, float] | None = None,
) -> VIReIDSet:
    """``num_ids`` new identities with ``per_id`` (visible, infrared) images each.

    ``per_id`` is an int (same count in both modalities) or ``(n_vis, n_ir)``. The domain sets the
    defaults of the palette, contrast and size distribution (override any of them).
    """
    check_choice("domain", domain, DOMAINS)
    check_positive("num_ids", num_ids, integer=True)
    n_vis, n_ir = (per_id, per_id) if isinstance(per_id, int) else per_id
    check_positive("per_id (visible)", n_vis, strict=False, integer=True)
    check_positive("per_id (infrared)", n_ir, strict=False, integer=True)
    d = DOMAINS[domain]
    palette = bg_palette if bg_palette is not None else d["bg_palette"]
    con = d["contrast"] if contrast is None else contrast
    rng = make_rng(seed, 101)
    ident = _identities(rng, num_ids, height or d["height"], width or d["width"])

    def visible(idx: np.ndarray) -> np.ndarray:
        reg = _regions(ident, idx, rng, shift, scale)
        n = len(idx)
        lo, hi = np.asarray(palette[0]), np.asarray(palette[1])
        bg = lo + (hi - lo) * rng.random((n, 1))  # one point on the palette's segment
        img = np.broadcast_to(bg[:, :, None, None], (n, 3, H, W)).copy()
        img += rng.normal(0, bg_noise, size=img.shape)
        skin = np.tile([0.85, 0.65, 0.5], (n, 1))
        colours = {
            "legs": ident["trouser"][idx],
            "skin_legs": skin,
            "torso": ident["shirt"][idx],
            "stripes": np.full((n, 3), 0.95),
            "bag": np.tile([0.35, 0.22, 0.1], (n, 1)),
            "head": skin,
            "hat": np.tile([0.1, 0.1, 0.15], (n, 1)),
        }
        for name in REGION_ORDER:
            m = reg[name][:, None]
            img = np.where(m, colours[name][:, :, None, None], img)
        img *= rng.uniform(*lighting, size=(n, 1, 1, 1))
        mean = img.mean(axis=(1, 2, 3), keepdims=True)
        img = (img - mean) * con + mean
        return np.clip(img, 0, 1).astype(np.float32)

    def infrared(idx: np.ndarray) -> np.ndarray:
        from scipy.ndimage import gaussian_filter

        reg = _regions(ident, idx, rng, shift, scale)
        n = len(idx)
        temps = np.asarray(MATERIAL_TEMPS)
        img = rng.uniform(*d["ir_background"], size=(n, 1, 1)) * np.ones((n, H, W))
        values = {
            "legs": temps[ident["trouser_mat"][idx]],
            "torso": temps[ident["shirt_mat"][idx]],
            "stripes": np.clip(temps[ident["shirt_mat"][idx]] + np.where(
                ident["shirt_mat"][idx] >= 2, -0.3, 0.3), 0, 1),
            "bag": np.full(n, 0.2),
            "head": np.full(n, 0.95),
            "skin_legs": np.full(n, 0.9),
            "hat": np.full(n, 0.3),
        }  # fmt: skip
        for name in REGION_ORDER:
            img = np.where(reg[name], values[name][:, None, None], img)
        if ir_blur > 0:
            img = gaussian_filter(img, sigma=(0, ir_blur, ir_blur), mode="nearest")
        img = img + rng.normal(0, ir_noise, size=img.shape)
        img = np.clip(img, 0, 1).astype(np.float32)
        return np.repeat(img[:, None], 3, axis=1)

    vis_ids = np.repeat(np.arange(num_ids), n_vis)
    ir_ids = np.repeat(np.arange(num_ids), n_ir)
    empty = np.zeros((0, 3, H, W), np.float32)
    return VIReIDSet(
        vis=visible(vis_ids) if len(vis_ids) else empty,
        vis_ids=vis_ids.astype(np.int64),
        ir=infrared(ir_ids) if len(ir_ids) else empty,
        ir_ids=ir_ids.astype(np.int64),
        num_ids=num_ids,
    )
