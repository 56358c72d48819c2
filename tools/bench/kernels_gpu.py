"""GPU benchmark of eff-kernels: SageAttention kernels vs SDPA/FlashAttention, LRQK decode, ParetoQ GEMM.

One script for one GPU session (under 4 minutes on an H200): it checks that the Triton kernels
compile and match the PyTorch references on CUDA, then reports TOPS / tokens per second / GB/s
against the baselines and the H200 limits, and writes everything as JSON.

    uv run --frozen python tools/bench/kernels_gpu.py --json bench.json         # on a GPU
    uv run --frozen python tools/bench/kernels_gpu.py --dry-run                 # CPU, tiny shapes (CI)

Exit status 1 when a kernel does not match its reference or a section raises. The logic lives in
``eff_kernels.bench`` (also ``eff kernels bench``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eff_kernels.bench import SECTIONS, run_bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on CPU (Triton interpreted)"
    )
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help="comma-separated: " + ",".join(SECTIONS)
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    res = run_bench(dry_run=args.dry_run, sections=sections)
    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=1, default=str))
        print(f"written: {args.json}")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
