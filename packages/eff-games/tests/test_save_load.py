"""Save and resume: a TabularPolicy round-trips exactly, a solver resumes bit for bit."""

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
    TabularPolicy,
    exploitability,
    load_game,
)
from eff_games.cfr import Solver

SOLVERS = [
    (CFRSolver, {}),
    (CFRPlusSolver, {}),
    (PCFRPlusSolver, {}),
    (DCFRSolver, {"alpha": 1.2, "gamma": 3.0}),
    (MMDSolver, {"eta": 0.05}),
    (RTCFRPlus, {"mu": 1e-2, "gamma": 1e-6, "ref_update_interval": 7}),
]


def _same_policy(a: TabularPolicy, b: TabularPolicy) -> None:
    for pa, pb in zip(a.probs, b.probs, strict=True):
        np.testing.assert_array_equal(pa, pb)


@pytest.mark.parametrize(("cls", "kwargs"), SOLVERS, ids=lambda x: getattr(x, "__name__", ""))
def test_a_saved_solver_resumes_to_the_identical_iterate(cls, kwargs, leduc, tmp_path):
    straight = cls(leduc, **kwargs).step(30)
    first = cls(leduc, **kwargs).step(13)
    path = first.save(tmp_path / "solver.npz")
    resumed = Solver.load(path, leduc)
    assert type(resumed) is cls and resumed.iteration == 13
    resumed.step(17)
    _same_policy(straight.current_policy(), resumed.current_policy())
    if cls.has_average:
        _same_policy(straight.average_policy(), resumed.average_policy())
    # state_dict / load_state_dict in memory do the same
    again = cls(leduc, **kwargs).load_state_dict(first.state_dict()).step(17)
    _same_policy(straight.current_policy(), again.current_policy())


def test_solver_load_checks_the_game_the_class_and_the_file(kuhn, leduc, tmp_path):
    path = RTCFRPlus(kuhn).step(3).save(tmp_path / "s.npz")
    with pytest.raises(ValueError, match="saved on game 'kuhn_poker'"):
        Solver.load(path, leduc)
    with pytest.raises(ValueError, match="holds a RTCFRPlus, not a CFRSolver"):
        CFRSolver.load(path, kuhn)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Solver.load(tmp_path / "nope.npz", kuhn)
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"junk\.npz: not a saved eff-games solver"):
        Solver.load(tmp_path / "junk.npz", kuhn)
    with pytest.raises(ValueError, match="state does not match"):
        CFRSolver(kuhn).load_state_dict({"iteration": 1})


def test_tabular_policy_round_trips_exactly(leduc, tmp_path):
    policy = CFRPlusSolver(leduc).step(25).average_policy()
    back = TabularPolicy.load(policy.save(tmp_path / "p.json"), leduc)
    _same_policy(policy, back)
    assert exploitability(leduc, back) == exploitability(leduc, policy)
    _same_policy(policy, TabularPolicy.from_dict(leduc, policy.to_dict()))


def test_tabular_policy_load_errors(kuhn, leduc, tmp_path):
    policy = CFRPlusSolver(kuhn).step(5).current_policy()
    path = policy.save(tmp_path / "p.json")
    with pytest.raises(ValueError, match="holds a policy of game 'kuhn_poker'"):
        TabularPolicy.load(path, leduc)
    table = policy.to_dict()
    missing = dict(list(table.items())[1:])
    with pytest.raises(ValueError, match="no entry for infoset"):
        TabularPolicy.from_dict(kuhn, missing)
    bad = {k: [(a + 5, q) for a, q in v] for k, v in table.items()}
    with pytest.raises(ValueError, match="is not legal there"):
        TabularPolicy.from_dict(kuhn, bad)
    with pytest.raises(ValueError, match="must sum to 1"):
        TabularPolicy.from_dict(kuhn, {k: [(a, 0.9 * q) for a, q in v] for k, v in table.items()})
    assert load_game("kuhn_poker").name == "kuhn_poker"
