"""The small models the reproductions train, for users too (inputs: 8×8 grey digits, as
:func:`eff_vision.data.digits.digits_splits` gives them, unless stated):

- :class:`DigitsCNN` — the tensor-compression CNN (``c2`` and ``c3`` are the compressed convs).
- :class:`FingerprintNet` — a digits CNN with a :class:`~eff_vision.fingerprint.FingerprintModule`
  after its first conv; :class:`LoRAConv` is the LoRA attack on that module's conv.
- :class:`FedDigitsCNN` — FedPhoenix's client CNN (``conv1``, ``conv2`` are the reset layers).
- :class:`LNDigitsMLP` — LCoTTA's source model: an MLP with LayerNorm (the adapted affines).
- :func:`ldl_mlp` — RankMatch's MLP from features to label-distribution logits.
- :class:`ClipImageTeacher` — a tiny-CLIP image tower as a HAWAII teacher on digits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from eff_vision.fingerprint import FingerprintModule

__all__ = [
    "ClipImageTeacher",
    "DigitsCNN",
    "FedDigitsCNN",
    "FingerprintNet",
    "LNDigitsMLP",
    "LoRAConv",
    "ldl_mlp",
]


class DigitsCNN(nn.Module):
    """c1 1→16 → ReLU → c2 16→32 → ReLU → maxpool 2 → c3 32→32 → ReLU → GAP → FC 10 (3×3, pad 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.relu(self.c3(x))
        return self.fc(x.mean((2, 3)))


class FingerprintNet(nn.Module):
    """c1 → ReLU → FingerprintModule → ReLU → maxpool 2 → c2 → ReLU → GAP → FC."""

    def __init__(
        self,
        channels: int = 16,
        kernel_size: int = 5,
        band: int = 1,
        padding_mode: str = "circular",
    ) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, channels, 3, padding=1)
        self.fp = FingerprintModule(channels, kernel_size, (8, 8), band, padding_mode)
        self.c2 = nn.Conv2d(channels, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fp(F.relu(self.c1(x))))
        h = F.relu(self.c2(F.max_pool2d(h, 2)))
        return self.fc(h.mean((2, 3)))


class LoRAConv(nn.Module):
    """W₀ (frozen) + B·A on a circular conv, peft-style: A ~ kaiming-like, B = 0."""

    def __init__(self, conv: nn.Conv2d, rank: int, seed: int) -> None:
        super().__init__()
        self.base = conv
        conv.weight.requires_grad_(False)
        o, i, kh, kw = conv.weight.shape
        g = torch.Generator().manual_seed(seed)
        self.a = nn.Parameter(torch.randn(rank, i, kh, kw, generator=g) / (i * kh * kw) ** 0.5)
        self.b = nn.Parameter(torch.zeros(o, rank))
        self.padding_mode = conv.padding_mode
        # F.pad's name of the conv's padding ("zeros" is "constant")
        self._pad_mode = {"zeros": "constant"}.get(conv.padding_mode, conv.padding_mode)

    def merged(self) -> torch.Tensor:
        return self.base.weight + torch.einsum("or,rikl->oikl", self.b, self.a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.base.padding[0]
        return F.conv2d(F.pad(x, (p, p, p, p), mode=self._pad_mode), self.merged())


class FedDigitsCNN(nn.Module):
    """conv(1→16) → ReLU → conv(16→32) → ReLU → maxpool 2 → fc(32·4·4 → 10), 3×3, padding 1."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc(x.flatten(1))


class LNDigitsMLP(nn.Module):
    """Flatten → Linear 64→128 → LN → ReLU → Linear 128→64 → LN → ReLU → Linear 64→10."""

    def __init__(self, hidden: tuple[int, int] = (128, 64), n_classes: int = 10) -> None:
        super().__init__()
        h1, h2 = hidden
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(64, h1), nn.LayerNorm(h1), nn.ReLU(),
            nn.Linear(h1, h2), nn.LayerNorm(h2), nn.ReLU(), nn.Linear(h2, n_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def ldl_mlp(n_in: int, hidden: int, n_out: int) -> nn.Module:
    """Linear n_in→hidden → ReLU → Linear hidden→hidden → ReLU → Linear hidden→n_out (logits)."""
    return nn.Sequential(
        nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, n_out),
    )  # fmt: skip


class ClipImageTeacher(nn.Module):
    """A tiny-CLIP image tower (:class:`~eff_vision.clic.tiny.TinyImageTower`, e.g.
    ``pretrained_tiny_clip(seed).visual``) as a teacher: digits → 3 channels, 32×32; its last conv
    map."""

    def __init__(self, visual: nn.Module) -> None:
        super().__init__()
        self.visual = visual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        img = F.interpolate(
            x.expand(-1, 3, -1, -1), size=(32, 32), mode="bilinear", align_corners=False
        )
        return self.visual.feature_map(img)
