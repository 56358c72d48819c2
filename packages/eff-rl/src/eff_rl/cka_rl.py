"""CKA-RL: Continual Knowledge Adaptation for Reinforcement Learning.

Hu, Lian, Wen, Li, Chen, Wen, Xiao, Tan, "Continual Knowledge Adaptation for Reinforcement
Learning", NeurIPS 2025 (code: Fhujinwu/CKA-RL, ``experiments/atari/models/{cka_rl,fuse_modules}.py``).

What the method is, as the official code implements it:

* **Knowledge vectors** live only in the actor head. Task 0 trains a plain actor θ_base. For task
  k ≥ 1 the pool is ``[θ_{k−1} − θ_base] ⊕ pool_{k−1}`` (delta mode "T": the trainable part of the
  previous task's fused layers), so task 1's pool is ``[0]``.
* **Fused layer:** ``W = θ + Σ_i softmax(α·s)_i · τ_i`` with the τ_i frozen; θ restarts from θ_base
  at every task; α ∈ R^{|pool|} and the scalar s are **global** (shared by all fused layers),
  α = randn/|pool| ("Randn"), s = 1. α and s get their own Adam, used only from task 2 on (task 1's
  pool has a single vector, so its mixing weight is 1 anyway).
* **Adaptive merging:** when ``|pool| > pool_size``, the most cosine-similar pair is replaced by its
  mean (torch's ``cosine_similarity`` convention: a zero vector has similarity 0 to everything).
  ``merge_scope="task"`` (default) measures similarity over the concatenation of all fused tensors
  of a task; ``"tensor"`` reproduces the release, which merges each weight/bias tensor on its own.
* The encoder is fine-tuned sequentially (not protected); the critic is re-initialised per task.
  Here (spec, CartPole) the critic is a **separate** MLP on the raw observation (CleanRL's
  ``ppo.py`` critic; as the Meta-World release's SAC critics), so a fresh critic's value-loss
  gradients do not reshape the shared encoder that θ_base and the knowledge vectors rely on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_int

__all__ = ["CKAPolicy", "FuseLinear", "KnowledgePool", "layer_init"]

AlphaInit = Literal["randn", "uniform", "major"]
MergeScope = Literal["task", "tensor"]
_ALPHA_INITS = ("randn", "uniform", "major")
_MERGE_SCOPES = ("task", "tensor")
# The release's "Uniform" init (also used whenever the pool holds a single vector): α = 1/100.
_ALPHA_FACTOR = 1e-2


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """CleanRL's orthogonal initialisation (used by the official code for every layer)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class FuseLinear(nn.Module):
    """A linear layer whose weight is ``θ + Σ_i mix_i τ_i`` (CKA-RL's fused layer).

    θ (``weight``, ``bias``) is trainable; the knowledge vectors τ (``tau_weight`` [K, out, in],
    ``tau_bias`` [K, out]) are frozen buffers, so they receive no gradient and travel with
    ``state_dict``. ``mix`` (softmax(α·s), owned by the policy) is passed to ``forward``.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, name: str = ""
    ) -> None:
        super().__init__()
        self.in_features, self.out_features, self.name = in_features, out_features, name
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.register_buffer("tau_weight", torch.zeros(0, out_features, in_features))
        self.register_buffer("tau_bias", torch.zeros(0, out_features) if bias else None)
        self._frozen: tuple[Tensor, Tensor | None] | None = None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            nn.init.uniform_(self.bias, -1 / math.sqrt(in_features), 1 / math.sqrt(in_features))

    @property
    def n_vectors(self) -> int:
        return self.tau_weight.shape[0]

    def theta(self) -> dict[str, Tensor]:
        out = {"weight": self.weight}
        if self.bias is not None:
            out["bias"] = self.bias
        return out

    def set_pool(self, base: dict[str, Tensor], taus: dict[str, Tensor]) -> None:
        """θ ← ``base``; τ ← ``taus`` (each stacked over the pool: [K, *shape])."""
        label = self.name or "FuseLinear"
        for key, param in self.theta().items():
            if key not in base or tuple(base[key].shape) != tuple(param.shape):
                got = None if key not in base else tuple(base[key].shape)
                raise ValueError(
                    f"layer {label}: base {key} must have shape {tuple(param.shape)}, got {got}"
                )
            if key not in taus or tuple(taus[key].shape[1:]) != tuple(param.shape):
                got = None if key not in taus else tuple(taus[key].shape)
                raise ValueError(
                    f"layer {label}: tau {key} must have shape [K, {', '.join(map(str, param.shape))}], got {got}"
                )
        k = taus["weight"].shape[0]
        if self.bias is not None and taus["bias"].shape[0] != k:
            raise ValueError(f"layer {label}: tau weight and bias hold different pool sizes")
        with torch.no_grad():
            self.weight.copy_(base["weight"])
            if self.bias is not None:
                self.bias.copy_(base["bias"])
        dev, dt = self.weight.device, self.weight.dtype
        self.tau_weight = taus["weight"].detach().to(dev, dt).clone()
        if self.bias is not None:
            self.tau_bias = taus["bias"].detach().to(dev, dt).clone()

    def effective_weight(self, mix: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """(W, b) = (θ_w + Σ mix_i τ_w,i, θ_b + Σ mix_i τ_b,i); θ alone when the pool is empty."""
        if self.n_vectors == 0 or mix is None:
            return self.weight, self.bias
        if mix.shape != (self.n_vectors,):
            raise ValueError(
                f"layer {self.name}: mix must have shape ({self.n_vectors},), got {tuple(mix.shape)}"
            )
        w = self.weight + torch.einsum("k,koi->oi", mix, self.tau_weight)
        b = None if self.bias is None else self.bias + mix @ self.tau_bias
        return w, b

    def forward(self, x: Tensor, mix: Tensor | None = None) -> Tensor:
        w, b = self._frozen if self._frozen is not None else self.effective_weight(mix)
        return F.linear(x, w, b)


class KnowledgePool:
    """The pool of knowledge vectors τ (one dict of fused tensors per entry) with adaptive merging.

    New vectors go to the front (``[θ_{k−1} − θ_base] ⊕ pool``, as the release concatenates);
    a merged pair is removed and its mean appended at the end.
    """

    def __init__(
        self,
        pool_size: int,
        merge: Literal["most_similar_pair"] = "most_similar_pair",
        similarity: Literal["cosine"] = "cosine",
        merge_scope: MergeScope = "task",
    ) -> None:
        pool_size = check_int("pool_size", pool_size, minimum=1)
        if merge != "most_similar_pair":
            raise ValueError(f"merge must be one of ['most_similar_pair'], got {merge!r}")
        if similarity != "cosine":
            raise ValueError(f"similarity must be one of ['cosine'], got {similarity!r}")
        if merge_scope not in _MERGE_SCOPES:
            raise ValueError(
                f"merge_scope must be one of {list(_MERGE_SCOPES)}, got {merge_scope!r}"
            )
        self.pool_size, self.merge_scope = pool_size, merge_scope
        self.vectors: list[dict[str, Tensor]] = []
        self.sources: list[tuple[int, ...]] = []  # task ids whose deltas each vector holds

    def __len__(self) -> int:
        return len(self.vectors)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for v in self.vectors for t in v.values())

    def add(self, task_id: int, delta: dict[str, Tensor]) -> None:
        if self.vectors:
            ref = self.vectors[0]
            if set(delta) != set(ref):
                raise ValueError(
                    f"delta tensors {sorted(delta)} do not match the pool's {sorted(ref)}"
                )
            for name, t in delta.items():
                if t.shape != ref[name].shape:
                    raise ValueError(
                        f"layer {name}: delta has shape {tuple(t.shape)}, pool has {tuple(ref[name].shape)}"
                    )
        self.vectors.insert(0, {k: v.detach().clone() for k, v in delta.items()})
        self.sources.insert(0, (task_id,))

    def stacked(self) -> dict[str, Tensor]:
        """Each tensor name → [K, *shape] (the τ buffers of the fused layers)."""
        return (
            {k: torch.stack([v[k] for v in self.vectors]) for k in self.vectors[0]}
            if self.vectors
            else {}
        )

    @staticmethod
    def _most_similar_pair(flat: Tensor) -> tuple[int, int]:
        k = flat.shape[0]
        sims = torch.full((k, k), -math.inf)
        for i in range(k):
            for j in range(i + 1, k):
                sims[i, j] = F.cosine_similarity(flat[i], flat[j], dim=0)
        i, j = divmod(int(torch.argmax(sims)), k)
        return i, j

    def merge_if_needed(self) -> list[tuple[int, int]]:
        """While over capacity, replace the most cosine-similar pair by its mean; returns the pairs
        merged (indices before each merge; per tensor, in sorted tensor order, for scope "tensor")."""
        merged: list[tuple[int, int]] = []
        while len(self.vectors) > self.pool_size:
            if self.merge_scope == "task":
                flat = torch.stack(
                    [torch.cat([v[k].flatten() for k in sorted(v)]) for v in self.vectors]
                )
                i, j = self._most_similar_pair(flat)
                mean = {k: (self.vectors[i][k] + self.vectors[j][k]) / 2 for k in self.vectors[i]}
                src = self.sources[i] + self.sources[j]
                for idx in (j, i):
                    del self.vectors[idx], self.sources[idx]
                self.vectors.append(mean)
                self.sources.append(src)
                merged.append((i, j))
            else:
                stacks = self.stacked()
                for name in sorted(stacks):
                    s = stacks[name]
                    i, j = self._most_similar_pair(s.flatten(1))
                    keep = [m for m in range(s.shape[0]) if m not in (i, j)]
                    stacks[name] = torch.cat([s[keep], ((s[i] + s[j]) / 2)[None]])
                    merged.append((i, j))
                k = len(self.vectors) - 1
                self.vectors = [{n: stacks[n][m] for n in stacks} for m in range(k)]
                # per-tensor merges mix provenance; record the whole set
                self.sources = [tuple(sorted({t for s in self.sources for t in s}))] * k
        return merged

    def state_dict(self) -> dict[str, Tensor]:
        out = {f"vectors.{m}.{k}": t for m, v in enumerate(self.vectors) for k, t in v.items()}
        for m, src in enumerate(self.sources):
            out[f"sources.{m}"] = torch.tensor(src, dtype=torch.int64)
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        n = len({key.split(".")[1] for key in state if key.startswith("vectors.")})
        self.vectors = [
            {
                key.split(".", 2)[2]: t.clone()
                for key, t in state.items()
                if key.startswith(f"vectors.{m}.")
            }
            for m in range(n)
        ]
        self.sources = [tuple(int(x) for x in state[f"sources.{m}"].tolist()) for m in range(n)]


class CKAPolicy(nn.Module):
    """Actor–critic for discrete actions with a CKA-RL actor head.

    encoder (``Linear(obs, width) + tanh`` unless given; fine-tuned across tasks) → actor
    ``FuseLinear(width, width) → tanh → FuseLinear(width, n_actions)``; the critic is a separate
    MLP on the raw observation (``Linear(obs, 64) → tanh → Linear(64, 64) → tanh → Linear(64, 1)``,
    CleanRL's critic), sharing nothing with the actor, re-initialised per task by the sequence
    driver. With an empty pool the actor is a plain MLP (the from-scratch and fine-tune baselines
    use the same class).
    """

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        width: int = 64,
        encoder: nn.Module | None = None,
        alpha_init: AlphaInit = "randn",
        alpha_major: float = 0.5,
    ) -> None:
        super().__init__()
        if alpha_init not in _ALPHA_INITS:
            raise ValueError(f"alpha_init must be one of {list(_ALPHA_INITS)}, got {alpha_init!r}")
        if not 0.0 < alpha_major < 1.0:
            raise ValueError(f"alpha_major must lie in (0, 1), got {alpha_major!r}")
        self.obs_dim, self.n_actions, self.width = obs_dim, n_actions, width
        self.alpha_init, self.alpha_major = alpha_init, alpha_major
        self.encoder = (
            encoder
            if encoder is not None
            else nn.Sequential(layer_init(nn.Linear(obs_dim, width)), nn.Tanh())
        )
        self.fc1 = FuseLinear(width, width, name="fc1")
        self.fc2 = FuseLinear(width, n_actions, name="fc2")
        layer_init(self.fc1)  # type: ignore[arg-type]
        layer_init(self.fc2, std=0.01)  # type: ignore[arg-type]
        self.critic = self._new_critic()
        # Global α and s, shared by both fused layers; empty until a task has a pool.
        self.alpha = nn.Parameter(torch.zeros(0))
        self.alpha_scale = nn.Parameter(torch.ones(1))
        self.has_base = False

    def _new_critic(self) -> nn.Sequential:
        return nn.Sequential(
            layer_init(nn.Linear(self.obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )

    def fused_layers(self) -> dict[str, FuseLinear]:
        return {"fc1": self.fc1, "fc2": self.fc2}

    def theta(self) -> dict[str, Tensor]:
        """The trainable actor tensors θ, named ``fc1.weight``, ``fc1.bias``, ..."""
        return {
            f"{n}.{k}": t
            for n, layer in self.fused_layers().items()
            for k, t in layer.theta().items()
        }

    @property
    def mixing_weights(self) -> Tensor:
        """softmax(α·s) over the pool (empty when there is no pool)."""
        return torch.softmax(self.alpha * self.alpha_scale, dim=0)

    @contextmanager
    def frozen_weights(self) -> Iterator[None]:
        """Compute the fused weights once for a stretch of gradient-free forwards (PPO rollouts),
        instead of re-mixing the pool at every environment step."""
        with torch.no_grad():
            mix = self.mixing_weights if self.alpha.numel() else None
            for layer in self.fused_layers().values():
                w, b = layer.effective_weight(mix)
                layer._frozen = (w.detach(), None if b is None else b.detach())
        try:
            yield
        finally:
            for layer in self.fused_layers().values():
                layer._frozen = None

    def alpha_parameters(self) -> list[nn.Parameter]:
        return [self.alpha, self.alpha_scale]

    def reset_critic(self) -> None:
        self.critic = self._new_critic().to(self.fc1.weight.device)

    def begin_task(self, pool: KnowledgePool, base: dict[str, Tensor] | None) -> None:
        """Start a task: θ ← θ_base, τ ← the pool, α and s re-initialised (Sec. "Fused layer")."""
        if base is None:
            if len(pool):
                raise RuntimeError(
                    "begin_task needs θ_base (the task-0 actor) once the pool is not empty"
                )
            return
        taus = pool.stacked()
        k = len(pool)
        for name, layer in self.fused_layers().items():
            sub_base = {
                key: base[f"{name}.{key}"] for key in layer.theta() if f"{name}.{key}" in base
            }
            sub_tau = (
                {key: taus[f"{name}.{key}"] for key in layer.theta() if f"{name}.{key}" in taus}
                if k
                else {key: torch.zeros(0, *t.shape) for key, t in layer.theta().items()}
            )
            layer.set_pool(sub_base, sub_tau)
        self.has_base = True
        with torch.no_grad():
            dev = self.fc1.weight.device
            if k == 0:
                alpha = torch.zeros(0)
            elif self.alpha_init == "uniform" or k == 1:
                alpha = torch.full((k,), _ALPHA_FACTOR)
            elif self.alpha_init == "randn":
                alpha = torch.randn(k) / k
            else:  # "major": the most recent vector (index 0) starts with weight alpha_major
                alpha = torch.full((k,), math.log((1 - self.alpha_major) / (k - 1)))
                alpha[0] = math.log(self.alpha_major)
            self.alpha = nn.Parameter(alpha.to(dev))
            self.alpha_scale = nn.Parameter(torch.ones(1, device=dev))

    def end_task(self, base: dict[str, Tensor]) -> dict[str, Tensor]:
        """The task's knowledge vector θ_k − θ_base."""
        return {k: (t - base[k]).detach().clone() for k, t in self.theta().items()}

    def logits(self, obs: Tensor) -> Tensor:
        h = self.encoder(obs)
        mix = self.mixing_weights if self.alpha.numel() else None
        return self.fc2(torch.tanh(self.fc1(h, mix)), mix)

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(obs).squeeze(-1)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        return self.logits(obs), self.value(obs)
