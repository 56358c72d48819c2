"""Reproduction ``llm.yoco``: one-shot YOCO vs one-shot FedAvg-LoRA on the same clients and seed.

Task (spec): frozen "pretrained" W0 ∈ R^{32×64} (decaying spectrum), frozen ReLU and 10-class head,
labels from W0 + ΔW* (rank 4); LoRA r = 8; 10 clients, Dirichlet α = 0.5 over labels, 10 local
epochs, AdamW 5e-3, batch 32; one-shot sample-weighted mean of A and of B ("factor-avg"); the mean
of the products B_k A_k ("product-avg") and the mean local accuracy are reported.

Claims: the spec's mechanics are checks (master seed). Paper claims over seeds (median; quick mode
seeds 0–1, full mode 0–4; YOCO and FedAvg-LoRA on the same task draw, partition and init at each
seed): the spec's non-inferiority YOCO factor-avg ≥ FedAvg-LoRA factor-avg − 0.02, and the paper's
headline that YOCO beats the one-shot competitors (YOCO − FedAvg-LoRA ≥ 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from eff_llm._lora import load_lora_state, lora_pairs, lora_state
from eff_llm._lowrank_task import LowRankTask, accuracy, lora_model, make_lowrank_task
from eff_llm.yoco import (
    YOCOAggregator,
    YOCOConfig,
    alpha_schedule,
    lambda_schedule,
    make_yoco_client,
    yoco_init_lora,
)
from eff_shared.errors import check_choice, check_positive, check_type
from eff_shared.federated import InProcessRunner, RunResult, dirichlet_partition
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim

__all__ = ["OneShotResult", "YOCOReproConfig", "YOCOSetup", "one_shot", "run", "setup"]


@dataclass(frozen=True)
class YOCOReproConfig:
    rank: int = 8
    clients: int = 10
    dirichlet_alpha: float = 0.5
    epochs: int = 10
    lr: float = 5e-3
    batch_size: int = 32
    n_train: int = 3000
    shift: float = 1.0
    a_reg: str = "l1"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "a_reg":
                check_choice("a_reg", value, ["l1", "orth_rr", "orth_code"])
            else:
                check_positive(f.name, value, integer=isinstance(value, int))


YOCORunConfig = YOCOReproConfig  # old name, kept for compatibility


@dataclass(frozen=True)
class YOCOSetup:
    """The data of one YOCO experiment (:func:`setup`): the low-rank task and the clients'
    ``(x, y)`` partitions (replace ``client_data`` to run other clients)."""

    task: LowRankTask
    client_data: list[tuple[torch.Tensor, torch.Tensor]]

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


@dataclass
class OneShotResult:
    """One one-shot round (:func:`one_shot`): test accuracy of the sample-weighted factor mean
    (``factor_accuracy``), of the mean product Σ_k w_k B_k A_k (``product_accuracy``) and the mean
    of the clients' local adapters (``local_accuracy``); the runner's result (final state,
    communication log), the model holding the aggregated adapter, YOCO's sign targets S_B (None
    for FedAvg-LoRA), the aggregator, the client function and the initial LoRA state."""

    factor_accuracy: float
    product_accuracy: float
    local_accuracy: float
    run: RunResult
    model: nn.Module
    targets: dict[str, torch.Tensor] | None
    aggregator: YOCOAggregator
    client: Callable[..., Any]
    init_state: dict[str, torch.Tensor]


def _product_accuracy(model, task, agg: YOCOAggregator) -> float:
    """Accuracy with the dense mean product Σ_k w_k B_k A_k merged into the frozen weight."""
    import copy

    m = (
        copy.deepcopy(model).merge_and_unload()
        if hasattr(model, "merge_and_unload")
        else copy.deepcopy(model)
    )
    with torch.no_grad():
        (prod,) = agg.mean_product().values()
        m.proj.weight.copy_(task.w0 + prod)
    return accuracy(m, task.x_test, task.y_test)


def _refuses_second_round(agg: YOCOAggregator) -> int:
    try:
        agg.aggregate({}, agg.replies, 1)
    except RuntimeError:
        return 1
    return 0


def one_shot(
    cfg: YOCOReproConfig, seed: int, data: YOCOSetup | None = None, *, yoco: bool = True
) -> OneShotResult:
    """One-shot federated LoRA on ``data`` (default :func:`setup` ``(cfg, seed)``): YOCO
    (``yoco=True``: SVD-initialised B, sign-regularised B and A) or one-shot FedAvg-LoRA (peft's
    init, no regulariser), each client training ``cfg.epochs`` epochs once, then the
    sample-weighted factor mean."""
    check_type("cfg", cfg, YOCOReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    check_type("yoco", yoco, bool)
    data = setup(cfg, seed) if data is None else data
    check_type("data", data, YOCOSetup)
    task = data.task
    ycfg = YOCOConfig(rank=cfg.rank, a_reg=cfg.a_reg)  # type: ignore[arg-type]
    model = lora_model(task, cfg.rank, seed)
    targets = yoco_init_lora(model, ycfg) if yoco else None
    init = lora_state(model)
    client = make_yoco_client(
        model, targets, ycfg, epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size
    )
    agg = YOCOAggregator("weighted")
    res = InProcessRunner(1, None, seed).run(dict(init), client, agg, data.client_data)
    local = []
    for state, _ in agg.replies:
        load_lora_state(model, state)
        local.append(accuracy(model, task.x_test, task.y_test))
    load_lora_state(model, res.final_state)
    return OneShotResult(
        factor_accuracy=accuracy(model, task.x_test, task.y_test),
        product_accuracy=_product_accuracy(model, task, agg),
        local_accuracy=float(np.mean(local)),
        run=res,
        model=model,
        targets=targets,
        aggregator=agg,
        client=client,
        init_state=init,
    )


PAPER_TITLE = "You Only Communicate Once: One-shot Federated Low-Rank Adaptation of MLLM"
PAPER_HEADLINE = (
    "YOCO achieves true one-shot federated LoRA for MLLMs: ~0.03 % of multi-round FL's "
    "communication while surpassing multi-round methods in several multimodal scenarios and "
    "consistently outperforming every one-shot competitor"
)
_PAPER = (
    "consistently above every one-shot competitor (multimodal FL benchmarks, e.g. Hateful Memes)"
)


def setup(cfg: YOCOReproConfig, seed: int) -> YOCOSetup:
    """The task draw (``cfg.n_train`` training, 2000 test samples, shift ``cfg.shift``) and the
    Dirichlet(``cfg.dirichlet_alpha``) label partition over ``cfg.clients`` clients, from ``seed``."""
    check_type("cfg", cfg, YOCOReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    task = make_lowrank_task(seed, n_train=cfg.n_train, n_test=2000, shift=cfg.shift)
    parts = dirichlet_partition(
        task.y_train.numpy(), cfg.clients, cfg.dirichlet_alpha, seed, min_size=cfg.batch_size
    )
    return YOCOSetup(task, [(task.x_train[p], task.y_train[p]) for p in parts])


def _accuracies(r: OneShotResult) -> dict[str, float]:
    return {"factor": r.factor_accuracy, "product": r.product_accuracy, "local": r.local_accuracy}


def _one_seed(cfg, seed: int) -> dict[str, float]:
    """Factor-avg test accuracy of base, YOCO and one-shot FedAvg-LoRA at ``seed``."""
    data = setup(cfg, seed)
    base = accuracy(lora_model(data.task, cfg.rank, seed), data.task.x_test, data.task.y_test)
    yoco = one_shot(cfg, seed, data, yoco=True)
    fedavg = one_shot(cfg, seed, data, yoco=False)
    return {"base": base, "yoco": yoco.factor_accuracy, "fedavg": fedavg.factor_accuracy}


def run(mode: Mode = "quick", seed: int = 0, cfg: YOCOReproConfig | None = None) -> Result:
    cfg = cfg or YOCOReproConfig()
    prepared = setup(cfg, seed)
    task, data = prepared.task, prepared.client_data
    base = accuracy(lora_model(task, cfg.rank, seed), task.x_test, task.y_test)
    yoco = one_shot(cfg, seed, prepared, yoco=True)
    fedavg = one_shot(cfg, seed, prepared, yoco=False)

    # Mechanics.
    ycfg = YOCOConfig(rank=cfg.rank)
    u, s, _ = torch.linalg.svd(task.w0.double(), full_matrices=False)
    b0_expected = (u[:, : cfg.rank] * s[: cfg.rank].sqrt()).float()
    ((_, b_key),) = lora_pairs(yoco.init_state).values()
    b0_err = float((yoco.init_state[b_key] - b0_expected).abs().max())
    sched_err = max(
        abs(alpha_schedule(0, 100, ycfg) - 1.0),
        abs(alpha_schedule(100, 100, ycfg) - 200.0),
        abs(lambda_schedule(0, 100, ycfg) - 0.1),
        abs(lambda_schedule(100, 100, ycfg) - 0.01),
    )
    res = yoco.run
    pairs = lora_pairs(yoco.init_state)
    expected_bytes = sum(
        yoco.init_state[a].numel() * 4 + yoco.init_state[b].numel() * 4 for a, b in pairs.values()
    )
    uploads_per_client = {
        c: sum(1 for r in res.comm if r.client == c and r.upload_bytes) for c in range(cfg.clients)
    }
    upload_bad = sum(n != 1 for n in uploads_per_client.values()) + sum(
        r.upload_bytes != expected_bytes for r in res.comm
    )
    (target,) = yoco.targets.values()
    sign_agree = float((torch.sign(res.final_state[b_key]) == target).float().mean())
    again = [
        yoco.client(dict(yoco.init_state), data[0], None, np.random.default_rng(7))[0]
        for _ in range(2)
    ]
    determinism_diff = max(float((again[0][k] - again[1][k]).abs().max()) for k in again[0])

    seeds = claim_seeds(mode, seed, quick=2, full=5)
    per_seed = {
        seed: {"base": base, "yoco": yoco.factor_accuracy, "fedavg": fedavg.factor_accuracy}
    }
    for s in seeds:
        if s not in per_seed:
            per_seed[s] = _one_seed(cfg, s)
    gaps = [per_seed[s]["yoco"] - per_seed[s]["fedavg"] for s in seeds]

    result = Result(
        name="llm.yoco",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    result.table = [
        {
            "method": "base (no adaptation)",
            "factor-avg": base,
            "product-avg": base,
            "mean local": base,
            "bytes uploaded": 0,
        },
        *(
            {
                "method": name,
                "factor-avg": r.factor_accuracy,
                "product-avg": r.product_accuracy,
                "mean local": r.local_accuracy,
                "bytes uploaded": r.run.total_upload_bytes,
            }
            for name, r in (("YOCO", yoco), ("one-shot FedAvg-LoRA", fedavg))
        ),
    ]
    result.claims += [
        Claim("B0 = U_r sqrt(S_r) of the frozen weight (max abs difference)", b0_err, 1e-6, "<="),
        Claim(
            "schedules: |alpha_0 - 1|, |alpha_T - 200|, |lambda_0 - 0.1|, |lambda_T - 0.01| (max)",
            sched_err,
            1e-9,
            "<=",
        ),
        Claim(
            "exactly one upload per client of sum_k(|A|+|B|) bytes (violations)",
            upload_bad,
            0,
            "<=",
        ),
        Claim("sign agreement of the aggregated B with S_B", sign_agree, 0.9, ">="),
        Claim(
            "seeded determinism: same client, same seed, max abs difference of the uploads",
            determinism_diff,
            0.0,
            "<=",
        ),
        Claim(
            "a second aggregation round is refused with RuntimeError (1 = refused)",
            _refuses_second_round(yoco.aggregator),
            1,
            ">=",
        ),
        paper_claim(
            "YOCO factor-avg accuracy - one-shot FedAvg-LoRA factor-avg accuracy (non-inferiority)",
            gaps,
            -0.02,
            ">=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            "YOCO factor-avg accuracy - one-shot FedAvg-LoRA factor-avg accuracy (gain)",
            gaps,
            0.0,
            ">=",
            seeds=seeds,
            expected="xfail",
            reason=(
                "YOCO - FedAvg-LoRA -0.024 ... +0.008 over seeds 0-4 (median -0.016): "
                "non-inferior, no gain on this linear toy"
            ),
            paper=_PAPER,
            headline=True,
        ),
    ]
    result.metrics.update(
        {
            "base_accuracy": base,
            "yoco": _accuracies(yoco),
            "fedavg_lora": _accuracies(fedavg),
            "upload_bytes_per_client": expected_bytes,
        }
    )
    result.notes.append(
        f"{cfg.clients} clients, Dirichlet {cfg.dirichlet_alpha}, {cfg.epochs} local epochs, AdamW {cfg.lr}, "
        f"batch {cfg.batch_size}, r = {cfg.rank}, A regulariser {cfg.a_reg!r}; one shot, sample-weighted factor mean"
    )
    result.metrics["per_seed"] = per_seed
    for s in seeds:
        a = per_seed[s]
        result.notes.append(
            f"seed {s}: base {a['base']:.3f}, FedAvg-LoRA {a['fedavg']:.3f}, YOCO {a['yoco']:.3f} "
            f"(YOCO - FedAvg-LoRA {a['yoco'] - a['fedavg']:+.3f})"
        )
    return result
