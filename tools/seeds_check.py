#!/usr/bin/env python
"""Every reproduction at every seed 0–9 (issue #24): a result table and no error.

Runs ``eff reproduce --seed S --json ...`` (quick mode unless ``--full``) for each seed, in worker
processes (``-j``), then checks, per reproduction and seed: no error, a non-empty method-vs-baseline
table, and every ``check`` claim passing (checks hold at every seed by definition; paper claims are
judged over seeds and are only counted here). Writes ``--out``/seed-S.json and prints one line per
problem; exit status 1 when any.

    uv run --frozen python tools/seeds_check.py [--seeds 0-9] [-j 2] [--out seeds-check] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_seeds(text: str) -> list[int]:
    lo, sep, hi = text.partition("-")
    return list(range(int(lo), int(hi) + 1)) if sep else [int(s) for s in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="reproductions or domains (default: all)")
    parser.add_argument("--seeds", default="0-9", help="a range 0-9 or a list 1,3,7")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "seeds-check")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    counts = {"results": 0, "checks": 0, "paper claims": 0}
    for seed in parse_seeds(args.seeds):
        path = args.out / f"seed-{seed}.json"
        cmd = ["eff", "reproduce", *args.names, "--seed", str(seed), "-j", str(args.jobs)]
        cmd += ["--json", str(path), *(["--full"] if args.full else [])]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, env={**os.environ, "EFF_QUIET": "1"})
        if not path.exists():
            problems.append(f"seed {seed}: no results written")
            continue
        for r in json.loads(path.read_text())["results"]:
            counts["results"] += 1
            where = f"{r['name']} seed {seed}"
            if r.get("error"):
                problems.append(f"{where}: error: {r['error'].strip().splitlines()[-1]}")
                continue
            if not r.get("table"):
                problems.append(f"{where}: no result table")
            for c in r.get("claims", []):
                if c.get("kind") == "check":
                    counts["checks"] += 1
                    if c.get("verdict", "pass" if c.get("passed") else "FAIL") == "FAIL":
                        problems.append(f"{where}: check failed: {c.get('text')}")
                else:
                    counts["paper claims"] += 1
    print(
        f"seeds_check: {counts['results']} results, {counts['checks']} checks, "
        f"{counts['paper claims']} paper claims; {len(problems)} problems"
    )
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
