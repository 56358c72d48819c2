"""LCoTTA: lifelong test-time adaptation by online learning in a tracked low-dimensional gradient
subspace.

Paper: Duan, Xu, Liu, Wen (SJTU), "Lifelong Test-Time Adaptation via Online Learning in Tracked
Low-Dimensional Subspace", NeurIPS 2025 (OpenReview NFvAa2hNzH); code ``ThunderDavid/LCoTTA``
(``classification/methods/subspace_plus.py`` on ``mariodoebler/test-time-adaptation``). This
module implements the released algorithm:

- the adapted parameters are the norm layers' affines (BatchNorm with test-batch statistics,
  LayerNorm, GroupNorm); everything else is frozen;
- the loss is **EATA's** filtered, re-weighted entropy, not plain entropy: keep ``H_i < E0`` and
  (once the moving average m exists) ``|cos(m, p_i)| < d0``, weight ``exp(E0 − H_i)``
  (:class:`eff_vision.tta.EATA`, Fisher term off);
- every ``record_every`` (s) batches (t > 0) the raw flattened gradient joins a **sliding window**
  of the last ``window`` (N_w) gradients; once the window holds ``rank`` (k) of them — i.e. from
  batch ``k·s`` on — the gradient is replaced by its projection ``Pᵀ(P g)`` on the top-k principal
  axes of the **mean-centred** window (sklearn ``PCA`` axes; the gradient itself is not centred);
- one SGD step per batch (momentum 0.9, Nesterov: the framework's ``OPTIM.NESTEROV = True``,
  ``nesterov=False`` for plain momentum); the prediction is made before the update.

Defaults are the ResNet-50 / ImageNet-C config (lr 1.5e-4, momentum 0.9, k = 25, N_w = 100,
s = 50); ViT-B/16 uses lr 5e-4, k = 50, s = 100.

Departures from the released code (its quirks, spec "Code quirks not to copy"): the PCA is
recomputed only when the window changes (the code refits at every step; equivalent), through the
Gram matrix ``W_c W_cᵀ`` (``O(N_w²·d)``) with axes of eigenvalue ≤ 1e-10 × the largest dropped (a
window of exactly k gradients has centred rank ≤ k − 1); a batch where no sample passes the filter
is skipped (the code takes ``mean([])`` = NaN); E0 and d0 are arguments (the code hard-codes
``2.763 = 0.4 ln 1000`` and 0.05; ``e_margin=None`` means ``0.4 ln C``); the no-op
``copy_model_and_optimizer`` around the projection is dropped. A non-finite gradient skips the
update with a ``RuntimeWarning``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
from torch import Tensor, nn

from eff_shared.errors import check_type
from eff_vision.tta import EATA, ParamSpec, select_parameters

__all__ = ["GradientSubspaceTracker", "LCoTTA"]

_EIG_REL_TOL = 1e-10


class GradientSubspaceTracker:
    """Top-``rank`` principal axes of a sliding window of gradients sampled every ``record_every``.

    ``observe(step, g)`` appends ``g`` when ``step % record_every == 0 and step > 0``;
    ``ready`` once the window holds ``rank`` gradients; ``basis`` is ``(k', d)`` with orthonormal
    rows (``k' ≤ rank``: zero-variance axes are dropped), recomputed only when the window changed;
    ``project(g) = basisᵀ (basis g)`` (``g`` unchanged while not ready).
    """

    def __init__(self, rank: int, window: int, record_every: int, center: bool = True) -> None:
        for name, v in (("rank", rank), ("window", window), ("record_every", record_every)):
            check_type(name, v, int)
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        if rank > window:
            raise ValueError(f"rank ({rank}) must not exceed window ({window})")
        check_type("center", center, bool)
        self.rank, self.window, self.record_every, self.center = rank, window, record_every, center
        self.reset()

    def reset(self) -> None:
        self._window: deque[Tensor] = deque(maxlen=self.window)
        self._basis: Tensor | None = None
        self._dirty = False
        self.refreshes = 0
        self.recorded = 0

    def __len__(self) -> int:
        return len(self._window)

    def observe(self, step: int, g: Tensor) -> bool:
        """Record ``g`` if ``step`` is a recording step; returns whether it was recorded."""
        if step > 0 and step % self.record_every == 0:
            self._window.append(g.detach().reshape(-1).clone())
            self._dirty = True
            self.recorded += 1
            return True
        return False

    @property
    def ready(self) -> bool:
        return len(self._window) >= self.rank

    @property
    def basis(self) -> Tensor | None:
        if not self.ready:
            return None
        if self._dirty or self._basis is None:
            self._refresh()
        return self._basis

    def _refresh(self) -> None:
        w = torch.stack(list(self._window)).double()
        if self.center:
            w = w - w.mean(0, keepdim=True)
        gram = w @ w.T
        evals, evecs = torch.linalg.eigh(gram)  # ascending
        evals, evecs = evals.flip(0)[: self.rank], evecs.flip(1)[:, : self.rank]
        top = float(evals[0]) if evals.numel() else 0.0
        keep = evals > _EIG_REL_TOL * top if top > 0 else torch.zeros_like(evals, dtype=torch.bool)
        axes = (evecs[:, keep].T @ w) / evals[keep].sqrt()[:, None]
        self._basis = axes.to(self._window[0].dtype)
        self._dirty = False
        self.refreshes += 1

    def project(self, g: Tensor) -> Tensor:
        basis = self.basis
        if basis is None:
            return g
        flat = g.reshape(-1)
        return (basis.T @ (basis @ flat.to(basis.dtype))).to(g.dtype).reshape(g.shape)


class LCoTTA(EATA):
    """LCoTTA: EATA's loss with the gradient projected on a tracked principal subspace.

    ``forward(x)`` returns the logits predicted before the update. ``subspace`` is the
    :class:`GradientSubspaceTracker`; ``stats`` counts kept samples, skipped steps, projected
    steps and the mean projection energy ratio ``‖P g‖ / ‖g‖``.
    """

    def __init__(
        self,
        model: nn.Module,
        lr: float = 1.5e-4,
        momentum: float = 0.9,
        rank: int = 25,
        window: int = 100,
        record_every: int = 50,
        e_margin: float | None = None,
        d_margin: float = 0.05,
        params: ParamSpec = "norm",
        center: bool = True,
        **kw: Any,
    ) -> None:
        self.subspace = GradientSubspaceTracker(rank, window, record_every, center)
        n_params = sum(p.numel() for _, p in select_parameters(model, params))
        if rank > n_params:
            raise ValueError(
                f"rank ({rank}) must not exceed the number of adapted parameters ({n_params})"
            )
        super().__init__(
            model,
            lr=lr,
            momentum=momentum,
            e_margin=e_margin,
            d_margin=d_margin,
            params=params,
            **kw,
        )

    def reset_state(self) -> None:
        super().reset_state()
        self.stats.update({"projected": 0, "energy_sum": 0.0})
        self.t = 0
        self.subspace.reset()
        self.last_update_grad: Tensor | None = None

    def transform_grad(self, g: Tensor) -> Tensor:
        self.subspace.observe(self.t, g)
        if self.subspace.ready:
            gp = self.subspace.project(g)
            norm = float(g.norm())
            self.stats["projected"] += 1
            self.stats["energy_sum"] += float(gp.norm()) / norm if norm > 0 else 0.0
            g = gp
        self.last_update_grad = g.detach().clone()
        return g

    def after_batch(self) -> None:
        self.t += 1

    @property
    def energy_ratio(self) -> float:
        """Mean ``‖P g‖ / ‖g‖`` over the projected steps (nan before the first one)."""
        n = self.stats["projected"]
        return self.stats["energy_sum"] / n if n else float("nan")
