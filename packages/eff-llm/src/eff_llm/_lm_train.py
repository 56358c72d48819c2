"""The ``accelerate`` training loop shared by LRC and Nemotron-Flash (causal LM on token windows).

One loop, unchanged from one CPU process to ``accelerate launch`` on many GPUs:

- the **global** batch of each step is drawn from a seeded generator (identical on every process),
  and process ``r`` of ``n`` trains on rows ``r::n`` of it; DDP averages the gradients, so the update
  equals the single-process update on the whole global batch (tested in the integration tests);
- the learning-rate schedule is stepped once per optimisation step by the loop itself (not through
  ``accelerator.prepare``, whose scheduler wrapper steps once per process);
- ``post_step`` callables (e.g. Nemotron-Flash's weight-norm projection) are registered as optimizer
  step post-hooks, so they run after *every* ``optimizer.step()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from eff_shared.errors import check_choice, check_positive
from eff_shared.progress import track

from .corpus import lm_windows

__all__ = ["TrainConfig", "TrainLog", "causal_lm_loss", "evaluate_lm", "train_lm"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser and schedule of :func:`train_lm` (AdamW; OneCycle or cosine with linear warm-up)."""

    steps: int = 200
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    schedule: Literal["onecycle", "cosine", "constant"] = "onecycle"
    warmup_fraction: float = 0.05
    max_grad_norm: float | None = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len"):
            check_positive(name, getattr(self, name), integer=True)
        check_positive("lr", self.lr)
        check_positive("weight_decay", self.weight_decay, strict=False)
        check_choice("schedule", self.schedule, ["onecycle", "cosine", "constant"])
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup_fraction must lie in [0, 1), got {self.warmup_fraction}")
        if self.max_grad_norm is not None:
            check_positive("max_grad_norm", self.max_grad_norm)


@dataclass
class TrainLog:
    """Per-step training losses (of process 0's shard) and the number of processes used."""

    losses: list[float] = field(default_factory=list)
    num_processes: int = 1


def causal_lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of ``logits`` (B, T, V) on ``input_ids`` (B, T)."""
    return nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), input_ids[:, 1:].reshape(-1)
    )


def _scheduler(
    opt: torch.optim.Optimizer, cfg: TrainConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    if cfg.schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=cfg.lr, total_steps=cfg.steps, pct_start=max(cfg.warmup_fraction, 1e-3)
        )
    warm = int(cfg.warmup_fraction * cfg.steps)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if cfg.schedule == "constant":
            return 1.0
        progress = (step - warm) / max(1, cfg.steps - warm)
        return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def train_lm(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, torch.Tensor], torch.Tensor],
    stream: torch.Tensor,
    cfg: TrainConfig,
    *,
    params: Iterable[nn.Parameter] | None = None,
    post_step: Sequence[Callable[[], None]] = (),
    accelerator=None,
) -> TrainLog:
    """Train ``model`` in place: ``loss_fn(model, batch)`` on seeded windows of ``stream``.

    ``params`` defaults to the trainable parameters; ``accelerator`` defaults to a fresh
    ``accelerate.Accelerator()`` (CPU, one GPU, or the processes of ``accelerate launch``).
    The global batch (``cfg.batch_size`` rows) must be divisible by the number of processes.
    """
    from accelerate import Accelerator

    acc = accelerator if accelerator is not None else Accelerator()
    world, rank = acc.num_processes, acc.process_index
    if cfg.batch_size % world:
        raise ValueError(
            f"batch_size={cfg.batch_size} must be divisible by the number of processes ({world})"
        )
    trainable = [
        p for p in (params if params is not None else model.parameters()) if p.requires_grad
    ]
    if not trainable:
        raise ValueError("the model has no trainable parameters")
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    for fn in post_step:
        opt.register_step_post_hook(lambda *_a, _fn=fn, **_k: _fn())
    sched = _scheduler(opt, cfg)
    wrapped, opt_p = acc.prepare(model, opt)
    gen = torch.Generator().manual_seed(cfg.seed)
    log = TrainLog(num_processes=world)
    wrapped.train()
    for _ in track(range(cfg.steps), "LM training (steps)"):
        batch = lm_windows(stream, cfg.batch_size, cfg.seq_len, gen)[rank::world].to(acc.device)
        loss = loss_fn(wrapped, batch)
        opt_p.zero_grad(set_to_none=True)
        acc.backward(loss)
        if cfg.max_grad_norm is not None:
            acc.clip_grad_norm_(trainable, cfg.max_grad_norm)
        opt_p.step()
        sched.step()
        log.losses.append(float(loss.detach()))
    wrapped.eval()
    return log


@torch.no_grad()
def evaluate_lm(
    model: nn.Module,
    windows: torch.Tensor,
    logits_fn: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
    batch_size: int = 20,
) -> dict[str, float]:
    """Mean next-token cross-entropy and accuracy over ``windows`` (model put in eval mode)."""
    model.eval()
    fn = logits_fn or (lambda m, x: m(input_ids=x).logits)
    device = next(model.parameters()).device
    total, hits, count = 0.0, 0, 0
    for i in range(0, len(windows), batch_size):
        x = windows[i : i + batch_size].to(device)
        logits = fn(model, x)[:, :-1].float()
        tgt = x[:, 1:]
        total += float(
            nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum"
            )
        )
        hits += int((logits.argmax(-1) == tgt).sum())
        count += tgt.numel()
    return {"ce": total / count, "accuracy": hits / count}
