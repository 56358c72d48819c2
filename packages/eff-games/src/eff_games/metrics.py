"""Best responses, NashConv and exploitability, in OpenSpiel's units.

For a 2-player zero-sum game with values v_0 = x_0ᵀ A x_1 = −v_1:

- ``best_response_values`` = (max_x xᵀ A x_1, max_y −x_0ᵀ A y) (player 1's in the original game's units);
- ``nash_conv`` = Σ_p (BR_p − v_p) = BR_0 + BR_1 (zero-sum form);
- ``exploitability`` = NashConv / 2, what ``pyspiel.exploitability`` returns.

The official RTCFR+ script prints LiteEFG's ``sum(env.exploitability(...))``, which is NashConv.
Each best response is one bottom-up pass with ``np.maximum.reduceat`` per depth level
(``backend="numpy"``), or one compiled loop (``"numba"``, the default: :mod:`eff_games.kernels`);
the two give identical values.
"""

from __future__ import annotations

from eff_games import kernels
from eff_games.efg import EFG
from eff_games.policy import TabularPolicy

__all__ = ["UNITS", "best_response_values", "exploitability", "nash_conv"]

#: the unit statement every output carries
UNITS = "exploitability = nash_conv/2 (OpenSpiel's convention), in chips of the game's payoffs"


def _zero_sum_br(
    game: EFG, policy: TabularPolicy, backend: str | None = None
) -> tuple[float, float]:
    backend = kernels.check_backend(backend)
    if not isinstance(game, EFG):
        raise TypeError(f"game must be an eff_games EFG, got {type(game).__name__}")
    if not isinstance(policy, TabularPolicy):
        raise TypeError(f"policy must be a TabularPolicy, got {type(policy).__name__}")
    if policy.game is not game:
        raise ValueError(f"policy belongs to game {policy.game.name!r}, not to {game.name!r}")
    if backend == "numba":
        return kernels.best_response_values(game, policy.probs)
    t0, t1 = game.treeplexes
    x0, x1 = policy.sequence_form()
    return (
        t0.best_response_value(game.gradient(0, x1)),
        t1.best_response_value(game.gradient(1, x0)),
    )


def best_response_values(
    game: EFG, policy: TabularPolicy, *, backend: str | None = None
) -> tuple[float, float]:
    """Each player's best-response value against the other's policy (chips, own payoffs)."""
    br0, br1 = _zero_sum_br(game, policy, backend)
    half = 0.5 * game.utility_sum
    return br0 + half, br1 + half


def nash_conv(game: EFG, policy: TabularPolicy, *, backend: str | None = None) -> float:
    """Σ_p (best-response value_p − value_p) (chips); 0 exactly at a Nash equilibrium."""
    br0, br1 = _zero_sum_br(game, policy, backend)
    return br0 + br1


def exploitability(game: EFG, policy: TabularPolicy, *, backend: str | None = None) -> float:
    """NashConv / 2 (chips), OpenSpiel's ``exploitability``."""
    return 0.5 * nash_conv(game, policy, backend=backend)
