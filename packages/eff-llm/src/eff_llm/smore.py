"""S'MoRE — Structural Mixture of Residual Experts (Zeng et al., NeurIPS 2025, arXiv 2504.06426).

A hierarchical, routed, low-rank adapter for a frozen ``nn.Linear`` W (d_in → d_out):
y = W x + S'MoRE(x). Port of the official ``SMoREFFN`` ("subgraph" forward mode) and
``SMoRESwitchGate`` / ``SMoREGate`` / ``SMoREDenseGate`` (``ZimpleX/SMoRE-LLM``), written against
our own injector (:mod:`eff_llm._adapters`) instead of a fork of peft and of ``modeling_llama.py``.

Notation (paper §3, App. C; sub-layer l = 0 are the leaves, l = L−1 the root):

- widths d_0 = 0, d_{l+1} = d_l + s_l·r_l; expert i of layer l has A_l^i ∈ R^{r_l×d_in},
  B_l^i ∈ R^{d_{l+1}×r_l} (B maps into d_{l+1}, **not** d_out) and biases a_l^i, b_l^i;
  W_l ∈ R^{d_{l+1}×d_l} (+ bias) passes the children's message to the parent (l ≥ 1); one shared
  final projection W_f ∈ R^{d_out×d_L} (+ bias).
- **Routing, top-down:** x̄ = D x (d_in → ``down_proj_dim``); for l = L−1 … 0,
  p = softmax(MLP_l(u_l) K_lᵀ), keep the top-f_l experts (scores renormalised when f_l > 1);
  u_{L−1} = x̄ and below the root u_l = [x̄, keys of the selected ancestors]. Each token follows
  f_{L−1}·…·f_0 paths.
- **Propagation, bottom-up** (``activation_position="all"``):
  h_0 = Σ_{i∈sel_0} s_i·σ(γ_0(B_0^i(A_0^i x + a) + b)),
  h_l = Σ_{i∈sel_l} s_i·σ(γ_l(B_l^i(A_l^i x + a) + b) + W_l h_{l−1}^{(i)} + w_l),
  S'MoRE(x) = W_f h_{L−1} + b_f, with γ_l = lora_alpha_l / r_l (default 1) and σ the expert
  activation (tanh by default). ``activation_position="child"`` (S'MoRE*) applies σ only to the
  children's message: h_l = Σ_i (s_i·γ_l(B A x …) + W_l σ(h_{l−1}^{(i)}) + w_l), with no σ at l = 0.
- **Switch balance loss** (official gate, after MixLoRA): per layer
  w·s_l·Σ_e (fraction of routed slots sent to e) × (mean gate probability of e), summed over layers.
- **Init** ``w_final_zero``: A, B, W kaiming-uniform(a=√5), biases 0, **W_f = 0** (the adapter is
  exactly zero), gate keys U(0, 1). ``eq_1_layer`` (App. C.2.1): B_l^i = [0 … I_r … 0] and
  W_l = [0; I], so an L-layer S'MoRE with identity activation equals a 1-layer mixture over the union
  of experts at init.

Like the official "subgraph" mode, every expert's low-rank product is computed for every token
(Σ_l s_l r_l (d_in + d_{l+1}) MACs) and the selected ones are gathered: the cost floor is a dense LoRA
of rank Σ_l s_l r_l plus the gates. The official "tree" mode (gather first) is commented "may NOT be
numerically stable" and is not ported. The learnable-PReLU activation and the bottom-up gate of the
official code are not ported either.

Data: :func:`hierarchical_regression` — the reproduction's clustered regression teacher with any
number of levels (default: the spec's two-level task).

Baseline in this module: **MoLoRA** (a 1-level mixture of E LoRA experts with a linear top-k router
and the same switch balance loss).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from eff_llm._adapters import (
    AdapterLayer,
    AdapterModel,
    JsonConfig,
    validate_module_spec,
)
from eff_llm._data import HierarchicalRegression, hierarchical_regression
from eff_shared.errors import check_bool, check_choice, check_real

__all__ = [
    "HierarchicalRegression",
    "MoLoRAConfig",
    "MoLoRALinear",
    "MoLoRAModel",
    "SMoREConfig",
    "SMoRELinear",
    "SMoREModel",
    "get_molora_model",
    "get_smore_model",
    "hierarchical_regression",
    "smore_parameter_count",
]

DEFAULT_TARGETS = ["gate_proj", "up_proj", "down_proj"]  # the official LLaMA-Factory yaml
_ACTS = {"tanh": torch.tanh, "relu": F.relu, "identity": lambda t: t}
_GATE_ACTS = {"tanh": nn.Tanh, "relu": nn.ReLU, "identity": nn.Identity}
GATE_TYPES = ("switch", "noisy_topk", "dense")
INIT_METHODS = ("w_final_zero", "eq_1_layer", "b_zero", "normal")


def _positive_int_list(name: str, value: Any) -> list[int]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a list of positive ints, got {value!r}")
    out = list(value)
    if not out:
        raise ValueError(f"{name} must not be empty")
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be a list of positive ints, got {value!r}")
        if v <= 0:
            raise ValueError(f"{name} must contain values > 0, got {value!r}")
    return out


@dataclass
class SMoREConfig(JsonConfig):
    """Configuration of S'MoRE; per-layer lists are ordered **leaves first** (index 0 = leaves,
    index L−1 = root), as in the official code.

    Args:
        num_experts: s_l, experts per sub-layer.
        num_active: f_l, experts selected per parent (top-f_l); ignored by ``gate_type="dense"``,
            which uses all s_l.
        expert_ranks: r_l, rank of each expert of sub-layer l.
        target_modules / exclude_modules: peft semantics (list: exact or ``"." + suffix`` match;
            str: full regex; ``"all-linear"``). ``None`` = the official MLP targets
            ``gate_proj, up_proj, down_proj``.
        gate_dims: d_g per sub-layer (a single value is broadcast).
        down_proj_dim: width of the router's down-projection x̄ = D x.
        expert_act: σ of the experts (official default tanh: the adapter is non-linear).
        gate_act: activation inside the gate MLP.
        gate_type: ``"switch"`` (softmax top-k, switch balance loss), ``"noisy_topk"`` (normalised
            keys, noisy top-k with a cv² importance/load loss), ``"dense"`` (all experts, no loss).
        balance_loss_weight: weight of the balance loss of every gate.
        init_method: ``"w_final_zero"`` (adapter = 0 at init), ``"eq_1_layer"`` (App. C.2.1),
            ``"b_zero"`` (B = 0), ``"normal"`` (all kaiming).
        activation_position: ``"all"`` (S'MoRE) or ``"child"`` (S'MoRE*).
        shared_expert_pool: S'MoRE#: every sub-layer uses the same experts (needs equal r and s).
        lora_alpha: per-layer α_l; the expert output is scaled by α_l / r_l (default 1).
    """

    method: ClassVar[str] = "smore"

    num_experts: list[int]
    num_active: list[int]
    expert_ranks: list[int]
    target_modules: list[str] | str | None = None
    exclude_modules: list[str] | str | None = None
    gate_dims: list[int] = (32,)  # type: ignore[assignment]
    down_proj_dim: int = 32
    expert_act: Literal["tanh", "relu", "identity"] = "tanh"
    gate_act: Literal["relu", "tanh", "identity"] = "relu"
    gate_type: Literal["switch", "noisy_topk", "dense"] = "switch"
    balance_loss_weight: float = 1e-2
    init_method: Literal["w_final_zero", "eq_1_layer", "b_zero", "normal"] = "w_final_zero"
    activation_position: Literal["all", "child"] = "all"
    shared_expert_pool: bool = False
    lora_alpha: list[float] | None = None

    def __post_init__(self) -> None:
        self.num_experts = _positive_int_list("num_experts", self.num_experts)
        self.num_active = _positive_int_list("num_active", self.num_active)
        self.expert_ranks = _positive_int_list("expert_ranks", self.expert_ranks)
        n = len(self.num_experts)
        if len(self.num_active) != n or len(self.expert_ranks) != n:
            raise ValueError(
                "num_experts, num_active and expert_ranks must have the same length (one entry per "
                f"sub-layer), got {len(self.num_experts)}, {len(self.num_active)}, "
                f"{len(self.expert_ranks)}"
            )
        for lvl, (f, s) in enumerate(zip(self.num_active, self.num_experts, strict=True)):
            if f > s:
                raise ValueError(f"num_active[{lvl}]={f} exceeds num_experts[{lvl}]={s}")
        self.gate_dims = _positive_int_list("gate_dims", self.gate_dims)
        if len(self.gate_dims) not in (1, n):
            raise ValueError(f"gate_dims must have length 1 or {n}, got {len(self.gate_dims)}")
        self.gate_dims = self.gate_dims * n if len(self.gate_dims) == 1 else self.gate_dims
        (self.down_proj_dim,) = _positive_int_list("down_proj_dim", [self.down_proj_dim])
        check_choice("expert_act", self.expert_act, list(_ACTS))
        check_choice("gate_act", self.gate_act, list(_GATE_ACTS))
        check_choice("gate_type", self.gate_type, GATE_TYPES)
        check_choice("init_method", self.init_method, INIT_METHODS)
        check_choice("activation_position", self.activation_position, ["all", "child"])
        self.balance_loss_weight = check_real(
            "balance_loss_weight", self.balance_loss_weight, minimum=0
        )
        check_bool("shared_expert_pool", self.shared_expert_pool)
        if self.shared_expert_pool and (
            len(set(self.expert_ranks)) != 1 or len(set(self.num_experts)) != 1
        ):
            raise ValueError(
                "shared_expert_pool needs equal expert_ranks and num_experts across sub-layers, got "
                f"expert_ranks={self.expert_ranks}, num_experts={self.num_experts}"
            )
        if self.gate_type == "noisy_topk" and any(
            f >= s for f, s in zip(self.num_active, self.num_experts, strict=True)
        ):
            raise ValueError(
                "gate_type='noisy_topk' needs num_active[l] < num_experts[l] (top-k+1)"
            )
        if self.lora_alpha is not None:
            alpha = list(self.lora_alpha)
            if len(alpha) != n or any(
                isinstance(a, bool) or not isinstance(a, (int, float)) or not a > 0 for a in alpha
            ):
                raise ValueError(f"lora_alpha must be None or {n} positive numbers, got {alpha!r}")
            self.lora_alpha = [float(a) for a in alpha]
        self.target_modules = validate_module_spec("target_modules", self.target_modules)
        self.exclude_modules = validate_module_spec("exclude_modules", self.exclude_modules)

    @property
    def num_layers(self) -> int:
        return len(self.num_experts)

    def widths(self) -> list[int]:
        """d_0 … d_L (d_0 = 0, d_{l+1} = d_l + s_l r_l; constant s·r for a shared pool)."""
        if self.shared_expert_pool:
            return [0] + [self.num_experts[0] * self.expert_ranks[0]] * self.num_layers
        d = [0]
        for s, r in zip(self.num_experts, self.expert_ranks, strict=True):
            d.append(d[-1] + s * r)
        return d

    def gate_input_dims(self) -> list[int]:
        """din_l = down_proj_dim + Σ_{k>l} d_g[k] (the root sees x̄ only)."""
        dims = [0] * self.num_layers
        ancestors = 0
        for lvl in reversed(range(self.num_layers)):
            dims[lvl] = self.down_proj_dim + ancestors
            ancestors += self.gate_dims[lvl]
        return dims


def smore_parameter_count(config: SMoREConfig, d_in: int, d_out: int) -> dict[str, int]:
    """Trainable parameters of one S'MoRE layer (spec budget formula).

    experts = Σ_l s_l(r_l d_in + d_{l+1} r_l + r_l + d_{l+1}) + Σ_{l≥1}(d_{l+1} d_l + d_{l+1})
    + d_out d_L + d_out (A/B counted once for a shared pool); gates = down-projection
    (d_in d_down + d_down) + Σ_l [gate MLP (din_l d_g + d_g + d_g² + d_g) + keys s_l d_g
    (+ the noise projection din_l s_l for ``noisy_topk``)].
    """
    d, L = config.widths(), config.num_layers
    pool_layers = [0] if config.shared_expert_pool else range(L)
    experts = sum(
        config.num_experts[lvl]
        * (config.expert_ranks[lvl] * (d_in + 1) + d[lvl + 1] * (config.expert_ranks[lvl] + 1))
        for lvl in pool_layers
    )
    experts += sum(d[lvl + 1] * d[lvl] + d[lvl + 1] for lvl in range(1, L))
    experts += d_out * d[L] + d_out
    dd = config.down_proj_dim
    gates = d_in * dd + dd
    for lvl, din in enumerate(config.gate_input_dims()):
        g = config.gate_dims[lvl]
        gates += din * g + g + g * g + g + config.num_experts[lvl] * g
        if config.gate_type == "noisy_topk":
            gates += din * config.num_experts[lvl]
    return {"experts": experts, "gates": gates, "total": experts + gates}


# ------------------------------------------------------------------------------------------------
# gates


def _cv_squared(x: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    if x.shape[0] == 1:
        return x.new_zeros(())
    x = x.float()
    return x.var() / (x.mean() ** 2 + eps)


class SMoREGate(nn.Module):
    """One sub-layer's router: ``MLP(u) Kᵀ`` → top-f selection (official ``SMoRE*Gate``)."""

    def __init__(
        self,
        dim_in: int,
        dim_gate: int,
        num_experts: int,
        num_active: int,
        act: str,
        gate_type: str,
        balance_loss_weight: float,
    ) -> None:
        super().__init__()
        self.num_experts, self.num_active = num_experts, num_active
        self.gate_type, self.balance_loss_weight = gate_type, balance_loss_weight
        self.mlp = nn.Sequential(
            nn.Linear(dim_in, dim_gate), _GATE_ACTS[act](), nn.Linear(dim_gate, dim_gate)
        )
        self.keys = nn.Parameter(torch.empty(num_experts, dim_gate))
        nn.init.uniform_(self.keys)
        self.noise = None
        if gate_type == "noisy_topk":
            self.noise = nn.Linear(dim_in, num_experts, bias=False)
            nn.init.zeros_(self.noise.weight)

    def forward(
        self, u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``u (T, *prefix, din)`` → indices and scores ``(T, *prefix, f)``, balance loss, selected
        keys ``(T, *prefix, f, d_g)``."""
        if self.gate_type == "switch":
            return self._switch(u)
        if self.gate_type == "dense":
            probs = F.softmax(self.mlp(u) @ self.keys.t(), dim=-1)
            idx = torch.arange(self.num_experts, device=u.device).expand(probs.shape)
            return idx, probs, probs.new_zeros(()), self.keys[idx]
        return self._noisy_topk(u)

    def _switch(self, u: torch.Tensor):
        probs = F.softmax(self.mlp(u) @ self.keys.t(), dim=-1)
        scores, idx = probs.topk(self.num_active, dim=-1)
        if self.num_active > 1:
            scores = scores / scores.sum(-1, keepdim=True)
        slots = probs.shape[:-1].numel()  # tokens × parents routed at this layer
        tokens_per_expert = (
            F.one_hot(idx, self.num_experts).reshape(-1, self.num_experts).sum(0) / slots
        )
        prob_per_expert = probs.reshape(-1, self.num_experts).sum(0) / slots
        loss = (
            self.balance_loss_weight
            * self.num_experts
            * (tokens_per_expert * prob_per_expert).sum()
        )
        return idx, scores, loss, self.keys[idx]

    def _noisy_topk(self, u: torch.Tensor):
        q = F.normalize(self.mlp(u), dim=-1)
        k = F.normalize(self.keys, dim=-1)
        clean = q @ k.t()
        noisy = self.training
        if noisy:
            control = F.softplus(self.noise(u)) + 1e-2
            logits = clean + torch.randn_like(clean) * control
        else:
            logits = clean
        top_logits, top_idx = logits.topk(self.num_active + 1, dim=-1)
        idx = top_idx[..., : self.num_active]
        scores = top_logits[..., : self.num_active]
        if self.num_active > 1:  # the official gate uses the raw logit when f = 1
            scores = F.softmax(scores.float(), dim=-1).to(logits.dtype)
        filtered = torch.zeros_like(logits).scatter(-1, idx, scores)
        importance = filtered.reshape(-1, self.num_experts).sum(0)
        if noisy:
            normal = torch.distributions.Normal(0.0, 1.0)
            is_in = logits > top_logits[..., -1:]
            p_in = normal.cdf((clean - top_logits[..., -1:]) / control)
            p_out = normal.cdf((clean - top_logits[..., -2:-1]) / control)
            load = torch.where(is_in, p_in, p_out).reshape(-1, self.num_experts).sum(0)
        else:
            load = (filtered > 0).reshape(-1, self.num_experts).sum(0).to(logits.dtype)
        loss = self.balance_loss_weight * (_cv_squared(importance) + _cv_squared(load))
        return idx, scores, loss, k[idx]


# ------------------------------------------------------------------------------------------------
# the adapter layer


def _gather(all_out: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``all_out (T, s, o)``, ``idx (T, *P)`` → ``(T, *P, o)``."""
    t, o = all_out.shape[0], all_out.shape[-1]
    flat = idx.reshape(t, -1)
    picked = all_out.gather(1, flat.unsqueeze(-1).expand(t, flat.shape[1], o))
    return picked.reshape(*idx.shape, o)


class SMoRELinear(AdapterLayer):
    """``nn.Linear`` + S'MoRE (module docstring has the equations). ``last_aux_loss`` holds the
    balance loss of the last forward, ``last_routing`` its (indices, scores) per sub-layer."""

    prefix: ClassVar[str] = "smore_"

    def __init__(self, base_layer: nn.Linear, config: SMoREConfig) -> None:
        super().__init__(base_layer)
        self.config = config
        w = base_layer.weight
        kw = {"device": w.device, "dtype": w.dtype}
        L, d = config.num_layers, config.widths()
        self.smore_down = nn.Linear(self.in_features, config.down_proj_dim, **kw)
        self.smore_gates = nn.ModuleList(
            SMoREGate(
                din,
                config.gate_dims[lvl],
                config.num_experts[lvl],
                config.num_active[lvl],
                config.gate_act,
                config.gate_type,
                config.balance_loss_weight,
            ).to(**kw)
            for lvl, din in enumerate(config.gate_input_dims())
        )
        pool = 1 if config.shared_expert_pool else L
        s, r = config.num_experts, config.expert_ranks

        def plist(shapes):
            return nn.ParameterList(nn.Parameter(torch.zeros(*sh, **kw)) for sh in shapes)

        self.smore_A = plist([(s[lvl], r[lvl], self.in_features) for lvl in range(pool)])
        self.smore_A_bias = plist([(s[lvl], r[lvl]) for lvl in range(pool)])
        self.smore_B = plist([(s[lvl], d[lvl + 1], r[lvl]) for lvl in range(pool)])
        self.smore_B_bias = plist([(s[lvl], d[lvl + 1]) for lvl in range(pool)])
        self.smore_W = plist(
            [(d[lvl + 1], d[lvl]) for lvl in range(1, L)]
        )  # W_l stored at index l − 1
        self.smore_W_bias = plist([(d[lvl + 1],) for lvl in range(1, L)])
        self.smore_W_final = nn.Parameter(torch.zeros(self.out_features, d[L], **kw))
        self.smore_W_final_bias = nn.Parameter(torch.zeros(self.out_features, **kw))
        alpha = config.lora_alpha or [float(x) for x in r]
        self.scaling = [a / x for a, x in zip(alpha, r, strict=True)]
        self.last_routing: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Official ``reset_parameters`` (biases are already 0)."""
        method = self.config.init_method
        for A in self.smore_A:
            for a in A:
                nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        for B in self.smore_B:
            rank = B.shape[-1]
            for i, b in enumerate(B):
                if method == "b_zero":
                    b.zero_()
                elif method == "eq_1_layer":
                    b.zero_()
                    b[i * rank : (i + 1) * rank] = torch.eye(rank, dtype=b.dtype, device=b.device)
                else:
                    nn.init.kaiming_uniform_(b, a=math.sqrt(5))
        for W in self.smore_W:
            if method == "eq_1_layer":  # W_l = [0; I]: the children's vector goes to the last rows
                W.zero_()
                W[-W.shape[1] :] = torch.eye(W.shape[1], dtype=W.dtype, device=W.device)
            else:
                nn.init.kaiming_uniform_(W, a=math.sqrt(5))
        if method in ("w_final_zero", "eq_1_layer"):
            self.smore_W_final.zero_()
        else:
            nn.init.kaiming_uniform_(self.smore_W_final, a=math.sqrt(5))

    def experts(self, lvl: int) -> tuple[torch.Tensor, ...]:
        """(A, a, B, b) of sub-layer ``lvl`` (the same tensors for every lvl with a shared pool)."""
        k = 0 if self.config.shared_expert_pool else lvl
        return self.smore_A[k], self.smore_A_bias[k], self.smore_B[k], self.smore_B_bias[k]

    def route(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Top-down routing: per sub-layer indices/scores ``(T, f_{L−1}, …, f_l)`` and the loss."""
        L = self.config.num_layers
        u = self.smore_down(x)
        idx: list[torch.Tensor] = [x.new_zeros(0, dtype=torch.long)] * L
        scores: list[torch.Tensor] = [x.new_zeros(0)] * L
        loss = x.new_zeros(())
        for lvl in reversed(range(L)):
            idx[lvl], scores[lvl], aux, keys = self.smore_gates[lvl](u)
            loss = loss + aux
            if lvl > 0:
                u = torch.cat([u.unsqueeze(-2).expand(*idx[lvl].shape, u.shape[-1]), keys], dim=-1)
        return idx, scores, loss

    def delta(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx, scores, loss = self.route(x)
        self.last_routing = [(i.detach(), s.detach()) for i, s in zip(idx, scores, strict=True)]
        act = _ACTS[self.config.expert_act]
        child = self.config.activation_position == "child"
        h = None
        for lvl in range(self.config.num_layers):
            A, a, B, b = self.experts(lvl)
            z = torch.einsum("td,srd->tsr", x, A) + a
            all_out = (torch.einsum("tsr,sor->tso", z, B) + b) * self.scaling[lvl]
            pre = _gather(all_out, idx[lvl])  # (T, *P_l, f_l, d_{lvl+1})
            sc = scores[lvl].unsqueeze(-1)
            if h is None:
                h = (sc * pre).sum(-2) if child else (sc * act(pre)).sum(-2)
                continue
            W, w = self.smore_W[lvl - 1], self.smore_W_bias[lvl - 1]
            if child:
                h = (sc * pre + act(h) @ W.t() + w).sum(-2)
            else:
                h = (sc * act(pre + h @ W.t() + w)).sum(-2)
        return h @ self.smore_W_final.t() + self.smore_W_final_bias, loss

    def extra_repr(self) -> str:
        c = self.config
        return f"s={c.num_experts}, f={c.num_active}, r={c.expert_ranks}, gate={c.gate_type}"


class SMoREModel(AdapterModel):
    """A model whose target ``nn.Linear`` modules carry S'MoRE (see :func:`get_smore_model`)."""

    layer_cls: ClassVar[type[AdapterLayer]] = SMoRELinear
    config_cls: ClassVar[type[JsonConfig]] = SMoREConfig
    default_targets: ClassVar[list[str]] = DEFAULT_TARGETS

    def num_trainable_parameters(self, exclude_gates: bool = False) -> int:
        """Trainable adapter parameters; ``exclude_gates`` leaves out routers and down-projections."""
        total = 0
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            if exclude_gates and (".smore_gates." in name or ".smore_down." in name):
                continue
            total += p.numel()
        return total

    def merge_and_unload(self) -> nn.Module:
        raise NotImplementedError(
            "S'MoRE cannot be merged into W: its update depends on the input (routing and the "
            "expert activation). Use unload() to drop it."
        )


def get_smore_model(
    model: nn.Module, config: SMoREConfig, adapter_name: str = "default", *, seed: int | None = None
) -> SMoREModel:
    """Wrap every target ``nn.Linear`` of ``model`` with S'MoRE, freeze the base model, return the
    wrapper. ``seed`` makes the adapter initialisation reproducible (torch's global RNG otherwise).
    Only one adapter per model is supported (``adapter_name`` is kept for peft compatibility)."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module (e.g. a transformers model built from its config), "
            f"got {type(model).__name__}"
        )
    if not isinstance(config, SMoREConfig):
        raise TypeError(f"config must be an SMoREConfig, got {type(config).__name__}")
    if adapter_name != "default":
        raise ValueError(
            f"only one adapter is supported; adapter_name must be 'default', got {adapter_name!r}"
        )
    return SMoREModel.wrap(model, config, seed)


# ------------------------------------------------------------------------------------------------
# baseline: MoLoRA (one level of LoRA experts, linear top-k router)


@dataclass
class MoLoRAConfig(JsonConfig):
    """Mixture of LoRA experts: E experts of rank r, router ``Linear(d_in, E, bias=False)``, top-k
    softmax (renormalised), the switch balance loss; B = 0 at init so the adapter starts at 0."""

    method: ClassVar[str] = "molora"

    num_experts: int = 8
    num_active: int = 2
    rank: int = 4
    target_modules: list[str] | str | None = None
    exclude_modules: list[str] | str | None = None
    balance_loss_weight: float = 1e-2
    lora_alpha: float | None = None

    def __post_init__(self) -> None:
        (self.num_experts, self.num_active, self.rank) = _positive_int_list(
            "num_experts/num_active/rank", [self.num_experts, self.num_active, self.rank]
        )
        if self.num_active > self.num_experts:
            raise ValueError(f"num_active={self.num_active} exceeds num_experts={self.num_experts}")
        self.balance_loss_weight = check_real(
            "balance_loss_weight", self.balance_loss_weight, minimum=0
        )
        if self.lora_alpha is not None:
            self.lora_alpha = check_real("lora_alpha", self.lora_alpha, minimum=0)
            if self.lora_alpha == 0:
                raise ValueError("lora_alpha must be > 0")
        self.target_modules = validate_module_spec("target_modules", self.target_modules)
        self.exclude_modules = validate_module_spec("exclude_modules", self.exclude_modules)


class MoLoRALinear(AdapterLayer):
    """``nn.Linear`` + Σ_{e ∈ top-k} p_e·γ·B_e A_e x (γ = lora_alpha / r, default 1)."""

    prefix: ClassVar[str] = "molora_"

    def __init__(self, base_layer: nn.Linear, config: MoLoRAConfig) -> None:
        super().__init__(base_layer)
        self.config = config
        kw = {"device": base_layer.weight.device, "dtype": base_layer.weight.dtype}
        e, r = config.num_experts, config.rank
        self.molora_A = nn.Parameter(torch.empty(e, r, self.in_features, **kw))
        self.molora_B = nn.Parameter(torch.zeros(e, self.out_features, r, **kw))
        self.molora_router = nn.Linear(self.in_features, e, bias=False, **kw)
        with torch.no_grad():
            for a in self.molora_A:
                nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.scaling = (config.lora_alpha or r) / r

    def delta(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        probs = F.softmax(self.molora_router(x), dim=-1)
        scores, idx = probs.topk(c.num_active, dim=-1)
        if c.num_active > 1:
            scores = scores / scores.sum(-1, keepdim=True)
        z = torch.einsum("td,erd->ter", x, self.molora_A)
        all_out = torch.einsum("ter,eor->teo", z, self.molora_B) * self.scaling
        y = (scores.unsqueeze(-1) * _gather(all_out, idx)).sum(-2)
        frac = F.one_hot(idx, c.num_experts).reshape(-1, c.num_experts).sum(0) / len(x)
        loss = c.balance_loss_weight * c.num_experts * (frac * probs.mean(0)).sum()
        return y, loss


class MoLoRAModel(AdapterModel):
    layer_cls: ClassVar[type[AdapterLayer]] = MoLoRALinear
    config_cls: ClassVar[type[JsonConfig]] = MoLoRAConfig
    default_targets: ClassVar[list[str]] = DEFAULT_TARGETS


def get_molora_model(
    model: nn.Module, config: MoLoRAConfig, *, seed: int | None = None
) -> MoLoRAModel:
    """Wrap the target ``nn.Linear`` modules of ``model`` with MoLoRA (baseline of S'MoRE)."""
    return MoLoRAModel.wrap(model, config, seed)
