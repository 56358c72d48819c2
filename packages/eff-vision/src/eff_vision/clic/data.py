"""CLIC's batch construction: concatenated image pairs, mixed captions and between-caption negatives.

Follows the official code (``AmitPeleg/CLIC``: ``data_loading.CombineCsvDataset`` and
``utils/data_utils.py``):

- the partner image is drawn at random **with the same orientation** ("wider" if width ≥ height,
  else "higher"); wider images are resized (bicubic) to 112×224 (H×W) and **stacked vertically**,
  higher ones to 224×112 and placed **side by side** (``layout="official"``, ``size=224``; the
  official centre crop after an exact resize is a no-op); the order of the two images is random
  (p = 0.5); ImageNet mean/std normalisation is applied after concatenation;
- positives (lower-cased): p1 = concat(c1, c2) and the shuffled p2 = concat(c2, c1), where concat
  strips trailing spaces, ends each caption with a period and joins with a space; the text order
  is independent of the spatial order; ``additional_positives`` further positives pair the images'
  extra captions (sampled without repetition when enough exist, else all plus draws with
  replacement) in random order;
- the hard negative swaps one word pair **between** the two captions (:func:`swap_negative`: same
  POS tag, words shared by both captions dropped, whole-word replacement of all occurrences) and
  concatenates the two modified captions in random order.

Differences from the released code (documented choices): randomness comes from a per-item
``numpy`` generator seeded by ``(seed, epoch, index)`` (the official code uses Python's global
``random``), the partner is never the image itself, and the POS tagger is a callable (spaCy for
real captions, a lookup table for the toy vocabulary); ``layout="side_by_side"`` concatenates
same-height images along the width at their native size (the toy's 32×32 → 32×64).

Intended vs released behaviour: when the two captions differ only in the word that would be
swapped, the released code's negative is just the captions exchanged — a positive. By default
such a pick is replaced by another swap (``allow_degenerate=True`` keeps the released behaviour).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from eff_shared.errors import check_choice, check_positive
from eff_shared.seeding import make_rng

__all__ = [
    "EXCLUDED_TAGS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ConcatPairDataset",
    "SwapFallbackWarning",
    "collate_pairs",
    "concat_texts",
    "orientation",
    "random_concat",
    "swap_candidates",
    "swap_negative",
    "swap_within",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
EXCLUDED_TAGS = frozenset({"AUX", "DET", "INTJ", "PART", "PUNCT", "SYM", "X", "SCONJ", "CCONJ"})

WordTypes = Callable[[str], list[tuple[str, str]]]


class SwapFallbackWarning(UserWarning):
    """No same-type word pair to swap: two random tokens were swapped (the official fallback)."""


def concat_texts(texts: Sequence[str]) -> str:
    """Strip trailing spaces, end every caption with a period and join with a space (official)."""
    out = []
    for t in texts:
        t = t.rstrip(" ")
        if not t:
            raise ValueError("captions must not be empty")
        out.append(t if t.endswith(".") else t + ".")
    return " ".join(out)


def random_concat(a: str, b: str, rng: np.random.Generator) -> str:
    """``concat_texts`` of the two captions in random order."""
    return concat_texts([a, b] if rng.random() < 0.5 else [b, a])


def _pattern(word: str) -> re.Pattern:
    return re.compile(rf"(['\"]*)\b({re.escape(word.strip(chr(39) + '.'))})\b(['\"]*)")


def _replace_word(text: str, word: str, new: str) -> str:
    placeholder = "{{PLACEHOLDER}}"
    text = _pattern(word).sub(lambda m: f"{m.group(1)}{placeholder}{m.group(3)}", text)
    return text.replace(placeholder, new.strip("'."))


def _pos_dict(caption: str, word_types: WordTypes) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for word, tag in word_types(caption):
        out.setdefault(tag, set()).add(word)
    return {tag: sorted(words) for tag, words in out.items()}


def _candidates(c1: str, c2: str, word_types: WordTypes) -> dict[str, tuple[list[str], list[str]]]:
    """Per POS tag (not excluded) present in both captions: the words of each caption that the other
    caption does not contain (official ``same_type_words``)."""
    p1, p2 = _pos_dict(c1, word_types), _pos_dict(c2, word_types)
    out = {}
    for tag in sorted((set(p1) & set(p2)) - EXCLUDED_TAGS):
        shared = set(p1[tag]) & set(p2[tag])
        w1 = [w for w in p1[tag] if w not in shared]
        w2 = [w for w in p2[tag] if w not in shared]
        if w1 and w2:
            out[tag] = (w1, w2)
    return out


def swap_candidates(
    c1: str, c2: str, word_types: WordTypes, allow_degenerate: bool = False
) -> list[tuple[str, str, str]]:
    """All (tag, word of c1, word of c2) swaps of :func:`swap_negative`; without ``allow_degenerate``
    the swaps that only exchange the two captions (they differ in that one word) are left out."""
    out = []
    for tag, (w1s, w2s) in _candidates(c1, c2, word_types).items():
        for a in w1s:
            for b in w2s:
                n1, n2 = _replace_word(c1, a, b), _replace_word(c2, b, a)
                if allow_degenerate or {n1, n2} != {c1, c2}:
                    out.append((tag, a, b))
    return out


def swap_negative(
    c1: str,
    c2: str,
    word_types: WordTypes,
    rng: np.random.Generator,
    strict: bool = False,
    allow_degenerate: bool = False,
) -> str:
    """The official between-caption hard negative (``get_hard_negative``).

    Tag both captions; ignore AUX, DET, INTJ, PART, PUNCT, SYM, X, SCONJ, CCONJ; within a tag drop
    the words that occur in both captions; pick a random tag present in both and a random word of
    it from each caption; swap the two words between the captions (whole words, all occurrences);
    join the two modified captions in random order.

    **Intended vs released:** when the captions differ only in the picked word, the released code's
    "negative" is the two captions exchanged, i.e. a positive (p1 or p2). By default such a pick is
    replaced by a uniform draw among the non-degenerate swaps; ``allow_degenerate=True`` keeps the
    released behaviour. With no swap left, two random tokens are swapped (the official fallback)
    with a :class:`SwapFallbackWarning`, or ``ValueError`` if ``strict``.
    """
    common = _candidates(c1, c2, word_types)
    pick = None
    if common:
        tag = sorted(common)[int(rng.integers(len(common)))]
        w1s, w2s = common[tag]
        pick = (tag, w1s[int(rng.integers(len(w1s)))], w2s[int(rng.integers(len(w2s)))])
        if not allow_degenerate:
            ok = swap_candidates(c1, c2, word_types)
            if pick not in ok:
                pick = ok[int(rng.integers(len(ok)))] if ok else None
    if pick is not None:
        word1, word2 = pick[1], pick[2]
    else:
        if strict:
            raise ValueError(
                f"no swappable same-type word pair between {c1!r} and {c2!r} (strict=True)"
            )
        warnings.warn(
            f"no swappable same-type word pair between {c1!r} and {c2!r}; swapping two random tokens",
            SwapFallbackWarning,
            stacklevel=2,
        )
        t1, t2 = [w for w, _ in word_types(c1)], [w for w, _ in word_types(c2)]
        word1, word2 = t1[int(rng.integers(len(t1)))], t2[int(rng.integers(len(t2)))]
    n1, n2 = _replace_word(c1, word1, word2), _replace_word(c2, word2, word1)
    return random_concat(n1, n2, rng)


def swap_within(
    caption: str, word_types: WordTypes, rng: np.random.Generator, strict: bool = False
) -> str:
    """NegCLIP's in-caption hard negative (``get_hard_neg_single_sentence``): swap two words of one
    tag (not excluded) that has at least two distinct words; fallback: two random non-excluded words."""
    pos = _pos_dict(caption, word_types)
    valid = [t for t in sorted(pos) if t not in EXCLUDED_TAGS and len(pos[t]) > 1]
    if valid:
        words = pos[valid[int(rng.integers(len(valid)))]]
    else:
        if strict:
            raise ValueError(f"no swappable same-type word pair in {caption!r} (strict=True)")
        warnings.warn(
            f"no same-type word pair in {caption!r}; swapping two random words",
            SwapFallbackWarning,
            stacklevel=2,
        )
        words = sorted({w for w, t in word_types(caption) if t not in EXCLUDED_TAGS})
        if len(words) < 2:
            raise ValueError(f"caption {caption!r} has fewer than two swappable words")
    i, j = rng.choice(len(words), 2, replace=False)
    w1, w2 = words[int(i)], words[int(j)]
    placeholder = "{{PLACEHOLDER}}"
    text = _pattern(w1).sub(lambda m: f"{m.group(1)}{placeholder}{m.group(3)}", caption)
    text = _pattern(w2).sub(lambda m: f"{m.group(1)}{w1}{m.group(3)}", text)
    return text.replace(placeholder, w2)


class _SwapNegative:
    """``negative_fn(c1, c2, rng)`` = :func:`swap_negative` with a fixed tagger."""

    def __init__(self, word_types: WordTypes, strict: bool, allow_degenerate: bool) -> None:
        self.word_types, self.strict, self.allow_degenerate = word_types, strict, allow_degenerate

    def __call__(self, c1: str, c2: str, rng: np.random.Generator) -> str:
        return swap_negative(c1, c2, self.word_types, rng, self.strict, self.allow_degenerate)


def orientation(image: np.ndarray) -> str:
    """``"wider"`` if width ≥ height else ``"higher"`` (official ``get_ratio``)."""
    h, w = image.shape[:2]
    return "wider" if w >= h else "higher"


def _as_float(image: np.ndarray, what: str) -> np.ndarray:
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] not in (3, 4):
        raise ValueError(f"{what} must be an HWC RGB(A) array, got shape {img.shape}")
    img = img[..., :3]
    if img.dtype == np.uint8:
        return img.astype(np.float32) / 255.0
    if not np.issubdtype(img.dtype, np.floating):
        raise ValueError(f"{what} must be uint8 or float in [0, 1], got {img.dtype}")
    if img.size and (float(img.min()) < 0.0 or float(img.max()) > 1.0):
        raise ValueError(
            f"{what} is float outside [0, 1] (min {float(img.min()):.3g}, max {float(img.max()):.3g})"
        )
    return img.astype(np.float32)


class ConcatPairDataset(torch.utils.data.Dataset):
    """CLIC samples from any ``(image HWC, captions)`` dataset (``captions``: a string or a list whose
    first entry is the main caption and the rest its extra captions).

    ``dataset[i]`` returns a dict: ``image`` (the concatenated pair, CHW float, normalised),
    ``positives`` [P, L] token ids (p1, p2 if ``shuffled_positive``, then the additional positives),
    ``negative`` [L] (or ``None`` without a ``negative_fn``/``word_types``), the raw ``texts``,
    ``order`` (1 if image ``i`` is first), ``partner``, and with ``clip_loss_iterate`` the
    ``single_image`` and ``single_text`` of image ``i`` for the alternating plain CLIP batches.
    """

    def __init__(
        self,
        base,
        tokenizer: Callable[[str], Tensor],
        additional_positives: int = 2,
        shuffled_positive: bool = True,
        negative_fn: Callable[[str, str, np.random.Generator], str] | None = None,
        clip_loss_iterate: bool = True,
        seed: int = 0,
        *,
        word_types: WordTypes | None = None,
        layout: str = "official",
        size: int = 224,
        mean: Sequence[float] | None = IMAGENET_MEAN,
        std: Sequence[float] | None = IMAGENET_STD,
        strict: bool = False,
        allow_degenerate: bool = False,
    ) -> None:
        check_positive("additional_positives", additional_positives, strict=False, integer=True)
        check_choice("layout", layout, ["official", "side_by_side"])
        check_positive("size", size, integer=True)
        if layout == "official" and size % 2:
            raise ValueError(f"size must be even for the official layout, got {size}")
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        self.base, self.tokenizer = base, tokenizer
        self.additional_positives, self.shuffled_positive = additional_positives, shuffled_positive
        self.clip_loss_iterate, self.seed, self.epoch = clip_loss_iterate, seed, 0
        self.layout, self.size, self.strict, self.word_types = layout, size, strict, word_types
        self.mean = None if mean is None else np.asarray(mean, dtype=np.float32)
        self.std = None if std is None else np.asarray(std, dtype=np.float32)
        if negative_fn is None and word_types is not None:
            negative_fn = _SwapNegative(word_types, strict, allow_degenerate)
        self.negative_fn = negative_fn
        self.captions: list[list[str]] = []
        groups: dict[tuple, list[int]] = {}
        for i in range(len(base)):
            image, caps = base[i]
            caps = [caps] if isinstance(caps, str) else list(caps)
            if not caps:
                raise ValueError(f"item {i} has no caption")
            caps = [c.lower() for c in caps]
            if additional_positives and len(caps) < 2:
                raise ValueError(
                    f"additional_positives={additional_positives} but item {i} has no extra captions "
                    "(give a list [caption, *extra_captions] or additional_positives=0)"
                )
            self.captions.append(caps)
            key = (
                (orientation(image),)
                if layout == "official"
                else (orientation(image), np.asarray(image).shape[0])
            )
            groups.setdefault(key, []).append(i)
        small = {k: len(v) for k, v in groups.items() if len(v) < 2}
        if small:
            raise ValueError(
                f"fewer than 2 images of an orientation in the dataset (no partner can be drawn): {small}"
            )
        self.groups = groups
        self.group_of = {i: k for k, v in groups.items() for i in v}
        self.pos_in_group = {i: n for v in groups.values() for n, i in enumerate(v)}

    def __len__(self) -> int:
        return len(self.captions)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _normalise(self, img: np.ndarray) -> Tensor:
        if self.mean is not None:
            img = (img - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))

    def _resized(self, image: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        import cv2

        img = _as_float(image, "image")
        if img.shape[:2] != hw:
            img = cv2.resize(img, (hw[1], hw[0]), interpolation=cv2.INTER_CUBIC)
        return np.clip(img, 0.0, 1.0)  # bicubic overshoot (ToTensor of a PIL resize is clipped too)

    def concat_images(self, im1: np.ndarray, im2: np.ndarray, first: bool) -> np.ndarray:
        """The official geometry: wider → two (size/2)×size halves stacked vertically; higher → two
        size×(size/2) halves side by side; ``side_by_side`` → native images along the width."""
        kind = orientation(im1)
        if self.layout == "side_by_side":
            a, b = _as_float(im1, "image"), _as_float(im2, "image")
            if a.shape != b.shape:
                raise ValueError(
                    f"side_by_side needs equal image shapes, got {a.shape} and {b.shape}"
                )
            axis = 1
        else:
            hw = (self.size // 2, self.size) if kind == "wider" else (self.size, self.size // 2)
            a, b = self._resized(im1, hw), self._resized(im2, hw)
            axis = 0 if kind == "wider" else 1
        return np.concatenate([a, b] if first else [b, a], axis=axis)

    def _extras(self, i: int, rng: np.random.Generator) -> list[str]:
        extra = self.captions[i][1:]
        k = self.additional_positives
        if len(extra) >= k:
            return [extra[j] for j in rng.choice(len(extra), k, replace=False)]
        return extra + [extra[j] for j in rng.integers(0, len(extra), k - len(extra))]

    def _tok(self, texts: list[str]) -> Tensor:
        return torch.stack([torch.as_tensor(self.tokenizer(t)) for t in texts])

    def single(self, idx: int) -> tuple[Tensor, str]:
        """Image ``idx`` alone (normalised like the pairs) and its first caption (plain CLIP batch)."""
        return self._normalise(_as_float(self.base[idx][0], "image")), self.captions[idx][0]

    def __getitem__(self, idx: int) -> dict:
        rng = make_rng(self.seed, self.epoch, int(idx))
        pool, pos = self.groups[self.group_of[idx]], self.pos_in_group[idx]
        r = int(rng.integers(len(pool) - 1))  # a uniform draw among the *other* images of the group
        j = pool[r if r < pos else r + 1]
        first = bool(rng.random() < 0.5)
        concat = self.concat_images(self.base[idx][0], self.base[j][0], first)
        c1, c2 = self.captions[idx][0], self.captions[j][0]
        texts = [concat_texts([c1, c2])]
        if self.shuffled_positive:
            texts.append(concat_texts([c2, c1]))
        if self.additional_positives:
            e1, e2 = self._extras(idx, rng), self._extras(j, rng)
            texts += [random_concat(a, b, rng) for a, b in zip(e1, e2, strict=True)]
        neg = None if self.negative_fn is None else self.negative_fn(c1, c2, rng)
        item = {
            "image": self._normalise(concat), "positives": self._tok(texts),
            "negative": None if neg is None else self._tok([neg])[0],
            "texts": {"positives": texts, "negative": neg, "c1": c1, "c2": c2},
            "order": int(first), "partner": j, "index": int(idx),
        }  # fmt: skip
        if self.clip_loss_iterate:
            single, text = self.single(idx)
            item["single_image"], item["single_text"] = single, self._tok([text])[0]
        return item


def collate_pairs(items: Sequence[dict]) -> dict:
    """Stack CLIC items: ``image`` [B, 3, H, W], ``positives`` [P, B, L], ``negative`` [B, L]."""
    if len(items) < 2:
        raise ValueError(f"a CLIC batch needs at least 2 samples, got {len(items)}")
    out = {
        "image": torch.stack([it["image"] for it in items]),
        "positives": torch.stack([it["positives"] for it in items], dim=1),
        "negative": None
        if items[0]["negative"] is None
        else torch.stack([it["negative"] for it in items]),
        "texts": [it["texts"] for it in items],
    }
    if "single_image" in items[0]:
        out["single_image"] = torch.stack([it["single_image"] for it in items])
        out["single_text"] = torch.stack([it["single_text"] for it in items])
    return out
