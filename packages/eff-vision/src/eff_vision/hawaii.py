"""HAWAII: distilling several visual experts into one encoder with teacher-specific LoRA + routers.

Yimu Wang, Mozhgan Nasr Azadani, Sean Sedwards, Krzysztof Czarnecki, "HAWAII: Hierarchical Visual
Knowledge Transfer for Efficient Vision-Language Models", NeurIPS 2025, arXiv 2506.19072. The code
is unreleased (``yimuwangcs/wise-hawaii`` holds only a README). **Our reading, not prototyped**: the
mechanics come from the predecessor MoVE-KD (Cao et al., CVPR 2025, ``hey-cjj/MoVE-KD``:
``moe_lora.py`` and the distillation in ``move_llava_llama.py``, as summarised in the spec); the
HAWAII-specific parts are our reading of the abstract. No ``peft`` dependency (peft has no MoE-LoRA
router); the API is peft-like (:func:`get_hawaii_model`, :func:`merge_and_unload`).

Pieces (spec, "HAWAII → Algorithm"):

- **Teacher adapters** (:class:`TeacherAdapter`): per teacher, map the teacher's tokens to the
  student's token grid and width: LayerNorm (no affine) over channels, spatial resampling of the
  token grid (area when shrinking, bilinear when enlarging), then a per-token Linear → GELU →
  Linear (MoVE-KD: two 1-D convs/linears with GELU; our reading keeps the token-axis part as a
  fixed resampling). ``linear=True`` gives the linear adapters of the lite baseline.
- **LoRA experts with routers** (:class:`TeacherSpecificLoRALinear`) on the target ``nn.Linear``
  layers (default fc1/fc2 of every MLP): frozen W plus experts ΔW_e = (α/r)·B_e A_e (A Kaiming,
  B = 0, dropout on the input; MoVE-KD: r = 32, α = 1, dropout 0.05). A linear router on the token,
  softmax, top-k gating with the **un-renormalised** softmax weight of each selected expert
  (Switch/GShard style, so top-1 routers receive a gradient); balance loss
  E·Σ_e mean(p_e)·mean(onehot_e) per router (MoVE-KD's Σ_e mean(prob_e)·mean(onehot_e) scaled by
  the number of experts E, so a uniform router gives 1).
- **HAWAII changes (our reading):**

  1. *Teacher-specific LoRA*: expert t is tied to teacher t. In the fine-grained pass for teacher t
     the layer output is W x + ΔW_t x: the distillation loss of teacher t flows through adapter t
     only ("avoiding noisy guidance"). At inference the **teacher router** mixes the teacher experts
     token by token (it "learns to switch between teacher-specific knowledge").
  2. *Fine-grained distillation*: per-token squared error between the student tokens of the pass
     for teacher t and the adapted teacher tokens, weighted by **per-teacher token importance**
     (``cls_attention``: the softmax attention row of the teacher's CLS token over its patch tokens
     — for convolutional teachers without a CLS token the mean token is the query — computed on
     the LayerNormed teacher tokens, mean 1 over tokens; ``teacher_norm``: weights ∝ token norm).
  3. *Coarse-grained distillation*: ``num_general_experts`` **general-knowledge** LoRA experts with
     their own router, plus the teacher router, are trained to match a summary of all teachers:
     the importance-weighted mean of the adapted teacher tokens (detached). In this pass the
     teacher experts' outputs are detached, so the coarse loss trains the routers and the general
     experts while every teacher expert stays aligned with its teacher.
  4. No language-modelling loss here (no VLM); the per-sample teacher weights of MoVE-KD are
     replaced by the per-token importance shares of the summary.

  Loss: L = L_fine (mean over teachers) + ``coarse_weight``·L_coarse + ``balance_weight``·L_bal.
- ``variant="lite"`` is the MoVE-KD-lite / plain multi-teacher feature-regression baseline: one
  shared LoRA expert (no router), per-teacher **linear** adapters, unweighted MSE to every teacher
  from one student pass, no coarse loss.

Inference is one student forward (router mode). :func:`merge_and_unload` folds a fixed route into
the base weights exactly (the lite variant's single expert, or ``route=t``); a token-dependent
router cannot be merged into one matrix, so ``route=None`` with several experts raises.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_fraction, check_positive
from eff_shared.progress import track
from eff_shared.torch import seeded
from eff_vision.combo import resample_grid

__all__ = [
    "HawaiiConfig",
    "HawaiiDistiller",
    "HawaiiModel",
    "TeacherAdapter",
    "TeacherSpecificLoRALinear",
    "TinyViT",
    "balance_loss",
    "get_hawaii_model",
    "merge_and_unload",
    "token_importance",
]


@dataclass(frozen=True)
class HawaiiConfig:
    """LoRA-expert, router and loss settings (validated). ``variant``: ``hawaii`` or ``lite``."""

    r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = ("fc1", "fc2")
    num_teachers: int = 4
    num_general_experts: int = 2
    router: str = "softmax"
    top_k: int = 1
    balance_weight: float = 0.01
    token_weighting: Literal["cls_attention", "teacher_norm"] | None = "cls_attention"
    variant: Literal["hawaii", "lite"] = "hawaii"
    coarse_weight: float = 1.0
    adapter_hidden: int | None = None
    adapter_side: Literal["student", "teacher"] = "student"

    def __post_init__(self) -> None:
        check_positive("r", self.r, integer=True)
        check_positive("lora_alpha", self.lora_alpha)
        check_fraction("lora_dropout", self.lora_dropout)
        if self.lora_dropout >= 1:
            raise ValueError(f"lora_dropout must be < 1, got {self.lora_dropout}")
        if isinstance(self.target_modules, str) or not self.target_modules:
            raise ValueError(
                f"target_modules must be a non-empty tuple of names, got {self.target_modules!r}"
            )
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        check_positive("num_teachers", self.num_teachers, integer=True)
        check_positive("num_general_experts", self.num_general_experts, strict=False, integer=True)
        check_choice("router", self.router, ["softmax"])
        check_choice(
            "token_weighting", self.token_weighting, ["cls_attention", "teacher_norm", None]
        )
        check_choice("variant", self.variant, ["hawaii", "lite"])
        check_positive("top_k", self.top_k, integer=True)
        check_positive("balance_weight", self.balance_weight, strict=False)
        check_positive("coarse_weight", self.coarse_weight, strict=False)
        if self.adapter_hidden is not None:
            check_positive("adapter_hidden", self.adapter_hidden, integer=True)
        check_choice("adapter_side", self.adapter_side, ["student", "teacher"])
        n_exp = 1 if self.variant == "lite" else self.num_teachers
        if self.top_k > n_exp:
            raise ValueError(
                f"top_k ({self.top_k}) must be <= the number of teacher experts ({n_exp})"
            )


def balance_loss(probs: Tensor) -> Tensor:
    """E·Σ_e mean(p_e)·mean(onehot(argmax p)_e) over all tokens; 1 for a uniform router."""
    p = probs.reshape(-1, probs.shape[-1])
    e = p.shape[-1]
    onehot = F.one_hot(p.argmax(-1), e).to(p.dtype)
    return e * (p.mean(0) * onehot.mean(0)).sum()


def _topk_gates(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(gates, probs): gates = softmax probs kept on the top-k experts (not renormalised)."""
    probs = logits.softmax(-1)
    if k >= probs.shape[-1]:
        return probs, probs
    idx = probs.topk(k, dim=-1).indices
    mask = torch.zeros_like(probs).scatter_(-1, idx, 1.0)
    return probs * mask, probs


class TeacherSpecificLoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus teacher-specific and general LoRA experts with two routers.

    Experts 0..T−1 are tied to the teachers, T..T+G−1 are general. Modes (set by
    :meth:`HawaiiModel.route`): ``"router"`` (inference: W x + Σ gates_t ΔW_t x + Σ gates_g ΔW_g x),
    ``("teacher", t)`` (W x + ΔW_t x), ``"coarse"`` (router mode with the teacher experts'
    outputs detached), ``"base"`` (W x).
    """

    def __init__(
        self,
        base: nn.Linear,
        num_teachers: int,
        num_general: int,
        r: int,
        lora_alpha: float,
        lora_dropout: float = 0.0,
        top_k: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base must be an nn.Linear, got {type(base).__name__}")
        self.base = base.requires_grad_(False)
        self.num_teachers, self.num_general, self.r, self.top_k = (
            num_teachers,
            num_general,
            r,
            top_k,
        )
        self.scaling = lora_alpha / r
        n_exp = num_teachers + num_general
        fin, fout = base.in_features, base.out_features
        dd = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(n_exp, r, fin, **dd))
        self.lora_B = nn.Parameter(torch.zeros(n_exp, fout, r, **dd))
        for e in range(n_exp):
            nn.init.kaiming_uniform_(self.lora_A.data[e], a=math.sqrt(5))
        self.dropout = nn.Dropout(lora_dropout) if lora_dropout > 0 else nn.Identity()
        self.teacher_router = nn.Linear(fin, num_teachers, **dd) if num_teachers > 1 else None
        self.general_router = nn.Linear(fin, num_general, **dd) if num_general > 1 else None
        for router in (self.teacher_router, self.general_router):
            if router is not None:
                nn.init.normal_(router.weight, std=0.02)
                nn.init.zeros_(router.bias)
        self.mode: str | tuple[str, int] = "router"
        self.record = False
        self.recorded: list[Tensor] = []
        self.last_balance: Tensor | None = None

    def _delta(self, h: Tensor, experts: slice | int) -> Tensor:
        a, b = self.lora_A[experts], self.lora_B[experts]
        if a.ndim == 2:  # one expert
            return (h @ a.T) @ b.T * self.scaling
        z = torch.einsum("...i,eri->...er", h, a)
        return torch.einsum("...er,eor->...eo", z, b) * self.scaling

    def _mix(
        self, x: Tensor, h: Tensor, experts: slice, n: int, router: nn.Linear | None, detach: bool
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        if n == 1:
            d = self._delta(h, experts.start)
            return (d.detach() if detach else d), None, None
        gates, probs = _topk_gates(router(x), min(self.top_k, n))
        d = self._delta(h, experts)
        if detach:
            d = d.detach()
        return (gates.unsqueeze(-1) * d).sum(-2), probs, balance_loss(probs)

    def forward(self, x: Tensor) -> Tensor:
        y = self.base(x)
        mode = self.mode
        if mode == "base":
            return y
        h = self.dropout(x)
        if isinstance(mode, tuple) and isinstance(mode[1], Tensor):  # one teacher expert per sample
            idx = mode[1]
            hb = h.reshape(len(idx), -1, h.shape[-1])
            z = torch.einsum("bni,bri->bnr", hb, self.lora_A[idx])
            d = torch.einsum("bnr,bor->bno", z, self.lora_B[idx]) * self.scaling
            return y + d.reshape(y.shape)
        if isinstance(mode, tuple):
            return y + self._delta(h, mode[1])
        t, g = self.num_teachers, self.num_general
        d_t, p_t, bal_t = self._mix(
            x, h, slice(0, t), t, self.teacher_router, detach=mode == "coarse"
        )
        y = y + d_t
        bal = [b for b in (bal_t,) if b is not None]
        if g:
            d_g, _, bal_g = self._mix(x, h, slice(t, t + g), g, self.general_router, detach=False)
            y = y + d_g
            if bal_g is not None:
                bal.append(bal_g)
        self.last_balance = torch.stack(bal).mean() if bal else None
        if self.record and p_t is not None:
            self.recorded.append(p_t.detach().reshape(-1, t))
        return y

    def merged_weight(self, expert: int | None) -> Tensor:
        """W + ΔW_e for one expert (or W alone for ``None``)."""
        w = self.base.weight.detach().clone()
        if expert is not None:
            w += self.scaling * self.lora_B[expert].detach() @ self.lora_A[expert].detach()
        return w


def _matches(name: str, targets: Sequence[str]) -> bool:
    return any(name == t or name.endswith("." + t) for t in targets)


class HawaiiModel(nn.Module):
    """A student whose target ``nn.Linear`` layers are :class:`TeacherSpecificLoRALinear` (in place,
    like peft). Only the LoRA experts and routers are trainable. ``forward`` returns the student's
    tokens (``forward_features`` when the student has it, timm-style)."""

    def __init__(self, student: nn.Module, config: HawaiiConfig) -> None:
        super().__init__()
        if not isinstance(config, HawaiiConfig):
            raise TypeError(f"config must be a HawaiiConfig, got {type(config).__name__}")
        linear_names = [n for n, m in student.named_modules() if isinstance(m, nn.Linear)]
        targets = [n for n in linear_names if _matches(n, config.target_modules)]
        if not targets:
            raise ValueError(
                f"target_modules {list(config.target_modules)} match no nn.Linear of the student; "
                f"its Linear modules are: {', '.join(linear_names) or '(none)'}"
            )
        student.requires_grad_(False)
        self.config = config
        n_t = 1 if config.variant == "lite" else config.num_teachers
        n_g = 0 if config.variant == "lite" else config.num_general_experts
        self.layer_names = targets
        for name in targets:
            parent_name, _, child = name.rpartition(".")
            parent = student.get_submodule(parent_name) if parent_name else student
            wrapped = TeacherSpecificLoRALinear(
                getattr(parent, child),
                n_t,
                n_g,
                config.r,
                config.lora_alpha,
                config.lora_dropout,
                config.top_k,
            )
            setattr(parent, child, wrapped)
        self.base_model = student
        self.num_prefix_tokens = int(getattr(student, "num_prefix_tokens", 0))

    def lora_layers(self) -> list[TeacherSpecificLoRALinear]:
        return [m for m in self.base_model.modules() if isinstance(m, TeacherSpecificLoRALinear)]

    def forward(self, x: Tensor) -> Tensor:
        fwd = getattr(self.base_model, "forward_features", None)
        return fwd(x) if callable(fwd) else self.base_model(x)

    def patch_tokens(self, x: Tensor) -> Tensor:
        """The student's tokens without its prefix (CLS) tokens: [B, N, D]."""
        out = self(x)
        if out.ndim != 3:
            raise ValueError(
                f"the student must return tokens [B, N, D], got shape {tuple(out.shape)}"
            )
        return out[:, self.num_prefix_tokens :]

    @contextmanager
    def route(self, mode: str | tuple[str, int]) -> Iterator[None]:
        """Temporarily set the routing mode of every LoRA layer (see :class:`TeacherSpecificLoRALinear`)."""
        if isinstance(mode, tuple):
            n_t = self.lora_layers()[0].num_teachers
            idx = mode[1]
            ok = mode[0] == "teacher" and (
                (
                    isinstance(idx, Tensor)
                    and idx.ndim == 1
                    and bool(((idx >= 0) & (idx < n_t)).all())
                )
                or (isinstance(idx, int) and 0 <= idx < n_t)
            )
            if not ok:
                raise ValueError(
                    f"mode must be ('teacher', t) with 0 <= t < {n_t} (an int, or a 1-D tensor of one index "
                    f"per sample), got {mode!r}"
                )
        else:
            check_choice("mode", mode, ["router", "coarse", "base"])
        layers = self.lora_layers()
        old = [m.mode for m in layers]
        for m in layers:
            m.mode = mode
        try:
            yield
        finally:
            for m, o in zip(layers, old, strict=True):
                m.mode = o

    def balance_loss(self) -> Tensor:
        """Mean balance loss of the routers used in the last router/coarse forward (0 if none);
        reading it clears it."""
        vals = [m.last_balance for m in self.lora_layers() if m.last_balance is not None]
        for m in self.lora_layers():
            m.last_balance = None  # consumed: keeps no autograd graph alive on the module
        if not vals:
            return torch.zeros((), device=self.lora_layers()[0].lora_A.device)
        return torch.stack(vals).mean()

    @torch.no_grad()
    def router_stats(self, x: Tensor) -> dict[str, object]:
        """Teacher-router statistics over all tokens and LoRA layers in router mode: mean entropy
        (nats) and the share of (token, layer) pairs whose argmax route is each teacher expert."""
        layers = self.lora_layers()
        if layers[0].teacher_router is None:
            return {"entropy": 0.0, "share": [1.0]}
        was = self.training
        self.eval()
        for m in layers:
            m.record, m.recorded = True, []
        try:
            with self.route("router"):
                self(x)
            probs = torch.cat([torch.cat(m.recorded) for m in layers])
        finally:
            for m in layers:
                m.record, m.recorded = False, []
            self.train(was)
        ent = float(-(probs * probs.clamp_min(1e-12).log()).sum(-1).mean())
        share = torch.bincount(probs.argmax(-1), minlength=probs.shape[-1]).float() / len(probs)
        return {"entropy": ent, "share": share.tolist()}

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]


def get_hawaii_model(student: nn.Module, config: HawaiiConfig) -> HawaiiModel:
    """Wrap the target ``nn.Linear`` layers of ``student`` (in place) and freeze everything else."""
    return HawaiiModel(student, config)


def merge_and_unload(model: HawaiiModel, route: int | None = None) -> nn.Module:
    """Fold a fixed route into the base weights and return the plain student (like peft).

    ``route=t`` merges teacher expert t (exactly the ``("teacher", t)`` mode); ``route=None`` merges
    the single expert of a lite model. A token-dependent router cannot be folded into one matrix,
    so ``route=None`` with several experts raises ``ValueError``.
    """
    if not isinstance(model, HawaiiModel):
        raise TypeError(f"model must be a HawaiiModel, got {type(model).__name__}")
    for name in model.layer_names:
        parent_name, _, child = name.rpartition(".")
        parent = model.base_model.get_submodule(parent_name) if parent_name else model.base_model
        layer: TeacherSpecificLoRALinear = getattr(parent, child)
        n_exp = layer.num_teachers + layer.num_general
        if route is None and n_exp != 1:
            raise ValueError(
                f"layer {name!r} has {n_exp} experts behind a token-dependent router; "
                "pass route=<teacher index> to merge one teacher expert"
            )
        if route is not None and not 0 <= route < layer.num_teachers:
            raise ValueError(f"route must lie in [0, {layer.num_teachers}), got {route}")
        base = layer.base
        with torch.no_grad():
            base.weight.copy_(layer.merged_weight(0 if route is None else route))
        setattr(parent, child, base)
    return model.base_model


def _grid_of(tokens_or_map: Tensor, prefix: int, what: str) -> tuple[Tensor, tuple[int, int]]:
    """(B, N, C) tokens on a 2-D grid and the grid, from a 4-D map or 3-D tokens."""
    if tokens_or_map.ndim == 4:
        _b, _c, h, w = tokens_or_map.shape
        return tokens_or_map.flatten(2).transpose(1, 2), (h, w)
    if tokens_or_map.ndim == 3:
        tok = tokens_or_map[:, prefix:]
        side = math.isqrt(tok.shape[1])
        if side == 0 or side * side != tok.shape[1]:
            raise ValueError(
                f"{what} gives {tokens_or_map.shape[1]} tokens ({prefix} prefix): not a square grid, so it "
                "cannot be resampled to the student grid"
            )
        return tok, (side, side)
    raise ValueError(
        f"{what} gives a {tokens_or_map.ndim}-D output {tuple(tokens_or_map.shape)}: no token grid, so it "
        "cannot be resampled to the student grid"
    )


def _as_grid(n: int | tuple[int, int], what: str) -> tuple[int, int]:
    if isinstance(n, tuple):
        if len(n) != 2 or min(n) < 1:
            raise ValueError(f"{what} must be a positive token count or an (h, w) grid, got {n!r}")
        return (int(n[0]), int(n[1]))
    side = math.isqrt(int(n))
    if n < 1 or side * side != n:
        raise ValueError(f"{what} = {n} tokens is not a square grid; give an (h, w) grid")
    return (side, side)


def _resample_tokens(tokens: Tensor, grid_in: tuple[int, int], grid_out: tuple[int, int]) -> Tensor:
    if grid_in == grid_out:
        return tokens
    b, _n, c = tokens.shape
    return resample_grid(tokens.transpose(1, 2).reshape(b, c, *grid_in), grid_out)


class TeacherAdapter(nn.Module):
    """Teacher tokens [B, in_tokens, in_dim] → student grid and width [B, out_tokens, out_dim].

    LayerNorm (no affine) per token, spatial resampling of the grid (``in_tokens``/``out_tokens``: a
    square token count or an (h, w) grid), then Linear → GELU → Linear (or one Linear if ``linear``).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        in_tokens: int | tuple[int, int],
        out_tokens: int | tuple[int, int],
        hidden: int | None = None,
        linear: bool = False,
    ) -> None:
        super().__init__()
        check_positive("in_dim", in_dim, integer=True)
        check_positive("out_dim", out_dim, integer=True)
        self.grid_in = _as_grid(in_tokens, "in_tokens")
        self.grid_out = _as_grid(out_tokens, "out_tokens")
        self.in_dim = in_dim
        if linear:
            self.net: nn.Module = nn.Linear(in_dim, out_dim)
        else:
            hid = hidden or out_dim
            self.net = nn.Sequential(nn.Linear(in_dim, hid), nn.GELU(), nn.Linear(hid, out_dim))

    def forward(self, tokens: Tensor) -> Tensor:
        n_in = self.grid_in[0] * self.grid_in[1]
        if tokens.ndim != 3 or tokens.shape[1] != n_in or tokens.shape[2] != self.in_dim:
            raise ValueError(
                f"tokens must be [B, {n_in}, {self.in_dim}], got {tuple(tokens.shape)}"
            )
        z = F.layer_norm(tokens, (self.in_dim,))
        return self.net(_resample_tokens(z, self.grid_in, self.grid_out))


def token_importance(
    tokens: Tensor, kind: str | None, cls: Tensor | None = None, temperature: float = 1.0
) -> Tensor:
    """Per-token importance [B, N] with mean 1 over the tokens (see the module docstring)."""
    b, n, c = tokens.shape
    if kind is None:
        return torch.ones(b, n, dtype=tokens.dtype, device=tokens.device)
    check_choice("kind", kind, ["cls_attention", "teacher_norm"])
    if kind == "teacher_norm":
        norms = tokens.norm(dim=-1)
        return n * norms / norms.sum(-1, keepdim=True).clamp_min(1e-12)
    z = F.layer_norm(tokens, (c,))
    q = F.layer_norm(cls, (c,)) if cls is not None else z.mean(1)
    att = torch.einsum("bc,bnc->bn", q, z) / (math.sqrt(c) * temperature)
    return n * att.softmax(-1)


class HawaiiDistiller(nn.Module):
    """Multi-teacher distillation of ``student`` (wrapped by :func:`get_hawaii_model` unless it is a
    :class:`HawaiiModel` already) from frozen ``teachers`` (``{name: nn.Module}`` or ``[(name, module)]``
    pairs; each returns a [B, C, H, W] map or [B, N, C] tokens with ``num_prefix_tokens`` prefix).

    Adapters are built on the first :meth:`build`/:meth:`loss` call (from the shapes); create the
    optimizer afterwards (:meth:`trainable_parameters`). :meth:`loss` returns ``fine``, ``coarse``,
    ``balance``, ``total`` (and ``fine/<teacher>``).
    """

    def __init__(
        self,
        student: nn.Module,
        teachers: Mapping[str, nn.Module] | Sequence[tuple[str, nn.Module]],
        config: HawaiiConfig,
    ) -> None:
        super().__init__()
        if not isinstance(config, HawaiiConfig):
            raise TypeError(f"config must be a HawaiiConfig, got {type(config).__name__}")
        items = list(teachers.items()) if isinstance(teachers, Mapping) else list(teachers)
        if not items:
            raise ValueError("teachers must not be empty")
        names = [n for n, _ in items]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate teacher names: {dup}")
        if config.num_teachers != len(items):
            raise ValueError(
                f"config.num_teachers ({config.num_teachers}) must equal len(teachers) ({len(items)})"
            )
        self.config = config
        self.student = (
            student if isinstance(student, HawaiiModel) else get_hawaii_model(student, config)
        )
        self.teachers = nn.ModuleDict({n: m.requires_grad_(False) for n, m in items})
        self.names = names
        self.adapters = nn.ModuleDict()
        self.student_grid: tuple[int, int] | None = None
        self.teacher_grids: dict[str, tuple[int, int]] = {}

    def teacher_index(self, name: str) -> int:
        if name not in self.names:
            raise KeyError(f"unknown teacher {name!r}; teachers: {self.names}")
        return self.names.index(name)

    @torch.no_grad()
    def teacher_outputs(self, images: Tensor) -> dict[str, tuple[Tensor, Tensor]]:
        """``{teacher: (tokens at the teacher grid [B, N_t, C_t], importance at the student grid [B, N])}``
        computed under ``torch.no_grad`` with the teachers in eval mode (cache it across epochs)."""
        if self.student_grid is None:
            self.build(images)
        out = {}
        for name, teacher in self.teachers.items():
            tok, grid, cls = self._teacher_tokens(name, teacher, images)
            imp = token_importance(tok, self.config.token_weighting, cls)
            imp = _resample_tokens(imp[..., None], grid, self.student_grid)[..., 0]
            out[name] = (tok, imp * imp.shape[1] / imp.sum(-1, keepdim=True).clamp_min(1e-12))
        return out

    @torch.no_grad()
    def _teacher_tokens(
        self, name: str, teacher: nn.Module, images: Tensor
    ) -> tuple[Tensor, tuple[int, int], Tensor | None]:
        teacher.eval()
        raw = teacher(images)
        raw = raw[0] if isinstance(raw, (tuple, list)) else raw
        prefix = int(getattr(teacher, "num_prefix_tokens", 0)) if raw.ndim == 3 else 0
        tok, grid = _grid_of(raw, prefix, f"teacher {name!r}")
        cls = raw[:, 0] if raw.ndim == 3 and prefix >= 1 else None
        return tok, grid, cls

    def build(self, images: Tensor) -> None:
        """Infer the student grid and build one adapter per teacher (idempotent).

        ``adapter_side="student"``: adapter t maps student tokens to teacher t's width on the student
        grid (targets: LayerNormed teacher tokens resampled to the student grid). ``"teacher"``
        (MoVE-KD): adapter t maps teacher t's tokens to the student's grid and width."""
        if self.student_grid is not None:
            return
        with torch.no_grad(), self.student.route("base"):
            s = self.student(images[:2])
        if s.ndim != 3:
            raise ValueError(
                f"the student must return tokens [B, N, D], got shape {tuple(s.shape)}"
            )
        s_tok, grid_s = _grid_of(s, self.student.num_prefix_tokens, "the student")
        dim = s_tok.shape[-1]
        lite = self.config.variant == "lite"
        adapters = {}
        for name, teacher in self.teachers.items():
            tok, grid, _ = self._teacher_tokens(name, teacher, images[:2])
            self.teacher_grids[name] = grid
            if self.config.adapter_side == "student":
                ad = TeacherAdapter(
                    dim, tok.shape[-1], grid_s, grid_s, self.config.adapter_hidden, linear=lite
                )
            else:
                ad = TeacherAdapter(
                    tok.shape[-1], dim, grid, grid_s, self.config.adapter_hidden, linear=lite
                )
            adapters[name] = ad.to(device=s.device, dtype=s.dtype)
        self.adapters.update(adapters)
        self.student_grid = grid_s

    def trainable_parameters(self) -> list[nn.Parameter]:
        if self.student_grid is None:
            raise RuntimeError(
                "call build(images) (or loss) before asking for the trainable parameters"
            )
        return self.student.trainable_parameters() + [p for p in self.adapters.parameters()]

    def _error(self, name: str, student_tokens: Tensor, target: Tensor) -> Tensor:
        """Per-token squared error [B, N] between the student tokens and teacher ``name``'s target."""
        pred = (
            self.adapters[name](student_tokens)
            if self.config.adapter_side == "student"
            else student_tokens
        )
        return ((pred - target) ** 2).mean(-1)

    def loss(
        self,
        images: Tensor,
        teacher_outputs: Mapping[str, tuple[Tensor, Tensor]] | None = None,
        active: Sequence[str] | None = None,
    ) -> dict[str, Tensor]:
        """Distillation losses on a batch. ``teacher_outputs``: a cached :meth:`teacher_outputs` slice;
        ``active``: the teachers to distil from (default all; one name = single-teacher distillation)."""
        self.build(images)
        tout = self.teacher_outputs(images) if teacher_outputs is None else teacher_outputs
        active = list(self.names) if active is None else list(active)
        unknown = [n for n in active if n not in self.names]
        if unknown or not active:
            raise ValueError(f"active must be a non-empty subset of {self.names}, got {active!r}")
        if self.config.adapter_side == "student":
            targets = {
                n: _resample_tokens(
                    F.layer_norm(tout[n][0], tout[n][0].shape[-1:]),
                    self.teacher_grids[n],
                    self.student_grid,
                )
                for n in active
            }
        else:
            targets = {n: self.adapters[n](tout[n][0]) for n in active}
        weights = {n: tout[n][1] for n in active}
        out: dict[str, Tensor] = {}
        if self.config.variant == "lite":
            with self.student.route("router"):
                s = self.student.patch_tokens(images)
            fine = [self._error(n, s, targets[n]).mean() for n in active]
            for n, f in zip(active, fine, strict=True):
                out[f"fine/{n}"] = f.detach()
            out["fine"] = torch.stack(fine).mean()
            out["coarse"] = torch.zeros_like(out["fine"])
            out["balance"] = torch.zeros_like(out["fine"])
            out["total"] = out["fine"]
            return out
        # fine-grained: one batched pass, each copy of the batch routed to its teacher's expert
        b = len(images)
        idx = torch.tensor(
            [self.teacher_index(n) for n in active], device=images.device
        ).repeat_interleave(b)
        with self.student.route(("teacher", idx)):
            s_all = self.student.patch_tokens(
                images.repeat(len(active), *([1] * (images.ndim - 1)))
            )
        fine = []
        for i, n in enumerate(active):
            fine.append(
                (weights[n] * self._error(n, s_all[i * b : (i + 1) * b], targets[n])).mean()
            )
            out[f"fine/{n}"] = fine[-1].detach()
        out["fine"] = torch.stack(fine).mean()
        # coarse-grained: routers + general experts match the importance-weighted summary of all teachers
        w = torch.stack([weights[n] for n in active])  # [T, B, N]
        share = w / w.sum(0, keepdim=True).clamp_min(1e-12)
        with self.student.route("coarse"):
            s_c = self.student.patch_tokens(images)
            out["balance"] = self.student.balance_loss()
        if self.config.adapter_side == "student":
            errs = torch.stack([self._error(n, s_c, targets[n]) for n in active])  # [T, B, N]
            out["coarse"] = (share * errs).sum(0).mean()
        else:
            summary = (
                (share.unsqueeze(-1) * torch.stack([targets[n] for n in active])).sum(0).detach()
            )
            out["coarse"] = ((s_c - summary) ** 2).mean()
        out["total"] = (
            out["fine"]
            + self.config.coarse_weight * out["coarse"]
            + self.config.balance_weight * out["balance"]
        )
        return out

    def fit(
        self,
        images: Tensor,
        epochs: int = 20,
        lr: float = 1e-3,
        batch_size: int = 64,
        seed: int = 0,
        active: Sequence[str] | None = None,
        stats_every: int = 0,
    ) -> dict[str, list]:
        """Adam on the LoRA experts, routers and adapters (teachers cached once, never trained).

        Returns per-epoch mean losses, and the router statistics every ``stats_every`` epochs (and
        at the start and end when ``stats_every > 0``)."""
        check_positive("epochs", epochs, integer=True)
        check_positive("batch_size", batch_size, integer=True)
        self.build(images)
        tout = {}
        for i in range(0, len(images), 256):
            for n, (tok, imp) in self.teacher_outputs(images[i : i + 256]).items():
                tout.setdefault(n, ([], []))
                tout[n][0].append(tok)
                tout[n][1].append(imp)
        cache = {n: (torch.cat(a), torch.cat(b)) for n, (a, b) in tout.items()}
        opt = torch.optim.Adam(self.trainable_parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        hist: dict[str, list] = {"total": [], "fine": [], "coarse": [], "balance": [], "router": []}
        probe = images[: min(len(images), 256)]
        with seeded(seed):
            if stats_every:
                hist["router"].append((0, self.student.router_stats(probe)))
            self.train()
            for epoch in track(range(epochs), "HAWAII distillation (epochs)"):
                sums = dict.fromkeys(("total", "fine", "coarse", "balance"), 0.0)
                for idx in torch.randperm(len(images), generator=gen).split(batch_size):
                    losses = self.loss(
                        images[idx], {n: (t[idx], w[idx]) for n, (t, w) in cache.items()}, active
                    )
                    opt.zero_grad(set_to_none=True)
                    losses["total"].backward()
                    opt.step()
                    for k in sums:
                        sums[k] += float(losses[k].detach()) * len(idx)
                for k in sums:
                    hist[k].append(sums[k] / len(images))
                if stats_every and ((epoch + 1) % stats_every == 0 or epoch + 1 == epochs):
                    hist["router"].append((epoch + 1, self.student.router_stats(probe)))
                    self.train()
        self.eval()
        return hist


class _Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        q, k, v = (
            self.qkv(x).view(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        )
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


class _Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = _Mlp(dim, hidden)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class _PatchEmbed(nn.Module):
    def __init__(self, patch_size: int, in_chans: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class TinyViT(nn.Module):
    """A small ViT with timm's module names (``patch_embed.proj``, ``cls_token``, ``pos_embed``,
    ``blocks.i.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}``, ``norm``) and timm's
    ``forward_features`` / ``num_prefix_tokens`` conventions; random init only (HAWAII's student:
    patch 2 on 8×8 digits → 16 tokens, width 64, 4 layers)."""

    num_prefix_tokens = 1

    def __init__(
        self,
        img_size: int = 8,
        patch_size: int = 2,
        in_chans: int = 1,
        embed_dim: int = 64,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
    ) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(
                f"img_size ({img_size}) must be divisible by patch_size ({patch_size})"
            )
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.patch_size, self.in_chans = patch_size, in_chans
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        n = self.grid_size[0] * self.grid_size[1]
        self.patch_embed = _PatchEmbed(patch_size, in_chans, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, embed_dim) * 0.02)
        hidden = int(embed_dim * mlp_ratio)
        self.blocks = nn.Sequential(*[_Block(embed_dim, num_heads, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)

    def forward_features(self, x: Tensor) -> Tensor:
        t = self.patch_embed(x)
        t = torch.cat([self.cls_token.expand(len(t), -1, -1), t], 1) + self.pos_embed
        return self.norm(self.blocks(t))

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_features(x)
