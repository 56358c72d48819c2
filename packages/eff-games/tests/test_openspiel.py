"""Cross-checks with OpenSpiel (extra ``eff-games[openspiel]``; skipped without pyspiel)."""

from __future__ import annotations

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from open_spiel.python.policy import python_policy_to_pyspiel_policy  # noqa: E402

from eff_games import (  # noqa: E402
    CFRPlusSolver,
    CFRSolver,
    MMDSolver,
    RTCFRPlus,
    exploitability,
    from_openspiel,
    load_game,
    nash_conv,
)


def _os_exploitability(os_game, policy):
    return pyspiel.exploitability(
        os_game, python_policy_to_pyspiel_policy(policy.to_openspiel(os_game))
    )


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_our_games_equal_openspiels(name):
    ours, theirs = load_game(name), from_openspiel(name)
    assert ours.sizes() == theirs.sizes()
    for a, b in zip(ours.treeplexes, theirs.treeplexes, strict=True):
        assert a.infoset_names == b.infoset_names
        assert np.array_equal(a.seq_action, b.seq_action)
        assert np.array_equal(a.parent_seq, b.parent_seq)
    for a, b in zip(ours.payoff, theirs.payoff, strict=True):
        assert np.array_equal(a, b)
    assert abs(ours.value_lp() - theirs.value_lp()) <= 1e-12
    s_ours, s_theirs = CFRPlusSolver(ours).step(100), CFRPlusSolver(theirs).step(100)
    for it in ("average_policy", "current_policy"):
        e_ours = exploitability(ours, getattr(s_ours, it)())
        e_theirs = exploitability(theirs, getattr(s_theirs, it)())
        assert abs(e_ours - e_theirs) <= 1e-9


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_exported_policies_have_the_same_exploitability_in_openspiel(name):
    game = load_game(name)
    os_game = pyspiel.load_game(name)
    for pol in (
        CFRPlusSolver(game).step(50).average_policy(),
        RTCFRPlus(game).step(50).current_policy(),
    ):
        assert abs(_os_exploitability(os_game, pol) - exploitability(game, pol)) <= 1e-12
        os_pol = python_policy_to_pyspiel_policy(pol.to_openspiel())  # default: load by name
        assert abs(pyspiel.nash_conv(os_game, os_pol) - nash_conv(game, pol)) <= 1e-12


@pytest.mark.parametrize("name,T", [("kuhn_poker", 100), ("leduc_poker", 10)])
def test_live_cross_check_with_pyspiel_cfr(name, T):
    os_game = pyspiel.load_game(name)
    game = load_game(name)
    for os_cls, cls in ((pyspiel.CFRSolver, CFRSolver), (pyspiel.CFRPlusSolver, CFRPlusSolver)):
        theirs = os_cls(os_game)
        for _ in range(T):
            theirs.evaluate_and_update_policy()
        ours = cls(game).step(T)
        assert (
            abs(
                pyspiel.exploitability(os_game, theirs.average_policy())
                - exploitability(game, ours.average_policy())
            )
            <= 1e-9
        )
        assert (
            abs(
                pyspiel.exploitability(os_game, theirs.current_policy())
                - exploitability(game, ours.current_policy())
            )
            <= 1e-9
        )


def test_mmd_equals_openspiel_mmd_dilated(kuhn):
    from open_spiel.python.algorithms.exploitability import exploitability as os_expl
    from open_spiel.python.algorithms.mmd_dilated import MMDDilatedEnt

    os_game = pyspiel.load_game("kuhn_poker")
    theirs = MMDDilatedEnt(os_game, alpha=0.01, stepsize=0.1)
    for _ in range(200):
        theirs.update_sequences()
    ours = MMDSolver(kuhn, eta=0.1, tau=0.01).step(200)
    assert (
        abs(os_expl(os_game, theirs.get_policies()) - exploitability(kuhn, ours.current_policy()))
        <= 1e-12
    )
    assert (
        abs(
            os_expl(os_game, theirs.get_avg_policies())
            - exploitability(kuhn, ours.average_policy())
        )
        <= 1e-12
    )


@pytest.mark.parametrize(
    "text,params",
    [
        ("leduc_poker(suit_isomorphism=True)", {"suit_isomorphism": True}),
        ("leduc_poker(starting_player=1)", {"starting_player": 1}),
    ],
)
def test_parameterised_names(text, params):
    theirs, ours = from_openspiel(text), load_game("leduc_poker", **params)
    assert theirs.sizes() == ours.sizes()
    assert [t.infoset_names for t in theirs.treeplexes] == [
        t.infoset_names for t in ours.treeplexes
    ]
    assert abs(theirs.value_lp() - ours.value_lp()) <= 1e-12
    assert ours.name == text  # so to_openspiel() can load it back


def test_simultaneous_game_needs_turn_based():
    with pytest.raises(ValueError, match="turn_based=True"):
        from_openspiel("goofspiel(num_cards=3)", turn_based=False)
    game = from_openspiel("goofspiel(num_cards=3)")
    assert game.value_lp() == pytest.approx(0.0, abs=1e-9)  # symmetric game
    solver = CFRPlusSolver(game).step(300)
    assert exploitability(game, solver.average_policy()) < 1e-2
    pol = solver.average_policy()
    assert abs(_os_exploitability(game.source, pol) - exploitability(game, pol)) <= 1e-12


def test_accepts_game_objects():
    os_game = pyspiel.load_game("kuhn_poker")
    game = from_openspiel(os_game)
    assert game.source is os_game
    assert game.value_lp() == pytest.approx(-1 / 18, abs=1e-12)


@pytest.mark.parametrize(
    "arg,kw,match",
    [
        ("kuhn_poker(players=3)", {}, "2-player"),
        ("matrix_pd", {}, "zero-sum or constant-sum"),
        ("no_such_game", {}, "valid names: .*leduc_poker"),
        ("leduc_poker(foo=1)", {}, "Unknown parameter"),
        ("tic_tac_toe", {"max_nodes": 1000}, "max_nodes=1000"),
    ],
)
def test_games_the_engine_cannot_solve_raise(arg, kw, match):
    with pytest.raises(ValueError, match=match):
        from_openspiel(arg, **kw)


def test_bad_argument_type():
    with pytest.raises(TypeError, match="game_or_name"):
        from_openspiel(3)


def test_export_to_mismatched_game_raises():
    pol = CFRPlusSolver(load_game("kuhn_poker")).step(5).current_policy()
    with pytest.raises(ValueError, match="infosets"):
        pol.to_openspiel(pyspiel.load_game("leduc_poker"))


def _by_name(game):
    """The game in infoset-name terms: per player {infoset: (actions, parent (infoset, action))}
    and the payoff {((infoset0, action0), (infoset1, action1)): value}."""

    def seq(tp, s):
        return (tp.infoset_names[tp.seq_infoset[s]], int(tp.seq_action[s])) if s else None

    trees = []
    for tp in game.treeplexes:
        trees.append(
            {
                name: (
                    tuple(tp.seq_action[tp.start[i] : tp.start[i] + tp.nact[i]].tolist()),
                    seq(tp, tp.parent_seq[i]),
                )
                for i, name in enumerate(tp.infoset_names)
            }
        )
    t0, t1 = game.treeplexes
    rows, cols, vals = game.payoff
    payoff = {
        (seq(t0, r), seq(t1, c)): v
        for r, c, v in zip(rows.tolist(), cols.tolist(), vals.tolist(), strict=True)
    }
    return trees, payoff


@pytest.mark.parametrize("k", [2, 3, 4])
def test_vectorised_liars_dice_equals_openspiels(k):
    ours = load_game("liars_dice", dice_sides=k)
    theirs = from_openspiel(f"liars_dice(dice_sides={k})")
    assert ours.sizes() == theirs.sizes()
    (trees_o, pay_o), (trees_t, pay_t) = _by_name(ours), _by_name(theirs)
    assert trees_o == trees_t
    assert pay_o.keys() == pay_t.keys()
    assert max(abs(pay_o[key] - pay_t[key]) for key in pay_o) <= 1e-15
    assert abs(ours.value_lp() - theirs.value_lp()) <= 1e-12
    # a policy solved on our build has the same exploitability in OpenSpiel
    pol = CFRPlusSolver(ours).step(30).average_policy()
    os_game = pyspiel.load_game(f"liars_dice(dice_sides={k})")
    assert abs(_os_exploitability(os_game, pol) - exploitability(ours, pol)) <= 1e-12
