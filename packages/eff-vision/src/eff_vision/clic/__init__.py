"""CLIC: compositionally-aware contrastive fine-tuning of CLIP on concatenated image pairs.

Amit Peleg, Naman Singh, Matthias Hein, "Advancing Compositional Awareness in CLIP with Efficient
Fine-Tuning", NeurIPS 2025, arXiv 2505.24424; official code ``AmitPeleg/CLIC`` (built on OpenCLIP),
read for the loss (``losses.py``), the data pipeline (``data_loading.py``, ``utils/data_utils.py``)
and the defaults (``train_args.py``, ``trigger_train.sh``, ``utils/train_utils.py``).

- :mod:`eff_vision.clic.data` — :class:`ConcatPairDataset` (orientation-matched partner, official
  112×224 / 224×112 halves, random order, positives p1/p2 and additional positives),
  :func:`swap_negative` (the between-caption hard negative), :func:`swap_within` (NegCLIP's).
- :mod:`eff_vision.clic.loss` — :func:`clic_loss` (paper eq. 7: 0.5·L_cont + 0.5·L_sneg + 1·L_uni),
  :func:`clip_loss`, :func:`negclip_loss`, :func:`alternation_pattern`.
- :mod:`eff_vision.clic.train` — :class:`CLICConfig` (official defaults: frozen vision tower, AdamW
  1e-6, cosine with warm-up, logit scale ≤ 100) and :class:`CLICTrainer` for any model with
  OpenCLIP's ``encode_image`` / ``encode_text`` / ``logit_scale`` (no open_clip dependency).
- :mod:`eff_vision.clic.tiny` — :class:`TinyCLIP` and :class:`WordTokenizer` (the reproduction's).
- :mod:`eff_vision.clic.pretrain` — :func:`pretrained_tiny_clip`: the tiny CLIP pre-trained from
  scratch on the shape captions (the reproduction's checkpoint; HAWAII's fifth teacher).
- :mod:`eff_vision.clic.evaluate` — :func:`compositional_eval` (swap-att, replace-att, R@1).

The data generator is :func:`eff_vision.data.shapes.make_shape_pairs`.
"""

from eff_vision.clic.data import (
    ConcatPairDataset,
    SwapFallbackWarning,
    collate_pairs,
    concat_texts,
    orientation,
    swap_candidates,
    swap_negative,
    swap_within,
)
from eff_vision.clic.evaluate import compositional_eval
from eff_vision.clic.loss import alternation_pattern, clic_loss, clip_loss, negclip_loss
from eff_vision.clic.pretrain import pretrained_tiny_clip
from eff_vision.clic.tiny import TinyCLIP, WordTokenizer
from eff_vision.clic.train import CLICConfig, CLICTrainer, cosine_schedule, param_groups

__all__ = [
    "CLICConfig",
    "CLICTrainer",
    "ConcatPairDataset",
    "SwapFallbackWarning",
    "TinyCLIP",
    "WordTokenizer",
    "alternation_pattern",
    "clic_loss",
    "clip_loss",
    "collate_pairs",
    "compositional_eval",
    "concat_texts",
    "cosine_schedule",
    "negclip_loss",
    "orientation",
    "param_groups",
    "pretrained_tiny_clip",
    "swap_candidates",
    "swap_negative",
    "swap_within",
]
