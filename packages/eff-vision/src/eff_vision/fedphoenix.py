"""FedPhoenix: federated learning with a stochastic, layer-wise stopping reset of conv kernels.

Paper: "Rising from Ashes: Generalized Federated Learning via Dynamic Parameter Reset", NeurIPS 2025
(OpenReview QkqQSf1REo). No official repository was found; the code was read through a third-party
fork (``binhu6978-rgb/FedPhoenix-finish``, ``Algorithm/Phoenix_util.py``), whose original function
``reset_kernels_and_neurons_stair`` this module implements:

- every round t, **each selected client's copy** of the global model is reset independently
  (its own random stream), before local training; then local SGD and FedAvg as usual;
- conv layers are taken in module order, depth d = 0 … n − 1; layer d is reset only while
  ``t < (d + 1) · r_s / n`` (**stair schedule**: shallow layers stop first, all stop at r_s);
- in an active layer, ``⌊θ · C_out⌋`` output kernels are chosen uniformly without replacement and
  overwritten with ``N(μ, (scale·σ)²)``, μ and σ being the mean and std of the **whole layer's**
  weight computed once before the resets (``init="ori_normal"``, the original default);
- biases, BatchNorm and fully connected layers are untouched (``fc_reset_ratio = 0``).

Defaults θ = 1/32 (the function default 0.03125) and r_s = 1000 (of 1200 rounds).

What the abstract gets wrong: it says the method "resets partial parameters of the global model";
the code resets client copies, only conv output kernels, with the layer-wise stopping schedule, to
layer-statistics normal values. Resetting ``nn.Linear`` rows (``target_types=(nn.Linear,)``) and the
alternative ``init`` values are opt-in generalisations of ours: ``uniform`` draws
``U(μ − √3·scale·σ, μ + √3·scale·σ)`` (the layer's mean and variance), ``kaiming_uniform`` /
``kaiming_normal`` use the fan-in formulas of ``torch.nn.init`` (ReLU gain) times ``scale``.

Use on the federated runtime: :func:`phoenix_pre_local_train` turns a :class:`PhoenixReset` into
the ``pre_local_train`` hook of :class:`eff_shared.federated.InProcessRunner` (the runner hands out
one generator per (round, client), so two clients of a round get different kernel sets).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from eff_shared.errors import check_choice, check_fraction, check_int, check_type
from eff_shared.torch import model_hook

__all__ = ["INITS", "LayerReset", "PhoenixReset", "ResetTrace", "phoenix_pre_local_train"]

INITS = ("ori_normal", "uniform", "kaiming_uniform", "kaiming_normal")


@dataclass(frozen=True)
class LayerReset:
    """What happened to one target layer in one call."""

    name: str
    depth: int
    out_channels: int
    active: bool
    indices: tuple[int, ...]
    mean: float
    std: float


@dataclass(frozen=True)
class ResetTrace:
    """The reset of one client copy in one round: one :class:`LayerReset` per target layer."""

    round_idx: int
    layers: tuple[LayerReset, ...]

    @property
    def total_reset(self) -> int:
        return sum(len(layer.indices) for layer in self.layers)

    def indices(self) -> dict[str, tuple[int, ...]]:
        return {layer.name: layer.indices for layer in self.layers}


@dataclass
class PhoenixReset:
    """The stair-schedule kernel reset of FedPhoenix (``reset_kernels_and_neurons_stair``).

    ``__call__(model, round_idx, generator)`` resets ``model`` in place and returns the trace.
    """

    theta: float = 1 / 32
    stop_round: int = 1000
    init: Literal["ori_normal", "uniform", "kaiming_uniform", "kaiming_normal"] = "ori_normal"
    scale: float = 1.0
    target_types: tuple[type[nn.Module], ...] = (nn.Conv2d,)
    at_least_one: bool = False
    _warned: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_fraction("theta", self.theta)
        check_int("stop_round", self.stop_round, minimum=0)
        check_choice("init", self.init, INITS)
        check_type("scale", self.scale, (int, float))
        if not (math.isfinite(self.scale) and self.scale >= 0):
            raise ValueError(f"scale must be a finite number >= 0, got {self.scale}")
        if isinstance(self.target_types, type):
            self.target_types = (self.target_types,)
        self.target_types = tuple(self.target_types)
        if not self.target_types or not all(
            isinstance(t, type) and issubclass(t, nn.Module) for t in self.target_types
        ):
            raise TypeError(
                f"target_types must be a tuple of nn.Module subclasses, got {self.target_types!r}"
            )
        check_type("at_least_one", self.at_least_one, bool)

    def target_layers(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        """The layers of ``target_types`` in module order (depth 0 = the first)."""
        layers = [
            (n, m)
            for n, m in model.named_modules()
            if isinstance(m, self.target_types)
            and isinstance(getattr(m, "weight", None), torch.Tensor)
        ]
        if not layers:
            names = [t.__name__ for t in self.target_types]
            raise ValueError(f"model has no module of target_types {names}: nothing to reset")
        return layers

    def n_reset(self, out_channels: int) -> int:
        """``⌊θ · C_out⌋`` (at least 1 when ``at_least_one`` and θ > 0)."""
        n = math.floor(self.theta * out_channels + 1e-9)
        if n == 0 and self.at_least_one and self.theta > 0:
            n = 1
        return min(n, out_channels)

    def is_active(self, depth: int, n_layers: int, round_idx: int) -> bool:
        """Layer ``depth`` is reset while ``t < (depth + 1) · stop_round / n_layers`` (exact)."""
        return round_idx * n_layers < (depth + 1) * self.stop_round

    def _values(self, weight: torch.Tensor, n: int, mean: float, std: float, gen: torch.Generator):
        """``n`` new kernels, drawn on the generator's device (the caller moves them)."""
        shape = (n, *weight.shape[1:])
        kw = dict(generator=gen, dtype=weight.dtype, device=gen.device)
        s = self.scale
        if self.init == "ori_normal":
            return mean + s * std * torch.randn(shape, **kw)
        if self.init == "uniform":
            half = math.sqrt(3.0) * s * std
            return mean - half + 2 * half * torch.rand(shape, **kw)
        fan_in = int(np.prod(weight.shape[1:]))
        gain = math.sqrt(2.0)  # torch.nn.init's ReLU gain (kaiming_* defaults to a = 0)
        if self.init == "kaiming_normal":
            return s * gain / math.sqrt(fan_in) * torch.randn(shape, **kw)
        bound = s * gain * math.sqrt(3.0 / fan_in)
        return -bound + 2 * bound * torch.rand(shape, **kw)

    @torch.no_grad()
    def __call__(self, model: nn.Module, round_idx: int, generator: torch.Generator) -> ResetTrace:
        check_type("model", model, nn.Module)
        check_type("round_idx", round_idx, int)
        if round_idx < 0:
            raise ValueError(f"round_idx must be >= 0, got {round_idx}")
        check_type("generator", generator, torch.Generator)
        layers = self.target_layers(model)
        if (
            not self._warned
            and self.theta > 0
            and all(self.n_reset(m.weight.shape[0]) == 0 for _, m in layers)
        ):
            warnings.warn(
                f"floor(theta * C_out) = 0 for every target layer (theta={self.theta}, C_out = "
                f"{[m.weight.shape[0] for _, m in layers]}): the reset is a no-op; raise theta or "
                "set at_least_one=True",
                UserWarning,
                stacklevel=2,
            )
            self._warned = True
        out = []
        for depth, (name, module) in enumerate(layers):
            weight = module.weight
            c_out = weight.shape[0]
            mean, std = float(weight.mean()), float(weight.std()) if weight.numel() > 1 else 0.0
            active = self.is_active(depth, len(layers), round_idx)
            n = self.n_reset(c_out) if active else 0
            idx: tuple[int, ...] = ()
            if n > 0:
                perm = torch.randperm(c_out, generator=generator, device=generator.device)[:n]
                chosen = torch.sort(perm).values.to(weight.device)
                weight[chosen] = self._values(weight, n, mean, std, generator).to(weight.device)
                idx = tuple(int(i) for i in chosen)
            out.append(LayerReset(name, depth, c_out, active, idx, mean, std))
        return ResetTrace(round_idx, tuple(out))


def phoenix_pre_local_train(
    model: nn.Module, reset: PhoenixReset, traces: list[tuple[int, ResetTrace]] | None = None
) -> Callable[[dict[str, Any], int, np.random.Generator], dict[str, Any]]:
    """The runner's ``pre_local_train`` hook: load the client's copy into ``model`` (a scratch
    module of the right architecture), reset it with the client's own generator, return its state.

    When ``traces`` is a list, ``(round_idx, trace)`` of every call is appended to it.
    """
    check_type("reset", reset, PhoenixReset)
    reset.target_layers(model)  # fail early for a model without target layers

    def fn(m: nn.Module, round_idx: int, gen: torch.Generator) -> None:
        trace = reset(m, round_idx, gen)
        if traces is not None:
            traces.append((round_idx, trace))

    return model_hook(model, fn)
