"""Reproduction ``kernels.paretoq``: QAT vs round-to-nearest per bit width on a teacher–student task.

Teacher: a random MLP 32→256 (tanh)→8 (first-layer weights scaled by TS); x ~ N(0, I), 8192 train
and 2048 test points. Student: MLP 32→128→128→8 (GELU), trained in full precision (AdamW lr 3e-3,
cosine, 800 steps, batch 256). ParetoQ QAT starts from that checkpoint (every Linear quantized,
200 steps, lr 1e-3, cosine); PTQ is the same quantizer and α initialisation without training (the
round-to-nearest baseline). Metric: test MSE / Var(y) ("rel_mse"). Also the relative change of the
latent weights ‖W_qat − W_fp‖/‖W_fp‖ (the paper's "compensation" vs "reconstruction" regimes).

Check: every Linear becomes a QATLinear at every bit width. Paper claims (median over seeds; quick
1 seed, full 5): QAT beats round-to-nearest at ≤ 3 bits, quality monotone in bits, 4-bit QAT ≈ FP,
and the 2-vs-3-bit transition (headline: low-bit QAT moves the weights more). The paper's budget
split (~90 % FP training, ~10 % QAT at a fixed total) is a full-mode paper claim (it did not
reproduce in the prototype).
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
from eff_shared.errors import check_choice
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import threads

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


PAPER_TITLE = "ParetoQ: Scaling Laws in Extremely Low-bit LLM Quantization"
HEADLINE = (
    "A learning transition between 2 and 3 bits (at >= 3 bits QAT compensates, weights stay close "
    "to the pre-trained ones; at <= 2 bits it reconstructs them); ternary, 2- and 3-bit QAT are on "
    "the size-accuracy Pareto frontier (MobileLLM-ParetoQ-1B avg 53.8 / 58.5 / 61.0 / 61.3 / 62.5 "
    "at 1 / 1.58 / 2 / 3 / 4 bits vs BF16 62.1; ternary 600M 55.5 vs 1-bit-era 3B 54.5)"
)
_PAPER_BITS = "MobileLLM-ParetoQ-1B, 8 zero-shot tasks avg: 53.8 / 58.5 / 61.0 / 61.3 / 62.5 at 1 / 1.58 / 2 / 3 / 4 bits (BF16 62.1)"
_SPLIT_BITS = (1.58, 2)
_SPLIT_XFAIL = {  # the first full run, seeds 0-4
    1.58: "on the teacher-student toy the 90/10 split is worse than QAT from scratch at a fixed 800 "
    "steps: +0.0124 rel_mse median [0.0099, 0.0129], 0/5 seeds",
    2: "on the teacher-student toy the 90/10 split is worse than QAT from scratch at a fixed 800 "
    "steps: +0.0061 rel_mse median [0.0056, 0.0065], 0/5 seeds",
}


def _one_seed(cfg: ParetoQReproConfig, seed: int) -> dict[str, Any]:
    """The sweep of one seed (FP, then PTQ and QAT at every bit width)."""
    return sweep(cfg, seed)


def _regime(r: dict[str, Any]) -> float:
    low = sum(r["bits"][b]["weight_change"] for b in (1, 1.58, 2)) / 3
    high = sum(r["bits"][b]["weight_change"] for b in (3, 4)) / 2
    return low / high


def _split_gain(rows: list[dict[str, Any]], bits: float) -> float:
    """rel_mse of the 90/10 split minus the best of QAT from scratch (0/100) and 50/50."""
    by = {r["fp_fraction"]: r["rel_mse"] for r in rows if r["bits"] == bits}
    return by[0.9] - min(by[0.0], by[0.5])


def run(mode: Mode = "quick", seed: int = 0, cfg: ParetoQReproConfig | None = None) -> Result:
    """Quick: one seed (~9 s); full: seeds seed..seed+4 and the budget split at each of them."""
    with threads(1):  # one torch thread: faster here, and the numbers do not depend on the machine
        return _run(mode, seed, cfg)


def _run(mode: Mode, seed: int, cfg: ParetoQReproConfig | None) -> Result:
    check_choice("mode", mode, ("quick", "full"))
    cfg = cfg or ParetoQReproConfig()
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    runs = {s: _one_seed(cfg, s) for s in seeds}
    claims: list[Claim] = []
    kw: dict[str, Any] = {"seeds": seeds}

    def vals(fn) -> list[float]:
        return [fn(runs[s]) for s in seeds]

    n_layers = 3  # the student's Linear layers
    claims.append(
        Claim(
            f"every Linear quantized: QATLinear layers at each bit width = {n_layers}",
            min(r["bits"][b]["quantized_layers"] for r in runs.values() for b in BITS),
            n_layers,
            ">=",
        )
    )
    for bits in (1, 1.58, 2, 3):
        limit = 0.5 if bits == 1 else 0.9
        claims.append(paper_claim(
            f"{bits}-bit: QAT rel_mse / PTQ (round-to-nearest) rel_mse",
            vals(lambda r, b=bits: r["bits"][b]["qat_rel_mse"] / r["bits"][b]["ptq_rel_mse"]), limit, "<=",
            unit="x", paper="ternary 600M: ParetoQ 55.5 avg / 11.4 Wiki ppl vs RTN 37.6 / 6.6e5", **kw,
        ))  # fmt: skip
    order = (1, 1.58, 2, 3, 4)
    for lo, hi in itertools.pairwise(order):
        slack = 0.002 if hi == 4 else 0.0
        claims.append(paper_claim(
            f"after QAT, rel_mse({lo}-bit) − rel_mse({hi}-bit) (monotone in bits{', 0.002 slack' if slack else ''})",
            vals(lambda r, a=lo, b=hi: r["bits"][a]["qat_rel_mse"] - r["bits"][b]["qat_rel_mse"]), -slack, ">=",
            paper=_PAPER_BITS, **kw,
        ))  # fmt: skip
    claims.append(paper_claim(
        "4-bit QAT rel_mse / FP rel_mse",
        vals(lambda r: r["bits"][4]["qat_rel_mse"] / r["fp_rel_mse"]), 1.05, "<=",
        unit="x", paper="4-bit 62.5 vs BF16 62.1 (MobileLLM-ParetoQ-1B, 8 zero-shot tasks avg)", **kw,
    ))  # fmt: skip
    claims.append(paper_claim(
        "mean weight change of {1, 1.58, 2}-bit / {3, 4}-bit QAT (reconstruction vs compensation)",
        vals(_regime), 1.3, ">=", unit="x", headline=True,
        paper="transition between 2 and 3 bits: weights change ~40 % at <= 2 bits vs ~10-20 % at >= 3 "
        "bits (third-party summary, not re-verified)", **kw,
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
        splits = {s: [row for b in _SPLIT_BITS for row in budget_split(cfg, s, b)] for s in seeds}
        metrics["budget_split"] = {str(s): rows for s, rows in splits.items()}
        for bits in _SPLIT_BITS:
            claims.append(paper_claim(
                f"{bits}-bit, fixed budget of {cfg.fp_steps} steps: rel_mse(90 % FP then 10 % QAT) "
                "− best of (QAT from scratch, 50/50)",
                [_split_gain(splits[s], bits) for s in seeds], 0.0, "<=", modes=("full",),
                expected="xfail", reason=_SPLIT_XFAIL[bits],
                paper="best budget split ~90 % of tokens in FP pre-training, ~10 % in QAT (MobileLLM)", **kw,
            ))  # fmt: skip
        notes.append(
            f"budget split at seed {seed}: "
            + ", ".join(
                f"{r['bits']}-bit FP {r['fp_fraction']:.0%}: {r['rel_mse']:.4f}"
                for r in splits[seed]
            )
        )
    return Result(
        name="kernels.paretoq",
        mode=mode,
        seed=seed,
        claims=claims,
        metrics=metrics,
        table=table,
        notes=notes,
        paper_title=PAPER_TITLE,
        headline=HEADLINE,
    )
