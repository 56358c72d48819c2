"""eff-rl: Continual reinforcement learning on gymnasium: CKA-RL (continual knowledge adaptation with a pool of knowledge vectors).

``eff_rl.cka_rl`` holds the method (``FuseLinear``, ``KnowledgePool``, ``CKAPolicy``),
``eff_rl.ppo`` the CleanRL-style PPO and the task-sequence driver, ``eff_rl.envs`` the task
families and ``eff_rl.metrics`` the continual-RL metrics.
"""

from importlib.metadata import version as _version

__version__ = _version("eff-rl")

from eff_rl.cka_rl import CKAPolicy, FuseLinear, KnowledgePool
from eff_rl.envs import TASK_SEQUENCES, cartpole_task
from eff_rl.metrics import auc, average_performance, forgetting, forward_transfer, success_curve
from eff_rl.ppo import (
    ContinualPPO,
    PPOConfig,
    SequenceResult,
    evaluate_greedy,
    load_policy,
    save_policy,
    train_sequence,
)

__all__ = [
    "TASK_SEQUENCES",
    "CKAPolicy",
    "ContinualPPO",
    "FuseLinear",
    "KnowledgePool",
    "PPOConfig",
    "SequenceResult",
    "auc",
    "average_performance",
    "cartpole_task",
    "evaluate_greedy",
    "forgetting",
    "forward_transfer",
    "load_policy",
    "save_policy",
    "success_curve",
    "train_sequence",
]
