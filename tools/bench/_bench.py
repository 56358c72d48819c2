"""What every benchmark of ``tools/bench/`` shares: one BLAS/torch thread, interleaved timing
rounds (medians of CPU time), the allocator settled between jobs, PASS/FAIL lines against the
targets and a JSON record that ``run_all.py`` collects.

Import this module before numpy/torch (it pins the threads through the environment first).

The allocator: a call that frees many small blocks (``pyspiel.exploitability`` frees ~10⁵ nodes of
its best-response tree) leaves them in glibc's fast bins, and the next allocation of a few hundred
KiB — whoever makes it — pays for coalescing them (measured: ~270 ms, once). ``settle()`` makes
that allocation inside the timing of the job that caused it, so each job is charged for its own
garbage and the next one starts from a settled heap.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402


def settle() -> None:
    """One heap allocation of 256 KiB (below glibc's mmap threshold): coalesces whatever the
    previous job left in the fast bins, so that its cost stays with that job."""
    np.empty(1 << 15).fill(0.0)


def cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    """CPU seconds per call of ``fn`` over ``calls`` calls, the allocator settled at the end."""
    t0 = time.process_time()
    for _ in range(calls):
        fn()
    settle()
    return (time.process_time() - t0) / calls


def median_cpu(jobs: dict[str, tuple[Callable[[], object], int]], rounds: int) -> dict[str, float]:
    """Median over ``rounds`` interleaved rounds of each job's CPU seconds per call; ``jobs`` maps
    a name to ``(fn, calls per round)``. Every job is called once untimed first (warm-up)."""
    for fn, _ in jobs.values():
        fn()
        settle()
    samples: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(rounds):
        for name, (fn, calls) in jobs.items():
            samples[name].append(cpu_per_call(fn, calls))
    return {k: statistics.median(v) for k, v in samples.items()}


@dataclass
class Check:
    """A measured value against its target: ``value op target`` (``op`` is ">=" or "<=")."""

    text: str
    value: float
    op: str
    target: float
    unit: str = "x"

    @property
    def passed(self) -> bool:
        return self.value >= self.target if self.op == ">=" else self.value <= self.target


@dataclass
class Bench:
    """A benchmark's record: its checks and any information worth keeping (sizes, curves)."""

    name: str
    checks: list[Check] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def check(self, text: str, value: float, op: str, target: float, unit: str = "x") -> Check:
        c = Check(text, float(value), op, float(target), unit)
        self.checks.append(c)
        return c

    def finish(self, json_path: str | Path | None = None) -> int:
        """Print one PASS/FAIL line per check, write the JSON record; exit status 1 on a FAIL."""
        for c in self.checks:
            print(
                f"  {'PASS' if c.passed else 'FAIL'}  {c.text}: {c.value:.4g}{c.unit}  "
                f"(target {c.op} {c.target:g}{c.unit})"
            )
        if json_path is not None:
            record = {
                "bench": self.name,
                "machine": machine(),
                "date": time.strftime("%Y-%m-%d"),
                "checks": [asdict(c) | {"passed": c.passed} for c in self.checks],
                "info": self.info,
            }
            Path(json_path).write_text(json.dumps(record, indent=2, default=float) + "\n")
        return 0 if all(c.passed for c in self.checks) else 1


def machine() -> str:
    """The machine in words: CPU model, cores, Python."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="write the checks and figures to this file")
