"""Small seeded training helpers shared by eff-vision's reproductions (digits-scale classifiers)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from eff_shared.progress import track

__all__ = ["accuracy", "batches", "make_optimizer", "train_classifier"]


def batches(n: int, batch_size: int, gen: torch.Generator, shuffle: bool = True) -> list[Tensor]:
    """Index batches of one epoch (a seeded permutation when ``shuffle``)."""
    order = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    return list(order.split(batch_size))


def make_optimizer(
    params, kind: str = "adam", lr: float = 1e-3, momentum: float = 0.9, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of ['adam', 'sgd'], got {kind!r}")


def train_classifier(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    epochs: int,
    optimizer: torch.optim.Optimizer,
    batch_size: int = 64,
    seed: int = 0,
    extra_loss: Callable[[nn.Module], Tensor] | None = None,
) -> list[float]:
    """Cross-entropy training for ``epochs`` (seeded batch order); returns the per-epoch mean loss.
    ``extra_loss(model)`` is added to every step's loss (e.g. a watermark regulariser)."""
    gen = torch.Generator().manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss()
    history = []
    model.train()
    for _ in track(range(epochs), "training (epochs)"):
        total, count = 0.0, 0
        for idx in batches(len(x), batch_size, gen):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            if extra_loss is not None:
                loss = loss + extra_loss(model)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        history.append(total / count)
    model.eval()
    return history


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 512) -> float:
    """Top-1 accuracy of ``model`` in eval mode."""
    was = model.training
    model.eval()
    correct = 0
    for start in range(0, len(x), batch_size):
        correct += int(
            (model(x[start : start + batch_size]).argmax(1) == y[start : start + batch_size]).sum()
        )
    model.train(was)
    return correct / len(x)
