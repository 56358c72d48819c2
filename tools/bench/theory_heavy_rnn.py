#!/usr/bin/env python
"""Benchmark: eff-theory's heavy-tailed RNN tools — the performance angles of the spec.

1. CMS α-stable sampler (``sample_levy_stable``) against ``scipy.stats.levy_stable.rvs``, 10⁶
   draws at α = 1 and α = 1.5: required ≥ 2× faster.
2. Maximal Lyapunov exponent (k = 1 tangent path) against plain ``HeavyTailedRNN.simulate`` of the
   same length, N = 300: required ≤ 3× the cost.
3. Full spectrum (k = N, one QR per step) against k = 1 at N = 150: the spec expects "order N/10";
   required ≤ N (within an order of magnitude). The reduced QR of a 150 × 150 matrix (LAPACK,
   ~0.85 ms) dominates the k = N step, so the measured ratio is ~40–50, about 3× N/10.
4. The batched sweep (4 networks × 11 gains, N = 300, k = 1) against the bare ``np.matmul`` calls
   it must make: the sweep should reach ≥ 50 % of the matmul throughput.

Same process, interleaved rounds, medians of CPU time with BLAS pinned to one thread. Prints the
ratios; exit status 1 when one misses its requirement.

    uv run --frozen python tools/bench/theory_heavy_rnn.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import _theory_timing as timing  # first: pins BLAS to one thread before numpy loads
import numpy as np
from scipy import stats

from eff_theory.heavy_rnn import (
    HeavyTailedRNN,
    levy_weight_matrix,
    lyapunov_spectrum,
    max_lyapunov_exponent,
    sample_levy_stable,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    draws, steps = 1_000_000, 400
    net = HeavyTailedRNN(300, 1.5, 1.0, rng=0)
    W150 = levy_weight_matrix(150, 1.5, 1.0, rng=1)
    rng = np.random.default_rng(2)
    Ws = np.stack([levy_weight_matrix(300, 1.5, 1.0, rng=rng) for _ in range(4)])
    gains = np.geomspace(0.2, 2.0, 11)
    X = rng.standard_normal((4, 300, 11))

    def bare_matmuls() -> None:
        for _ in range(steps):
            np.matmul(Ws, X)
            np.matmul(Ws, X)  # state and tangent: the two GEMMs of a k = 1 step

    jobs: dict[str, Callable[[], object]] = {
        "ours a=1": lambda: sample_levy_stable(1.0, draws, rng=3),
        "scipy a=1": lambda: stats.levy_stable.rvs(1.0, 0.0, size=draws, random_state=3),
        "ours a=1.5": lambda: sample_levy_stable(1.5, draws, rng=3),
        "scipy a=1.5": lambda: stats.levy_stable.rvs(1.5, 0.0, size=draws, random_state=3),
        "simulate N=300": lambda: net.simulate(steps),
        "mle N=300": lambda: max_lyapunov_exponent(net.W, 1.0, n_steps=steps, warmup=0, rng=0),
        "k=1 N=150": lambda: lyapunov_spectrum(W150, 2.0, n_steps=100, warmup=0, k=1, rng=0),
        "k=N N=150": lambda: lyapunov_spectrum(W150, 2.0, n_steps=100, warmup=0, rng=0),
        "batched sweep": lambda: max_lyapunov_exponent(Ws, gains, n_steps=steps, warmup=0, rng=0),
        "bare matmuls": bare_matmuls,
    }
    med = timing.median_cpu(jobs, args.rounds)
    timing.print_times(f"CPU time per call, median of {args.rounds} interleaved rounds", med)
    return timing.report(
        [
            (
                "scipy levy_stable.rvs / our CMS sampler, α=1",
                med["scipy a=1"] / med["ours a=1"],
                ">=",
                2.0,
            ),
            (
                "scipy levy_stable.rvs / our CMS sampler, α=1.5",
                med["scipy a=1.5"] / med["ours a=1.5"],
                ">=",
                2.0,
            ),
            (
                "MLE (k=1) / plain simulate, N=300",
                med["mle N=300"] / med["simulate N=300"],
                "<=",
                3.0,
            ),
            (
                "full spectrum k=N / k=1, N=150 (spec: order N/10 = 15)",
                med["k=N N=150"] / med["k=1 N=150"],
                "<=",
                150.0,
            ),
            (
                "batched sweep throughput / bare np.matmul throughput",
                med["bare matmuls"] / med["batched sweep"],
                ">=",
                0.5,
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
