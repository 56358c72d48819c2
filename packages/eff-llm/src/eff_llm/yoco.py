"""YOCO: You Only Communicate Once — one-shot federated LoRA with a sign-regularised B.

Official code: ``1xbq1/FedMLLM`` branch ``yoco``, folder ``YOCO/`` (``finetune/finetune.py``:
``get_low_rank_sign`` and the B initialisation; ``finetune/trainer.py``: ``CPMTrainerSign``,
``soft_sign``, ``get_alpha``, ``get_lambda_orthog``). The paper text was not available; the
objective below is the code's, with the paper's A regulariser as the default.

* **Initialisation (no communication):** W = U S Vᵀ of the frozen weight; B0 = U_r √S_r, identical
  on every client and non-zero; A0 = peft's default; sign target S_B = sign(B0).
* **Local loss** at step t of T: CE + ‖tanh(α_t B) − S_B‖_F / ‖S_B‖_F + λ_t·R_A(A), with
  α_t = α_T − ½(α_T − α_0)(1 + cos(πt/T)) (1 → 200) and λ_t moving linearly in α_t from 0.1 to 0.01.
* **R_A:** the paper states a sparsity (L1) penalty — the default ``"l1"`` (mean |A|, so its scale
  does not grow with d_in); the released code uses ‖AᵀA − I‖²_F (``"orth_code"``, a d_in×d_in Gram
  that cannot reach 0 when r < d_in, likely a bug); ``"orth_rr"`` is the sensible ‖AAᵀ − I_r‖²_F.
* **One shot:** each client uploads (A, B) once; one aggregation: ``"weighted"`` (sample-weighted
  mean of A and of B), ``"mean"``, or ``"svd_of_mean_product"`` (our suggestion: the weighted mean of
  B_k A_k re-factorised by SVD to rank r). A second round raises ``RuntimeError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from eff_llm._lora import load_lora_state, lora_pairs, lora_state
from eff_shared.errors import check_int
from eff_shared.federated import weighted_mean

__all__ = [
    "YOCOAggregator",
    "YOCOConfig",
    "alpha_schedule",
    "lambda_schedule",
    "make_yoco_client",
    "yoco_init_lora",
    "yoco_regularizer",
]

_A_REGS = ("l1", "orth_rr", "orth_code")
_AGGS = ("mean", "weighted", "svd_of_mean_product")


@dataclass(frozen=True)
class YOCOConfig:
    rank: int = 8
    alpha_init: float = 1.0
    alpha_final: float = 200.0
    a_reg: Literal["l1", "orth_rr", "orth_code"] = "l1"
    a_reg_weight: float | tuple[float, float] = (0.1, 0.01)
    aggregation: Literal["mean", "weighted", "svd_of_mean_product"] = "weighted"

    def __post_init__(self) -> None:
        check_int("rank", self.rank, minimum=1)
        if not self.alpha_init > 0:
            raise ValueError(f"alpha_init must be > 0, got {self.alpha_init!r}")
        if not self.alpha_final >= self.alpha_init:
            raise ValueError(
                f"alpha_final must be >= alpha_init ({self.alpha_init}), got {self.alpha_final!r}"
            )
        if self.a_reg not in _A_REGS:
            raise ValueError(f"a_reg must be one of {list(_A_REGS)}, got {self.a_reg!r}")
        if self.aggregation not in _AGGS:
            raise ValueError(f"aggregation must be one of {list(_AGGS)}, got {self.aggregation!r}")


def _check_steps(step: int, total_steps: int) -> None:
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps!r}")
    if not 0 <= step <= total_steps:
        raise ValueError(f"step must lie in [0, total_steps={total_steps}], got {step!r}")


def alpha_schedule(step: int, total_steps: int, cfg: YOCOConfig) -> float:
    """α_t = α_T − ½(α_T − α_0)(1 + cos(πt/T)): α_0 at t = 0, α_T at t = T (``get_alpha``)."""
    _check_steps(step, total_steps)
    return cfg.alpha_final - 0.5 * (cfg.alpha_final - cfg.alpha_init) * (
        1 + math.cos(math.pi * step / total_steps)
    )


def lambda_schedule(step: int, total_steps: int, cfg: YOCOConfig) -> float:
    """λ_t linear in α_t: λ_0 at α_0, λ_T at α_T (``get_lambda_orthog``: 0.1 → 0.01)."""
    w = cfg.a_reg_weight
    lam0, lam1 = (w, w) if isinstance(w, int | float) else w
    if cfg.alpha_final == cfg.alpha_init:
        return float(lam0)
    frac = (alpha_schedule(step, total_steps, cfg) - cfg.alpha_init) / (
        cfg.alpha_final - cfg.alpha_init
    )
    return float(lam0 + (lam1 - lam0) * frac)


def _lora_modules(model: nn.Module) -> dict[str, nn.Module]:
    from peft.tuners.lora import LoraLayer

    return {n: m for n, m in model.named_modules() if isinstance(m, LoraLayer)}


def yoco_init_lora(peft_model: nn.Module, config: YOCOConfig) -> dict[str, Tensor]:
    """Set B0 = U_r √S_r of each target module's frozen weight; return the sign targets S_B by module."""
    targets = {}
    for name, mod in _lora_modules(peft_model).items():
        adapter = mod.active_adapters[0]
        w = mod.get_base_layer().weight.detach().double()
        r = mod.lora_B[adapter].weight.shape[1]
        if r > min(w.shape):
            raise ValueError(
                f"rank r={r} exceeds min(d_out, d_in) = {min(w.shape)} in module {name}"
            )
        u, s, _ = torch.linalg.svd(w, full_matrices=False)
        b0 = (u[:, :r] * s[:r].sqrt()).to(mod.lora_B[adapter].weight.dtype)
        with torch.no_grad():
            mod.lora_B[adapter].weight.copy_(b0)
        targets[name] = torch.sign(b0)
    return targets


def yoco_regularizer(
    peft_model: nn.Module,
    sign_targets: Mapping[str, Tensor],
    step: int,
    total_steps: int,
    config: YOCOConfig,
) -> Tensor:
    """Σ_modules ‖tanh(α_t B) − S_B‖_F / ‖S_B‖_F + λ_t · R_A(A) (``CPMTrainerSign``)."""
    alpha, lam = (
        alpha_schedule(step, total_steps, config),
        lambda_schedule(step, total_steps, config),
    )
    total = torch.zeros(())
    mods = _lora_modules(peft_model)
    for name, target in sign_targets.items():
        if name not in mods:
            raise ValueError(f"sign target for unknown LoRA module {name!r}")
        mod = mods[name]
        adapter = mod.active_adapters[0]
        b, a = mod.lora_B[adapter].weight, mod.lora_A[adapter].weight
        if target.shape != b.shape:
            raise ValueError(
                f"sign target of {name} has shape {tuple(target.shape)}, B has {tuple(b.shape)}"
            )
        total = total + torch.linalg.norm(torch.tanh(alpha * b) - target) / torch.linalg.norm(
            target
        )
        if config.a_reg == "l1":
            reg = a.abs().mean()
        elif config.a_reg == "orth_rr":
            reg = (a @ a.T - torch.eye(a.shape[0])).pow(2).sum()
        else:
            reg = (a.T @ a - torch.eye(a.shape[1])).pow(2).sum()
        total = total + lam * reg
    return total


def make_yoco_client(
    model: nn.Module,
    sign_targets: Mapping[str, Tensor] | None,
    config: YOCOConfig,
    *,
    epochs: int = 10,
    lr: float = 5e-3,
    batch_size: int = 32,
    weight_decay: float = 0.0,
):
    """An ``eff_shared.federated`` client: local AdamW training from the global LoRA state.

    With ``sign_targets`` the loss adds :func:`yoco_regularizer` (YOCO); with ``None`` it is plain
    cross-entropy (the one-shot FedAvg-LoRA baseline). Data is a pair (x, y) of tensors. The client
    uploads its whole LoRA state (A and B) once.
    """

    def client_update(
        global_state: dict[str, Any], data: tuple[Tensor, Tensor], cfg: Any, rng
    ) -> tuple:
        load_lora_state(model, global_state)
        params = [p for n, p in model.named_parameters() if "lora_" in n]
        for p in params:
            p.requires_grad_(True)
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        gen = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
        x, y = data
        n = x.shape[0]
        steps_per_epoch = max(1, math.ceil(n / batch_size))
        total = epochs * steps_per_epoch
        step = 0
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen)
            for start in range(0, n, batch_size):
                idx = perm[start : start + batch_size]
                loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
                if sign_targets is not None:
                    loss = loss + yoco_regularizer(model, sign_targets, step, total, config)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
        return lora_state(model), n, {"final_loss": loss.item()}

    return client_update


class YOCOAggregator:
    """The single aggregation of YOCO (and of one-shot FedAvg-LoRA); keeps the replies for analysis."""

    def __init__(
        self, aggregation: Literal["mean", "weighted", "svd_of_mean_product"] = "weighted"
    ) -> None:
        if aggregation not in _AGGS:
            raise ValueError(f"aggregation must be one of {list(_AGGS)}, got {aggregation!r}")
        self.aggregation = aggregation
        self.calls = 0
        self.replies: list[tuple[Mapping[str, Tensor], int]] = []

    def aggregate(self, global_state, replies, round_idx):
        if self.calls:
            raise RuntimeError(
                "YOCO is one-shot: the aggregator was already used once (a second round was asked for)"
            )
        if not replies:
            raise ValueError("YOCOAggregator needs at least one client reply")
        self.calls += 1
        self.replies = list(replies)
        weights = [n if self.aggregation != "mean" else 1 for _, n in replies]
        mean = weighted_mean([s for s, _ in replies], weights)
        if self.aggregation == "svd_of_mean_product":
            for _name, (a_key, b_key) in lora_pairs(mean).items():
                prod = sum(
                    w * (s[b_key] @ s[a_key]) for (s, _), w in zip(replies, weights, strict=True)
                ) / sum(weights)
                r = mean[a_key].shape[0]
                u, sv, vh = torch.linalg.svd(prod.double(), full_matrices=False)
                # best rank-r approximation of the mean product (Eckart–Young)
                mean[a_key], mean[b_key] = vh[:r].float(), (u[:, :r] * sv[:r]).float()
        return {**global_state, **mean}

    def mean_product(self) -> dict[str, Tensor]:
        """Σ_k w_k B_k A_k per module ("product-avg"; may exceed rank r)."""
        weights = [n for _, n in self.replies]
        out = {}
        for name, (a_key, b_key) in lora_pairs(self.replies[0][0]).items():
            out[name] = sum(
                w * (s[b_key] @ s[a_key]) for (s, _), w in zip(self.replies, weights, strict=True)
            ) / sum(weights)
        return out
