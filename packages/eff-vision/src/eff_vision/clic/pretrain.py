"""The tiny CLIP pre-trained from scratch on the coloured-shape captions: the checkpoint every
method of the CLIC reproduction fine-tunes, and the image tower HAWAII's reproduction adds as a
teacher (:class:`eff_vision.models.ClipImageTeacher`).

Data: :func:`shape_data` (:func:`eff_vision.data.shapes.make_shape_pairs`, training and test sets
from independent seed streams); tokenizer :func:`shape_tokenizer` (the shape vocabulary, 16 tokens).
Pre-training: both towers, plain CLIP loss, Adam, random batches without replacement, the logit
scale clamped to ≤ 100 (:func:`pretrained_tiny_clip`, cached per setting).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from eff_shared.seeding import derive_seed
from eff_shared.torch import seeded, torch_generator
from eff_vision.clic.loss import clip_loss
from eff_vision.clic.tiny import TinyCLIP, WordTokenizer
from eff_vision.data.shapes import ShapePairs, make_shape_pairs, shape_vocabulary

__all__ = ["images_to_tensor", "pretrained_tiny_clip", "shape_data", "shape_tokenizer"]


def shape_tokenizer() -> WordTokenizer:
    """The word tokenizer of the shape captions (context length 16)."""
    return WordTokenizer(shape_vocabulary(), context_length=16)


@lru_cache(maxsize=2)
def shape_data(seed: int, n_train: int = 2000, n_test: int = 400) -> tuple[ShapePairs, ShapePairs]:
    """Training and test :class:`~eff_vision.data.shapes.ShapePairs` (independent seed streams)."""
    return make_shape_pairs(n_train, derive_seed(seed, 301)), make_shape_pairs(
        n_test, derive_seed(seed, 302)
    )


def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 N×H×W×3 images → float32 N×3×H×W in [0, 1]."""
    return torch.from_numpy(images.astype(np.float32) / 255.0).permute(0, 3, 1, 2).contiguous()


@lru_cache(maxsize=2)
def _pretrained_state(
    seed: int, steps: int, batch: int, lr: float, n_train: int
) -> dict[str, torch.Tensor]:
    train, _ = shape_data(seed, n_train)
    tok = shape_tokenizer()
    images, tokens = images_to_tensor(train.images), tok(train.captions)
    with seeded(seed, 303):
        model = TinyCLIP(len(tok), tok.context_length)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        gen = torch_generator(seed, 304)
        order: list[int] = []
        for _ in range(steps):
            if len(order) < batch:
                order += torch.randperm(len(images), generator=gen).tolist()
            idx, order = order[:batch], order[batch:]
            loss = clip_loss(
                model.encode_image(images[idx]),
                model.encode_text(tokens[idx]),
                model.logit_scale.exp(),
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0.0, float(np.log(100.0)))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def pretrained_tiny_clip(
    seed: int = 0, steps: int = 600, batch: int = 96, lr: float = 2e-3, n_train: int = 2000
) -> TinyCLIP:
    """A fresh copy of the tiny CLIP pre-trained from scratch on the shape captions (cached per setting)."""
    tok = shape_tokenizer()
    model = TinyCLIP(len(tok), tok.context_length)
    model.load_state_dict(_pretrained_state(seed, steps, batch, lr, n_train))
    return model
