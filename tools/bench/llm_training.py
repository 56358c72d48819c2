"""Benchmark: the training methods of eff-llm (LRC, Nemotron-Flash), same-process ratios.

- LRC: time per training step of the low-rank clone (teacher forward + weight composition +
  functional student) over the same 48-wide Llama trained from scratch;
- Nemotron-Flash: weight-norm projection overhead as a fraction of one training step (spec target
  < 5 %); hybrid vs same-depth Llama single-token decode tokens/s (CPU reference kernels rank
  operators differently from GPU kernels: reported, not gated).

Interleaved, one torch thread, medians of 5.

    uv run --frozen python tools/bench/llm_training.py
"""

from __future__ import annotations

import statistics
import time

import torch

from eff_llm._lm_train import causal_lm_loss
from eff_llm._models import tiny_llama
from eff_llm.lrc import LowRankClone, LowRankCloneConfig
from eff_llm.nemotron_flash import HybridSLM, HybridSLMConfig, WeightNormProjector, decode_latency


def _step_time(model, loss_fn, x, params, reps: int = 5) -> float:
    opt = torch.optim.AdamW(params, lr=1e-3)
    times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        loss = loss_fn(model, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main() -> None:
    torch.set_num_threads(1)
    x = torch.randint(0, 1200, (16, 64), generator=torch.Generator().manual_seed(0))

    def lm(m, ids):
        return causal_lm_loss(m(input_ids=ids).logits, ids)

    teacher = tiny_llama(1200, 128, 2, 4, intermediate_size=256, seed=0)
    lrc = LowRankClone(teacher, LowRankCloneConfig(48, kl_temperature=1.0))
    scratch = tiny_llama(1200, 48, 2, 4, intermediate_size=256, seed=0)
    t_lrc = _step_time(
        lrc, lambda m, ids: m(ids).loss, x, [p for p in lrc.parameters() if p.requires_grad]
    )
    t_scr = _step_time(scratch, lm, x, list(scratch.parameters()))
    print(
        f"LRC step / scratch step: {t_lrc / t_scr:.2f}x ({1000 * t_lrc:.1f} ms vs {1000 * t_scr:.1f} ms)"
    )

    model = tiny_llama(1200, 128, 2, 4, intermediate_size=256, seed=0)
    t_step = _step_time(model, lm, x, list(model.parameters()))
    proj = WeightNormProjector(model)
    proj_times = []
    for _ in range(20):
        t0 = time.perf_counter()
        proj()
        proj_times.append(time.perf_counter() - t0)
    frac = statistics.median(proj_times) / t_step
    print(f"weight-norm projection / training step: {100 * frac:.2f} % (target < 5 %)")

    for ops in ("d f m2 f a f m2 f", "a f a f a f a f"):
        cfg = HybridSLMConfig(
            operators=ops, hidden_size=128, ffn_size=256, num_heads=4, vocab_size=1200
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            hybrid = HybridSLM(cfg)
        ms = decode_latency(
            cfg.operators, 128, seq_len=256, decode_tokens=16, repeats=5, model=hybrid
        )
        print(
            f"decode {ops!r}: {1000 / ms:.0f} tokens/s ({ms:.2f} ms/token, CPU reference kernels)"
        )


if __name__ == "__main__":
    main()
