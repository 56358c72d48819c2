"""Metrics: node classification (accuracy, macro-F1, per-class recall; numpy, tensors accepted) and
question answering (:func:`answer_correct`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = ["accuracy", "answer_correct", "macro_f1", "per_class_recall"]


def _labels(pred: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred.detach().cpu() if hasattr(pred, "detach") else pred).reshape(-1)
    t = np.asarray(target.detach().cpu() if hasattr(target, "detach") else target).reshape(-1)
    if p.shape != t.shape:
        raise ValueError(f"pred and target must have the same length, got {p.size} and {t.size}")
    if p.size == 0:
        raise ValueError("pred and target must not be empty")
    if not (np.issubdtype(p.dtype, np.integer) and np.issubdtype(t.dtype, np.integer)):
        raise TypeError("pred and target must hold integer class labels")
    return p, t


def accuracy(pred: Any, target: Any) -> float:
    """Fraction of nodes whose predicted class equals the label."""
    p, t = _labels(pred, target)
    return float(np.mean(p == t))


def per_class_recall(pred: Any, target: Any, num_classes: int) -> np.ndarray:
    """Recall of every class in ``[0, num_classes)``; NaN for a class absent from ``target``."""
    p, t = _labels(pred, target)
    out = np.full(num_classes, np.nan)
    for c in range(num_classes):
        members = t == c
        if members.any():
            out[c] = float(np.mean(p[members] == c))
    return out


def macro_f1(pred: Any, target: Any) -> float:
    """Unweighted mean of per-class F1 over the classes present in ``target`` or ``pred`` (the
    convention of scikit-learn's ``f1_score(average="macro")``); a class never predicted nor present
    does not count, one present but never predicted counts as F1 = 0."""
    p, t = _labels(pred, target)
    classes = np.union1d(p, t)
    f1 = []
    for c in classes:
        tp = np.sum((p == c) & (t == c))
        fp = np.sum((p == c) & (t != c))
        fn = np.sum((p != c) & (t == c))
        denom = 2 * tp + fp + fn
        f1.append(0.0 if denom == 0 else 2 * tp / denom)
    return float(np.mean(f1))


def answer_correct(answer: str, gold: str) -> bool:
    """Whether ``gold`` occurs in ``answer`` as a whole word, case-insensitively (exact for the
    scripted reader, which answers with the entity alone; tolerant of a real LLM's sentence)."""
    if not isinstance(answer, str) or not isinstance(gold, str) or not gold.strip():
        raise TypeError("answer and gold must be strings, gold non-empty")
    return re.search(rf"(?<!\w){re.escape(gold.strip().lower())}(?!\w)", answer.lower()) is not None
