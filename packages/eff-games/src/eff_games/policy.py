"""Behavioural strategy profiles over an :class:`~eff_games.efg.EFG` and their export to OpenSpiel.

A :class:`TabularPolicy` holds, per player, one probability per sequence (I, a) in the engine's
sequence numbering (entry 0, the empty sequence, is 1). Infosets are named by their
information-state strings, which are OpenSpiel's for both our pure-Python games and
``from_openspiel`` games, so :meth:`TabularPolicy.to_openspiel` is a lookup by name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from eff_games._openspiel import import_pyspiel

if TYPE_CHECKING:
    from eff_games.efg import EFG

__all__ = ["TabularPolicy", "uniform_policy"]

_SUM_TOL = 1e-9


def _check_game(game: Any) -> None:
    from eff_games.efg import EFG

    if not isinstance(game, EFG):
        raise TypeError(f"game must be an eff_games EFG, got {type(game).__name__}")


class TabularPolicy:
    """A behavioural strategy profile: ``probs[p][s]`` = σ_p(I(s), a(s)) for every sequence s.

    Each ``probs[p]`` has length ``game.treeplexes[p].size`` (sequence 0 is ∅ and holds 1). Raises
    ``ValueError`` for a wrong shape, a negative or non-finite entry, or an infoset whose
    probabilities do not sum to 1 (tolerance 1e-9).
    """

    def __init__(self, game: EFG, probs: Sequence[np.ndarray], *, copy: bool = True) -> None:
        _check_game(game)
        if len(probs) != 2:
            raise ValueError(f"probs must hold one array per player (2), got {len(probs)}")
        checked = []
        for p, (tp, b) in enumerate(zip(game.treeplexes, probs, strict=True)):
            arr = np.array(b, dtype=float, copy=copy)
            if arr.shape != (tp.size,):
                raise ValueError(
                    f"probs[{p}] must have shape ({tp.size},) (n_sequences + 1, entry 0 = ∅), "
                    f"got {arr.shape}"
                )
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ValueError(f"probs[{p}] must be finite and non-negative")
            sums = tp.infoset_sums(arr)
            bad = np.flatnonzero(np.abs(sums - 1.0) > _SUM_TOL)
            if bad.size:
                i = int(bad[0])
                raise ValueError(
                    f"probs[{p}] must sum to 1 over the actions of every infoset (tolerance "
                    f"{_SUM_TOL}); infoset {tp.infoset_names[i]!r} sums to {sums[i]!r}"
                )
            arr[0] = 1.0
            arr.flags.writeable = False
            checked.append(arr)
        self.game = game
        self.probs: list[np.ndarray] = checked

    def sequence_form(self) -> tuple[np.ndarray, np.ndarray]:
        """The realisation plans (x_0, x_1)."""
        return (
            self.game.treeplexes[0].seq_form(self.probs[0]),
            self.game.treeplexes[1].seq_form(self.probs[1]),
        )

    def action_probabilities(self, player: int, infoset: str) -> dict[int, float]:
        """``{action: probability}`` at the infoset named ``infoset`` of ``player``."""
        if player not in (0, 1):
            raise ValueError(f"player must be 0 or 1, got {player!r}")
        tp = self.game.treeplexes[player]
        if infoset not in tp.index:
            raise ValueError(f"player {player} has no infoset {infoset!r}")
        i = tp.index[infoset]
        lo, hi = int(tp.start[i]), int(tp.start[i] + tp.nact[i])
        return {
            int(a): float(q)
            for a, q in zip(tp.seq_action[lo:hi], self.probs[player][lo:hi], strict=True)
        }

    def to_dict(self) -> dict[str, list[tuple[int, float]]]:
        """``{information state string: [(action, probability), ...]}`` for both players.

        The format of OpenSpiel's ``TabularPolicy.to_dict()``.
        """
        out: dict[str, list[tuple[int, float]]] = {}
        for p, tp in enumerate(self.game.treeplexes):
            for name in tp.infoset_names:
                if name in out:
                    raise ValueError(
                        f"infoset key {name!r} is used by both players; use "
                        "action_probabilities(player, key) instead"
                    )
                out[name] = list(self.action_probabilities(p, name).items())
        return out

    @classmethod
    def from_dict(cls, game: EFG, table: dict[str, Any]) -> TabularPolicy:
        """The inverse of :meth:`to_dict`: ``{infoset: [(action, probability), ...]}`` (the
        format of OpenSpiel's ``TabularPolicy.to_dict()``), every infoset of ``game`` present."""
        _check_game(game)
        if not isinstance(table, dict):
            raise TypeError(f"table must be a dict, got {type(table).__name__}")
        probs = []
        for p, tp in enumerate(game.treeplexes):
            arr = np.zeros(tp.size)
            arr[0] = 1.0
            for i, name in enumerate(tp.infoset_names):
                if name not in table:
                    raise ValueError(f"table has no entry for infoset {name!r} of player {p}")
                lo, hi = int(tp.start[i]), int(tp.start[i] + tp.nact[i])
                slot = {int(a): lo + j for j, a in enumerate(tp.seq_action[lo:hi])}
                for a, q in table[name]:
                    if int(a) not in slot:
                        raise ValueError(f"infoset {name!r}: action {a} is not legal there")
                    arr[slot[int(a)]] = float(q)
            probs.append(arr)
        names = {n for tp in game.treeplexes for n in tp.infoset_names}
        extra = sorted(set(table) - names)
        if extra:
            raise ValueError(f"table has infosets the game does not: {extra[:3]}")
        return cls(game, probs, copy=False)

    def save(self, path: str | Path) -> Path:
        """Write the profile as JSON (``{"game": name, "policy": to_dict()}``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"game": self.game.name, "policy": self.to_dict()}))
        return path

    @classmethod
    def load(cls, path: str | Path, game: EFG) -> TabularPolicy:
        """A profile written by :meth:`save`, on ``game`` (its name must match)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"policy file {path} does not exist")
        try:
            data = json.loads(path.read_text())
            name, table = data["game"], data["policy"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a saved TabularPolicy ({exc})") from exc
        _check_game(game)
        if name != game.name:
            raise ValueError(f"{path} holds a policy of game {name!r}, not {game.name!r}")
        return cls.from_dict(game, table)

    def to_openspiel(self, os_game: Any = None) -> Any:
        """This profile as OpenSpiel's ``open_spiel.python.policy.TabularPolicy``.

        ``os_game`` defaults to the pyspiel game the EFG was built from, else
        ``pyspiel.load_game(game.name)``. Raises ``ValueError`` when the infosets do not match.
        Needs the extra ``eff-games[openspiel]``.
        """
        pyspiel = import_pyspiel()
        from open_spiel.python import policy as os_policy

        if os_game is None:
            os_game = (
                self.game.source
                if self.game.source is not None
                else pyspiel.load_game(self.game.name)
            )
        table = os_policy.TabularPolicy(os_game)
        n_ours = sum(tp.n_infosets for tp in self.game.treeplexes)
        if len(table.state_lookup) != n_ours:
            raise ValueError(
                f"os_game {os_game} has {len(table.state_lookup)} infosets, this policy's game "
                f"{self.game.name!r} has {n_ours}"
            )
        for p, tp in enumerate(self.game.treeplexes):
            for name in tp.infoset_names:
                row = table.state_lookup.get(name)
                if row is None:
                    raise ValueError(f"infoset {name!r} of player {p} is not in os_game {os_game}")
                table.action_probability_array[row, :] = 0.0
                for a, q in self.action_probabilities(p, name).items():
                    table.action_probability_array[row, a] = q
        return table

    def __repr__(self) -> str:
        return f"TabularPolicy(game={self.game.name!r})"


def uniform_policy(game: EFG) -> TabularPolicy:
    """Every player picks uniformly among the legal actions at every infoset."""
    _check_game(game)
    return TabularPolicy(game, [tp.uniform() for tp in game.treeplexes], copy=False)
