"""Nemotron-Flash's depth–width scaling law (§2.1; item 5 of :mod:`eff_llm.nemotron_flash`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["depth_width_law", "fit_depth_width_law"]


def depth_width_law(params: Sequence[float], depth, width):
    """L(D, W) = L0 + a·D^−α + b·W^−β (``params`` = (L0, a, α, b, β))."""
    l0, a, alpha, b, beta = params
    return l0 + a * np.asarray(depth, float) ** -alpha + b * np.asarray(width, float) ** -beta


def fit_depth_width_law(
    depth: Iterable[float],
    width: Iterable[float],
    loss: Iterable[float],
    starts: int = 16,
    seed: int = 0,
) -> tuple[float, float, float, float, float]:
    """Least-squares fit of :func:`depth_width_law` to (D, W, loss) → (L0, a, α, b, β).

    Fits on the log of the loss residual scale with ``scipy.optimize.least_squares`` from
    ``starts`` seeded initial points (exponents in (0.05, 2)); returns the best fit.
    """
    from scipy.optimize import least_squares

    d, w, y = (np.asarray(list(v), float) for v in (depth, width, loss))
    if not (len(d) == len(w) == len(y)) or len(d) < 5:
        raise ValueError(
            f"need >= 5 (D, W, loss) triples of equal length, got {len(d)}, {len(w)}, {len(y)}"
        )
    if (d <= 0).any() or (w <= 0).any():
        raise ValueError("depth and width must be > 0")
    rng = np.random.default_rng(seed)
    best = None
    span = float(y.max() - y.min()) or 1.0

    def resid(p):
        return (depth_width_law(p, d, w) - y) / y

    for _ in range(starts):
        alpha, beta = rng.uniform(0.1, 1.5, size=2)
        x0 = [
            float(y.min()) * 0.9,
            span * float(d.min()) ** alpha,
            alpha,
            span * float(w.min()) ** beta,
            beta,
        ]
        try:
            fit = least_squares(
                resid,
                x0,
                bounds=([0, 0, 0.01, 0, 0.01], [np.inf, np.inf, 4.0, np.inf, 4.0]),
                x_scale="jac",
                max_nfev=5000,
            )
        except ValueError:
            continue
        if best is None or fit.cost < best.cost:
            best = fit
    if best is None:
        raise ValueError("the depth-width law fit did not converge")
    return tuple(float(v) for v in best.x)  # type: ignore[return-value]
