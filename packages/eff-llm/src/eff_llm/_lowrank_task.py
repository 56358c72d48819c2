"""The synthetic low-rank adaptation task of the federated LoRA reproductions (FedSVD, YOCO).

A frozen "pretrained" layer W0 (decaying spectrum) and a frozen classifier head H define
logits = H·relu(W0 x); labels come from the adapted layer W0 + ΔW* with a rank-``rank_star`` ΔW*,
so a LoRA on ``proj`` can recover them. The model is a plain ``nn.Module`` wrapped by peft, so the
adapters are standard peft LoRA weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from eff_shared.torch import seeded

__all__ = [
    "FrozenReluClassifier",
    "LowRankTask",
    "accuracy",
    "lora_model",
    "make_lowrank_task",
    "trainable_names",
]


class FrozenReluClassifier(nn.Module):
    def __init__(self, w0: Tensor, head: Tensor) -> None:
        super().__init__()
        self.proj = nn.Linear(w0.shape[1], w0.shape[0], bias=False)
        self.head = nn.Linear(head.shape[1], head.shape[0], bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(w0)
            self.head.weight.copy_(head)
        self.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.relu(self.proj(x)))


@dataclass(frozen=True)
class LowRankTask:
    w0: Tensor
    head: Tensor
    delta_star: Tensor
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor


def make_lowrank_task(
    seed: int,
    d_in: int = 64,
    d_hidden: int = 32,
    n_classes: int = 10,
    rank_star: int = 4,
    n_train: int = 4800,
    n_test: int = 2000,
    shift: float = 1.0,
) -> LowRankTask:
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(d_hidden, d_hidden, generator=g))
    v, _ = torch.linalg.qr(torch.randn(d_in, d_hidden, generator=g))
    spectrum = torch.exp(-torch.arange(d_hidden, dtype=torch.float32) / 6.0) * 3.0
    w0 = (u * spectrum) @ v.T
    head = torch.randn(n_classes, d_hidden, generator=g) / d_hidden**0.5
    delta = torch.randn(d_hidden, rank_star, generator=g) @ torch.randn(
        rank_star, d_in, generator=g
    )
    delta *= shift * w0.norm() / delta.norm()
    teacher = FrozenReluClassifier(w0 + delta, head)
    x = torch.randn(n_train + n_test, d_in, generator=g)
    with torch.no_grad():
        y = teacher(x).argmax(-1)
    return LowRankTask(w0, head, delta, x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def lora_model(task: LowRankTask, rank: int, seed: int) -> nn.Module:
    """The frozen model with a peft LoRA (r = lora_alpha = ``rank``: scaling 1) on ``proj``."""
    from peft import LoraConfig, get_peft_model

    with seeded(seed):  # peft's kaiming init of A, identical for every client
        return get_peft_model(
            FrozenReluClassifier(task.w0, task.head),
            LoraConfig(r=rank, lora_alpha=rank, target_modules=["proj"], lora_dropout=0.0),
        )


def trainable_names(model: nn.Module, which: str = "AB") -> list[str]:
    return [
        n
        for n, _ in model.named_parameters()
        if ("lora_A" in n and "A" in which) or ("lora_B" in n and "B" in which)
    ]


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(-1) == y).float().mean())
