#!/usr/bin/env python
"""Compare two ``eff reproduce --json`` files: are the numbers identical, timing aside?

A change that must not move any number (a refactor, a fast path) is checked by running the same
reproductions at the same seeds before and after and comparing the two JSON files:

    uv run eff reproduce --json before.json          # (or --full, or some names)
    ... change ...
    uv run eff reproduce --json after.json
    uv run tools/compare_results.py before.json after.json

Every claim must be equal field for field (text, kind, per-seed values, measured value, threshold,
operator, expected verdict, verdict; a claim whose unit is a duration, e.g. "slowest case <= 5 s",
all but its measured values). Metrics, tables, series and notes must be equal too, except
for values whose key (or table column) names a duration or a rate — ``elapsed_s``, ``cpu_s``,
``wall_s``, ``seconds``, ``CPU s/epoch``, ``MP/s``, ``time``, ``ms_per_iteration``, ``build_s_target``,
``s per run``, ``ms/q``, ``times`` … —, the cells of a table row whose label (``item``, ``metric``,
``quantity``) names one (``"...: predicted / measured ms"``), and numbers printed inside notes
after "s" units; ``--ignore REGEX`` adds patterns (matched against keys and note texts). Reproductions present in only one file are
listed. Exit status 0 when everything compared is identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

#: keys whose values are durations or rates: never compared
TIMING = re.compile(
    r"(^|[\s_/(-])(elapsed|wall|cpu|seconds?|secs?|times?|timing|runtime|latency|throughput)"
    r"($|[\s_/)-])|(^|[\s_])(s|ms|us)$|_(s|ms|us)(_|$)|\b(s|ms|us)/|/s\b"
    r"|(^|[\s_])(s|ms|us)[\s_]per([\s_]|$)|per[ _]s(ec(ond)?)?\b|mp/s|it/s",
    re.IGNORECASE,
)
#: keys of a table row's label: a row labelled with a duration or a rate ("...: measured ms")
#: holds timings in its other cells
ROW_LABELS = ("item", "metric", "quantity")
#: claim units that are durations: such a claim's measured values are timings
TIME_UNITS = frozenset({"s", "ms", "us", "µs", "min", "h"})
#: durations inside free text (notes): "12.3 s", "4 min", "0.5 ms"
_TEXT_TIMING = re.compile(r"\d+(\.\d+)?\s*(s|ms|min|h)\b")
CLAIM_FIELDS = ("text", "kind", "values", "seeds", "measured", "threshold", "op", "statistic",
                "expected", "modes", "headline", "verdict")  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def diff(a: Any, b: Any, path: str, ignore: list[re.Pattern[str]], out: list[str]) -> None:
    """Append the paths where ``a`` and ``b`` differ (timing keys skipped) to ``out``."""
    if isinstance(a, dict) and isinstance(b, dict):
        label = next((a[k] for k in ROW_LABELS if isinstance(a.get(k), str)), None)
        if label is not None and label in b.values() and TIMING.search(label):
            return  # a timing row: its label is compared (equal), its cells are timings
        for k in sorted(set(a) | set(b), key=str):
            if TIMING.search(str(k)) or any(p.search(str(k)) for p in ignore):
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'after' if k not in a else 'before'}")
                continue
            diff(a[k], b[k], f"{path}/{k}", ignore, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} -> {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{path}[{i}]", ignore, out)
    elif isinstance(a, str) and isinstance(b, str) and path.split("/")[-1].startswith("notes"):
        if any(p.search(a) for p in ignore):
            return  # --ignore also names notes (by their text), e.g. a sentence of timing ratios
        if _TEXT_TIMING.sub("<t>", a) != _TEXT_TIMING.sub("<t>", b):
            out.append(f"{path}: note text differs")
    elif not _same(a, b):
        out.append(f"{path}: {a!r} -> {b!r}")


def load(path: Path) -> dict[str, dict[str, Any]]:
    data = json.loads(path.read_text())
    results = data["results"] if isinstance(data, dict) and "results" in data else data
    return {f"{r['name']} ({r['mode']}, seed {r['seed']})": r for r in results}


def compare(before: dict, after: dict, ignore: list[re.Pattern[str]]) -> dict[str, list[str]]:
    """Per reproduction in both files, the list of differences (empty: identical)."""
    report = {}
    for name in sorted(set(before) & set(after)):
        a, b, out = before[name], after[name], []
        ca, cb = a.get("claims", []), b.get("claims", [])
        if [c["text"] for c in ca] != [c["text"] for c in cb]:
            out.append(f"claims: texts differ ({len(ca)} -> {len(cb)} claims)")
        else:
            for i, (x, y) in enumerate(zip(ca, cb, strict=True)):
                timing = x.get("unit") in TIME_UNITS and y.get("unit") in TIME_UNITS
                for f in CLAIM_FIELDS:
                    if timing and f in ("values", "measured"):
                        continue
                    if not _same(x.get(f), y.get(f)):
                        out.append(
                            f"claims[{i}] {x['text'][:60]!r} {f}: {x.get(f)!r} -> {y.get(f)!r}"
                        )
        for part in ("error", "metrics", "table", "series", "notes", "headline"):
            diff(a.get(part), b.get(part), part, ignore, out)
        report[name] = out
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--ignore", action="append", default=[], metavar="REGEX",
                        help="also skip keys matching REGEX (repeatable)")  # fmt: skip
    parser.add_argument(
        "--max-lines", type=int, default=8, help="differences shown per reproduction"
    )
    args = parser.parse_args(argv)
    before, after = load(args.before), load(args.after)
    report = compare(before, after, [re.compile(p) for p in args.ignore])
    for name, out in report.items():
        print(f"{'identical' if not out else 'DIFFERENT'}  {name}")
        for line in out[: args.max_lines]:
            print(f"    {line}")
        if len(out) > args.max_lines:
            print(f"    ... {len(out) - args.max_lines} more")
    only = sorted(set(before) ^ set(after))
    for name in only:
        print(f"only in {'before' if name in before else 'after'}: {name}")
    n_diff = sum(bool(v) for v in report.values())
    print(f"{len(report) - n_diff}/{len(report)} identical (timing aside)"
          + (f"; {len(only)} in one file only" if only else ""))  # fmt: skip
    return 1 if n_diff or only else 0


if __name__ == "__main__":
    sys.exit(main())
