"""A CleanRL-style PPO that trains one policy over a *sequence* of tasks, and the sequence driver.

Single-file PPO in CleanRL's vocabulary (``ppo.py``: GAE, clipped surrogate and value loss,
advantage normalisation, linear lr annealing, global gradient clipping), adapted to gymnasium 1.x
vector envs whose autoreset mode is ``NEXT_STEP``: the step after an episode ends only resets that
sub-env and ignores its action, so that transition is masked out of the loss and GAE is cut at
every episode end (a truncated episode still bootstraps from its real final observation).

:func:`train_sequence` runs one method over a task sequence: ``"scratch"`` (fresh networks per
task), ``"finetune"`` (encoder and actor carried over; the critic re-initialised per task, as the
official Finetune agent is loaded with ``load_critic=False``) or ``"cka_rl"`` (CKA-RL,
:mod:`eff_rl.cka_rl`; encoder carried over, θ restarted from θ_base, critic re-initialised). Every
task gets a fresh Adam state and restarts the linear lr schedule (one ``run_ppo.py`` process per
task in the release).
Every task's randomness (env resets, critic/network init, action sampling, minibatch order) derives
from ``(seed, task index)``, so a run resumed from the checkpoint after task k continues exactly as
the uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from eff_rl.cka_rl import CKAPolicy, KnowledgePool
from eff_shared.progress import track
from eff_shared.seeding import derive_seed, make_rng

__all__ = [
    "METHODS",
    "ContinualPPO",
    "Curve",
    "SequenceResult",
    "TaskRecord",
    "evaluate_greedy",
    "load_policy",
    "save_policy",
    "train_sequence",
]

METHODS = ("scratch", "finetune", "cka_rl")
Method = Literal["scratch", "finetune", "cka_rl"]
EnvFn = Callable[..., gymnasium.vector.VectorEnv]


@dataclass
class Curve:
    """Training trace of one task: finished episodes (step, return) and per-update losses."""

    episode_steps: list[int] = field(default_factory=list)
    episode_returns: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    env_steps: int = 0
    seconds: float = 0.0


class ContinualPPO:
    """PPO (Schulman et al. 2017) in the CleanRL style for one task of a continual sequence.

    The policy's α and s (CKA-RL) get their own Adam at ``alpha_lr`` when ``train_alpha`` is true;
    both learning rates anneal linearly to 0 over ``learn`` (the official code anneals both), and
    gradients of all parameters are clipped jointly at ``max_grad_norm``.
    """

    def __init__(
        self,
        env_fn: EnvFn,
        policy: CKAPolicy,
        *,
        lr: float = 1e-3,
        alpha_lr: float = 1e-3,
        n_envs: int = 8,
        n_steps: int = 128,
        n_epochs: int = 4,
        n_minibatches: int = 4,
        clip_coef: float = 0.2,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        max_grad_norm: float = 0.5,
        anneal_lr: bool = True,
        train_alpha: bool = False,
        seed: int = 0,
    ) -> None:
        for name, v in (
            ("n_envs", n_envs),
            ("n_steps", n_steps),
            ("n_epochs", n_epochs),
            ("n_minibatches", n_minibatches),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        for name, v in (
            ("lr", lr),
            ("alpha_lr", alpha_lr),
            ("clip_coef", clip_coef),
            ("max_grad_norm", max_grad_norm),
        ):
            if not v > 0:
                raise ValueError(f"{name} must be > 0, got {v!r}")
        self.env = env_fn(n_envs)
        if not isinstance(self.env.single_action_space, gymnasium.spaces.Discrete):
            raise TypeError(
                f"ContinualPPO needs a Discrete action space, got {self.env.single_action_space}"
            )
        self.policy = policy
        self.lr, self.alpha_lr = lr, alpha_lr
        self.n_envs, self.n_steps, self.n_epochs, self.n_minibatches = (
            n_envs,
            n_steps,
            n_epochs,
            n_minibatches,
        )
        self.clip_coef, self.ent_coef, self.vf_coef = clip_coef, ent_coef, vf_coef
        self.gamma, self.gae_lambda, self.max_grad_norm = gamma, gae_lambda, max_grad_norm
        self.anneal_lr, self.train_alpha, self.seed = anneal_lr, train_alpha, seed

    def learn(self, total_timesteps: int) -> Curve:
        batch = self.n_envs * self.n_steps
        if total_timesteps < batch:
            raise ValueError(
                f"total_timesteps ({total_timesteps}) must be >= n_envs * n_steps ({batch})"
            )
        n_updates = total_timesteps // batch
        policy, dev = self.policy, self.policy.fc1.weight.device
        alpha_ids = {id(p) for p in policy.alpha_parameters()}
        main_params = [p for p in policy.parameters() if p.requires_grad and id(p) not in alpha_ids]
        opt = torch.optim.Adam(main_params, lr=self.lr, eps=1e-5)
        alpha_opt = (
            torch.optim.Adam(policy.alpha_parameters(), lr=self.alpha_lr, eps=1e-5)
            if self.train_alpha
            else None
        )
        gen = torch.Generator().manual_seed(self.seed)
        rng = make_rng(self.seed, 1)

        n, t_steps = self.n_envs, self.n_steps
        obs_buf = torch.zeros(t_steps, n, policy.obs_dim, device=dev)
        act_buf = torch.zeros(t_steps, n, dtype=torch.long, device=dev)
        logp_buf = torch.zeros(t_steps, n, device=dev)
        val_buf = torch.zeros(t_steps, n, device=dev)
        rew_buf = torch.zeros(t_steps, n, device=dev)
        term_buf = torch.zeros(t_steps, n, device=dev)
        done_buf = torch.zeros(t_steps, n, device=dev)
        valid_buf = torch.zeros(t_steps, n, dtype=torch.bool, device=dev)

        curve = Curve()
        start = time.perf_counter()
        obs_np, _ = self.env.reset(seed=self.seed)
        obs = torch.as_tensor(obs_np, device=dev)
        prev_done = np.zeros(n, dtype=bool)
        step = 0
        for update in track(range(n_updates), "PPO (updates)"):
            if self.anneal_lr:
                frac = 1.0 - update / n_updates
                opt.param_groups[0]["lr"] = frac * self.lr
                if alpha_opt is not None:
                    alpha_opt.param_groups[0]["lr"] = frac * self.alpha_lr
            with policy.frozen_weights():  # the pool mix is constant during a rollout
                for t in range(t_steps):
                    step += n
                    with torch.no_grad():
                        logits, value = policy(obs)
                        probs = torch.softmax(logits, dim=-1)
                        action = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                        logp = torch.log_softmax(logits, -1).gather(-1, action[:, None]).squeeze(-1)
                    obs_buf[t], act_buf[t], logp_buf[t], val_buf[t] = obs, action, logp, value
                    valid_buf[t] = torch.as_tensor(
                        ~prev_done, device=dev
                    )  # reset steps ignore the action
                    obs_np, reward, term, trunc, info = self.env.step(action.cpu().numpy())
                    done = np.logical_or(term, trunc)
                    rew_buf[t] = torch.as_tensor(reward, device=dev)
                    term_buf[t] = torch.as_tensor(term, dtype=torch.float32, device=dev)
                    done_buf[t] = torch.as_tensor(done, dtype=torch.float32, device=dev)
                    prev_done = done
                    obs = torch.as_tensor(obs_np, device=dev)
                    if "_episode" in info:
                        for r in np.asarray(info["episode"]["r"])[info["_episode"]]:
                            curve.episode_steps.append(step)
                            curve.episode_returns.append(float(r))
            with torch.no_grad():
                next_value = policy.value(obs)
                adv = torch.zeros_like(rew_buf)
                last = torch.zeros(n, device=dev)
                for t in reversed(range(t_steps)):
                    # obs_{t+1} is the real final observation when step t ended an episode (NEXT_STEP
                    # autoreset), so truncations bootstrap correctly; terminations do not bootstrap.
                    nv = next_value if t == t_steps - 1 else val_buf[t + 1]
                    delta = rew_buf[t] + self.gamma * nv * (1.0 - term_buf[t]) - val_buf[t]
                    # the transition after an episode end is the ignored reset step: cut the trace
                    last = delta + self.gamma * self.gae_lambda * (1.0 - done_buf[t]) * last
                    adv[t] = last
                returns = adv + val_buf

            idx = torch.nonzero(valid_buf.flatten()).squeeze(-1).cpu().numpy()
            b_obs = obs_buf.reshape(-1, policy.obs_dim)
            b_act, b_logp = act_buf.flatten(), logp_buf.flatten()
            b_adv, b_ret, b_val = adv.flatten(), returns.flatten(), val_buf.flatten()
            losses = []
            for _ in range(self.n_epochs):
                for mb in np.array_split(rng.permutation(idx), self.n_minibatches):
                    if mb.size < 2:
                        continue
                    mbt = torch.as_tensor(mb, device=dev)
                    logits, value = policy(b_obs[mbt])
                    logp_all = torch.log_softmax(logits, -1)
                    new_logp = logp_all.gather(-1, b_act[mbt, None]).squeeze(-1)
                    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
                    ratio = (new_logp - b_logp[mbt]).exp()
                    a = b_adv[mbt]
                    a = (a - a.mean()) / (a.std() + 1e-8)
                    pg_loss = torch.max(
                        -a * ratio, -a * ratio.clamp(1 - self.clip_coef, 1 + self.clip_coef)
                    ).mean()
                    v_clipped = b_val[mbt] + (value - b_val[mbt]).clamp(
                        -self.clip_coef, self.clip_coef
                    )
                    v_loss = (
                        0.5
                        * torch.max((value - b_ret[mbt]) ** 2, (v_clipped - b_ret[mbt]) ** 2).mean()
                    )
                    loss = pg_loss - self.ent_coef * entropy + self.vf_coef * v_loss
                    opt.zero_grad()
                    if alpha_opt is not None:
                        alpha_opt.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(list(policy.parameters()), self.max_grad_norm)
                    opt.step()
                    if alpha_opt is not None:
                        alpha_opt.step()
                    losses.append(loss.item())
            curve.losses.append(float(np.mean(losses)) if losses else float("nan"))
        curve.env_steps = step
        curve.seconds = time.perf_counter() - start
        self.env.close()
        return curve

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        return predict(self.policy, obs, deterministic)

    _HYPER = (
        "lr", "alpha_lr", "n_envs", "n_steps", "n_epochs", "n_minibatches", "clip_coef",
        "ent_coef", "vf_coef", "gamma", "gae_lambda", "max_grad_norm", "anneal_lr",
        "train_alpha", "seed",
    )  # fmt: skip

    def save(self, path: str | Path) -> Path:
        """Save the policy and the PPO hyperparameters (safetensors with a sha256), like SB3's
        ``model.save``; :meth:`load` rebuilds the agent on an environment factory."""
        return save_policy(
            self.policy, path, extra={"ppo": json.dumps({k: getattr(self, k) for k in self._HYPER})}
        )

    @classmethod
    def load(cls, path: str | Path, env_fn: EnvFn, **overrides: Any) -> ContinualPPO:
        """An agent saved with :meth:`save` on ``env_fn``; ``overrides`` replace saved settings."""
        policy, meta = _load_policy(Path(path))
        if "ppo" not in meta:
            raise ValueError(f"{path}: a policy file, not a ContinualPPO (use load_policy)")
        return cls(env_fn, policy, **{**json.loads(meta["ppo"]), **overrides})


def save_policy(
    policy: CKAPolicy, path: str | Path, *, extra: dict[str, str] | None = None
) -> Path:
    """Write a :class:`CKAPolicy` (actor, critic, knowledge pool buffers, α, s) as safetensors
    with its constructor arguments and a sha256 of the contents (verified by :func:`load_policy`).
    A policy with a custom encoder module cannot be rebuilt from the file alone: pass the same
    encoder to :func:`load_policy`."""
    if not isinstance(policy, CKAPolicy):
        raise TypeError(f"policy must be a CKAPolicy, got {type(policy).__name__}")
    path = Path(path)
    tensors = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
    meta = {
        "format": "eff-rl policy 1",
        "obs_dim": str(policy.obs_dim),
        "n_actions": str(policy.n_actions),
        "width": str(policy.width),
        "alpha_init": policy.alpha_init,
        "alpha_major": repr(policy.alpha_major),
        "has_base": str(bool(policy.has_base)),
        **(extra or {}),
    }
    meta["sha256"] = _digest(tensors, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=meta)
    return path


def load_policy(path: str | Path, *, encoder: nn.Module | None = None) -> CKAPolicy:
    """A :class:`CKAPolicy` saved by :func:`save_policy` (or :meth:`ContinualPPO.save`); the
    same outputs as the saved one. Raises naming the file when it is missing or corrupted."""
    return _load_policy(Path(path), encoder)[0]


def _read_verified(path: Path, what: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of an eff-rl safetensors file whose recorded sha256 matches; every
    failure names the file (safetensors' own errors do not)."""
    from safetensors import safe_open

    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
        tensors = load_file(str(path))
    except Exception as exc:
        raise ValueError(f"{path}: not a readable safetensors {what} ({exc})") from exc
    if "sha256" not in meta:
        raise ValueError(f"{path}: no integrity record (sha256); not an eff-rl {what}")
    if _digest(tensors, meta) != meta["sha256"]:
        raise ValueError(f"{path}: {what} is corrupted (sha256 mismatch)")
    return tensors, meta


def _load_policy(path: Path, encoder: nn.Module | None = None) -> tuple[CKAPolicy, dict[str, str]]:
    tensors, meta = _read_verified(path, "policy file")
    if meta.get("format") != "eff-rl policy 1":
        raise ValueError(f"{path}: not an eff-rl policy file")
    policy = CKAPolicy(
        int(meta["obs_dim"]),
        int(meta["n_actions"]),
        width=int(meta["width"]),
        encoder=encoder,
        alpha_init=meta["alpha_init"],  # type: ignore[arg-type]
        alpha_major=float(meta["alpha_major"]),
    )
    _resize_like(policy, tensors)
    policy.load_state_dict(tensors)
    policy.has_base = meta["has_base"] == "True"
    return policy, meta


def predict(
    policy: CKAPolicy,
    obs: np.ndarray,
    deterministic: bool = True,
    gen: torch.Generator | None = None,
) -> np.ndarray:
    with torch.no_grad():
        logits = policy.logits(
            torch.as_tensor(np.asarray(obs, dtype=np.float32), device=policy.fc1.weight.device)
        )
        if deterministic:
            return logits.argmax(-1).cpu().numpy()
        return (
            torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(-1).cpu().numpy()
        )


def evaluate_greedy(
    policy: CKAPolicy, env_fn: EnvFn, episodes: int = 10, seed: int = 0
) -> list[float]:
    """Returns of ``episodes`` greedy episodes (one per sub-env, each its first episode)."""
    env = env_fn(episodes)
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        obs, reward, term, trunc, _ = env.step(predict(policy, obs))
        returns += np.where(finished, 0.0, reward)
        finished |= np.logical_or(term, trunc)
    env.close()
    return returns.tolist()


@dataclass
class TaskRecord:
    task: int
    curve: Curve
    eval_returns: list[float]
    pool_size: int = 0
    pool_bytes: int = 0
    mixing_weights: list[float] = field(default_factory=list)
    merged: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class SequenceResult:
    method: str
    seed: int
    tasks: list[TaskRecord]
    eval_after_last: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _init_policy(
    obs_dim: int, n_actions: int, seed: int, task: int, **policy_kwargs: Any
) -> CKAPolicy:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, 10, task))
        return CKAPolicy(obs_dim, n_actions, **policy_kwargs)


def _fresh_critic(policy: CKAPolicy, seed: int, task: int) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, 11, task))
        policy.reset_critic()


@dataclass
class _State:
    policy: CKAPolicy
    pool: KnowledgePool
    base: dict[str, torch.Tensor] | None
    snapshots: list[dict[str, torch.Tensor]]  # per task: θ_j, α_j, s_j, pool_j (for forgetting)
    records: list[TaskRecord]


def _snapshot(policy: CKAPolicy) -> dict[str, torch.Tensor]:
    """What identifies the task-specific actor: θ, α, s and the pool buffers."""
    keep = ("fc1.", "fc2.", "alpha", "alpha_scale")
    return {k: v.detach().clone() for k, v in policy.state_dict().items() if k.startswith(keep)}


def _load_snapshot(policy: CKAPolicy, snap: dict[str, torch.Tensor]) -> None:
    _resize_like(policy, snap)
    policy.load_state_dict(snap, strict=False)


def _resize_like(policy: CKAPolicy, state: dict[str, torch.Tensor]) -> None:
    """Give the pool buffers and α the shapes found in ``state`` before ``load_state_dict``."""
    for name, layer in policy.fused_layers().items():
        for key in ("tau_weight", "tau_bias"):
            full = f"{name}.{key}"
            if full in state and getattr(layer, key) is not None:
                setattr(layer, key, torch.zeros_like(state[full]))
    if "alpha" in state:
        policy.alpha = nn.Parameter(torch.zeros_like(state["alpha"]))


def _save_checkpoint(path: Path, st: _State, method: str, seed: int, task: int) -> None:
    tensors: dict[str, torch.Tensor] = {
        f"policy.{k}": v.contiguous() for k, v in st.policy.state_dict().items()
    }
    tensors |= {f"pool.{k}": v.contiguous() for k, v in st.pool.state_dict().items()}
    if st.base is not None:
        tensors |= {f"base.{k}": v.contiguous() for k, v in st.base.items()}
    for j, snap in enumerate(st.snapshots):
        tensors |= {f"snap.{j}.{k}": v.contiguous() for k, v in snap.items()}
    meta = {
        "method": method,
        "seed": str(seed),
        "task": str(task),
        "records": json.dumps([asdict(r) for r in st.records]),
        "pool_size": str(st.pool.pool_size),
        "merge_scope": st.pool.merge_scope,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    cpu = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    meta["sha256"] = _digest(cpu, meta)
    save_file(cpu, str(path), metadata=meta)


def _digest(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> str:
    """sha256 over every tensor (name, dtype, shape, bytes) and the metadata: safetensors itself
    has no checksum, so a flipped byte would otherwise load and train on silently."""
    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    h.update(json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode())
    return h.hexdigest()


def _load_checkpoint(
    path: Path, obs_dim: int, n_actions: int, **policy_kwargs: Any
) -> tuple[_State, dict[str, str]]:
    tensors, meta = _read_verified(Path(path), "checkpoint")

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}

    policy = CKAPolicy(obs_dim, n_actions, **policy_kwargs)
    pstate = part("policy.")
    _resize_like(policy, pstate)
    policy.load_state_dict(pstate)
    pool = KnowledgePool(int(meta["pool_size"]), merge_scope=meta["merge_scope"])  # type: ignore[arg-type]
    pool.load_state_dict(part("pool."))
    base = part("base.") or None
    n_snaps = len({k.split(".")[1] for k in tensors if k.startswith("snap.")})
    snaps = [part(f"snap.{j}.") for j in range(n_snaps)]
    records = []
    for r in json.loads(meta["records"]):
        r["curve"] = Curve(**r["curve"])
        r["merged"] = [tuple(p) for p in r["merged"]]
        records.append(TaskRecord(**r))
    return _State(policy, pool, base, snaps, records), meta


def train_sequence(
    tasks: Sequence[EnvFn],
    method: Method,
    steps_per_task: int,
    seed: int,
    pool_size: int = 3,
    *,
    merge_scope: Literal["task", "tensor"] = "task",
    eval_episodes: int = 10,
    checkpoint_dir: str | Path | None = None,
    resume_from: str | Path | None = None,
    stop_after: int | None = None,
    policy_kwargs: dict[str, Any] | None = None,
    finetune_reset_critic: bool = True,
    **ppo_kwargs: Any,
) -> SequenceResult:
    """Train ``method`` over ``tasks`` (each a factory ``env_fn(num_envs)``) and evaluate it.

    After each task: greedy evaluation (``eval_episodes`` episodes) and, with ``checkpoint_dir``, a
    safetensors checkpoint ``task{k}.safetensors``; ``resume_from`` continues from such a file;
    ``stop_after=k`` stops after task k (to test resumption). After the last task every task is
    evaluated again: scratch and fine-tune with the final network, CKA-RL with each task's stored
    θ_j, α_j, s_j and pool_j on the final encoder (our forgetting measure; encoder drift shows).
    ``finetune_reset_critic`` (default, the official protocol) gives fine-tune a fresh critic at
    every task k ≥ 1, seeded as CKA-RL's; ``False`` carries the previous task's critic over.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    if not tasks:
        raise ValueError("tasks must hold at least one task")
    policy_kwargs = dict(policy_kwargs or {})
    probe = tasks[0](1)
    if not isinstance(probe.single_action_space, gymnasium.spaces.Discrete):
        raise TypeError(f"the agent needs a Discrete action space, got {probe.single_action_space}")
    obs_dim, n_actions = (
        int(np.prod(probe.single_observation_space.shape)),
        int(probe.single_action_space.n),
    )
    probe.close()

    if resume_from is not None:
        st, meta = _load_checkpoint(Path(resume_from), obs_dim, n_actions, **policy_kwargs)
        # Task 0 is identical for every method, so its checkpoint may seed any method (same seed).
        if int(meta["seed"]) != seed or (meta["method"] != method and int(meta["task"]) != 0):
            raise ValueError(
                f"checkpoint {resume_from} is for method {meta['method']!r} and seed {meta['seed']}, "
                f"not {method!r} and seed {seed}"
            )
        st.pool = KnowledgePool(pool_size, merge_scope=merge_scope) if not len(st.pool) else st.pool
        first = int(meta["task"]) + 1
    else:
        st = _State(
            _init_policy(obs_dim, n_actions, seed, 0, **policy_kwargs),
            KnowledgePool(pool_size, merge_scope=merge_scope),
            None,
            [],
            [],
        )
        first = 0

    for k in range(first, len(tasks)):
        merged: list[tuple[int, int]] = []
        if k > 0:
            if method == "scratch":
                st.policy = _init_policy(obs_dim, n_actions, seed, k, **policy_kwargs)
            elif method == "finetune":
                if finetune_reset_critic:  # official Finetune: load(prev, load_critic=False)
                    _fresh_critic(st.policy, seed, k)
            elif method == "cka_rl":
                if st.base is None:
                    st.base = {n: t.detach().clone() for n, t in st.policy.theta().items()}
                    delta = {
                        n: torch.zeros_like(t) for n, t in st.base.items()
                    }  # task 1's pool is [0]
                else:
                    delta = st.policy.end_task(st.base)
                st.pool.add(k - 1, delta)
                merged = st.pool.merge_if_needed()
                with torch.random.fork_rng(devices=[]):  # α's randn init, reproducible per task
                    torch.manual_seed(derive_seed(seed, 15, k))
                    st.policy.begin_task(st.pool, st.base)
                _fresh_critic(st.policy, seed, k)
        ppo = ContinualPPO(
            tasks[k],
            st.policy,
            seed=derive_seed(seed, 12, k),
            train_alpha=(method == "cka_rl" and k > 1),
            **ppo_kwargs,
        )
        curve = ppo.learn(steps_per_task)
        st.snapshots.append(_snapshot(st.policy))
        st.records.append(
            TaskRecord(
                task=k,
                curve=curve,
                eval_returns=evaluate_greedy(
                    st.policy, tasks[k], eval_episodes, derive_seed(seed, 13, k)
                ),
                pool_size=len(st.pool),
                pool_bytes=st.pool.nbytes,
                mixing_weights=st.policy.mixing_weights.detach().cpu().tolist(),
                merged=merged,
            )
        )
        if checkpoint_dir is not None:
            _save_checkpoint(Path(checkpoint_dir) / f"task{k}.safetensors", st, method, seed, k)
        if stop_after is not None and k >= stop_after:
            return SequenceResult(method, seed, st.records)

    after_last = []
    final = _snapshot(st.policy)
    for j, task in enumerate(tasks):
        if method == "cka_rl":
            _load_snapshot(st.policy, st.snapshots[j])
        after_last.append(evaluate_greedy(st.policy, task, eval_episodes, derive_seed(seed, 14, j)))
    _load_snapshot(st.policy, final)
    return SequenceResult(method, seed, st.records, after_last)
