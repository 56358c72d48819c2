"""scikit-image's bundled sample images and the package-wide image checks.

``sample_image(name, multiple_of=..., max_side=...)`` returns a float32 HWC array in [0, 1] (grey
images get one channel). Only images whose files ship inside the scikit-image wheel are allowed, so
nothing is ever fetched.

``check_image`` is the one validator of images at the API boundary (spec: "classic-vision functions
take numpy HWC arrays, uint8 or float in [0, 1]; validate dtype and range and raise ValueError, never
clamp silently").
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from eff_shared.errors import check_int

__all__ = ["BUNDLED_IMAGES", "check_image", "sample_image"]

# name -> skimage.data function; every one of these reads a file inside the wheel (no pooch fetch).
BUNDLED_IMAGES = (
    "astronaut",
    "brick",
    "camera",
    "cat",
    "cell",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "grass",
    "gravel",
    "horse",
    "hubble_deep_field",
    "immunohistochemistry",
    "logo",
    "microaneurysms",
    "moon",
    "page",
    "retina",
    "rocket",
    "text",
)


@lru_cache(maxsize=32)
def _load(name: str) -> np.ndarray:
    import skimage.data

    img = np.asarray(getattr(skimage.data, name)())
    if img.dtype == bool:
        img = img.astype(np.float32)
    elif np.issubdtype(img.dtype, np.integer):
        img = img.astype(np.float32) / float(np.iinfo(img.dtype).max)
    else:
        img = img.astype(np.float32)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.shape[2] == 4:  # RGBA (logo): drop alpha
        img = img[:, :, :3]
    img.setflags(write=False)
    return img


def sample_image(
    name: str, multiple_of: int | None = None, max_side: int | None = None
) -> np.ndarray:
    """A bundled scikit-image sample image as float32 HWC in [0, 1] (a fresh, writable copy).

    ``max_side`` downsizes (``cv2.INTER_AREA``, aspect kept) so that the longer side is at most
    ``max_side``; ``multiple_of`` then centre-crops both sides to multiples of it.
    """
    if name not in BUNDLED_IMAGES:
        raise ValueError(f"name must be one of {list(BUNDLED_IMAGES)!r}, got {name!r}")
    for arg, value in (("multiple_of", multiple_of), ("max_side", max_side)):
        if value is not None:
            check_int(arg, value, minimum=1)
    img = _load(name)
    if max_side is not None and max(img.shape[:2]) > max_side:
        import cv2

        h, w = img.shape[:2]
        scale = max_side / max(h, w)
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        img = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
        if img.ndim == 2:
            img = img[:, :, None]
        img = np.clip(img, 0.0, 1.0)
    if multiple_of is not None:
        h, w = img.shape[:2]
        nh, nw = h - h % multiple_of, w - w % multiple_of
        if nh == 0 or nw == 0:
            raise ValueError(f"image {name!r} ({h}×{w}) is smaller than multiple_of={multiple_of}")
        top, left = (h - nh) // 2, (w - nw) // 2
        img = img[top : top + nh, left : left + nw]
    return np.ascontiguousarray(img, dtype=np.float32).copy()


def check_image(
    name: str,
    img: object,
    *,
    channels: tuple[int, ...] | None = (3,),
    min_side: int = 1,
    allow_uint8: bool = True,
) -> np.ndarray:
    """Validate an HWC image and return it as float (uint8 is divided by 255).

    Raises ``ValueError`` naming ``name`` for: a non-array, a wrong rank or channel count, a side
    below ``min_side``, a dtype that is neither uint8 nor float, NaN/inf, or float values outside
    [0, 1] (with a hint to normalise: clamping silently would hide scale bugs).
    """
    if not isinstance(img, np.ndarray):
        raise TypeError(f"{name} must be a numpy array (HWC), got {type(img).__name__}")
    if img.ndim != 3:
        raise ValueError(f"{name} must be an HWC array (3 dimensions), got shape {img.shape}")
    if channels is not None and img.shape[2] not in channels:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, channels))} channels, got shape {img.shape} "
            "(convert grey/RGBA images explicitly)"
        )
    if min(img.shape[:2]) < min_side:
        raise ValueError(f"{name} must be at least {min_side} px per side, got shape {img.shape}")
    if img.dtype == np.uint8 and allow_uint8:
        return img.astype(np.float32) / 255.0
    if not np.issubdtype(img.dtype, np.floating):
        allowed = "uint8 or float in [0, 1]" if allow_uint8 else "float in [0, 1]"
        raise ValueError(f"{name} must be {allowed}, got dtype {img.dtype}")
    if not np.all(np.isfinite(img)):
        raise ValueError(f"{name} contains NaN or inf values")
    lo, hi = float(img.min()), float(img.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"{name} values must lie in [0, 1], got [{lo:.4g}, {hi:.4g}]; normalise the image "
            "(e.g. divide uint16 data by 65535) instead of relying on clamping"
        )
    return img
