"""Contour payloads of MoRIC's adaptive chain coding (our design, spec "Contours"): the coding
itself, below the container (:mod:`eff_vision.moric.bitstream`) and the contour streams of
:class:`~eff_vision.moric.chain.ChainCoder`.

**Lossless mode = crack codes of the partition.** The spec's first design (Freeman codes of
``cv2.findContours`` pixel contours, decoded by polygon filling) is exactly invertible only if the
decoder reproduces the contour hierarchy and the ownership of hole-boundary pixels; the spec allows
crack codes as the fallback, and we use them because they are exactly invertible by construction:

- the boundary of a label map is the set of unit edges of the pixel-edge grid that separate two
  different labels (edges on the image border are never coded);
- that edge set is split into paths (first from the odd-degree vertices — where three regions meet,
  or where a boundary meets the image border — then closed loops), each coded as its start vertex
  (⌈log2((H+1)(W+1))⌉ raw bits), an Elias-gamma length, a 2-bit first direction and differential
  codes (straight / left / right, 3 symbols) with an adaptive order-1-context range coder;
- the decoder redraws the edges, labels the 4-connected components they cut the grid into, and reads
  one label per component (for a binary mask a single bit: labels alternate across every edge).

A boundary shared by two regions is one set of edges, so a partition codes it **once**. Rates are
reported per boundary pixel with the spec's normalisation: the number of Freeman contour points of
``cv2.findContours(RETR_CCOMP, CHAIN_APPROX_NONE)``.

**Lossy mode** (binary masks): Douglas–Peucker polygons (``cv2.approxPolyDP``, ε) of the
``findContours`` contours, vertex deltas as signed Elias-gamma codes, a hole flag per contour; the
decoder fills outer polygons (largest first) and clears holes. **Adaptive mode** (the streams'
choice between the two, :class:`~eff_vision.moric.chain.ChainCoder`) picks, per mask, the shortest
stream among lossless and lossy at several ε whose IoU ≥ ``min_iou``; per contour choices are left
out (our simplification).

Malformed payloads (a path that leaves the image or runs along its border, an edge coded twice, an
edge inside one region, a start vertex out of range, missing region ids, truncation) raise
:class:`~eff_vision.moric.errors.MoRICDecodeError`.
"""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np

from eff_vision.moric._fast import components, decode_paths
from eff_vision.moric.errors import MoRICDecodeError
from eff_vision.moric.rangecoder import AdaptiveModel, RangeDecodeError, RangeDecoder, RangeEncoder

__all__ = [
    "boundary_pixels",
    "check_labels",
    "check_mask",
    "decode_partition_payload",
    "decode_polygons_payload",
    "encode_partition_payload",
    "encode_polygons_payload",
    "iou",
    "label_edges",
]

_DIRS = ((0, 1), (1, 0), (0, -1), (-1, 0))  # (dy, dx): right, down, left, up


# --------------------------------------------------------------------------------------------
# Input checks and small helpers
# --------------------------------------------------------------------------------------------


def check_mask(mask: object, name: str = "mask") -> np.ndarray:
    """A 2-D boolean (or 0/1) mask with at least one True pixel → bool array."""
    if not isinstance(mask, np.ndarray) or mask.ndim != 2:
        raise ValueError(f"{name} must be a 2-D numpy array, got {type(mask).__name__}")
    if mask.dtype != bool:
        vals = np.unique(mask)
        if not np.all(np.isin(vals, (0, 1))):
            raise ValueError(f"{name} must be boolean or 0/1, got values {vals[:5].tolist()}")
        mask = mask.astype(bool)
    if not mask.any():
        raise ValueError(f"{name} must select at least one pixel (it is all False)")
    return mask


def check_labels(labels: object, name: str = "labels") -> tuple[np.ndarray, int]:
    """A 2-D integer label map with contiguous ids 0..N−1 (each present) → (int32 map, N)."""
    if not isinstance(labels, np.ndarray) or labels.ndim != 2:
        raise ValueError(f"{name} must be a 2-D numpy array of region ids")
    if not np.issubdtype(labels.dtype, np.integer) and labels.dtype != bool:
        raise ValueError(f"{name} must hold integer region ids, got dtype {labels.dtype}")
    ids = np.unique(labels)
    n = int(ids.size)
    if ids[0] != 0 or ids[-1] != n - 1:
        raise ValueError(
            f"{name}: region ids must be contiguous 0..N−1 with every id present, got {ids[:10].tolist()}"
        )
    if n > 255:
        raise ValueError(f"{name}: at most 255 regions, got {n}")
    return labels.astype(np.int32), n


def label_edges(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Interior crack edges: hm[i, j] separates pixels (i−1, j) | (i, j), shape (H+1, W);
    vm[i, j] separates (i, j−1) | (i, j), shape (H, W+1). Border edges are False."""
    h, w = labels.shape
    hm = np.zeros((h + 1, w), bool)
    vm = np.zeros((h, w + 1), bool)
    hm[1:h] = labels[1:] != labels[:-1]
    vm[:, 1:w] = labels[:, 1:] != labels[:, :-1]
    return hm, vm


def boundary_pixels(mask: np.ndarray) -> int:
    """Freeman contour points of ``findContours(RETR_CCOMP, CHAIN_APPROX_NONE)`` (the rate unit)."""
    import cv2

    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    return int(sum(len(c) for c in contours))


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


# --------------------------------------------------------------------------------------------
# Crack-code paths
# --------------------------------------------------------------------------------------------


class _EdgeGrid:
    """Edge ids on the (H+1)×(W+1) vertex grid: horizontal y·W + x, vertical NH + y·(W+1) + x."""

    def __init__(self, h: int, w: int) -> None:
        self.h, self.w, self.nh = h, w, (h + 1) * w

    def edge(self, y: int, x: int, d: int) -> int:
        """Id of the edge leaving vertex (y, x) in direction d, or −1 if it leaves the grid or runs
        along the image border (never a label boundary)."""
        h, w = self.h, self.w
        if d == 0:
            return y * w + x if x < w and 0 < y < h else -1
        if d == 2:
            return y * w + x - 1 if x > 0 and 0 < y < h else -1
        if d == 1:
            return self.nh + y * (w + 1) + x if y < h and 0 < x < w else -1
        return self.nh + (y - 1) * (w + 1) + x if y > 0 and 0 < x < w else -1


def _trace_paths(hm: np.ndarray, vm: np.ndarray) -> list[tuple[int, int, list[int]]]:
    """Decompose the edge set into paths (start y, start x, directions): odd vertices first."""
    h, w = vm.shape[0], hm.shape[1]
    grid = _EdgeGrid(h, w)
    hy, hx = np.nonzero(hm)
    vy, vx = np.nonzero(vm)
    unused = set((hy * w + hx).tolist()) | set((grid.nh + vy * (w + 1) + vx).tolist())
    deg = np.zeros((h + 1, w + 1), np.int32)
    deg[:, :w] += hm
    deg[:, 1:] += hm
    deg[:h, :] += vm
    deg[1:, :] += vm
    paths = []

    def trace(y: int, x: int) -> None:
        moves: list[int] = []
        d_prev = None
        sy, sx = y, x
        while True:
            order = (0, 1, 2, 3) if d_prev is None else (d_prev, (d_prev + 3) % 4, (d_prev + 1) % 4)
            for d in order:
                e = grid.edge(y, x, d)
                if e >= 0 and e in unused:
                    unused.discard(e)
                    moves.append(d)
                    y, x = y + _DIRS[d][0], x + _DIRS[d][1]
                    d_prev = d
                    break
            else:
                break
        if moves:
            paths.append((sy, sx, moves))

    def has_unused(y: int, x: int) -> bool:
        return any((e := grid.edge(y, x, d)) >= 0 and e in unused for d in range(4))

    oy, ox = np.nonzero(deg % 2 == 1)
    for y, x in zip(oy.tolist(), ox.tolist(), strict=True):
        while has_unused(y, x):
            trace(y, x)
    while unused:
        e = min(unused)
        y, x = (e // w, e % w) if e < grid.nh else divmod(e - grid.nh, w + 1)
        trace(y, x)
    return paths


def _encode_paths(
    enc: RangeEncoder, paths: list[tuple[int, int, list[int]]], h: int, w: int
) -> None:
    vbits = _bits((h + 1) * (w + 1))
    turns = AdaptiveModel(3, contexts=4)
    enc.encode_gamma(len(paths) + 1)
    for y, x, moves in paths:
        enc.encode_bits(y * (w + 1) + x, vbits)
        enc.encode_gamma(len(moves))
        enc.encode_bits(moves[0], 2)
        ctx = 3
        for prev, d in itertools.pairwise(moves):
            t = {0: 0, 3: 1, 1: 2}.get((d - prev) % 4)
            if t is None:
                raise AssertionError("a crack path never reverses")  # pragma: no cover
            turns.encode(enc, t, ctx)
            ctx = t


def _decode_paths(
    dec: RangeDecoder, h: int, w: int, reference: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The edge masks (hm, vm) of the coded paths. Default: one compiled loop
    (:func:`eff_vision.moric._fast.decode_paths`), which hands any payload it cannot finish
    cleanly back to this reference loop, so the errors are the same."""
    vbits = _bits((h + 1) * (w + 1))
    if not reference:
        out = decode_paths(dec, h, w, vbits)
        if out is not None:
            return out
    grid = _EdgeGrid(h, w)
    n_edges = grid.nh + h * (w + 1)
    used = np.zeros(n_edges, bool)
    turns = AdaptiveModel(3, contexts=4)
    n_paths = dec.decode_gamma() - 1
    if n_paths > n_edges:
        raise MoRICDecodeError(f"contours: {n_paths} paths cannot fit a {h}×{w} image")
    total = 0
    for p in range(n_paths):
        v = dec.decode_bits(vbits)
        if v >= (h + 1) * (w + 1):
            raise MoRICDecodeError(
                f"contours: path {p} starts at vertex {v}, outside the {h}×{w} grid"
            )
        y, x = divmod(v, w + 1)
        length = dec.decode_gamma()
        total += length
        if total > n_edges:
            raise MoRICDecodeError(f"contours: path {p} is longer than the image has edges")
        d = dec.decode_bits(2)
        ctx = 3
        for k in range(length):
            if k:
                t = turns.decode(dec, ctx)
                ctx = t
                d = (d, (d + 3) % 4, (d + 1) % 4)[t]
            e = grid.edge(y, x, d)
            if e < 0:
                raise MoRICDecodeError(
                    f"contours: path {p} leaves the image or runs along its border"
                )
            if used[e]:
                raise MoRICDecodeError(f"contours: path {p} codes an edge twice")
            used[e] = True
            y, x = y + _DIRS[d][0], x + _DIRS[d][1]
    hm = used[: grid.nh].reshape(h + 1, w)
    vm = used[grid.nh :].reshape(h, w + 1)
    return hm, vm


def _components(hm: np.ndarray, vm: np.ndarray) -> tuple[int, np.ndarray]:
    """4-connected components of the pixel grid cut by the edges, numbered as scipy's csgraph
    ``connected_components`` numbers them (compiled flood fill; tested against it)."""
    return components(np.ascontiguousarray(hm), np.ascontiguousarray(vm))


def _edge_pairs(hm: np.ndarray, vm: np.ndarray, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    iy, ix = np.nonzero(hm)
    a1, b1 = comp[iy - 1, ix], comp[iy, ix]
    jy, jx = np.nonzero(vm)
    a2, b2 = comp[jy, jx - 1], comp[jy, jx]
    return np.concatenate([a1, a2]), np.concatenate([b1, b2])


def _encode_labels(enc: RangeEncoder, labels: np.ndarray, n_labels: int, hm, vm) -> None:
    n, comp = _components(hm, vm)
    first = np.full(n, -1, np.int64)
    flat = comp.ravel()
    order = np.unique(flat, return_index=True)[1]
    first[np.arange(n)] = order
    comp_label = labels.ravel()[first]
    if n_labels == 2:
        enc.encode_bits(int(comp_label[0]), 1)
        return
    model = AdaptiveModel(n_labels)
    for lab in comp_label.tolist():
        model.encode(enc, int(lab))


def _decode_labels(
    dec: RangeDecoder, n_labels: int, hm: np.ndarray, vm: np.ndarray, require_all: bool
) -> np.ndarray:
    n, comp = _components(hm, vm)
    a, b = _edge_pairs(hm, vm, comp)
    if np.any(a == b):
        raise MoRICDecodeError(
            "contours: a contour does not close (an edge lies inside one region)"
        )
    if n_labels == 2:
        lab = np.full(n, -1, np.int64)
        lab[0] = dec.decode_bits(1)
        adj: list[list[int]] = [[] for _ in range(n)]
        for u, v in zip(a.tolist(), b.tolist(), strict=True):
            adj[u].append(v)
            adj[v].append(u)
        queue = deque([0])
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if lab[v] < 0:
                    lab[v] = 1 - lab[u]
                    queue.append(v)
                elif lab[v] == lab[u]:
                    raise MoRICDecodeError("contours: inconsistent binary labels across an edge")
        if np.any(lab < 0):
            raise MoRICDecodeError("contours: a region is not reachable from the first one")
    else:
        model = AdaptiveModel(n_labels)
        lab = np.array([model.decode(dec) for _ in range(n)], np.int64)
        if np.any(lab[a] == lab[b]):
            raise MoRICDecodeError("contours: two regions with the same id touch across an edge")
    out = lab[comp]  # every component has a pixel: the map holds exactly the ids of lab
    if require_all and np.unique(lab).size != n_labels:
        raise MoRICDecodeError(f"contours: the decoded map lacks some of the {n_labels} region ids")
    if not require_all and not lab.any():
        raise MoRICDecodeError("contours: the decoded mask is empty")
    return out.astype(np.int32)


def encode_partition_payload(labels: np.ndarray, n_labels: int) -> bytes:
    enc = RangeEncoder()
    hm, vm = label_edges(labels)
    _encode_paths(enc, _trace_paths(hm, vm), *labels.shape)
    _encode_labels(enc, labels, n_labels, hm, vm)
    return enc.finish()


def decode_partition_payload(
    payload: bytes, h: int, w: int, n_labels: int, require_all: bool = True,
    reference: bool = False,
) -> np.ndarray:  # fmt: skip
    """Label map from a crack-code payload; ``require_all=False`` for masks (which may be full);
    ``reference``: the pure-Python path decoder instead of the compiled one (the same map)."""
    try:
        dec = RangeDecoder(payload)
        hm, vm = _decode_paths(dec, h, w, reference)
        out = _decode_labels(dec, n_labels, hm, vm, require_all)
    except RangeDecodeError as exc:
        raise MoRICDecodeError(f"contours: {exc}") from exc
    if not dec.exhausted():
        raise MoRICDecodeError("contours: payload has unread bytes")
    return out


# --------------------------------------------------------------------------------------------
# Lossy polygons
# --------------------------------------------------------------------------------------------


def _polygons(mask: np.ndarray, eps: float) -> list[tuple[bool, np.ndarray]]:
    import cv2

    contours, hier = cv2.findContours(mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    if hier is None:
        return []
    hier = hier[0]
    outers = [i for i in range(len(contours)) if hier[i][3] < 0]
    outers.sort(key=lambda i: -cv2.contourArea(contours[i]))
    out = []
    for i in outers:
        out.append((False, cv2.approxPolyDP(contours[i], eps, True)[:, 0]))
        child = hier[i][2]
        while child >= 0:
            out.append((True, cv2.approxPolyDP(contours[child], eps, True)[:, 0]))
            child = hier[child][0]
    return out


def encode_polygons_payload(mask: np.ndarray, eps: float) -> bytes:
    h, w = mask.shape
    enc = RangeEncoder()
    polys = _polygons(mask, eps)
    enc.encode_gamma(len(polys) + 1)
    for hole, pts in polys:
        enc.encode_bits(int(hole), 1)
        enc.encode_gamma(len(pts))
        enc.encode_bits(int(pts[0][0]), _bits(w))
        enc.encode_bits(int(pts[0][1]), _bits(h))
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            enc.encode_signed_gamma(int(x1 - x0))
            enc.encode_signed_gamma(int(y1 - y0))
    return enc.finish()


def decode_polygons_payload(payload: bytes, h: int, w: int) -> np.ndarray:
    import cv2

    try:
        dec = RangeDecoder(payload)
        n = dec.decode_gamma() - 1
        if n > h * w:
            raise MoRICDecodeError(f"contours: {n} polygons cannot fit a {h}×{w} image")
        out = np.zeros((h, w), np.uint8)
        for p in range(n):
            hole = dec.decode_bits(1)
            count = dec.decode_gamma()
            if count > 4 * (h + w) * (h + w):
                raise MoRICDecodeError(f"contours: polygon {p} has an impossible vertex count")
            x, y = dec.decode_bits(_bits(w)), dec.decode_bits(_bits(h))
            pts = [(x, y)]
            for _ in range(count - 1):
                x += dec.decode_signed_gamma()
                y += dec.decode_signed_gamma()
                pts.append((x, y))
            arr = np.array(pts, np.int32)
            if arr.min() < 0 or arr[:, 0].max() >= w or arr[:, 1].max() >= h:
                raise MoRICDecodeError(f"contours: polygon {p} leaves the image")
            cv2.fillPoly(out, [arr], 0 if hole else 1)
            if hole:  # the hole contour runs through object pixels: redraw its outline
                cv2.polylines(out, [arr], True, 1, 1)
    except RangeDecodeError as exc:
        raise MoRICDecodeError(f"contours: {exc}") from exc
    if not dec.exhausted():
        raise MoRICDecodeError("contours: payload has unread bytes")
    return out.astype(bool)
