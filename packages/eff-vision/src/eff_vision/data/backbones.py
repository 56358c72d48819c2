"""The four toy digit backbones shared by ComBo and HAWAII, and the VTAB-like digit probe tasks.

``toy_digit_backbones(seed)`` splits scikit-learn's bundled digits (8×8, values /16) by a seeded
permutation into an 800-image *pretraining pool* and a *downstream pool* (the remaining 997), then
trains four small conv backbones (conv 1→16 3×3 → ReLU → max-pool 2 → conv 16→32 3×3 → ReLU,
padding 1) on the pool with **different objectives**, so that their features really differ:

- ``sup``: supervised classification on the pool's digits 0–4 only (a flatten → linear head);
- ``ae``: an autoencoder (upsample → conv 32→16 → ReLU → conv 16→1 → sigmoid, MSE);
- ``rot``: rotation prediction (each image rotated by a random k·90°, predict k);
- ``random``: random initialisation, never trained.

Each is trained ``epochs = 15`` epochs with Adam 3e-3, batch 64 (spec, ComBo reproduction), then
frozen (``requires_grad_(False)``, ``eval()``); the training heads are discarded. The named layers
``relu1`` (16×8×8) and ``relu2`` (32×4×4) are the token maps ComBo probes and HAWAII distils.

The result is cached in-process per ``(seed, config)``: every test and reproduction of a pytest run
shares one training. Callers must not modify the returned models (copy them first).

``digit_probe_tasks(x, y, ntr, seed)`` builds the four downstream tasks of the ComBo reproduction
from the downstream pool: ``digit10``, ``parity``, ``rot4`` (predict a random 90° rotation) and
``flip_noise`` (digit10 on horizontally flipped images + 0.3·N(0, 1), clamped to [0, 1]); the first
``ntr`` images (of a seeded permutation) train, the rest test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_positive
from eff_shared.seeding import derive_seed
from eff_shared.torch import seeded
from eff_vision.data.digits import N_DIGITS, digits_splits

__all__ = [
    "BACKBONE_KINDS",
    "PROBE_TASKS",
    "TOY_LAYERS",
    "ToyBackboneConfig",
    "ToyDigitBackbone",
    "ToyDigitBackbones",
    "digit_probe_tasks",
    "toy_digit_backbones",
]

BACKBONE_KINDS = ("sup", "ae", "rot", "random")
TOY_LAYERS = ("relu1", "relu2")
PROBE_TASKS = ("digit10", "parity", "rot4", "flip_noise")


class ToyDigitBackbone(nn.Module):
    """conv1 1→16 → relu1 → pool → conv2 16→32 → relu2 (3×3, padding 1); returns the relu2 map."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.relu2 = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.relu2(self.conv2(self.pool(self.relu1(self.conv1(x)))))


class _Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(32, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 1, 3, padding=1)

    def forward(self, z: Tensor) -> Tensor:
        z = F.interpolate(z, scale_factor=2, mode="nearest")
        return torch.sigmoid(self.conv2(F.relu(self.conv1(z))))


@dataclass(frozen=True)
class ToyBackboneConfig:
    """Pool size and the shared training recipe (Adam, seeded batch order)."""

    pool_size: int = 800
    epochs: int = 15
    lr: float = 3e-3
    batch_size: int = 64
    sup_classes: int = 5

    def __post_init__(self) -> None:
        for name in ("pool_size", "epochs", "batch_size"):
            check_positive(name, getattr(self, name), integer=True)
        check_positive("lr", self.lr)
        if self.pool_size >= N_DIGITS:
            raise ValueError(
                f"pool_size must be < {N_DIGITS} (a downstream pool must remain), got {self.pool_size}"
            )
        if not 2 <= self.sup_classes <= 10:
            raise ValueError(f"sup_classes must lie in [2, 10], got {self.sup_classes}")


@dataclass
class ToyDigitBackbones:
    """The four frozen backbones, their probed layers and the two digit pools."""

    models: dict[str, ToyDigitBackbone]
    layers: dict[str, list[str]]
    pool: tuple[Tensor, Tensor]
    downstream: tuple[Tensor, Tensor]
    seed: int
    config: ToyBackboneConfig
    train_loss: dict[str, list[float]] = field(default_factory=dict)


def _rotate_batch(x: Tensor, k: Tensor) -> Tensor:
    out = x.clone()
    for r in range(1, 4):
        sel = k == r
        if bool(sel.any()):
            out[sel] = torch.rot90(x[sel], r, dims=(-2, -1))
    return out


def _train(
    kind: str, model: ToyDigitBackbone, x: Tensor, y: Tensor, cfg: ToyBackboneConfig, seed: int
) -> list[float]:
    if kind == "random":
        return []
    gen = torch.Generator().manual_seed(seed)
    if kind == "sup":
        keep = y < cfg.sup_classes
        x, y = x[keep], y[keep]
        head: nn.Module = nn.Linear(32 * 16, cfg.sup_classes)
    elif kind == "rot":
        head = nn.Linear(32 * 16, 4)
    else:
        head = _Decoder()
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr)
    history = []
    for _ in range(cfg.epochs):
        total = 0.0
        for idx in torch.randperm(len(x), generator=gen).split(cfg.batch_size):
            xb = x[idx]
            if kind == "rot":
                k = torch.randint(0, 4, (len(idx),), generator=gen)
                loss = F.cross_entropy(head(model(_rotate_batch(xb, k)).flatten(1)), k)
            elif kind == "sup":
                loss = F.cross_entropy(head(model(xb).flatten(1)), y[idx])
            else:
                loss = F.mse_loss(head(model(xb)), xb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        history.append(total / len(x))
    return history


@lru_cache(maxsize=4)
def _cached(seed: int, cfg: ToyBackboneConfig) -> ToyDigitBackbones:
    (xp, yp), (xd, yd) = digits_splits((cfg.pool_size, N_DIGITS - cfg.pool_size), seed)
    models, losses = {}, {}
    for i, kind in enumerate(BACKBONE_KINDS):
        with seeded(seed, 71, i):
            model = ToyDigitBackbone()
            losses[kind] = _train(kind, model, xp, yp, cfg, derive_seed(seed, 72, i))
        model.zero_grad(set_to_none=True)
        model.eval().requires_grad_(False)
        models[kind] = model
    return ToyDigitBackbones(
        models=models,
        layers={k: list(TOY_LAYERS) for k in BACKBONE_KINDS},
        pool=(xp, yp),
        downstream=(xd, yd),
        seed=seed,
        config=cfg,
        train_loss=losses,
    )


def toy_digit_backbones(
    seed: int = 0, config: ToyBackboneConfig | None = None
) -> ToyDigitBackbones:
    """The four toy digit backbones trained on the 800-image pool (cached per seed and config)."""
    cfg = ToyBackboneConfig() if config is None else config
    if not isinstance(cfg, ToyBackboneConfig):
        raise TypeError(f"config must be a ToyBackboneConfig, got {type(cfg).__name__}")
    return _cached(int(seed), cfg)


def digit_probe_tasks(
    x: Tensor,
    y: Tensor,
    ntr: int,
    seed: int = 0,
    noise: float = 0.3,
    tasks: tuple[str, ...] = PROBE_TASKS,
) -> dict[str, tuple[Tensor, Tensor, Tensor, Tensor]]:
    """``{task: (x_train, y_train, x_test, y_test)}`` for the VTAB-like digit tasks (see module doc)."""
    check_positive("ntr", ntr, integer=True)
    if ntr >= len(x):
        raise ValueError(
            f"ntr must be < the pool size {len(x)} (a test set must remain), got {ntr}"
        )
    bad = [t for t in tasks if t not in PROBE_TASKS]
    if bad or not tasks:
        raise ValueError(
            f"tasks must be a non-empty subset of {list(PROBE_TASKS)}, got {list(tasks)!r}"
        )
    gen = torch.Generator().manual_seed(derive_seed(seed, 73))
    perm = torch.randperm(len(x), generator=gen)
    x, y = x[perm], y[perm]
    out = {}
    for task in PROBE_TASKS:
        if task == "digit10":
            xt, yt = x, y
        elif task == "parity":
            xt, yt = x, y % 2
        elif task == "rot4":
            yt = torch.randint(0, 4, (len(x),), generator=gen)
            xt = _rotate_batch(x, yt)
        else:
            eps = torch.randn(x.shape, generator=gen, dtype=x.dtype)
            xt, yt = (torch.flip(x, dims=(-1,)) + noise * eps).clamp(0.0, 1.0), y
        if task in tasks:
            out[task] = (xt[:ntr], yt[:ntr], xt[ntr:], yt[ntr:])
    return out
