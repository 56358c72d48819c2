"""CLIC's losses (paper eq. 7, official ``losses.CLIPLoss`` with ``hard_negatives_separate``) and the
CLIC/CLIP alternation pattern (official ``create_normal_clip_loss_pattern``).

Embeddings are L2-normalised here (idempotent for a model that already normalises) and
``logit_scale`` is the multiplicative scale (OpenCLIP's ``logit_scale.exp()``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from eff_shared.errors import check_positive, check_real

__all__ = ["alternation_pattern", "clic_loss", "clip_loss", "negclip_loss"]


def _check_batch(n: int) -> None:
    if n < 2:
        raise ValueError(
            f"batch size must be >= 2 (the contrastive and uni-modal losses need a batch), got {n}"
        )


def clip_loss(img_emb: Tensor, txt_emb: Tensor, logit_scale: Tensor | float) -> Tensor:
    """Symmetric InfoNCE: (CE(image→text) + CE(text→image)) / 2 over the batch."""
    _check_batch(len(img_emb))
    if img_emb.shape != txt_emb.shape:
        raise ValueError(
            f"img_emb {tuple(img_emb.shape)} and txt_emb {tuple(txt_emb.shape)} must match"
        )
    img, txt = F.normalize(img_emb, dim=-1), F.normalize(txt_emb, dim=-1)
    logits = logit_scale * img @ txt.T
    labels = torch.arange(len(img), device=img.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clic_loss(
    img_emb: Tensor,
    pos_embs: list[Tensor],
    neg_emb: Tensor | None,
    logit_scale: Tensor | float,
    cont: float = 0.5,
    sneg: float = 0.5,
    uni: float = 1.0,
) -> dict[str, Tensor]:
    """L = cont·L_cont + sneg·L_sneg + uni·L_uni (paper eq. 7).

    For every positive set i: i2t_i = CE over the batch's texts of set i only (negatives are not in
    this softmax), t2i_i = CE of those texts over the images, sneg_i = CE between (logit(img, p_i),
    logit(img, neg)) with target p_i. L_cont = mean_i (i2t_i + t2i_i)/2, L_sneg = mean_i sneg_i,
    L_uni = mean_b ‖t(p1) − t(p2)‖² (squared L2 summed over the embedding; needs ≥ 2 sets).
    ``neg_emb=None`` drops the negative term; one positive set and no negative is the CLIP loss.
    """
    for name, w in (("cont", cont), ("sneg", sneg), ("uni", uni)):
        check_positive(name, w, strict=False)
    if not pos_embs:
        raise ValueError("pos_embs must hold at least one positive set")
    b = len(img_emb)
    _check_batch(b)
    for k, p in enumerate(pos_embs):
        if p.shape != img_emb.shape:
            raise ValueError(
                f"pos_embs[{k}] has shape {tuple(p.shape)}, expected {tuple(img_emb.shape)}"
            )
    img = F.normalize(img_emb, dim=-1)
    pos = [F.normalize(p, dim=-1) for p in pos_embs]
    labels = torch.arange(b, device=img.device)
    i2t, t2i, sn = [], [], []
    neg_logit = None
    if neg_emb is not None:
        neg = F.normalize(neg_emb, dim=-1)
        neg_logit = logit_scale * (img * neg).sum(-1)
    zeros = torch.zeros(b, dtype=torch.long, device=img.device)
    for p in pos:
        logits = logit_scale * img @ p.T
        i2t.append(F.cross_entropy(logits, labels))
        t2i.append(F.cross_entropy(logits.T, labels))
        if neg_logit is not None:
            sn.append(F.cross_entropy(torch.stack([logits.diagonal(), neg_logit], dim=1), zeros))
    out = {
        "i2t": torch.stack(i2t).mean(),
        "t2i": torch.stack(t2i).mean(),
    }
    out["cont"] = (out["i2t"] + out["t2i"]) / 2
    out["sneg"] = torch.stack(sn).mean() if sn else torch.zeros((), device=img.device)
    if len(pos) >= 2:
        out["uni"] = ((pos[0] - pos[1]) ** 2).sum(-1).mean()
    else:
        out["uni"] = torch.zeros((), device=img.device)
    out["total"] = cont * out["cont"] + sneg * out["sneg"] + uni * out["uni"]
    return out


def negclip_loss(
    img_emb: Tensor, txt_emb: Tensor, neg_emb: Tensor, logit_scale: Tensor | float
) -> Tensor:
    """NegCLIP (the official "unified" negatives, no concatenation): image→text CE over the batch's
    captions **and** all hard negatives; text→image CE over the images; averaged."""
    _check_batch(len(img_emb))
    img = F.normalize(img_emb, dim=-1)
    txt, neg = F.normalize(txt_emb, dim=-1), F.normalize(neg_emb, dim=-1)
    labels = torch.arange(len(img), device=img.device)
    i2t = F.cross_entropy(logit_scale * img @ torch.cat([txt, neg]).T, labels)
    t2i = F.cross_entropy(logit_scale * txt @ img.T, labels)
    return (i2t + t2i) / 2


def alternation_pattern(hard_negative_freq: float) -> list[bool]:
    """True = a CLIC batch, False = a plain CLIP batch: f = 1 → [CLIC, CLIP]; f > 1 → [CLIP] +
    [CLIC]·int(f); f < 1 → [CLIC] + [CLIP]·int(1/f)."""
    check_real("hard_negative_freq", hard_negative_freq)
    if hard_negative_freq <= 0:
        raise ValueError(f"hard_negative_freq must be > 0, got {hard_negative_freq}")
    if hard_negative_freq == 1:
        return [True, False]
    if hard_negative_freq > 1:
        return [False] + [True] * int(hard_negative_freq)
    return [True] + [False] * int(1 / hard_negative_freq)
