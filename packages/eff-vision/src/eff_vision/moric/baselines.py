"""MoRIC baselines through OpenCV: JPEG and WebP RD curves on a region (bounding-box crop, pixels
outside the mask filled with the region mean; PSNR on region pixels only; bits from the whole file,
headers included), interpolated at a given bpp; and OpenCV's 1-bit PNG of a mask."""

from __future__ import annotations

import numpy as np

__all__ = ["codec_curve", "matched_psnr", "png_bilevel_bits", "region_crop"]

_QUALITY = {"jpeg": ".jpg", "webp": ".webp"}


def png_bilevel_bits(mask: np.ndarray) -> int:
    """Bits of ``cv2.imencode('.png', mask, [IMWRITE_PNG_BILEVEL, 1, IMWRITE_PNG_COMPRESSION, 9])``."""
    import cv2

    ok, buf = cv2.imencode(
        ".png", mask.astype(np.uint8) * 255,
        [cv2.IMWRITE_PNG_BILEVEL, 1, cv2.IMWRITE_PNG_COMPRESSION, 9],
    )  # fmt: skip
    if not ok:
        raise RuntimeError("OpenCV could not encode the PNG")
    return 8 * len(buf)


def region_crop(image: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 crop of the mask's bounding box with out-of-mask pixels = region mean, crop mask)."""
    ys, xs = np.nonzero(mask)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    crop = image[y0:y1, x0:x1].astype(np.float64).copy()
    m = mask[y0:y1, x0:x1]
    crop[~m] = crop[m].mean(axis=0)
    u8 = np.clip(np.rint(crop * 255.0 if image.dtype != np.uint8 else crop), 0, 255).astype(
        np.uint8
    )
    return u8, m


def codec_curve(
    image: np.ndarray, mask: np.ndarray, codec: str = "jpeg", qualities=range(5, 100, 5)
) -> list[tuple[float, float, int]]:
    """[(bits per region pixel, PSNR on the region, quality)] sorted by rate."""
    import cv2

    from eff_vision.metrics.image import psnr

    if codec not in _QUALITY:
        raise ValueError(f"codec must be one of {list(_QUALITY)!r}, got {codec!r}")
    crop, m = region_crop(image, mask)
    bgr = cv2.cvtColor(crop, cv2.COLOR_RGB2BGR)
    flag = cv2.IMWRITE_JPEG_QUALITY if codec == "jpeg" else cv2.IMWRITE_WEBP_QUALITY
    n = int(m.sum())
    ref = crop
    out = []
    for q in qualities:
        ok, buf = cv2.imencode(_QUALITY[codec], bgr, [flag, int(q)])
        if not ok:
            raise RuntimeError(f"OpenCV could not encode {codec}")
        dec = cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        out.append((8 * len(buf) / n, psnr(ref, dec, m), int(q)))
    return sorted(out)


def matched_psnr(curve: list[tuple[float, float, int]], bpp: float) -> tuple[float, bool]:
    """PSNR of a codec curve at ``bpp`` (linear interpolation); the flag is False when ``bpp`` lies
    outside the curve's range (the end point is returned)."""
    rates = np.array([c[0] for c in curve])
    ps = np.array([c[1] for c in curve])
    inside = bool(rates[0] <= bpp <= rates[-1])
    return float(np.interp(bpp, rates, ps)), inside
