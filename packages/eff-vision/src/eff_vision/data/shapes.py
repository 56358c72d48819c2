"""Coloured-shape image–caption pairs for CLIC's compositional toy (rendered with OpenCV).

``make_shape_pairs(n, seed)`` draws ``n`` images (uint8 HWC, default 32×32 on a dark background) with
``objects`` objects, one per vertical strip (two objects: centres at x ≈ 8 and 24 with ±``jitter`` px,
y = centre ± ``y_jitter``, radius 5–6), each a colour and a shape; colours are different within an
image (and shapes too when ``distinct_shapes``, so that swapping the colours between two objects
always changes the composition). Attributes are sampled vectorised with numpy; each object is one
OpenCV fill call (``cv2.circle`` / ``cv2.rectangle`` / ``cv2.fillPoly``), never a per-pixel loop.

Captions list the objects in random order: ``"red circle and blue square"``. For every image the
generator also returns

- ``extra_captions``: further positives (the other object order, and ``"a red circle with a blue
  square"`` in both orders) for CLIC's additional positives;
- ``swapped``: the caption with the colours of the first two objects swapped between them (the
  SugarCrepe *swap-attribute* negative);
- ``replaced``: the caption with one colour replaced by a colour absent from the image
  (*replace-attribute*), ``None`` when every colour is used.

``exclude`` removes (colour, shape) compositions from the sample (held-out compositions).
:func:`shape_word_types` is the toy's POS tagger for CLIC's negatives (colour → ``ADJ``, shape →
``NOUN``, the rest closed-class tags), so no spaCy model is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eff_shared.errors import check_positive
from eff_shared.seeding import make_rng

__all__ = [
    "COLOURS",
    "SHAPES",
    "ShapeCaptionDataset",
    "ShapePairs",
    "canonical_caption",
    "make_shape_pairs",
    "shape_vocabulary",
    "shape_word_types",
]

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 190, 60),
    "blue": (50, 90, 230),
    "yellow": (230, 220, 50),
}
SHAPES = ("circle", "square", "triangle")
_FUNCTION_WORDS = {"and": "CCONJ", "a": "DET", "with": "ADP", ".": "PUNCT"}


@dataclass
class ShapePairs:
    images: np.ndarray  # [n, H, W, 3] uint8
    objects: list[list[tuple[str, str]]]  # per image, left to right: (colour, shape)
    captions: list[str]
    extra_captions: list[list[str]]
    swapped: list[str | None]
    replaced: list[str | None]

    def __len__(self) -> int:
        return len(self.captions)


def _phrase(colour: str, shape: str) -> str:
    return f"{colour} {shape}"


def _draw(
    img: np.ndarray, shape: str, cx: int, cy: int, r: int, colour: tuple[int, int, int]
) -> None:
    import cv2

    if shape == "circle":
        cv2.circle(img, (cx, cy), r, colour, -1, lineType=cv2.LINE_8)
    elif shape == "square":
        h = max(1, round(r * 0.85))
        cv2.rectangle(img, (cx - h, cy - h), (cx + h, cy + h), colour, -1, lineType=cv2.LINE_8)
    else:
        pts = np.array(
            [
                [cx, cy - r],
                [cx - round(0.95 * r), cy + round(0.6 * r)],
                [cx + round(0.95 * r), cy + round(0.6 * r)],
            ],
            dtype=np.int32,
        )
        cv2.fillPoly(img, [pts], colour, lineType=cv2.LINE_8)


def make_shape_pairs(
    n: int,
    seed: int = 0,
    *,
    size: int = 32,
    objects: int = 2,
    colours: dict[str, tuple[int, int, int]] | None = None,
    shapes: tuple[str, ...] = SHAPES,
    jitter: int = 1,
    y_jitter: int = 4,
    radius: tuple[int, int] = (5, 6),
    background: tuple[int, int, int] = (20, 20, 24),
    distinct_shapes: bool = True,
    exclude: tuple[tuple[str, str], ...] = (),
) -> ShapePairs:
    """``n`` seeded coloured-shape images with captions, extra captions and hard negatives."""
    check_positive("n", n, integer=True)
    check_positive("size", size, integer=True)
    check_positive("objects", objects, integer=True)
    colours = dict(COLOURS if colours is None else colours)
    bad_shape = [s for s in shapes if s not in SHAPES]
    if bad_shape or not shapes:
        raise ValueError(
            f"shapes must be a non-empty subset of {list(SHAPES)}, got {list(shapes)!r}"
        )
    if len(colours) < objects:
        raise ValueError(
            f"need at least objects={objects} colours (different within an image), got {len(colours)}"
        )
    if distinct_shapes and len(shapes) < objects:
        raise ValueError(
            f"distinct_shapes needs at least objects={objects} shapes, got {len(shapes)}"
        )
    if radius[0] < 1 or radius[1] < radius[0]:
        raise ValueError(f"radius must be (min, max) with 1 <= min <= max, got {radius!r}")
    for c, s in exclude:
        if c not in colours or s not in shapes:
            raise ValueError(f"exclude entry {(c, s)!r} is not a (colour, shape) of this generator")
    rng = make_rng(seed, 211)
    names, excl = list(colours), set(exclude)
    # rejection-sample attribute assignments (vectorised per round)
    col = np.empty((n, objects), dtype=np.int64)
    shp = np.empty((n, objects), dtype=np.int64)
    todo = np.arange(n)
    for _ in range(1000):
        if todo.size == 0:
            break
        c = np.argsort(rng.random((todo.size, len(names))), axis=1)[:, :objects]
        if distinct_shapes:
            s = np.argsort(rng.random((todo.size, len(shapes))), axis=1)[:, :objects]
        else:
            s = rng.integers(0, len(shapes), (todo.size, objects))
        ok = np.ones(todo.size, dtype=bool)
        for cc, ss in excl:
            ok &= ~((c == names.index(cc)) & (s == shapes.index(ss))).any(1)
        col[todo[ok]], shp[todo[ok]] = c[ok], s[ok]
        todo = todo[~ok]
    if todo.size:
        raise ValueError(f"exclude={exclude!r} leaves no valid composition")
    strip = size / objects
    cx = np.rint(
        (np.arange(objects) + 0.5) * strip + rng.integers(-jitter, jitter + 1, (n, objects))
    ).astype(int)
    cy = np.rint(size / 2 + rng.integers(-y_jitter, y_jitter + 1, (n, objects))).astype(int)
    rad = rng.integers(radius[0], radius[1] + 1, (n, objects))
    order = np.argsort(rng.random((n, objects)), axis=1)  # caption order of the objects
    repl_pick = rng.random(n)
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    images[:] = np.asarray(background, dtype=np.uint8)
    objs, caps, extras, swapped, replaced = [], [], [], [], []
    for i in range(n):
        row = [(names[col[i, k]], shapes[shp[i, k]]) for k in range(objects)]
        for k, (cname, sname) in enumerate(row):
            _draw(images[i], sname, int(cx[i, k]), int(cy[i, k]), int(rad[i, k]), colours[cname])
        ordered = [row[k] for k in order[i]]
        phrases = [_phrase(*o) for o in ordered]
        caps.append(" and ".join(phrases))
        extra = [" and ".join(reversed(phrases)), " with ".join("a " + p for p in phrases)]
        extra.append(" with ".join("a " + p for p in reversed(phrases)))
        extras.append(extra)
        if objects >= 2:
            sw = list(ordered)
            (c0, s0), (c1, s1) = sw[0], sw[1]
            sw[0], sw[1] = (c1, s0), (c0, s1)
            swapped.append(" and ".join(_phrase(*o) for o in sw))
        else:
            swapped.append(None)
        unused = [c for c in names if c not in {o[0] for o in row}]
        if unused:
            new = unused[int(repl_pick[i] * len(unused))]
            rp = list(ordered)
            rp[0] = (new, rp[0][1])
            replaced.append(" and ".join(_phrase(*o) for o in rp))
        else:
            replaced.append(None)
        objs.append(row)
    return ShapePairs(images, objs, caps, extras, swapped, replaced)


def shape_vocabulary(colours=None, shapes: tuple[str, ...] = SHAPES) -> list[str]:
    """Every word the generator's captions and negatives can contain."""
    return [*(COLOURS if colours is None else colours), *shapes, *_FUNCTION_WORDS]


def shape_word_types(
    caption: str, colours=None, shapes: tuple[str, ...] = SHAPES
) -> list[tuple[str, str]]:
    """(word, tag) pairs of a toy caption: colour → ADJ, shape → NOUN, ``and`` → CCONJ, ``a`` → DET,
    ``with`` → ADP, ``.`` → PUNCT, anything else → X (excluded from swaps like spaCy's X)."""
    cols = set(COLOURS if colours is None else colours)
    out = []
    for word in caption.replace(".", " . ").split():
        if word in cols:
            out.append((word, "ADJ"))
        elif word in shapes:
            out.append((word, "NOUN"))
        else:
            out.append((word, _FUNCTION_WORDS.get(word, "X")))
    return out


def canonical_caption(caption: str) -> tuple[str, ...]:
    """The unordered object phrases of a toy caption (for R@1: same unordered pair ⇒ correct)."""
    text = caption.replace(".", " ").replace(" with ", " and ")
    return tuple(
        sorted(p.strip().removeprefix("a ").strip() for p in text.split(" and ") if p.strip())
    )


class ShapeCaptionDataset:
    """``(image HWC uint8, [caption, *extra_captions])`` items of a :class:`ShapePairs` (CLIC's base)."""

    def __init__(self, pairs: ShapePairs) -> None:
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, idx: int) -> tuple[np.ndarray, list[str]]:
        return self.pairs.images[idx], [self.pairs.captions[idx], *self.pairs.extra_captions[idx]]
