"""FedSVD: federated LoRA under DP-SGD with server-side SVD re-factorisation.

Paper: "FedSVD: Adaptive Orthogonalization for Private Federated Learning with LoRA" (NeurIPS 2025,
arXiv 2505.12805); official code ``sw-programmer/FedSVD`` (``fedmm/fedavg/{server,client}.py``).

* **Client:** trains only B of each LoRA pair with sample-level DP-SGD (per-sample gradients with
  ``torch.func`` over the trainable tensors only, clipped to norm C, summed, Gaussian noise
  N(0, σ²C²), divided by the expected batch size; Poisson sampling as the accountant assumes) and
  sends ΔB.
* **Server:** B ← B + Σ_k w_k ΔB_k (w_k ∝ data size); then per module M = B A, U S Vᵀ = svd(M),
  **A ← V_rᵀ, B ← U_r diag(S_r)** (every ``period`` rounds; 1 in the paper) and both are broadcast.

What the abstract does not say (spec): B A = B·A_old, so the row space of A never leaves that of
A_0; FedSVD re-orthonormalises and rotates A inside its initial subspace and moves the singular
values into B, function-preservingly. :func:`svd_refactor` does this economically in
O((d_out + d_in) r²) without forming the d_out×d_in product.

Baselines on the same runtime: FFA-LoRA (A frozen, B averaged) and FedAvg-LoRA (A and B trained and
averaged). Privacy: Opacus calibrates σ for (ε, δ) and re-accounts ε (extra ``eff-llm[dp]``).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from eff_llm._lora import load_lora_state, lora_pairs, lora_state
from eff_shared.errors import check_int
from eff_shared.federated import weighted_mean

__all__ = [
    "DPConfig",
    "FFALoRAAggregator",
    "FedAvgLoRAAggregator",
    "FedSVDAggregator",
    "account_epsilon",
    "calibrate_noise",
    "check_optimizer",
    "dp_sgd_local_train",
    "load_lora_state",
    "lora_state",
    "make_dp_lora_client",
    "param_to_state_key",
    "per_sample_clipped_grad_sum",
    "svd_refactor",
]

_DP_HINT = 'DP accounting needs Opacus: pip install "eff-llm[dp]"'


def svd_refactor(
    A: Tensor, B: Tensor, *, economical: bool = True, name: str = ""
) -> tuple[Tensor, Tensor]:
    """(A', B') with B'A' = BA, A' = V_rᵀ (orthonormal rows) and B' = U_r diag(S_r).

    ``economical``: QR of Aᵀ and of B·R_Aᵀ, then an r×r SVD — O((d_out + d_in) r²), never forming
    BA; otherwise the full SVD of BA (O(d_out·d_in·r)). Non-finite input raises ``RuntimeError``.
    """
    r = A.shape[0]
    if A.ndim != 2 or B.ndim != 2 or B.shape[1] != r:
        raise ValueError(
            f"A must be r x d_in and B d_out x r, got A {tuple(A.shape)}, B {tuple(B.shape)}"
        )
    if r > min(B.shape[0], A.shape[1]):
        raise ValueError(f"rank r={r} exceeds min(d_out, d_in) = {min(B.shape[0], A.shape[1])}")
    if not (torch.isfinite(A).all() and torch.isfinite(B).all()):
        raise RuntimeError(
            f"non-finite LoRA weights in module {name or '?'}; cannot re-factorise by SVD"
        )
    dt = A.dtype
    A64, B64 = A.double(), B.double()
    if economical:
        q_a, r_a = torch.linalg.qr(A64.T)  # A = R_Aᵀ Q_Aᵀ
        q_b, r_b = torch.linalg.qr(B64 @ r_a.T)  # B A = Q_B R_B Q_Aᵀ
        u, s, vh = torch.linalg.svd(r_b)
        new_b, new_a = q_b @ (u * s), vh @ q_a.T
    else:
        u, s, vh = torch.linalg.svd(B64 @ A64, full_matrices=False)
        new_b, new_a = u[:, :r] * s[:r], vh[:r]
    return new_a.to(dt), new_b.to(dt)


class _LoRAAggregator:
    """Delta aggregation of the LoRA tensors the clients send (sample-size weights)."""

    def __init__(self, expect_a: bool) -> None:
        self.expect_a = expect_a

    def _apply_deltas(
        self, global_state: dict[str, Any], replies: list[tuple[Mapping[str, Tensor], int]]
    ) -> dict[str, Any]:
        # States may arrive as numpy arrays (Flower bridge) or tensors (in-process runner).
        global_state = {k: torch.as_tensor(v) for k, v in global_state.items()}
        replies = [({k: torch.as_tensor(v) for k, v in u.items()}, n) for u, n in replies]
        pairs = lora_pairs(global_state)
        for update, _ in replies:
            sent_a = any(k.endswith(".lora_A.weight") for k in update)
            if sent_a and not self.expect_a:
                raise ValueError(
                    f"{type(self).__name__}: clients must send only lora_B deltas (A is not trained)"
                )
        mean = weighted_mean([u for u, _ in replies], [n for _, n in replies])
        new = dict(global_state)
        for a_key, b_key in pairs.values():
            new[b_key] = global_state[b_key] + mean[b_key]
            if self.expect_a:
                new[a_key] = global_state[a_key] + mean[a_key]
        return new


class FFALoRAAggregator(_LoRAAggregator):
    """FFA-LoRA (Sun et al. 2024): A frozen at its initialisation, ΔB averaged."""

    def __init__(self) -> None:
        super().__init__(expect_a=False)

    def aggregate(self, global_state, replies, round_idx):
        return self._apply_deltas(global_state, replies)


class FedAvgLoRAAggregator(_LoRAAggregator):
    """FedAvg-LoRA: A and B trained by the clients; ΔA and ΔB averaged separately."""

    def __init__(self) -> None:
        super().__init__(expect_a=True)

    def aggregate(self, global_state, replies, round_idx):
        return self._apply_deltas(global_state, replies)


class FedSVDAggregator(_LoRAAggregator):
    """FedSVD's server: weighted mean of ΔB (A kept), then :func:`svd_refactor` per module every
    ``period`` rounds (official ``recalculate_svd_period`` = 1)."""

    def __init__(self, period: int = 1, economical: bool = True) -> None:
        check_int("period", period, minimum=1)
        super().__init__(expect_a=False)
        self.period, self.economical = period, economical

    def aggregate(self, global_state, replies, round_idx):
        new = self._apply_deltas(global_state, replies)
        if (round_idx + 1) % self.period == 0:
            for name, (a_key, b_key) in lora_pairs(new).items():
                new[a_key], new[b_key] = svd_refactor(
                    new[a_key], new[b_key], economical=self.economical, name=name
                )
        return new


@dataclass(frozen=True)
class DPConfig:
    """Sample-level DP-SGD settings: target (ε, δ), clipping norm C and the accountant."""

    target_epsilon: float
    target_delta: float = 1e-5
    max_grad_norm: float = 1.0
    accountant: Literal["rdp", "prv"] = "rdp"

    def __post_init__(self) -> None:
        if not self.target_epsilon > 0:
            raise ValueError(f"target_epsilon must be > 0, got {self.target_epsilon!r}")
        if not 0 < self.target_delta < 1:
            raise ValueError(f"target_delta must lie in (0, 1), got {self.target_delta!r}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm!r}")
        if self.accountant not in ("rdp", "prv"):
            raise ValueError(f"accountant must be one of ['rdp', 'prv'], got {self.accountant!r}")


def _check_rate(sample_rate: float, steps: int) -> None:
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must lie in (0, 1], got {sample_rate!r}")
    check_int("steps", steps, minimum=1)


def calibrate_noise(
    cfg: DPConfig, sample_rate: float, steps: int, n_samples: int | None = None
) -> float:
    """σ such that ``steps`` Poisson-subsampled Gaussian steps at ``sample_rate`` spend ``cfg.target_epsilon``."""
    _check_rate(sample_rate, steps)
    if n_samples is not None and cfg.target_delta >= 1.0 / n_samples:
        warnings.warn(
            f"target_delta={cfg.target_delta} is not below 1/n_samples = {1 / n_samples:.2e}",
            UserWarning,
            stacklevel=2,
        )
    try:
        from opacus.accountants.utils import get_noise_multiplier
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_DP_HINT) from exc
    with warnings.catch_warnings():
        # Opacus' bisection visits tiny σ whose optimum RDP order is the largest alpha; the final σ is fine.
        warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
        return float(
            get_noise_multiplier(
                target_epsilon=cfg.target_epsilon,
                target_delta=cfg.target_delta,
                sample_rate=sample_rate,
                steps=steps,
                accountant=cfg.accountant,
            )
        )


def account_epsilon(
    sigma: float, sample_rate: float, steps: int, delta: float, accountant: str = "rdp"
) -> float:
    """ε spent by ``steps`` steps of the subsampled Gaussian mechanism (Opacus accountant)."""
    _check_rate(sample_rate, steps)
    try:
        from opacus.accountants import PRVAccountant, RDPAccountant
    except ImportError as exc:  # pragma: no cover
        raise ImportError(_DP_HINT) from exc
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = [(sigma, sample_rate, steps)]
    return float(acc.get_epsilon(delta=delta))


def per_sample_clipped_grad_sum(
    model: nn.Module, trainable: Sequence[str], x: Tensor, y: Tensor, max_grad_norm: float
) -> tuple[dict[str, Tensor], Tensor]:
    """Σ_i clip_C(∇_θ ℓ(x_i, y_i)) over the ``trainable`` parameters only, and the per-sample norms.

    Per-sample gradients come from ``torch.func.vmap(grad(...))`` on a functional call of the model
    (frozen parameters and buffers held fixed), so no Opacus hooks are needed on the model.
    """
    params = dict(model.named_parameters())
    for name in trainable:
        if name not in params:
            raise ValueError(f"trainable parameter {name!r} is not in the model")
    fixed = {k: v.detach() for k, v in params.items() if k not in trainable}
    fixed |= dict(model.named_buffers())
    train = {k: params[k].detach() for k in trainable}

    def loss_one(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> Tensor:
        out = functional_call(model, {**fixed, **p}, (xi[None],))
        return nn.functional.cross_entropy(out, yi[None])

    grads = vmap(grad(loss_one), in_dims=(None, 0, 0))(train, x, y)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
    factor = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    return {k: torch.einsum("i,i...->...", factor, g) for k, g in grads.items()}, norms


#: Optimizers by name for the DP-SGD client (each consumes the privatised gradient).
_OPTIMIZERS = ("sgd", "adam", "adamw")

_OptimizerSpec = Literal["sgd", "adam", "adamw"] | Callable[[list[Tensor]], torch.optim.Optimizer]


def check_optimizer(optimizer: Any) -> None:
    """Validate a clients' optimizer: one of the names ``"sgd"``, ``"adam"``, ``"adamw"`` or a
    factory ``params -> torch.optim.Optimizer`` (``ValueError`` for an unknown name, ``TypeError``
    for anything else)."""
    if isinstance(optimizer, str):
        if optimizer not in _OPTIMIZERS:
            raise ValueError(
                f"optimizer must be one of {list(_OPTIMIZERS)} or a factory "
                f"params -> torch.optim.Optimizer, got {optimizer!r}"
            )
    elif not callable(optimizer):
        raise TypeError(
            f"optimizer must be one of {list(_OPTIMIZERS)} or a callable "
            f"params -> torch.optim.Optimizer, got {type(optimizer).__name__}"
        )


def _make_optimizer(optimizer: Any, params: list[Tensor], lr: float) -> torch.optim.Optimizer:
    if optimizer == "adam":
        return torch.optim.Adam(params, lr=lr)
    if optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    opt = optimizer(params)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(
            f"the optimizer factory must return a torch.optim.Optimizer, got {type(opt).__name__}"
        )
    return opt


def dp_sgd_local_train(
    model: nn.Module,
    trainable: Sequence[str],
    data: tuple[Tensor, Tensor],
    *,
    sigma: float,
    max_grad_norm: float,
    lr: float,
    steps: int,
    batch_size: int,
    generator: torch.Generator,
    optimizer: _OptimizerSpec = "sgd",
) -> dict[str, Tensor]:
    """``steps`` DP-SGD steps (Abadi et al. 2016) on the ``trainable`` parameters; returns their deltas.

    Each step Poisson-samples the client's data at rate q = batch_size / n (the sampling the
    accountant assumes), clips per-sample gradients to ``max_grad_norm``, adds N(0, σ²C²) to the
    sum — only to the trainable tensors — and divides by the expected batch size.

    ``optimizer`` consumes that privatised gradient (post-processing: the DP guarantee is
    unchanged): ``"sgd"`` (default, plain SGD θ ← θ − lr·g, the official code's RoBERTa setting),
    ``"adam"`` or ``"adamw"`` (``torch.optim`` defaults at ``lr``; the official code's setting for
    the other models), or a factory ``params -> torch.optim.Optimizer`` called once per call — the
    fresh optimizer of every local round — on the trainable tensors (it sets its own learning rate;
    ``lr`` is then unused). The optimizer never sees a raw gradient.
    """
    if not max_grad_norm > 0:
        raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm!r}")
    if sigma < 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    check_optimizer(optimizer)
    x, y = data
    n = x.shape[0]
    q = min(1.0, batch_size / n)
    params = dict(model.named_parameters())
    start = {k: params[k].detach().clone() for k in trainable}
    opt = (
        None
        if optimizer == "sgd"
        else _make_optimizer(optimizer, [params[k] for k in trainable], lr)
    )
    for _ in range(steps):
        mask = torch.rand(n, generator=generator) < q
        idx = torch.nonzero(mask).squeeze(-1)
        if idx.numel():
            sums, _ = per_sample_clipped_grad_sum(model, trainable, x[idx], y[idx], max_grad_norm)
        else:
            sums = {k: torch.zeros_like(start[k]) for k in trainable}
        with torch.no_grad():
            for k in trainable:
                noise = torch.randn(start[k].shape, generator=generator) * (sigma * max_grad_norm)
                if opt is None:  # plain SGD, written out (the default's exact arithmetic)
                    params[k].sub_(lr * (sums[k] + noise.to(sums[k])) / (q * n))
                else:
                    params[k].grad = (sums[k] + noise.to(sums[k])) / (q * n)
        if opt is not None:
            opt.step()
    if opt is not None:
        for k in trainable:
            params[k].grad = None
    return {k: (params[k].detach() - start[k]) for k in trainable}


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
    optimizer: _OptimizerSpec = "sgd",
):
    """Client update: load the global LoRA state, run DP-SGD on B (FedSVD, FFA-LoRA) or on A and B
    (FedAvg-LoRA), and send the deltas of the trained tensors only.

    ``optimizer``: ``"sgd"`` (default), ``"adam"``, ``"adamw"`` or a factory
    ``params -> torch.optim.Optimizer``, built afresh in every round on the privatised gradient
    (see :func:`dp_sgd_local_train`)."""
    if mode not in ("fedsvd", "ffa", "fedavg"):
        raise ValueError(f"mode must be one of ['fedsvd', 'ffa', 'fedavg'], got {mode!r}")
    check_optimizer(optimizer)
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
            optimizer=optimizer,
        )
        return {param_to_state_key(k): v for k, v in deltas.items()}, int(data[0].shape[0]), {}

    return client_update
