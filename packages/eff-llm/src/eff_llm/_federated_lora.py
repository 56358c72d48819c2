"""Client updates of the DP federated LoRA methods on a peft model (FedSVD, FFA-LoRA, FedAvg-LoRA)."""

from __future__ import annotations

import re
from typing import Any, Literal

import torch
from torch import Tensor, nn

from eff_llm._lora import load_lora_state
from eff_llm.fedsvd import dp_sgd_local_train

__all__ = ["make_dp_lora_client", "param_to_state_key"]


def param_to_state_key(name: str) -> str:
    """peft parameter name → saved-state key (``...lora_B.default.weight`` → ``...lora_B.weight``)."""
    return re.sub(r"\.(lora_[AB])\.[^.]+\.weight$", r".\1.weight", name)


def make_dp_lora_client(
    model: nn.Module,
    mode: Literal["fedsvd", "ffa", "fedavg"],
    *,
    sigma: float,
    max_grad_norm: float,
    lr: float,
    steps: int,
    batch_size: int,
):
    """Client update: load the global LoRA state, run DP-SGD on B (FedSVD, FFA-LoRA) or on A and B
    (FedAvg-LoRA), and send the deltas of the trained tensors only."""
    if mode not in ("fedsvd", "ffa", "fedavg"):
        raise ValueError(f"mode must be one of ['fedsvd', 'ffa', 'fedavg'], got {mode!r}")
    which = "AB" if mode == "fedavg" else "B"
    trainable = [n for n, _ in model.named_parameters() if any(f"lora_{w}" in n for w in which)]

    def client_update(
        global_state: dict[str, Any], data: tuple[Tensor, Tensor], cfg: Any, rng
    ) -> tuple:
        load_lora_state(model, global_state)
        gen = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
        deltas = dp_sgd_local_train(
            model,
            trainable,
            data,
            sigma=sigma,
            max_grad_norm=max_grad_norm,
            lr=lr,
            steps=steps,
            batch_size=batch_size,
            generator=gen,
        )
        return {param_to_state_key(k): v for k, v in deltas.items()}, int(data[0].shape[0]), {}

    return client_update
