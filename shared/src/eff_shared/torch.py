"""torch helpers: device and dtype choice, parameter counts, state-dict conversion, and the
runtime helpers every torch package uses — :func:`threads` (intra-op threads, restored) and
:func:`seeded` / :func:`torch_generator` (torch random streams from ``derive_seed``).

Imported only by torch packages (eff-llm, eff-kernels, eff-vision, eff-graph, eff-rl): eff-shared
itself installs without torch, so this module is the one place in the core that imports it
(extra ``eff-shared[torch]``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from eff_shared.errors import check_choice, check_int
from eff_shared.seeding import derive_seed

__all__ = [
    "choose_device",
    "choose_dtype",
    "count_parameters",
    "model_hook",
    "numpy_to_state",
    "pin_threads",
    "seeded",
    "state_to_numpy",
    "threads",
    "torch_generator",
]

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


def choose_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"``/``None`` → CUDA when available, else CPU; anything else is validated and returned.

    Asking for CUDA on a machine without it is an error rather than a silent CPU fallback.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}"
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r} was requested but CUDA is not available on this machine"
        )
    return dev


def choose_dtype(
    dtype: str | torch.dtype | None = "auto", device: torch.device | None = None
) -> torch.dtype:
    """``"auto"`` → bfloat16 on a CUDA device that supports it, float32 otherwise."""
    if dtype is None or dtype == "auto":
        dev = device if device is not None else choose_device("auto")
        if dev.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype}")
        return dtype
    check_choice("dtype", dtype, ["auto", *_DTYPES])
    return _DTYPES[dtype]


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters (shared tensors counted once)."""
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def pin_threads(n: int = 1) -> None:
    """Set torch's intra-op threads for the rest of the process (a CLI's entry point; use
    :func:`threads` to set them for a block or a function and restore them afterwards)."""
    torch.set_num_threads(check_int("n", n, minimum=1))


class threads(contextlib.ContextDecorator):
    """``with threads(1): ...`` or ``@threads(1)``: torch's intra-op threads set to ``n`` inside,
    the previous value restored after (also on error). The tiny CPU-scale reproductions are many
    times slower with one thread per core on a shared machine, and one thread keeps their
    numbers independent of the machine."""

    def __init__(self, n: int = 1) -> None:
        self.n = check_int("n", n, minimum=1)
        self._before: list[int] = []

    def __enter__(self) -> threads:
        self._before.append(torch.get_num_threads())
        torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self._before.pop())


def _stream_seed(seed: int, keys: tuple[int, ...]) -> int:
    """``seed`` itself without keys (so ``seeded(s)`` is ``manual_seed(s)``), else
    ``derive_seed(seed, *keys)``."""
    if not keys:
        return check_int("seed", seed, minimum=0)
    return derive_seed(seed, *keys)


class seeded(contextlib.ContextDecorator):
    """``with seeded(seed, *keys): ...`` (or as a decorator): torch's global RNG — the CPU one and,
    when CUDA is available, the current device's — forked and seeded with ``seed`` (no keys) or
    ``derive_seed(seed, *keys)``; the caller's stream is untouched afterwards. For parameter
    initialisation and dropout that must not depend on what ran before."""

    def __init__(self, seed: int, *keys: int) -> None:
        self.seed = _stream_seed(seed, keys)
        self._forks: list[contextlib.AbstractContextManager[None]] = []

    def __enter__(self) -> seeded:
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        fork = torch.random.fork_rng(devices=devices)
        fork.__enter__()
        self._forks.append(fork)
        torch.manual_seed(self.seed)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._forks.pop().__exit__(*exc)


def torch_generator(
    seed: int | np.random.Generator, *keys: int, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A ``torch.Generator`` for the stream ``(seed, *keys)`` (seeded with ``seed`` itself when
    there are no keys), or drawn from a numpy generator (the federated runner hands those out)."""
    gen = torch.Generator(device=device)
    if isinstance(seed, np.random.Generator):
        if keys:
            raise ValueError("keys are only allowed with an int seed, not a numpy Generator")
        gen.manual_seed(int(seed.integers(0, 2**63 - 1)))
    else:
        gen.manual_seed(_stream_seed(seed, keys))
    return gen


def state_to_numpy(state: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """A state dict as numpy arrays on the CPU (bfloat16 widened to float32, which numpy lacks)."""
    out = {}
    for k, v in state.items():
        t = v.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        out[k] = t.numpy().copy()
    return out


def numpy_to_state(
    arrays: Mapping[str, Any], like: Mapping[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """numpy arrays back to tensors, with the dtype and device of ``like`` when given."""
    out = {}
    for k, v in arrays.items():
        t = torch.as_tensor(np.asarray(v))
        if like is not None and k in like:
            t = t.to(dtype=like[k].dtype, device=like[k].device)
        out[k] = t
    return out


def model_hook(
    model: nn.Module, fn: Callable[[nn.Module, int, torch.Generator], None]
) -> Callable[[dict[str, Any], int, np.random.Generator], dict[str, Any]]:
    """Adapt a hook on a *model* to the federated runner's ``pre_local_train`` hook on a *state*.

    The runner is torch-free and hands the hook a state dict, the round and a numpy generator;
    methods such as FedPhoenix reset parts of the client's model in place. This loads the state
    into ``model`` (tensors or numpy arrays), calls ``fn(model, round_idx, torch_generator)`` and
    returns the model's state in the representation it received.
    """

    def hook(state: dict[str, Any], round_idx: int, rng: np.random.Generator) -> dict[str, Any]:
        as_numpy = any(isinstance(v, np.ndarray) for v in state.values())
        own = model.state_dict()
        tensors = numpy_to_state(state, like=own) if as_numpy else dict(state)
        model.load_state_dict({**own, **tensors})
        fn(model, round_idx, torch_generator(rng))
        new = {k: v.detach().clone() for k, v in model.state_dict().items() if k in state}
        return state_to_numpy(new) if as_numpy else new

    return hook
