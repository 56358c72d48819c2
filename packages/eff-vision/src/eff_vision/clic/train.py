"""CLIC's fine-tuning loop (official ``train.py`` / ``utils/train_utils.py``), for any model with
OpenCLIP's interface: ``encode_image``, ``encode_text``, ``logit_scale`` (the log-scale parameter)
and, to freeze it, ``visual``.

- AdamW (lr 1e-6, betas (0.9, 0.98), eps 1e-8) with weight decay 0.1 on trainable parameters with
  ≥ 2 dims whose name has no ``bias`` (official ``split_param_list_to_wd_group``; 1-D parameters —
  biases, norms, the logit scale — get none);
- cosine schedule with linear warm-up over ``warmup`` × the run from ``lr_start``, final ``lr_end``
  (official ``cosine_scheduler``);
- ``freeze_vision`` (official default ``--freeze_only_vision``): only the text tower and the logit
  scale train; the image tower runs in eval mode under ``torch.no_grad`` (its embeddings of single
  images are cached when ``cache_frozen_image_embeddings``);
- iterations follow :func:`~eff_vision.clic.loss.alternation_pattern` (CLIC batch / plain CLIP
  batch of single images and their first captions) for ``method="clic"``; ``"clip"`` is plain CLIP
  fine-tuning on single images, ``"negclip"`` NegCLIP (single images + in-caption swap negatives);
- after every step the log logit scale is clamped to [0, ln(max_logit_scale)].
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from eff_shared.errors import check_choice, check_fraction, check_positive
from eff_shared.progress import track
from eff_shared.seeding import make_rng
from eff_vision.clic.data import ConcatPairDataset, collate_pairs, swap_within
from eff_vision.clic.loss import alternation_pattern, clic_loss, clip_loss, negclip_loss

__all__ = ["CLICConfig", "CLICTrainer", "cosine_schedule", "param_groups"]


@dataclass(frozen=True)
class CLICConfig:
    """Official defaults (``trigger_train.sh``, ``train_args.py``) plus the loop's sizes."""

    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.1
    warmup: float = 0.2
    lr_start: float = 1e-7
    lr_end: float = 1e-8
    epochs: int = 1
    freeze_vision: bool = True
    max_logit_scale: float = 100.0
    hard_negative_freq: float = 1.0
    batch_size: int = 200
    clip_batch_size: int | None = None
    steps: int | None = None
    method: Literal["clic", "clip", "negclip"] = "clic"
    cont: float = 0.5
    sneg: float = 0.5
    uni: float = 1.0
    seed: int = 0
    cache_frozen_image_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in ("lr", "eps", "max_logit_scale"):
            check_positive(name, getattr(self, name))
        for name in ("weight_decay", "lr_start", "lr_end", "cont", "sneg", "uni"):
            check_positive(name, getattr(self, name), strict=False)
        check_fraction("warmup", self.warmup)
        check_positive("epochs", self.epochs, integer=True)
        alternation_pattern(self.hard_negative_freq)  # validates > 0
        check_choice("method", self.method, ["clic", "clip", "negclip"])
        for name in ("batch_size", "clip_batch_size"):
            v = getattr(self, name)
            if v is not None:
                check_positive(name, v, integer=True)
                if v < 2:
                    raise ValueError(
                        f"{name} must be >= 2 (the contrastive losses need a batch), got {v}"
                    )
        if self.steps is not None:
            check_positive("steps", self.steps, integer=True)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")


def cosine_schedule(
    base: float, final: float, total: int, warmup_iters: int, start: float
) -> np.ndarray:
    """Linear warm-up from ``start`` to ``base`` over ``warmup_iters``, then cosine to ``final``."""
    warm = np.linspace(start, base, warmup_iters) if warmup_iters > 0 else np.array([])
    iters = np.arange(total - warmup_iters)
    cos = final + 0.5 * (base - final) * (1 + np.cos(np.pi * iters / max(len(iters), 1)))
    return np.concatenate([warm, cos])


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on trainable parameters with ≥ 2 dims and no ``bias`` in the name; none on the rest."""
    wd, no_wd = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_wd if p.ndim < 2 or "bias" in name else wd).append(p)
    return [{"params": wd, "weight_decay": weight_decay}, {"params": no_wd, "weight_decay": 0.0}]


class CLICTrainer:
    """Fine-tune ``model`` with CLIC (or the CLIP-FT / NegCLIP baselines) on a :class:`ConcatPairDataset`."""

    def __init__(self, model: nn.Module, config: CLICConfig, tokenizer) -> None:
        for attr in ("encode_image", "encode_text", "logit_scale"):
            if not hasattr(model, attr):
                raise TypeError(f"model must expose {attr} (OpenCLIP interface)")
        if config.freeze_vision and not isinstance(getattr(model, "visual", None), nn.Module):
            raise TypeError("freeze_vision=True needs model.visual (the image tower)")
        self.model, self.config, self.tokenizer = model, config, tokenizer
        self._cache: dict[int, torch.Tensor] = {}

    def _encode_images(self, images: torch.Tensor, keys: list[int] | None = None) -> torch.Tensor:
        cfg = self.config
        if not cfg.freeze_vision:
            return self.model.encode_image(images)
        with torch.no_grad():
            if keys is None or not cfg.cache_frozen_image_embeddings:
                return self.model.encode_image(images)
            missing = [i for i, k in enumerate(keys) if k not in self._cache]
            if missing:
                emb = self.model.encode_image(images[missing])
                for i, e in zip(missing, emb, strict=True):
                    self._cache[keys[i]] = e
            return torch.stack([self._cache[k] for k in keys])

    def fit(self, dataset: ConcatPairDataset) -> dict:
        cfg, model = self.config, self.model
        if not isinstance(dataset, ConcatPairDataset):
            raise TypeError(f"dataset must be a ConcatPairDataset, got {type(dataset).__name__}")
        if cfg.method == "clic" and dataset.negative_fn is None:
            raise ValueError("method='clic' needs a dataset with a negative_fn (or word_types)")
        if cfg.method == "negclip" and dataset.word_types is None:
            raise ValueError("method='negclip' needs a dataset with word_types (in-caption swaps)")
        bs, cbs = cfg.batch_size, cfg.clip_batch_size or cfg.batch_size
        if max(bs, cbs) > len(dataset):
            raise ValueError(f"batch sizes ({bs}, {cbs}) exceed the dataset size {len(dataset)}")
        total = cfg.steps or cfg.epochs * (len(dataset) // bs)
        lrs = cosine_schedule(cfg.lr, cfg.lr_end, total, int(cfg.warmup * total), cfg.lr_start)
        if cfg.freeze_vision:
            model.visual.requires_grad_(False)
            model.visual.eval()
        opt = torch.optim.AdamW(
            param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps
        )
        pattern = alternation_pattern(cfg.hard_negative_freq) if cfg.method == "clic" else [False]
        gen = torch.Generator().manual_seed(cfg.seed)
        stream: list[int] = []
        epoch = -1
        hist: dict = {
            "loss": [],
            "kind": [],
            "lr": [],
            "max_logit_scale": 0.0,
            "clic_s": [],
            "clip_s": [],
            "data_s": 0.0,
        }

        def take(k: int) -> list[int]:
            nonlocal stream, epoch
            while len(stream) < k:
                epoch += 1
                dataset.set_epoch(epoch)
                stream += torch.randperm(len(dataset), generator=gen).tolist()
            out, stream = stream[:k], stream[k:]
            return out

        ln_max = math.log(cfg.max_logit_scale)
        for it in track(range(total), f"{self.config.method} fine-tuning (steps)"):
            for g in opt.param_groups:
                g["lr"] = float(lrs[it])
            is_clic = pattern[it % len(pattern)]
            t0 = time.perf_counter()
            if is_clic:
                batch = collate_pairs([dataset[i] for i in take(bs)])
                t1 = time.perf_counter()
                img = self._encode_images(batch["image"])
                p, b, length = batch["positives"].shape
                texts = torch.cat([batch["positives"].reshape(p * b, length), batch["negative"]])
                emb = model.encode_text(texts)
                pos = list(emb[: p * b].split(b))
                out = clic_loss(
                    img, pos, emb[p * b :], model.logit_scale.exp(), cfg.cont, cfg.sneg, cfg.uni
                )
                loss = out["total"]
            else:
                idx = take(cbs)
                singles = [dataset.single(i) for i in idx]
                images = torch.stack([s[0] for s in singles])
                captions = [s[1] for s in singles]
                tokens = torch.stack([torch.as_tensor(self.tokenizer(c)) for c in captions])
                if cfg.method == "negclip":
                    rng = make_rng(cfg.seed, 401, it)
                    negs = [
                        swap_within(c, dataset.word_types, rng, strict=dataset.strict)
                        for c in captions
                    ]
                    tokens = torch.cat(
                        [tokens, torch.stack([torch.as_tensor(self.tokenizer(c)) for c in negs])]
                    )
                t1 = time.perf_counter()
                img = self._encode_images(images, idx)
                emb = model.encode_text(tokens)
                if cfg.method == "negclip":
                    loss = negclip_loss(
                        img, emb[: len(idx)], emb[len(idx) :], model.logit_scale.exp()
                    )
                else:
                    loss = clip_loss(img, emb, model.logit_scale.exp())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0.0, ln_max)
            t2 = time.perf_counter()
            hist["data_s"] += t1 - t0
            hist["clic_s" if is_clic else "clip_s"].append(t2 - t0)
            hist["loss"].append(float(loss.detach()))
            hist["kind"].append(
                "clic" if is_clic else cfg.method if cfg.method != "clic" else "clip"
            )
            hist["lr"].append(float(lrs[it]))
            hist["max_logit_scale"] = max(
                hist["max_logit_scale"], float(model.logit_scale.detach().exp())
            )
        hist["steps"] = total
        return hist
