"""Liar's Dice enumerated without a tree walk (eff_games.liars_dice); OpenSpiel cross-check in
test_openspiel.py."""

from __future__ import annotations

import numpy as np
import pytest

from eff_games import CFRPlusSolver, exploitability, load_game
from eff_games.liars_dice import liars_dice


@pytest.mark.parametrize("k", [2, 3, 5])
def test_sizes_follow_the_bit_mask_count(k):
    game = load_game("liars_dice", dice_sides=k)
    n_masks = 2 ** (2 * k)
    s = game.sizes()
    assert sum(s["infosets"]) == k * n_masks  # (die, bid history) for each mover
    assert s["terminals"] == k * k * (n_masks - 1)  # every history with a bid can be called
    assert s["decision_nodes"] == k * k * n_masks
    assert s["payoff_nonzeros"] == s["terminals"]
    # every terminal has chance probability 1/k² and a ±1 payoff
    assert np.allclose(np.abs(game.payoff[2]), 1.0 / (k * k))


def test_infosets_and_rules_of_a_hand_checked_history():
    game = load_game("liars_dice", dice_sides=3)  # bids 0..5 = 1-1 .. 2-3, liar = 6
    t0, t1 = game.treeplexes
    i = t0.index["3 1-2 2-2"]  # player 0 holds a 3, bid 1-2, player 1 bid 2-2
    acts = t0.seq_action[t0.start[i] : t0.start[i] + t0.nact[i]].tolist()
    assert acts == [5, 6]  # only 2-3 is higher, or liar
    parent = t0.parent_seq[i]  # player 0's own previous sequence: ("3", bid 1-2)
    assert t0.infoset_names[t0.seq_infoset[parent]] == "3" and t0.seq_action[parent] == 1
    assert t1.index["1 1-2"] < t1.n_infosets and t1.nact[t1.index["1 1-2"]] == 5
    # the first mover may not call liar
    assert 6 not in t0.seq_action[t0.start[t0.index["1"]] : t0.start[t0.index["1"]] + 6]


def test_wild_face_decides_a_call():
    # player 0 holds 3 (wild), player 1 holds 1; player 0 bids 2-1 (action 3), player 1 calls:
    # two dice count as 1s, the bid holds, the caller (player 1) loses
    game = load_game("liars_dice", dice_sides=3)
    t0, t1 = game.treeplexes
    s0 = t0.start[t0.index["3"]] + 3
    i1 = t1.index["1 2-1"]
    s1 = t1.start[i1] + t1.nact[i1] - 1
    rows, cols, vals = game.payoff
    hit = (rows == s0) & (cols == s1)
    assert hit.sum() == 1 and vals[hit][0] == pytest.approx(1 / 9)


def test_cfr_plus_converges_and_the_value_is_zero_sum_consistent():
    game = load_game("liars_dice", dice_sides=4)
    avg = CFRPlusSolver(game).step(400).average_policy()
    assert exploitability(game, avg) < 2e-3
    assert abs(game.expected_value(avg) - game.value_lp()) < 5e-3


def test_default_game_is_openspiels_default_and_cached():
    assert (
        load_game("liars_dice")
        is load_game("liars_dice()")
        is load_game("liars_dice", dice_sides=6)
    )
    assert load_game("liars_dice").name == "liars_dice"
    assert load_game("liars_dice(dice_sides=4)").name == "liars_dice(dice_sides=4)"


@pytest.mark.parametrize(
    ("kw", "err", "match"),
    [
        ({"dice_sides": 1}, ValueError, r"dice_sides must be an integer in \[2, 10\]"),
        ({"dice_sides": 11}, ValueError, r"dice_sides must be an integer in \[2, 10\]"),
        ({"dice_sides": 4.0}, TypeError, "dice_sides must be an int"),
        ({"numdice": 2}, ValueError, "numdice must be 1"),
        ({"players": 3}, ValueError, "players must be 2"),
        ({"bidding_rule": "reset-quantity"}, ValueError, "bidding_rule must be 'reset-face'"),
    ],
)
def test_bad_parameters(kw, err, match):
    with pytest.raises(err, match=match):
        load_game("liars_dice", **kw)
    with pytest.raises(err, match=match):
        liars_dice(**kw)
