"""Adaptive chain coding of region contours (MoRIC; our design, spec "Contours"):
:class:`ChainCoder`, the contour streams (MoRIC containers of kind 0 with one ``CONTOURS`` section).

The coding itself — lossless crack codes of a partition (shared boundaries coded once), lossy
Douglas–Peucker polygons of a mask — is in :mod:`eff_vision.moric.contours` (its module docstring
describes both); the mask and label-map checks and :func:`boundary_pixels` / :func:`iou` are
re-exported here. **Adaptive mode** picks, per mask, the shortest stream among lossless and lossy
at several ε whose IoU ≥ ``min_iou`` (a mode flag in the header says which). Malformed streams
raise :class:`~eff_vision.moric.bitstream.MoRICDecodeError`.
"""

from __future__ import annotations

import numpy as np

from eff_shared.errors import check_positive
from eff_vision.moric.bitstream import Bitstream, Section, Tag
from eff_vision.moric.contours import (
    boundary_pixels,
    check_labels,
    check_mask,
    decode_partition_payload,
    decode_polygons_payload,
    encode_partition_payload,
    encode_polygons_payload,
    iou,
    label_edges,
)
from eff_vision.moric.errors import MoRICDecodeError

__all__ = [
    "MODE_LOSSLESS",
    "MODE_LOSSY",
    "ChainCoder",
    "boundary_pixels",
    "check_labels",
    "check_mask",
    "iou",
    "label_edges",
]

MODE_LOSSLESS, MODE_LOSSY = 0, 1


# --------------------------------------------------------------------------------------------
# The coder
# --------------------------------------------------------------------------------------------


class ChainCoder:
    """Contour coder for masks and label maps (see the module docstring).

    ``encode(mask)`` / ``decode(data)`` (lossless, exact), ``encode_lossy(mask, eps)``,
    ``encode_adaptive(mask, min_iou)``, ``encode_partition(labels)`` / ``decode_partition(data)``
    (shared boundaries coded once). Streams are MoRIC containers of kind 0 with one ``CONTOURS``
    section; ``decode`` reads any of them (the mode flag says which)."""

    LOSSY_EPS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)

    def __init__(self, connectivity: int = 8, context_order: int = 1) -> None:
        if connectivity not in (4, 8):
            raise ValueError(f"connectivity must be one of [4, 8], got {connectivity!r}")
        if context_order != 1:
            raise ValueError(
                f"context_order must be 1 (order-1 adaptive contexts), got {context_order!r}"
            )
        self.connectivity, self.context_order = connectivity, context_order

    @staticmethod
    def _stream(mode: int, h: int, w: int, n: int, payload: bytes) -> bytes:
        return Bitstream(0, mode, h, w, n, [Section(Tag.CONTOURS, 0, payload)]).to_bytes()

    def encode(self, mask: np.ndarray) -> bytes:
        m = check_mask(mask)
        return self._stream(
            MODE_LOSSLESS, *m.shape, 2, encode_partition_payload(m.astype(np.int32), 2)
        )

    def encode_partition(self, labels: np.ndarray) -> bytes:
        lab, n = check_labels(labels)
        return self._stream(MODE_LOSSLESS, *lab.shape, n, encode_partition_payload(lab, n))

    def encode_lossy(self, mask: np.ndarray, eps: float) -> bytes:
        m = check_mask(mask)
        check_positive("eps", eps, strict=False)
        return self._stream(MODE_LOSSY, *m.shape, 2, encode_polygons_payload(m, float(eps)))

    def encode_adaptive(self, mask: np.ndarray, min_iou: float = 0.98) -> bytes:
        """The shortest of lossless and lossy (ε in ``LOSSY_EPS``) whose IoU ≥ ``min_iou``."""
        m = check_mask(mask)
        if not 0 < min_iou <= 1:
            raise ValueError(f"min_iou must lie in (0, 1], got {min_iou!r}")
        best = self.encode(m)
        for eps in self.LOSSY_EPS:
            data = self.encode_lossy(m, eps)
            if len(data) < len(best) and iou(self.decode(data), m) >= min_iou:
                best = data
        return best

    @staticmethod
    def _parse(data: bytes) -> tuple[Bitstream, Section]:
        bs = Bitstream.from_bytes(data)
        if bs.kind != 0:
            raise MoRICDecodeError("header: this is an image stream, not a contour stream")
        if len(bs.sections) != 1:
            raise MoRICDecodeError(
                f"contours: a contour stream has one section, got {len(bs.sections)}"
            )
        return bs, bs.section(Tag.CONTOURS)

    def decode(self, data: bytes) -> np.ndarray:
        """A boolean mask from a mask stream (lossless or lossy)."""
        bs, sec = self._parse(data)
        if bs.flags == MODE_LOSSY:
            return decode_polygons_payload(sec.payload, bs.height, bs.width)
        if bs.flags != MODE_LOSSLESS:
            raise MoRICDecodeError(f"header: unknown contour mode {bs.flags}")
        if bs.n_regions != 2:
            raise MoRICDecodeError(
                f"header: a mask stream has 2 labels, got {bs.n_regions} (use decode_partition)"
            )
        return decode_partition_payload(sec.payload, bs.height, bs.width, 2, False).astype(bool)

    def decode_partition(self, data: bytes) -> np.ndarray:
        """An int32 label map from a partition stream."""
        bs, sec = self._parse(data)
        if bs.flags != MODE_LOSSLESS:
            raise MoRICDecodeError("header: partitions are coded losslessly only")
        return decode_partition_payload(sec.payload, bs.height, bs.width, bs.n_regions)
