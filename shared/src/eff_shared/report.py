"""Reports of reproduction runs: the terminal summary table, JSON, Markdown and PNG plots."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from eff_shared.reproduce import (  # json_default lives there: the worker serialises with it
    FAIL,
    NOT_JUDGED,
    PASS,
    XFAIL,
    XPASS,
    Claim,
    Result,
    json_default,
    summarize,
)

__all__ = [
    "claims_table",
    "format_claim_value",
    "format_value",
    "headline_status",
    "json_default",
    "ledger_markdown",
    "parse_csv",
    "plot_series",
    "plots_available",
    "print_results",
    "print_rows",
    "result_table",
    "rows_table",
    "summary_line",
    "write_json",
    "write_ledger",
    "write_markdown",
    "write_plots",
    "write_report",
    "write_rows_json",
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


def format_claim_value(claim: Claim) -> str:
    """The measured value; for a claim over seeds also ``[min, max]`` and the seeds on the claimed
    side, e.g. ``median 0.11 [0.008, 0.17], 4/5 seeds``."""
    unit = f" {claim.unit}" if claim.unit else ""
    if not claim.values or len(claim.values) == 1:
        return format_value(claim.measured) + unit
    lo, hi = claim.spread
    stat = claim.statistic if claim.kind == "paper" else "worst"
    return (
        f"{stat} {format_value(claim.measured)}{unit} [{format_value(lo)}, {format_value(hi)}], "
        f"{claim.k_on_side}/{claim.n_seeds} seeds"
    )


def _verdict_text(claim: Claim, mode: str) -> str:
    verdict = claim.verdict(mode)
    if verdict == XFAIL:
        return "xfail (not reproduced)"
    if verdict == NOT_JUDGED:
        return f"not judged ({'/'.join(claim.modes)} mode only)"
    return verdict


def _claim_rows(results: Sequence[Result]) -> list[list[str]]:
    rows = []
    for r in results:
        if r.error is not None:
            last = r.error.strip().splitlines()[-1] if r.error.strip() else "error"
            rows.append([r.name, "", f"ERROR: {last}", "", "", FAIL])
            continue
        if not r.claims:
            rows.append([r.name, "", "(no claims made)", "", "", FAIL])
        for c in r.claims:
            text = c.text if c.expected != "xfail" else f"{c.text} — {c.reason}"
            rows.append(
                [
                    r.name,
                    c.kind,
                    text,
                    format_claim_value(c),
                    f"{c.op} {format_value(c.threshold)}",
                    _verdict_text(c, r.mode),
                ]
            )
    return rows


_STYLES = {PASS: None, FAIL: "bold red", XFAIL: "yellow", XPASS: "cyan", NOT_JUDGED: "dim"}


def claims_table(results: Sequence[Result]) -> Table:
    """One row per claim: method, kind, claim, measured, threshold, verdict."""
    table = Table(title="eff reproduce: claims", show_lines=False)
    for col in ("method", "kind", "claim", "measured", "threshold", "verdict"):
        table.add_column(col, overflow="fold")
    for row in _claim_rows(results):
        style = _STYLES.get(row[-1].split(" (")[0] if row[-1] != XPASS else XPASS, "bold red")
        table.add_row(*row, style=style)
    return table


def summary_line(results: Sequence[Result]) -> str:
    """Counts over the run: checks, paper claims reproduced / not reproduced (xfail) /
    reproduced unexpectedly, claims not judged in this mode, regressions and errors."""
    t = summarize(results)
    checks = t["checks_passed"] + t["checks_failed"]
    regressions = t["checks_failed"] + t["paper_regressions"] + t["errors"] + t["no_claims"]
    parts = [
        f"checks {t['checks_passed']}/{checks} passed",
        f"paper claims: {t['paper_reproduced']} reproduced, {t['paper_xfail']} not reproduced "
        f"(xfail), {t['paper_unexpected']} reproduced (unexpected)",
    ]
    if t["not_judged"]:
        parts.append(f"{t['not_judged']} not judged in this mode")
    parts.append(
        f"regressions: {regressions} ({t['checks_failed']} failed checks, "
        f"{t['paper_regressions']} failed paper claims, {t['errors'] + t['no_claims']} errors)"
    )
    return " · ".join(parts)


def rows_table(
    title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> Table:
    """Rows (one dict each) as a rich table: ``columns``, or every key in first-seen order;
    cells through :func:`format_value` (a missing key is an empty cell)."""
    cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
    table = Table(title=title)
    for col in cols:
        table.add_column(str(col))
    for row in rows:
        table.add_row(*(format_value(row.get(col, "")) for col in cols))
    return table


def result_table(result: Result) -> Table | None:
    """The method-vs-baseline table of one result, if it has one."""
    if not result.table:
        return None
    return rows_table(f"{result.name} ({result.mode}, seed {result.seed})", result.table)


def write_rows_json(
    path: str | Path, rows: Sequence[Mapping[str, Any]], extra: Mapping[str, Any] | None = None
) -> Path:
    """Write ``{"rows": rows, **extra}`` as indented JSON (numpy values converted; parent
    directories created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"rows": list(rows), **(extra or {})}
    path.write_text(json.dumps(payload, indent=2, default=_json_or_str) + "\n")
    return path


def print_rows(
    title: str,
    rows: Sequence[Mapping[str, Any]],
    json_path: str | Path | None = None,
    *,
    extra: Mapping[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    console: Console | None = None,
) -> None:
    """What every domain CLI prints: ``rows`` as one table (:func:`rows_table`), and with
    ``json_path`` the rows (and ``extra``) written there (:func:`write_rows_json`)."""
    import sys

    console = console or Console(width=None if sys.stdout.isatty() else 160)
    console.print(rows_table(title, rows, columns))
    if json_path is not None:
        write_rows_json(json_path, rows, extra)


def parse_csv(
    text: str | Sequence[str],
    kind: Callable[[str], Any] = str,
    *,
    name: str = "value",
    allowed: Sequence[Any] | None = None,
) -> list[Any]:
    """``"a, b,c"`` (or several such strings, as a repeated option gives) → ``[kind(a), ...]``;
    ``ValueError`` naming ``name`` for an empty list, a token ``kind`` rejects, or one outside
    ``allowed``. CLIs turn it into their usage error."""
    joined = text if isinstance(text, str) else ",".join(text)
    out = []
    for token in (t.strip() for t in joined.split(",")):
        if not token:
            continue
        try:
            value = kind(token)
        except (TypeError, ValueError):
            what = getattr(kind, "__name__", "value")
            raise ValueError(f"{name}: {token!r} is not a valid {what}") from None
        if allowed is not None and value not in allowed:
            raise ValueError(
                f"{name} must be a comma-separated list of {', '.join(map(str, allowed))}; "
                f"got {token!r}"
            )
        out.append(value)
    if not out:
        raise ValueError(f"{name} needs at least one value, got {joined!r}")
    return out


def write_json(results: Sequence[Result], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "passed": all(r.passed for r in results),
        "summary": summarize(results),
        "results": [r.to_dict() for r in results],
    }
    path.write_text(json.dumps(payload, indent=2, default=json_default) + "\n")
    return path


def _json_or_str(obj: Any) -> Any:
    try:
        return json_default(obj)
    except TypeError:
        return str(obj)  # paths, dtypes, enums in CLI rows


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
        _md_table(
            ["method", "kind", "claim", "measured", "threshold", "verdict"], _claim_rows(results)
        )
    )
    parts += ["", summary_line(results)]
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


#: characters per line of a plot's title (the 5.5-inch figure holds about 55)
_TITLE_WIDTH = 50


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

    ``logy=None`` picks a log y-axis when every value is positive and they span over two
    decades (convergence curves), the same rule for every package. Returns ``None`` (and writes nothing) without matplotlib.
    """
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    x = series.get("x")
    curves = {k: v for k, v in series.items() if k != "x"}
    if logy is None:
        values = [float(y) for ys in curves.values() for y in ys if y is not None]
        logy = bool(values) and min(values) > 0 and max(values) / min(values) > 1e2
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, ys in curves.items():
        ax.plot(x if x is not None else range(len(ys)), ys, label=label)
    if logy:
        ax.set_yscale("log")
    # a long title wraps rather than running off the figure, never inside "α = 0.5"
    ax.set_title(
        textwrap.fill(title.replace(" = ", "\u00a0=\u00a0"), _TITLE_WIDTH, break_on_hyphens=False)
    )
    if x and all(isinstance(v, int | float) and float(v).is_integer() for v in x):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds, epochs: no 2.5
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plots_available() -> bool:
    """Whether PNG plots can be written (matplotlib, the ``plot`` extra, is installed)."""
    return importlib.util.find_spec("matplotlib") is not None


PLOTS_SKIPPED = "plots skipped: matplotlib is not installed (pip install 'eff-shared[plot]')"


def _file_stem(key: str) -> str:
    """A portable file name for a plot key ("llm.x.m* vs n" -> "llm.x.m_vs_n")."""
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9._=-]", "_", key)).strip("_")


def write_plots(results: Sequence[Result], out_dir: str | Path) -> dict[str, Path]:
    """One PNG per series of every result, titled and labelled from ``Result.plot_labels``
    (the plot's name in words when absent); nothing (and no error) without matplotlib."""
    written: dict[str, Path] = {}
    for r in results:
        for plot_name, series in r.series.items():
            key = f"{r.name}.{plot_name}"
            labels = r.plot_labels.get(plot_name, {})
            title = labels.get("title") or plot_name.replace("_", " ")
            scale = labels.get("yscale")
            path = plot_series(
                Path(out_dir) / f"{_file_stem(key)}.png",
                series,
                title=f"{r.name}: {title}",
                xlabel=labels.get("xlabel", ""),
                ylabel=labels.get("ylabel", ""),
                logy=None if scale is None else scale == "log",
            )
            if path is not None:
                written[key] = path
    return written


VERDICT_HELP = """\
- **check** — holds by construction or by the method's mathematics (exactness, invariants, memory
  bounds, kernel accuracy); it must hold at every seed. A failing check is a bug.
- **paper** — the paper's empirical claim tested at small scale, judged on the median (or the mean,
  where the claim says mean) over seeds. Ours is printed as `median [min, max], k/n seeds` (k seeds on
  the claimed side).
- Verdicts: **pass**; **FAIL** (a failing check, or a paper claim expected to reproduce that did not:
  a regression, the only verdicts that make `eff reproduce` exit non-zero); **xfail (not reproduced)**
  (a faithful implementation does not reproduce the claim at this scale: run and printed, with the
  reason, never gating); **reproduced (unexpected)** (an xfail claim that held: a reason to revisit
  it); **not judged** (a claim declared for the other mode only, e.g. full mode only).
"""


def _ledger_rows(r: Result) -> list[list[str]]:
    rows = []
    for c in r.claims:
        if c.kind != "paper":
            continue
        rows.append(
            [
                ("**headline** " if c.headline else "") + c.text,
                c.paper or "",
                format_claim_value(c),
                f"{c.op} {format_value(c.threshold)}",
                _verdict_text(c, r.mode),
                c.reason,
            ]
        )
    return rows


def headline_status(r: Result) -> str:
    """``reproduced`` / ``not reproduced`` / ``regression`` for the paper's headline claims of a
    result (all of them must hold), ``not judged`` or ``no headline claim``."""
    heads = [c for c in r.claims if c.kind == "paper" and c.headline]
    if r.error is not None:
        return "error"
    if not heads:
        return "no headline claim"
    verdicts = [c.verdict(r.mode) for c in heads]
    if FAIL in verdicts:
        return "regression"
    judged = [v for v in verdicts if v != NOT_JUDGED]
    if not judged:
        return "not judged"
    if all(v in (PASS, XPASS) for v in judged):
        return "reproduced"
    return "not reproduced"


def ledger_markdown(results: Sequence[Result]) -> str:
    """The ledger: per method the paper, its headline result, and its paper claims (ours as
    median [min, max] over n seeds; threshold; verdict; reason for an xfail)."""
    modes = sorted({r.mode for r in results})
    parts = [
        "# eff ledger: the papers' claims at small scale",
        "",
        f"Mode: {', '.join(modes)}; master seed {', '.join(sorted({str(r.seed) for r in results}))}.",
        "",
        VERDICT_HELP.rstrip(),
        "",
        summary_line(results),
    ]
    for r in results:
        c = r.counts()
        title = f" — {r.paper_title}" if r.paper_title else ""
        parts += ["", f"## {r.name}{title}", ""]
        if r.headline:
            parts += [f"Paper's headline: {r.headline}", ""]
        parts.append(
            f"Headline at this scale: **{headline_status(r)}**. Checks {c['checks_passed']}/"
            f"{c['checks_passed'] + c['checks_failed']} passed; paper claims "
            f"{c['paper_reproduced']} reproduced, {c['paper_xfail']} xfail, "
            f"{c['paper_unexpected']} reproduced (unexpected), {c['paper_regressions']} regressions."
        )
        if r.error is not None:
            last = r.error.strip().splitlines()[-1] if r.error.strip() else "error"
            parts += ["", f"ERROR: {last}"]
        rows = _ledger_rows(r)
        if rows:
            parts += [
                "",
                _md_table(
                    ["paper claim", "paper's number", "ours", "threshold", "verdict", "reason"],
                    rows,
                ),
            ]
    return "\n".join(parts) + "\n"


def write_ledger(results: Sequence[Result], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ledger_markdown(results))
    return path


def write_report(results: Sequence[Result], out_dir: str | Path) -> dict[str, Path]:
    """``results.json``, ``report.md`` and the plots in ``out_dir``."""
    out_dir = Path(out_dir)
    plots = write_plots(results, out_dir)
    return {
        "json": write_json(results, out_dir / "results.json"),
        "markdown": write_markdown(results, out_dir / "report.md", plots),
        "ledger": write_ledger(results, out_dir / "ledger.md"),
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
