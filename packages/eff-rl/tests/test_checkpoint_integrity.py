"""A CKA-RL checkpoint carries a sha256 of its contents: a corrupted file never resumes silently."""

from pathlib import Path

import pytest

from eff_rl.envs import TASK_SEQUENCES
from eff_rl.ppo import train_sequence

TASKS = TASK_SEQUENCES["flip4"]
SMALL = dict(n_envs=2, n_steps=64, n_minibatches=2, n_epochs=2, eval_episodes=2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ckpt")
    train_sequence(TASKS, "cka_rl", 128, seed=0, checkpoint_dir=out, stop_after=0, **SMALL)
    return out / "task0.safetensors"


def _resume(path: Path):
    return train_sequence(TASKS[:2], "cka_rl", 128, seed=0, resume_from=path, **SMALL)


def test_an_intact_checkpoint_resumes(checkpoint):
    assert len(_resume(checkpoint).tasks) == 2


def test_one_flipped_byte_in_the_weights_is_caught_naming_the_file(checkpoint, tmp_path):
    data = bytearray(checkpoint.read_bytes())
    data[-5] ^= 0x01  # the tensor payload is at the end of a safetensors file
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"flipped\.safetensors: checkpoint is corrupted"):
        _resume(bad)


@pytest.mark.parametrize("content", ["truncated", "random"])
def test_unreadable_files_raise_naming_the_file(checkpoint, tmp_path, content):
    raw = checkpoint.read_bytes()
    bad = tmp_path / f"{content}.safetensors"
    bad.write_bytes(raw[: len(raw) // 2] if content == "truncated" else bytes(range(256)) * 4)
    with pytest.raises(ValueError, match=rf"{content}\.safetensors: not a readable"):
        _resume(bad)


def test_a_missing_checkpoint_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _resume(tmp_path / "nope.safetensors")


def test_policy_and_ppo_save_load_round_trip(tmp_path):
    """save/load like SB3: the loaded CKA-RL policy (with a pool) gives the same actions and
    logits; a loaded ContinualPPO keeps its hyperparameters and keeps learning."""
    import numpy as np
    import torch

    from eff_rl.envs import cartpole_task
    from eff_rl.ppo import ContinualPPO, load_policy, save_policy

    res_dir = tmp_path / "seq"
    train_sequence(TASKS[:3], "cka_rl", 128, seed=2, checkpoint_dir=res_dir, stop_after=1, **SMALL)
    from eff_rl.ppo import _load_checkpoint

    st, _ = _load_checkpoint(res_dir / "task1.safetensors", 4, 2)
    policy = st.policy
    assert policy.fc1.n_vectors > 0  # a policy with a knowledge pool
    path = save_policy(policy, tmp_path / "policy.safetensors")
    back = load_policy(path)
    obs = torch.randn(16, 4)
    with torch.no_grad():
        assert torch.equal(back.logits(obs), policy.logits(obs))
        assert torch.equal(back.critic(obs), policy.critic(obs))
    assert back.has_base == policy.has_base

    ppo = ContinualPPO(lambda n: cartpole_task(num_envs=n), back, n_envs=2, n_steps=32, lr=3e-4)
    saved = ppo.save(tmp_path / "ppo.safetensors")
    again = ContinualPPO.load(saved, lambda n: cartpole_task(num_envs=n), seed=5)
    assert again.config.lr == 3e-4 and again.config.n_steps == 32 and again.config.seed == 5
    o = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    np.testing.assert_array_equal(again.predict(o), ppo.predict(o))
    assert again.learn(64).env_steps >= 64
    with pytest.raises(ValueError, match="a policy file, not a ContinualPPO"):
        ContinualPPO.load(path, lambda n: cartpole_task(num_envs=n))
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    (tmp_path / "bad.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"bad\.safetensors: policy file is corrupted"):
        load_policy(tmp_path / "bad.safetensors")
    with pytest.raises(TypeError, match="policy must be a CKAPolicy"):
        save_policy(torch.nn.Linear(2, 2), tmp_path / "x.safetensors")  # type: ignore[arg-type]
