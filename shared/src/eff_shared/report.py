"""Reports of reproduction runs: the terminal summary table, JSON, Markdown and PNG plots."""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from eff_shared.reproduce import Result

__all__ = [
    "claims_table",
    "format_value",
    "plot_series",
    "print_results",
    "result_table",
    "write_json",
    "write_markdown",
    "write_plots",
    "write_report",
]


def format_value(value: Any) -> str:
    """Numbers with 4 significant digits (scientific when tiny or huge), other values as text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _claim_rows(results: Sequence[Result]) -> list[list[str]]:
    rows = []
    for r in results:
        if r.error is not None:
            last = r.error.strip().splitlines()[-1] if r.error.strip() else "error"
            rows.append([r.name, f"ERROR: {last}", "", "", "FAIL"])
            continue
        if not r.claims:
            rows.append([r.name, "(no claims made)", "", "", "FAIL"])
        for c in r.claims:
            measured = format_value(c.measured) + (f" {c.unit}" if c.unit else "")
            rows.append(
                [
                    r.name,
                    c.text,
                    measured,
                    f"{c.op} {format_value(c.threshold)}",
                    "pass" if c.passed else "FAIL",
                ]
            )
    return rows


def claims_table(results: Sequence[Result]) -> Table:
    """One row per claim: method, claim, measured, threshold, pass."""
    table = Table(title="eff reproduce: claims", show_lines=False)
    for col in ("method", "claim", "measured", "threshold", "pass"):
        table.add_column(col, overflow="fold")
    for row in _claim_rows(results):
        style = None if row[-1] == "pass" else "bold red"
        table.add_row(*row, style=style)
    return table


def result_table(result: Result) -> Table | None:
    """The method-vs-baseline table of one result, if it has one."""
    if not result.table:
        return None
    columns = list(dict.fromkeys(k for row in result.table for k in row))
    table = Table(title=f"{result.name} ({result.mode}, seed {result.seed})")
    for col in columns:
        table.add_column(col)
    for row in result.table:
        table.add_row(*(format_value(row.get(col, "")) for col in columns))
    return table


def write_json(results: Sequence[Result], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "passed": all(r.passed for r in results),
        "results": [r.to_dict() for r in results],
    }
    path.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")
    return path


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays reach here from metrics; keep the core free of a numpy import cost.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_markdown(
    results: Sequence[Result], path: str | Path, plots: dict[str, Path] | None = None
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = ["# eff reproduce report", ""]
    parts.append(
        _md_table(["method", "claim", "measured", "threshold", "pass"], _claim_rows(results))
    )
    for r in results:
        parts += ["", f"## {r.name}", "", f"mode `{r.mode}`, seed {r.seed}, {r.elapsed_s:.1f} s"]
        if r.table:
            cols = list(dict.fromkeys(k for row in r.table for k in row))
            parts += [
                "",
                _md_table(cols, [[format_value(row.get(c, "")) for c in cols] for row in r.table]),
            ]
        if r.metrics:
            parts += [
                "",
                _md_table(
                    ["metric", "value"], [[k, format_value(v)] for k, v in r.metrics.items()]
                ),
            ]
        for note in r.notes:
            parts += ["", f"- {note}"]
        if r.error:
            parts += ["", "```", r.error.rstrip(), "```"]
        for plot_name, png in (plots or {}).items():
            if plot_name.startswith(r.name + "."):
                parts += ["", f"![{plot_name}]({png.name})"]
    path.write_text("\n".join(parts) + "\n")
    return path


def plot_series(
    path: str | Path,
    series: dict[str, list[float]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    logy: bool | None = None,
) -> Path | None:
    """Write one line plot as PNG: ``series`` maps labels to y values, with optional ``"x"``.

    ``logy=None`` picks a log y-axis when every value is positive and they span over three
    decades (convergence curves). Returns ``None`` (and writes nothing) without matplotlib.
    """
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = series.get("x")
    curves = {k: v for k, v in series.items() if k != "x"}
    if logy is None:
        values = [float(y) for ys in curves.values() for y in ys if y is not None]
        logy = bool(values) and min(values) > 0 and max(values) / min(values) > 1e3
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, ys in curves.items():
        ax.plot(x if x is not None else range(len(ys)), ys, label=label)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_plots(results: Sequence[Result], out_dir: str | Path) -> dict[str, Path]:
    """One PNG per series of every result; nothing (and no error) without matplotlib."""
    written: dict[str, Path] = {}
    for r in results:
        for plot_name, series in r.series.items():
            key = f"{r.name}.{plot_name}"
            path = plot_series(Path(out_dir) / f"{key}.png", series, title=f"{r.name}: {plot_name}")
            if path is not None:
                written[key] = path
    return written


def write_report(results: Sequence[Result], out_dir: str | Path) -> dict[str, Path]:
    """``results.json``, ``report.md`` and the plots in ``out_dir``."""
    out_dir = Path(out_dir)
    plots = write_plots(results, out_dir)
    return {
        "json": write_json(results, out_dir / "results.json"),
        "markdown": write_markdown(results, out_dir / "report.md", plots),
        **{f"plot:{k}": v for k, v in plots.items()},
    }


def print_results(results: Sequence[Result], console: Console) -> None:
    for r in results:
        table = result_table(r)
        if table is not None:
            console.print(table)
        for note in r.notes:
            console.print(f"[dim]{r.name}: {note}[/dim]")
    console.print(claims_table(results))
