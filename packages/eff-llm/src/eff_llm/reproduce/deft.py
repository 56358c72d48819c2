"""Reproduction ``llm.deft``: DEFT (peft's implementation) vs LoRA on a task switch of a tiny Llama.

A tiny ``LlamaForCausalLM`` (d = 32, 2 layers, 4 heads of 8, FFN 64, vocab 64) is pre-trained on
``[a, +, b, SEP] → (a+b) mod 16`` and adapted to ``(a−b) mod 16`` (operator token ``-``) with rank-4
adapters on every linear layer: ``peft.DeftConfig(r=4)`` against ``LoraConfig(r=4, lora_alpha=4)``
(both 4352 trainable parameters), same data stream, steps and learning rate. Accuracy is measured on
all 256 pairs of each table.

Checks, at every seed run: the pre-training gate ('+' accuracy ≥ 0.95; one Adam run judged every
500 steps — the spec's length — and stopped at the first checkpoint that holds, at most 4000:
500 steps leave seeds 1, 3, 4, 6, 9 of 0–9 below it, all pass by 3000); and for each DEFT variant
run: identity at init (each DEFT layer within its float32 rounding bound — the spec's ≤ 1e-5 on the
logits is printed, not judged: float32 rounding alone gives 1.1e-5 at seed 1;
:func:`eff_llm.deft.identity_rounding_bound` — qr's logits differ by ~2e-5, rounding of its two
O(|W x|) terms, printed); merge → unmerge restores the weights;
merged logits = unmerged; equal trainable counts with LoRA; peft's delta = the formula
(``relu``: the official W' − W = −P relu(P)ᵀ W + P R; ``qr``: −Q Qᵀ W + Q R).

Paper claims, the median over seeds 0–4 (full mode only: quick mode cannot afford one seed's
adaptation runs, it adapts 20 steps for the checks): DEFT-relu '−'
accuracy − max(0.45, LoRA − 0.02) ≥ 0 (the spec's threshold, per seed), and the paper's headline
that DEFT keeps the old task better than LoRA (retained '+' accuracy DEFT-relu − LoRA ≥ 0; it did
not reproduce in the spec's prototype; ``xfail``). Full mode, seeds 0–4, with the gated
pre-training (500, 1500, 500, 1500, 3000 steps; '+' accuracy 1.0 at every seed) on an Intel Xeon:
the first +0.036 [+0.003, +0.192], 5/5 seeds; retention +0.008 [−0.012, +0.043], 3/5 (with the
spec's fixed 500 steps, three of the five seeds compared adapters on a base at '+' accuracy
0.22–0.56). The same code on an AMD EPYC (AVX2) trains differently from the first float-kernel
difference on (pre-training 500, 1500, 500, 1000, 1000 steps): the first +0.020 [−0.058, +0.161],
3/5; retention −0.055 [−0.105, +0.004], 1/5 — so retention is recorded as not reproduced.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from eff_llm._data import arithmetic_table
from eff_llm._models import last_token_accuracy, tiny_llama, train_last_token
from eff_shared.errors import check_choice, check_positive
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import threads

__all__ = ["DeftReproConfig", "formula_gap", "pretrain_base", "run"]


@dataclass(frozen=True)
class DeftReproConfig:
    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 64
    vocab_size: int = 64
    pretrain_steps: int = 500
    pretrain_lr: float = 3e-3
    adapt_steps: int = 300
    adapt_lr: float = 3e-3
    batch_size: int = 128
    rank: int = 4
    variants: tuple[str, ...] = ("lora", "deft-relu", "deft-qr")
    # The pre-training gate (the spec's 0.95 on '+'): judged every ``pretrain_steps`` steps of one
    # Adam run, which stops at the first checkpoint that holds, at most ``pretrain_max_steps``.
    gate: float = 0.95
    pretrain_max_steps: int = 4000

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "vocab_size",
            "pretrain_steps",
            "adapt_steps",
            "batch_size",
            "rank",
            "pretrain_max_steps",
        ):
            check_positive(name, getattr(self, name), integer=True)
        check_positive("pretrain_lr", self.pretrain_lr)
        check_positive("adapt_lr", self.adapt_lr)
        if not 0 < self.gate <= 1:
            raise ValueError(f"gate must lie in (0, 1], got {self.gate!r}")
        if self.pretrain_max_steps < self.pretrain_steps:
            raise ValueError(
                f"pretrain_max_steps ({self.pretrain_max_steps}) must be >= pretrain_steps "
                f"({self.pretrain_steps})"
            )
        if not self.variants or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants must be non-empty and distinct, got {self.variants!r}")
        for v in self.variants:
            check_choice("variants", v, list(VARIANTS))


#: The adapters the reproduction can compare.
VARIANTS = ("lora", "deft-relu", "deft-qr")


def pretrain_base(cfg: DeftReproConfig, seed: int) -> tuple[torch.nn.Module, float, int]:
    """The '+' model, its accuracy on the 256 additions and the pre-training steps it took.

    One Adam run, the gate (accuracy ≥ ``cfg.gate``) judged after every ``cfg.pretrain_steps``
    steps; it stops at the first checkpoint that holds or at ``cfg.pretrain_max_steps`` (then the
    gate fails and the reproduction's check says so). The spec's 500 steps do not converge at every
    seed ('+' accuracy 0.32–0.53 at seeds 1, 3, 4, 6, 9 of 0–9; all reach 1.0 by 3000 steps); a
    seed that passes at 500 is pre-trained exactly as before.
    """
    model = tiny_llama(
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.num_layers,
        cfg.num_heads,
        None,
        cfg.intermediate_size,
        seed=seed,
    )
    ids, labels = arithmetic_table("+")
    acc: list[float] = []

    def gate_holds(step: int) -> bool:
        if step % cfg.pretrain_steps:
            return False
        model.eval()  # no dropout in the tiny Llama; eval draws nothing from any RNG
        with torch.no_grad():
            acc.append(last_token_accuracy(model, ids, labels))
        model.train()
        return acc[-1] >= cfg.gate

    losses = train_last_token(
        model,
        ids,
        labels,
        steps=cfg.pretrain_max_steps,
        lr=cfg.pretrain_lr,
        batch_size=cfg.batch_size,
        seed=seed,
        stop_when=gate_holds,
    )
    steps = len(losses)
    if steps % cfg.pretrain_steps:  # the last block was partial: judge the final model
        acc.append(last_token_accuracy(model, ids, labels))
    return model, acc[-1], steps


@torch.no_grad()
def formula_gap(peft_model: torch.nn.Module) -> float:
    """Max over every DEFT layer of |peft delta − paper formula| and |peft forward − x (W + Δ)ᵀ|."""
    from peft.tuners.deft import DeftLayer

    from eff_llm.deft import deft_delta

    gap = 0.0
    gen = torch.Generator().manual_seed(0)
    for module in peft_model.modules():
        if not isinstance(module, DeftLayer):
            continue
        W = module.get_base_layer().weight
        R = module.deft_R.get("default")
        want = deft_delta(
            W,
            module.deft_P["default"],
            R,
            module.deft_decomposition["default"],
            module.deft_scaling["default"],
        )
        gap = max(gap, float((module.get_delta_weight("default") - want).abs().max()))
        x = torch.randn(5, W.shape[1], generator=gen)
        bias = module.get_base_layer().bias
        ref = x @ (W + want).t() + (0 if bias is None else bias)
        gap = max(gap, float((module(x) - ref).abs().max()))
    return gap


def _adapter(name: str, model: torch.nn.Module, rank: int):
    from peft import LoraConfig, get_peft_model

    from eff_llm._adapters import peft_deprecations_silenced
    from eff_llm.deft import get_deft_model

    if name == "lora":
        with peft_deprecations_silenced():
            return get_peft_model(
                model, LoraConfig(r=rank, lora_alpha=rank, target_modules="all-linear")
            )
    return get_deft_model(model, r=rank, target_modules="all-linear", decomposition=name[5:])


def experiment(cfg: DeftReproConfig, seed: int = 0) -> dict[str, Any]:
    """Pre-train (until the gate), adapt every variant of ``cfg.variants`` from the same base; the
    rows, and per DEFT variant the mechanism checks."""
    import copy

    from eff_llm.deft import init_identity_ratio

    base, base_acc, pretrain_steps = pretrain_base(cfg, seed)
    plus, plus_y = arithmetic_table("+")
    minus, minus_y = arithmetic_table("-")
    probe = minus[:64]
    with torch.no_grad():
        base_logits = base(input_ids=probe).logits
    rows, checks = [], {}
    for name in cfg.variants:
        torch.manual_seed(seed)
        model = _adapter(name, copy.deepcopy(base), cfg.rank)
        with torch.no_grad():
            init_gap = float((model(input_ids=probe).logits - base_logits).abs().max())
        is_deft = name.startswith("deft")
        # every DEFT layer against its float32 rounding bound at init (eff_llm.deft)
        init_ratio = init_identity_ratio(model.eval(), input_ids=probe) if is_deft else None
        params = sum(p.numel() for p in model.parameters() if p.requires_grad)
        start = time.perf_counter()
        train_last_token(
            model,
            minus,
            minus_y,
            steps=cfg.adapt_steps,
            lr=cfg.adapt_lr,
            batch_size=cfg.batch_size,
            seed=seed + 1,
        )
        seconds = (time.perf_counter() - start) / cfg.adapt_steps
        row = {
            "method": name,
            "params": params,
            "new-task acc ('-')": last_token_accuracy(model, minus, minus_y),
            "retained acc ('+')": last_token_accuracy(model, plus, plus_y),
            "s/step": seconds,
            "max |logits - base| at init": init_gap,
        }
        rows.append(row)
        if is_deft:
            layer_weights = {
                n: m.get_base_layer().weight.detach().clone()
                for n, m in model.named_modules()
                if hasattr(m, "deft_P")
            }
            with torch.no_grad():
                unmerged = model(input_ids=probe).logits
                model.merge_adapter()
                merged = model(input_ids=probe).logits
                model.unmerge_adapter()
            restored = max(
                float((m.get_base_layer().weight - layer_weights[n]).abs().max())
                for n, m in model.named_modules()
                if n in layer_weights
            )
            checks[name] = {
                "init_gap": init_gap,
                "init_rounding_ratio": init_ratio,
                "merge_logits": float((merged - unmerged).abs().max()),
                "unmerge_weights": restored,
                "formula_gap": formula_gap(model),
                "params": params,
            }
    return {
        "base_acc": base_acc,
        "pretrain_steps": pretrain_steps,
        "rows": rows,
        "checks": checks,
    }


PAPER_TITLE = "DEFT: Decompositional Efficient Fine-Tuning for Text-to-Image Models"
PAPER_HEADLINE = (
    "DEFT adapts text-to-image models to new concepts and tasks with state-of-the-art results "
    "while retaining instruction ability and editability (Dreambooth, Dreambench Plus, InsDet, "
    "VisualCloze)"
)
_RETENTION_REASON = (
    "depends on the CPU's float kernels: +0.008 [-0.012, +0.043], 3/5 seeds on an Intel Xeon "
    "(AVX-512), -0.055 [-0.105, +0.004], 1/5 on an AMD EPYC (AVX2), same code and seeds; retained "
    "'+' accuracy is 0.07-0.29 for every adapter after 300 steps on '-', and the DEFT-LoRA gap is "
    "within the spread of training (the spec's prototype: 0.148 DEFT-relu vs 0.163 LoRA)"
)
_PAPER = "state-of-the-art personalization with retained editability (Dreambooth / Dreambench Plus, Stable Diffusion)"

#: Quick mode: the checks only (the full pre-training for the gate, 20 adaptation steps).
QUICK = DeftReproConfig(variants=("lora", "deft-relu"), adapt_steps=20)


def _check_claims(cfg: DeftReproConfig, outs: dict[int, dict], seeds: list[int]) -> list[Claim]:
    """The mechanism checks of every DEFT variant in ``cfg.variants``, at every seed run."""
    claims = []
    has_lora = "lora" in cfg.variants
    for v in (v for v in cfg.variants if v.startswith("deft")):
        dec = v[5:]
        # deft-relu keeps the claim texts of the earlier runs (the ledger's); other variants say so
        tag = "" if v == "deft-relu" else f"{v}: "

        def per(key: str, variant: str = v) -> dict[str, Any]:
            return {"values": [outs[s]["checks"][variant][key] for s in seeds], "seeds": seeds}

        # The spec's absolute "max |logits - base logits| <= 1e-5" is float32 rounding at the
        # logits, not the identity: seed 1's converged base measures 1.085e-5 (seeds 0-4:
        # 4.3e-6 .. 1.1e-5). Issue #24 asks for the identity to float32 rounding of the
        # projector, which the per-layer bound below checks; the logits gap is printed (notes).
        claims += [
            Claim(
                f"{tag}DEFT identity at init, every DEFT layer to float32 rounding: max "
                "|y - y_base| / rounding bound (eff_llm.deft.identity_rounding_bound)",
                0.0,
                1.0,
                "<=",
                **per("init_rounding_ratio"),
            ),
            Claim(
                f"{tag}merge then unmerge: max |W - W_original|",
                0.0,
                1e-5,
                "<=",
                **per("unmerge_weights"),
            ),
            Claim(
                f"{tag}merged vs unmerged: max |logits difference|",
                0.0,
                1e-4,
                "<=",
                **per("merge_logits"),
            ),
        ]
        if has_lora:
            lora = [
                next(r["params"] for r in outs[s]["rows"] if r["method"] == "lora") for s in seeds
            ]
            claims.append(
                Claim(
                    f"{tag}|DEFT trainable params - LoRA trainable params| "
                    f"(rank {cfg.rank}, all linear)",
                    0.0,
                    0.0,
                    "<=",
                    values=[
                        abs(outs[s]["checks"][v]["params"] - n)
                        for s, n in zip(seeds, lora, strict=True)
                    ],
                    seeds=seeds,
                )
            )
        formula = (
            "the official formula -P relu(P)^T W + P R"
            if dec == "relu"
            else "the paper's formula -Q Q^T W + Q R (Q = qr(P).Q)"
        )
        claims.append(
            Claim(
                f"peft {dec} delta and forward vs {formula}: max |diff|",
                0.0,
                1e-5,
                "<=",
                **per("formula_gap"),
            )
        )
    return claims


@threads(1)
def run(mode: Mode = "quick", seed: int = 0, cfg: DeftReproConfig | None = None) -> Result:
    cfg = cfg or (DeftReproConfig() if mode == "full" else QUICK)
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    outs = {s: experiment(cfg, s) for s in seeds}
    out = outs[seed]
    result = Result(
        name="llm.deft",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    result.table = out["rows"]

    def per_seed(key: str) -> list[dict[str, float]]:
        return [{r["method"]: r[key] for r in outs[s]["rows"]} for s in seeds]

    new_task, retained_all = per_seed("new-task acc ('-')"), per_seed("retained acc ('+')")
    result.claims = [
        Claim(
            f"gate: pre-trained '+' accuracy on the 256 additions, every seed (pre-training "
            f"judged every {cfg.pretrain_steps} steps, at most {cfg.pretrain_max_steps})",
            0.0,
            cfg.gate,
            ">=",
            values=[outs[s]["base_acc"] for s in seeds],
            seeds=seeds,
        ),
        *_check_claims(cfg, outs, seeds),
    ]
    # The paper claims compare DEFT with LoRA: DEFT-relu (peft's default) when it is run, else the
    # first DEFT variant of cfg.variants; without LoRA or DEFT they cannot be judged (said below).
    defts = [v for v in cfg.variants if v.startswith("deft")]
    deft = "deft-relu" if "deft-relu" in defts else (defts[0] if defts else None)
    if deft is not None and "lora" in cfg.variants:
        label = "DEFT-" + deft[5:]  # DEFT-relu (the earlier runs' text) or DEFT-qr
        result.claims += [
            paper_claim(
                f"{label} '-' accuracy - max(0.45, LoRA - 0.02) after {cfg.adapt_steps} steps",
                [a[deft] - max(0.45, a["lora"] - 0.02) for a in new_task],
                0.0,
                seeds=seeds,
                paper=_PAPER,
                modes=("full",),
                headline=True,
            ),
            paper_claim(
                f"retained '+' accuracy after adapting to '-': {label} - LoRA",
                [a[deft] - a["lora"] for a in retained_all],
                0.0,
                seeds=seeds,
                # 5-seed full runs: +0.020 [−0.008, +0.031], 4/5 seeds with 500 pre-training steps;
                # +0.008 [−0.012, +0.043], 3/5 with the gated pre-training, both on an Intel Xeon
                # (AVX-512); the same code on an AMD EPYC (AVX2): −0.055 [−0.105, +0.004], 1/5 (the
                # spec's prototype did not reproduce it either: retained 0.148 DEFT-relu vs 0.163
                # LoRA). The margin lies within the spread of the float kernels' training paths.
                expected="xfail",
                reason=_RETENTION_REASON,
                paper=_PAPER,
                modes=("full",),
                headline=True,
            ),
        ]
    else:
        result.notes.append(
            "paper claims not judged: they compare DEFT with LoRA and cfg.variants = "
            f"{list(cfg.variants)} lacks {'LoRA' if deft is not None else 'a DEFT variant'}"
        )
    result.metrics = {
        "config": asdict(cfg),
        "base_acc": out["base_acc"],
        "checks": out["checks"],
        "base_acc_per_seed": {s: outs[s]["base_acc"] for s in seeds},
        "pretrain_steps_per_seed": {s: outs[s]["pretrain_steps"] for s in seeds},
        "per_seed": {
            s: {"new_task": a, "retained": r}
            for s, a, r in zip(seeds, new_task, retained_all, strict=True)
        },
    }
    result.notes.append(
        f"pre-training: one Adam run per seed, the gate ('+' accuracy >= {cfg.gate}) judged every "
        f"{cfg.pretrain_steps} steps (the spec's length) up to {cfg.pretrain_max_steps}: steps per "
        f"seed {[outs[s]['pretrain_steps'] for s in seeds]}, '+' accuracy "
        f"{[round(outs[s]['base_acc'], 3) for s in seeds]} (on an Intel Xeon, 500 steps left seeds "
        "1, 3, 4, 6, 9 of 0-9 at 0.32-0.53 and all reached 1.0 by 3000; the count of steps "
        "follows the CPU's float kernels)"
    )
    for s, a, r in zip(seeds, new_task, retained_all, strict=True):
        result.notes.append(
            f"seed {s}: '-' accuracy "
            + ", ".join(f"{k} {v:.3f}" for k, v in a.items())
            + "; retained '+' "
            + ", ".join(f"{k} {v:.3f}" for k, v in r.items())
            + f" (pre-trained {outs[s]['base_acc']:.3f} after {outs[s]['pretrain_steps']} steps)"
        )
    if "deft-relu" in cfg.variants:
        relu = [outs[s]["checks"]["deft-relu"]["init_gap"] for s in seeds]
        result.notes.append(
            "deft-relu identity at init on the logits (information; the spec's tolerance 1e-5): "
            f"max |logits - base| per seed {[f'{g:.2e}' for g in relu]} — float32 rounding, "
            "which grows with the base's logits; every layer is within its rounding bound "
            "(the check)"
        )
    if "deft-qr" in cfg.variants:
        qr = [outs[s]["checks"]["deft-qr"]["init_gap"] for s in seeds]
        result.notes.append(
            "deft-qr identity at init on the logits (information): max |logits - base| per seed "
            f"{[f'{g:.1e}' for g in qr]} — float32 rounding of qr's removal and injection terms "
            "(each the size of W x, formed along different matmul paths), amplified through the "
            "network; every layer is within its rounding bound (the check above)"
        )
    return result
