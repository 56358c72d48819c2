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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import gymnasium
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from eff_rl.cka_rl import CKAPolicy, KnowledgePool
from eff_shared.errors import check_int, check_positive, check_type
from eff_shared.progress import track
from eff_shared.seeding import derive_seed, make_rng
from eff_shared.torch import seeded

__all__ = [
    "METHODS",
    "ContinualPPO",
    "Curve",
    "PPOConfig",
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


@dataclass(frozen=True)
class PPOConfig:
    """PPO's hyper-parameters, CleanRL's ``Args`` (``ppo.py``): every one with its default."""

    lr: float = 1e-3
    """Adam learning rate of the encoder, actor and critic"""
    alpha_lr: float = 1e-3
    """Adam learning rate of CKA-RL's α and s (when ``train_alpha``)"""
    n_envs: int = 8
    """parallel sub-environments"""
    n_steps: int = 128
    """steps per sub-environment per rollout (a rollout holds ``n_envs * n_steps`` transitions)"""
    n_epochs: int = 4
    """passes over a rollout per update"""
    n_minibatches: int = 4
    """minibatches per pass"""
    clip_coef: float = 0.2
    """surrogate (and value) clipping coefficient"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """λ of the generalised advantage estimate"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip (all parameters jointly)"""
    anneal_lr: bool = True
    """anneal both learning rates linearly to 0 over ``learn``"""
    train_alpha: bool = False
    """optimise CKA-RL's α and s (their own Adam at ``alpha_lr``)"""
    seed: int = 0
    """env resets, action sampling (torch generator) and minibatch order (``make_rng(seed, 1)``)"""

    def __post_init__(self) -> None:
        for name in ("n_envs", "n_steps", "n_epochs", "n_minibatches"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum=1))
        for name in ("lr", "alpha_lr", "clip_coef", "max_grad_norm"):
            check_positive(name, getattr(self, name))


@dataclass
class _Rollout:
    """One rollout's buffers (``n_steps × n_envs``) and what carries over to the next rollout:
    the current observation, which sub-envs just finished an episode, and the env steps so far."""

    obs: torch.Tensor
    act: torch.Tensor
    logp: torch.Tensor
    val: torch.Tensor
    rew: torch.Tensor
    term: torch.Tensor
    done: torch.Tensor
    valid: torch.Tensor
    next_obs: torch.Tensor
    prev_done: np.ndarray
    step: int = 0

    @classmethod
    def empty(cls, t_steps: int, n: int, obs_dim: int, next_obs: torch.Tensor) -> _Rollout:
        dev = next_obs.device
        return cls(
            obs=torch.zeros(t_steps, n, obs_dim, device=dev),
            act=torch.zeros(t_steps, n, dtype=torch.long, device=dev),
            logp=torch.zeros(t_steps, n, device=dev),
            val=torch.zeros(t_steps, n, device=dev),
            rew=torch.zeros(t_steps, n, device=dev),
            term=torch.zeros(t_steps, n, device=dev),
            done=torch.zeros(t_steps, n, device=dev),
            valid=torch.zeros(t_steps, n, dtype=torch.bool, device=dev),
            next_obs=next_obs,
            prev_done=np.zeros(n, dtype=bool),
        )


class ContinualPPO:
    """PPO (Schulman et al. 2017) in the CleanRL style for one task of a continual sequence.

    ``ContinualPPO(env_fn, policy, PPOConfig(...))``, or the config's fields as keywords
    (``ContinualPPO(env_fn, policy, n_envs=4)``; with a config they replace its fields). The
    policy's α and s (CKA-RL) get their own Adam at ``alpha_lr`` when ``train_alpha`` is true;
    both learning rates anneal linearly to 0 over ``learn`` (the official code anneals both), and
    gradients of all parameters are clipped jointly at ``max_grad_norm``.
    """

    def __init__(
        self, env_fn: EnvFn, policy: CKAPolicy, config: PPOConfig | None = None, **kwargs: Any
    ) -> None:
        if config is None:
            config = PPOConfig(**kwargs)
        else:
            check_type("config", config, PPOConfig)
            config = replace(config, **kwargs) if kwargs else config
        self.config = config
        self.env = env_fn(config.n_envs)
        if not isinstance(self.env.single_action_space, gymnasium.spaces.Discrete):
            raise TypeError(
                f"ContinualPPO needs a Discrete action space, got {self.env.single_action_space}"
            )
        self.policy = policy

    def learn(self, total_timesteps: int) -> Curve:
        """Train for ``total_timesteps // (n_envs * n_steps)`` updates, each a rollout, its
        advantages and the clipped-surrogate epochs (CleanRL's loop, in that order)."""
        cfg = self.config
        batch = cfg.n_envs * cfg.n_steps
        if total_timesteps < batch:
            raise ValueError(
                f"total_timesteps ({total_timesteps}) must be >= n_envs * n_steps ({batch})"
            )
        n_updates = total_timesteps // batch
        opt, alpha_opt = self._optimizers()
        gen = torch.Generator().manual_seed(cfg.seed)  # action sampling
        rng = make_rng(cfg.seed, 1)  # minibatch order

        curve = Curve()
        start = time.perf_counter()
        obs_np, _ = self.env.reset(seed=cfg.seed)
        dev = self.policy.fc1.weight.device
        buf = _Rollout.empty(
            cfg.n_steps, cfg.n_envs, self.policy.obs_dim, torch.as_tensor(obs_np, device=dev)
        )
        for update in track(range(n_updates), "PPO (updates)"):
            if cfg.anneal_lr:
                frac = 1.0 - update / n_updates
                opt.param_groups[0]["lr"] = frac * cfg.lr
                if alpha_opt is not None:
                    alpha_opt.param_groups[0]["lr"] = frac * cfg.alpha_lr
            self._rollout(buf, gen, curve)
            adv, returns = self._advantages(buf)
            curve.losses.append(self._update(buf, adv, returns, rng, opt, alpha_opt))
        curve.env_steps = buf.step
        curve.seconds = time.perf_counter() - start
        self.env.close()
        return curve

    def _optimizers(self) -> tuple[torch.optim.Adam, torch.optim.Adam | None]:
        """Adam on every trainable parameter but α and s, and on α and s when ``train_alpha``."""
        policy = self.policy
        alpha_ids = {id(p) for p in policy.alpha_parameters()}
        main_params = [p for p in policy.parameters() if p.requires_grad and id(p) not in alpha_ids]
        opt = torch.optim.Adam(main_params, lr=self.config.lr, eps=1e-5)
        alpha_opt = (
            torch.optim.Adam(policy.alpha_parameters(), lr=self.config.alpha_lr, eps=1e-5)
            if self.config.train_alpha
            else None
        )
        return opt, alpha_opt

    def _rollout(self, buf: _Rollout, gen: torch.Generator, curve: Curve) -> None:
        """``n_steps`` steps of every sub-env into ``buf``, actions sampled from ``gen``; finished
        episodes go to ``curve``."""
        policy, n, dev = self.policy, self.config.n_envs, buf.next_obs.device
        with policy.frozen_weights():  # the pool mix is constant during a rollout
            for t in range(self.config.n_steps):
                buf.step += n
                with torch.no_grad():
                    logits, value = policy(buf.next_obs)
                    probs = torch.softmax(logits, dim=-1)
                    action = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                    logp = torch.log_softmax(logits, -1).gather(-1, action[:, None]).squeeze(-1)
                buf.obs[t], buf.act[t], buf.logp[t], buf.val[t] = buf.next_obs, action, logp, value
                # reset steps ignore the action
                buf.valid[t] = torch.as_tensor(~buf.prev_done, device=dev)
                obs_np, reward, term, trunc, info = self.env.step(action.cpu().numpy())
                done = np.logical_or(term, trunc)
                buf.rew[t] = torch.as_tensor(reward, device=dev)
                buf.term[t] = torch.as_tensor(term, dtype=torch.float32, device=dev)
                buf.done[t] = torch.as_tensor(done, dtype=torch.float32, device=dev)
                buf.prev_done = done
                buf.next_obs = torch.as_tensor(obs_np, device=dev)
                if "_episode" in info:
                    for r in np.asarray(info["episode"]["r"])[info["_episode"]]:
                        curve.episode_steps.append(buf.step)
                        curve.episode_returns.append(float(r))

    def _advantages(self, buf: _Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE advantages and returns of the rollout in ``buf``."""
        cfg, t_steps = self.config, self.config.n_steps
        with torch.no_grad():
            next_value = self.policy.value(buf.next_obs)
            adv = torch.zeros_like(buf.rew)
            last = torch.zeros(cfg.n_envs, device=buf.rew.device)
            for t in reversed(range(t_steps)):
                # obs_{t+1} is the real final observation when step t ended an episode (NEXT_STEP
                # autoreset), so truncations bootstrap correctly; terminations do not bootstrap.
                nv = next_value if t == t_steps - 1 else buf.val[t + 1]
                delta = buf.rew[t] + cfg.gamma * nv * (1.0 - buf.term[t]) - buf.val[t]
                # the transition after an episode end is the ignored reset step: cut the trace
                last = delta + cfg.gamma * cfg.gae_lambda * (1.0 - buf.done[t]) * last
                adv[t] = last
            returns = adv + buf.val
        return adv, returns

    def _update(
        self,
        buf: _Rollout,
        adv: torch.Tensor,
        returns: torch.Tensor,
        rng: np.random.Generator,
        opt: torch.optim.Adam,
        alpha_opt: torch.optim.Adam | None,
    ) -> float:
        """``n_epochs`` passes of clipped-surrogate, value and entropy updates over the valid
        transitions in minibatches drawn from ``rng``; the mean loss (NaN when none ran)."""
        policy, cfg = self.policy, self.config
        dev = buf.next_obs.device
        idx = torch.nonzero(buf.valid.flatten()).squeeze(-1).cpu().numpy()
        b_obs = buf.obs.reshape(-1, policy.obs_dim)
        b_act, b_logp = buf.act.flatten(), buf.logp.flatten()
        b_adv, b_ret, b_val = adv.flatten(), returns.flatten(), buf.val.flatten()
        losses = []
        for _ in range(cfg.n_epochs):
            for mb in np.array_split(rng.permutation(idx), cfg.n_minibatches):
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
                    -a * ratio, -a * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
                ).mean()
                v_clipped = b_val[mbt] + (value - b_val[mbt]).clamp(-cfg.clip_coef, cfg.clip_coef)
                v_loss = (
                    0.5 * torch.max((value - b_ret[mbt]) ** 2, (v_clipped - b_ret[mbt]) ** 2).mean()
                )
                loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
                opt.zero_grad()
                if alpha_opt is not None:
                    alpha_opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(list(policy.parameters()), cfg.max_grad_norm)
                opt.step()
                if alpha_opt is not None:
                    alpha_opt.step()
                losses.append(loss.item())
        return float(np.mean(losses)) if losses else float("nan")

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        return predict(self.policy, obs, deterministic)

    def save(self, path: str | Path) -> Path:
        """Save the policy and the PPO hyperparameters (safetensors with a sha256), like SB3's
        ``model.save``; :meth:`load` rebuilds the agent on an environment factory."""
        return save_policy(self.policy, path, extra={"ppo": json.dumps(asdict(self.config))})

    @classmethod
    def load(cls, path: str | Path, env_fn: EnvFn, **overrides: Any) -> ContinualPPO:
        """An agent saved with :meth:`save` on ``env_fn``; ``overrides`` replace saved settings."""
        policy, meta = _load_policy(Path(path))
        if "ppo" not in meta:
            raise ValueError(f"{path}: a policy file, not a ContinualPPO (use load_policy)")
        return cls(env_fn, policy, PPOConfig(**{**json.loads(meta["ppo"]), **overrides}))


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
    with seeded(seed, 10, task):
        return CKAPolicy(obs_dim, n_actions, **policy_kwargs)


def _fresh_critic(policy: CKAPolicy, seed: int, task: int) -> None:
    with seeded(seed, 11, task):
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
                with seeded(seed, 15, k):  # α's randn init, reproducible per task
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
