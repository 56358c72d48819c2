"""Reproduction ``kernels.paretoq``: QAT vs round-to-nearest per bit width on a teacher–student task.

Teacher: a random MLP 32→256 (tanh)→8 (first-layer weights scaled by TS); x ~ N(0, I), 8192 train
and 2048 test points. Student: MLP 32→128→128→8 (GELU), trained in full precision (AdamW lr 3e-3,
cosine, 800 steps, batch 256). ParetoQ QAT starts from that checkpoint (every Linear quantized,
200 steps, lr 1e-3, cosine); PTQ is the same quantizer and α initialisation without training (the
round-to-nearest baseline). Metric: test MSE / Var(y) ("rel_mse"). Also the relative change of the
latent weights ‖W_qat − W_fp‖/‖W_fp‖ (the paper's "compensation" vs "reconstruction" regimes).
The budget split (FP then QAT at a fixed total) is information, not a claim: it did not reproduce
in the prototype.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from eff_kernels.paretoq import BITS, ParetoQConfig, QATLinear, quantize_
from eff_kernels.reproduce import not_reproduced
from eff_shared.errors import check_choice
from eff_shared.reproduce import Claim, Result

__all__ = ["ParetoQReproConfig", "budget_split", "make_task", "run", "sweep"]


@dataclass(frozen=True)
class ParetoQReproConfig:
    """Every knob of the teacher, the student and the two training phases."""

    in_dim: int = 32
    teacher_hidden: int = 256
    out_dim: int = 8
    teacher_scale: float = 1.5
    student_hidden: int = 128
    n_train: int = 8192
    n_test: int = 2048
    batch: int = 256
    fp_steps: int = 800
    fp_lr: float = 3e-3
    qat_steps: int = 200
    qat_lr: float = 1e-3


def make_task(cfg: ParetoQReproConfig, seed: int) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test) from a random teacher MLP."""
    g = torch.Generator().manual_seed(seed)
    w1 = (
        cfg.teacher_scale
        * torch.randn(cfg.teacher_hidden, cfg.in_dim, generator=g)
        / math.sqrt(cfg.in_dim)
    )
    b1 = 0.1 * torch.randn(cfg.teacher_hidden, generator=g)
    w2 = torch.randn(cfg.out_dim, cfg.teacher_hidden, generator=g) / math.sqrt(cfg.teacher_hidden)
    x = torch.randn(cfg.n_train + cfg.n_test, cfg.in_dim, generator=g)
    y = torch.tanh(x @ w1.T + b1) @ w2.T
    return x[: cfg.n_train], y[: cfg.n_train], x[cfg.n_train :], y[cfg.n_train :]


def _student(cfg: ParetoQReproConfig, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    h = cfg.student_hidden
    return nn.Sequential(
        nn.Linear(cfg.in_dim, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, cfg.out_dim)
    )


def _train(
    model: nn.Module, data: tuple[torch.Tensor, ...], steps: int, lr: float, seed: int
) -> None:
    if steps <= 0:
        return
    x, y = data[0], data[1]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / steps))
    )
    g = torch.Generator().manual_seed(seed)
    batch = min(256, x.shape[0])
    for _ in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), generator=g)
        loss = torch.mean((model(x[idx]) - y[idx]) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def _rel_mse(model: nn.Module, data: tuple[torch.Tensor, ...]) -> float:
    with torch.no_grad():
        return float(torch.mean((model(data[2]) - data[3]) ** 2) / data[3].var())


def _latent(model: nn.Module) -> torch.Tensor:
    return torch.cat(
        [m.weight.detach().flatten() for m in model.modules() if isinstance(m, nn.Linear)]
    )


def sweep(
    cfg: ParetoQReproConfig, seed: int, bits_list: tuple[float, ...] = BITS
) -> dict[str, Any]:
    """FP training, then PTQ and QAT at every bit width; returns rel_mse and weight changes."""
    data = make_task(cfg, seed)
    fp = _student(cfg, seed)
    _train(fp, data, cfg.fp_steps, cfg.fp_lr, seed)
    out: dict[str, Any] = {"fp_rel_mse": _rel_mse(fp, data), "bits": {}}
    w_fp = _latent(fp)
    for bits in bits_list:
        model = quantize_(copy.deepcopy(fp), ParetoQConfig(bits=bits))
        ptq = _rel_mse(model, data)
        _train(model, data, cfg.qat_steps, cfg.qat_lr, seed + 1)
        qat = _rel_mse(model, data)
        change = float((_latent(model) - w_fp).norm() / w_fp.norm())
        n_q = sum(isinstance(m, QATLinear) for m in model.modules())
        out["bits"][bits] = {
            "ptq_rel_mse": ptq,
            "qat_rel_mse": qat,
            "weight_change": change,
            "quantized_layers": n_q,
        }
    return out


def budget_split(
    cfg: ParetoQReproConfig,
    seed: int,
    bits: float,
    splits: tuple[float, ...] = (0.0, 0.5, 0.9),
    total: int | None = None,
) -> list[dict[str, Any]]:
    """A fixed budget of ``total`` steps: a fraction in FP training, the rest in QAT (information)."""
    total = total or cfg.fp_steps
    data = make_task(cfg, seed)
    rows = []
    for s in splits:
        model = _student(cfg, seed)
        n_fp = round(s * total)
        _train(model, data, n_fp, cfg.fp_lr, seed)
        quantize_(model, ParetoQConfig(bits=bits))
        _train(model, data, total - n_fp, cfg.qat_lr if n_fp else cfg.fp_lr, seed + 1)
        rows.append({"bits": bits, "fp_fraction": s, "rel_mse": _rel_mse(model, data)})
    return rows


def run(mode: str = "quick", seed: int = 0, cfg: ParetoQReproConfig | None = None) -> Result:
    """Quick: one seed; full: seeds seed..seed+2 (claims must hold at every seed) plus the budget split."""
    check_choice("mode", mode, ("quick", "full"))
    torch.set_num_threads(1)
    cfg = cfg or ParetoQReproConfig()
    seeds = [seed] if mode == "quick" else [seed, seed + 1, seed + 2]
    runs = {s: sweep(cfg, s) for s in seeds}
    claims: list[Claim] = []

    def worst(fn, kind: str) -> float:
        vals = [fn(runs[s]) for s in seeds]
        return max(vals) if kind == "max" else min(vals)

    for bits in (1, 1.58, 2, 3):
        limit = 0.5 if bits == 1 else 0.9
        claims.append(Claim(
            f"{bits}-bit: QAT rel_mse / PTQ (round-to-nearest) rel_mse (worst seed)",
            worst(lambda r, b=bits: r["bits"][b]["qat_rel_mse"] / r["bits"][b]["ptq_rel_mse"], "max"), limit, "<=", "x",
        ))  # fmt: skip
    order = (1, 1.58, 2, 3, 4)
    for lo, hi in itertools.pairwise(order):
        slack = 0.002 if hi == 4 else 0.0
        claims.append(Claim(
            f"after QAT, rel_mse({lo}-bit) − rel_mse({hi}-bit) (monotone in bits{', 0.002 slack' if slack else ''}; worst seed)",
            worst(lambda r, a=lo, b=hi: r["bits"][a]["qat_rel_mse"] - r["bits"][b]["qat_rel_mse"], "min"), -slack, ">=",
        ))  # fmt: skip
    claims.append(Claim(
        "4-bit QAT rel_mse / FP rel_mse (worst seed)",
        worst(lambda r: r["bits"][4]["qat_rel_mse"] / r["fp_rel_mse"], "max"), 1.05, "<=", "x",
    ))  # fmt: skip

    def regime(r: dict[str, Any]) -> float:
        low = sum(r["bits"][b]["weight_change"] for b in (1, 1.58, 2)) / 3
        high = sum(r["bits"][b]["weight_change"] for b in (3, 4)) / 2
        return low / high

    claims.append(Claim(
        "mean weight change of {1, 1.58, 2}-bit / {3, 4}-bit QAT (reconstruction vs compensation; worst seed)",
        worst(regime, "min"), 1.3, ">=", "x",
    ))  # fmt: skip
    table = []
    for bits in BITS:
        rows = [runs[s]["bits"][bits] for s in seeds]
        table.append({
            "bits": bits,
            **{k: sum(r[k] for r in rows) / len(rows) for k in ("ptq_rel_mse", "qat_rel_mse", "weight_change")},
        })  # fmt: skip
    metrics: dict[str, Any] = {
        "config": asdict(cfg),
        "seeds": seeds,
        "runs": {str(s): r for s, r in runs.items()},
    }
    notes = [
        f"FP rel_mse {sum(runs[s]['fp_rel_mse'] for s in seeds) / len(seeds):.4f} (mean over seeds {seeds})"
    ]
    if mode == "full":
        split = budget_split(cfg, seed, 1.58) + budget_split(cfg, seed, 2)
        metrics["budget_split"] = split
        notes.append(
            "budget split (information, the paper's 90/10 optimum is not a claim here): "
            + ", ".join(
                f"{r['bits']}-bit FP {r['fp_fraction']:.0%}: {r['rel_mse']:.4f}" for r in split
            )
        )
    notes += not_reproduced(claims)
    return Result(
        name="kernels.paretoq",
        mode=mode,
        seed=seed,
        claims=claims,
        metrics=metrics,
        table=table,
        notes=notes,
    )  # type: ignore[arg-type]
