"""Reproduction ``llm.smore``: S'MoRE vs LoRA and MoLoRA on a clustered regression toy.

Teacher (spec): D = 32, x = c_g + c_j + noise·ε with g, j ∈ {0..3}, y = (W0 + ΔW_g + ΔW_j + ΔW_gj) x
(rank-2 group and sub-group deltas, rank-1 pair deltas). Every student wraps the frozen
``Linear(W0)``; Adam 3e-3, batch 256, 800 steps; rel-MSE = test MSE / MSE of W0 alone.

Claims (the spec's thresholds, seed 0): S'MoRE (L = 2, s = f = r = (4, 4) / (2, 2) / (2, 2), tanh,
switch gate, ``w_final_zero``) rel-MSE ≤ 0.06; LoRA at any rank ≤ D ≥ 0.25 (its update cannot depend on
the input; measured as the smaller of the trained LoRA and the least-squares optimum of any linear
update); S'MoRE ≤ 0.25 × LoRA; non-inferiority S'MoRE ≤ 2.5 × MoLoRA (E = 8, r = 6, top-2) at equal
trainable parameters (±5 %); and the exactness items (``w_final_zero`` output = base, ``eq_1_layer``
2-layer = 1-layer mixture with the same selections, trainable count = budget formula).
Checks (master seed): the budget match and the exactness items. Paper claims, the median over
seeds (quick mode seed 0 only, the budget; full mode seeds 0–4): the rel-MSE thresholds above and the
paper's headline "S'MoRE beats mixture-of-LoRA at equal budget" (S'MoRE / MoLoRA ≤ 1), an xfail as
in the spec's prototype.

Router widths: down-projection 32 (the spec's and the official default) and d_g = 8, the gate width
that brings S'MoRE's count closest to MoLoRA's (3360 vs 3328; the gate is the official one:
D = Linear(d_in, 32) with bias, per layer Linear(din_l, d_g) → ReLU → Linear(d_g, d_g), both with
bias, keys s_l × d_g, din_l = 32 + Σ_{k>l} d_g). The spec's prototype counts 3344, 16 fewer, which is
consistent with the same widths minus one of the two gate-MLP biases per layer (1840 = 1856 − 2·8);
we keep the official layout.

Teacher scales (:data:`CALIBRATION`): the spec fixes neither the centre scale, the delta
normalisation, nor the train/test sizes or how batches are drawn. They were chosen on the **baselines
only**, before S'MoRE was run on any candidate: the recipe whose LoRA r = 26 and MoLoRA E = 8 r = 6
rel-MSE at 800 steps are closest to the prototype's (0.330, 0.0153) in Σ|log(ours / prototype)|, the
top three then ranked by adding the same distance for LoRA r = 8 / MoLoRA r = 2 at 1500 steps
(prototype 0.331, 0.0294).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn

from eff_llm._data import HierarchicalRegression, hierarchical_regression
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import threads

__all__ = [
    "CALIBRATION",
    "SMoREReproConfig",
    "eq_1_layer_gap",
    "experiment",
    "resolve_task",
    "run",
]

#: Baseline-only calibration of the teacher (seed 0; measured with this module's students and
#: training loop). Keys: centre scale, delta normalisation, delta scale, training pool (None = fresh
#: batches) -> (LoRA r=26, MoLoRA E=8 r=6) rel-MSE at 800 steps. Prototype: (0.330, 0.0153). The
#: least-squares floor of any linear update is 0.489 / 0.454 / 0.446 / 0.408 / 0.437 / 0.399 /
#: 0.434 / 0.395 for centre scale 1 / 1 / 2 / 2 / 3 / 3 / 4 / 4 (frobenius / per_direction): with
#: x = c_g + c_j no centre scale brings LoRA to the prototype's 0.33 (0.34 even without pair deltas).
CALIBRATION: dict[tuple[float, str, float, int | None], tuple[float, float]] = {
    (1.0, "frobenius", 1.0, None): (0.4892, 0.0648),  # the previous recipe
    (1.0, "frobenius", 0.5, None): (0.4901, 0.0545),
    (1.0, "per_direction", 1.0, None): (0.4570, 0.0416),
    (1.0, "per_direction", 0.5, None): (0.4582, 0.0389),
    (2.0, "frobenius", 1.0, None): (0.4474, 0.0244),
    (2.0, "frobenius", 0.5, None): (0.4481, 0.0219),
    (2.0, "per_direction", 1.0, None): (0.4118, 0.0170),
    (2.0, "per_direction", 0.5, None): (0.4124, 0.0142),
    (3.0, "frobenius", 1.0, None): (0.4381, 0.0136),
    (3.0, "frobenius", 0.5, None): (0.4391, 0.0118),
    (3.0, "per_direction", 1.0, None): (0.4023, 0.0111),
    (3.0, "per_direction", 0.5, None): (0.4031, 0.0091),
    (4.0, "frobenius", 1.0, None): (0.4345, 0.0081),
    (4.0, "frobenius", 0.5, None): (0.4357, 0.0075),
    (4.0, "per_direction", 1.0, None): (0.3987, 0.0072),
    (4.0, "per_direction", 0.5, None): (0.3996, 0.0065),
    (2.0, "per_direction", 0.5, 4096): (0.4115, 0.0176),
    (2.0, "per_direction", 0.5, 16_384): (0.4112, 0.0150),  # chosen
}
#: The top three of :data:`CALIBRATION` at 1500 steps: (LoRA r=8, MoLoRA E=8 r=2); prototype
#: (0.331, 0.0294). Total distance (800 + 1500 steps): 0.60 (pool 16384, chosen), 0.65 (fresh,
#: delta scale 0.5), 0.73 (fresh, delta scale 1); the previous recipe scored 1.84 at 800 steps alone.
CALIBRATION_1500: dict[tuple[float, str, float, int | None], tuple[float, float]] = {
    (2.0, "per_direction", 0.5, 16_384): (0.4112, 0.0254),
    (2.0, "per_direction", 0.5, None): (0.4089, 0.0255),
    (2.0, "per_direction", 1.0, None): (0.4090, 0.0244),
}


@dataclass(frozen=True)
class SMoREReproConfig:
    dim: int = 32
    groups: int = 4
    noise: float = 0.5
    # Teacher scales and data stream: not fixed by the spec, calibrated on the baselines only
    # (CALIBRATION below); the previous recipe was centre_scale 1, "frobenius", delta_scale 1, fresh.
    centre_scale: float = 2.0
    delta_norm: str = "per_direction"
    delta_scale: float = 0.5
    # a fixed training pool, batches drawn from it with replacement; None = fresh batches
    train_size: int | None = 16_384
    steps: int = 800
    batch_size: int = 256
    lr: float = 3e-3
    test_size: int = 4096
    num_experts: tuple[int, ...] = (4, 4)
    num_active: tuple[int, ...] = (2, 2)
    expert_ranks: tuple[int, ...] = (2, 2)
    # down_proj_dim: the spec's / official default 32; gate_dims: the d_g that brings the S'MoRE count
    # closest to MoLoRA's at that width (3360 vs 3328 params, +1.0 %; d_g = 7 gives 3239, -2.7 %).
    gate_dims: int = 8
    down_proj_dim: int = 32
    molora_experts: int = 8
    molora_rank: int = 6
    molora_active: int = 2
    lora_rank: int = 26  # ≈ half the budget: LoRA cannot use more than rank D anyway


class _Host(nn.Module):
    """The frozen base layer the students wrap (target module ``proj``)."""

    def __init__(self, w0: torch.Tensor) -> None:
        super().__init__()
        self.proj = nn.Linear(w0.shape[1], w0.shape[0], bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(w0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _smore_config(cfg: SMoREReproConfig, **over: Any):
    from eff_llm.smore import SMoREConfig

    kw = dict(
        num_experts=list(cfg.num_experts),
        num_active=list(cfg.num_active),
        expert_ranks=list(cfg.expert_ranks),
        target_modules=["proj"],
        gate_dims=[cfg.gate_dims],
        down_proj_dim=cfg.down_proj_dim,
    )
    kw.update(over)
    return SMoREConfig(**kw)


def _train_pool(
    task: HierarchicalRegression, cfg: SMoREReproConfig, seed: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The fixed training set (the same for every student) or ``None`` for fresh batches."""
    if cfg.train_size is None:
        return None
    return task.sample(cfg.train_size, torch.Generator().manual_seed(seed + 30_000))


def _make_task(cfg: SMoREReproConfig, seed: int) -> HierarchicalRegression:
    return hierarchical_regression(
        levels=2,
        groups=cfg.groups,
        dim=cfg.dim,
        noise=cfg.noise,
        delta_scale=cfg.delta_scale,
        seed=seed,
        centre_scale=cfg.centre_scale,
        delta_norm=cfg.delta_norm,  # type: ignore[arg-type]
    )


#: A task for :func:`experiment`: a :class:`~eff_llm.smore.HierarchicalRegression` (or any object
#: with a (dim, dim) ``w0`` and ``sample(n, generator) -> (x, y)``), or a builder ``seed -> task``.
_TaskSpec = HierarchicalRegression | Callable[[int], Any]


def resolve_task(task: Any, cfg: SMoREReproConfig, seed: int) -> Any:
    """The teacher of one run: ``cfg``'s two-level task when ``task`` is None, ``task(seed)`` when
    it is callable (a builder), else ``task`` itself. Raises ``TypeError`` when the result has no
    ``w0`` tensor or no ``sample`` method and ``ValueError`` when ``w0`` is not (cfg.dim, cfg.dim)
    (the students wrap a square frozen ``Linear(w0)`` of width ``cfg.dim``)."""
    if task is None:
        return _make_task(cfg, seed)
    if callable(task) and not hasattr(task, "sample"):
        task = task(seed)
    w0 = getattr(task, "w0", None)
    if not isinstance(w0, torch.Tensor) or not callable(getattr(task, "sample", None)):
        raise TypeError(
            "task must be None, a HierarchicalRegression (e.g. eff_llm.smore."
            "hierarchical_regression(levels=3)), an object with a w0 tensor and "
            "sample(n, generator) -> (x, y), or a builder seed -> such an object; got "
            f"{type(task).__name__}"
        )
    if tuple(w0.shape) != (cfg.dim, cfg.dim):
        raise ValueError(
            f"task.w0 must be (dim, dim) = ({cfg.dim}, {cfg.dim}) to match cfg.dim, got "
            f"{tuple(w0.shape)}"
        )
    return task


def _train(
    model: nn.Module, task: HierarchicalRegression, cfg: SMoREReproConfig, seed: int
) -> dict[str, float]:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    gen = torch.Generator().manual_seed(seed + 1)
    aux = getattr(model, "aux_loss", None)
    pool = _train_pool(task, cfg, seed)
    model.train()
    start = time.perf_counter()
    for _ in range(cfg.steps):
        if pool is None:
            x, y = task.sample(cfg.batch_size, gen)
        else:
            i = torch.randint(0, len(pool[0]), (cfg.batch_size,), generator=gen)
            x, y = pool[0][i], pool[1][i]
        loss = nn.functional.mse_loss(model(x), y)
        if aux is not None:
            loss = loss + aux()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return {
        "s/step": (time.perf_counter() - start) / cfg.steps,
        "params": sum(p.numel() for p in params),
    }


@torch.no_grad()
def _rel_mse(model: nn.Module, x: torch.Tensor, y: torch.Tensor, base: float) -> float:
    return float(nn.functional.mse_loss(model(x), y)) / base


@torch.no_grad()
def eq_1_layer_gap(seed: int = 0, dim: int = 32, tokens: int = 64) -> float:
    """Max |Δ| between a 2-layer ``eq_1_layer`` S'MoRE (identity activation) and the 1-layer mixture
    over the union of its experts with the same selections (App. C.2.1).

    Root expert k contributes s_k·W_f[:, block k] A_1^k x, leaf j contributes
    (Σ_{k ∋ j} s_k s_{j|k})·W_f[:, s_1 r_1 + block j] A_0^j x. W_f and b_f are drawn at random (at init
    W_f = 0 would make the check trivial).
    """
    from eff_llm.smore import SMoREConfig, SMoRELinear

    torch.manual_seed(seed)
    cfg = SMoREConfig(
        num_experts=[4, 4],
        num_active=[2, 2],
        expert_ranks=[2, 2],
        init_method="eq_1_layer",
        expert_act="identity",
    )
    layer = SMoRELinear(nn.Linear(dim, dim, dtype=torch.float64), cfg)
    nn.init.normal_(layer.smore_W_final)
    nn.init.normal_(layer.smore_W_final_bias)
    x = torch.randn(tokens, dim, dtype=torch.float64)
    got, _ = layer.delta(x)
    (idx0, s0), (idx1, s1) = layer.last_routing
    r0, r1, n1 = cfg.expert_ranks[0], cfg.expert_ranks[1], cfg.num_experts[1]
    wf = layer.smore_W_final
    want = layer.smore_W_final_bias.expand(tokens, -1).clone()
    for t in range(tokens):
        for a in range(idx1.shape[1]):
            k = int(idx1[t, a])
            block = wf[:, k * r1 : (k + 1) * r1]
            want[t] += s1[t, a] * block @ (layer.smore_A[1][k] @ x[t])
            for b in range(idx0.shape[2]):
                j = int(idx0[t, a, b])
                block = wf[:, n1 * r1 + j * r0 : n1 * r1 + (j + 1) * r0]
                want[t] += s1[t, a] * s0[t, a, b] * block @ (layer.smore_A[0][j] @ x[t])
    return float((got - want).abs().max())


def experiment(
    cfg: SMoREReproConfig, seed: int = 0, *, task: _TaskSpec | None = None
) -> dict[str, Any]:
    """Train every student on the same task and data stream; return rows and exactness checks.

    ``task`` replaces the teacher (default: the spec's two-level task built from ``cfg``): a
    :class:`~eff_llm.smore.HierarchicalRegression` such as ``hierarchical_regression(levels=3,
    dim=cfg.dim, seed=seed)``, any object with a ``w0`` of shape (cfg.dim, cfg.dim) and
    ``sample(n, generator) -> (x, y)``, or a builder ``seed -> task`` (see :func:`resolve_task`).
    ``seed`` still seeds the training pool, the test sets and every student's init. For a deeper
    hierarchy give S'MoRE as many sub-layers (``cfg.num_experts`` etc.).
    """
    from peft import LoraConfig, get_peft_model

    from eff_llm._adapters import peft_deprecations_silenced
    from eff_llm.smore import (
        MoLoRAConfig,
        get_molora_model,
        get_smore_model,
        smore_parameter_count,
    )

    task = resolve_task(task, cfg, seed)
    x_test, y_test = task.sample(cfg.test_size, torch.Generator().manual_seed(seed + 10_000))
    base = float(nn.functional.mse_loss(x_test @ task.w0.t(), y_test))
    x_fit, y_fit = task.sample(cfg.test_size, torch.Generator().manual_seed(seed + 20_000))
    # The best any input-independent update (LoRA at any rank ≤ D) can do: least squares on x → y.
    w_best = torch.linalg.lstsq(x_fit, y_fit).solution.t()
    linear_floor = float(nn.functional.mse_loss(x_test @ w_best.t(), y_test)) / base

    rows: list[dict[str, Any]] = []

    def add(name: str, model: nn.Module, gate_params: int = 0) -> float:
        stats = _train(model, task, cfg, seed)
        rel = _rel_mse(model, x_test, y_test, base)
        rows.append(
            {
                "method": name,
                "params": stats["params"],
                "gate params": gate_params,
                "rel-MSE": rel,
                "s/step": stats["s/step"],
            }
        )
        return rel

    scfg = _smore_config(cfg)
    smore = get_smore_model(_Host(task.w0), scfg, seed=seed)
    with torch.no_grad():
        x = x_test[:256]
        init_gap = float((smore(x) - x @ task.w0.t()).abs().max())
    budget = smore_parameter_count(scfg, cfg.dim, cfg.dim)
    count = smore.num_trainable_parameters()
    gates = count - smore.num_trainable_parameters(exclude_gates=True)
    smore_rel = add("S'MoRE " + "/".join(map(str, cfg.num_active)), smore, gates)
    molora = get_molora_model(
        _Host(task.w0),
        MoLoRAConfig(
            cfg.molora_experts, cfg.molora_active, cfg.molora_rank, target_modules=["proj"]
        ),
        seed=seed,
    )
    molora_rel = add(
        f"MoLoRA E={cfg.molora_experts} r={cfg.molora_rank}", molora, cfg.dim * cfg.molora_experts
    )
    torch.manual_seed(seed)
    with peft_deprecations_silenced():
        lora = get_peft_model(
            _Host(task.w0),
            LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_rank, target_modules=["proj"]),
        )
    lora_rel = add(f"LoRA r={cfg.lora_rank}", lora)
    rows.append(
        {
            "method": "any linear update (least squares)",
            "params": cfg.dim * cfg.dim,
            "gate params": 0,
            "rel-MSE": linear_floor,
            "s/step": float("nan"),
        }
    )
    return {
        "rows": rows,
        "smore": smore_rel,
        "molora": molora_rel,
        "lora": lora_rel,
        "linear_floor": linear_floor,
        "init_gap": init_gap,
        "count": count,
        "budget": budget["total"],
        "param_ratio": count / rows[1]["params"],
        "task": task,
    }


PAPER_TITLE = (
    "S'MoRE: Structural Mixture of Residual Experts for Parameter-Efficient LLM Fine-tuning"
)
PAPER_HEADLINE = (
    "S'MoRE beats LoRA and mixture-of-LoRA baselines at a similar parameter budget in fine-tuning "
    "accuracy (exponentially more structural flexibility than MoE / MoLoRA)"
)
_PAPER = (
    "S'MoRE above LoRA and mixture-of-LoRA baselines at a similar parameter budget (LLM "
    "fine-tuning benchmarks; the spec records no table numbers)"
)


@threads(1)
def run(
    mode: Mode = "quick",
    seed: int = 0,
    cfg: SMoREReproConfig | None = None,
    *,
    task: _TaskSpec | None = None,
) -> Result:
    """The claims over seeds; ``task`` as in :func:`experiment` (a builder ``seed -> task`` gives
    each seed its own teacher; a fixed task is shared by every seed)."""
    cfg = cfg or SMoREReproConfig()
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    outs = {s: experiment(cfg, s, task=task) for s in seeds}
    out = outs[seed]
    result = Result(
        name="llm.smore",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    result.table = out["rows"]

    def per_seed(fn) -> list[float]:
        return [float(fn(outs[s])) for s in seeds]

    result.claims = [
        Claim(
            "budget match: |S'MoRE params / MoLoRA params - 1|",
            abs(out["param_ratio"] - 1),
            0.05,
            "<=",
        ),
        Claim(
            "w_final_zero at init: max |S'MoRE output - base output|", out["init_gap"], 0.0, "<="
        ),
        Claim(
            "eq_1_layer: max |2-layer S'MoRE - 1-layer mixture with the same selections|",
            eq_1_layer_gap(seed),
            1e-6,
            "<=",
        ),
        Claim(
            "|trainable parameters - budget formula|", abs(out["count"] - out["budget"]), 0.0, "<="
        ),
        paper_claim(
            f"S'MoRE (L={len(cfg.num_experts)}, tanh, switch, w_final_zero) test rel-MSE (MSE / "
            "MSE of the frozen W0)",
            per_seed(lambda o: o["smore"]),
            0.06,
            "<=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            "LoRA at any rank <= D test rel-MSE (min of trained LoRA and the least-squares linear "
            "update): input-independent updates cannot fit the clustered teacher",
            per_seed(lambda o: min(o["lora"], o["linear_floor"])),
            0.25,
            ">=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            "S'MoRE rel-MSE / LoRA rel-MSE",
            per_seed(lambda o: o["smore"] / o["lora"]),
            0.25,
            "<=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            "non-inferiority: S'MoRE rel-MSE / MoLoRA (E=8, r=6, top-2) rel-MSE at equal budget",
            per_seed(lambda o: o["smore"] / o["molora"]),
            2.5,
            "<=",
            seeds=seeds,
            paper=_PAPER,
        ),
        paper_claim(
            "S'MoRE beats MoLoRA (E=8, r=6, top-2) at equal budget: rel-MSE ratio",
            per_seed(lambda o: o["smore"] / o["molora"]),
            1.0,
            "<=",
            seeds=seeds,
            expected="xfail",
            reason=(
                "S'MoRE / MoLoRA 1.91 at seed 0 (prototype 2.0): at D = 32 router, down-projection "
                "and W_f take most of S'MoRE's budget"
            ),
            paper=_PAPER,
            headline=True,
        ),
    ]
    result.metrics = {
        "config": asdict(cfg),
        "smore_rel_mse": out["smore"],
        "molora_rel_mse": out["molora"],
        "lora_rel_mse": out["lora"],
        "linear_floor_rel_mse": out["linear_floor"],
        "smore_params": out["count"],
        "per_seed": {
            s: {k: o[k] for k in ("smore", "molora", "lora", "linear_floor")}
            for s, o in outs.items()
        },
    }
    result.notes.append(
        "at D = 32 the router, down-projection and the shared W_f take most of S'MoRE's budget, "
        "and every output passes through the d_L = "
        f"{sum(s * r for s, r in zip(cfg.num_experts, cfg.expert_ranks, strict=True))}"
        "-dimensional range of W_f"
    )
    for s in seeds:
        o = outs[s]
        result.notes.append(
            f"seed {s}: rel-MSE S'MoRE {o['smore']:.4f}, MoLoRA {o['molora']:.4f}, LoRA r=26 "
            f"{o['lora']:.4f}, any linear update {o['linear_floor']:.4f}"
        )
    if task is not None:
        levels = getattr(outs[seed]["task"], "levels", "?")
        result.notes.append(
            f"custom task ({type(outs[seed]['task']).__name__}, {levels} levels): the default "
            "teacher's calibration below does not apply to it, and full mode's noise sweep is "
            "run on the default teacher only"
        )
    result.notes.append(
        "Teacher calibrated on the baselines only (the spec leaves the centre scale, the delta "
        "normalisation and the data stream open): centre_scale "
        f"{cfg.centre_scale}, delta_norm {cfg.delta_norm!r}, delta_scale {cfg.delta_scale}, "
        f"training pool {cfg.train_size} (batches with replacement). Criterion, fixed before any "
        "S'MoRE run: Σ|log(ours / prototype)| over LoRA r=26 and MoLoRA E=8 r=6 at 800 steps "
        "(prototype 0.330 / 0.0153), top three re-ranked with LoRA r=8 / MoLoRA r=2 at 1500 steps "
        f"(0.331 / 0.0294); {len(CALIBRATION)} candidates (centre scale 1-4, frobenius / "
        "per_direction deltas, delta scale 1 / 0.5, fresh batches or a 4096 / 16384 pool; "
        "CALIBRATION in eff_llm.reproduce.smore). This run: LoRA r=26 "
        f"{out['lora']:.4f}, MoLoRA {out['molora']:.4f}, any linear update {out['linear_floor']:.4f}. "
        "No candidate reaches the prototype's LoRA 0.33 (x = c_g + c_j caps the linear floor near "
        "0.39-0.40 at seed 0); the previous recipe (centre 1, frobenius, scale 1, fresh) gave LoRA "
        "0.489, MoLoRA 0.0648."
    )
    if mode == "full" and task is None:
        series: dict[str, list[float]] = {"x": [], "S'MoRE": [], "MoLoRA": []}
        for noise in (0.0, 0.25):
            o = experiment(replace(cfg, noise=noise), seed)
            series["x"].append(noise)
            series["S'MoRE"].append(o["smore"])
            series["MoLoRA"].append(o["molora"])
        series["x"].append(cfg.noise)
        series["S'MoRE"].append(out["smore"])
        series["MoLoRA"].append(out["molora"])
        result.add_series(
            "rel-MSE vs within-cluster noise",
            series,
            title=f"S'MoRE vs MoLoRA at equal budget: error vs within-cluster noise, seed {seed}",
            xlabel="within-cluster noise std (noise·ε added to the inputs)",
            ylabel="relative test MSE (MSE / MSE of frozen W0)",
        )
        result.notes.append(
            "Sensitivity to the within-cluster noise (rel-MSE S'MoRE / MoLoRA): "
            + ", ".join(
                f"noise {n}: {s:.4f} / {m:.4f}"
                for n, s, m in zip(series["x"], series["S'MoRE"], series["MoLoRA"], strict=True)
            )
        )
    return result
