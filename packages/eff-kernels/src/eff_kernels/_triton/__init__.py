"""Triton kernels of eff-kernels and the loader that runs them compiled (CUDA) or interpreted (CPU).

Triton decides at decoration time (``@triton.jit``) and again at launch time whether it interprets a
kernel (``TRITON_INTERPRET=1``). CPU tensors can only run interpreted, so :func:`kernels` loads a
separate copy of a kernel module for each mode and :func:`launch_env` sets the variable around each
launch; nothing is left changed in ``os.environ`` afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import torch

__all__ = ["interpret_for", "kernels", "launch_env", "triton_available"]

_CACHE: dict[tuple[str, bool], ModuleType] = {}


def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (it ships with torch's Linux wheels)."""
    return importlib.util.find_spec("triton") is not None


def interpret_for(device: torch.device) -> bool:
    """Interpreted on CPU tensors (always), or on CUDA when ``TRITON_INTERPRET=1`` is set."""
    if device.type == "cpu":
        return True
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


_STDLIB_TWINS: dict[tuple[ModuleType, str, bool], object] = {}


@contextlib.contextmanager
def _stdlib_for(interpret: bool) -> Iterator[None]:
    """Make triton.language's ``@jit`` library functions (``tl.zeros``, ``tl.max``, ``tl.sum``, ...)
    match the launch mode, whatever mode triton was first imported in.

    ``triton.language.standard`` decorates them once, when triton is first imported: as
    ``InterpretedFunction`` if ``TRITON_INTERPRET`` was set then, else ``JITFunction``. If anything
    imported triton before our loader (transformers, torch's inductor, a user), an interpreted
    kernel calling them fails with "Cannot call @triton.jit'd outside of the scope of a kernel" (and
    a compiled kernel fails after a CPU launch imported triton interpreted). For the duration of the
    launch, swap in twins of the right kind, then restore the originals.
    """
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    wrong, make = (
        (JITFunction, InterpretedFunction) if interpret else (InterpretedFunction, JITFunction)
    )
    swapped = []
    for mod in (tl, tl.standard, tl.math):
        for name, value in list(vars(mod).items()):
            if isinstance(value, wrong):
                twin = _STDLIB_TWINS.get((mod, name, interpret))
                if twin is None:
                    twin = _STDLIB_TWINS[(mod, name, interpret)] = make(value.fn)
                swapped.append((mod, name, value))
                setattr(mod, name, twin)
    try:
        yield
    finally:
        for mod, name, value in reversed(swapped):
            setattr(mod, name, value)


@contextlib.contextmanager
def launch_env(interpret: bool) -> Iterator[None]:
    """Set ``TRITON_INTERPRET`` for the duration of a kernel import or launch (and give triton's
    library functions the launch's mode, see :func:`_stdlib_for`)."""
    old = os.environ.get("TRITON_INTERPRET")
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    try:
        with _stdlib_for(interpret) if triton_available() else contextlib.nullcontext():
            yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def kernels(name: str, device: torch.device) -> ModuleType:
    """The kernel module ``eff_kernels._triton.<name>`` decorated for ``device``'s mode."""
    if not triton_available():
        raise RuntimeError(
            "backend='triton' needs the triton package (it ships with torch's Linux wheels)"
        )
    interpret = interpret_for(device)
    key = (name, interpret)
    if key not in _CACHE:
        path = os.path.join(os.path.dirname(__file__), f"k_{name}.py")
        mod_name = f"eff_kernels._triton.k_{name}" + ("__interpreted" if interpret else "")
        spec = importlib.util.spec_from_file_location(mod_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        with launch_env(interpret):
            spec.loader.exec_module(module)
        _CACHE[key] = module
    return _CACHE[key]
