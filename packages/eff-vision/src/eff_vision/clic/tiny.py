"""TinyCLIP: the CLIC reproduction's dual encoder, trained from scratch (spec, "CLIC → Reproduction").

Image tower: 3 conv layers (16, 32, 32 channels; max-pools after the first two) whose feature map
is averaged separately over its left and right halves (so one model reads 32×32 images and the
concatenated 32×64 pairs), concatenated, linear to 64, L2-normalised. Text tower: word embedding +
learned positions, 2-layer transformer (width 64, 4 heads, FF 128), masked mean pooling, linear,
L2-normalised. Learnable logit scale initialised at ln 10. OpenCLIP's interface: ``encode_image``,
``encode_text``, ``logit_scale`` (log scale), ``visual``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TinyCLIP", "TinyImageTower", "TinyTextTower", "WordTokenizer"]


class WordTokenizer:
    """Word-level tokenizer (lower-cased; ``.`` is its own token): ids 0 = pad, 1 = unknown."""

    def __init__(self, vocab: Sequence[str], context_length: int = 24) -> None:
        self.itos = ["<pad>", "<unk>", *dict.fromkeys(vocab)]
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.context_length = context_length

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        words = text.lower().replace(".", " . ").split()
        if len(words) > self.context_length:
            raise ValueError(
                f"{len(words)} tokens exceed context_length {self.context_length}: {text!r}"
            )
        return [self.stoi.get(w, 1) for w in words]

    def __call__(self, text: str | Sequence[str]) -> Tensor:
        if isinstance(text, str):
            ids = self.encode(text)
            return torch.tensor(ids + [0] * (self.context_length - len(ids)), dtype=torch.long)
        return torch.stack([self(t) for t in text])


class TinyImageTower(nn.Module):
    def __init__(self, embed_dim: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
        self.proj = nn.Linear(64, embed_dim)

    def feature_map(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return F.relu(self.conv3(x))

    def forward(self, x: Tensor) -> Tensor:
        f = self.feature_map(x)
        half = f.shape[-1] // 2
        return self.proj(torch.cat([f[..., :half].mean((2, 3)), f[..., half:].mean((2, 3))], dim=1))


class TinyTextTower(nn.Module):
    def __init__(
        self, vocab_size: int, context_length: int = 24, width: int = 64, embed_dim: int = 64
    ) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.randn(context_length, width) * 0.01)
        layer = nn.TransformerEncoderLayer(
            width, 4, 128, 0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.transformer = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Linear(width, embed_dim)

    def forward(self, tokens: Tensor) -> Tensor:
        mask = tokens != 0
        x = self.token_embedding(tokens) + self.positional_embedding[: tokens.shape[1]]
        x = self.ln_final(self.transformer(x, src_key_padding_mask=~mask))
        m = mask.unsqueeze(-1).to(x.dtype)
        return self.text_projection((x * m).sum(1) / m.sum(1).clamp_min(1.0))


class TinyCLIP(nn.Module):
    """A small CLIP-style dual encoder with OpenCLIP's ``encode_image`` / ``encode_text`` / ``logit_scale``."""

    def __init__(self, vocab_size: int, context_length: int = 24, embed_dim: int = 64) -> None:
        super().__init__()
        self.visual = TinyImageTower(embed_dim)
        self.text = TinyTextTower(vocab_size, context_length, embed_dim=embed_dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))

    def encode_image(self, images: Tensor) -> Tensor:
        return F.normalize(self.visual(images), dim=-1)

    def encode_text(self, tokens: Tensor) -> Tensor:
        return F.normalize(self.text(tokens), dim=-1)

    def forward(self, images: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.encode_image(images), self.encode_text(tokens), self.logit_scale.exp()
