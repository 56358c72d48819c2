"""The engine against OpenSpiel's facts, independent tree walks and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eff_games import TabularPolicy, build_efg, exploitability, nash_conv, uniform_policy
from eff_games.games import KuhnState, LeducState, load_game
from eff_games.metrics import best_response_values

# OpenSpiel 2.0.2 facts (spec table): infosets, sequences (excl. ∅), decision, chance, terminal
# nodes, histories, LP value of player 0, NashConv of the uniform profile.
FACTS = {
    "kuhn_poker": ((6, 6), (12, 12), 24, 4, 30, 58, -1 / 18, 0.9166666666667, 1e-9),
    "leduc_poker": (
        (468, 468),
        (1092, 1092),
        3780,
        157,
        5520,
        9457,
        -0.08560642407800063,
        4.7472222222222,
        1e-7,
    ),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_game_facts_match_openspiel(name):
    infosets, seqs, dec, chance, term, hist, value, nc_uniform, tol = FACTS[name]
    game = load_game(name)
    sizes = game.sizes()
    assert tuple(sizes["infosets"]) == infosets
    assert tuple(sizes["sequences"]) == seqs
    assert (sizes["decision_nodes"], sizes["chance_nodes"], sizes["terminals"]) == (
        dec,
        chance,
        term,
    )
    assert game.num_histories == hist
    assert abs(game.value_lp() - value) <= tol
    assert nash_conv(game, uniform_policy(game)) == pytest.approx(nc_uniform, abs=1e-12)


def test_leduc_payoff_and_levels(leduc):
    assert leduc.payoff[2].size == 5520  # one non-zero per terminal after coalescing
    assert [len(t.levels) for t in leduc.treeplexes] == [4, 4]
    assert [len(t.levels) for t in load_game("kuhn_poker").treeplexes] == [2, 1]


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_treeplex_layout_is_consistent(name):
    game = load_game(name)
    for tp in game.treeplexes:
        # sequences of each infoset are contiguous and cover 1..n_sequences in order
        assert tp.start[0] == 1
        assert np.array_equal(tp.start[1:], tp.start[:-1] + tp.nact[:-1])
        assert tp.start[-1] + tp.nact[-1] == tp.size
        # every infoset's parent sequence lies strictly above it
        parent_depth = np.where(tp.parent_seq == 0, -1, tp.depth[tp.seq_infoset[tp.parent_seq]])
        assert np.all(parent_depth == tp.depth - 1)
        # levels partition the infosets by depth
        covered = np.concatenate(
            [np.arange(lv.infosets.start, lv.infosets.stop) for lv in tp.levels]
        )
        assert np.array_equal(covered, np.arange(tp.n_infosets))
        # a realisation plan satisfies the sequence-form constraints E x = e
        x = tp.seq_form(tp.uniform())
        e = np.zeros(tp.n_infosets + 1)
        e[0] = 1.0
        assert np.allclose(tp.constraint_matrix() @ x, e, atol=1e-15)


def _random_policy(game, seed):
    rng = np.random.default_rng(seed)
    probs = []
    for tp in game.treeplexes:
        w = np.concatenate([[1.0], rng.random(tp.n_sequences) + 0.05])
        probs.append(tp.normalize(w))
    return TabularPolicy(game, probs)


def _tree_walk(root, game, policy):
    """Counterfactual values per (player, infoset key, action) and the root value by recursion
    over the game states — independent of the engine's arrays."""
    cfv = {}

    def prob(p, key, a):
        return policy.action_probabilities(p, key)[a]

    def walk(state, reach):  # reach = (π_0, π_1, π_c); returns u_0 of the subtree
        if state.is_terminal():
            return state.returns()[0]
        if state.is_chance_node():
            return sum(
                q * walk(state.child(a), (reach[0], reach[1], reach[2] * q))
                for a, q in state.chance_outcomes()
            )
        p = state.current_player()
        key = state.information_state_string(p)
        value = 0.0
        for a in state.legal_actions():
            sigma = prob(p, key, a)
            r = list(reach)
            r[p] *= sigma
            child = walk(state.child(a), tuple(r))
            value += sigma * child
            sign = 1.0 if p == 0 else -1.0
            cfv[(p, key, a)] = cfv.get((p, key, a), 0.0) + reach[1 - p] * reach[2] * sign * child
        return value

    return walk(root, (1.0, 1.0, 1.0)), cfv


@pytest.mark.parametrize("name,root", [("kuhn_poker", KuhnState), ("leduc_poker", LeducState)])
def test_cf_values_and_value_match_a_recursive_tree_walk(name, root):
    game = load_game(name)
    policy = _random_policy(game, 7)
    root_value, cfv = _tree_walk(root(), game, policy)
    assert game.expected_value(policy) == pytest.approx(root_value, abs=1e-13)
    x = policy.sequence_form()
    for p, tp in enumerate(game.treeplexes):
        v, _ = tp.cf_values(game.gradient(p, x[1 - p]), policy.probs[p])
        for s in range(1, tp.size):
            key = tp.infoset_names[tp.seq_infoset[s]]
            assert v[s] == pytest.approx(cfv[(p, key, int(tp.seq_action[s]))], abs=1e-13)
        assert v[0] == pytest.approx(root_value if p == 0 else -root_value, abs=1e-13)


def test_best_response_equals_brute_force_over_pure_strategies(kuhn):
    policy = _random_policy(kuhn, 3)
    x = policy.sequence_form()
    for p, tp in enumerate(kuhn.treeplexes):
        g = kuhn.gradient(p, x[1 - p])
        best = -np.inf
        for choice in itertools.product(*[range(n) for n in tp.nact]):
            beh = np.zeros(tp.size)
            beh[0] = 1.0
            beh[tp.start + np.asarray(choice)] = 1.0
            best = max(best, float(g @ tp.seq_form(beh)))
        assert tp.best_response_value(g) == pytest.approx(best, abs=1e-14)
    br0, br1 = best_response_values(kuhn, policy)
    assert nash_conv(kuhn, policy) == pytest.approx(br0 + br1, abs=1e-14)
    assert exploitability(kuhn, policy) == nash_conv(kuhn, policy) / 2


def test_entropy_prox_is_the_maximiser(kuhn):
    tp = kuhn.treeplexes[0]
    G = np.random.default_rng(0).normal(size=tp.size)
    beh, value = tp.entropy_prox(G)

    def objective(b):
        x = tp.seq_form(b)
        parent = x[tp.seq_parent[1:]]
        ent = np.sum(x[1:] * np.log(b[1:]))  # dilated entropy Σ_I x_p(I) Σ_a σ log σ
        assert np.all(parent > 0)
        return float(G @ x) - ent

    assert objective(beh) == pytest.approx(value, abs=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(20):
        other = tp.normalize(np.concatenate([[1.0], rng.random(tp.n_sequences) + 1e-3]))
        assert objective(other) <= objective(beh) + 1e-12


def test_lp_value_is_attained_by_a_converged_average(leduc):
    from eff_games import CFRPlusSolver

    avg = CFRPlusSolver(leduc).step(1000).average_policy()
    # |value(avg) - v*| <= exploitability bound (NashConv)
    assert abs(leduc.expected_value(avg) - leduc.value_lp()) <= nash_conv(leduc, avg)


def test_variants_build_like_openspiel():
    iso = load_game("leduc_poker", suit_isomorphism=True)
    assert iso.sizes()["infosets"] == [144, 144]
    assert iso.value_lp() == pytest.approx(-0.08560642407800063, abs=1e-7)
    flipped = load_game("leduc_poker(starting_player=1)")
    assert flipped.value_lp() == pytest.approx(0.08560642407800063, abs=1e-7)
    assert flipped.name == "leduc_poker(starting_player=1)"
    assert load_game("leduc_poker(starting_player=0)") is load_game("leduc_poker")


# ---- bad input ------------------------------------------------------------------------------------


def _leaf(u):
    return ("T", (u, -u))


def test_imperfect_recall_parent_is_rejected_naming_the_key(toy):
    # player 0 acts at "a", then (after either action) reaches "forget" — a different parent each time
    forget = ("P", 0, "forget", [(0, _leaf(1.0)), (1, _leaf(-1.0))])
    root = ("P", 0, "a", [(0, forget), (1, forget)])
    with pytest.raises(ValueError, match="'forget'"):
        build_efg(toy(root))


def test_imperfect_recall_actions_are_rejected_naming_the_key(toy):
    i1 = ("P", 1, "same", [(0, _leaf(1.0)), (1, _leaf(0.0))])
    i2 = ("P", 1, "same", [(0, _leaf(1.0)), (2, _leaf(0.0))])
    root = ("C", [(0, 0.5, i1), (1, 0.5, i2)])
    with pytest.raises(ValueError, match=r"'same'.*legal actions"):
        build_efg(toy(root))


def test_builder_rejects_non_two_player_general_sum_simultaneous_and_large(toy):
    three = ("P", 2, "x", [(0, _leaf(1.0))])
    with pytest.raises(ValueError, match="2 players"):
        build_efg(toy(three))
    general = ("C", [(0, 0.5, ("T", (1.0, 1.0))), (1, 0.5, ("T", (2.0, 1.0)))])
    with pytest.raises(ValueError, match="zero-sum or constant-sum"):
        build_efg(toy(general))
    simultaneous = ("P", -2, "x", [(0, _leaf(1.0))])
    with pytest.raises(ValueError, match="turn_based=True"):
        build_efg(toy(simultaneous))
    with pytest.raises(ValueError, match="max_nodes=100"):
        build_efg(LeducState(), max_nodes=100)
    with pytest.raises(TypeError, match="max_nodes"):
        build_efg(KuhnState(), max_nodes=10.0)


def test_constant_sum_game_is_shifted_to_zero_sum(toy):
    # matching pennies with payoffs in {0, 2} for player 0 and 2 - u0 for player 1 (constant sum 2)
    def leaf(u):
        return ("T", (u, 2.0 - u))

    p1 = [(0, leaf(2.0)), (1, leaf(0.0))], [(0, leaf(0.0)), (1, leaf(2.0))]
    root = ("P", 0, "p0", [(0, ("P", 1, "p1", p1[0])), (1, ("P", 1, "p1", p1[1]))])
    game = build_efg(toy(root))
    assert game.utility_sum == 2.0
    assert game.value_lp() == pytest.approx(1.0, abs=1e-9)
    uni = uniform_policy(game)
    assert nash_conv(game, uni) == pytest.approx(0.0, abs=1e-15)
    assert best_response_values(game, uni) == pytest.approx((1.0, 1.0))


def test_policy_validation(kuhn):
    good = [tp.uniform() for tp in kuhn.treeplexes]
    with pytest.raises(ValueError, match="shape"):
        TabularPolicy(kuhn, [good[0][1:], good[1]])
    with pytest.raises(ValueError, match="one array per player"):
        TabularPolicy(kuhn, [good[0]])
    neg = good[0].copy()
    neg[1], neg[2] = -0.5, 1.5
    with pytest.raises(ValueError, match="non-negative"):
        TabularPolicy(kuhn, [neg, good[1]])
    off = good[1].copy()
    off[1] += 1e-6
    with pytest.raises(ValueError, match=r"sum to 1.*infoset"):
        TabularPolicy(kuhn, [good[0], off])
    ok = good[1].copy()
    ok[1] += 1e-12  # within the 1e-9 tolerance
    TabularPolicy(kuhn, [good[0], ok])
    with pytest.raises(TypeError, match="game"):
        TabularPolicy("kuhn_poker", good)


def test_policy_views(kuhn):
    pol = uniform_policy(kuhn)
    d = pol.to_dict()
    assert d["0"] == [(0, 0.5), (1, 0.5)]
    assert d["1pb"] == [(0, 0.5), (1, 0.5)]
    assert len(d) == 12
    assert pol.action_probabilities(1, "2b") == {0: 0.5, 1: 0.5}
    with pytest.raises(ValueError, match="no infoset"):
        pol.action_probabilities(0, "2b")
    with pytest.raises(ValueError, match="belongs to game"):
        nash_conv(load_game("leduc_poker"), pol)


def test_a_player_without_infosets_is_handled(toy):
    # player 1 never acts: an empty treeplex must not break any solver
    root = (
        "C",
        [(0, 0.5, ("P", 0, "a", [(0, _leaf(1.0)), (1, _leaf(0.0))])), (1, 0.5, _leaf(2.0))],
    )
    game = build_efg(toy(root), name="one-sided")
    assert game.sizes()["infosets"] == [1, 0]
    assert game.value_lp() == pytest.approx(1.5, abs=1e-12)
    from eff_games import ALGORITHMS, solve

    for algo in ALGORITHMS:
        assert solve(game, algo, 30).policy.probs[1].shape == (1,)
    assert solve(game, "cfr+", 30).checkpoints[-1]["exploitability"] == 0.0
