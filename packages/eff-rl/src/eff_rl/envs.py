"""Task families for continual RL: physics and action-flip variants of gymnasium's vectorised CartPole.

``CartPoleVectorEnv`` steps every sub-environment in numpy (no per-env Python objects), so a task
variant is just a set of attribute overrides. Its ``step`` uses the derived ``polemass_length``
(= masspole·length) and ``total_mass`` (= masspole + masscart) computed once in ``__init__``: an
override of ``length``, ``masspole`` or ``masscart`` must recompute them, which
:func:`cartpole_task` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

__all__ = ["TASK_SEQUENCES", "FlipActions", "Task", "cartpole_task", "task_sequence"]

_PHYSICS = ("gravity", "masscart", "masspole", "length", "force_mag", "tau")
_DERIVED = ("polemass_length", "total_mass")


class FlipActions(gymnasium.vector.VectorActionWrapper):
    """Swap the two actions of a binary ``Discrete(2)`` vector env (left ↔ right)."""

    def actions(self, actions: np.ndarray) -> np.ndarray:
        return 1 - actions


def cartpole_task(
    flip_actions: bool = False, num_envs: int = 8, max_episode_steps: int = 500, **physics: float
) -> gymnasium.vector.VectorEnv:
    """A CartPole vector env with physics overrides, episode statistics and optional flipped actions.

    ``physics`` may set any of ``gravity, masscart, masspole, length, force_mag, tau`` (``length`` is
    half the pole length, as in gymnasium). Episode returns are in ``info["episode"]["r"]`` where
    ``info["_episode"]`` is true.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    env = CartPoleVectorEnv(num_envs=num_envs, max_episode_steps=max_episode_steps)
    for name, value in physics.items():
        if name in _DERIVED:
            raise ValueError(
                f"{name} is derived from the other physics parameters; set {_PHYSICS} instead"
            )
        if name not in _PHYSICS:
            raise ValueError(
                f"unknown CartPole physics parameter {name!r}; valid: {list(_PHYSICS)}"
            )
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        setattr(env, name, float(value))
    env.total_mass = env.masspole + env.masscart
    env.polemass_length = env.masspole * env.length
    wrapped: gymnasium.vector.VectorEnv = RecordEpisodeStatistics(env)
    if flip_actions:
        wrapped = FlipActions(wrapped)
    return wrapped


@dataclass(frozen=True)
class Task:
    """A named env factory: ``task(num_envs)`` builds the task's vector env."""

    name: str
    flip_actions: bool = False
    physics: dict[str, float] = field(default_factory=dict)

    def __call__(self, num_envs: int = 8) -> gymnasium.vector.VectorEnv:
        return cartpole_task(self.flip_actions, num_envs, **self.physics)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "flip_actions": self.flip_actions, **self.physics}


# flip4 (spec): consecutive tasks conflict (flipped actions) and T2 resembles T0, so a pool that
# can recall θ_0 should transfer forward while plain fine-tuning transfers negatively.
TASK_SEQUENCES: dict[str, list[Callable[..., gymnasium.vector.VectorEnv]]] = {
    "flip4": [
        Task("T0 standard"),
        Task("T1 flipped", flip_actions=True),
        Task("T2 length 0.8", physics={"length": 0.8}),
        Task("T3 flipped, length 0.8", flip_actions=True, physics={"length": 0.8}),
    ],
}


def task_sequence(name: str) -> list[Callable[..., gymnasium.vector.VectorEnv]]:
    if name not in TASK_SEQUENCES:
        raise ValueError(f"unknown task sequence {name!r}; valid: {sorted(TASK_SEQUENCES)}")
    return TASK_SEQUENCES[name]
