"""The sequence-form engine: a 2-player zero-sum perfect-recall game, built once into flat arrays.

This is the substrate of every solver in eff-games (CFR, CFR+, DCFR, PCFR+, MMD and RTCFR+ of
Meng et al., "Efficient Last-Iterate Convergence in Solving Extensive-Form Games", NeurIPS 2025).

**Build once.** :func:`build_efg` walks a game tree through the state protocol that pyspiel states
already satisfy (``is_terminal``, ``is_chance_node``, ``chance_outcomes``, ``current_player``,
``information_state_string``, ``legal_actions``, ``child``, ``returns``). It collects, per player,
every information set (key → id, parent sequence = the player's last own (I, a) on the path,
legal actions, own depth), and per terminal z the chance probability π_c(z), the last sequence of
each player and u_0(z). Perfect recall is enforced: one key must always come with the same parent
sequence and the same legal actions.

**Flat arrays** (:class:`Treeplex`, one per player). Infosets are sorted by own depth, so the
sequences of an infoset are contiguous and every depth level is one contiguous slice; sequence 0
is the empty sequence ∅. The sequence-form strategy x satisfies x[∅] = 1 and
x[(I, a)] = x[p(I)]·σ(I, a) (von Stengel 1996; Koller, Megiddo & von Stengel 1996).

**Payoff.** The matrix A of player 0 with chance folded in, A[s0(z), s1(z)] += π_c(z)·u_0(z), is kept
as a coalesced sparse matrix; the gradients are g_0(x_1) = A x_1 and g_1(x_0) = −Aᵀ x_0, so the
expected value is x_0ᵀ A x_1.

**Kernels** (one numpy call per depth level, no Python recursion per iteration):
``seq_form`` (top-down), ``cf_values`` (bottom-up counterfactual values, Zinkevich et al. 2007),
``regret_matching`` (Hart & Mas-Colell 2000), ``best_response_value`` (bottom-up with max) and
:meth:`EFG.value_lp` (the sequence-form LP solved with scipy's HiGHS).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from eff_shared.errors import check_int

__all__ = ["EFG", "GameState", "Level", "Treeplex", "build_efg"]


class SequenceFormPolicy(Protocol):
    """What :meth:`EFG.expected_value` needs of a policy (:class:`~eff_games.policy.TabularPolicy`
    is one; a Protocol here keeps efg.py free of an import of policy.py, which imports efg.py)."""

    game: Any

    def sequence_form(self) -> tuple[np.ndarray, np.ndarray]: ...


class GameState(Protocol):
    """What :func:`build_efg` needs from a game state (pyspiel states satisfy it as they are)."""

    def is_terminal(self) -> bool: ...
    def is_chance_node(self) -> bool: ...
    def chance_outcomes(self) -> Sequence[tuple[int, float]]: ...
    def current_player(self) -> int: ...
    def information_state_string(self, player: int) -> str: ...
    def legal_actions(self) -> Sequence[int]: ...
    def child(self, action: int) -> GameState: ...
    def returns(self) -> Sequence[float]: ...


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class Level:
    """One depth level of a treeplex: a contiguous slice of infosets and of their sequences.

    ``starts`` are the offsets of each infoset's first sequence inside ``seqs`` (for
    ``np.*.reduceat``), ``seq_parent`` the parent sequence of every sequence of the level (for the
    top-down pass), ``parent_ids``/``parent_index`` the distinct parent sequences of the level's
    infosets and, per infoset, its index into them (for the bottom-up pass), ``seq_local`` the
    level-local infoset index of every sequence.
    """

    infosets: slice
    seqs: slice
    starts: np.ndarray
    seq_parent: np.ndarray
    parent_ids: np.ndarray
    parent_index: np.ndarray
    seq_local: np.ndarray


class Treeplex:
    """One player's sequence-form decision space as read-only numpy arrays.

    Sequences are numbered 0 (∅), 1, ..., ``n_sequences``; vectors over sequences have length
    ``size = n_sequences + 1``. Infoset ``I`` owns sequences ``start[I] .. start[I] + nact[I] - 1``.
    """

    def __init__(
        self,
        player: int,
        names: Sequence[str],
        parent_seq: np.ndarray,
        actions: Sequence[Sequence[int]],
        depth: np.ndarray,
    ) -> None:
        nact = np.array([len(a) for a in actions], dtype=np.int64)
        flat_actions = (
            np.concatenate([np.asarray(a, dtype=np.int64) for a in actions])
            if int(nact.sum())
            else np.zeros(0, dtype=np.int64)
        )
        self._setup(player, names, parent_seq, nact, flat_actions, depth)

    @classmethod
    def from_arrays(
        cls,
        player: int,
        names: Sequence[str],
        parent_seq: np.ndarray,
        nact: np.ndarray,
        seq_action: np.ndarray,
        depth: np.ndarray,
    ) -> Treeplex:
        """A treeplex from flat arrays: ``nact[I]`` actions per infoset and their action ids
        ``seq_action`` concatenated in infoset order (what a vectorised game builder produces)."""
        nact = np.asarray(nact, dtype=np.int64)
        seq_action = np.asarray(seq_action, dtype=np.int64)
        if nact.shape != (len(names),) or seq_action.shape != (int(nact.sum()),):
            raise ValueError("nact must have one entry per infoset and seq_action sum(nact)")
        tp = cls.__new__(cls)
        tp._setup(player, names, parent_seq, nact, seq_action, depth)
        return tp

    def _setup(
        self,
        player: int,
        names: Sequence[str],
        parent_seq: np.ndarray,
        nact: np.ndarray,
        flat_actions: np.ndarray,
        depth: np.ndarray,
    ) -> None:
        self.player = player
        self.infoset_names: tuple[str, ...] = tuple(names)
        self.n_infosets = len(self.infoset_names)
        start = np.ones(self.n_infosets, dtype=np.int64)
        if self.n_infosets:
            start[1:] += np.cumsum(nact)[:-1]
        self.n_sequences = int(nact.sum())
        self.size = self.n_sequences + 1
        self.nact = _frozen(nact)
        self.start = _frozen(start)
        self.parent_seq = _frozen(np.asarray(parent_seq, dtype=np.int64))
        self.depth = _frozen(np.asarray(depth, dtype=np.int64))
        self.index = {name: i for i, name in enumerate(self.infoset_names)}
        seq_infoset = np.full(self.size, -1, dtype=np.int64)
        seq_infoset[1:] = np.repeat(np.arange(self.n_infosets), nact)
        self.seq_infoset = _frozen(seq_infoset)
        seq_parent = np.zeros(self.size, dtype=np.int64)
        seq_parent[1:] = self.parent_seq[seq_infoset[1:]]
        self.seq_parent = _frozen(seq_parent)
        seq_action = np.full(self.size, -1, dtype=np.int64)
        seq_action[1:] = flat_actions
        self.seq_action = _frozen(seq_action)
        self.max_actions = int(nact.max()) if self.n_infosets else 0
        # Offsets of each infoset inside the sequence vector without ∅ (for whole-vector reduceat).
        self._starts_all = _frozen(start - 1)
        self._inv_nact = _frozen(np.concatenate([[1.0], 1.0 / nact[seq_infoset[1:]]]))
        self.levels: tuple[Level, ...] = tuple(self._make_levels())

    def _make_levels(self) -> list[Level]:
        levels = []
        if not self.n_infosets:
            return levels
        if np.any(np.diff(self.depth) < 0):
            raise ValueError("infosets must be sorted by own depth")
        bounds = np.flatnonzero(np.diff(self.depth)) + 1
        edges = [0, *bounds.tolist(), self.n_infosets]
        for lo, hi in itertools.pairwise(edges):
            s_lo = int(self.start[lo])
            s_hi = int(self.start[hi - 1] + self.nact[hi - 1])
            parents = self.parent_seq[lo:hi]
            ids, index = np.unique(parents, return_inverse=True)
            levels.append(
                Level(
                    infosets=slice(lo, hi),
                    seqs=slice(s_lo, s_hi),
                    starts=_frozen(self.start[lo:hi] - s_lo),
                    seq_parent=_frozen(self.seq_parent[s_lo:s_hi]),
                    parent_ids=_frozen(ids),
                    parent_index=_frozen(index.ravel()),
                    seq_local=_frozen(np.repeat(np.arange(hi - lo), self.nact[lo:hi])),
                )
            )
        return levels

    # ---- kernels ---------------------------------------------------------------------------

    def uniform(self) -> np.ndarray:
        """The uniform behavioural strategy (entry 0, the empty sequence, is 1)."""
        return self._inv_nact.copy()

    def seq_form(self, beh: np.ndarray) -> np.ndarray:
        """Behavioural → sequence form, top-down: ``x[(I,a)] = x[p(I)]·σ(I,a)``, ``x[∅] = 1``."""
        x = np.empty(self.size)
        x[0] = 1.0
        for lvl in self.levels:
            x[lvl.seqs] = x[lvl.seq_parent] * beh[lvl.seqs]
        return x

    def cf_values(self, g: np.ndarray, beh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Counterfactual values bottom-up for the gradient ``g`` and behavioural ``beh``.

        Returns ``(v, V)``: ``v[(I,a)] = g[(I,a)] + Σ_{J: p(J)=(I,a)} V(J)`` per sequence (``v[0]`` is
        the player's expected value) and ``V(I) = Σ_a beh(I,a)·v(I,a)`` per infoset.
        """
        v = np.array(g, dtype=float, copy=True)
        V = np.empty(self.n_infosets)
        for lvl in reversed(self.levels):
            Vl = np.add.reduceat(v[lvl.seqs] * beh[lvl.seqs], lvl.starts)
            V[lvl.infosets] = Vl
            v[lvl.parent_ids] += np.bincount(lvl.parent_index, Vl, len(lvl.parent_ids))
        return v, V

    def instant_regrets(self, v: np.ndarray, V: np.ndarray) -> np.ndarray:
        """``r[(I,a)] = v(I,a) − V(I)`` (entry 0 is 0)."""
        r = np.empty(self.size)
        r[0] = 0.0
        np.subtract(v[1:], V[self.seq_infoset[1:]], out=r[1:])
        return r

    def normalize(self, w: np.ndarray) -> np.ndarray:
        """Per-infoset normalisation of the positive part of ``w``; uniform where it sums to 0.

        This is regret matching (on cumulative regrets) and also turns an accumulated
        sequence-form average into a behavioural strategy.
        """
        pos = np.maximum(w[1:], 0.0)
        total = np.add.reduceat(pos, self._starts_all)[self.seq_infoset[1:]]
        beh = self._inv_nact.copy()
        np.divide(pos, total, out=beh[1:], where=total > 0.0)
        return beh

    regret_matching = normalize

    def entropy_prox(self, G: np.ndarray) -> tuple[np.ndarray, float]:
        """argmax_x ⟨G, x⟩ − ψ(x) over the treeplex for the dilated entropy ψ (Hoda et al. 2010).

        Bottom-up: σ(I) = softmax(G[I]), G[p(I)] += logsumexp(G[I]). Returns the behavioural
        maximiser and the optimal value.
        """
        G = np.array(G, dtype=float, copy=True)
        beh = np.empty(self.size)
        beh[0] = 1.0
        for lvl in reversed(self.levels):
            Gl = G[lvl.seqs]
            m = np.maximum.reduceat(Gl, lvl.starts)
            e = np.exp(Gl - m[lvl.seq_local])
            Z = np.add.reduceat(e, lvl.starts)
            beh[lvl.seqs] = e / Z[lvl.seq_local]
            G[lvl.parent_ids] += np.bincount(lvl.parent_index, m + np.log(Z), len(lvl.parent_ids))
        return beh, float(G[0])

    def best_response_value(self, g: np.ndarray) -> float:
        """max over this player's strategies x of ⟨g, x⟩, bottom-up with ``maximum.reduceat``."""
        v = np.array(g, dtype=float, copy=True)
        for lvl in reversed(self.levels):
            M = np.maximum.reduceat(v[lvl.seqs], lvl.starts)
            v[lvl.parent_ids] += np.bincount(lvl.parent_index, M, len(lvl.parent_ids))
        return float(v[0])

    def infoset_sums(self, beh: np.ndarray) -> np.ndarray:
        """Σ_a beh(I, a) per infoset."""
        return np.add.reduceat(beh[1:], self._starts_all) if self.n_infosets else np.zeros(0)

    def constraint_matrix(self) -> sp.csr_array:
        """The sequence-form constraints E x = e: x[∅] = 1 and Σ_a x[(I,a)] − x[p(I)] = 0."""
        rows = [np.zeros(1, dtype=np.int64)]
        cols = [np.zeros(1, dtype=np.int64)]
        vals = [np.ones(1)]
        rows.append(1 + self.seq_infoset[1:])
        cols.append(np.arange(1, self.size))
        vals.append(np.ones(self.n_sequences))
        rows.append(1 + np.arange(self.n_infosets))
        cols.append(self.parent_seq)
        vals.append(-np.ones(self.n_infosets))
        return sp.csr_array(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(self.n_infosets + 1, self.size),
        )

    def __repr__(self) -> str:
        return (
            f"Treeplex(player={self.player}, n_infosets={self.n_infosets}, "
            f"n_sequences={self.n_sequences}, levels={len(self.levels)})"
        )


class EFG:
    """A 2-player zero-sum (or constant-sum) perfect-recall extensive-form game in sequence form.

    Built by :func:`build_efg`; read-only. ``payoff`` is the coalesced COO triplet
    ``(rows, cols, values)`` of player 0's payoff matrix A with chance folded in.
    """

    def __init__(
        self,
        *,
        name: str,
        treeplexes: tuple[Treeplex, Treeplex],
        payoff: tuple[np.ndarray, np.ndarray, np.ndarray],
        counts: dict[str, int],
        utility_sum: float,
        source: Any = None,
    ) -> None:
        self.name = name
        self.treeplexes = treeplexes
        t0, t1 = treeplexes
        rows, cols, vals = payoff
        A = sp.csr_array((vals, (rows, cols)), shape=(t0.size, t1.size))
        A.sum_duplicates()
        self._A = A
        self._At = A.T.tocsr()
        self._payoff: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.num_decision_nodes = counts["decision_nodes"]
        self.num_chance_nodes = counts["chance_nodes"]
        self.num_terminals = counts["terminals"]
        self.num_histories = self.num_decision_nodes + self.num_chance_nodes + self.num_terminals
        self.utility_sum = utility_sum
        #: the pyspiel game this was built from (``from_openspiel``), else ``None``
        self.source = source
        self._value: float | None = None

    @property
    def payoff(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The coalesced COO triplet (rows = sequences of player 0, cols = of player 1, values)
        of A (made on first use: a large game keeps only the CSR forms)."""
        if self._payoff is None:
            coo = self._A.tocoo()
            self._payoff = (
                _frozen(coo.row.astype(np.int64)),
                _frozen(coo.col.astype(np.int64)),
                _frozen(coo.data.astype(float)),
            )
        return self._payoff

    def nbytes(self) -> int:
        """Bytes held by the game's arrays: both treeplexes and the CSR forms of A and Aᵀ
        (infoset names and the name index not counted)."""
        total = sum(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes for m in (self._A, self._At))
        for tp in self.treeplexes:
            total += sum(a.nbytes for a in vars(tp).values() if isinstance(a, np.ndarray))
            for lvl in tp.levels:
                total += sum(a.nbytes for a in vars(lvl).values() if isinstance(a, np.ndarray))
        return int(total)

    # ---- sizes and gradients ------------------------------------------------------------------

    def sizes(self) -> dict[str, Any]:
        """The facts OpenSpiel reports about a game tree, plus the payoff's non-zeros."""
        return {
            "infosets": [t.n_infosets for t in self.treeplexes],
            "sequences": [t.n_sequences for t in self.treeplexes],
            "decision_nodes": self.num_decision_nodes,
            "chance_nodes": self.num_chance_nodes,
            "terminals": self.num_terminals,
            "histories": self.num_histories,
            "payoff_nonzeros": int(self._A.nnz),
            "levels": [len(t.levels) for t in self.treeplexes],
        }

    def gradient(self, player: int, x_other: np.ndarray) -> np.ndarray:
        """Counterfactual payoff per sequence of ``player``: ``A x_1`` for 0, ``−Aᵀ x_0`` for 1."""
        if player == 0:
            return self._A @ x_other
        return -(self._At @ x_other)

    def expected_value(self, policy: SequenceFormPolicy) -> float:
        """Player 0's expected payoff under a :class:`~eff_games.policy.TabularPolicy` (chips)."""
        if getattr(policy, "game", None) is not self:
            raise ValueError(f"policy must be a TabularPolicy of this game ({self.name!r})")
        x0, x1 = policy.sequence_form()
        return float(x0 @ (self._A @ x1)) + 0.5 * self.utility_sum

    # ---- the game value -------------------------------------------------------------------------

    def value_lp(self) -> float:
        """Player 0's equilibrium value from the sequence-form LP (scipy ``linprog``, HiGHS).

        max_{x, z} z[∅]  s.t.  E x = e, x ≥ 0, Fᵀ z ≤ Aᵀ x  (Koller, Megiddo & von Stengel 1996).
        """
        if self._value is None:
            t0, t1 = self.treeplexes
            E = t0.constraint_matrix()
            F = t1.constraint_matrix()
            nx, nz = t0.size, t1.n_infosets + 1
            c = np.zeros(nx + nz)
            c[nx] = -1.0
            A_eq = sp.hstack([E, sp.csr_array((E.shape[0], nz))]).tocsr()
            b_eq = np.zeros(E.shape[0])
            b_eq[0] = 1.0
            A_ub = sp.hstack([-self._At, F.T]).tocsr()
            b_ub = np.zeros(t1.size)
            bounds = [(0, None)] * nx + [(None, None)] * nz
            res = linprog(
                c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs"
            )
            if res.status != 0:
                raise RuntimeError(f"the sequence-form LP failed: {res.message}")
            self._value = float(-res.fun) + 0.5 * self.utility_sum
        return self._value

    def __repr__(self) -> str:
        t0, t1 = self.treeplexes
        return (
            f"EFG({self.name!r}, infosets={t0.n_infosets}/{t1.n_infosets}, "
            f"sequences={t0.n_sequences}/{t1.n_sequences}, histories={self.num_histories})"
        )


# ---- the builder ------------------------------------------------------------------------------


class _PlayerBuild:
    """Infosets of one player in discovery order (raw ids) while the tree is walked."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        self.parent: list[int] = []  # raw parent sequence
        self.actions: list[tuple[int, ...]] = []
        self.first_seq: list[int] = []  # raw id of the infoset's first sequence
        self.depth: list[int] = []
        self.seq_depth: list[int] = [0]  # raw sequence → own depth (∅ has depth 0)

    def infoset(self, key: str, parent: int, actions: tuple[int, ...]) -> int:
        i = self.index.get(key)
        if i is None:
            i = len(self.names)
            self.index[key] = i
            self.names.append(key)
            self.parent.append(parent)
            self.actions.append(actions)
            self.first_seq.append(len(self.seq_depth))
            d = self.seq_depth[parent]
            self.depth.append(d)
            self.seq_depth.extend([d + 1] * len(actions))
        elif self.parent[i] != parent:
            raise ValueError(
                f"imperfect recall: infoset {key!r} is reached after different own sequences "
                f"(parents {self.parent[i]} and {parent}); the engine needs perfect recall"
            )
        elif self.actions[i] != actions:
            raise ValueError(
                f"imperfect recall: infoset {key!r} has different legal actions in different "
                f"histories ({list(self.actions[i])} and {list(actions)})"
            )
        return i

    def treeplex(self, player: int) -> tuple[Treeplex, np.ndarray, np.ndarray]:
        """The sorted treeplex, the raw → sorted sequence map and the sorting order of infosets."""
        order = np.argsort(np.asarray(self.depth, dtype=np.int64), kind="stable")
        seq_map = np.zeros(len(self.seq_depth), dtype=np.int64)
        nxt = 1
        for i in order:
            k = len(self.actions[i])
            f = self.first_seq[i]
            seq_map[f : f + k] = np.arange(nxt, nxt + k)
            nxt += k
        parents = seq_map[np.asarray(self.parent, dtype=np.int64)[order]] if len(order) else []
        tp = Treeplex(
            player,
            [self.names[i] for i in order],
            np.asarray(parents, dtype=np.int64),
            [self.actions[i] for i in order],
            np.asarray(self.depth, dtype=np.int64)[order],
        )
        return tp, seq_map, order


def build_efg(
    root_state: GameState, *, max_nodes: int = 2_000_000, name: str = "", source: Any = None
) -> EFG:
    """Walk the tree under ``root_state`` once and return its sequence-form :class:`EFG`.

    Raises ``ValueError`` for a game that is not 2-player, not zero/constant-sum, has simultaneous
    moves, has imperfect recall (naming the infoset key) or more than ``max_nodes`` histories.
    """
    max_nodes = check_int("max_nodes", max_nodes, minimum=1)
    players = (_PlayerBuild(), _PlayerBuild())
    term_s0: list[int] = []
    term_s1: list[int] = []
    term_val: list[float] = []
    counts = {"decision_nodes": 0, "chance_nodes": 0, "terminals": 0}
    utility_sum: float | None = None
    nodes = 0
    stack: list[tuple[Any, float, int, int]] = [(root_state, 1.0, 0, 0)]
    while stack:
        state, pc, s0, s1 = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise ValueError(
                f"the game tree has more than max_nodes={max_nodes} histories; raise max_nodes "
                "or pick a smaller game"
            )
        if state.is_terminal():
            r = [float(u) for u in state.returns()]
            if len(r) != 2:
                raise ValueError(f"the game must have 2 players, got returns for {len(r)}")
            total = r[0] + r[1]
            if utility_sum is None:
                utility_sum = total
            elif abs(total - utility_sum) > 1e-9 * max(1.0, abs(r[0]), abs(r[1])):
                raise ValueError(
                    "the game is not zero-sum or constant-sum: returns sum to "
                    f"{utility_sum} and {total} at different terminals"
                )
            counts["terminals"] += 1
            term_s0.append(s0)
            term_s1.append(s1)
            term_val.append(pc * (r[0] - 0.5 * total))
            continue
        if state.is_chance_node():
            counts["chance_nodes"] += 1
            outcomes = list(state.chance_outcomes())
            for action, prob in reversed(outcomes):
                stack.append((state.child(action), pc * prob, s0, s1))
            continue
        p = state.current_player()
        if p not in (0, 1):
            if p == -2:
                raise ValueError(
                    "simultaneous-move node: the engine needs a turn-based game; use "
                    "from_openspiel(..., turn_based=True)"
                )
            raise ValueError(f"the game must have 2 players (ids 0 and 1), got player {p}")
        counts["decision_nodes"] += 1
        actions = tuple(int(a) for a in state.legal_actions())
        if not actions:
            raise ValueError("a decision node has no legal actions")
        key = state.information_state_string(p)
        own = s0 if p == 0 else s1
        build = players[p]
        i = build.infoset(key, own, actions)
        first = build.first_seq[i]
        for k in range(len(actions) - 1, -1, -1):
            child = state.child(actions[k])
            if p == 0:
                stack.append((child, pc, first + k, s1))
            else:
                stack.append((child, pc, s0, first + k))
    if utility_sum is None:
        raise ValueError("the game has no terminal history")
    (t0, map0, _), (t1, map1, _) = (players[0].treeplex(0), players[1].treeplex(1))
    payoff = (
        map0[np.asarray(term_s0, dtype=np.int64)],
        map1[np.asarray(term_s1, dtype=np.int64)],
        np.asarray(term_val, dtype=float),
    )
    if not math.isfinite(float(np.abs(payoff[2]).sum())):
        raise ValueError("the game has non-finite returns")
    return EFG(
        name=name,
        treeplexes=(t0, t1),
        payoff=payoff,
        counts=counts,
        utility_sum=utility_sum,
        source=source,
    )
