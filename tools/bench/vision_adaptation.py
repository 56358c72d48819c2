"""Benchmarks of eff-vision's adaptation methods (issue 11), as ratios measured in the same run.

- RankMatch: PRR loss time / KL time at C = 6 and C = 100 (spec target: ≤ 3× at C = 100).
- FedPhoenix: one PhoenixReset call / one local epoch of a client (spec: "about nothing").

LCoTTA's step time against EATA and RobIA's time per frame against full fine-tuning and BN-adapt
moved to ``tools/bench/vision_lcotta.py`` and ``tools/bench/vision_robia.py`` (issue #25: in the
``_bench`` style, with their targets checked; the LCoTTA benchmark here let EATA's filters skip
most steps of its untrained model).

CPU seconds, medians over interleaved rounds, torch and BLAS pinned to one thread.
Run: ``uv run python tools/bench/vision_adaptation.py``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from threadpoolctl import threadpool_limits


def median_cpu(jobs: dict[str, Callable[[], object]], rounds: int = 5) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            t0 = time.process_time()
            job()
            samples[name].append(time.process_time() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_prr() -> None:
    from eff_vision.rankmatch import prr_loss

    for c in (6, 100):
        g = torch.Generator().manual_seed(0)
        p = torch.randn(256, c, generator=g).softmax(-1)
        d = torch.randn(256, c, generator=g).softmax(-1)

        def prr(p=p, d=d) -> None:
            for _ in range(20):
                prr_loss(p, d, margin=False)

        def kl(p=p, d=d) -> None:
            for _ in range(20):
                torch.nn.functional.kl_div(p.log(), d, reduction="batchmean")

        med = median_cpu({"prr": prr, "kl": kl})
        print(
            f"RankMatch C={c:3d}: PRR / KL = {med['prr'] / med['kl']:.2f}  (target <= 3 at C=100)"
        )


def bench_fedphoenix() -> None:
    from eff_vision.fedphoenix import PhoenixReset
    from eff_vision.models import FedDigitsCNN

    model = FedDigitsCNN()
    reset = PhoenixReset(theta=2 / 32, stop_round=100)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(72, 1, 8, 8), torch.randint(0, 10, (72,))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def epoch() -> None:
        for idx in torch.randperm(72).split(16):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()

    med = median_cpu({"reset": lambda: reset(model, 0, gen), "epoch": epoch}, rounds=9)
    print(f"FedPhoenix: reset / one local epoch (72 samples) = {med['reset'] / med['epoch']:.3f}")


def main() -> None:
    torch.set_num_threads(1)
    with threadpool_limits(1):
        bench_prr()
        bench_fedphoenix()


if __name__ == "__main__":
    main()
