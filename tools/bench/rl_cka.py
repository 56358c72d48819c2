"""Benchmark: CKA-RL's fused actor vs a plain actor (fine-tune) inside the same PPO, same process.

The fused forward adds K weight-sized adds per layer per forward pass; the spec's target is at most
1.15x the fine-tune time per PPO run. Runs interleaved, one torch thread, medians of 5.

    uv run --frozen python tools/bench/rl_cka.py
"""

from __future__ import annotations

import statistics
import time

import torch

from eff_rl.cka_rl import CKAPolicy, KnowledgePool
from eff_rl.envs import cartpole_task
from eff_rl.ppo import ContinualPPO
from eff_shared.torch import pin_threads


def one_run(pool_size: int, seed: int) -> float:
    torch.manual_seed(seed)
    pol = CKAPolicy(4, 2)
    if pool_size:
        base = {k: v.detach().clone() for k, v in pol.theta().items()}
        pool = KnowledgePool(pool_size)
        for k in range(pool_size):
            pool.add(k, {n: 0.1 * torch.randn_like(v) for n, v in base.items()})
        pol.begin_task(pool, base)
    ppo = ContinualPPO(
        lambda n: cartpole_task(num_envs=n),
        pol,
        n_envs=4,
        n_steps=128,
        train_alpha=bool(pool_size),
        seed=seed,
    )
    t0 = time.process_time()
    ppo.learn(8192)
    return time.process_time() - t0


def main() -> None:
    pin_threads(1)
    times: dict[int, list[float]] = {0: [], 3: [], 5: []}
    for rep in range(5):
        for k in times:
            times[k].append(one_run(k, rep))
    base = statistics.median(times[0])
    print(f"fine-tune (plain actor): {base:.3f} CPU-s per 8192 env steps")
    for k in (3, 5):
        med = statistics.median(times[k])
        print(
            f"CKA-RL pool {k}: {med:.3f} CPU-s, ratio to fine-tune {med / base:.3f}x (target <= 1.15x)"
        )


if __name__ == "__main__":
    main()
