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


def _record_tasks(monkeypatch):
    """Record the policy's state at the start and end of every task, and every Adam created."""
    starts, ends, adams = [], [], []
    orig_learn = ContinualPPO.learn

    def state(policy):
        return {k: v.detach().clone() for k, v in policy.state_dict().items()}

    def learn(self, total_timesteps):
        starts.append(state(self.policy))
        curve = orig_learn(self, total_timesteps)
        ends.append(state(self.policy))
        return curve

    class RecordingAdam(torch.optim.Adam):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.first_lr = None
            adams.append(self)

        def step(self, *a, **kw):
            if self.first_lr is None:
                self.first_lr = self.param_groups[0]["lr"]
            return super().step(*a, **kw)

    monkeypatch.setattr(ContinualPPO, "learn", learn)
    monkeypatch.setattr(torch.optim, "Adam", RecordingAdam)
    return starts, ends, adams


def _part(state, prefix):
    return {k: v for k, v in state.items() if k.startswith(prefix)}


def _same(a, b):
    return bool(a) and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["finetune", "cka_rl", "scratch"])
def test_what_each_method_carries_into_the_next_task(monkeypatch, method):
    starts, ends, adams = _record_tasks(monkeypatch)
    train_sequence(TASKS[:3], method, 256, seed=2, **SMALL)
    assert len(starts) == len(ends) == 3
    for k in (1, 2):
        start, prev_end = starts[k], ends[k - 1]
        # every method starts task k >= 1 with a new critic (official: load_critic=False)
        assert not _same(_part(start, "critic."), _part(prev_end, "critic."))
        # the encoder is fine-tuned sequentially by fine-tune and CKA-RL, fresh for scratch
        assert _same(_part(start, "encoder."), _part(prev_end, "encoder.")) is (method != "scratch")
        actor = _part(start, "fc1.weight") | _part(start, "fc2.weight")
        if method == "finetune":  # the actor is carried over
            assert _same(actor, _part(prev_end, "fc1.weight") | _part(prev_end, "fc2.weight"))
        if method == "cka_rl":  # θ restarts from θ_base (the end of task 0), not from θ_{k-1}
            for key in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
                assert torch.equal(start[key], ends[0][key])
            assert k == 1 or not torch.equal(start["fc1.weight"], prev_end["fc1.weight"])
    # one fresh Adam per task with the lr schedule restarted; α/s's own Adam only at task 2
    main = [a for a in adams if len(a.param_groups[0]["params"]) > 2]
    assert len(main) == 3 and all(a.first_lr == pytest.approx(1e-3) for a in main)
    assert len(adams) - len(main) == (1 if method == "cka_rl" else 0)


def test_finetune_and_cka_rl_get_the_same_fresh_critic_and_carrying_it_is_an_option(monkeypatch):
    starts, ends, _ = _record_tasks(monkeypatch)
    for method in ("finetune", "cka_rl"):
        train_sequence(TASKS[:2], method, 256, seed=2, **SMALL)
    train_sequence(TASKS[:2], "finetune", 256, seed=2, finetune_reset_critic=False, **SMALL)
    ft, cka, carry = starts[1], starts[3], starts[5]
    assert _same(_part(ft, "critic."), _part(cka, "critic."))
    assert _same(_part(carry, "critic."), _part(ends[4], "critic."))


def test_critic_is_a_separate_network_on_the_observation():
    torch.manual_seed(0)
    pol = CKAPolicy(4, 2, width=8)
    obs = torch.randn(6, 4)
    pol.value(obs).sum().backward()
    assert all(p.grad is None for p in pol.encoder.parameters())
    assert all(p.grad is None for p in (pol.fc1.weight, pol.fc2.weight))
    pol.zero_grad(set_to_none=True)
    pol.logits(obs).sum().backward()
    assert all(p.grad is None for p in pol.critic.parameters())
    assert pol.critic[0].in_features == 4
