"""Reproduction ``llm.deft``: DEFT (peft's implementation) vs LoRA on a task switch of a tiny Llama.

A tiny ``LlamaForCausalLM`` (d = 32, 2 layers, 4 heads of 8, FFN 64, vocab 64) is pre-trained on
``[a, +, b, SEP] → (a+b) mod 16`` and adapted to ``(a−b) mod 16`` (operator token ``-``) with rank-4
adapters on every linear layer: ``peft.DeftConfig(r=4)`` against ``LoraConfig(r=4, lora_alpha=4)``
(both 4352 trainable parameters), same data stream, steps and learning rate. Accuracy is measured on
all 256 pairs of each table.

Checks (master seed): the pre-training gate (seed 0, as the spec; other seeds printed), identity at init; merge → unmerge restores the weights;
merged logits = unmerged; equal trainable counts; peft's ``relu`` delta = the official formula
W' − W = −P relu(P)ᵀ W + P R. Paper claims, the median over seeds 0–4 (full mode only: quick mode
cannot afford one seed's adaptation runs, it adapts 20 steps for the checks): DEFT-relu '−'
accuracy − max(0.45, LoRA − 0.02) ≥ 0 (the spec's threshold, per seed), and the paper's headline
that DEFT keeps the old task better than LoRA (retained '+' accuracy DEFT-relu − LoRA ≥ 0; it did
not reproduce in the spec's prototype, it does in our 5-seed run: +0.020 median, 4/5 seeds).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from eff_llm._data import arithmetic_table
from eff_llm._models import last_token_accuracy, tiny_llama, train_last_token
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim

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


def pretrain_base(cfg: DeftReproConfig, seed: int) -> tuple[torch.nn.Module, float]:
    """The '+' model and its accuracy on the 256 additions."""
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
    train_last_token(
        model,
        ids,
        labels,
        steps=cfg.pretrain_steps,
        lr=cfg.pretrain_lr,
        batch_size=cfg.batch_size,
        seed=seed,
    )
    return model, last_token_accuracy(model, ids, labels)


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
    import copy

    base, base_acc = pretrain_base(cfg, seed)
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
        if name.startswith("deft"):
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
                "merge_logits": float((merged - unmerged).abs().max()),
                "unmerge_weights": restored,
                "formula_gap": formula_gap(model),
                "params": params,
            }
    return {"base_acc": base_acc, "rows": rows, "checks": checks}


PAPER_TITLE = "DEFT: Decompositional Efficient Fine-Tuning for Text-to-Image Models"
PAPER_HEADLINE = (
    "DEFT adapts text-to-image models to new concepts and tasks with state-of-the-art results "
    "while retaining instruction ability and editability (Dreambooth, Dreambench Plus, InsDet, "
    "VisualCloze)"
)
_PAPER = "state-of-the-art personalization with retained editability (Dreambooth / Dreambench Plus, Stable Diffusion)"

#: Quick mode: the checks only (the full pre-training for the gate, 20 adaptation steps).
QUICK = DeftReproConfig(variants=("lora", "deft-relu"), adapt_steps=20)


def run(mode: Mode = "quick", seed: int = 0, cfg: DeftReproConfig | None = None) -> Result:
    cfg = cfg or (DeftReproConfig() if mode == "full" else QUICK)
    torch.set_num_threads(1)
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    outs = {s: experiment(cfg, s) for s in seeds}
    out = outs[seed]
    lora_params = next(r["params"] for r in out["rows"] if r["method"] == "lora")
    relu = out["checks"]["deft-relu"]
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
        Claim("gate: pre-trained '+' accuracy on the 256 additions", out["base_acc"], 0.95, ">="),
        Claim("DEFT identity at init: max |logits - base logits|", relu["init_gap"], 1e-5, "<="),
        Claim("merge then unmerge: max |W - W_original|", relu["unmerge_weights"], 1e-5, "<="),
        Claim("merged vs unmerged: max |logits difference|", relu["merge_logits"], 1e-4, "<="),
        Claim(
            "|DEFT trainable params - LoRA trainable params| (rank 4, all linear)",
            abs(relu["params"] - lora_params),
            0.0,
            "<=",
        ),
        Claim(
            "peft relu delta and forward vs the official formula -P relu(P)^T W + P R: max |diff|",
            relu["formula_gap"],
            1e-5,
            "<=",
        ),
        paper_claim(
            f"DEFT-relu '-' accuracy - max(0.45, LoRA - 0.02) after {cfg.adapt_steps} steps",
            [a["deft-relu"] - max(0.45, a["lora"] - 0.02) for a in new_task],
            0.0,
            seeds=seeds,
            paper=_PAPER,
            modes=("full",),
            headline=True,
        ),
        paper_claim(
            "retained '+' accuracy after adapting to '-': DEFT-relu - LoRA",
            [a["deft-relu"] - a["lora"] for a in retained_all],
            0.0,
            seeds=seeds,
            # the first 5-seed full run: +0.020 [−0.008, +0.031], 4/5 seeds (the spec's prototype
            # did not reproduce it: retained 0.148 DEFT-relu vs 0.163 LoRA)
            paper=_PAPER,
            modes=("full",),
            headline=True,
        ),
    ]
    result.metrics = {
        "config": asdict(cfg),
        "base_acc": out["base_acc"],
        "checks": out["checks"],
        "base_acc_per_seed": {s: outs[s]["base_acc"] for s in seeds},
        "per_seed": {
            s: {"new_task": a, "retained": r}
            for s, a, r in zip(seeds, new_task, retained_all, strict=True)
        },
    }
    result.notes.append(
        "the gate is the spec's (seed 0): 500 pre-training steps do not converge at every seed "
        f"('+' accuracy per seed {[round(outs[s]['base_acc'], 3) for s in seeds]}); the paper "
        "claims are over every seed, so a seed below 0.95 compares adapters on a weak base"
    )
    for s, a, r in zip(seeds, new_task, retained_all, strict=True):
        result.notes.append(
            f"seed {s}: '-' accuracy "
            + ", ".join(f"{k} {v:.3f}" for k, v in a.items())
            + "; retained '+' "
            + ", ".join(f"{k} {v:.3f}" for k, v in r.items())
            + f" (pre-trained {outs[s]['base_acc']:.3f})"
        )
    return result
