"""Compiled kernels of the sequence-form engine (numba): whole iterations in one call.

The numpy methods of :class:`~eff_games.efg.Treeplex` (one vectorised call per depth level) are
the reference; these kernels run ``n`` iterations of a solver in one compiled loop over the
infosets. That removes the per-call overhead that dominates tiny games (Kuhn poker: 12 infosets,
where numpy spends its time dispatching ~40 small calls per iteration) and the temporaries that
dominate large ones (10⁶ infosets).

**Same numbers.** Every kernel performs the reference's floating-point operations in the
reference's order — including numpy's summation order inside ``np.add.reduceat`` (the first
element plus a pairwise sum of the rest, :func:`_segsum`) and ``np.bincount``'s in-order
accumulation — so iterates, regrets and averages are bit-identical to ``backend="numpy"``
(``tests/test_kernels.py``).

**Layout.** A game is packed once (:func:`packed`, cached on the game) into one int64 array (per
player: first sequence, action count and parent sequence of every infoset, infoset of every
sequence, the depth levels' infoset offsets and their distinct parent sequences; the CSR arrays of
A and Aᵀ) and one float64 array (uniform strategies, CSR values), with offset tables. A solver's
state lives in one float64 buffer whose regions its lists (``_beh``, ``_regret``, ...) view, so a
call passes a handful of arrays whatever the game's size (each array argument costs numba ~0.2 µs).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

if TYPE_CHECKING:
    from eff_games.efg import EFG

__all__ = ["BACKENDS", "check_backend", "default_backend"]

BACKENDS = ("numba", "numpy")


def default_backend() -> str:
    """``"numba"``, or ``"numpy"`` when the environment sets ``EFF_GAMES_BACKEND=numpy``."""
    return "numpy" if os.environ.get("EFF_GAMES_BACKEND") == "numpy" else "numba"


def check_backend(backend: object) -> str:
    """``backend`` validated (``None`` → :func:`default_backend`)."""
    if backend is None:
        return default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)} or None, got {backend!r}")
    return str(backend)


# ---- packing ---------------------------------------------------------------------------------

#: int64 arrays per player, in this order, then A.indptr, A.indices, Aᵀ.indptr, Aᵀ.indices
_TREE = ("start", "nact", "parent", "seq_infoset", "lvl_inf", "lvl_par_ptr", "lvl_par_ids")


def packed(game: EFG) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ints, int_offsets, floats, float_offsets)`` of ``game`` (built once, cached)."""
    cached = game.__dict__.get("_packed")
    if cached is not None:
        return cached
    ints: list[np.ndarray] = []
    floats: list[np.ndarray] = []
    for tp in game.treeplexes:
        levels = tp.levels
        par = [np.asarray(lvl.parent_ids, dtype=np.int64) for lvl in levels]
        ptr = np.zeros(len(levels) + 1, dtype=np.int64)
        if par:
            ptr[1:] = np.cumsum([q.size for q in par])
        ints += [
            np.asarray(tp.start),
            np.asarray(tp.nact),
            np.asarray(tp.parent_seq),
            np.asarray(tp.seq_infoset),
            np.array([0, *(lvl.infosets.stop for lvl in levels)]),
            ptr,
            np.concatenate(par) if par else np.zeros(0),
        ]
        floats.append(np.asarray(tp._inv_nact))
    for m in (game._A, game._At):
        ints += [np.asarray(m.indptr), np.asarray(m.indices)]
        floats.append(np.asarray(m.data))
    out = (*_concat(ints, np.int64), *_concat(floats, np.float64))
    game.__dict__["_packed"] = out
    return out


def _concat(parts: list[np.ndarray], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    offs = np.zeros(len(parts) + 1, dtype=np.int64)
    offs[1:] = np.cumsum([p.size for p in parts])
    return np.concatenate([p.astype(dtype, copy=False) for p in parts]), offs


class Buffer:
    """One float64 buffer holding named per-player regions; ``view(name, p)`` is a view."""

    def __init__(self, game: EFG, names: tuple[str, ...]) -> None:
        sizes = []
        for tp in game.treeplexes:
            sizes += [tp.n_infosets if n == "V" else tp.size for n in names]
        self.names = names
        self.offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        self.offsets[1:] = np.cumsum(sizes)
        self.data = np.zeros(int(self.offsets[-1]))
        self.views: dict[str, list[np.ndarray]] = {}

    def view(self, name: str, p: int) -> np.ndarray:
        k = p * len(self.names) + self.names.index(name)
        return self.data[self.offsets[k] : self.offsets[k + 1]]

    def bind(self, values: list[np.ndarray], name: str) -> list[np.ndarray]:
        """Copy ``values`` (one array per player) into the region ``name``; return the views."""
        out = []
        for p, v in enumerate(values):
            view = self.view(name, p)
            view[:] = v
            out.append(view)
        self.views[name] = out
        return out

    def binds(self, owner: object, names: tuple[str, ...]) -> bool:
        """Whether ``owner._<name>`` is still the list of this buffer's views for every name (a
        state list replaced by assignment, e.g. ``load_state_dict``, needs a new binding)."""
        views = self.views
        return all(getattr(owner, "_" + n) is views.get(n) for n in names)


# Region order of the solvers' buffers (the kernels index them by position).
AVERAGING_REGIONS = ("beh", "regret", "avg", "x", "v", "tmp", "tmp2", "acc", "g", "V")
RTCFR_REGIONS = (
    *("sigma", "regret", "beh", "ref_beh", "ref", "one_minus_alpha"),
    *("out", "x", "v", "tmp", "tmp2", "acc", "g", "V"),
)
BR_REGIONS = ("x", "v", "tmp", "acc", "g", "V")

# rule of an averaging solver's update (cfr.py): CFR, CFR+, PCFR+, DCFR
CFR, CFR_PLUS, PCFR_PLUS, DCFR = 0, 1, 2, 3


# ---- compiled pieces -------------------------------------------------------------------------
# (``pragma: no cover``: coverage does not see inside compiled code.)


@njit(cache=True)
def _seg(a, offs, k):  # pragma: no cover
    return a[offs[k] : offs[k + 1]]


@njit(cache=True)
def _pairwise(a, lo, n):  # pragma: no cover
    """numpy's ``pairwise_sum`` (8 accumulators in blocks of ≤ 128, halving above)."""
    if n < 8:
        res = -0.0
        for i in range(n):
            res += a[lo + i]
        return res
    if n <= 128:
        r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
        r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
        i = 8
        m = n - n % 8
        while i < m:
            r0 += a[lo + i]
            r1 += a[lo + i + 1]
            r2 += a[lo + i + 2]
            r3 += a[lo + i + 3]
            r4 += a[lo + i + 4]
            r5 += a[lo + i + 5]
            r6 += a[lo + i + 6]
            r7 += a[lo + i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[lo + i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


@njit(cache=True)
def _segsum(a, lo, n):  # pragma: no cover
    """``np.add.reduceat`` over one segment: its first element plus numpy's pairwise sum of the rest."""
    if n == 1:
        return a[lo]
    return a[lo] + _pairwise(a, lo + 1, n - 1)


@njit(cache=True)
def _tree(ints, offs, p):  # pragma: no cover
    k = 7 * p
    return (
        _seg(ints, offs, k),
        _seg(ints, offs, k + 1),
        _seg(ints, offs, k + 2),
        _seg(ints, offs, k + 3),
        _seg(ints, offs, k + 4),
        _seg(ints, offs, k + 5),
        _seg(ints, offs, k + 6),
    )


@njit(cache=True)
def _seq_form(tree, beh, x):  # pragma: no cover
    """x[(I,a)] = x[p(I)]·σ(I,a), top-down (infosets are sorted by own depth)."""
    start, nact, parent = tree[0], tree[1], tree[2]
    x[0] = 1.0
    for i in range(start.size):
        px = x[parent[i]]
        s = start[i]
        for a in range(nact[i]):
            x[s + a] = px * beh[s + a]


@njit(cache=True)
def _gradient(ints, offs, flts, foffs, p, x_other, out):  # pragma: no cover
    """out = A x₁ (p = 0) or −Aᵀ x₀ (p = 1); row sums in index order as scipy's ``csr_matvec``."""
    indptr = _seg(ints, offs, 14 + 2 * p)
    indices = _seg(ints, offs, 15 + 2 * p)
    data = _seg(flts, foffs, 2 + p)
    for i in range(indptr.size - 1):
        acc = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            acc += data[k] * x_other[indices[k]]
        out[i] = acc if p == 0 else -acc


@njit(cache=True)
def _bottom_up(tree, v, V, beh, acc, tmp, use_max):  # pragma: no cover
    """v (g on entry) ← counterfactual values, V ← infoset values: per level (deepest first)
    V(I) = Σ_a σ(I,a)·v(I,a) (``use_max``: max_a v(I,a)), then v[p(I)] += Σ_{I: p(I)} V(I), the
    reference's ``reduceat`` and ``bincount``. ``acc`` must be all zero (and is left so)."""
    start, nact, parent = tree[0], tree[1], tree[2]
    lvl_inf, lvl_par_ptr, lvl_par_ids = tree[4], tree[5], tree[6]
    for lv in range(lvl_inf.size - 2, -1, -1):
        for i in range(lvl_inf[lv], lvl_inf[lv + 1]):
            s = start[i]
            n = nact[i]
            if use_max:
                t = v[s]
                for a in range(1, n):
                    if v[s + a] > t:
                        t = v[s + a]
            else:
                for a in range(n):
                    tmp[s + a] = v[s + a] * beh[s + a]
                t = _segsum(tmp, s, n)
            V[i] = t
            acc[parent[i]] += t
        for k in range(lvl_par_ptr[lv], lvl_par_ptr[lv + 1]):
            q = lvl_par_ids[k]
            v[q] += acc[q]
            acc[q] = 0.0


@njit(cache=True)
def _normalize(tree, inv_nact, w, out, tmp):  # pragma: no cover
    """Per-infoset normalisation of w⁺, uniform where Σ w⁺ = 0 (regret matching)."""
    start, nact = tree[0], tree[1]
    out[0] = 1.0
    for i in range(start.size):
        s = start[i]
        n = nact[i]
        for a in range(n):
            tmp[s + a] = w[s + a] if w[s + a] > 0.0 else 0.0
        tot = _segsum(tmp, s, n)
        if tot > 0.0:
            for a in range(n):
                out[s + a] = tmp[s + a] / tot
        else:
            for a in range(n):
                out[s + a] = inv_nact[s + a]


@njit(cache=True)
def _instant_regrets(tree, v, V, r):  # pragma: no cover
    seq_infoset = tree[3]
    r[0] = 0.0
    for s in range(1, r.size):
        r[s] = v[s] - V[seq_infoset[s]]


# ---- whole iterations --------------------------------------------------------------------------


@njit(cache=True)
def averaging_steps(
    ints, offs, flts, foffs, buf, boffs, rule, t0, n_iter, scales, pos, neg
):  # pragma: no cover
    """``n_iter`` alternating iterations t0, t0+1, ... of CFR / CFR+ / PCFR+ / DCFR (``cfr.py``):
    per player, counterfactual values with the current σ, instantaneous regrets r, the average
    accumulated with the pre-update x, the regret update and σ ← RM(·). DCFR's discounts of each
    iteration come precomputed (``scales``, ``pos``, ``neg``), as Python computes them."""
    nr = 10  # AVERAGING_REGIONS
    trees = (_tree(ints, offs, 0), _tree(ints, offs, 1))
    for it in range(n_iter):
        t = t0 + it
        for p in range(2):
            _seq_form(trees[p], _seg(buf, boffs, p * nr), _seg(buf, boffs, p * nr + 3))
        for p in range(2):
            k = p * nr
            beh, regret, avg = _seg(buf, boffs, k), _seg(buf, boffs, k + 1), _seg(buf, boffs, k + 2)
            x, v, tmp = _seg(buf, boffs, k + 3), _seg(buf, boffs, k + 4), _seg(buf, boffs, k + 5)
            r, acc, g, V = (
                _seg(buf, boffs, k + 6),
                _seg(buf, boffs, k + 7),
                _seg(buf, boffs, k + 8),
                _seg(buf, boffs, k + 9),
            )
            x_other = _seg(buf, boffs, (1 - p) * nr + 3)
            tree = trees[p]
            _gradient(ints, offs, flts, foffs, p, x_other, g)
            v[:] = g
            _bottom_up(tree, v, V, beh, acc, tmp, False)
            _instant_regrets(tree, v, V, r)
            n = beh.size
            if rule == 3:
                for s in range(n):
                    avg[s] *= scales[it]
                    avg[s] += x[s]
                if t > 1:
                    for s in range(n):
                        regret[s] *= pos[it] if regret[s] >= 0.0 else neg[it]
            elif rule == 0:
                for s in range(n):
                    avg[s] += x[s]
            else:
                ft = float(t)
                for s in range(n):
                    avg[s] += ft * x[s]
            for s in range(n):
                q = regret[s] + r[s]
                if (rule == 1 or rule == 2) and q < 0.0:
                    q = 0.0
                regret[s] = q
            inv_nact = _seg(flts, foffs, p)
            if rule == 2:
                for s in range(n):
                    r[s] = regret[s] + r[s]
                _normalize(tree, inv_nact, r, beh, tmp)
            else:
                _normalize(tree, inv_nact, regret, beh, tmp)
            if p == 0:
                _seq_form(tree, beh, x)


@njit(cache=True)
def rtcfr_steps(
    ints, offs, flts, foffs, buf, boffs, t0, n_iter, mu, interval, predictive, alternating, gamma
):  # pragma: no cover
    """``n_iter`` iterations t0, ... of RTCFR+ (``rtcfr.py``); returns the current γ. Per player:
    g̃ = g − μ(x̂ − r), counterfactual values with the unperturbed σ, R ← max(R + m̂, 0),
    σ ← RM(R) (or RM(R + m̂)), σ̂ ← normalize((1 − α)σ + γ); every ``interval`` iterations, first,
    r ← seqform(σ̂) and γ ← γ/2."""
    nr = 14  # RTCFR_REGIONS
    trees = (_tree(ints, offs, 0), _tree(ints, offs, 1))
    for it in range(n_iter):
        t = t0 + it
        if t % interval == 0:
            for p in range(2):
                k = p * nr
                beh = _seg(buf, boffs, k + 2)
                _seg(buf, boffs, k + 3)[:] = beh
                _seq_form(trees[p], beh, _seg(buf, boffs, k + 4))
            gamma *= 0.5
        for p in range(2):
            _seq_form(trees[p], _seg(buf, boffs, p * nr + 2), _seg(buf, boffs, p * nr + 7))
        for p in range(2):
            k = p * nr
            sigma, regret, beh = (
                _seg(buf, boffs, k),
                _seg(buf, boffs, k + 1),
                _seg(buf, boffs, k + 2),
            )
            ref, oma, out = (
                _seg(buf, boffs, k + 4),
                _seg(buf, boffs, k + 5),
                _seg(buf, boffs, k + 6),
            )
            x, v, tmp = _seg(buf, boffs, k + 7), _seg(buf, boffs, k + 8), _seg(buf, boffs, k + 9)
            r, acc, g, V = (
                _seg(buf, boffs, k + 10),
                _seg(buf, boffs, k + 11),
                _seg(buf, boffs, k + 12),
                _seg(buf, boffs, k + 13),
            )
            tree = trees[p]
            _gradient(ints, offs, flts, foffs, p, _seg(buf, boffs, (1 - p) * nr + 7), g)
            n = sigma.size
            if mu != 0.0:
                for s in range(n):
                    g[s] = g[s] - mu * (x[s] - ref[s])
            v[:] = g
            _bottom_up(tree, v, V, sigma, acc, tmp, False)
            _instant_regrets(tree, v, V, r)
            for s in range(n):
                q = regret[s] + r[s]
                regret[s] = q if q > 0.0 else 0.0
            inv_nact = _seg(flts, foffs, p)
            if predictive:
                for s in range(n):
                    r[s] = regret[s] + r[s]
                _normalize(tree, inv_nact, r, sigma, tmp)
            else:
                _normalize(tree, inv_nact, regret, sigma, tmp)
            for s in range(n):
                r[s] = oma[s] * sigma[s] + gamma
            _normalize(tree, inv_nact, r, beh if alternating else out, tmp)
            if alternating and p == 0:
                _seq_form(tree, beh, x)
        if not alternating:
            for p in range(2):
                _seg(buf, boffs, p * nr + 2)[:] = _seg(buf, boffs, p * nr + 6)
    return gamma


@njit(cache=True)
def br_values(ints, offs, flts, foffs, probs0, probs1, buf, boffs):  # pragma: no cover
    """(max_x ⟨A x₁, x⟩, max_y ⟨−Aᵀ x₀, y⟩) for the behavioural profile (probs0, probs1)."""
    nr = 6  # BR_REGIONS
    trees = (_tree(ints, offs, 0), _tree(ints, offs, 1))
    _seq_form(trees[0], probs0, _seg(buf, boffs, 0))
    _seq_form(trees[1], probs1, _seg(buf, boffs, nr))
    out = np.empty(2)
    for p in range(2):
        k = p * nr
        v, tmp, acc = _seg(buf, boffs, k + 1), _seg(buf, boffs, k + 2), _seg(buf, boffs, k + 3)
        g, V = _seg(buf, boffs, k + 4), _seg(buf, boffs, k + 5)
        _gradient(ints, offs, flts, foffs, p, _seg(buf, boffs, (1 - p) * nr), g)
        v[:] = g
        _bottom_up(trees[p], v, V, v, acc, tmp, True)
        out[p] = v[0]
    return out[0], out[1]


@njit(cache=True)
def seq_forms(ints, offs, probs0, probs1, x0, x1):  # pragma: no cover
    _seq_form(_tree(ints, offs, 0), probs0, x0)
    _seq_form(_tree(ints, offs, 1), probs1, x1)


# ---- Python entry points ---------------------------------------------------------------------


def best_response_values(game: EFG, probs: list[np.ndarray]) -> tuple[float, float]:
    """Both zero-sum best-response values against the behavioural profile ``probs``
    (``metrics._zero_sum_br`` on the compiled path; scratch cached on the game)."""
    scratch = game.__dict__.get("_br_buffer")
    if scratch is None:
        scratch = game.__dict__["_br_buffer"] = Buffer(game, BR_REGIONS)
    br0, br1 = br_values(*packed(game), probs[0], probs[1], scratch.data, scratch.offsets)
    return float(br0), float(br1)


def sequence_forms(game: EFG, probs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The realisation plans of a behavioural profile (fresh arrays)."""
    x0 = np.empty(game.treeplexes[0].size)
    x1 = np.empty(game.treeplexes[1].size)
    ints, offs, _, _ = packed(game)
    seq_forms(ints, offs, probs[0], probs[1], x0, x1)
    return x0, x1
