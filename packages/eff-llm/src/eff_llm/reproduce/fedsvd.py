"""Reproduction ``llm.fedsvd``: FedSVD vs FFA-LoRA and FedAvg-LoRA under the same DP noise.

Task (spec): logits = H·relu((W0 + BA)x) with W0 ∈ R^{32×64} and H ∈ R^{10×32} frozen, labels from
W0 + ΔW* (rank 4); 4800 samples, 6 clients (Dirichlet 0.5), 3 per round, 40 rounds; 10 local DP-SGD
steps of expected batch 64, lr 0.5, C = 1; σ from Opacus RDP at (ε, δ = 1e-5) with sample rate
64/(mean client size) × 3/6 and 10·40 steps — the same σ for every method.

Checks (master seed): the spec's mechanics items (A Aᵀ = I, B'A' = BA, row space of A fixed,
economical = full SVD, Opacus cross-check, ε re-accounted, only B uploaded). Paper claims, judged
on the median over seeds (``claims.md``: 5 in full mode; quick mode runs one seed, the master,
and judges only the non-inferiority and the headline there): FedSVD ≥ FFA-LoRA − 0.01, FedSVD ≥
base + 0.03 (full mode only: one seed cannot resolve it, seed 0 is an unlucky task draw), and the
paper's headline FedSVD ≥ FedAvg-LoRA (xfail: the row space of A never leaves that of A_0). Full
mode also reports, without claims, the prototype's second setting (r = 16, ε = 1) and the master
seed without DP noise (σ = 0: how far a fixed row space of A gets on this task draw at all).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch
from scipy.linalg import subspace_angles

from eff_llm._lora import load_lora_state, lora_pairs, lora_state
from eff_llm._lowrank_task import (
    LowRankTask,
    accuracy,
    lora_model,
    make_lowrank_task,
    trainable_names,
)
from eff_llm.fedsvd import (
    DPConfig,
    FedAvgLoRAAggregator,
    FedSVDAggregator,
    FFALoRAAggregator,
    account_epsilon,
    calibrate_noise,
    check_optimizer,
    make_dp_lora_client,
    per_sample_clipped_grad_sum,
    svd_refactor,
)
from eff_shared.errors import check_positive, check_type
from eff_shared.federated import InProcessRunner, dirichlet_partition
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim

__all__ = [
    "METHODS",
    "FedSVDReproConfig",
    "FedSVDSetup",
    "FederationResult",
    "LowRankTask",
    "federate",
    "run",
    "setup",
]


@dataclass(frozen=True)
class FedSVDReproConfig:
    rank: int = 4
    epsilon: float = 6.0
    delta: float = 1e-5
    clients: int = 6
    clients_per_round: int = 3
    rounds: int = 40
    local_steps: int = 10
    batch_size: int = 64
    lr: float = 0.5
    max_grad_norm: float = 1.0
    dirichlet_alpha: float = 0.5
    n_train: int = 4800
    # Size of the rank-4 target shift relative to ||W0||; 3.0 puts the unadapted model's accuracy
    # (0.39) where the spec's prototype had it (0.388).
    shift: float = 3.0
    # The clients' optimizer on the privatised gradient: "sgd" (the official RoBERTa setting),
    # "adam", "adamw" (the official setting for the other models) or a params -> Optimizer factory.
    optimizer: Any = "sgd"

    def __post_init__(self) -> None:
        check_optimizer(self.optimizer)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "optimizer":
                check_positive(f.name, value, integer=isinstance(value, int))
        if self.clients_per_round > self.clients:
            raise ValueError(
                f"clients_per_round={self.clients_per_round} must be <= clients={self.clients}"
            )


FedSVDRunConfig = FedSVDReproConfig  # old name, kept for compatibility


@dataclass(frozen=True)
class FedSVDSetup:
    """The data side of one FedSVD experiment (:func:`setup`): the low-rank task (frozen W0 and
    head, the target shift, train/test data), the clients' ``(x, y)`` partitions, the DP
    accountant's sample rate and step count and the noise multiplier σ every method shares.
    Replace fields (``dataclasses.replace``) to federate other clients or another σ (0: no noise)."""

    task: LowRankTask
    client_data: list[tuple[torch.Tensor, torch.Tensor]]
    sample_rate: float
    steps: int
    sigma: float

    def __post_init__(self) -> None:
        check_type("task", self.task, LowRankTask)
        if not isinstance(self.client_data, Sequence) or not self.client_data:
            raise ValueError("client_data must be a non-empty list of (x, y) tensor pairs")
        for i, pair in enumerate(self.client_data):
            if (
                not isinstance(pair, tuple)
                or len(pair) != 2
                or not all(isinstance(t, torch.Tensor) for t in pair)
                or len(pair[0]) != len(pair[1])
            ):
                raise ValueError(f"client_data[{i}] must be an (x, y) pair of equal-length tensors")
        check_positive("sample_rate", self.sample_rate)
        check_positive("steps", self.steps, integer=True)
        check_positive("sigma", self.sigma, strict=False)


@dataclass(frozen=True)
class FederationResult:
    """Test accuracy per method (and of the unadapted base model) and the distinct upload sizes
    (bytes per client per round) of each method, after ``cfg.rounds`` rounds."""

    accuracy: dict[str, float]
    upload_bytes: dict[str, list[int]]


class _Recorder:
    """Wraps FedSVD's aggregator and measures the re-factorisation after every server step."""

    def __init__(self, inner: FedSVDAggregator, a0: dict[str, torch.Tensor]) -> None:
        self.inner, self.a0 = inner, a0
        self.orth_err = self.product_err = self.angle = 0.0

    def aggregate(self, global_state, replies, round_idx):
        before = FFALoRAAggregator().aggregate(global_state, replies, round_idx)  # B + ΔB, A kept
        new = self.inner.aggregate(global_state, replies, round_idx)
        for name, (a_key, b_key) in lora_pairs(new).items():
            a = new[a_key].double()
            self.orth_err = max(
                self.orth_err, float((a @ a.T - torch.eye(a.shape[0], dtype=a.dtype)).abs().max())
            )
            ba, ba_new = before[b_key].double() @ before[a_key].double(), new[b_key].double() @ a
            self.product_err = max(self.product_err, float((ba_new - ba).norm() / ba.norm()))
            self.angle = max(
                self.angle,
                float(subspace_angles(a.T.numpy(), self.a0[name].double().T.numpy()).max()),
            )
        return new


def _opacus_crosscheck(model, x, y, clip) -> float:
    """max |ours − Opacus GradSampleModule| over the clipped per-sample gradient sum of lora_B."""
    import copy

    from opacus import GradSampleModule

    names = trainable_names(model, "B")
    ours, _ = per_sample_clipped_grad_sum(model, names, x, y, clip)
    gsm = GradSampleModule(copy.deepcopy(model), loss_reduction="sum")  # hooks stay on the copy
    for n, p in gsm.named_parameters():
        p.requires_grad_(any(n.endswith(t) for t in names))
    with warnings.catch_warnings():
        # Opacus' full backward hooks fire although the input needs no gradient: expected here.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        torch.nn.functional.cross_entropy(gsm(x), y, reduction="sum").backward()
    err = 0.0
    for n, p in gsm.named_parameters():
        key = next((t for t in names if n.endswith(t)), None)
        if key is None:
            continue
        gs = p.grad_sample
        norms = gs.flatten(1).norm(dim=1)
        clipped = torch.einsum("i,i...->...", (clip / (norms + 1e-6)).clamp(max=1.0), gs)
        err = max(err, float((clipped - ours[key]).abs().max()))
    return err


_METHODS = (
    ("FedSVD", "fedsvd", FedSVDAggregator),
    ("FFA-LoRA", "ffa", FFALoRAAggregator),
    ("FedAvg-LoRA", "fedavg", FedAvgLoRAAggregator),
)
METHODS = tuple(label for label, _, _ in _METHODS)
_BASE = "base (no adaptation)"


def setup(cfg: FedSVDReproConfig, seed: int) -> FedSVDSetup:
    """The task draw, Dirichlet client partitions, the accountant's sample rate (expected batch /
    mean client size × the fraction of clients per round) and steps (local steps × rounds), and σ
    calibrated by Opacus RDP for (``cfg.epsilon``, ``cfg.delta``) — all from ``seed``."""
    check_type("cfg", cfg, FedSVDReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    task = make_lowrank_task(seed, n_train=cfg.n_train, shift=cfg.shift)
    parts = dirichlet_partition(
        task.y_train.numpy(), cfg.clients, cfg.dirichlet_alpha, seed, min_size=cfg.batch_size
    )
    client_data = [(task.x_train[p], task.y_train[p]) for p in parts]
    mean_size = float(np.mean([len(p) for p in parts]))
    sample_rate = cfg.batch_size / mean_size * cfg.clients_per_round / cfg.clients
    steps = cfg.local_steps * cfg.rounds
    sigma = calibrate_noise(DPConfig(cfg.epsilon, cfg.delta, cfg.max_grad_norm), sample_rate, steps)
    return FedSVDSetup(task, client_data, sample_rate, steps, sigma)


def federate(
    cfg: FedSVDReproConfig,
    seed: int,
    data: FedSVDSetup | None = None,
    *,
    methods: Sequence[str] = METHODS,
    wrap: Callable[[FedSVDAggregator, dict[str, torch.Tensor]], Any] | None = None,
) -> FederationResult:
    """Federate ``methods`` (of :data:`METHODS`) for ``cfg.rounds`` rounds on ``data`` (default
    :func:`setup` ``(cfg, seed)``) and test them, with the base model's accuracy.

    Every method starts from the same peft LoRA init, sees the same client sampling and the same
    per-(round, client) generators, and uses the same σ (``data.sigma``). ``wrap(aggregator,
    init_state)`` may wrap FedSVD's aggregator (the reproduction's mechanics recorder).
    """
    check_type("cfg", cfg, FedSVDReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    data = setup(cfg, seed) if data is None else data
    check_type("data", data, FedSVDSetup)
    if isinstance(methods, str) or not methods or any(m not in METHODS for m in methods):
        raise ValueError(f"methods must be a non-empty subset of {list(METHODS)}, got {methods!r}")
    if wrap is not None and not callable(wrap):
        raise TypeError(f"wrap must be callable or None, got {type(wrap).__name__}")
    task = data.task
    accs, uploads = {}, {}
    base_model = lora_model(task, cfg.rank, seed)
    accs[_BASE] = accuracy(base_model, task.x_test, task.y_test)
    init_state = lora_state(base_model)
    for label, mode_name, agg_cls in _METHODS:
        if label not in methods:
            continue
        model = lora_model(task, cfg.rank, seed)
        client = make_dp_lora_client(
            model,
            mode_name,  # type: ignore[arg-type]
            sigma=data.sigma,
            max_grad_norm=cfg.max_grad_norm,
            lr=cfg.lr,
            steps=cfg.local_steps,
            batch_size=cfg.batch_size,
            optimizer=cfg.optimizer,
        )
        agg = agg_cls()
        if mode_name == "fedsvd" and wrap is not None:
            agg = wrap(agg, init_state)
        res = InProcessRunner(cfg.rounds, cfg.clients_per_round, seed).run(
            dict(init_state), client, agg, data.client_data
        )
        load_lora_state(model, res.final_state)
        accs[label] = accuracy(model, task.x_test, task.y_test)
        uploads[label] = sorted({c.upload_bytes for c in res.comm})
    return FederationResult(accs, uploads)


def _fmt(accs: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in accs.items())


PAPER_TITLE = "FedSVD: Adaptive Orthogonalization for Private Federated Learning with LoRA"
PAPER_HEADLINE = (
    "FedSVD beats FedAvg-LoRA and FFA-LoRA in accuracy under DP-SGD and without DP "
    "(RoBERTa-large on GLUE: SST-2, QNLI, QQP, MNLI; 6 clients, ε = 6 and tighter)"
)
_PAPER = "FedSVD above FedAvg-LoRA / FFA-LoRA under DP-SGD, RoBERTa-large on GLUE (spec: numbers not verified)"


def _one_seed(cfg: FedSVDReproConfig, seed: int) -> tuple[dict[str, float], float]:
    """Test accuracy of base and the three methods at ``seed`` (task draw, partition, LoRA init,
    client sampling and DP noise all from it), and the σ they share."""
    data = setup(cfg, seed)
    return federate(cfg, seed, data).accuracy, data.sigma


def run(mode: Mode = "quick", seed: int = 0, cfg: FedSVDReproConfig | None = None) -> Result:
    cfg = cfg or FedSVDReproConfig()
    data = setup(cfg, seed)
    task, sample_rate, steps, sigma = data.task, data.sample_rate, data.steps, data.sigma
    eps_spent = account_epsilon(sigma, sample_rate, steps, cfg.delta)

    result = Result(
        name="llm.fedsvd",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    recorder = None

    def wrap(agg, init_state):
        nonlocal recorder
        a0 = {n: init_state[a] for n, (a, _) in lora_pairs(init_state).items()}
        recorder = _Recorder(agg, a0)
        return recorder

    fed = federate(cfg, seed, data, wrap=wrap)
    accs, uploads = fed.accuracy, fed.upload_bytes
    assert recorder is not None

    # Economical vs full SVD on a random (non-orthonormal) pair.
    g = torch.Generator().manual_seed(seed)
    a_r, b_r = (
        torch.randn(cfg.rank, 64, generator=g, dtype=torch.float64),
        torch.randn(32, cfg.rank, generator=g, dtype=torch.float64),
    )
    (ae, be), (af, bf) = svd_refactor(a_r, b_r), svd_refactor(a_r, b_r, economical=False)
    signs = torch.sign((ae * af).sum(1))
    econ_err = max(
        float((ae - signs[:, None] * af).abs().max()), float((be - bf * signs).abs().max())
    )
    torch.manual_seed(seed)
    xb, yb = task.x_train[:64], task.y_train[:64]
    opacus_err = _opacus_crosscheck(lora_model(task, cfg.rank, seed), xb, yb, cfg.max_grad_norm)

    # The learning comparisons over seeds (the master seed's run is reused).
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per_seed: dict[int, dict[str, float]] = {seed: accs}
    sigmas: dict[int, float] = {seed: sigma}
    for s in seeds:
        if s not in per_seed:
            per_seed[s], sigmas[s] = _one_seed(cfg, s)

    def diffs(a: str, b: str) -> list[float]:
        return [per_seed[s][a] - per_seed[s][b] for s in seeds]

    b_bytes = 32 * cfg.rank * 4
    result.table = [
        {
            "method": k,
            "test accuracy": v,
            "sigma": sigma if k != _BASE else 0.0,
            "upload bytes/client/round": (uploads.get(k) or [0])[0],
        }
        for k, v in accs.items()
    ]
    result.claims += [
        Claim("FedSVD: max |A Aᵀ - I_r| after every server step", recorder.orth_err, 1e-5, "<="),
        Claim(
            "FedSVD: max ||B'A' - BA|| / ||BA|| over server steps", recorder.product_err, 1e-5, "<="
        ),
        Claim(
            "FedSVD: largest principal angle between row space(A_t) and row space(A_0)",
            recorder.angle,
            1e-3,
            "<=",
            unit="rad",
        ),
        Claim(
            "economical re-factorisation equals the full SVD (max abs difference, sign-aligned)",
            econ_err,
            1e-5,
            "<=",
        ),
        Claim(
            "clipped per-sample gradient sum: ours vs Opacus GradSampleModule (max abs difference)",
            opacus_err,
            1e-6,
            "<=",
        ),
        Claim(
            "epsilon re-accounted by RDPAccountant, relative error vs the target",
            abs(eps_spent - cfg.epsilon) / cfg.epsilon,
            0.01,
            "<=",
        ),
        Claim(
            "FedSVD/FFA-LoRA clients upload only B: bytes per upload differ from d_out*r*4 (count)",
            sum(u != [b_bytes] for k, u in uploads.items() if k != "FedAvg-LoRA"),
            0,
            "<=",
        ),
        paper_claim(
            "accuracy FedSVD - FedAvg-LoRA under the same DP noise (r = 4, eps = 6)",
            diffs("FedSVD", "FedAvg-LoRA"),
            0.0,
            ">=",
            seeds=seeds,
            expected="xfail",
            reason=(
                "FedSVD - FedAvg-LoRA -0.20 ... -0.41 over seeds 0-4 (median -0.32): B A_old keeps "
                "A in A_0's row space, so FedSVD cannot learn new input directions"
            ),
            paper=_PAPER,
            headline=True,
        ),
        paper_claim(
            "accuracy FedSVD - FFA-LoRA under the same DP noise (non-inferiority)",
            diffs("FedSVD", "FFA-LoRA"),
            -0.01,
            ">=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            "accuracy FedSVD - base (no adaptation)",
            diffs("FedSVD", _BASE),
            0.03,
            ">=",
            seeds=seeds,
            paper=_PAPER,
            modes=("full",),
        ),
    ]
    result.metrics.update(
        {
            "sigma": sigma,
            "epsilon_spent": eps_spent,
            "sample_rate": sample_rate,
            "steps": steps,
            **{f"accuracy[{k}]": v for k, v in accs.items()},
            "per_seed": {
                s: {"sigma": sigmas[s], **{f"accuracy[{k}]": v for k, v in per_seed[s].items()}}
                for s in seeds
            },
        }
    )
    for s in seeds:
        a_s = per_seed[s]
        result.notes.append(
            f"seed {s} (sigma {sigmas[s]:.4f}): {_fmt(a_s)}; FedSVD - base "
            f"{a_s['FedSVD'] - a_s[_BASE]:+.3f}, FedSVD - FFA-LoRA "
            f"{a_s['FedSVD'] - a_s['FFA-LoRA']:+.3f}, FedSVD - FedAvg-LoRA "
            f"{a_s['FedSVD'] - a_s['FedAvg-LoRA']:+.3f}"
        )
    result.notes.append(
        "The row space of A never leaves that of A_0 (measured angle above), so FedSVD can only match "
        "FFA-LoRA when the target's input directions lie outside it; the spec's prototype saw the same."
    )
    if mode == "full":  # diagnostics, reported (no claims)
        # The spec prototype's second setting.
        alt = run("quick", seed, FedSVDReproConfig(rank=16, epsilon=1.0))
        result.metrics["r16_eps1"] = {
            k: v for k, v in alt.metrics.items() if k.startswith(("accuracy", "sigma"))
        }
        result.notes.append(
            "r = 16, epsilon = 1: "
            + ", ".join(f"{r['method']} {r['test accuracy']:.3f}" for r in alt.table)
        )
        # Same seed without noise (clipped SGD, sigma = 0): how far a fixed row space of A can go
        # on this task draw at all, whatever the privacy noise.
        no_dp = federate(cfg, seed, replace(data, sigma=0.0)).accuracy
        result.metrics["no_dp"] = {f"accuracy[{k}]": v for k, v in no_dp.items()}
        result.notes.append(f"same seed, sigma = 0 (no DP noise): {_fmt(no_dp)}")
    result.notes.append(
        f"rank {cfg.rank}, epsilon {cfg.epsilon}, delta {cfg.delta}, sigma {sigma:.4f}, "
        f"{cfg.rounds} rounds x {cfg.clients_per_round}/{cfg.clients} clients, {cfg.local_steps} local steps"
    )
    return result
