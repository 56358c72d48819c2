#!/usr/bin/env python
"""Benchmark: eff-theory's quantized Oja — the cost of simulated low precision.

1. Quantized Oja (linear and log grids, 8 bits) against full-precision Oja on the same stream
   (n = 5000, d = 500, 5 runs vectorised), batched (b = 25) and standard (batch size 1): the spec
   expects 2–4× slower (simulated stochastic rounding draws one uniform per element); required
   ≤ 6×. Batched full-precision Oja is a few BLAS-speed passes over X, while the quantized one
   must round all n·d per-sample updates, so the batched log grid (a log1p per element) is the
   hardest case.
2. Quantizer throughput on 4·10⁶ numbers: required ≥ 50 M elements/s for the linear grid (floor,
   compare, ``rng.random``); the log grid (an extra log1p and gathers) is printed for reference.
3. The bit budget of the iterate: β·d bits against 64·d for float64.

Same process, interleaved rounds, medians of CPU time with BLAS pinned to one thread. Exit status 1
when a requirement fails.

    uv run --frozen python tools/bench/theory_quantized_oja.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import _theory_timing as timing  # first: pins BLAS to one thread before numpy loads
import numpy as np

from eff_theory.quantized_oja import (
    LinearQuantizer,
    LogQuantizer,
    oja_learning_rate,
    quantized_oja,
    spiked_covariance_stream,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n, d, b, bits = 5000, 500, 25, 8
    X = spiked_covariance_stream(n, d, n_trials=5, rng=0).X
    eta = oja_learning_rate(n, b, 0.75)
    lq, nlq = LinearQuantizer(bits), LogQuantizer(bits, dim=d)
    x = np.random.default_rng(1).standard_normal(4_000_000)
    gen = np.random.default_rng(2)

    eta1 = oja_learning_rate(n, n, 0.75)
    X1 = X[:, :1000]  # standard Oja: 1000 steps of batch size 1 are enough to time a step

    def oja(q: object, batched: bool = True) -> Callable[[], object]:
        if batched:
            return lambda: quantized_oja(X, n_batches=b, learning_rate=eta, quantizer=q, rng=3)
        return lambda: quantized_oja(X1, n_batches=1000, learning_rate=eta1, quantizer=q, rng=3)

    jobs = {
        "FP batched": oja(None),
        "LQ batched": oja(lq),
        "NLQ batched": oja(nlq),
        "FP standard": oja(None, False),
        "LQ standard": oja(lq, False),
        "NLQ standard": oja(nlq, False),
        "LQ quantize": lambda: lq.quantize(x, gen),
        "NLQ quantize": lambda: nlq.quantize(x, gen),
    }
    med = timing.median_cpu(jobs, args.rounds)
    timing.print_times(f"CPU time per call, median of {args.rounds} interleaved rounds", med)
    print(
        f"  info  log quantizer throughput: {x.size / med['NLQ quantize'] / 1e6:.1f} M elements/s"
    )
    print(f"  info  iterate storage at {bits} bits: {bits * d} bits vs {64 * d} for float64")
    return timing.report(
        [
            (
                "batched LQ Oja / full-precision batched Oja",
                med["LQ batched"] / med["FP batched"],
                "<=",
                6.0,
            ),
            (
                "batched NLQ Oja / full-precision batched Oja",
                med["NLQ batched"] / med["FP batched"],
                "<=",
                6.0,
            ),
            (
                "standard LQ Oja / full-precision standard Oja",
                med["LQ standard"] / med["FP standard"],
                "<=",
                6.0,
            ),
            (
                "standard NLQ Oja / full-precision standard Oja",
                med["NLQ standard"] / med["FP standard"],
                "<=",
                6.0,
            ),
            (
                "linear quantizer throughput, M elements/s",
                x.size / med["LQ quantize"] / 1e6,
                ">=",
                50.0,
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
