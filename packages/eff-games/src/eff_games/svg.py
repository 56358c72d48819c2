"""A small dependency-free SVG line-plot writer (log-y convergence curves) for ``--plot x.svg``."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

__all__ = ["write_svg"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def write_svg(
    path: str | Path,
    series: dict[str, list[float]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    floor: float = 1e-17,
) -> Path:
    """Write one log-y line plot: ``series`` maps labels to y values and ``"x"`` to the x values.

    Values below ``floor`` (zero or round-off negatives) are drawn at ``floor``.
    """
    xs = [float(v) for v in series["x"]]
    curves = {k: [max(float(y), floor) for y in v] for k, v in series.items() if k != "x"}
    if not xs or not curves:
        raise ValueError("series needs an 'x' list and at least one curve")
    w, h, left, right, top, bottom = 640, 420, 70, 170, 40, 50
    x0, x1 = min(xs), max(xs)
    logs = [math.log10(y) for ys in curves.values() for y in ys]
    y0, y1 = math.floor(min(logs)), math.ceil(max(logs))
    if y1 == y0:
        y1 = y0 + 1

    def px(x: float) -> float:
        return left + (w - left - right) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)

    def py(y: float) -> float:
        return top + (h - top - bottom) * (1 - (math.log10(y) - y0) / (y1 - y0))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="none" stroke="black"/>',
    ]
    step = max(1, (y1 - y0) // 8)
    for e in range(y0, y1 + 1, step):
        y = py(10.0**e)
        out.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="black"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    for x in (x0, (x0 + x1) / 2, x1):
        out.append(f'<text x="{px(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">{x:g}</text>')
    out.append(
        f'<text x="{left + (w - left - right) / 2}" y="{h - 10}" text-anchor="middle">{escape(xlabel)}</text>'
    )
    out.append(
        f'<text x="16" y="{top + (h - top - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + (h - top - bottom) / 2})">{escape(ylabel)}</text>'
    )
    for i, (label, ys) in enumerate(curves.items()):
        color = _COLORS[i % len(_COLORS)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        ly = top + 14 + 18 * i
        out.append(
            f'<line x1="{w - right + 10}" y1="{ly - 4}" x2="{w - right + 30}" y2="{ly - 4}" stroke="{color}" stroke-width="2"/>'
        )
        out.append(f'<text x="{w - right + 34}" y="{ly}">{escape(label)}</text>')
    out.append("</svg>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path
