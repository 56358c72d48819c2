"""Shared fixtures and a tiny configurable game for eff-games' tests."""

from __future__ import annotations

from typing import Any

import pytest

from eff_games.games import load_game


@pytest.fixture(scope="session")
def kuhn():
    return load_game("kuhn_poker")


@pytest.fixture(scope="session")
def leduc():
    return load_game("leduc_poker")


class ToyState:
    """A game tree written out by hand (for error paths of the builder).

    A node is ``("T", (u0, u1))``, ``("C", [(action, prob, node), ...])`` or
    ``("P", player, key, [(action, node), ...])``.
    """

    def __init__(self, node: tuple[Any, ...]) -> None:
        self.node = node

    def is_terminal(self) -> bool:
        return self.node[0] == "T"

    def is_chance_node(self) -> bool:
        return self.node[0] == "C"

    def chance_outcomes(self):
        return [(a, p) for a, p, _ in self.node[1]]

    def current_player(self) -> int:
        return self.node[1] if self.node[0] == "P" else -1

    def information_state_string(self, player: int) -> str:
        return self.node[2]

    def legal_actions(self):
        if self.node[0] == "C":
            return [a for a, _, _ in self.node[1]]
        return [a for a, _ in self.node[3]]

    def child(self, action: int) -> ToyState:
        if self.node[0] == "C":
            return ToyState(next(n for a, _, n in self.node[1] if a == action))
        return ToyState(next(n for a, n in self.node[3] if a == action))

    def returns(self):
        return list(self.node[1])


@pytest.fixture
def toy():
    return ToyState
