"""Shared by the eff-theory benchmarks heavy_rnn, label_noise_gd and quantized_oja: BLAS pinned to
one thread before numpy loads, interleaved timing rounds with medians of CPU time, and the
PASS/FAIL lines of the requirements."""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

from threadpoolctl import threadpool_limits  # noqa: E402

Check = tuple[str, float, str, float]  # (text, measured, ">=" or "<=", bound)


def median_cpu(
    jobs: dict[str, Callable[[], object]], rounds: int, per: float = 1.0
) -> dict[str, float]:
    """Median CPU seconds of each job (divided by ``per``) over ``rounds`` interleaved rounds."""
    samples: dict[str, list[float]] = {k: [] for k in jobs}
    with threadpool_limits(1):
        for _ in range(rounds):
            for name, job in jobs.items():
                t0 = time.process_time()
                job()
                samples[name].append((time.process_time() - t0) / per)
    return {k: statistics.median(v) for k, v in samples.items()}


def print_times(title: str, med: dict[str, float]) -> None:
    print(title)
    width = max(map(len, med))
    for name, seconds in med.items():
        print(f"  {name:{width}s} {1e3 * seconds:10.3f} ms")


def report(checks: list[Check]) -> int:
    """Print one PASS/FAIL line per requirement; the exit status (1 when any fails)."""
    ok = True
    for text, value, op, bound in checks:
        passed = value >= bound if op == ">=" else value <= bound
        ok &= passed
        print(f"  {'PASS' if passed else 'FAIL'}  {text}: {value:8.3g}  (required {op} {bound:g})")
    return 0 if ok else 1
