#!/usr/bin/env python
"""Benchmark: RankMatch's pairwise relevance ranking (PRR) loss against KL, forward + backward.

The spec (eff-vision, RankMatch, Performance): PRR is ``O(B·C²)`` as written; target ≤ 3× the
cost of KL at C = 100 labels. Both losses are timed as training uses them: logits → softmax →
loss → backward, a batch of 256 rows, the margin-free PRR of the unlabelled term (and the margin
PRR of the labelled term as information). ``prr_loss``'s default ``impl="auto"`` sorts from
``SORTED_MIN_LABELS`` labels on (``O(C log C)``); the pairwise reference is timed beside it. Before
the sorted path (issue #25): 102–333× KL at C = 100, 6.7× at C = 6.

One process, interleaved rounds, medians of CPU time per call, one torch/BLAS thread
(``_bench``). Exit status 1 when the target fails.

    uv run --frozen python tools/bench/vision_rankmatch.py [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from _bench import Bench, add_json_arg, median_cpu

from eff_vision.rankmatch import SORTED_MIN_LABELS, prr_loss

BATCH = 256
TARGET_C = 100


def jobs_for(c: int, calls: int) -> dict[str, tuple[object, int]]:
    g = torch.Generator().manual_seed(c)
    logits = torch.randn(BATCH, c, generator=g, requires_grad=True)
    d = torch.randn(BATCH, c, generator=g).softmax(-1)

    def kl() -> None:
        F.kl_div(logits.log_softmax(-1), d, reduction="batchmean").backward()

    def prr(impl: str, margin: bool = False):
        def job() -> None:
            prr_loss(logits.softmax(-1), d, margin=margin, impl=impl).backward()

        return job

    return {
        "kl": (kl, calls),
        "prr auto": (prr("auto"), calls),
        "prr auto, margin": (prr("auto", True), calls),
        "prr pairwise": (prr("pairwise"), max(1, calls // 10) if c >= 64 else calls),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    add_json_arg(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench = Bench("vision_rankmatch")
    bench.info.update({"batch": BATCH, "sorted_min_labels": SORTED_MIN_LABELS})
    for c in (6, 10, 32, TARGET_C):
        med = median_cpu(jobs_for(c, 50), args.rounds)
        ratios = {k: med[k] / med["kl"] for k in med if k != "kl"}
        bench.info[f"C={c}"] = {
            "kl_us": 1e6 * med["kl"],
            **{f"{k} / kl": r for k, r in ratios.items()},
        }
        print(
            f"C = {c:3d}: KL {1e6 * med['kl']:7.1f} us; PRR / KL: "
            + ", ".join(f"{k} {r:.2f}x" for k, r in ratios.items())
        )
        if c == TARGET_C:
            bench.check(f"PRR (auto, margin-free) / KL, forward+backward, C = {c}",
                        ratios["prr auto"], "<=", 3.0)  # fmt: skip
            bench.check(f"PRR (auto, margin) / KL, forward+backward, C = {c}",
                        ratios["prr auto, margin"], "<=", 3.0)  # fmt: skip
    return bench.finish(args.json)


if __name__ == "__main__":
    sys.exit(main())
