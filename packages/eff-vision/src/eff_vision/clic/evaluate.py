"""The toy compositional evaluation (SugarCrepe-style): swap-attribute, replace-attribute, R@1."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from eff_vision.data.shapes import canonical_caption

__all__ = ["compositional_eval"]


@torch.no_grad()
def compositional_eval(
    model: nn.Module,
    images: Tensor,
    captions: Sequence[str],
    swapped: Sequence[str | None],
    replaced: Sequence[str | None],
    tokenizer: Callable[[Sequence[str]], Tensor],
    match: Callable[[str], object] = canonical_caption,
    batch_size: int = 512,
) -> dict[str, float]:
    """``swap_att``: share of images whose true caption scores above the caption with the colours
    swapped between the objects; ``replace_att``: above the caption with a colour replaced by an
    unused one; ``R@1``: image→text top-1 among all ``captions``, correct when the retrieved caption
    describes the same unordered set of objects (``match``). ``None`` negatives are skipped."""
    if not (len(images) == len(captions) == len(swapped) == len(replaced)):
        raise ValueError("images, captions, swapped and replaced must have the same length")
    was = model.training
    model.eval()
    img = torch.cat(
        [model.encode_image(images[i : i + batch_size]) for i in range(0, len(images), batch_size)]
    )

    def enc(texts: Sequence[str]) -> Tensor:
        return torch.cat(
            [
                model.encode_text(tokenizer(list(texts[i : i + batch_size])))
                for i in range(0, len(texts), batch_size)
            ]
        )

    txt = enc(captions)
    true = (img * txt).sum(-1)
    out: dict[str, float] = {}
    for key, negs in (("swap_att", swapped), ("replace_att", replaced)):
        keep = [i for i, n in enumerate(negs) if n is not None]
        if keep:
            neg = enc([negs[i] for i in keep])
            out[key] = float((true[keep] > (img[keep] * neg).sum(-1)).float().mean())
        else:
            out[key] = float("nan")
        out[f"n_{key}"] = len(keep)
    top = (img @ txt.T).argmax(1).tolist()
    keys = [match(c) for c in captions]
    out["R@1"] = sum(keys[j] == keys[i] for i, j in enumerate(top)) / len(captions)
    model.train(was)
    return out
