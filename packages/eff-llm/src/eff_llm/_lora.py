"""Helpers over peft LoRA state dicts (``get_peft_model_state_dict`` keys: ``...lora_A.weight`` /
``...lora_B.weight``), shared by the federated LoRA methods."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["load_lora_state", "lora_pairs", "lora_state"]

_A, _B = ".lora_A.weight", ".lora_B.weight"


def lora_pairs(state: Mapping[str, Tensor]) -> dict[str, tuple[str, str]]:
    """Module prefix → (A key, B key); ``ValueError`` naming a module whose pair is incomplete."""
    prefixes = {k[: -len(_A)] for k in state if k.endswith(_A)} | {
        k[: -len(_B)] for k in state if k.endswith(_B)
    }
    pairs = {}
    for p in sorted(prefixes):
        a, b = p + _A, p + _B
        if a not in state or b not in state:
            missing = "lora_A" if a not in state else "lora_B"
            raise ValueError(
                f"LoRA module {p!r} has no {missing} weight; both lora_A and lora_B are required"
            )
        pairs[p] = (a, b)
    if not pairs:
        raise ValueError(
            "the state holds no LoRA weights (keys ending in .lora_A.weight / .lora_B.weight)"
        )
    return pairs


def lora_state(model: torch.nn.Module) -> dict[str, Tensor]:
    """The adapter's LoRA tensors in peft's saved-state naming (a detached copy)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_lora_state(model: torch.nn.Module, state: Mapping[str, Tensor]) -> None:
    from peft import set_peft_model_state_dict

    # set_peft_model_state_dict loads with strict=False: check that every key lands.
    result = set_peft_model_state_dict(model, {k: torch.as_tensor(v) for k, v in state.items()})
    bad = [k for k in result.unexpected_keys if "lora_" in k]
    if bad:
        raise ValueError(f"LoRA keys not found in the model: {bad[:3]}")
