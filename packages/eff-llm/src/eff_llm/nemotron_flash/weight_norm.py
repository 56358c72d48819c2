"""Nemotron-Flash weight normalisation (§2.3; item 1 of :mod:`eff_llm.nemotron_flash`): the
Case-1 / Case-2 split (:data:`CASE1`, :data:`CASE2` and the hybrid operators' names),
:func:`weight_norm_targets`, :func:`apply_weight_norm_` and the training-loop component
:class:`WeightNormProjector`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from eff_shared.errors import check_positive, check_type

__all__ = [
    "CASE1",
    "CASE2",
    "DELTANET_CASE1",
    "DELTANET_CASE2",
    "DELTANET_MODULES",
    "HYBRID_CASE1",
    "HYBRID_CASE2",
    "MAMBA2_CASE1",
    "MAMBA2_CASE2",
    "WeightNormProjector",
    "WeightNormTargets",
    "apply_weight_norm_",
    "weight_norm_targets",
]

CASE1 = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
CASE2 = ("o_proj", "down_proj")
# The paper's rule on the hybrid operators (outputs added to the residual stream → Case-2):
# Mamba2 (NemotronH, HybridSLM "m2") in_proj rows / out_proj columns; Gated DeltaNet (Qwen3-Next,
# HybridSLM "d") in_proj_qkvz and in_proj_ba rows / out_proj columns.
MAMBA2_CASE1 = ("in_proj",)
MAMBA2_CASE2 = ("out_proj",)
DELTANET_CASE1 = ("in_proj_qkvz", "in_proj_ba")
DELTANET_CASE2 = ("out_proj",)
HYBRID_CASE1 = (*CASE1, *MAMBA2_CASE1, *DELTANET_CASE1)
HYBRID_CASE2 = (*CASE2, *MAMBA2_CASE2)
# Module classes whose linears are left alone by default: normalising transformers' Gated DeltaNet
# projections costs +0.65 nats of validation CE on a tiny Qwen3-Next hybrid over normalising its
# attention and MLP only (module docstring). ``exclude_modules=()`` applies the rule to them too.
DELTANET_MODULES = ("Qwen3NextGatedDeltaNet",)
# Names of the library's cases: one that a model lacks is skipped (reported), any other name that
# matches nothing raises (most likely a misspelling).
_LIBRARY_NAMES = frozenset(HYBRID_CASE1) | frozenset(HYBRID_CASE2)


@dataclass(frozen=True)
class WeightNormTargets:
    """The matrices the weight-norm split resolves to on one model (:func:`weight_norm_targets`).

    ``case1`` / ``case2``: full module names of the ``nn.Linear`` layers normalised by rows /
    columns; ``skipped``: library case names the model has no layer of; ``excluded``: full names of
    matching layers inside ``exclude_modules`` (left alone).
    """

    case1: tuple[str, ...]
    case2: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()


def _excluded_prefixes(model: nn.Module, exclude_modules: Sequence[str | type]) -> list[str]:
    if isinstance(exclude_modules, (str, type)):
        exclude_modules = (exclude_modules,)
    for item in exclude_modules:
        if not isinstance(item, (str, type)):
            raise TypeError(
                f"exclude_modules must hold module class names or classes, got "
                f"{type(item).__name__}"
            )
    names = {x for x in exclude_modules if isinstance(x, str)}
    types = tuple(x for x in exclude_modules if isinstance(x, type))
    return [
        full + "."
        for full, mod in model.named_modules()
        if type(mod).__name__ in names or (types and isinstance(mod, types))
    ]


def weight_norm_targets(
    model: nn.Module,
    case1: Sequence[str] = CASE1,
    case2: Sequence[str] = CASE2,
    exclude_modules: Sequence[str | type] = DELTANET_MODULES,
    strict: bool = False,
) -> WeightNormTargets:
    """Resolve the Case-1 / Case-2 names (``nn.Linear`` leaf names) on ``model``.

    Layers inside a module whose class is in ``exclude_modules`` (class names or classes) are left
    alone. A name of the library's cases (:data:`HYBRID_CASE1` ∪ :data:`HYBRID_CASE2`) that the model
    lacks is skipped and reported, so the hybrid cases apply to Llama, NemotronH, Qwen3-Next and
    :class:`HybridSLM` models as they are; with ``strict`` every name must match. Raises
    ``ValueError`` when a name outside the library's cases matches no layer (a misspelling), when
    the cases overlap, or when nothing at all is left to normalise.
    """
    check_type("strict", strict, bool)
    case1, case2 = tuple(case1), tuple(case2)
    for arg, names in (("case1", case1), ("case2", case2)):
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise TypeError(f"{arg} must hold module names (str), got {bad}")
    overlap = set(case1) & set(case2)
    if overlap:
        raise ValueError(f"case1 and case2 must be disjoint, both contain {sorted(overlap)}")
    prefixes = _excluded_prefixes(model, exclude_modules)
    found: dict[str, list[str]] = {n: [] for n in (*case1, *case2)}
    excluded: dict[str, list[str]] = {n: [] for n in found}
    for full, mod in model.named_modules():
        leaf = full.rsplit(".", 1)[-1]
        if leaf in found and isinstance(mod, nn.Linear):
            inside = any(full.startswith(p) for p in prefixes)
            (excluded if inside else found)[leaf].append(full)
    missing = [n for n, mods in found.items() if not mods]
    unknown = [n for n in missing if strict or n not in _LIBRARY_NAMES]
    if unknown:
        lib = [n for n in unknown if n in _LIBRARY_NAMES]
        raise ValueError(
            f"weight-norm targets missing from the model (no nn.Linear named): {unknown}"
            + ("" if strict else " (not a name of the library's cases: misspelt?)")
            + (f"; {lib} only inside exclude_modules" if any(excluded[n] for n in lib) else "")
            + "; pass case1/case2 with the names the model uses"
        )
    targets = WeightNormTargets(
        case1=tuple(m for n in case1 for m in found[n]),
        case2=tuple(m for n in case2 for m in found[n]),
        skipped=tuple(n for n in missing if not excluded[n]),
        excluded=tuple(m for mods in excluded.values() for m in mods),
    )
    if not targets.case1 and not targets.case2:
        raise ValueError(
            f"no weight-norm target matches the model: none of case1={list(case1)} / "
            f"case2={list(case2)} names an nn.Linear outside exclude_modules"
        )
    return targets


def _normalise_(w: torch.Tensor, dim: int, eps: float, name: str) -> None:
    norms = w.norm(dim=dim, keepdim=True)
    if bool((norms < eps).any()):
        warnings.warn(
            f"weight norm: {int((norms < eps).sum())} zero-norm {'rows' if dim == 1 else 'columns'} "
            f"in {name} were left at zero (norm clamped to eps={eps})",
            RuntimeWarning,
            stacklevel=3,
        )
    w.div_(norms.clamp_min(eps))


@torch.no_grad()
def apply_weight_norm_(
    model: nn.Module,
    case1: Sequence[str] = CASE1,
    case2: Sequence[str] = CASE2,
    include_embeddings: bool = False,
    eps: float = 1e-12,
    exclude_modules: Sequence[str | type] = DELTANET_MODULES,
    strict: bool = False,
) -> list[str]:
    """Project ``model``'s weights in place (§2.3): Case-1 ``nn.Linear`` (names ending in ``case1``)
    to unit-norm rows, Case-2 to unit-norm columns; with ``include_embeddings`` the input embedding
    rows and the (untied) LM-head rows too. Returns the normalised parameter names.

    The names resolve as :func:`weight_norm_targets` does: layers inside ``exclude_modules``
    (default: transformers' Gated DeltaNet) are left alone; library case names the model lacks are
    skipped unless ``strict``; ``ValueError`` for a name outside the library's cases that matches
    nothing (listing them) or when nothing matches. A zero-norm row/column stays zero (its norm is
    clamped to ``eps``) and a ``RuntimeWarning`` is issued.
    """
    check_type("include_embeddings", include_embeddings, bool)
    check_positive("eps", eps)
    targets = weight_norm_targets(model, case1, case2, exclude_modules, strict)
    names: list[str] = []
    for full_names, dim in ((targets.case1, 1), (targets.case2, 0)):
        for full in full_names:
            _normalise_(model.get_submodule(full).weight, dim, eps, full)
            names.append(full + ".weight")
    if include_embeddings:
        emb = model.get_input_embeddings()
        _normalise_(emb.weight, 1, eps, "input embeddings")
        names.append("input_embeddings.weight")
        out = model.get_output_embeddings()
        if out is not None and out.weight is not emb.weight:
            _normalise_(out.weight, 1, eps, "output embeddings")
            names.append("output_embeddings.weight")
    return names


class WeightNormProjector:
    """The weight-norm projection as a training-loop component.

    ``optimizer.register_step_post_hook(WeightNormProjector(model))`` (or :meth:`attach`) re-projects
    after every ``optimizer.step()``; calling it with no argument projects once. Construction
    validates the targets and projects the initial weights; ``targets`` (a
    :class:`WeightNormTargets`) reports what was matched, skipped and excluded, ``names`` the
    normalised parameters. Arguments as :func:`apply_weight_norm_`.
    """

    def __init__(
        self,
        model: nn.Module,
        case1: Sequence[str] = CASE1,
        case2: Sequence[str] = CASE2,
        include_embeddings: bool = False,
        eps: float = 1e-12,
        exclude_modules: Sequence[str | type] = DELTANET_MODULES,
        strict: bool = False,
    ) -> None:
        self.model = model
        self.kwargs = {
            "case1": tuple(case1),
            "case2": tuple(case2),
            "include_embeddings": include_embeddings,
            "eps": eps,
            "exclude_modules": tuple(exclude_modules)
            if not isinstance(exclude_modules, (str, type))
            else (exclude_modules,),
            "strict": strict,
        }
        self.names = apply_weight_norm_(model, **self.kwargs)
        self.targets = weight_norm_targets(
            model,
            self.kwargs["case1"],
            self.kwargs["case2"],
            self.kwargs["exclude_modules"],
            strict,
        )
        self.calls = 0

    def __call__(self, *_args: Any, **_kwargs: Any) -> None:
        apply_weight_norm_(self.model, **self.kwargs)
        self.calls += 1

    def attach(self, optimizer: torch.optim.Optimizer):
        """Register as a step post-hook of ``optimizer``; returns the removable handle."""
        return optimizer.register_step_post_hook(self)
