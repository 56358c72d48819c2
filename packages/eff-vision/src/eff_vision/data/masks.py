"""Region masks and label maps (MoRIC reproduction and tests).

Deterministic masks from bundled images (spec "Reproduction (vision.moric)"):

- ``coffee_mask()``: grey > Otsu threshold, opening with a disk of radius 3, objects < 500 px
  removed, largest component (400×600);
- ``astronaut_suit_mask(size)``: HSV S < 60 and V > 150 (0–255 scale), closing with a disk of
  radius 2, objects < 300 px removed, largest component (512×512, or on the image resized to
  ``size``);
- ``disk_with_hole()``: 256×256, disk of radius 90 at (128, 128) minus a disk of radius 25 at
  (140, 120).

Seeded generators: ``random_mask(seed, kind, shape)`` (random blobs, 1-pixel lines, diagonal-only
connections, nested islands, masks touching the border, single pixels, the full mask) and
``smooth_label_map(shape, n_regions, seed)`` (a smooth random field cut at quantile levels, so every
region is non-empty).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from eff_shared.errors import check_int
from eff_shared.seeding import make_rng

__all__ = [
    "RANDOM_MASK_KINDS",
    "astronaut_suit_mask",
    "coffee_mask",
    "disk_with_hole",
    "random_mask",
    "smooth_label_map",
]

RANDOM_MASK_KINDS = ("blobs", "lines", "diagonal", "nested", "border", "pixels", "full", "noise")


def _largest_component(mask: np.ndarray) -> np.ndarray:
    from skimage.measure import label

    lab = label(mask, connectivity=2)
    if lab.max() == 0:
        return mask.astype(bool)
    counts = np.bincount(lab.ravel())
    counts[0] = 0
    return lab == int(np.argmax(counts))


@lru_cache(maxsize=1)
def _coffee_mask() -> np.ndarray:
    from skimage import color, data, filters, morphology

    grey = color.rgb2gray(data.coffee())
    mask = grey > filters.threshold_otsu(grey)
    mask = morphology.opening(mask, morphology.disk(3))
    mask = morphology.remove_small_objects(mask, max_size=499)
    return _largest_component(mask)


def coffee_mask() -> np.ndarray:
    """The coffee-cup mask (bool, 400×600)."""
    return _coffee_mask().copy()


@lru_cache(maxsize=4)
def _suit_mask(size: int) -> np.ndarray:
    import cv2
    from skimage import data, morphology

    img = data.astronaut()
    if size != img.shape[0]:
        img = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
    hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)  # OpenCV: S, V on 0..255
    mask = (hsv[:, :, 1] < 60) & (hsv[:, :, 2] > 150)
    mask = morphology.closing(mask, morphology.disk(2))
    mask = morphology.remove_small_objects(mask, max_size=299)
    return _largest_component(mask)


def astronaut_suit_mask(size: int = 512) -> np.ndarray:
    """The astronaut's suit (bool, size×size): the recipe runs on the astronaut image resized to
    ``size`` with ``cv2.INTER_AREA`` (at 256 this is the single-object codec's 18,012-px region)."""
    return _suit_mask(int(size)).copy()


def disk_with_hole(size: int = 256) -> np.ndarray:
    """A disk of radius 90 at (128, 128) minus a disk of radius 25 at (140, 120) (scaled with size)."""
    s = size / 256.0
    yy, xx = np.mgrid[:size, :size]
    outer = (yy - 128 * s) ** 2 + (xx - 128 * s) ** 2 <= (90 * s) ** 2
    hole = (yy - 140 * s) ** 2 + (xx - 120 * s) ** 2 <= (25 * s) ** 2
    return outer & ~hole


def _smooth_field(shape: tuple[int, int], rng: np.random.Generator, cells: int) -> np.ndarray:
    import cv2

    g = rng.standard_normal((cells, cells)).astype(np.float32)
    return cv2.resize(g, (shape[1], shape[0]), interpolation=cv2.INTER_CUBIC)


def random_mask(seed: int, kind: str = "blobs", shape: tuple[int, int] = (32, 32)) -> np.ndarray:
    """A seeded random boolean mask of one of ``RANDOM_MASK_KINDS`` (never all False).

    ``blobs``: a smooth field thresholded at a random level; ``lines``: random 1-pixel lines;
    ``diagonal``: pixels connected only diagonally (checkerboard fragments); ``nested``: rings with
    islands inside holes; ``border``: blobs forced to touch the image border; ``pixels``: isolated
    single pixels; ``full``: every pixel; ``noise``: i.i.d. pixels (the hardest case).
    """
    import cv2

    if kind not in RANDOM_MASK_KINDS:
        raise ValueError(f"kind must be one of {list(RANDOM_MASK_KINDS)!r}, got {kind!r}")
    h, w = shape
    rng = make_rng(seed, 41, RANDOM_MASK_KINDS.index(kind))
    if kind == "blobs":
        field = _smooth_field(shape, rng, int(rng.integers(2, 7)))
        mask = field > np.quantile(field, rng.uniform(0.3, 0.8))
    elif kind == "lines":
        img = np.zeros(shape, np.uint8)
        for _ in range(int(rng.integers(1, 6))):
            p0 = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            p1 = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            cv2.line(img, p0, p1, 1, 1, lineType=cv2.LINE_8)
        mask = img.astype(bool)
    elif kind == "diagonal":
        yy, xx = np.mgrid[:h, :w]
        mask = ((yy + xx) % 2 == 0) & (rng.random(shape) < 0.7)
        mask &= _smooth_field(shape, rng, 3) > 0
    elif kind == "nested":
        yy, xx = np.mgrid[:h, :w]
        cy, cx = rng.uniform(0.3, 0.7) * h, rng.uniform(0.3, 0.7) * w
        r = np.hypot(yy - cy, xx - cx)
        period = rng.uniform(2.5, 5.0)
        mask = (np.floor(r / period) % 2 == 0) & (r < min(h, w) * rng.uniform(0.3, 0.6))
    elif kind == "border":
        field = _smooth_field(shape, rng, int(rng.integers(2, 5)))
        mask = field > np.quantile(field, 0.5)
        mask[0, :] |= rng.random(w) < 0.5
        mask[:, -1] |= rng.random(h) < 0.5
    elif kind == "pixels":
        mask = np.zeros(shape, bool)
        n = int(rng.integers(1, 8))
        mask[rng.integers(0, h, n), rng.integers(0, w, n)] = True
    elif kind == "full":
        mask = np.ones(shape, bool)
    else:  # noise
        mask = rng.random(shape) < rng.uniform(0.2, 0.8)
    if not mask.any():
        mask[int(rng.integers(0, h)), int(rng.integers(0, w))] = True
    return mask


def smooth_label_map(
    shape: tuple[int, int] = (64, 64), n_regions: int = 3, seed: int = 0, cells: int = 4
) -> np.ndarray:
    """Labels 0..n_regions−1 (int32): a smooth random field cut at its quantiles (each region
    non-empty; region 0 holds the lowest field values)."""
    check_int("n_regions", n_regions, minimum=1)
    field = _smooth_field(shape, make_rng(seed, 42), cells)
    levels = np.quantile(field, np.arange(1, n_regions) / n_regions)
    return np.digitize(field, levels).astype(np.int32)
