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

import math
from collections import deque
from typing import Any, Literal

import numpy as np
import torch
from numba import njit
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_int, check_type
from eff_vision.tta import EATA, ParamSpec, select_parameters

__all__ = ["GradientSubspaceTracker", "LCoTTA"]

_EIG_REL_TOL = 1e-10
#: incremental path: relative accuracy asked of the eigenvalues that decide the axes (else fall back)
_INC_REL_ACC = 1e-6
#: incremental path: axes combined in the gradients' own dtype when its rounding bound is below this
#: (relative to the axis), else in float64
_INC_LOWP_TOL = 1e-4
_NP_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}
_EPS64 = float(np.finfo(np.float64).eps)


_FAST = {"reassoc", "contract"}  # vectorised sums; NaN/inf semantics kept


@njit(cache=True, fastmath=_FAST, boundscheck=False)
def _ring_write(ring: np.ndarray, n: int, slot: int, g: np.ndarray, out: np.ndarray) -> None:
    """``ring[slot] = g`` and ``out[i] = ⟨ring[i], g⟩`` for ``i < n``, accumulated in float64
    (the product of two float32 values is exact in float64), four rows per pass over ``g``."""
    d = ring.shape[1]
    ring[slot, :] = g
    i = 0
    while i + 4 <= n:
        w0, w1, w2, w3 = ring[i], ring[i + 1], ring[i + 2], ring[i + 3]
        s0 = s1 = s2 = s3 = 0.0
        for j in range(d):
            gj = np.float64(g[j])
            s0 += np.float64(w0[j]) * gj
            s1 += np.float64(w1[j]) * gj
            s2 += np.float64(w2[j]) * gj
            s3 += np.float64(w3[j]) * gj
        out[i], out[i + 1], out[i + 2], out[i + 3] = s0, s1, s2, s3
        i += 4
    while i < n:
        wi = ring[i]
        s = 0.0
        for j in range(d):
            s += np.float64(wi[j]) * np.float64(g[j])
        out[i] = s
        i += 1


@njit(cache=True)
def _centred_gram(gram: np.ndarray, n: int, center: bool, out: np.ndarray) -> float:
    """``out`` = the leading ``n × n`` block of ``gram``, centred (``G − r1ᵀ − 1rᵀ + r̄``, ``r``
    the row means) if ``center``; returns the largest diagonal entry (``max‖w‖²``)."""
    max_sq = -np.inf
    for i in range(n):
        max_sq = max(max_sq, gram[i, i])
    if not center:
        out[:, :] = gram[:n, :n]
        return max_sq
    r = np.zeros(n)
    for i in range(n):
        for j in range(n):
            r[i] += gram[i, j]
    r /= n
    rbar = r.mean()
    for i in range(n):
        for j in range(n):
            out[i, j] = gram[i, j] - r[i] - r[j] + rbar
    return max_sq


@njit(cache=True)
def _axis_coefficients(
    evals: np.ndarray, evecs: np.ndarray, rank: int, center: bool, err: float, out: np.ndarray
) -> tuple[int, float]:
    """From the centred Gram matrix's eigenpairs (ascending), the coefficients of the kept axes
    (descending, over the ring's rows, centred if ``center``, divided by ``√λ``) into ``out``;
    returns ``(k', smallest kept eigenvalue)``, or ``(0, 0)`` when rounding could decide
    anything (see :class:`GradientSubspaceTracker`)."""
    n = evals.shape[0]
    top = evals[n - 1]
    if not (np.isfinite(top) and top > 0):
        return 0, 0.0
    floor = _EIG_REL_TOL * top
    nk = 0
    for a in range(min(rank, n)):
        lam = evals[n - 1 - a]
        # a value kept here but dropped by the reference (or the reverse) lies within
        # err + (the reference's much smaller error) of the threshold
        if abs(lam - floor) <= 2 * err:
            return 0, 0.0
        if lam > floor:
            nk += 1
    smallest = evals[n - nk]
    gap = smallest - evals[n - nk - 1] if n > nk else np.inf
    if min(smallest, gap) <= err / _INC_REL_ACC:
        return 0, 0.0  # the kept eigenvalues or the subspace itself are not accurate enough
    for a in range(nk):
        col = n - 1 - a
        mean = 0.0
        if center:  # Vᵀ(W − 1μᵀ) = ((I − 11ᵀ/n) V)ᵀ W: centred coefficients, uncentred data
            for i in range(n):
                mean += evecs[i, col]
            mean /= n
        inv = 1.0 / np.sqrt(evals[col])
        for i in range(n):
            out[a, i] = (evecs[i, col] - mean) * inv
    return nk, smallest


class GradientSubspaceTracker:
    """Top-``rank`` principal axes of a sliding window of gradients sampled every ``record_every``.

    ``observe(step, g)`` appends ``g`` when ``step % record_every == 0 and step > 0``;
    ``ready`` once the window holds ``rank`` gradients; ``basis`` is ``(k', d)`` with orthonormal
    rows (``k' ≤ rank``: zero-variance axes are dropped), recomputed only when the window changed;
    ``project(g) = basisᵀ (basis g)`` (``g`` unchanged while not ready).

    ``impl="reference"`` (default) recomputes the centred Gram matrix of the whole window at every
    refresh (``O(N_w²·d)`` in float64). ``impl="incremental"`` (speed, issue #25; opt-in) keeps
    the window in a ring buffer of the gradients' own dtype (lossless; slot = record count mod
    N_w — the eigen-decomposition does not depend on the order of the rows) and its **uncentred**
    Gram matrix in float64, one row per recorded gradient (``O(N_w·d)``, a compiled dot product
    accumulated in float64); a refresh centres it in ``O(N_w²)`` (``G − r1ᵀ − 1rᵀ + r̄``, with
    ``r`` the row means), takes its eigen-decomposition and combines the axes from the uncentred
    window with centred coefficients (``Vᵀ(W − 1μᵀ) = ((I − 11ᵀ/n)V)ᵀW``, ``O(k·N_w·d)``) — in
    the gradients' dtype when the rounding bound of that combination,
    ``(n+1)·√n·ε·max‖w‖/√λ``, is below 1e-4 of the axis (float32 gradients: measured ~5e-7 on
    the reproduction's windows), else in float64. Centring the Gram matrix instead of the data
    loses up to ``err = 4n(d/8 + 1)·ε₆₄·max‖w‖²`` on its eigenvalues (cancellation against a
    large common mean); when that is not negligible against what decides the axes — no
    eigenvalue among the top ``rank`` may lie within ``2·err`` of the drop threshold, and the
    smallest kept eigenvalue and its gap to the first one left out must exceed ``1e6·err`` — the
    refresh runs the reference computation instead (on the same values, so bit-identical to
    it), counted in ``fallbacks``. The gradient just recorded is projected in the refresh's own
    pass over the ring: its coefficients ``Cᵀ(C (W g))`` (``W g`` is its Gram row, ``C`` the
    axes' coefficients) are one more row of the combination, so a recording step reads the ring
    twice (Gram row, combination) and the basis not at all. The projection equals the
    reference's to ~1e-6 relative for float32 gradients and ~1e-12 for float64 ones (tested).
    """

    def __init__(
        self,
        rank: int,
        window: int,
        record_every: int,
        center: bool = True,
        impl: Literal["reference", "incremental"] = "reference",
    ) -> None:
        for name, v in (("rank", rank), ("window", window), ("record_every", record_every)):
            check_int(name, v, minimum=1)
        if rank > window:
            raise ValueError(f"rank ({rank}) must not exceed window ({window})")
        check_type("center", center, bool)
        check_choice("impl", impl, ("reference", "incremental"))
        self.rank, self.window, self.record_every, self.center = rank, window, record_every, center
        self.impl = impl
        self.reset()

    def reset(self) -> None:
        # incremental: the deque holds views of the ring's rows (the window in order, oldest first)
        self._window: deque[Tensor] = deque(maxlen=self.window)
        self._basis: Tensor | None = None
        self._dirty = False
        self.refreshes = 0
        self.recorded = 0
        self.fallbacks = 0
        self._ring: Tensor | None = None  # incremental: (N_w, d), slot = recorded mod N_w
        self._ring_np: np.ndarray | None = None  # its numpy view (CPU float32/64: compiled path)
        self._gram: np.ndarray | None = None  # incremental: float64 (N_w, N_w), uncentred
        # incremental: the last recorded tensor (object, version) and its Gram row (ring order):
        # its projection is combined from the ring in the refresh's own pass
        self._last: tuple[Tensor, int] | None = None
        self._last_row: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._window)

    def observe(self, step: int, g: Tensor) -> bool:
        """Record ``g`` if ``step`` is a recording step; returns whether it was recorded."""
        if step > 0 and step % self.record_every == 0:
            if self.impl == "incremental":
                self._window.append(self._ring_append(g.detach().reshape(-1)))
                self._last = (g, g._version)
            else:
                self._window.append(g.detach().reshape(-1).clone())
            self._dirty = True
            self.recorded += 1
            return True
        return False

    def _ring_append(self, flat: Tensor) -> Tensor:
        """Write ``flat`` into the next slot, update the Gram matrix's row and column; the slot."""
        if self._ring is None:
            self._ring = flat.new_empty((self.window, flat.numel()))
            self._gram = np.zeros((self.window, self.window))
            compiled = self._ring.device.type == "cpu" and self._ring.dtype in _NP_DTYPE
            self._ring_np = self._ring.numpy() if compiled else None
        elif (flat.numel(), flat.dtype, flat.device) != (
            self._ring.shape[1],
            self._ring.dtype,
            self._ring.device,
        ):
            raise ValueError(
                f"gradient of {flat.numel()} {flat.dtype} values on {flat.device} after "
                f"{self._ring.shape[1]} {self._ring.dtype} values on {self._ring.device}: the "
                "window must hold one kind of vector"
            )
        slot = self.recorded % self.window
        n = min(self.recorded + 1, self.window)  # filled slots after this append
        if self._ring_np is not None:
            row = np.empty(n)
            _ring_write(self._ring_np, n, slot, flat.contiguous().numpy(), row)
        else:
            self._ring[slot].copy_(flat)
            row = (self._ring[:n].double() @ flat.double()).cpu().numpy()
        self._gram[slot, :n] = row
        self._gram[:n, slot] = row
        self._last_row = row
        return self._ring[slot]

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

    def _refresh(self, with_last: bool = False) -> Tensor | None:
        """Recompute the basis; with ``with_last`` (incremental) also return the projection of the
        last recorded gradient, combined in the same pass (None when it fell back)."""
        gp = None
        if self.impl == "incremental":
            ok, gp = self._refresh_incremental(with_last)
            if not ok:
                self.fallbacks += 1
                self._refresh_reference()
        else:
            self._refresh_reference()
        self._dirty = False
        self.refreshes += 1
        return gp

    def _refresh_reference(self) -> None:
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

    def _refresh_incremental(self, with_last: bool) -> tuple[bool, Tensor | None]:
        """The basis from the ring buffer and its Gram matrix, and with ``with_last`` the last
        recorded gradient's projection ``Bᵀ(B g) = Cᵀ(C(W g))·W`` (its Gram row is ``W g``): one
        more coefficient row of the same combination, so no extra pass over the basis. ``(False,
        None)``: fall back (see the class). The ``n × n`` algebra runs in compiled loops around
        torch's ``eigh`` (a refresh would otherwise be a few dozen small numpy operations)."""
        n = len(self._window)
        gram = np.empty((n, n))
        max_sq = _centred_gram(self._gram, n, self.center, gram)
        try:  # torch's LAPACK: numpy's may start BLAS threads of its own beside torch's
            ev_t, vec_t = torch.linalg.eigh(torch.from_numpy(gram))  # ascending
        except RuntimeError:  # torch.linalg.LinAlgError: non-finite entries
            return False, None
        # bound on the eigenvalues' rounding: each Gram entry is a d-term float64 dot product
        # (vectorised: ≤ d/8 + 1 terms per partial sum); centring combines four entries
        w = self._ring[:n]
        d = w.shape[1]
        err = 4 * n * (d / 8 + 1) * _EPS64 * max_sq
        coef = np.empty((self.rank, n))
        nk, smallest = _axis_coefficients(
            ev_t.numpy(), vec_t.numpy(), self.rank, self.center, err, coef
        )
        if nk == 0:
            return False, None
        coef = coef[:nk]  # (k', n): axes = coef @ w
        if with_last:  # the projection's coefficients over the ring: Cᵀ(C (W g))
            coef = np.concatenate([coef, (coef.T @ (coef @ self._last_row))[None]])
        eps = torch.finfo(w.dtype).eps
        if (n + 1) * math.sqrt(n) * eps * math.sqrt(max_sq / smallest) > _INC_LOWP_TOL:
            c64 = torch.from_numpy(coef).to(w.device)
            out = (c64 @ w.double()).to(w.dtype)  # combined in float64
        else:  # one BLAS pass over the ring (bandwidth-bound: the ring is N_w·d values)
            out = torch.from_numpy(coef).to(w.device, w.dtype) @ w
        self._basis = out[:nk]
        return True, (out[nk] if with_last else None)

    def project(self, g: Tensor) -> Tensor:
        if self.impl == "incremental" and self.ready:
            return self._project_incremental(g)[0]
        basis = self.basis
        if basis is None:
            return g
        flat = g.reshape(-1)
        return (basis.T @ (basis @ flat.to(basis.dtype))).to(g.dtype).reshape(g.shape)

    def project_with_norms(self, g: Tensor) -> tuple[Tensor, float, float]:
        """``(project(g), ‖g‖, ‖project(g)‖)``: LCoTTA's update and its energy statistic."""
        if self.impl == "incremental" and self.ready:
            return self._project_incremental(g)
        norm = float(g.norm())  # before the projection, while g is in cache (same value)
        gp = self.project(g)
        return gp, norm, float(gp.norm())

    def _project_incremental(self, g: Tensor) -> tuple[Tensor, float, float]:
        """``project_with_norms`` of the incremental path (ready): the last recorded gradient
        right after its refresh comes out of the refresh's pass (``‖g‖`` from its Gram diagonal,
        a float64 sum); any other vector as in the reference."""
        last = self._last is not None and g is self._last[0] and g._version == self._last[1]
        if self._dirty:
            gp = self._refresh(with_last=last)
            if gp is not None:
                slot = (self.recorded - 1) % self.window
                norm = math.sqrt(self._gram[slot, slot])
                return gp.to(g.dtype).reshape(g.shape), norm, float(gp.norm())
        basis = self._basis
        gp = (basis.T @ (basis @ g.reshape(-1).to(basis.dtype))).to(g.dtype).reshape(g.shape)
        return gp, float(g.norm()), float(gp.norm())


class LCoTTA(EATA):
    """LCoTTA: EATA's loss with the gradient projected on a tracked principal subspace.

    ``forward(x)`` returns the logits predicted before the update. ``subspace`` is the
    :class:`GradientSubspaceTracker`; ``stats`` counts kept samples, skipped steps, projected
    steps and the mean projection energy ratio ``‖P g‖ / ‖g‖``.

    ``subspace_impl="incremental"`` (opt-in, issue #25) refreshes the subspace from a ring buffer
    and its incrementally updated Gram matrix (see the tracker): at ~51k adapted parameters
    (rank 4, window 30, a refresh every 3 steps) a step costs ~1.2–1.5× an EATA step instead
    of ~4–6× (``tools/bench/vision_lcotta.py``; the ratio moves with the load of the machine: a
    recording step reads the 30 × 51k ring twice, memory-bound). Its projection equals the
    reference's to ~1e-6 relative (float32), but the rounding differences steer a long stream
    elsewhere: the quick reproduction's claim values move in the third decimal (same verdicts),
    so the default — and ``vision.lcotta`` — keep ``"reference"``.
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
        subspace_impl: Literal["reference", "incremental"] = "reference",
        **kw: Any,
    ) -> None:
        check_choice("subspace_impl", subspace_impl, ("reference", "incremental"))
        self.subspace = GradientSubspaceTracker(rank, window, record_every, center, subspace_impl)
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
            g, norm, p_norm = self.subspace.project_with_norms(g)
            self.stats["projected"] += 1
            self.stats["energy_sum"] += p_norm / norm if norm > 0 else 0.0
        self.last_update_grad = g.detach().clone()
        return g

    def after_batch(self) -> None:
        self.t += 1

    @property
    def energy_ratio(self) -> float:
        """Mean ``‖P g‖ / ‖g‖`` over the projected steps (nan before the first one)."""
        n = self.stats["projected"]
        return self.stats["energy_sum"] / n if n else float("nan")
