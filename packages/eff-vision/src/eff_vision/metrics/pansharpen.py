"""Pan-sharpening metrics (Vivone et al. toolbox conventions, as in Pan-LUT's ``Test_Tool/metrics.py``).

Reduced resolution (against the ground truth of Wald's protocol): ``psnr`` (peak 1), ``sam`` (mean
spectral angle in degrees over pixels with non-zero norm), ``ergas`` (100/R·sqrt(mean_b RMSE_b²/μ_b²)),
``q_index`` (UIQI of Wang & Bovik on non-overlapping ``block``×``block`` blocks, averaged over
blocks and bands) and ``q2n`` (the hypercomplex Q2ⁿ of Garzelli & Nencini; bands zero-padded to a
power of two, Cayley–Dickson algebra).

Full resolution (no ground truth): ``d_lambda`` (spectral distortion: mean over band pairs i≠j of
|Q(F_i, F_j) − Q(MS_i, MS_j)|^p), ``d_s`` (spatial distortion: mean over bands of
|Q(F_i, PAN) − Q(MS_i, PAN_lr)|^q, PAN_lr = PAN through the MTF blur and decimation of Wald's protocol)
and ``qnr = (1 − D_λ)^α·(1 − D_s)^β``.

Images are H×W×B numpy arrays (PAN may be H×W); values are not rescaled.
"""

from __future__ import annotations

import numpy as np

__all__ = ["d_lambda", "d_s", "ergas", "psnr", "q2n", "q_index", "qnr", "sam", "uiqi"]


def _hwc(name: str, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 2:
        x = x[:, :, None]
    if x.ndim != 3:
        raise ValueError(f"{name} must be H×W×B (or H×W), got shape {x.shape}")
    return x


def _pair(ref: np.ndarray, fused: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = _hwc("ref", ref), _hwc("fused", fused)
    if a.shape != b.shape:
        raise ValueError(f"ref and fused must have the same shape, got {a.shape} and {b.shape}")
    return a, b


def psnr(ref: np.ndarray, fused: np.ndarray, data_range: float = 1.0) -> float:
    """PSNR over all bands, in dB."""
    a, b = _pair(ref, fused)
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else float(10 * np.log10(data_range**2 / mse))


def sam(ref: np.ndarray, fused: np.ndarray) -> float:
    """Mean spectral angle in degrees (pixels where either spectrum has zero norm are skipped)."""
    a, b = _pair(ref, fused)
    dot = (a * b).sum(-1)
    norm = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    ok = norm > 0
    if not ok.any():
        return 0.0
    cos = np.clip(dot[ok] / norm[ok], -1.0, 1.0)
    return float(np.degrees(np.arccos(cos)).mean())


def ergas(ref: np.ndarray, fused: np.ndarray, ratio: int = 4) -> float:
    """ERGAS = 100/ratio·sqrt(mean over bands of RMSE_b² / mean(ref_b)²)."""
    a, b = _pair(ref, fused)
    rmse2 = ((a - b) ** 2).mean(axis=(0, 1))
    mu2 = np.maximum(a.mean(axis=(0, 1)) ** 2, 1e-12)
    return float(100.0 / ratio * np.sqrt(np.mean(rmse2 / mu2)))


def _blocks(x: np.ndarray, block: int) -> np.ndarray:
    """Non-overlapping block×block tiles of an H×W×... array → [n_blocks, block², ...]."""
    h, w = x.shape[:2]
    bh, bw = min(block, h), min(block, w)
    nh, nw = h // bh, w // bw
    x = x[: nh * bh, : nw * bw]
    t = x.reshape(nh, bh, nw, bw, *x.shape[2:]).swapaxes(1, 2)
    return t.reshape(nh * nw, bh * bw, *x.shape[2:])


def uiqi(x: np.ndarray, y: np.ndarray, block: int = 32) -> float:
    """Universal image quality index of two single-band images, mean over non-overlapping blocks.

    Q = 4·σ_xy·μ_x·μ_y / ((σ_x² + σ_y²)(μ_x² + μ_y²)); a block whose denominator vanishes scores 1
    when the two blocks are equal and 0 otherwise."""
    bx, by = _blocks(np.asarray(x, np.float64), block), _blocks(np.asarray(y, np.float64), block)
    mx, my = bx.mean(1), by.mean(1)
    vx, vy = bx.var(1), by.var(1)
    cxy = ((bx - mx[:, None]) * (by - my[:, None])).mean(1)
    num = 4 * cxy * mx * my
    den = (vx + vy) * (mx**2 + my**2)
    equal = np.all(np.isclose(bx, by), axis=1)
    q = np.where(den > 1e-20, num / np.where(den > 1e-20, den, 1.0), np.where(equal, 1.0, 0.0))
    return float(q.mean())


def q_index(ref: np.ndarray, fused: np.ndarray, block: int = 32) -> float:
    """Band-mean UIQI on ``block``×``block`` blocks."""
    a, b = _pair(ref, fused)
    return float(np.mean([uiqi(a[:, :, i], b[:, :, i], block) for i in range(a.shape[2])]))


def _cd_conj(z: np.ndarray) -> np.ndarray:
    out = -z
    out[..., 0] = z[..., 0]
    return out


def _cd_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cayley–Dickson product of hypercomplex numbers stored in the last axis (size 2ⁿ)."""
    n = a.shape[-1]
    if n == 1:
        return a * b
    h = n // 2
    a1, a2, b1, b2 = a[..., :h], a[..., h:], b[..., :h], b[..., h:]
    # (a1, a2)(b1, b2) = (a1 b1 − b2* a2, b2 a1 + a2 b1*)
    return np.concatenate(
        [_cd_mul(a1, b1) - _cd_mul(_cd_conj(b2), a2), _cd_mul(b2, a1) + _cd_mul(a2, _cd_conj(b1))],
        axis=-1,
    )


def q2n(ref: np.ndarray, fused: np.ndarray, block: int = 32) -> float:
    """Hypercomplex Q2ⁿ, mean over non-overlapping blocks (bands zero-padded to a power of two)."""
    a, b = _pair(ref, fused)
    bands = a.shape[2]
    size = 1 << max(0, (bands - 1).bit_length())
    if size > bands:
        pad = ((0, 0), (0, 0), (0, size - bands))
        a, b = np.pad(a, pad), np.pad(b, pad)
    za, zb = _blocks(a, block), _blocks(b, block)  # [nb, px, 2ⁿ]
    ma, mb = za.mean(1), zb.mean(1)
    va = ((za - ma[:, None]) ** 2).sum(-1).mean(1)
    vb = ((zb - mb[:, None]) ** 2).sum(-1).mean(1)
    cov = _cd_mul(za, _cd_conj(zb)).mean(1) - _cd_mul(ma, _cd_conj(mb))
    cov_mod = np.linalg.norm(cov, axis=-1)
    na2, nb2 = (ma**2).sum(-1), (mb**2).sum(-1)
    den = (va + vb) * (na2 + nb2)
    q = np.where(den > 1e-20, 4 * cov_mod * np.sqrt(na2 * nb2) / np.where(den > 1e-20, den, 1), 1.0)
    return float(q.mean())


def d_lambda(fused: np.ndarray, ms_lr: np.ndarray, block: int = 32, p: int = 1) -> float:
    """Spectral distortion D_λ (band-pair UIQI at full vs at low resolution)."""
    f, m = _hwc("fused", fused), _hwc("ms_lr", ms_lr)
    if f.shape[2] != m.shape[2]:
        raise ValueError(f"fused and ms_lr must have the same bands, got {f.shape} and {m.shape}")
    bands = f.shape[2]
    if bands < 2:
        return 0.0
    terms = [
        abs(uiqi(f[:, :, i], f[:, :, j], block) - uiqi(m[:, :, i], m[:, :, j], block)) ** p
        for i in range(bands)
        for j in range(bands)
        if i != j
    ]
    return float(np.mean(terms) ** (1.0 / p))


def _degrade_pan(pan: np.ndarray, ratio: int) -> np.ndarray:
    from eff_vision.data.pansharpen import degrade_pan

    return degrade_pan(pan, ratio).astype(np.float64)


def d_s(
    fused: np.ndarray,
    ms_lr: np.ndarray,
    pan: np.ndarray,
    ratio: int = 4,
    block: int = 32,
    q: int = 1,
) -> float:
    """Spatial distortion D_s (UIQI of each band with PAN, at full vs at low resolution)."""
    f, m = _hwc("fused", fused), _hwc("ms_lr", ms_lr)
    p = np.asarray(pan, np.float64)
    if p.ndim == 3:
        p = p[:, :, 0]
    if p.shape != f.shape[:2]:
        raise ValueError(f"pan must have the fused image's size {f.shape[:2]}, got {p.shape}")
    p_lr = _degrade_pan(p, ratio)
    terms = [
        abs(uiqi(f[:, :, i], p, block) - uiqi(m[:, :, i], p_lr, block)) ** q
        for i in range(f.shape[2])
    ]
    return float(np.mean(terms) ** (1.0 / q))


def qnr(
    fused: np.ndarray,
    ms_lr: np.ndarray,
    pan: np.ndarray,
    ratio: int = 4,
    block: int = 32,
    alpha: float = 1.0,
    beta: float = 1.0,
) -> dict[str, float]:
    """QNR = (1 − D_λ)^α (1 − D_s)^β; returns ``{"d_lambda", "d_s", "qnr"}``."""
    dl = d_lambda(fused, ms_lr, block)
    ds = d_s(fused, ms_lr, pan, ratio, block)
    return {"d_lambda": dl, "d_s": ds, "qnr": float((1 - dl) ** alpha * (1 - ds) ** beta)}
