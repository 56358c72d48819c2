"""Torch parts of :mod:`eff_theory.lora_meta` (extra ``eff-theory[torch]``): LoRA-ML for any network.

:class:`MultiTaskLoRA` wraps a model so that each targeted ``nn.Linear`` carries one LoRA adapter per
retraining task (names follow peft: ``r``, ``lora_alpha``, ``target_modules``; ``set_task`` plays the
role of peft's ``set_adapter``). :func:`meta_retrain` is the general form of LoRA-ML (the paper's
App. G, "Meta-Adapter Training"): jointly minimise Σ_t L_t(θ_base, adapter_t) over the base and all
adapters; afterwards :meth:`MultiTaskLoRA.strip_adapters` returns the base model for ordinary
(e.g. peft) fine-tuning on a new task. This is joint minimisation, not MAML.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from eff_shared.errors import check_int

__all__ = ["LoRALinear", "MultiTaskLoRA", "meta_retrain"]


class LoRALinear(nn.Module):
    """A frozen-shape ``nn.Linear`` plus one low-rank update per task, scaled by lora_alpha / r.

    Asymmetric adapters (peft layout): ΔW_t = B_t A_t with A_t (r, in) Kaiming-uniform and B_t
    (out, r) zero. Symmetric adapters (the paper's retraining adapters, square weights only):
    ΔW_t = U_t U_tᵀ with U_t (out, r) ~ N(0, init_std²) (a zero start would be a saddle).
    """

    def __init__(
        self,
        base: nn.Linear,
        num_tasks: int,
        r: int,
        lora_alpha: float,
        symmetric: bool,
        generator: torch.Generator,
        init_std: float = 0.1,
    ) -> None:
        super().__init__()
        out_f, in_f = base.weight.shape
        if symmetric and out_f != in_f:
            raise ValueError(
                f"symmetric=True needs square weights, got a Linear of shape ({out_f}, {in_f})"
            )
        self.base = base
        self.r = r
        self.scaling = lora_alpha / r
        self.symmetric = symmetric
        self.active = 0
        kw = {"dtype": base.weight.dtype, "device": base.weight.device}

        def draw(shape: tuple[int, int], scale: float, uniform: bool = False) -> nn.Parameter:
            # From the CPU generator (reproducible on any device), then moved to the weight's device.
            if uniform:
                x = torch.rand(shape, generator=generator) * 2 - 1
            else:
                x = torch.randn(shape, generator=generator)
            return nn.Parameter((scale * x).to(**kw))

        if symmetric:
            self.lora_U = nn.ParameterList(draw((out_f, r), init_std) for _ in range(num_tasks))
        else:
            bound = 1.0 / math.sqrt(in_f)  # kaiming_uniform(a=√5) as in nn.Linear / peft
            self.lora_A = nn.ParameterList(
                draw((r, in_f), bound, uniform=True) for _ in range(num_tasks)
            )
            self.lora_B = nn.ParameterList(
                nn.Parameter(torch.zeros(out_f, r, **kw)) for _ in range(num_tasks)
            )

    def factors(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(A_t, B_t) with ΔW_t = scaling · B_t A_t (for symmetric adapters A_t = U_tᵀ, B_t = U_t)."""
        if self.symmetric:
            return self.lora_U[t].T, self.lora_U[t]
        return self.lora_A[t], self.lora_B[t]

    def adapter_parameters(self, t: int) -> list[nn.Parameter]:
        return [self.lora_U[t]] if self.symmetric else [self.lora_A[t], self.lora_B[t]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        A, B = self.factors(self.active)
        return self.base(x) + self.scaling * ((x @ A.T) @ B.T)


class MultiTaskLoRA(nn.Module):
    """``model`` with T task adapters on the targeted ``nn.Linear`` layers (modified in place).

    ``target_modules``: module names, matched exactly or as a dotted suffix as in peft (``None``:
    every ``nn.Linear``). Raises ``ValueError`` when nothing matches or when ``symmetric=True`` meets
    a non-square weight. Adapter parameters start from ``torch.Generator().manual_seed(seed)``.
    """

    def __init__(
        self,
        model: nn.Module,
        num_tasks: int,
        r: int = 8,
        lora_alpha: float = 8,
        target_modules: Sequence[str] | None = None,
        symmetric: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        num_tasks = check_int("num_tasks", num_tasks, minimum=1)
        r = check_int("r", r, minimum=1)
        if not lora_alpha > 0:
            raise ValueError(f"lora_alpha must be > 0, got {lora_alpha!r}")
        if isinstance(model, nn.Linear):
            raise ValueError("model is a bare nn.Linear; wrap it, e.g. nn.Sequential(linear)")
        targets = [
            name
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and _matches(name, target_modules)
        ]
        if not targets:
            raise ValueError(
                f"target_modules={target_modules!r} matches no nn.Linear of the model; Linear "
                f"modules: {[n for n, m in model.named_modules() if isinstance(m, nn.Linear)]}"
            )
        gen = torch.Generator().manual_seed(seed)
        for name in targets:
            parent, attr = _parent(model, name)
            wrapped = LoRALinear(getattr(parent, attr), num_tasks, r, lora_alpha, symmetric, gen)
            setattr(parent, attr, wrapped)
        self.model = model
        self.num_tasks = num_tasks
        self.r = r
        self.lora_alpha = lora_alpha
        self.target_names = targets
        # A plain list (not registered twice as submodules) for the per-step set_task.
        self._wrapped: list[LoRALinear] = [layer for _, layer in self._layers()]
        self.active_task = 0

    def _layers(self) -> Iterator[tuple[str, LoRALinear]]:
        for name in self.target_names:
            parent, attr = _parent(self.model, name)
            yield name, getattr(parent, attr)

    def set_task(self, t: int) -> None:
        """Route every wrapped layer through task ``t``'s adapter (IndexError out of range)."""
        if not 0 <= t < self.num_tasks:
            raise IndexError(f"task {t} out of range [0, {self.num_tasks})")
        self.active_task = t
        for layer in self._wrapped:
            layer.active = t

    def base_parameters(self) -> Iterator[nn.Parameter]:
        adapter_ids = {id(p) for p in self.adapter_parameters()}
        return (p for p in self.model.parameters() if id(p) not in adapter_ids)

    def adapter_parameters(self, t: int | None = None) -> list[nn.Parameter]:
        """The adapters of task ``t``, or of every task."""
        tasks = range(self.num_tasks) if t is None else [t]
        if t is not None and not 0 <= t < self.num_tasks:
            raise IndexError(f"task {t} out of range [0, {self.num_tasks})")
        return [
            p for _, layer in self._layers() for k in tasks for p in layer.adapter_parameters(k)
        ]

    def adapter_state_dict(self, t: int) -> dict[str, torch.Tensor]:
        """Task ``t``'s adapter as a peft-style LoRA state dict
        (``base_model.model.<module>.lora_A.weight`` (r, in), ``….lora_B.weight`` (out, r)); load it
        with ``LoraConfig(r=self.r, lora_alpha=self.lora_alpha, target_modules=...)``."""
        if not 0 <= t < self.num_tasks:
            raise IndexError(f"task {t} out of range [0, {self.num_tasks})")
        out = {}
        for name, layer in self._layers():
            A, B = layer.factors(t)
            out[f"base_model.model.{name}.lora_A.weight"] = A.detach().clone()
            out[f"base_model.model.{name}.lora_B.weight"] = B.detach().clone()
        return out

    def strip_adapters(self) -> nn.Module:
        """A copy of the base model with every adapter removed (the retrained θ_base)."""
        base = copy.deepcopy(self.model)
        for name in self.target_names:
            parent, attr = _parent(base, name)
            setattr(parent, attr, getattr(parent, attr).base)
        return base

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)


def _matches(name: str, targets: Sequence[str] | None) -> bool:
    if targets is None:
        return bool(name)
    if isinstance(targets, str):
        targets = [targets]
    return any(name == t or name.endswith("." + t) for t in targets)


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    *path, attr = name.split(".")
    parent = model
    for part in path:
        parent = getattr(parent, part)
    return parent, attr


def meta_retrain(
    model: MultiTaskLoRA,
    task_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
) -> list[float]:
    """LoRA-ML retraining: ``steps`` full-batch AdamW steps on Σ_t MSE(model_t(x_t), y_t) over the
    base and every adapter jointly (task t through ``set_task(t)``). Returns the loss per step."""
    if not isinstance(model, MultiTaskLoRA):
        raise TypeError(f"model must be a MultiTaskLoRA, got {type(model).__name__}")
    if len(task_batches) != model.num_tasks:
        raise ValueError(
            f"task_batches must hold one (x, y) batch per task ({model.num_tasks}), got {len(task_batches)}"
        )
    steps = check_int("steps", steps, minimum=1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        total = 0.0
        for t, (x, y) in enumerate(task_batches):
            model.set_task(t)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            total += float(loss.detach())
        opt.step()
        losses.append(total)
    return losses
