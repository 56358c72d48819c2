"""Re-identification metrics with torchreid's ``evaluate_rank`` conventions (CMC and mAP).

For each query, the gallery is sorted by distance (cosine distance ``1 − cos`` of the features
here, or a given ``distmat``); gallery samples with the query's identity **and** camera are
discarded (torchreid's Market-1501 rule; with different camera ids for the two modalities — the
SYSU-MM01 visible-to-thermal protocol — nothing is discarded). A query without any true match in
the remaining gallery is skipped; CMC at rank r is the fraction of the valid queries whose first
true match is within the top r; AP is the mean of the precision at each true match; mAP averages
the APs. Sorting is stable (``np.argsort(kind="stable")``), so ties are broken by gallery order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["cosine_distance", "evaluate_rank", "evaluate_rank_distmat"]


def _arr(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def cosine_distance(query_feats: Any, gallery_feats: Any) -> np.ndarray:
    """``1 − cos`` between every query and gallery feature, ``(n_query, n_gallery)``."""
    q, g = _arr(query_feats).astype(np.float64), _arr(gallery_feats).astype(np.float64)
    if q.ndim != 2 or g.ndim != 2:
        raise ValueError(f"features must be 2-D (n, d), got {q.shape} and {g.shape}")
    if q.shape[1] != g.shape[1]:
        raise ValueError(
            f"query and gallery feature dimensions differ: {q.shape[1]} vs {g.shape[1]}"
        )
    q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    return 1.0 - q @ g.T


def evaluate_rank_distmat(
    distmat: Any,
    query_ids: Any,
    gallery_ids: Any,
    query_camids: Any | None = None,
    gallery_camids: Any | None = None,
    cmc_ranks: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """torchreid's ``eval_market1501`` on a distance matrix; returns rank-r and ``mAP``."""
    dist = _arr(distmat).astype(np.float64)
    q_ids, g_ids = _arr(query_ids).ravel(), _arr(gallery_ids).ravel()
    if dist.shape != (len(q_ids), len(g_ids)):
        raise ValueError(
            f"distmat must be (n_query, n_gallery) = {(len(q_ids), len(g_ids))}, got {dist.shape}"
        )
    q_cam = np.zeros(len(q_ids), int) if query_camids is None else _arr(query_camids).ravel()
    g_cam = np.ones(len(g_ids), int) if gallery_camids is None else _arr(gallery_camids).ravel()
    ranks = sorted({int(r) for r in cmc_ranks})
    if not ranks or ranks[0] < 1:
        raise ValueError(f"cmc_ranks must be positive ints, got {cmc_ranks!r}")
    max_rank = max(ranks)
    order = np.argsort(dist, axis=1, kind="stable")
    matches = g_ids[order] == q_ids[:, None]
    all_cmc, all_ap = [], []
    for i in range(len(q_ids)):
        keep = ~((g_ids[order[i]] == q_ids[i]) & (g_cam[order[i]] == q_cam[i]))
        raw = matches[i][keep].astype(np.float64)
        if not raw.any():
            continue
        cmc = np.minimum(raw.cumsum(), 1.0)
        if len(cmc) < max_rank:
            cmc = np.concatenate([cmc, np.full(max_rank - len(cmc), cmc[-1])])
        all_cmc.append(cmc[:max_rank])
        precision = raw.cumsum() / np.arange(1, len(raw) + 1)
        all_ap.append(float((precision * raw).sum() / raw.sum()))
    if not all_cmc:
        raise ValueError("no query identity is present in the gallery: CMC and mAP are undefined")
    cmc_mean = np.mean(all_cmc, axis=0)
    out = {f"rank{r}": float(cmc_mean[r - 1]) for r in ranks}
    out["mAP"] = float(np.mean(all_ap))
    out["valid_queries"] = float(len(all_ap))
    return out


def evaluate_rank(
    query_feats: Any,
    query_ids: Any,
    gallery_feats: Any,
    gallery_ids: Any,
    cmc_ranks: Sequence[int] = (1, 5, 10),
    query_camids: Any | None = None,
    gallery_camids: Any | None = None,
) -> dict[str, float]:
    """CMC (``rank1``, ``rank5``, ``rank10``) and ``mAP`` with cosine distance.

    Camera ids default to 0 for queries and 1 for the gallery (cross-modality: nothing is
    discarded). ``ValueError`` when the feature dimensions differ or no query identity is in the
    gallery.
    """
    return evaluate_rank_distmat(
        cosine_distance(query_feats, gallery_feats), query_ids, gallery_ids,
        query_camids, gallery_camids, cmc_ranks,
    )  # fmt: skip
