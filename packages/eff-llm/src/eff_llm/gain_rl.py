"""GAIN-RL — angle-concentration data ordering and a moving Gaussian curriculum for GRPO.

Wang et al., "Angles Don't Lie: Unlocking Training-Efficient RL Through the Model's Own Signals",
arXiv 2506.02281; official code ``wangqinsi1/GAINRL`` (``data_processor.py`` offline sort,
``trl_gainrl/gainrl_trainer.py`` sampler + callback, ``verl_gainrl/.../gainrl_sampler.py``).

1. **Signal.** X ∈ R^{L×d} = the *input* of the last decoder layer's ``mlp.up_proj`` (its
   post-attention RMSNorm output), captured with a forward hook. cos = X̂X̂ᵀ with L2-normalised rows,
   masked by ``torch.tril(ones, diagonal=1)``. Rationale: ‖∇_W L‖² ∝ Σ_ij ‖x_i‖‖x_j‖ cos θ_ij.

   - training-time metric (``segments=None``): the mean of the masked entries over prompt +
     completion (padding excluded by ``mask``; the code takes "the non-zero masked entries");
   - offline metric (``segments=(system, question)``): C = C_intra + w·C_inter with
     C_intra = mean(cos_m[q, q]) (question ↔ question) and C_inter = mean(cos_m[q, s]) (question ↔
     system prompt), w = 8, cos_m the masked matrix. The official ``data_processor.py`` computes
     ``cos[110:-6][110:-6].mean() + 8*cos[110:-6][:110].mean()``, slicing **rows twice** (a bug);
     this is the intended version with explicit segments.

   Data are sorted by C descending (:func:`angle_order`).
2. **Sampling.** Each epoch p_i ∝ exp(−½((i − μ)/σ)²) over sorted ranks, ``subset_size`` indices
   drawn **without replacement** and visited in rank order (the official sampler sorts them);
   μ₀ = 0 (:class:`GaussianCurriculumSampler`). σ, n, adj_min and adj_max are in rank units.
3. **Update** (verl): Δμ = clip(n·tanh(α(acc − β)) + n·tanh(α·C̄), adj_min, adj_max), μ += Δμ, with
   n = ``step`` = 500, α = 2, β = ``target_acc`` = 0.5, adj_min = 0, adj_max = 1000; acc = the epoch
   mean accuracy in [0, 1] (trl's rewards are 0/2, callers normalise), C̄ = the epoch mean angle
   metric. adj_min = 0 ⇒ μ only moves forward. The trl callback samples with the *old* μ (a one-epoch
   lag); we follow verl (update, then resample). μ is clipped to [0, N − 1] (ours: the official μ
   is unbounded, so past the end the draw concentrates ever more on the last ranks and, once
   μ − N ≳ 38σ, every probability underflows to 0 and ``np.random.choice`` fails). verl's sampler
   computes n·tanh(α(acc/2 − β)) on 0/1 rewards as well (the /2 is trl's 0/2 normalisation), so
   there the accuracy term is ≤ 0 at every accuracy; we follow the spec (accuracy in [0, 1],
   β = 0.5).
4. **GRPO** (:class:`GRPOLite`, ours; trl is not a dependency): group advantages
   (r − mean_g)/(std_g + 1e-4), token ratio clipped at 1 ± ``clip``, optional k3 KL to a reference
   with weight ``kl_beta``; per-sequence token mean, then batch mean (trl's GRPO loss).
   :func:`grpo_train` runs it with ``accelerate`` on single-token-answer tasks (the toy).

:class:`GainRLCallback` + :func:`curriculum_trainer` integrate the sampler with
``transformers.Trainer`` without swapping samplers inside the dataloader (which the official trl
callback does, fragile across versions).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Sampler

from eff_shared.errors import check_positive, check_type
from eff_shared.progress import progress_task

__all__ = [
    "GRPOLite",
    "GRPOLog",
    "GainRLCallback",
    "GaussianCurriculumSampler",
    "UniformSubsetSampler",
    "angle_concentration",
    "angle_order",
    "collect_angle_signal",
    "curriculum_trainer",
    "greedy_accuracy",
    "grpo_train",
    "up_proj_inputs",
]


# -- 1. the angle signal -----------------------------------------------------------------------

Segment = tuple[int, int]


def _segment(name: str, seg: Any, length: int) -> slice:
    if isinstance(seg, slice):
        start, stop, _ = seg.indices(length)
    else:
        start, stop = seg
        start, stop, _ = slice(start, stop).indices(length)
    if stop <= start:
        raise ValueError(f"the {name} segment {seg!r} is empty for a sequence of {length} tokens")
    return slice(start, stop)


def angle_concentration(
    hidden_states: torch.Tensor,
    mask: torch.Tensor | None = None,
    segments: tuple[Any, Any] | Sequence[tuple[Any, Any]] | None = None,
    inter_weight: float = 8.0,
    diagonal: int = 1,
) -> torch.Tensor:
    """Angle concentration of ``hidden_states`` (L, d) or (B, L, d) → scalar or (B,).

    ``mask`` (L,) / (B, L): valid tokens (training-time metric only). ``segments``: ``(system,
    question)`` as ``(start, end)`` pairs or slices, shared by the batch, or one pair per sample —
    then the offline metric C_intra + ``inter_weight``·C_inter (module docstring).
    """
    check_type("hidden_states", hidden_states, torch.Tensor)
    single = hidden_states.ndim == 2
    x = hidden_states.unsqueeze(0) if single else hidden_states
    if x.ndim != 3 or x.shape[1] == 0:
        raise ValueError(
            f"hidden_states must be (L, d) or (B, L, d), got {tuple(hidden_states.shape)}"
        )
    b, length, _ = x.shape
    xn = F.normalize(x if x.dtype == torch.float64 else x.float(), p=2, dim=-1)  # ≥ float32
    cos = xn @ xn.transpose(1, 2)
    tri = torch.tril(
        torch.ones(length, length, dtype=torch.bool, device=x.device), diagonal=diagonal
    )
    if segments is None:
        keep = tri.expand(b, -1, -1)
        if mask is not None:
            m = mask.to(torch.bool).reshape(b, length)
            keep = keep & m[:, :, None] & m[:, None, :]
        counts = keep.sum((1, 2))
        if bool((counts == 0).any()):
            raise ValueError("a sample has no valid tokens (mask is all False)")
        out = (cos * keep).sum((1, 2)) / counts
    else:
        cos_m = cos * tri
        per_sample = [segments] * b if _is_pair_of_segments(segments) else list(segments)
        if len(per_sample) != b:
            raise ValueError(f"segments must be one (system, question) pair or {b} pairs")
        vals = []
        for i, (sys_seg, q_seg) in enumerate(per_sample):
            s, q = _segment("system", sys_seg, length), _segment("question", q_seg, length)
            intra = cos_m[i, q, q].mean()
            inter = cos_m[i, q, s].mean()
            vals.append(intra + inter_weight * inter)
        out = torch.stack(vals)
    return out[0] if single else out


def _is_pair_of_segments(segments: Any) -> bool:
    """True for ``(seg, seg)`` where each seg is a slice or an ``(int, int)`` pair."""

    def is_seg(s: Any) -> bool:
        return isinstance(s, slice) or (
            isinstance(s, (tuple, list)) and len(s) == 2 and all(isinstance(v, int) for v in s)
        )

    return len(segments) == 2 and is_seg(segments[0]) and is_seg(segments[1])


def _up_proj(model: nn.Module, layer: int) -> nn.Module:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise AttributeError(
            "collect_angle_signal needs a decoder with model.model.layers[i].mlp.up_proj "
            f"(Llama/Qwen-style); {type(model).__name__} has no model.layers"
        )
    n = len(layers)
    if not -n <= layer < n:
        raise AttributeError(f"layer={layer} is out of range for a model with {n} decoder layers")
    mlp = getattr(layers[layer], "mlp", None)
    if mlp is None or not hasattr(mlp, "up_proj"):
        raise AttributeError(
            f"decoder layer {layer} has no mlp.up_proj (GAIN-RL hooks the input of the last "
            f"layer's up_proj); pass a Llama/Qwen-style model"
        )
    return mlp.up_proj


@contextlib.contextmanager
def up_proj_inputs(model: nn.Module, layer: int = -1) -> Iterator[list[torch.Tensor]]:
    """Context manager collecting the inputs of ``model.model.layers[layer].mlp.up_proj``."""
    store: list[torch.Tensor] = []
    handle = _up_proj(model, layer).register_forward_hook(
        lambda _m, args, _o: store.append(args[0])
    )
    try:
        yield store
    finally:
        handle.remove()


@torch.no_grad()
def collect_angle_signal(
    model: nn.Module,
    dataloader: Iterable[Any],
    layer: int = -1,
    segments: tuple[Any, Any] | None = None,
    inter_weight: float = 8.0,
) -> torch.Tensor:
    """One prefill per sample: the angle concentration of every sample of ``dataloader`` (batches
    of ``input_ids`` tensors or dicts with ``input_ids`` / ``attention_mask``), in order."""
    _up_proj(model, layer)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    try:
        for batch in dataloader:
            if isinstance(batch, dict):
                ids, mask = batch["input_ids"], batch.get("attention_mask")
            else:
                ids, mask = batch, None
            with up_proj_inputs(model, layer) as store:
                model(
                    input_ids=ids.to(device),
                    attention_mask=None if mask is None else mask.to(device),
                )
            out.append(
                angle_concentration(
                    store[-1],
                    mask=None if segments is not None else mask,
                    segments=segments,
                    inter_weight=inter_weight,
                ).cpu()
            )
    finally:
        model.train(was_training)
    return torch.cat([o.reshape(-1) for o in out])


def angle_order(signal: torch.Tensor) -> torch.Tensor:
    """Sample indices sorted by angle concentration, descending (ties by index)."""
    return torch.sort(signal, descending=True, stable=True).indices


# -- 2./3. the moving Gaussian sampler ---------------------------------------------------------


class GaussianCurriculumSampler(Sampler[int]):
    """Each epoch: ``subset_size`` indices of ``sorted_indices`` drawn without replacement with
    p(rank) ∝ exp(−½((rank − μ)/σ)²); :meth:`update` moves μ (module docstring, items 2–3)."""

    def __init__(
        self,
        sorted_indices: Sequence[int] | torch.Tensor,
        subset_size: int,
        std: float = 1000.0,
        step: float = 500.0,
        alpha: float = 2.0,
        target_acc: float = 0.5,
        adj_min: float = 0.0,
        adj_max: float = 1000.0,
        seed: int = 0,
        replace: bool = False,
        mu: float = 0.0,
    ) -> None:
        self.sorted_indices = torch.as_tensor(sorted_indices, dtype=torch.long).reshape(-1)
        n = len(self.sorted_indices)
        if n == 0:
            raise ValueError("sorted_indices must not be empty")
        check_positive("subset_size", subset_size, integer=True)
        if subset_size > n and not replace:
            raise ValueError(
                f"subset_size={subset_size} exceeds the dataset size {n} (sampling is without "
                f"replacement; pass replace=True)"
            )
        check_positive("std", std)
        check_positive("step", step, strict=False)
        check_positive("alpha", alpha, strict=False)
        if not 0 <= target_acc <= 1:
            raise ValueError(f"target_acc must lie in [0, 1], got {target_acc}")
        if adj_min > adj_max:
            raise ValueError(f"adj_min={adj_min} must be <= adj_max={adj_max}")
        self.subset_size, self.std, self.step = subset_size, float(std), float(step)
        self.alpha, self.target_acc = float(alpha), float(target_acc)
        self.adj_min, self.adj_max = float(adj_min), float(adj_max)
        self.seed, self.replace = seed, replace
        self.mu = float(mu)
        self.epoch = 0
        self.history: list[dict[str, float]] = []

    def __len__(self) -> int:
        return self.subset_size

    def probabilities(self) -> torch.Tensor:
        """p over sorted ranks for the current μ (a softmax of the Gaussian log-density)."""
        ranks = torch.arange(len(self.sorted_indices), dtype=torch.float64)
        return torch.softmax(-0.5 * ((ranks - self.mu) / self.std) ** 2, dim=0)

    def sample_ranks(self) -> torch.Tensor:
        """The ranks of this epoch's subset (seeded by ``(seed, epoch)``); advances the epoch."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        return torch.multinomial(
            self.probabilities(), self.subset_size, self.replace, generator=gen
        )

    def __iter__(self) -> Iterator[int]:
        """This epoch's subset in rank order (highest angle concentration first), as the official
        ``gaussian_sample_list`` returns it (``chosen.sort()``)."""
        ranks = torch.sort(self.sample_ranks()).values
        return iter(self.sorted_indices[ranks].tolist())

    def delta(self, accuracy: float, angle: float) -> float:
        """Δμ = clip(n·tanh(α(acc − β)) + n·tanh(α·C̄), adj_min, adj_max)."""
        if not isinstance(accuracy, (int, float)) or not 0 <= accuracy <= 1 or math.isnan(accuracy):
            raise ValueError(
                f"accuracy must lie in [0, 1] (normalise 0/2 rewards by 2), got {accuracy!r}"
            )
        if not math.isfinite(angle):
            raise ValueError(f"angle must be finite, got {angle!r}")
        raw = self.step * math.tanh(
            self.alpha * (accuracy - self.target_acc)
        ) + self.step * math.tanh(self.alpha * angle)
        return min(max(raw, self.adj_min), self.adj_max)

    def update(self, accuracy: float, angle: float) -> float:
        """Move μ by :meth:`delta` (clipped to [0, N − 1]); returns the applied Δμ."""
        d = self.delta(accuracy, angle)
        old = self.mu
        self.mu = min(max(self.mu + d, 0.0), float(len(self.sorted_indices) - 1))
        self.history.append({"accuracy": accuracy, "angle": angle, "delta": d, "mu": self.mu})
        return self.mu - old

    def state_dict(self) -> dict[str, Any]:
        return {"mu": self.mu, "epoch": self.epoch, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mu, self.epoch = float(state["mu"]), int(state["epoch"])
        self.history = list(state.get("history", []))


# -- transformers.Trainer integration ----------------------------------------------------------


def curriculum_trainer(trainer_cls: type | None = None) -> type:
    """A ``transformers.Trainer`` subclass taking ``curriculum_sampler=`` and using it as the train
    sampler (the dataloader re-iterates it every epoch, so each epoch draws a new subset)."""
    if trainer_cls is None:
        from transformers import Trainer as trainer_cls

    class CurriculumTrainer(trainer_cls):  # type: ignore[misc, valid-type]
        def __init__(
            self, *args: Any, curriculum_sampler: GaussianCurriculumSampler, **kwargs: Any
        ):
            self.curriculum_sampler = curriculum_sampler
            super().__init__(*args, **kwargs)

        def _get_train_sampler(self, *args: Any, **kwargs: Any):
            return self.curriculum_sampler

    return CurriculumTrainer


def _callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


class GainRLCallback(_callback_base()):  # type: ignore[misc]
    """On each epoch end, :meth:`GaussianCurriculumSampler.update` from the epoch's logged means of
    ``accuracy_key`` (in [0, 1]) and ``angle_key`` (the trainer must log both)."""

    def __init__(
        self,
        sampler: GaussianCurriculumSampler,
        accuracy_key: str = "accuracy",
        angle_key: str = "angle_concentration",
    ) -> None:
        self.sampler, self.accuracy_key, self.angle_key = sampler, accuracy_key, angle_key
        self._seen = 0

    def on_epoch_end(self, args, state, control, **kwargs):
        logs = state.log_history[self._seen :]
        self._seen = len(state.log_history)
        acc = [r[self.accuracy_key] for r in logs if self.accuracy_key in r]
        ang = [r[self.angle_key] for r in logs if self.angle_key in r]
        if acc and ang:
            self.sampler.update(sum(acc) / len(acc), sum(ang) / len(ang))
        return control


# -- 4. GRPO -----------------------------------------------------------------------------------


class GRPOLite:
    """Minimal GRPO objective (group-relative advantages, clipped ratio, optional k3 KL).

    ``policy`` and ``ref`` are causal LMs; only the loss pieces live here (rollouts: :func:`grpo_train`).
    """

    def __init__(
        self,
        policy: nn.Module,
        ref: nn.Module | None = None,
        group_size: int = 8,
        clip: float = 0.2,
        kl_beta: float = 0.0,
    ) -> None:
        check_positive("group_size", group_size, integer=True)
        check_positive("clip", clip)
        check_positive("kl_beta", kl_beta, strict=False)
        if kl_beta > 0 and ref is None:
            raise ValueError("kl_beta > 0 needs a reference model (ref)")
        self.policy, self.ref = policy, ref
        self.group_size, self.clip, self.kl_beta = group_size, clip, kl_beta

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """(r − mean_group) / (std_group + 1e-4) for rewards laid out as consecutive groups."""
        r = rewards.reshape(-1, self.group_size).float()
        if r.shape[1] < 2:
            raise ValueError("group_size must be >= 2 for group-relative advantages")
        adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)
        return adv.reshape(-1)

    def loss(
        self,
        logps: torch.Tensor,
        old_logps: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor | None = None,
        ref_logps: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Token log-probs (N, T) of the completions under the policy / the rollout policy / the
        reference; ``mask`` (N, T) marks completion tokens. Returns the scalar GRPO loss."""
        if logps.ndim == 1:
            logps, old_logps = logps[:, None], old_logps[:, None]
            ref_logps = None if ref_logps is None else ref_logps[:, None]
        mask = torch.ones_like(logps) if mask is None else mask.to(logps.dtype)
        ratio = torch.exp(logps - old_logps)
        adv = advantages[:, None]
        per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - self.clip, 1 + self.clip) * adv)
        if self.kl_beta > 0:
            if ref_logps is None:
                raise ValueError("kl_beta > 0 needs ref_logps")
            d = ref_logps - logps
            per_token = per_token + self.kl_beta * (torch.exp(d) - d - 1)
        return ((per_token * mask).sum(1) / mask.sum(1).clamp_min(1)).mean()


@dataclass
class GRPOLog:
    """Per-step rollout accuracy and angle metric, and the periodic train accuracy."""

    rollout_accuracy: list[float] = field(default_factory=list)
    angle: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    mu: list[float] = field(default_factory=list)
    steps_to_threshold: int | None = None


def grpo_train(
    policy: nn.Module,
    prompts: torch.Tensor,
    answers: torch.Tensor,
    sampler: Sampler[int] | Callable[[], Iterable[int]],
    *,
    steps: int,
    prompts_per_step: int = 8,
    group_size: int = 8,
    lr: float = 1e-3,
    clip: float = 0.2,
    kl_beta: float = 0.0,
    ref: nn.Module | None = None,
    max_grad_norm: float | None = 1.0,
    temperature: float = 1.0,
    eval_every: int = 5,
    threshold: float | None = None,
    eval_fn: Callable[[nn.Module], float] | None = None,
    seed: int = 0,
    accelerator=None,
) -> GRPOLog:
    """GRPO on single-token answers (reward 1 if the sampled token equals ``answers[i]``).

    Each epoch iterates ``sampler`` (a :class:`GaussianCurriculumSampler` or any sampler; a
    curriculum sampler is updated at the epoch end with the epoch's rollout accuracy and mean
    training-time angle metric, then resampled — verl's order). Each step takes
    ``prompts_per_step`` prompts, samples ``group_size`` answers each from the policy, and takes one
    Adam step on :class:`GRPOLite`'s loss; the angle metric of every prompt + completion comes from
    the same forward (hook on the last ``up_proj``). ``eval_fn(policy)`` (default: greedy accuracy
    on all ``prompts``) runs every ``eval_every`` steps; with ``threshold`` training stops once it is
    reached. Runs under ``accelerate`` (processes split each step's prompts).
    """
    from accelerate import Accelerator

    check_positive("steps", steps, integer=True)
    check_positive("prompts_per_step", prompts_per_step, integer=True)
    check_positive("eval_every", eval_every, integer=True)
    check_positive("temperature", temperature)
    if prompts.ndim != 2 or answers.shape != prompts.shape[:1]:
        raise ValueError(
            f"prompts must be (N, L) and answers (N,), got {tuple(prompts.shape)}, {tuple(answers.shape)}"
        )
    acc = accelerator if accelerator is not None else Accelerator()
    world, rank = acc.num_processes, acc.process_index
    if prompts_per_step % world:
        raise ValueError(
            f"prompts_per_step={prompts_per_step} must be divisible by {world} processes"
        )
    grpo = GRPOLite(policy, ref=ref, group_size=group_size, clip=clip, kl_beta=kl_beta)
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=lr)
    model, opt = acc.prepare(policy, opt)
    raw = acc.unwrap_model(model)
    gen = torch.Generator().manual_seed(seed)
    device = acc.device
    eval_fn = eval_fn or (lambda m: greedy_accuracy(m, prompts, answers))
    log = GRPOLog()
    curriculum = isinstance(sampler, GaussianCurriculumSampler)
    step = 0

    def epoch_indices() -> list[int]:
        return list(iter(sampler)) if isinstance(sampler, Sampler) else list(sampler())

    with progress_task("GRPO (steps)", total=steps) as tick:
        while step < steps:
            order = epoch_indices()
            ep_acc, ep_angle = [], []
            for start in range(0, len(order) - prompts_per_step + 1, prompts_per_step):
                if step >= steps:
                    break
                idx = torch.tensor(order[start : start + prompts_per_step])[rank::world]
                x, y = prompts[idx].to(device), answers[idx].to(device)
                with torch.no_grad():
                    raw.eval()
                    probs = torch.softmax(raw(input_ids=x).logits[:, -1].float() / temperature, -1)
                    samples = torch.multinomial(
                        probs.cpu(), group_size, replacement=True, generator=gen
                    )
                samples = samples.to(device)
                rewards = (samples == y[:, None]).float().reshape(-1)
                seqs = torch.cat(
                    [x.repeat_interleave(group_size, 0), samples.reshape(-1, 1)], dim=1
                )
                model.train()
                with up_proj_inputs(raw) as store:  # one forward on prompt + completion
                    logits = model(input_ids=seqs).logits[:, -2].float()
                logps = (
                    torch.log_softmax(logits / temperature, -1).gather(1, seqs[:, -1:]).squeeze(1)
                )
                ref_logps = None
                if kl_beta > 0:
                    with torch.no_grad():
                        ref_logps = torch.log_softmax(
                            ref(input_ids=seqs[:, :-1]).logits[:, -1].float(), -1
                        )
                        ref_logps = ref_logps.gather(1, seqs[:, -1:]).squeeze(1)
                loss = grpo.loss(
                    logps, logps.detach(), grpo.advantages(rewards), ref_logps=ref_logps
                )
                opt.zero_grad(set_to_none=True)
                acc.backward(loss)
                if max_grad_norm is not None:
                    acc.clip_grad_norm_(model.parameters(), max_grad_norm)
                opt.step()
                angle = float(angle_concentration(store[-1].detach()).mean())
                stats = acc.reduce(
                    torch.tensor([float(rewards.mean()), angle], device=device), "mean"
                )
                ep_acc.append(float(stats[0]))
                ep_angle.append(float(stats[1]))
                log.rollout_accuracy.append(float(stats[0]))
                log.angle.append(float(stats[1]))
                step += 1
                tick()
                if step % eval_every == 0:
                    score = eval_fn(raw)
                    log.eval_steps.append(step)
                    log.eval_accuracy.append(score)
                    if (
                        threshold is not None
                        and score >= threshold
                        and log.steps_to_threshold is None
                    ):
                        log.steps_to_threshold = step
                        return log
            if curriculum and ep_acc:
                sampler.update(sum(ep_acc) / len(ep_acc), sum(ep_angle) / len(ep_angle))  # type: ignore[union-attr]
                log.mu.append(sampler.mu)  # type: ignore[union-attr]
    return log


@torch.no_grad()
def greedy_accuracy(
    model: nn.Module, prompts: torch.Tensor, answers: torch.Tensor, batch_size: int = 512
) -> float:
    """Fraction of prompts whose greedy next token is the answer (model put back in its mode)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    hits = 0
    for i in range(0, len(prompts), batch_size):
        logits = model(input_ids=prompts[i : i + batch_size].to(device)).logits[:, -1]
        hits += int((logits.argmax(-1).cpu() == answers[i : i + batch_size]).sum())
    model.train(was)
    return hits / len(prompts)


class UniformSubsetSampler(Sampler[int]):
    """The baseline: each epoch ``subset_size`` indices uniformly without replacement (seeded)."""

    def __init__(self, n: int, subset_size: int, seed: int = 0) -> None:
        check_positive("n", n, integer=True)
        check_positive("subset_size", subset_size, integer=True)
        if subset_size > n:
            raise ValueError(f"subset_size={subset_size} exceeds the dataset size {n}")
        self.n, self.subset_size, self.seed, self.epoch = n, subset_size, seed, 0

    def __len__(self) -> int:
        return self.subset_size

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        return iter(torch.randperm(self.n, generator=gen)[: self.subset_size].tolist())
