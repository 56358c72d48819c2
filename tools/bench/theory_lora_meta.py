#!/usr/bin/env python
"""Benchmark: eff-theory's LoRA-ML — quality and cost ratios of the spec, measured in one run.

1. Quality: excess risk of LoRA-ML / oracle after rank-k adaptation (limit 1, the O(kd/n') floor)
   and SR / LoRA-ML, at d = 10, k = 1, T = 3, N = 2000, n' = 100 (median of 3 seeds).
2. Cost: CPU time of LoRA-ML retraining (3000 outer steps) / the SR closed form.
3. Torch wrapper (with the extra ``eff-theory[torch]``): time per ``meta_retrain`` step of a
   ``MultiTaskLoRA`` MLP / the same plain multi-task step without adapters (expected ≤ 1.3× at
   width 512; at width 128 Python overhead dominates and the ratio is reported only).

Medians of CPU time, BLAS and torch pinned to one thread. Exit status 1 when the quality ratio
exceeds 2 or the width-512 torch overhead exceeds 1.3×.

    uv run --frozen python tools/bench/theory_lora_meta.py [--rounds 3]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from eff_theory.lora_meta import (  # noqa: E402
    LoRAMetaLearner,
    make_lowrank_task_family,
    sample_task,
    standard_retraining,
)
from eff_theory.reproduce.lora_meta import compare_bases  # noqa: E402


def torch_overhead(rounds: int, width: int, steps: int = 30) -> float:
    import torch

    from eff_theory.lora_meta import MultiTaskLoRA, meta_retrain

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tasks, batch = 3, 256

    def mlp() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
        )

    data = [(torch.randn(batch, width), torch.randn(batch, width)) for _ in range(tasks)]

    def plain_steps(model: torch.nn.Module) -> None:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(steps):
            opt.zero_grad()
            for x, y in data:
                torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()

    wrapped, plain = [], []
    meta_retrain(MultiTaskLoRA(mlp(), tasks, r=8, lora_alpha=8), data, 3)  # warm-up
    plain_steps(mlp())
    for _ in range(rounds):
        model = MultiTaskLoRA(mlp(), tasks, r=8, lora_alpha=8)
        t0 = time.process_time()
        meta_retrain(model, data, steps)
        wrapped.append(time.process_time() - t0)
        base = mlp()
        t0 = time.process_time()
        plain_steps(base)
        plain.append(time.process_time() - t0)
    return statistics.median(wrapped) / statistics.median(plain)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ok = True
    with threadpool_limits(1):
        runs = [compare_bases(seed, n_finetune=(100,)) for seed in range(3)]
        med = {
            m: statistics.median(r["excess"][m][100] for r in runs)
            for m in ("oracle", "SR", "LoRA-ML")
        }
        fam = make_lowrank_task_family(10, 1, 3, seed=0)
        rng = np.random.default_rng(0)
        data = [sample_task(fam, t, 2000, 0.1, rng) for t in range(3)]
        ml_t, sr_t = [], []
        for _ in range(args.rounds):
            t0 = time.process_time()
            LoRAMetaLearner().fit(data)
            ml_t.append(time.process_time() - t0)
            t0 = time.process_time()
            for _ in range(100):
                standard_retraining(data)
            sr_t.append((time.process_time() - t0) / 100)
    quality = med["LoRA-ML"] / med["oracle"]
    ok &= quality <= 2.0
    print(
        f"quality: excess LoRA-ML / oracle = {quality:.3f}x (limit 1; expected <= 2) "
        f"{'ok' if quality <= 2 else 'ABOVE'}; SR / LoRA-ML = {med['SR'] / med['LoRA-ML']:.0f}x"
    )
    ml, sr = statistics.median(ml_t), statistics.median(sr_t)
    print(
        f"cost: LoRA-ML retraining {ml:.2f} s / SR closed form {sr * 1e3:.2f} ms = {ml / sr:.0f}x"
    )
    if importlib.util.find_spec("torch") is None:
        print("torch wrapper: skipped (needs eff-theory[torch])")
    else:
        for width in (128, 512):
            ratio = torch_overhead(args.rounds, width)
            verdict = "reported only" if width != 512 else "ok" if ratio <= 1.3 else "ABOVE 1.3x"
            if width == 512:
                ok &= ratio <= 1.3
            print(
                f"torch wrapper, MLP width {width}, r=8, 3 tasks, batch 256: MultiTaskLoRA step / "
                f"plain multi-task step = {ratio:.2f}x ({verdict})"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
