"""Reproduction ``llm.lrc``: Low-Rank Clone vs training the same small architecture from scratch.

Spec (eff-llm.md, "LRC"): teacher = the OmniDraft target, a tied ``LlamaConfig(hidden 128, 2 layers,
4 heads × 32, d_ff 256)`` trained on the docstring corpus with BPE-1200 (400 steps, batch 8 × 64,
AdamW 3e-3 OneCycle). Student d_S = 48 (same layers, heads, head_dim, d_ff). 200 steps × (16 × 64)
tokens, AdamW 3e-3 OneCycle, KL temperature 1, α = 0.2, for LRC, LRC with α = 0 and the same
architecture from scratch (``LlamaConfig(hidden 48, head_dim 32)``, 180.7k parameters). Metric: CE
over 20 validation batches (20 × 16 windows of 64 tokens of the held-out 10 % of the corpus).

The KL term is averaged per token (``kl_reduction="token"``, see the notes of the result for why).

Claims (thresholds of the spec). Checks: the merged ``LlamaForCausalLM`` logits equal the functional
student's within 1e-4; trainable count = 7·L·d_T·d_S + d_T·d_S + (2L+1)·d_S. Paper claims, the
median over seeds 0–4 (full mode): CE_LRC ≤ CE_scratch − 0.20 (the headline) and CE_LRC ≤
CE_LRC(α=0) − 0.10; LRC ≤ scratch − 0.20 with a Qwen2 teacher (q/k/v biases, 2 of 4 KV heads; the
paper's teachers are Qwen2.5-3B, tied, and -7B, untied), tied (reproduces, seeds 0–4: −0.268
[−0.309, −0.192], 4/5) and untied (xfail: −0.048 [−0.198, −0.019], 0/5; the untied scratch baseline
gains 0.2–0.3 nats from its own LM head, LRC's student none). ``LRCReproConfig(teacher_family=,
teacher_tied=, teacher_kv_heads=)`` chooses the teacher (and the scratch baseline's architecture). Quick mode cannot afford one seed of the spec's training (CI budget): it trains
a short teacher (100 steps) and LRC (40 steps) for the checks only, and judges the paper claims in
full mode only. Full mode also prints two information rows: the code's sequence-summed KL and the
paper's temperature 40.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import numpy as np
import torch

from eff_shared.errors import check_choice, check_positive, check_type
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import count_parameters, seeded, threads

from .._lm_train import TrainConfig, causal_lm_loss, evaluate_lm, train_lm
from ..corpus import docstring_lm_data, validation_windows
from ..lrc import LowRankClone, LowRankCloneConfig, lrc_trainable_count

__all__ = [
    "BASELINES",
    "TEACHER_FAMILIES",
    "LRCReproConfig",
    "experiment",
    "run",
    "tiny_teacher",
    "tiny_tied_llama",
    "train_teacher",
]

#: Teacher families of the reproduction: transformers' Llama and Qwen2 (q/k/v biases).
TEACHER_FAMILIES = ("llama", "qwen2")


@dataclass(frozen=True)
class LRCReproConfig:
    vocab_size: int = 1200
    teacher_hidden: int = 128
    num_layers: int = 2
    num_heads: int = 4
    ffn_size: int = 256
    teacher_steps: int = 400
    teacher_batch: int = 8
    student_hidden: int = 48
    steps: int = 200
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    clone_weight: float = 0.2
    kl_temperature: float = 1.0
    val_batches: int = 20
    kl_reduction: str = "token"
    # the teacher (and the scratch baseline's) family, embedding tying and key/value heads
    # (None: as many as num_heads; fewer is grouped-query attention)
    teacher_family: str = "llama"
    teacher_tied: bool = True
    teacher_kv_heads: int | None = None

    def __post_init__(self) -> None:
        check_choice("kl_reduction", self.kl_reduction, ["token", "batchmean"])
        check_choice("teacher_family", self.teacher_family, list(TEACHER_FAMILIES))
        check_type("teacher_tied", self.teacher_tied, bool)
        for name, value in asdict(self).items():
            if name in ("kl_reduction", "teacher_family", "teacher_tied", "teacher_kv_heads"):
                continue
            check_positive(name, value, integer=isinstance(value, int))
        if self.teacher_kv_heads is not None:
            check_positive("teacher_kv_heads", self.teacher_kv_heads, integer=True)
            if self.num_heads % self.teacher_kv_heads:
                raise ValueError(
                    f"teacher_kv_heads={self.teacher_kv_heads} must divide "
                    f"num_heads={self.num_heads}"
                )


def tiny_tied_llama(
    vocab_size: int, hidden: int, layers: int, heads: int, head_dim: int, ffn: int, seed: int
):
    """A seeded tied ``LlamaForCausalLM`` (no special tokens), the OmniDraft-target family."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=head_dim,
        intermediate_size=ffn,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    with seeded(seed):
        return LlamaForCausalLM(cfg)


def tiny_teacher(
    family: str,
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    head_dim: int,
    ffn: int,
    seed: int,
    *,
    tied: bool = True,
    kv_heads: int | None = None,
):
    """A seeded ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` (``family``; Qwen2 has q/k/v biases)
    with ``kv_heads`` key/value heads (default ``heads``), tied or untied embeddings, no special
    tokens. ``("llama", tied=True, kv_heads=None)`` is :func:`tiny_tied_llama`."""
    check_choice("family", family, list(TEACHER_FAMILIES))
    check_type("tied", tied, bool)
    if family == "llama" and tied and kv_heads is None:
        return tiny_tied_llama(vocab_size, hidden, layers, heads, head_dim, ffn, seed)
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = (
        (LlamaConfig, LlamaForCausalLM) if family == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    )
    cfg = config_cls(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads if kv_heads is None else kv_heads,
        head_dim=head_dim,
        intermediate_size=ffn,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    with seeded(seed):
        return model_cls(cfg)


def _family_model(cfg: LRCReproConfig, vocab_size: int, hidden: int, seed: int):
    return tiny_teacher(
        cfg.teacher_family,
        vocab_size,
        hidden,
        cfg.num_layers,
        cfg.num_heads,
        cfg.teacher_hidden // cfg.num_heads,
        cfg.ffn_size,
        seed,
        tied=cfg.teacher_tied,
        kv_heads=cfg.teacher_kv_heads,
    )


def _lm_loss(model, x):
    return causal_lm_loss(model(input_ids=x).logits, x)


def train_teacher(cfg: LRCReproConfig, seed: int):
    """The teacher: a tiny model of ``cfg.teacher_family`` (default the tied Llama of the OmniDraft
    target recipe) trained on the docstring corpus. Trained once per (config, seed) in a process;
    each call returns a fresh copy."""
    return copy.deepcopy(_cached_teacher(cfg, seed))


@lru_cache(maxsize=2)
def _cached_teacher(cfg: LRCReproConfig, seed: int):
    data = docstring_lm_data(cfg.vocab_size)
    teacher = _family_model(cfg, data.vocab_size, cfg.teacher_hidden, seed)
    tcfg = TrainConfig(
        steps=cfg.teacher_steps,
        batch_size=cfg.teacher_batch,
        seq_len=cfg.seq_len,
        lr=cfg.lr,
        seed=seed + 1000,
    )
    train_lm(teacher, _lm_loss, data.train, tcfg)
    return teacher


BASELINES = ("scratch", "no_clone")


def experiment(cfg: LRCReproConfig, seed: int, baselines: tuple[str, ...] = BASELINES) -> dict:
    """Teacher, LRC and the ``baselines`` (``"no_clone"``: LRC with α = 0; ``"scratch"``: the same
    architecture trained from scratch): validation CE/accuracy, the export and count checks."""
    for b in baselines:
        check_choice("baselines", b, BASELINES)
    data = docstring_lm_data(cfg.vocab_size)
    val = validation_windows(data.val, cfg.seq_len, cfg.val_batches * cfg.batch_size)
    t0 = time.perf_counter()
    teacher = train_teacher(cfg, seed)
    times = {"teacher": time.perf_counter() - t0}
    rows = {"teacher": {**evaluate_lm(teacher, val), "params": count_parameters(teacher)}}
    train = TrainConfig(
        steps=cfg.steps, batch_size=cfg.batch_size, seq_len=cfg.seq_len, lr=cfg.lr, seed=seed
    )
    checks: dict = {}
    variants = [("LRC", cfg.clone_weight)]
    if "no_clone" in baselines:
        variants.append(("LRC α=0 (no clone)", 0.0))
    for name, alpha in variants:
        lcfg = LowRankCloneConfig(
            cfg.student_hidden,
            clone_weight=alpha,
            kl_temperature=cfg.kl_temperature,
            kl_reduction=cfg.kl_reduction,  # type: ignore[arg-type]
        )
        model = LowRankClone(teacher, lcfg, seed=seed)
        t0 = time.perf_counter()
        train_lm(model, lambda m, x: m(x).loss, data.train, train)
        times[name] = time.perf_counter() - t0
        student = model.to_student()
        rows[name] = {
            **evaluate_lm(student, val),
            "params": count_parameters(student),
            "trainable": count_parameters(model, trainable_only=True),
        }
        if alpha > 0:
            with torch.no_grad():
                fn = model.student_logits(val[:8])
                merged = student(input_ids=val[:8]).logits
            checks["max_logit_diff"] = float((fn - merged).abs().max())
            checks["trainable"] = rows[name]["trainable"]
            checks["trainable_closed_form"] = lrc_trainable_count(
                cfg.num_layers, cfg.teacher_hidden, cfg.student_hidden
            )
            checks["merged_type"] = type(student).__name__
    if "scratch" not in baselines:
        return {"rows": rows, "checks": checks, "times": times, "sha256": data.sha256}
    # the student's architecture (family, heads, head_dim, d_ff, tying) trained from scratch
    scratch = _family_model(cfg, data.vocab_size, cfg.student_hidden, seed)
    t0 = time.perf_counter()
    train_lm(scratch, _lm_loss, data.train, train)
    times["scratch"] = time.perf_counter() - t0
    rows["scratch (same architecture)"] = {
        **evaluate_lm(scratch, val),
        "params": count_parameters(scratch),
        "trainable": count_parameters(scratch, trainable_only=True),
    }
    return {"rows": rows, "checks": checks, "times": times, "sha256": data.sha256}


def _info_variant(cfg: LRCReproConfig, seed: int, **changes) -> float:
    """Validation CE of LRC with some loss settings changed (printed as information, no claim)."""
    data = docstring_lm_data(cfg.vocab_size)
    val = validation_windows(data.val, cfg.seq_len, cfg.val_batches * cfg.batch_size)
    teacher = train_teacher(cfg, seed)
    lcfg = LowRankCloneConfig(cfg.student_hidden, clone_weight=cfg.clone_weight, **changes)
    model = LowRankClone(teacher, lcfg, seed=seed)
    train = TrainConfig(
        steps=cfg.steps, batch_size=cfg.batch_size, seq_len=cfg.seq_len, lr=cfg.lr, seed=seed
    )
    train_lm(model, lambda m, x: m(x).loss, data.train, train)
    return evaluate_lm(model.to_student(), val)["ce"]


PAPER_TITLE = (
    "A Token is Worth over 1,000 Tokens: Efficient Knowledge Distillation through Low-Rank Clone"
)
PAPER_HEADLINE = (
    "LRC students match or beat state-of-the-art SLMs trained on trillions of tokens with 20B "
    "tokens: over 1,000x training efficiency (Llama-3.2-3B / Qwen2.5-3B/7B teachers)"
)
_PAPER = (
    "matches or beats SLMs trained on trillions of tokens with 20B tokens (>1,000x training "
    "efficiency), Llama-3.2-3B / Qwen2.5-3B/7B teachers"
)

#: Quick mode: the checks only (a short teacher and LRC run); full mode is the spec's setting.
QUICK = LRCReproConfig(teacher_steps=100, steps=40, val_batches=4)

#: The Qwen2 teachers of the second and third comparisons (q/k/v biases, 2 of 4 KV heads): tied
#: as Qwen2.5-0.5B–3B, untied as Qwen2.5-7B (the paper's teachers are Qwen2.5-3B and -7B).
QWEN2_TEACHERS = {
    "tied": {"teacher_family": "qwen2", "teacher_tied": True, "teacher_kv_heads": 2},
    "untied": {"teacher_family": "qwen2", "teacher_tied": False, "teacher_kv_heads": 2},
}


@threads(1)
def run(mode: Mode = "quick", seed: int = 0, cfg: LRCReproConfig | None = None) -> Result:
    """Quick: one short seed for the checks (no baselines). Full: seeds ``seed … seed+4`` (paper
    claims on the median differences) plus two information rows (the code's sequence-summed KL;
    the paper's temperature 40)."""
    cfg = cfg or (LRCReproConfig() if mode == "full" else QUICK)
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    baselines = BASELINES if mode == "full" else ()
    outs = [experiment(cfg, s, baselines) for s in seeds]
    result = Result(
        name="llm.lrc",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    names = list(outs[0]["rows"])
    result.table = [
        {
            "model": name,
            "val CE (median)": float(np.median([o["rows"][name]["ce"] for o in outs])),
            "val accuracy (median)": float(np.median([o["rows"][name]["accuracy"] for o in outs])),
            "params": outs[0]["rows"][name]["params"],
            "trainable": outs[0]["rows"][name].get("trainable", 0),
        }
        for name in names
    ]

    def ce(o: dict, name: str) -> float:
        return o["rows"][name]["ce"]

    def diffs(name: str) -> list[float]:
        if name not in outs[0]["rows"]:  # quick mode: no baselines trained
            return [float("nan")]
        return [ce(o, "LRC") - ce(o, name) for o in outs]

    d_scratch = diffs("scratch (same architecture)")
    d_clone = diffs("LRC α=0 (no clone)")
    claim_seeds_ = seeds if mode == "full" else []
    # LRC vs scratch with Qwen2 teachers (full mode only, as the Llama comparison)
    qwen: dict[str, list[dict]] = {
        k: [experiment(replace(cfg, **v), s, ("scratch",)) for s in claim_seeds_]
        for k, v in QWEN2_TEACHERS.items()
    }
    d_qwen = {
        k: [ce(o, "LRC") - ce(o, "scratch (same architecture)") for o in outs_k] or [float("nan")]
        for k, outs_k in qwen.items()
    }
    result.claims += [
        Claim(
            "max |Δlogit| merged LlamaForCausalLM vs functional student",
            max(o["checks"]["max_logit_diff"] for o in outs),
            1e-4,
            "<=",
        ),
        Claim(
            "trainable count − (7·L·d_T·d_S + d_T·d_S + (2L+1)·d_S)",
            max(abs(o["checks"]["trainable"] - o["checks"]["trainable_closed_form"]) for o in outs),
            0,
            "<=",
        ),
        paper_claim(
            "val CE: LRC − scratch (same 48-wide Llama, equal tokens)",
            d_scratch,
            -0.20,
            "<=",
            seeds=claim_seeds_,
            paper=_PAPER,
            modes=("full",),
            headline=True,
        ),
        paper_claim(
            "val CE: LRC − scratch, tied Qwen2 teacher (q/k/v biases, 2 KV heads, as "
            "Qwen2.5-3B; same 48-wide Qwen2, equal tokens)",
            d_qwen["tied"],
            -0.20,
            "<=",
            seeds=claim_seeds_,
            paper=_PAPER,
            modes=("full",),
        ),
        paper_claim(
            "val CE: LRC − scratch, untied Qwen2 teacher (q/k/v biases, 2 KV heads, as "
            "Qwen2.5-7B; same 48-wide untied Qwen2, equal tokens)",
            d_qwen["untied"],
            -0.20,
            "<=",
            seeds=claim_seeds_,
            paper=_PAPER,
            modes=("full",),
            expected="xfail",
            reason=(
                "-0.048 [-0.198, -0.019] over seeds 0-4 (0/5): the untied 48-wide scratch model "
                "gains 0.2-0.3 nats from its own LM head (seeds 0-2: val CE 5.18-5.24 vs 5.35-5.49 "
                "tied), the LRC student none (5.16-5.20 vs 5.16-5.23); an untied Llama teacher "
                "alike: -0.044 [-0.046, -0.007], so untying, not biases or GQA, removes the gain"
            ),
        ),
        paper_claim(
            "val CE: LRC − LRC without clone terms (α = 0)",
            d_clone,
            -0.10,
            "<=",
            seeds=claim_seeds_,
            paper="the activation-clone terms improve the student (paper's ablation)",
            modes=("full",),
        ),
    ]
    info = {}
    if mode == "full":
        info["LRC, KL summed over positions (code's batchmean on 3-D logits)"] = _info_variant(
            cfg, seed, kl_temperature=cfg.kl_temperature, kl_reduction="batchmean"
        )
        info["LRC, KL temperature 40 (paper), per-token"] = _info_variant(
            cfg, seed, kl_temperature=40.0, kl_reduction="token"
        )
    result.metrics.update(
        {
            "per_seed": {s: o["rows"] for s, o in zip(seeds, outs, strict=True)},
            "checks": outs[0]["checks"],
            "times": outs[0]["times"],
            "diff_vs_scratch": d_scratch,
            "diff_vs_no_clone": d_clone,
            "qwen2_teachers": {
                k: {
                    "diff_vs_scratch": d_qwen[k],
                    "per_seed": {s: o["rows"] for s, o in zip(claim_seeds_, outs_k, strict=True)},
                    "max_logit_diff": max(
                        (o["checks"]["max_logit_diff"] for o in outs_k), default=None
                    ),
                }
                for k, outs_k in qwen.items()
            },
            "info_variants_val_ce": info,
            "corpus_sha256": outs[0]["sha256"],
            "config": asdict(cfg),
        }
    )
    result.notes += [
        f"corpus sha256 {outs[0]['sha256'][:16]}; teacher val CE "
        f"{ce(outs[0], 'teacher'):.3f} (seed {seeds[0]})",
        "KL is averaged per token here (kl_reduction='token'): at temperature 1 and 64 positions "
        "the code's batchmean over (batch, seq, vocab) weights the KL 64× against L_LM, while at "
        "the paper's T = 40 and 2048 positions it weighs ≈ 2048/40² ≈ 1.3×; the library default "
        "stays the code's batchmean",
        *(f"information, seed {seed}: {k}: val CE {v:.3f}" for k, v in info.items()),
        *(
            f"{k} Qwen2 teacher: LRC − scratch per seed {[round(d, 4) for d in d_qwen[k]]}"
            for k in qwen
            if qwen[k]
        ),
    ]
    return result
