import warnings

import gymnasium
import numpy as np
import pytest

from eff_rl.envs import TASK_SEQUENCES, cartpole_task, task_sequence
from eff_rl.metrics import auc, average_performance, forgetting, forward_transfer, success_curve


def _unwrap(env):
    while hasattr(env, "env"):
        env = env.env
    return env


def test_physics_override_recomputes_derived_quantities_and_changes_dynamics():
    env = cartpole_task(num_envs=2, length=0.8, masspole=0.2)
    raw = _unwrap(env)
    assert raw.length == 0.8 and raw.polemass_length == pytest.approx(0.16)
    assert raw.total_mass == pytest.approx(1.2)
    std = cartpole_task(num_envs=2)
    o1, _ = env.reset(seed=3)
    o2, _ = std.reset(seed=3)
    np.testing.assert_array_equal(o1, o2)
    a = np.array([1, 0])
    n1, n2 = env.step(a)[0], std.step(a)[0]
    assert not np.allclose(n1, n2)  # a longer, heavier pole accelerates differently


def test_flipped_actions_mirror_the_standard_env():
    flip, std = cartpole_task(flip_actions=True, num_envs=3), cartpole_task(num_envs=3)
    flip.reset(seed=0)
    std.reset(seed=0)
    a = np.array([0, 1, 1])
    np.testing.assert_array_equal(flip.step(a)[0], std.step(1 - a)[0])


def test_episode_statistics_are_recorded():
    env = cartpole_task(num_envs=2)
    env.reset(seed=0)
    seen = []
    for _ in range(200):
        _, _, _, _, info = env.step(np.array([0, 0]))
        if "_episode" in info and info["_episode"].any():
            seen += list(info["episode"]["r"][info["_episode"]])
    assert seen and all(5 <= r <= 40 for r in seen)  # always pushing left falls quickly


def test_task_sequence_names_and_errors():
    assert len(TASK_SEQUENCES["flip4"]) == 4
    with pytest.raises(ValueError, match=r"unknown task sequence 'flip5'; valid: \['flip4'\]"):
        task_sequence("flip5")
    with pytest.raises(ValueError, match="unknown CartPole physics parameter 'mass'"):
        cartpole_task(mass=1.0)
    with pytest.raises(ValueError, match="derived"):
        cartpole_task(total_mass=2.0)


def test_success_curve_bins_and_carries_forward():
    steps = [100, 150, 900, 950]
    returns = [100.0, 300.0, 250.0, 150.0]
    curve = success_curve(returns, steps, threshold=195, bins=4, total_steps=1000)
    # bin 0: mean(100, 300) = 200 >= 195 -> 1; bins 1-2 empty -> carry 1; bin 3: mean(250, 150) = 200 -> 1
    np.testing.assert_array_equal(curve, [1, 1, 1, 1])
    curve = success_curve([10.0, 300.0], [100, 600], threshold=195, bins=4, total_steps=1000)
    np.testing.assert_array_equal(curve, [0, 0, 1, 1])
    assert auc(curve) == 0.5


def test_forward_transfer_average_and_forgetting():
    assert forward_transfer(0.75, 0.5) == pytest.approx(0.5)
    assert forward_transfer(0.25, 0.5) == pytest.approx(-0.5)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert np.isnan(forward_transfer(0.8, 1.0))
    assert any(issubclass(x.category, RuntimeWarning) for x in w)
    assert average_performance([1.0, 0.5]) == 0.75
    np.testing.assert_allclose(forgetting(np.array([1.0, 0.8]), np.array([0.5, 0.8])), [0.5, 0.0])


def test_non_discrete_env_is_rejected():
    from eff_rl.cka_rl import CKAPolicy
    from eff_rl.ppo import ContinualPPO, train_sequence

    def continuous(n):
        return gymnasium.make_vec("MountainCarContinuous-v0", num_envs=n, vectorization_mode="sync")

    with pytest.raises(TypeError, match="Discrete"):
        ContinualPPO(continuous, CKAPolicy(2, 1))
    with pytest.raises(TypeError, match="Discrete"):
        train_sequence([continuous], "finetune", 1000, seed=0)


def test_flip4_task_definitions():
    """T0 standard; T1 flipped; T2 half pole length 0.8 (gymnasium's ``length`` is the half
    length, default 0.5); T3 flipped with length 0.8. The flip acts on the agent's actions."""
    from eff_rl.envs import FlipActions

    expected = [(False, 0.5), (True, 0.5), (False, 0.8), (True, 0.8)]
    for task, (flip, length) in zip(TASK_SEQUENCES["flip4"], expected, strict=True):
        env = task(2)
        raw = _unwrap(env)
        assert isinstance(env, FlipActions) is flip
        assert raw.length == length and raw.polemass_length == pytest.approx(0.1 * length)
        assert raw.total_mass == pytest.approx(1.1) and raw.masspole == 0.1
        std = cartpole_task(num_envs=2, length=length)
        env.reset(seed=5)
        std.reset(seed=5)
        a = np.array([0, 1])
        np.testing.assert_array_equal(env.step(a)[0], std.step(1 - a if flip else a)[0])
