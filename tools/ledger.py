#!/usr/bin/env python
"""The claims ledger: ``LEDGER.md``, ``ledger/full.json`` and the README's status column.

``eff reproduce --full --out DIR`` writes ``DIR/results.json``. This script turns a full run into
what the repository shows, so the README and the code cannot drift:

    uv run tools/ledger.py build out/results.json     # write ledger/full.json, LEDGER.md, README status
    uv run tools/ledger.py check                      # exit 1 when README/LEDGER.md differ from ledger/full.json

``build`` accepts several JSON files (a full run split over processes or sessions: the last
result of each name wins) and refuses results that are not full mode or that raised.
``ledger/full.json`` keeps what the ledger needs (claims with their per-seed values, counts,
the paper and headline); the README method table's last column (status) is generated from it for
every row that names a reproduction in backticks.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from eff_shared.report import headline_status, ledger_markdown
from eff_shared.reproduce import Result

ROOT = Path(__file__).resolve().parent.parent
LEDGER_JSON = ROOT / "ledger" / "full.json"
LEDGER_MD = ROOT / "LEDGER.md"
README = ROOT / "README.md"
_KEEP = ("name", "mode", "seed", "paper_title", "headline", "claims", "elapsed_s", "error")
_NAME = re.compile(r"`((?:games|graph|kernels|llm|rl|shared|theory|vision)\.[a-z0-9_]+)`")
_TABLE_HEADER = "| method | paper | package | module | notes | status |"


def load_results(paths: Sequence[Path]) -> list[Result]:
    """Results from one or more ``results.json`` (or ``ledger/full.json``) files, by name."""
    by_name: dict[str, Result] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for item in data["results"]:
            by_name[item["name"]] = Result.from_dict(item)
    return [by_name[n] for n in sorted(by_name)]


def slim(results: Sequence[Result]) -> dict:
    """The ledger's JSON: per result only what the ledger and the README need."""
    out = []
    for r in results:
        d = r.to_dict()
        out.append({k: d[k] for k in _KEEP} | {"counts": d["counts"], "passed": d["passed"]})
    return {"results": out}


def status_cell(r: Result) -> str:
    """The README status of one reproduction, from its full-mode result."""
    c = r.counts()
    if r.error is not None:
        return f"`{r.name}`: **error** in the full run"
    seeds = max((cl.n_seeds for cl in r.claims if cl.kind == "paper"), default=1)
    checks = c["checks_passed"] + c["checks_failed"]
    paper = (
        c["paper_reproduced"] + c["paper_xfail"] + c["paper_unexpected"] + c["paper_regressions"]
    )
    parts = [
        f"`{r.name}` ({r.mode}, {seeds} seeds): headline **{headline_status(r)}**",
        f"checks {c['checks_passed']}/{checks}",
        f"paper claims {c['paper_reproduced'] + c['paper_unexpected']}/{paper} reproduced",
    ]
    if c["paper_xfail"]:
        parts[-1] += f" ({c['paper_xfail']} xfail)"
    if c["paper_regressions"] or c["checks_failed"]:
        parts.append(f"**{c['paper_regressions'] + c['checks_failed']} regressions**")
    return " · ".join(parts) + " — [ledger](LEDGER.md#" + _anchor(r) + ")"


def _anchor(r: Result) -> str:
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens.
    title = f"{r.name} — {r.paper_title}" if r.paper_title else r.name
    text = re.sub(r"[^\w\- ]", "", title.lower())
    return text.replace(" ", "-")


def render_readme(readme: str, results: Sequence[Result]) -> str:
    """``readme`` with the status column of the method table regenerated from ``results``."""
    by_name = {r.name: r for r in results}
    lines = readme.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(_TABLE_HEADER))
    except StopIteration:
        raise SystemExit(f"README has no method table starting with {_TABLE_HEADER!r}") from None
    i = start + 2
    while i < len(lines) and lines[i].startswith("|"):
        cells = _split_row(lines[i])
        names = [n for n in _NAME.findall(cells[-1]) if n in by_name]
        if names:
            cells[-1] = "<br>".join(status_cell(by_name[n]) for n in dict.fromkeys(names))
            lines[i] = "| " + " | ".join(cells) + " |\n"
        i += 1
    return "".join(lines)


def _split_row(line: str) -> list[str]:
    body = line.strip()[1:-1]
    cells, cur, escaped = [], "", False
    for ch in body:
        if ch == "|" and not escaped:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += ch
        escaped = ch == "\\"
    cells.append(cur.strip())
    return cells


def missing_rows(readme: str, results: Sequence[Result]) -> list[str]:
    """Reproductions in the ledger that no README row names."""
    named = set(_NAME.findall(readme))
    return [r.name for r in results if r.name not in named]


def build(paths: Sequence[Path]) -> int:
    results = load_results(paths)
    bad = [r.name for r in results if r.mode != "full" or r.error is not None]
    if bad:
        print(f"ledger: not full-mode or raised, refused: {', '.join(bad)}", file=sys.stderr)
        return 1
    LEDGER_JSON.parent.mkdir(exist_ok=True)
    LEDGER_JSON.write_text(json.dumps(slim(results), indent=1) + "\n")
    LEDGER_MD.write_text(ledger_markdown(results))
    README.write_text(render_readme(README.read_text(), results))
    for name in missing_rows(README.read_text(), results):
        print(f"ledger: no README row names `{name}`", file=sys.stderr)
    print(f"ledger: {len(results)} reproductions -> {LEDGER_JSON.name}, LEDGER.md, README status")
    return 0


def check() -> int:
    results = load_results([LEDGER_JSON])
    problems = []
    if README.read_text() != render_readme(README.read_text(), results):
        problems.append("README status column differs from ledger/full.json")
    if LEDGER_MD.read_text() != ledger_markdown(results):
        problems.append("LEDGER.md differs from ledger/full.json")
    problems += [f"no README row names `{n}`" for n in missing_rows(README.read_text(), results)]
    for p in problems:
        print(f"ledger: {p} (run: uv run tools/ledger.py build RESULTS.json)", file=sys.stderr)
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write ledger/full.json, LEDGER.md and the README status")
    b.add_argument("results", nargs="+", type=Path, help="results.json of a full run")
    sub.add_parser("check", help="exit 1 when README or LEDGER.md drifted from ledger/full.json")
    args = parser.parse_args(argv)
    return build(args.results) if args.cmd == "build" else check()


if __name__ == "__main__":
    sys.exit(main())
