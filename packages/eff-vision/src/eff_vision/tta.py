"""Test-time adaptation (TTA) wrappers in the shape of ``tent.Tent`` and the standard baselines.

A :class:`TTAMethod` is an ``nn.Module`` that wraps a model and **adapts inside ``forward``**: the
output for a batch is computed *before* the update on that batch (online protocol, one optimiser
step per batch), as in ``DequanWang/tent`` and ``mariodoebler/test-time-adaptation``. ``reset()``
restores the model, the optimiser and the method's state; ``stats`` holds counters for logging.
The wrapper configures the model it is given **in place** (tent's convention): pass a copy to keep
the source model. The gradient methods step with SGD, momentum 0.9 and **Nesterov** by default
(``OPTIM.NESTEROV = True`` in that framework's ``conf.py``, which LCoTTA's code inherits;
``nesterov=False`` for plain momentum), or Adam with ``optimizer="adam"``.

Baselines (used by LCoTTA's and RobIA's reproductions):

- :class:`NormAdapt` — BatchNorm uses test-batch statistics (Schneider et al. 2020, "BN adapt");
  no parameter changes. For a model with LayerNorm only it equals the source model.
- :class:`Tent` — entropy minimisation on the norm layers' affine parameters (Wang et al., ICLR
  2021, Eq. 2: ``H(ŷ) = −Σ_c p(ŷ_c) log p(ŷ_c)``).
- :class:`EATA` — EATA's filtered, re-weighted entropy (Niu et al., ICML 2022, Eqs. 6–8): keep
  samples with ``H < E0`` (reliability) and, once a moving average m of the kept mean prediction
  exists, ``|cos(m, p)| < d0`` (redundancy); weight each kept sample by ``1 / exp(H − E0)``. The
  Fisher (EWC) regulariser is optional (``fisher_alpha = 0`` by default, as in LCoTTA's
  comparison); with ``fisher_alpha > 0`` pass ``fishers = {name: (F, θ0)}``.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import torch
from torch import Tensor, nn

from eff_shared.errors import check_int, check_type

__all__ = [
    "EATA",
    "NORM_TYPES",
    "NormAdapt",
    "TTAMethod",
    "Tent",
    "check_batch",
    "configure_norm_adaptation",
    "norm_parameters",
    "select_parameters",
    "softmax_entropy",
]

_BN = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
NORM_TYPES = (*_BN, nn.LayerNorm, nn.GroupNorm)
ParamSpec = Literal["norm", "all"] | Callable[[nn.Module], Iterable[nn.Parameter]]


def softmax_entropy(logits: Tensor) -> Tensor:
    """Per-sample entropy of ``softmax(logits)`` over dim 1 (tent's ``softmax_entropy``)."""
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def norm_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of the affine weight/bias of every BatchNorm, LayerNorm, GroupNorm."""
    out = []
    for mod_name, m in model.named_modules():
        if isinstance(m, NORM_TYPES):
            for p_name, p in m.named_parameters(recurse=False):
                if p_name in ("weight", "bias"):
                    out.append((f"{mod_name}.{p_name}" if mod_name else p_name, p))
    return out


def configure_norm_adaptation(model: nn.Module) -> nn.Module:
    """tent's ``configure_model`` without the ``requires_grad`` part: ``train()``, and every
    BatchNorm uses test-batch statistics (``track_running_stats=False``, running stats removed)."""
    model.train()
    for m in model.modules():
        if isinstance(m, _BN):
            m.track_running_stats = False
            m.running_mean = None
            m.running_var = None
    return model


def uses_batch_stats(model: nn.Module) -> bool:
    return any(
        isinstance(m, _BN) and (m.training or m.running_mean is None) for m in model.modules()
    )


def check_batch(model: nn.Module, x: Tensor) -> None:
    """``ValueError`` for a batch of one sample through BatchNorm in batch-statistics mode."""
    if x.shape[0] == 1 and uses_batch_stats(model):
        raise ValueError(
            "a batch of 1 cannot be adapted with BatchNorm batch statistics (the statistics of "
            "one sample are degenerate); use batches of >= 2 samples"
        )


def select_parameters(model: nn.Module, params: ParamSpec) -> list[tuple[str, nn.Parameter]]:
    """The adapted parameters: ``"norm"`` (norm-layer affines), ``"all"``, or a callable."""
    if callable(params):
        chosen = list(params(model))
        lookup = {id(p): n for n, p in model.named_parameters()}
        named = [(lookup.get(id(p), f"param{i}"), p) for i, p in enumerate(chosen)]
    elif params == "norm":
        named = norm_parameters(model)
        if not named:
            raise ValueError(
                "params='norm' but the model has no BatchNorm/LayerNorm/GroupNorm affine "
                "parameters; pass params='all' or a callable"
            )
    elif params == "all":
        named = list(model.named_parameters())
    else:
        raise ValueError(f"params must be 'norm', 'all' or a callable, got {params!r}")
    if not named:
        raise ValueError("no parameter selected for adaptation")
    return named


class TTAMethod(nn.Module):
    """Base class: configure the model, collect parameters, adapt inside ``forward``.

    Subclasses implement :meth:`forward_and_adapt` (returning the prediction made before the
    update) and may override :meth:`configure_model`, :meth:`collect_params`,
    :meth:`configure_optimizer` and :meth:`reset_state`.
    """

    def __init__(self, model: nn.Module, steps: int = 1, episodic: bool = False) -> None:
        super().__init__()
        check_type("model", model, nn.Module)
        check_int("steps", steps, minimum=1)
        self.model = model
        self.steps = steps
        self.episodic = episodic
        self.configure_model()
        self.named_params = self.collect_params()
        self.params = [p for _, p in self.named_params]
        self.optimizer = self.configure_optimizer(self.params)
        self._model_state = copy.deepcopy(self.model.state_dict())
        self._opt_state = (
            copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None
        )
        self.stats: dict[str, Any] = {}
        self.reset_state()

    # -- hooks ---------------------------------------------------------------------------------
    def configure_model(self) -> None:
        configure_norm_adaptation(self.model)
        self.model.requires_grad_(False)

    def collect_params(self) -> list[tuple[str, nn.Parameter]]:
        return []

    def configure_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer | None:
        return None

    def reset_state(self) -> None:
        """Reset the method's own state (counters, moving averages); called by ``reset()``."""
        self.stats = {"batches": 0}

    def forward_and_adapt(self, *inputs: Tensor) -> Any:
        raise NotImplementedError

    # -- public API ----------------------------------------------------------------------------
    def forward(self, *inputs: Tensor) -> Any:
        if self.episodic:
            self.reset()
        out = None
        for _ in range(self.steps):
            out = self.forward_and_adapt(*inputs)
        self.stats["batches"] = self.stats.get("batches", 0) + 1
        return out

    def reset(self) -> None:
        """Restore the model and optimiser to their state at construction, clear the state."""
        self.model.load_state_dict(self._model_state, strict=True)
        if self.optimizer is not None and self._opt_state is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._opt_state))
        self.reset_state()

    def num_adapted(self) -> int:
        return sum(p.numel() for p in self.params)


class NormAdapt(TTAMethod):
    """BN adaptation: test-batch statistics, no parameter update (prediction without gradient)."""

    @torch.no_grad()
    def forward_and_adapt(self, x: Tensor) -> Tensor:
        check_batch(self.model, x)
        return self.model(x)


class _EntropyTTA(TTAMethod):
    """Shared plumbing of the gradient-based classification methods (tent, EATA, LCoTTA)."""

    def __init__(
        self,
        model: nn.Module,
        lr: float,
        momentum: float = 0.9,
        params: ParamSpec = "norm",
        optimizer: Literal["sgd", "adam"] = "sgd",
        weight_decay: float = 0.0,
        steps: int = 1,
        episodic: bool = False,
        nesterov: bool = True,
    ) -> None:
        check_type("nesterov", nesterov, bool)
        for name, v in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            check_type(name, v, (int, float))
            if not math.isfinite(v) or v < 0 or (name == "lr" and v == 0):
                raise ValueError(
                    f"{name} must be a finite number {'> 0' if name == 'lr' else '>= 0'}, got {v}"
                )
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be one of ['sgd', 'adam'], got {optimizer!r}")
        self._param_spec = params
        self._lr, self._momentum, self._wd, self._opt_kind = lr, momentum, weight_decay, optimizer
        self._nesterov = nesterov
        super().__init__(model, steps=steps, episodic=episodic)

    def collect_params(self) -> list[tuple[str, nn.Parameter]]:
        named = select_parameters(self.model, self._param_spec)
        for _, p in named:
            p.requires_grad_(True)
        return named

    def configure_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        if self._opt_kind == "adam":
            return torch.optim.Adam(params, lr=self._lr, weight_decay=self._wd)
        # Nesterov by default: the official framework's OPTIM.NESTEROV = True (LCoTTA's and TENT's
        # conf.py); torch rejects it without momentum, where it would be a no-op anyway.
        return torch.optim.SGD(
            params,
            lr=self._lr,
            momentum=self._momentum,
            weight_decay=self._wd,
            nesterov=self._nesterov and self._momentum > 0,
        )

    def transform_grad(self, g: Tensor) -> Tensor:
        """Hook on the flattened gradient before the step (identity; LCoTTA projects)."""
        return g

    def apply_update(self, loss: Tensor) -> bool:
        """One optimiser step on ``loss`` via the flattened gradient; False if it was skipped."""
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        g = torch.cat(
            [
                (gi if gi is not None else torch.zeros_like(p)).reshape(-1)
                for gi, p in zip(grads, self.params, strict=True)
            ]
        )
        # max |g| is finite iff every entry is (max propagates NaN): ~4x cheaper than isfinite().all()
        if g.numel() and not bool(torch.isfinite(g.abs().max())):
            warnings.warn(
                "non-finite gradient: the update of this batch is skipped",
                RuntimeWarning,
                stacklevel=3,
            )
            self.stats["nonfinite_skipped"] = self.stats.get("nonfinite_skipped", 0) + 1
            return False
        g = self.transform_grad(g)
        for p, gi in zip(self.params, g.split([p.numel() for p in self.params]), strict=True):
            p.grad = gi.view_as(p).to(p.dtype)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True


class Tent(_EntropyTTA):
    """TENT: minimise the mean prediction entropy w.r.t. the norm-layer affine parameters."""

    def __init__(self, model: nn.Module, lr: float = 1e-3, momentum: float = 0.9,
                 params: ParamSpec = "norm", **kw: Any) -> None:  # fmt: skip
        super().__init__(model, lr=lr, momentum=momentum, params=params, **kw)

    def forward_and_adapt(self, x: Tensor) -> Tensor:
        check_batch(self.model, x)
        with torch.enable_grad():
            out = self.model(x)
            loss = softmax_entropy(out).mean(0)
            self.apply_update(loss)
        return out.detach()


class EATA(_EntropyTTA):
    """EATA's sample-efficient entropy minimisation (reliability + redundancy filters, weights).

    ``e_margin`` (E0) defaults to ``0.4 · ln C`` (EATA's 0.4·ln 1000 for ImageNet); ``d_margin``
    (d0) to 0.05 (EATA's ImageNet value; 0.4 is its CIFAR-10 value). A batch where no sample passes
    the filters leaves the parameters unchanged and is counted in ``stats["skipped"]``.
    """

    def __init__(
        self,
        model: nn.Module,
        lr: float = 2.5e-4,
        momentum: float = 0.9,
        fisher_alpha: float = 0.0,
        e_margin: float | None = None,
        d_margin: float = 0.05,
        params: ParamSpec = "norm",
        fishers: Mapping[str, tuple[Tensor, Tensor]] | None = None,
        **kw: Any,
    ) -> None:
        if e_margin is not None:
            check_type("e_margin", e_margin, (int, float))
            if not (math.isfinite(e_margin) and e_margin > 0):
                raise ValueError(f"e_margin must be > 0, got {e_margin}")
        check_type("d_margin", d_margin, (int, float))
        if not 0 < d_margin <= 1:
            raise ValueError(f"d_margin must lie in (0, 1], got {d_margin}")
        check_type("fisher_alpha", fisher_alpha, (int, float))
        if fisher_alpha < 0:
            raise ValueError(f"fisher_alpha must be >= 0, got {fisher_alpha}")
        if fisher_alpha > 0 and not fishers:
            raise ValueError("fisher_alpha > 0 needs fishers={param name: (fisher, source value)}")
        self.e_margin_arg = e_margin
        self.d_margin = float(d_margin)
        self.fisher_alpha = float(fisher_alpha)
        self.fishers = dict(fishers or {})
        super().__init__(model, lr=lr, momentum=momentum, params=params, **kw)

    def reset_state(self) -> None:
        self.stats = {"batches": 0, "skipped": 0, "kept": 0, "seen": 0}
        self.model_probs: Tensor | None = None
        self.e_margin: float | None = self.e_margin_arg

    def filtered_loss(self, out: Tensor) -> Tensor | None:
        """EATA's loss on the kept samples (None when no sample passes); updates the average m."""
        if self.e_margin is None:
            self.e_margin = 0.4 * math.log(out.shape[1])
        ent = softmax_entropy(out)
        keep = ent < self.e_margin
        probs = out.softmax(1)
        if self.model_probs is not None:
            cos = torch.nn.functional.cosine_similarity(self.model_probs[None], probs, dim=1)
            keep &= cos.abs() < self.d_margin
        n_kept = int(keep.sum())
        self.stats["kept"] += n_kept
        self.stats["seen"] += out.shape[0]
        if n_kept > 0:
            mean = probs[keep].detach().mean(0)
            self.model_probs = (
                mean if self.model_probs is None else 0.9 * self.model_probs + 0.1 * mean
            )
            ent_k = ent[keep]
            loss = (ent_k * torch.exp(self.e_margin - ent_k.detach())).mean(0)
            if self.fisher_alpha > 0:
                named = dict(self.named_params)
                ewc = sum((f * (named[n] - p0) ** 2).sum() for n, (f, p0) in self.fishers.items())
                loss = loss + self.fisher_alpha * ewc
            return loss
        return None

    def forward_and_adapt(self, x: Tensor) -> Tensor:
        check_batch(self.model, x)
        with torch.enable_grad():
            out = self.model(x)
            loss = self.filtered_loss(out)
            if loss is None:
                self.stats["skipped"] += 1
            else:
                self.apply_update(loss)
        self.after_batch()
        return out.detach()

    def after_batch(self) -> None:
        """Called after every batch (LCoTTA advances its step counter here)."""

    @property
    def kept_fraction(self) -> float:
        return self.stats["kept"] / max(self.stats["seen"], 1)
