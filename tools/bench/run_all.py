#!/usr/bin/env python
"""Run the speed benchmarks of issue #25 and collect their targets in one JSON and one table.

Each benchmark runs in its own process (``python tools/bench/<name>.py --json ...``), one after the
other, so that none shares a core with another. The results go to ``--out`` (default
``bench-results/``): every benchmark's JSON record, ``results.json`` (all of them) and
``results.md`` (one row per target: measured, target, verdict). ``--readme`` rewrites the README's
"Performance" section (between its markers) from the table. Exit status 1 when a target fails or a
benchmark crashes.

    uv run --frozen python tools/bench/run_all.py [--only games_cfr ...] [--skip games_scale]
        [--out bench-results] [--readme] [--from-json bench-results/results.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
README = ROOT / "README.md"
BEGIN, END = "<!-- performance:begin -->", "<!-- performance:end -->"

#: the benchmarks, in the order they run (the slowest last)
BENCHES = (
    "games_cfr",
    "vision_rankmatch",
    "vision_lcotta",
    "vision_robia",
    "theory_quantized_oja",
    "vision_panlut",
    "vision_moric",
    "games_scale",
)


def run(name: str, out: Path) -> dict:
    path = out / f"{name}.json"
    path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    print(f"=== {name}", flush=True)
    proc = subprocess.run([sys.executable, str(HERE / f"{name}.py"), "--json", str(path)])
    seconds = time.perf_counter() - t0
    if not path.exists():
        return {"bench": name, "error": f"exit status {proc.returncode}, no record", "checks": []}
    record = json.loads(path.read_text())
    record["wall_s"] = round(seconds, 1)
    record["exit_status"] = proc.returncode
    return record


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # "|PSNR(a) − PSNR(b)|" must not split the Markdown row


def table(records: list[dict]) -> str:
    rows = ["| benchmark | target | measured | verdict |", "|---|---|---|---|"]
    for r in records:
        if r.get("error"):
            rows.append(f"| `{r['bench']}` | — | {r['error']} | **error** |")
        for c in r["checks"]:
            unit = c.get("unit", "")
            rows.append(
                f"| `{r['bench']}` | {_cell(c['text'])} {c['op']} {c['target']:g}{unit} | "
                f"{c['value']:.4g}{unit} | {'pass' if c['passed'] else '**FAIL**'} |"
            )
    return "\n".join(rows) + "\n"


def write_readme(md: str, records: list[dict]) -> None:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"run_all: README.md has no {BEGIN} ... {END} markers")
    machine = next((r["machine"] for r in records if "machine" in r), "unknown machine")
    date = max((r.get("date", "") for r in records), default="")
    body = (
        f"{BEGIN}\nMeasured by `uv run tools/bench/run_all.py --readme` on {machine}, {date}; "
        "ratios within one process, CPU time, one thread.\n\n" + md + END
    )
    head, rest = text.split(BEGIN, 1)
    README.write_text(head + body + rest.split(END, 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=BENCHES)
    parser.add_argument("--skip", action="append", choices=BENCHES, default=[])
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="RESULTS",
        help="rebuild the table (and --readme) from a results.json of an earlier run; runs nothing",
    )
    parser.add_argument(
        "--readme", action="store_true", help="rewrite README's Performance section"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in (args.only or BENCHES) if n not in args.skip]
    if args.from_json is not None:
        records = [r for r in json.loads(args.from_json.read_text()) if r["bench"] in names]
    else:
        records = [run(n, args.out) for n in names]
    md = table(records)
    if args.from_json is None:
        (args.out / "results.json").write_text(json.dumps(records, indent=2) + "\n")
    (args.out / "results.md").write_text(md)
    print("\n" + md)
    if args.readme:
        write_readme(md, records)
    failed = [r["bench"] for r in records if r.get("error") or r.get("exit_status")]
    if failed:
        print(f"run_all: targets failed or benchmarks crashed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
