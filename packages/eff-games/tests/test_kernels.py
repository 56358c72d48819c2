"""The compiled path (``backend="numba"``, eff_games.kernels) against the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from eff_games import (
    CFRPlusSolver,
    CFRSolver,
    DCFRSolver,
    MMDSolver,
    PCFRPlusSolver,
    RTCFRPlus,
    best_response_values,
    exploitability,
    load_game,
)
from eff_games.kernels import check_backend, default_backend
from eff_games.policy import TabularPolicy

SOLVERS = [
    (CFRSolver, {}),
    (CFRPlusSolver, {}),
    (PCFRPlusSolver, {}),
    (DCFRSolver, {}),
    (DCFRSolver, {"alpha": 0.5, "beta": -0.5, "gamma": 3.0}),
    (RTCFRPlus, {}),
    (RTCFRPlus, {"inner": "pcfr+", "ref_update_interval": 7, "mu": 1e-2}),
    (RTCFRPlus, {"alternating": False, "ref_update_interval": 5}),
    (RTCFRPlus, {"mu": 0.0, "gamma": 1e-3}),
]


def _equal_states(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for key in sa:
        x, y = sa[key], sb[key]
        pairs = zip(x, y, strict=True) if isinstance(x, list) else [(x, y)]
        if not all(np.array_equal(u, v) for u, v in pairs):
            return False
    return True


# liars_dice(dice_sides=5) has infosets with 10 actions: numpy's reduceat sums those pairwise,
# which the kernels reproduce (_segsum)
@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker", "liars_dice(dice_sides=5)"])
@pytest.mark.parametrize(("cls", "kw"), SOLVERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_compiled_iterates_are_bit_identical_to_numpy(name, cls, kw):
    game = load_game(name)
    ref = cls(game, backend="numpy", **kw).step(37)
    fast = cls(game, backend="numba", **kw)
    for n in (1, 5, 31):  # one call per step(n), whatever n
        fast.step(n)
    assert fast.iteration == ref.iteration == 37
    assert _equal_states(ref, fast)
    for it in ("current_policy",) + (("average_policy",) if cls.has_average else ()):
        p_ref, p_fast = getattr(ref, it)(), getattr(fast, it)()
        assert all(np.array_equal(u, v) for u, v in zip(p_ref.probs, p_fast.probs, strict=True))


def test_a_wrong_kernel_would_be_caught(leduc):
    # the comparison above sees a single flipped update: CFR's regrets are not CFR+'s
    a = CFRSolver(leduc, backend="numba").step(3)
    b = CFRPlusSolver(leduc, backend="numpy").step(3)
    assert not np.array_equal(a._regret[0], b._regret[0])


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker", "liars_dice(dice_sides=4)"])
def test_compiled_exploitability_equals_numpy(name):
    game = load_game(name)
    rng = np.random.default_rng(0)
    pol = TabularPolicy(game, [tp.normalize(rng.random(tp.size)) for tp in game.treeplexes])
    for policy in (pol, CFRPlusSolver(game).step(20).average_policy()):
        assert best_response_values(game, policy, backend="numba") == best_response_values(
            game, policy, backend="numpy"
        )
        assert exploitability(game, policy, backend="numba") == exploitability(
            game, policy, backend="numpy"
        )


def test_state_lists_replaced_between_steps_are_rebound(kuhn):
    a = CFRPlusSolver(kuhn, backend="numba").step(3)
    b = CFRPlusSolver(kuhn, backend="numpy").step(3)
    state = b.state_dict()
    a.load_state_dict(state)  # new arrays: the compiled path must copy them into its buffer
    a._regret = [r * 0.5 for r in a._regret]
    b._regret = [r * 0.5 for r in b._regret]
    a.step(4)
    b.step(4)
    assert _equal_states(a, b)


def test_resume_across_backends(leduc, tmp_path):
    full = RTCFRPlus(leduc, backend="numpy").step(250)
    half = RTCFRPlus(leduc, backend="numba").step(120)
    path = half.save(tmp_path / "s.npz")
    resumed = RTCFRPlus.load(path, leduc, backend="numpy").step(130)
    assert _equal_states(full, resumed)


def test_backend_argument():
    assert check_backend(None) == default_backend() in ("numba", "numpy")
    game = load_game("kuhn_poker")
    for bad in ("c++", 1, "NUMBA"):
        with pytest.raises(ValueError, match="backend must be one of"):
            CFRPlusSolver(game, backend=bad)
        with pytest.raises(ValueError, match="backend must be one of"):
            exploitability(game, CFRPlusSolver(game).current_policy(), backend=bad)
    # MMD has no compiled kernel: it validates the argument and runs numpy
    assert MMDSolver(game, backend="numba").backend == "numpy"


def test_environment_selects_the_reference(monkeypatch):
    monkeypatch.setenv("EFF_GAMES_BACKEND", "numpy")
    assert CFRPlusSolver(load_game("kuhn_poker")).backend == "numpy"
    monkeypatch.delenv("EFF_GAMES_BACKEND")
    assert CFRPlusSolver(load_game("kuhn_poker")).backend == "numba"
