"""Games: Kuhn and Leduc poker and Liar's Dice with OpenSpiel's rules, and any OpenSpiel game.

``kuhn_poker`` (Kuhn 1950) and ``leduc_poker`` (Southey et al. 2005) follow OpenSpiel's
``games/kuhn_poker/kuhn_poker.cc`` and ``games/leduc_poker/leduc_poker.cc`` exactly: the same chance
outcomes and probabilities, action ids and order, returns and information-state strings, so the
built trees (and infoset names) are identical to ``from_openspiel("kuhn_poker")`` /
``from_openspiel("leduc_poker")``. Both build through the same :func:`~eff_games.efg.build_efg` that
serves OpenSpiel's states.

``from_openspiel`` (extra ``eff-games[openspiel]``) builds any 2-player zero-sum OpenSpiel game,
including parameterised names such as ``"leduc_poker(suit_isomorphism=True)"``; simultaneous-move
games are converted with ``pyspiel.convert_to_turn_based``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from eff_games._openspiel import import_pyspiel
from eff_games.efg import EFG, build_efg
from eff_games.liars_dice import check_params as _check_liars_dice
from eff_games.liars_dice import liars_dice

__all__ = [
    "GAMES",
    "KuhnState",
    "LeducState",
    "from_openspiel",
    "load_game",
    "parse_game_string",
]

# ---- Kuhn poker ---------------------------------------------------------------------------------

_PASS, _BET = 0, 1


class KuhnState:
    """A history of 2-player Kuhn poker (3 cards, ante 1, one bet of 1), OpenSpiel's rules."""

    __slots__ = ("_cards", "_moves")

    def __init__(self, cards: tuple[int, ...] = (), moves: tuple[int, ...] = ()) -> None:
        self._cards = cards
        self._moves = moves

    def is_chance_node(self) -> bool:
        return len(self._cards) < 2

    def is_terminal(self) -> bool:
        m = self._moves
        return len(m) == 3 or (len(m) == 2 and (m[0] == _BET or m[1] == _PASS))

    def current_player(self) -> int:
        if self.is_terminal():
            return -4
        return -1 if self.is_chance_node() else len(self._moves) % 2

    def chance_outcomes(self) -> list[tuple[int, float]]:
        p = 1.0 / (3 - len(self._cards))
        return [(c, p) for c in range(3) if c not in self._cards]

    def legal_actions(self) -> list[int]:
        if self.is_terminal():
            return []
        if self.is_chance_node():
            return [c for c, _ in self.chance_outcomes()]
        return [_PASS, _BET]

    def child(self, action: int) -> KuhnState:
        if self.is_chance_node():
            return KuhnState((*self._cards, action), self._moves)
        return KuhnState(self._cards, (*self._moves, action))

    def information_state_string(self, player: int) -> str:
        return str(self._cards[player]) + "".join("pb"[a] for a in self._moves)

    def returns(self) -> list[float]:
        if not self.is_terminal():
            return [0.0, 0.0]
        m = self._moves
        bets = [1 + sum(a == _BET for a in m[i::2]) for i in (0, 1)]
        folded = [False, False]
        if m[-1] == _PASS and _BET in m:  # the last player to act passed on a bet
            folded[(len(m) - 1) % 2] = True
        pot = sum(bets)
        if folded[0] or folded[1]:
            winner = 1 if folded[0] else 0
        else:
            winner = 0 if self._cards[0] > self._cards[1] else 1
        return [float(pot - bets[p]) if p == winner else float(-bets[p]) for p in (0, 1)]


# ---- Leduc poker --------------------------------------------------------------------------------

_FOLD, _CALL, _RAISE = 0, 1, 2
_STARTING_MONEY = 100
_RAISE_AMOUNT = {1: 2, 2: 4}
_MAX_RAISES = 2
_INVALID = -10000


class LeducState:
    """A history of 2-player Leduc poker (6 cards, ante 1, raises of 2 then 4, at most 2 raises a
    round), a line-by-line port of OpenSpiel's ``LeducState`` for two players."""

    __slots__ = (
        "_ante",
        "_cur",
        "_deck",
        "_deck_size",
        "_folded",
        "_iso",
        "_money",
        "_num_calls",
        "_num_raises",
        "_pot",
        "_private",
        "_public",
        "_remaining",
        "_round",
        "_seq",
        "_stakes",
        "_start",
    )

    def __init__(self, suit_isomorphism: bool = False, starting_player: int = 0) -> None:
        self._iso = suit_isomorphism
        self._start = starting_player
        self._cur = -1
        self._num_calls = 0
        self._num_raises = 0
        self._round = 1
        self._stakes = 1
        self._pot = 2
        self._public = _INVALID
        self._deck = list(range(6))
        self._deck_size = 6
        self._private = [_INVALID, _INVALID]
        self._money = [_STARTING_MONEY - 1, _STARTING_MONEY - 1]
        self._ante = [1, 1]
        self._folded = [False, False]
        self._remaining = 2
        self._seq: tuple[list[int], list[int]] = ([], [])

    def _copy(self) -> LeducState:
        s = object.__new__(LeducState)
        for name in self.__slots__:
            setattr(s, name, getattr(self, name))
        s._deck = list(self._deck)
        s._private = list(self._private)
        s._money = list(self._money)
        s._ante = list(self._ante)
        s._folded = list(self._folded)
        s._seq = (list(self._seq[0]), list(self._seq[1]))
        return s

    # -- the state protocol --

    def is_chance_node(self) -> bool:
        return self._cur == -1 and not self.is_terminal()

    def is_terminal(self) -> bool:
        return self._remaining == 1 or (self._round == 2 and self._ready_for_next_round())

    def current_player(self) -> int:
        return -4 if self.is_terminal() else self._cur

    def chance_outcomes(self) -> list[tuple[int, float]]:
        p = 1.0 / self._deck_size
        if self._iso:
            out = []
            for rank in range(3):
                n = (self._deck[2 * rank] != _INVALID) + (self._deck[2 * rank + 1] != _INVALID)
                if n == 2:
                    out.append((rank, p * 2))
                elif n == 1:
                    out.append((rank, p))
            return out
        return [(c, p) for c in range(6) if self._deck[c] != _INVALID]

    def legal_actions(self) -> list[int]:
        if self.is_terminal():
            return []
        if self.is_chance_node():
            return [a for a, _ in self.chance_outcomes()]
        moves = []
        if self._stakes > self._ante[self._cur]:
            moves.append(_FOLD)
        moves.append(_CALL)
        if self._num_raises < _MAX_RAISES:
            moves.append(_RAISE)
        return moves

    def child(self, action: int) -> LeducState:
        s = self._copy()
        s._apply(action)
        return s

    def information_state_string(self, player: int) -> str:
        money = " ".join(_fmt(m) for m in self._money)
        out = (
            f"[Observer: {player}][Private: {self._private[player]}][Round {self._round}]"
            f"[Player: {self._cur}][Pot: {self._pot}][Money: {money}]"
        )
        if self._public != _INVALID:
            out += f"[Public: {self._public}]"
        r1, r2 = (" ".join(map(str, s)) for s in self._seq)
        return out + f"[Round1: {r1}][Round2: {r2}]"

    def returns(self) -> list[float]:
        if not self.is_terminal():
            return [0.0, 0.0]
        return [float(m - _STARTING_MONEY) for m in self._money]

    # -- the rules (OpenSpiel's DoApplyAction) --

    def _take_card(self, move: int) -> int:
        if self._iso:
            if self._deck[2 * move] != _INVALID:
                self._deck[2 * move] = _INVALID
            else:
                self._deck[2 * move + 1] = _INVALID
            return move
        card = self._deck[move]
        self._deck[move] = _INVALID
        return card

    def _apply(self, move: int) -> None:
        if self.is_chance_node():
            card = self._take_card(move)
            self._deck_size -= 1
            dealt = sum(c != _INVALID for c in self._private)
            if dealt < 2:
                self._private[dealt] = card
                if dealt == 1:
                    self._cur = self._start
            else:
                self._public = card
                self._cur = self._start
            return
        if move not in self.legal_actions():
            raise ValueError(f"action {move} is not legal here; legal: {self.legal_actions()}")
        p = self._cur
        if move == _RAISE:
            call_amount = self._stakes - self._ante[p]
            if call_amount > 0:
                self._bet(p, call_amount)
            self._stakes += _RAISE_AMOUNT[self._round]
            self._bet(p, _RAISE_AMOUNT[self._round])
            self._num_raises += 1
            self._num_calls = 0
            self._seq[self._round - 1].append(_RAISE)
            self._cur = 1 - p
            return
        if move == _FOLD:
            self._folded[p] = True
            self._remaining -= 1
        else:
            self._bet(p, self._stakes - self._ante[p])
            self._num_calls += 1
        self._seq[self._round - 1].append(move)
        if self.is_terminal():
            self._resolve_winner()
        elif self._ready_for_next_round():
            self._round += 1
            self._num_raises = 0
            self._num_calls = 0
            self._cur = -1
        else:
            self._cur = 1 - p

    def _bet(self, p: int, amount: int) -> None:
        self._pot += amount
        self._ante[p] += amount
        self._money[p] -= amount

    def _ready_for_next_round(self) -> bool:
        if self._num_raises == 0:
            return self._num_calls == self._remaining
        return self._num_calls == self._remaining - 1

    def _rank_hand(self, p: int) -> int:
        lo, hi = sorted((self._public, self._private[p]))
        if self._iso:
            return 9 + lo if lo == hi else hi * 3 + lo
        if lo % 2 == 0 and hi == lo + 1:
            return 36 + lo
        return (hi // 2) * 6 + (lo // 2)

    def _resolve_winner(self) -> None:
        if self._remaining == 1:
            winner = 0 if not self._folded[0] else 1
            self._money[winner] += self._pot
        else:
            r0, r1 = self._rank_hand(0), self._rank_hand(1)
            winners = [p for p, r in enumerate((r0, r1)) if r == max(r0, r1)]
            for p in winners:
                self._money[p] += self._pot / len(winners)
        self._pot = 0


def _fmt(m: float) -> str:
    return str(int(m)) if float(m).is_integer() else repr(m)


# ---- the registry -------------------------------------------------------------------------------


def _kuhn_root(players: int = 2) -> KuhnState:
    if players != 2:
        raise ValueError(f"players must be 2 (the engine solves 2-player games), got {players!r}")
    return KuhnState()


def _leduc_root(
    players: int = 2, suit_isomorphism: bool = False, starting_player: int = 0
) -> LeducState:
    if players != 2:
        raise ValueError(f"players must be 2 (the engine solves 2-player games), got {players!r}")
    if not isinstance(suit_isomorphism, bool):
        raise TypeError(f"suit_isomorphism must be a bool, got {type(suit_isomorphism).__name__}")
    if starting_player not in (0, 1) or isinstance(starting_player, bool):
        raise ValueError(f"starting_player must be 0 or 1, got {starting_player!r}")
    return LeducState(suit_isomorphism, starting_player)


#: built-in games: name → (factory, default parameters); a factory returns a root state (walked by
#: ``build_efg``) or, for games enumerated without a tree walk, the :class:`EFG` itself
GAMES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "kuhn_poker": (_kuhn_root, {"players": 2}),
    "leduc_poker": (
        _leduc_root,
        {"players": 2, "suit_isomorphism": False, "starting_player": 0},
    ),
    "liars_dice": (
        liars_dice,
        {"players": 2, "numdice": 1, "dice_sides": 6, "bidding_rule": "reset-face"},
    ),
}
# parameter checks of the factories that build the whole game (calling them would build it)
_VALIDATE: dict[str, Callable[..., Any]] = {"liars_dice": _check_liars_dice}

_NAME_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*$")


def parse_game_string(text: str) -> tuple[str, dict[str, Any]]:
    """Split OpenSpiel's ``name(param=value,...)`` form into the name and typed parameters."""
    if not isinstance(text, str):
        raise TypeError(f"name must be a str, got {type(text).__name__}")
    m = _NAME_RE.match(text)
    if m is None:
        raise ValueError(f"cannot parse game string {text!r}; expected 'name' or 'name(k=v,...)'")
    params: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in (m.group(2) or "").split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"cannot parse parameter {item!r} of game string {text!r}")
        raw = raw.strip()
        lowered = {"true": True, "false": False}.get(raw.lower())
        if lowered is not None:
            params[key.strip()] = lowered
            continue
        try:
            params[key.strip()] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            params[key.strip()] = raw
    return m.group(1), params


def _game_string(name: str, params: dict[str, Any], defaults: dict[str, Any]) -> str:
    changed = {k: v for k, v in sorted(params.items()) if defaults.get(k) != v}
    if not changed:
        return name
    return name + "(" + ",".join(f"{k}={v}" for k, v in changed.items()) + ")"


@lru_cache(maxsize=16)
def _build(name: str, frozen_params: tuple[tuple[str, Any], ...]) -> EFG:
    factory, defaults = GAMES[name]
    params = dict(frozen_params)
    built = factory(**params)
    if isinstance(built, EFG):
        return built
    return build_efg(built, name=_game_string(name, params, defaults))


def load_game(name: str, **params: Any) -> EFG:
    """A built-in game as an :class:`EFG` (built once per parameter set, then cached; read-only).

    ``name`` is ``"kuhn_poker"``, ``"leduc_poker"`` or ``"liars_dice"``, optionally in OpenSpiel's
    ``"name(param=value,...)"`` form; ``params`` are OpenSpiel's parameters (``players`` must be
    2; Leduc also takes ``suit_isomorphism`` and ``starting_player``; Liar's Dice ``dice_sides``
    in 2..10 with one die each, built without a tree walk: :mod:`eff_games.liars_dice`). Other
    OpenSpiel games: :func:`from_openspiel`.
    """
    base, parsed = parse_game_string(name)
    if base not in GAMES:
        raise ValueError(
            f"name must be one of {sorted(GAMES)!r} (any OpenSpiel game: from_openspiel), got {name!r}"
        )
    parsed.update(params)
    defaults = GAMES[base][1]
    unknown = sorted(set(parsed) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for {base!r}; allowed: {sorted(defaults)}"
        )
    full = {**defaults, **parsed}
    # validate the parameters before the cache sees them (True == 1)
    _VALIDATE.get(base, GAMES[base][0])(**full)
    # the cache key holds every parameter, so equal games are one object
    return _build(base, tuple(sorted(full.items())))


# ---- OpenSpiel -----------------------------------------------------------------------------------


def from_openspiel(
    game_or_name: Any, *, turn_based: bool = True, max_nodes: int = 2_000_000
) -> EFG:
    """Build an OpenSpiel game (a ``pyspiel.Game`` or a name such as ``"leduc_poker"`` or
    ``"goofspiel(num_cards=3)"``) into an :class:`EFG` through the same builder as our games.

    The game must be 2-player and zero- or constant-sum with explicit chance; simultaneous-move
    games are converted with ``pyspiel.convert_to_turn_based`` when ``turn_based`` (else
    ``ValueError``). Needs the extra ``eff-games[openspiel]`` (``ImportError`` with the install
    hint otherwise).
    """
    pyspiel = import_pyspiel()
    if isinstance(game_or_name, str):
        try:
            game = pyspiel.load_game(game_or_name)
        except pyspiel.SpielError as exc:
            msg = str(exc)
            if msg.startswith("Unknown game"):
                raise ValueError(
                    f"game_or_name {game_or_name!r} is not an OpenSpiel game; valid names: "
                    f"{', '.join(pyspiel.registered_names())}"
                ) from None
            raise ValueError(f"game_or_name {game_or_name!r}: {msg}") from None
    elif isinstance(game_or_name, pyspiel.Game):
        game = game_or_name
    else:
        raise TypeError(
            f"game_or_name must be a pyspiel.Game or a game name, got {type(game_or_name).__name__}"
        )
    gtype = game.get_type()
    if game.num_players() != 2:
        raise ValueError(f"the engine solves 2-player games; {game} has {game.num_players()}")
    if gtype.utility not in (
        pyspiel.GameType.Utility.ZERO_SUM,
        pyspiel.GameType.Utility.CONSTANT_SUM,
    ):
        raise ValueError(
            f"the engine solves zero-sum or constant-sum games; {game} is {gtype.utility}"
        )
    if gtype.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        raise ValueError(f"{game} has sampled (implicit) chance; the engine needs explicit chance")
    if gtype.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        if not turn_based:
            raise ValueError(
                f"{game} is a simultaneous-move game; use from_openspiel(..., turn_based=True)"
            )
        game = pyspiel.convert_to_turn_based(game)
    if not game.get_type().provides_information_state_string:
        raise ValueError(f"{game} provides no information-state strings")
    return build_efg(game.new_initial_state(), max_nodes=max_nodes, name=str(game), source=game)
