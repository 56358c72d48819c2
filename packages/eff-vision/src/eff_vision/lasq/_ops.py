"""Image operations of the LASQ prior on numpy/OpenCV, matching the kornia calls of the official
code (``models/Gamma_Diff.py``): kornia's ``border_type="reflect"`` is OpenCV's
``BORDER_REFLECT_101``; kornia's ``bilateral_blur`` uses the L1 colour distance over channels, a full
square window and a normalised Gaussian space kernel (OpenCV's ``bilateralFilter`` drops the corners
of the window, so it is reimplemented here); kornia's YUV matrices are used for colour denoising.
Images are float H×W×3 arrays on the 0–255 scale unless stated otherwise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bilateral3", "color_denoise", "gaussian_blur", "msrcr", "rgb_to_yuv", "yuv_to_rgb"]

_RGB2YUV = np.array(
    [[0.299, 0.587, 0.114], [-0.147, -0.289, 0.436], [0.615, -0.515, -0.100]], dtype=np.float64
)
_YUV2RGB = np.array([[1.0, 0.0, 1.14], [1.0, -0.396, -0.581], [1.0, 2.029, 0.0]], dtype=np.float64)


def gaussian_blur(img: np.ndarray, ksize: int, sigma: float) -> np.ndarray:
    """Gaussian blur with an odd square kernel and reflect-101 borders (kornia's 'reflect')."""
    import cv2

    out = cv2.GaussianBlur(
        img.astype(np.float32), (ksize, ksize), sigma, sigmaY=sigma,
        borderType=cv2.BORDER_REFLECT_101,
    )  # fmt: skip
    return out.reshape(img.shape).astype(np.float64)


def bilateral3(img: np.ndarray, sigma_color: float = 45.0, sigma_space: float = 45.0) -> np.ndarray:
    """3×3 joint bilateral filter as ``kornia.filters.bilateral_blur(x, (3, 3), σc, (σs, σs))``."""
    h, w, _ = img.shape
    pad = np.pad(img, ((1, 1), (1, 1), (0, 0)), mode="reflect")
    g1 = np.exp(-0.5 * (np.arange(-1, 2) / sigma_space) ** 2)
    g1 = g1 / g1.sum()
    num = np.zeros_like(img, dtype=np.float64)
    den = np.zeros((h, w, 1), dtype=np.float64)
    for dy in range(3):
        for dx in range(3):
            nb = pad[dy : dy + h, dx : dx + w]
            dist = np.abs(nb - img).sum(-1, keepdims=True)
            wgt = g1[dy] * g1[dx] * np.exp(-0.5 * (dist / sigma_color) ** 2)
            num += wgt * nb
            den += wgt
    return num / den


def rgb_to_yuv(img: np.ndarray) -> np.ndarray:
    return img @ _RGB2YUV.T


def yuv_to_rgb(img: np.ndarray) -> np.ndarray:
    return img @ _YUV2RGB.T


def color_denoise(img255: np.ndarray) -> np.ndarray:
    """YUV, 5×5 Gaussian (σ = 1) on U and V, back to RGB; 0–255 in and out (clamped)."""
    yuv = rgb_to_yuv(img255 / 255.0)
    yuv[:, :, 1] = gaussian_blur(yuv[:, :, 1], 5, 1.0)
    yuv[:, :, 2] = gaussian_blur(yuv[:, :, 2], 5, 1.0)
    return np.clip(yuv_to_rgb(yuv) * 255.0, 0.0, 255.0)


def _ssr(img: np.ndarray, sigma: float) -> np.ndarray:
    h, w = img.shape[:2]
    ksize = int(2 * round(3 * sigma) + 1)
    ksize = min(ksize, min(h, w) - 1)
    if ksize % 2 == 0:
        ksize -= 1
    ksize = max(3, ksize)
    blur = gaussian_blur(img, ksize, sigma)
    return np.log10(img + 1e-6) - np.log10(blur + 1e-6)


def msrcr(
    img255: np.ndarray,
    sigmas: tuple[float, ...] = (15, 80, 250),
    gain: float = 4.0,
    offset: float = 25.0,
    alpha: float = 125.0,
    beta: float = 46.0,
) -> np.ndarray:
    """Multi-scale Retinex with colour restoration on I·255 + 1 (official parameters); 0–255 out."""
    img = img255.astype(np.float64) + 1.0
    retinex = sum(_ssr(img, s) for s in sigmas) / len(sigmas)
    color = beta * (np.log10(alpha * img + 1e-6) - np.log10(img.sum(-1, keepdims=True) + 1e-6))
    return np.clip(gain * (retinex * color + offset), 0.0, 255.0)
