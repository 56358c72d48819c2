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
