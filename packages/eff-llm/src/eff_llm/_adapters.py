"""Plumbing for adapters that are not peft tuners: peft-style module matching, a JSON config base and
an injector model with ``save_pretrained`` / ``from_pretrained`` (safetensors), ``disable_adapter``,
``unload`` and collected auxiliary losses.

Why not ``peft.tuners.BaseTuner``: an out-of-tree method cannot register a ``PeftType`` (closed enum,
huggingface/peft #2273) and ``BaseTuner``'s injection hooks are semi-private and changed between peft
0.14 and 0.21. This module keeps peft's *user-facing* semantics instead:

- ``target_modules``: a list matches a module whose name equals an entry or ends with ``"." + entry``;
  a string is a full regex match; ``"all-linear"`` selects every ``nn.Linear`` except the output
  layer. ``exclude_modules`` uses the same rules.
- Adapter layers wrap the original ``nn.Linear`` as ``.base_layer``; every base parameter is frozen.
- ``save_pretrained(dir)`` writes ``adapter_config.json`` and ``adapter_model.safetensors`` holding
  only the adapter tensors (selected by the layer class's parameter prefix).
- Auxiliary losses (routing balance) are **collected from the modules** after each forward: every
  adapter layer stores ``last_aux_loss`` and :meth:`AdapterModel.aux_loss` sums them, so the
  transformers modeling code is never forked.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, ClassVar, Self

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from eff_shared.torch import seeded

__all__ = [
    "ADAPTER_CONFIG_NAME",
    "ADAPTER_WEIGHTS_NAME",
    "AdapterLayer",
    "AdapterModel",
    "JsonConfig",
    "find_target_modules",
    "peft_deprecations_silenced",
    "validate_module_spec",
]

ADAPTER_CONFIG_NAME = "adapter_config.json"
ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"


@contextlib.contextmanager
def peft_deprecations_silenced() -> Iterator[None]:
    """Silence one known third-party notice: peft 0.21's ``PeftModel.__init__`` reads
    ``model.is_gradient_checkpointing``, which transformers 5.x deprecates with a ``FutureWarning``
    on every ``get_peft_model`` call (nothing a user of eff can act on). Everything else still warns.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def validate_module_spec(name: str, spec: Any) -> list[str] | str | None:
    """Check a ``target_modules``-style value: ``None``, a regex string, or a list of names."""
    if spec is None or isinstance(spec, str):
        return spec
    if isinstance(spec, (list, tuple, set)) and all(isinstance(s, str) and s for s in spec):
        if not spec:
            raise ValueError(f"{name} must not be an empty list")
        return sorted(spec) if isinstance(spec, set) else list(spec)
    raise TypeError(f"{name} must be None, a regex string or a list of module names, got {spec!r}")


def _matches(key: str, spec: list[str] | str) -> bool:
    if isinstance(spec, str):
        return re.fullmatch(spec, key) is not None
    return any(key == t or key.endswith("." + t) for t in spec)


def _output_layer_names(model: nn.Module) -> set[str]:
    get = getattr(model, "get_output_embeddings", None)
    out = get() if callable(get) else None
    return {n for n, m in model.named_modules() if out is not None and m is out}


def find_target_modules(
    model: nn.Module,
    target_modules: list[str] | str,
    exclude_modules: list[str] | str | None = None,
    *,
    adapter_types: tuple[type, ...] = (),
) -> list[str]:
    """Names of the ``nn.Linear`` modules selected by peft's ``target_modules`` rules.

    Raises ``ValueError`` when nothing matches and ``TypeError`` when a matched module is not an
    ``nn.Linear`` (``"all-linear"`` only ever selects linear layers). Modules inside existing adapter
    layers (``adapter_types``) are skipped.
    """
    skip_output = _output_layer_names(model) if target_modules == "all-linear" else set()
    inside_adapter = [
        n for n, m in model.named_modules() if adapter_types and isinstance(m, adapter_types)
    ]
    names = []
    for name, module in model.named_modules():
        if not name or name in skip_output:
            continue
        if any(name == a or name.startswith(a + ".") for a in inside_adapter):
            continue
        if target_modules == "all-linear":
            hit = isinstance(module, nn.Linear)
        else:
            hit = _matches(name, target_modules)
        if not hit or (exclude_modules is not None and _matches(name, exclude_modules)):
            continue
        if not isinstance(module, nn.Linear):
            raise TypeError(
                f"target_modules matched {name!r}, a {type(module).__name__}; only nn.Linear "
                "modules can be adapted"
            )
        names.append(name)
    if not names:
        raise ValueError(
            f"target_modules={target_modules!r} (exclude_modules={exclude_modules!r}) matched no "
            f"nn.Linear module of {type(model).__name__}"
        )
    return names


class JsonConfig:
    """Mixin for adapter config dataclasses: JSON ``to_dict`` / ``from_dict`` / ``save_pretrained``."""

    method: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, **asdict(self)}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        data = dict(data)
        method = data.pop("method", cls.method)
        if method != cls.method:
            raise ValueError(f"this is a {method!r} config, not a {cls.method!r} config")
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {unknown}; known: {sorted(known)}")
        return cls(**data)

    def save_pretrained(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        out = path / ADAPTER_CONFIG_NAME
        out.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True))
        return out

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Self:
        file = Path(path) / ADAPTER_CONFIG_NAME
        if not file.is_file():
            raise FileNotFoundError(f"no {ADAPTER_CONFIG_NAME} in {path}")
        return cls.from_dict(json.loads(file.read_text()))


class AdapterLayer(nn.Module):
    """Base of the adapter layers: wraps ``base_layer`` (frozen ``nn.Linear``), adds ``delta(x)``.

    Subclasses name every adapter parameter with ``prefix`` and implement ``delta(x_2d)`` returning
    ``(update (T, out_features), aux_loss)``.
    """

    prefix: ClassVar[str] = ""

    def __init__(self, base_layer: nn.Linear) -> None:
        super().__init__()
        if not isinstance(base_layer, nn.Linear):
            raise TypeError(f"base_layer must be nn.Linear, got {type(base_layer).__name__}")
        self.base_layer = base_layer
        self.in_features = base_layer.in_features
        self.out_features = base_layer.out_features
        self.disabled = False
        self.last_aux_loss: torch.Tensor | None = None

    def delta(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = self.base_layer(x, *args, **kwargs)
        if self.disabled:
            self.last_aux_loss = None
            return out
        dtype = next(p for n, p in self.named_parameters() if n.startswith(self.prefix)).dtype
        upd, aux = self.delta(x.reshape(-1, self.in_features).to(dtype))
        self.last_aux_loss = aux
        return out + upd.reshape(out.shape).to(out.dtype)


class AdapterModel(nn.Module):
    """A model with adapter layers injected in place of its target ``nn.Linear`` modules."""

    layer_cls: ClassVar[type[AdapterLayer]] = AdapterLayer
    config_cls: ClassVar[type[JsonConfig]] = JsonConfig
    default_targets: ClassVar[list[str]] = []

    def __init__(self, model: nn.Module, config: Any, target_names: Sequence[str]) -> None:
        super().__init__()
        self.base_model = model
        self.config = config
        model.requires_grad_(False)
        for name in target_names:
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attr, self.layer_cls(getattr(parent, attr), config))

    @classmethod
    def wrap(cls, model: nn.Module, config: Any, seed: int | None = None) -> Self:
        """Inject ``layer_cls`` into the modules ``config.target_modules`` selects
        (``default_targets`` when it is ``None``); ``seed`` makes the initialisation reproducible."""
        if not isinstance(config, cls.config_cls):
            raise TypeError(
                f"config must be a {cls.config_cls.__name__}, got {type(config).__name__}"
            )
        targets = (
            config.target_modules if config.target_modules is not None else cls.default_targets
        )
        names = find_target_modules(
            model, targets, config.exclude_modules, adapter_types=(AdapterLayer,)
        )
        if seed is not None:
            with seeded(seed):
                return cls(model, config, names)
        # No seed: the initialisation draws from the caller's stream, which is left as it was (as
        # with a seed), so wrapping twice from one state gives the same adapter. The core's
        # seeded() always reseeds, so this fork without a seed is written out here.
        state = torch.random.get_rng_state()
        try:
            return cls(model, config, names)
        finally:
            torch.random.set_rng_state(state)

    # -- running -------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.base_model(*args, **kwargs)

    def adapter_layers(self) -> Iterator[tuple[str, AdapterLayer]]:
        for name, module in self.base_model.named_modules():
            if isinstance(module, self.layer_cls):
                yield name, module

    def aux_loss(self) -> torch.Tensor:
        """Sum of the auxiliary (routing balance) losses stored by the layers in the last forward."""
        losses = [m.last_aux_loss for _, m in self.adapter_layers() if m.last_aux_loss is not None]
        if not losses:
            p = next(self.base_model.parameters())
            return torch.zeros((), device=p.device, dtype=p.dtype)
        return torch.stack([loss.float() for loss in losses]).sum()

    @contextlib.contextmanager
    def disable_adapter(self) -> Iterator[None]:
        """Context manager: run the base model alone."""
        layers = [m for _, m in self.adapter_layers()]
        for m in layers:
            m.disabled = True
        try:
            yield
        finally:
            for m in layers:
                m.disabled = False

    def unload(self) -> nn.Module:
        """Put the original ``nn.Linear`` modules back and return the base model."""
        for name, module in list(self.adapter_layers()):
            parent_name, _, attr = name.rpartition(".")
            parent = self.base_model.get_submodule(parent_name) if parent_name else self.base_model
            setattr(parent, attr, module.base_layer)
        return self.base_model

    def num_trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # -- persistence ---------------------------------------------------------------------------
    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """Only the adapter tensors, keyed by their names in the base model."""
        marker = "." + self.layer_cls.prefix
        return {
            k: v.detach().contiguous()
            for k, v in self.base_model.state_dict().items()
            if marker in k and ".base_layer." not in k
        }

    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``adapter_config.json`` and ``adapter_model.safetensors`` into ``path``."""
        path = Path(path)
        self.config.save_pretrained(path)
        save_file(
            self.adapter_state_dict(), str(path / ADAPTER_WEIGHTS_NAME), metadata={"format": "pt"}
        )
        return path

    def load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        own = self.adapter_state_dict()
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or unexpected:
            raise ValueError(
                f"adapter weights do not fit this model: missing {missing[:8]}, unexpected "
                f"{unexpected[:8]}"
            )
        self.base_model.load_state_dict(state, strict=False)

    @classmethod
    def from_pretrained(cls, model: nn.Module, path: str | Path) -> Self:
        """Rebuild the adapter on ``model`` from a directory written by :meth:`save_pretrained`."""
        wrapped = cls.wrap(model, cls.config_cls.from_pretrained(path))
        file = Path(path) / ADAPTER_WEIGHTS_NAME
        if not file.is_file():
            raise FileNotFoundError(f"no {ADAPTER_WEIGHTS_NAME} in {path}")
        wrapped.load_adapter_state(load_file(str(file)))
        return wrapped
