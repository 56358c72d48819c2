import numpy as np
import pytest
import torch

from eff_rl.cka_rl import CKAPolicy
from eff_rl.envs import TASK_SEQUENCES, cartpole_task
from eff_rl.ppo import ContinualPPO, train_sequence

TASKS = TASK_SEQUENCES["flip4"]
SMALL = dict(n_envs=2, n_steps=64, n_minibatches=2, n_epochs=2, eval_episodes=2)


def _equal_runs(a, b):
    assert len(a.tasks) == len(b.tasks)
    for x, y in zip(a.tasks, b.tasks, strict=True):
        assert x.curve.episode_returns == y.curve.episode_returns
        assert x.curve.losses == y.curve.losses
        assert x.eval_returns == y.eval_returns
        assert x.mixing_weights == y.mixing_weights
    assert a.eval_after_last == b.eval_after_last


def test_same_seed_same_curves_and_different_seed_differs():
    a = train_sequence(TASKS[:2], "cka_rl", 512, seed=3, **SMALL)
    b = train_sequence(TASKS[:2], "cka_rl", 512, seed=3, **SMALL)
    c = train_sequence(TASKS[:2], "cka_rl", 512, seed=4, **SMALL)
    _equal_runs(a, b)
    assert a.tasks[0].curve.losses != c.tasks[0].curve.losses


@pytest.mark.parametrize("method", ["cka_rl", "finetune", "scratch"])
def test_resume_from_checkpoint_continues_identically(tmp_path, method):
    full = train_sequence(
        TASKS, method, 256, seed=1, pool_size=2, checkpoint_dir=tmp_path / "full", **SMALL
    )
    train_sequence(
        TASKS,
        method,
        256,
        seed=1,
        pool_size=2,
        checkpoint_dir=tmp_path / "part",
        stop_after=1,
        **SMALL,
    )
    resumed = train_sequence(
        TASKS,
        method,
        256,
        seed=1,
        pool_size=2,
        resume_from=tmp_path / "part" / "task1.safetensors",
        **SMALL,
    )
    _equal_runs(full, resumed)
    assert (tmp_path / "full" / "task3.safetensors").exists()


def test_cka_pool_sizes_critic_reset_and_encoder_carry_over():
    res = train_sequence(TASKS, "cka_rl", 256, seed=0, pool_size=2, **SMALL)
    assert [t.pool_size for t in res.tasks] == [0, 1, 2, 2]
    assert res.tasks[3].merged  # the pool was over capacity at T3
    assert res.tasks[1].mixing_weights == [1.0]
    assert len(res.tasks[2].mixing_weights) == 2
    assert res.tasks[3].pool_bytes == 2 * (64 * 64 + 64 + 64 * 2 + 2) * 4


def test_total_timesteps_and_argument_errors():
    pol = CKAPolicy(4, 2)
    ppo = ContinualPPO(lambda n: cartpole_task(num_envs=n), pol, n_envs=2, n_steps=64)
    with pytest.raises(
        ValueError, match=r"total_timesteps \(100\) must be >= n_envs \* n_steps \(128\)"
    ):
        ppo.learn(100)
    with pytest.raises(ValueError, match="n_envs"):
        ContinualPPO(lambda n: cartpole_task(num_envs=n), pol, n_envs=0)
    with pytest.raises(
        ValueError, match=r"method must be one of \['scratch', 'finetune', 'cka_rl'\]"
    ):
        train_sequence(TASKS, "ewc", 256, seed=0)  # type: ignore[arg-type]


def test_ppo_learns_cartpole():
    torch.manual_seed(0)
    pol = CKAPolicy(4, 2)
    curve = ContinualPPO(
        lambda n: cartpole_task(num_envs=n), pol, n_envs=4, n_steps=128, seed=0
    ).learn(20_000)
    first, last = np.mean(curve.episode_returns[:20]), np.mean(curve.episode_returns[-20:])
    assert last > 3 * first and last > 100
