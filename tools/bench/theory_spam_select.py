#!/usr/bin/env python
"""Benchmark: eff-theory's SpAM selection — the two performance angles of the spec.

1. Regression front-end: the Chebyshev-recurrence coefficient builder
   (``cosine_design_coefficients``) against naive ``np.cos(np.outer(...))`` per covariate
   (expected ≥ 5× faster), with the largest difference between the two.
2. Sequence-model simulation at p = 10⁴, K = 4096: the χ²-increment simulator
   (``simulate_sequence_model``) against explicit Gaussian coefficients (expected ≥ 100× faster).

Same process, interleaved rounds, medians of CPU time with BLAS pinned to one thread. Prints the
ratios; exit status 1 when one falls below its expectation.

    uv run --frozen python tools/bench/theory_spam_select.py [--rounds 3]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from eff_theory.spam_select import (  # noqa: E402
    cosine_design_coefficients,
    simulate_sequence_model,
)

SIGMA2 = 1 / 300


def cpu(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def naive_coefficients(X: np.ndarray, y: np.ndarray, K: int) -> np.ndarray:
    yc = y - y.mean()
    i = np.arange(1, K + 1)
    return np.stack(
        [
            (yc @ (math.sqrt(2) * np.cos(np.pi * np.outer(X[:, j], i)))) / len(y)
            for j in range(X.shape[1])
        ],
        axis=1,
    )


def explicit_statistics(p: int, K: int, ks: list[int], rng: np.random.Generator) -> np.ndarray:
    """T_j(k) from explicit N(0, σ²) coefficients (null coordinates), in column chunks."""
    out = np.empty((len(ks), p))
    idx = np.array(ks) - 1
    for start in range(0, p, 500):
        stop = min(p, start + 500)
        X = math.sqrt(SIGMA2) * rng.standard_normal((K, stop - start))
        out[:, start:stop] = np.cumsum(X**2, axis=0)[idx] / SIGMA2
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    N, p_reg, K_reg = 2000, 50, 64
    X = rng.random((N, p_reg))
    y = np.sin(2 * np.pi * X[:, 0]) + rng.normal(size=N)
    p, K = 10_000, 4096
    ks = sorted({*(2**j for j in range(1, 13)), 11})

    with threadpool_limits(1):
        simulate_sequence_model(p, 5, 0.7, SIGMA2, ks=ks, rng=0)  # warm the coefficient cache
        rec, naive, sim, explicit = [], [], [], []
        for _ in range(args.rounds):
            rec.append(cpu(lambda: cosine_design_coefficients(X, y, K_reg)))
            naive.append(cpu(lambda: naive_coefficients(X, y, K_reg)))
            sim.append(cpu(lambda: simulate_sequence_model(p, 0, 0.0, SIGMA2, ks=ks, rng=rng)))
            explicit.append(cpu(lambda: explicit_statistics(p, K, ks, rng)))
        diff = np.abs(
            cosine_design_coefficients(X, y, K_reg) - naive_coefficients(X, y, K_reg)
        ).max()

    checks = [
        (
            "coefficients: naive cos / Chebyshev recurrence",
            statistics.median(naive) / statistics.median(rec),
            5.0,
        ),
        (
            "simulation p=1e4, K=4096: explicit Gaussians / χ² increments",
            statistics.median(explicit) / statistics.median(sim),
            100.0,
        ),
    ]
    print(
        f"recurrence {statistics.median(rec) * 1e3:.1f} ms, naive {statistics.median(naive) * 1e3:.1f} ms "
        f"(N={N}, p={p_reg}, K={K_reg}; max |difference| {diff:.1e})"
    )
    print(
        f"χ²-increment simulator {statistics.median(sim) * 1e3:.1f} ms, explicit {statistics.median(explicit) * 1e3:.0f} ms"
    )
    ok = True
    for name, ratio, expected in checks:
        passed = ratio >= expected
        ok &= passed
        print(f"{name}: {ratio:.1f}x (expected >= {expected:g}x) {'ok' if passed else 'BELOW'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
