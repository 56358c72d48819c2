#!/usr/bin/env python
"""Benchmark: eff-theory's label-noise GD — the no-overhead claim of the paper.

One LNGD step (fresh label flips for every sample) against one plain GD step, n = 100, d = 1000,
m = 10 (the reproduction's config), both through ``train`` with logging only at the ends:
required time(LNGD) / time(GD) ≤ 1.1. Also prints the time of the two GEMMs of 2m·n·d flops each
that bound a step (the ``limit`` of the spec) and how close a step gets to it.

Same process, interleaved rounds, medians of CPU time with BLAS pinned to one thread. Exit status 1
when the ratio exceeds its bound.

    uv run --frozen python tools/bench/theory_label_noise_gd.py [--rounds 5] [--steps 500]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import _theory_timing as timing  # first: pins BLAS to one thread before numpy loads
import numpy as np

from eff_theory.label_noise_gd import PatchCNN, make_signal_noise_data, train


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    n, d, m, steps = 100, 1000, 10, args.steps
    data = make_signal_noise_data(n, d, mu_norm=1.5, rng=0)
    init = PatchCNN(d, m, rng=1)
    Xf = data.patches().reshape(-1, d)
    Wf = init.W.reshape(2 * m, d)
    C = np.random.default_rng(2).standard_normal((2 * n, 2 * m))

    def run(method: str) -> Callable[[], object]:
        return lambda: train(init.copy(), data, method=method, steps=steps, log_every=steps, rng=3)

    def gemms() -> None:
        for _ in range(steps):
            Xf @ Wf.T  # pre-activations (2n × d)(d × 2m)
            C.T @ Xf  # gradient (2m × 2n)(2n × d)

    jobs = {"GD": run("gd"), "LNGD": run("label_noise"), "2 GEMMs": gemms}
    med = timing.median_cpu(jobs, args.rounds, per=steps)
    timing.print_times(
        f"CPU time per step, n={n}, d={d}, m={m}, median of {args.rounds} rounds", med
    )
    print(f"  info  GD step / its two GEMMs: {med['GD'] / med['2 GEMMs']:6.2f}x")
    return timing.report([("LNGD step / GD step", med["LNGD"] / med["GD"], "<=", 1.1)])


if __name__ == "__main__":
    sys.exit(main())
