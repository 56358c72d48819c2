"""Reproduction ``llm.omnidraft``: cross-vocabulary speculative decoding between two tiny Llamas
with different BPE vocabularies, the n-gram cache, hybrid distillation, and HF universal assisted
decoding (UAD) as the peer.

Setup (spec): the stdlib-docstring corpus (90/10 split by position); ByteLevel BPE target vocab
1200 and drafter vocab 400, trained on the same text (greedy merges make the 400-vocab a subset, so
the only mismatch is "sub-tokens vs merged token" — OmniDraft's false rejection). Target
``Llama(h 128, L 2, 4 heads, ffn 256)`` with tied input/output embeddings (the spec's ``tied``),
drafter ``Llama(h 64, L 1, 2 heads, ffn 128)`` (untied: the spec fixes neither its d_ff nor its
tying), 400 AdamW steps each (batch 8 × 64 tokens, OneCycle lr 3e-3; ``eff_llm._lm_train``).
k counts *draft* tokens: a merged n-gram spends several of them. Held-out prompts = the first line
of validation docstrings cut at a word boundary; k = 4 draft tokens, 32 new tokens, greedy.

Modes: the **oracle** text-level drafter re-tokenizes the target's own continuation (isolates the
translator): DM only vs DM + online cache; the **learned** drafter: base (DM + cache) and after
offline hybrid distillation on the SD responses of the training prompts (3 epochs, AdamW 1e-3) with
λ = 0 (L_DM only) and λ = 1 (L_DM + L_Ngram; the NLL covers the merged target tokens whose draft
sub-tokens are entries of the cache filled while collecting the responses); the peer is HF UAD
(``assistant_tokenizer``, constant 4 assistant tokens, confidence threshold off) with the base and
the distilled drafter. Each learned mode starts from the same cache (filled online while collecting
the training responses). τ = committed tokens per target forward (bonus included), counted for HF
UAD by a forward hook on the target.

Claims (``claims.md``): checks — exact match with the target's greedy output in every mode (every
seed), 1 ≤ τ ≤ k + 1; paper claims over seeds (median; full mode seeds 0–4 — one seed per
experiment trains a new target and drafter — quick mode the master seed only, trimmed): the
oracle drafter's cache gains (τ, acceptance), hybrid-distilled − base drafter τ (the headline:
online distillation is what buys the speed-up), and hybrid − L_DM-only (acceptance ≥ +0.05
reproduces, τ ≥ +0.05 xfail; full mode only: one seed cannot resolve them).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

import torch
from torch import nn

from eff_llm._lm_train import TrainConfig, evaluate_lm
from eff_llm._lm_train import train_lm as _train_loop
from eff_llm._models import tiny_llama
from eff_llm.corpus import (
    LMData,
    docstring_lm_data,
    stdlib_docstrings,
    tokenized_lm_data,
    validation_windows,
)
from eff_llm.omnidraft import (
    CrossVocabTranslator,
    HybridDistillationLoss,
    NGramCache,
    OracleDrafter,
    distill_drafter,
    omnidraft_generate,
)
from eff_shared.errors import check_choice, check_positive, check_type
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import threads

__all__ = [
    "OmniDraftReproConfig",
    "build_pair",
    "corpus_data",
    "encode_text",
    "evaluate",
    "hf_tokenizer",
    "hf_uad",
    "prompts",
    "run",
    "train_docstring_lm",
]


def _backend(tok: Any, name: str):
    """``tok`` as a ``tokenizers.Tokenizer``: as given, or a transformers fast tokenizer's
    backend; anything else raises ``TypeError`` naming ``name``."""
    from tokenizers import Tokenizer

    if isinstance(tok, Tokenizer):
        return tok
    backend = getattr(tok, "backend_tokenizer", None)
    if isinstance(backend, Tokenizer):
        return backend
    raise TypeError(
        f"{name} must be a tokenizers.Tokenizer or a transformers fast tokenizer "
        f"(PreTrainedTokenizerFast), got {type(tok).__name__}"
    )


@dataclass(frozen=True)
class OmniDraftReproConfig:
    target_vocab: int = 1200
    draft_vocab: int = 400
    target_hidden: int = 128
    target_layers: int = 2
    target_heads: int = 4
    target_ffn: int = 256
    target_tied: bool = True
    draft_hidden: int = 64
    draft_layers: int = 1
    draft_heads: int = 2
    draft_ffn: int = 128
    draft_tied: bool = False
    steps: int = 400
    batch_size: int = 8
    seq_len: int = 64
    lr: float = 3e-3
    prompts: int = 12
    train_prompts: int = 48
    prompt_chars: int = 48
    max_new_tokens: int = 32
    num_draft_tokens: int = 4
    distill_epochs: int = 3
    distill_lr: float = 1e-3
    distill_batch: int = 8
    lam: float = 1.0
    distill: tuple[str, ...] = ("dm", "hybrid")
    uad: bool = True

    # A user tokenizer for the target / drafter (``tokenizers.Tokenizer`` or a transformers fast
    # tokenizer, e.g. a SentencePiece-style Metaspace BPE): it replaces the BPE of
    # ``target_vocab`` / ``draft_vocab`` (then ignored), the corpus is tokenized with it and the
    # model's vocabulary is its size.
    target_tokenizer: Any = None
    draft_tokenizer: Any = None

    def __post_init__(self) -> None:
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if name in ("lr", "distill_lr", "lam"):
                check_positive(name, value, strict=name != "lam")
            elif name == "distill":
                for mode in value:
                    check_choice("distill", mode, ["dm", "hybrid"])
            elif name in ("target_tokenizer", "draft_tokenizer"):
                if value is not None:
                    _backend(value, name)
            elif name not in ("uad", "target_tied", "draft_tied"):
                check_positive(name, value, integer=True)


OmniDraftRunConfig = OmniDraftReproConfig  # old name, kept for compatibility


def _config_dict(cfg: OmniDraftReproConfig) -> dict:
    """``cfg`` as JSON-ready values (a tokenizer by its kind and vocabulary size)."""
    out = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.name.endswith("_tokenizer") and value is not None:
            tok = _backend(value, f.name)
            value = f"{type(tok.model).__name__} tokenizer, vocab {tok.get_vocab_size()}"
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def corpus_data(cfg: OmniDraftReproConfig, role: str) -> LMData:
    """The docstring corpus of the ``"target"`` or ``"draft"`` model: tokenized with the user's
    tokenizer of that role when ``cfg`` has one, else with a ByteLevel BPE of its vocabulary size
    trained on the training split."""
    check_type("cfg", cfg, OmniDraftReproConfig)
    check_choice("role", role, ["target", "draft"])
    tok = getattr(cfg, f"{role}_tokenizer")
    if tok is None:
        return docstring_lm_data(getattr(cfg, f"{role}_vocab"))
    return tokenized_lm_data(_backend(tok, f"{role}_tokenizer"))


def train_docstring_lm(
    model: nn.Module, data: LMData, cfg: OmniDraftReproConfig, seed: int
) -> float:
    """Train ``model`` in place on ``data`` (:func:`corpus_data`): AdamW (weight decay 0.01) +
    OneCycle next-token training on random windows, ``cfg.steps`` steps of ``cfg.batch_size`` ×
    ``cfg.seq_len`` at ``cfg.lr`` (the shared ``accelerate`` loop); returns the validation CE."""
    check_type("model", model, nn.Module)
    check_type("data", data, LMData)
    check_type("cfg", cfg, OmniDraftReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    emb = getattr(model, "get_input_embeddings", lambda: None)()
    if emb is not None and emb.weight.shape[0] < data.vocab_size:
        raise ValueError(
            f"the model's embedding has {emb.weight.shape[0]} rows, fewer than the data's "
            f"vocabulary ({data.vocab_size})"
        )
    tcfg = TrainConfig(
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        seq_len=cfg.seq_len,
        lr=cfg.lr,
        weight_decay=0.01,
        schedule="onecycle",
        warmup_fraction=0.3,
        max_grad_norm=None,
        seed=seed,
    )
    _train_loop(model, lambda m, x: m(input_ids=x, labels=x).loss, data.train, tcfg)
    return evaluate_lm(model, validation_windows(data.val, cfg.seq_len, 64))["ce"]


def hf_tokenizer(tok):
    """A ``tokenizers.Tokenizer`` as a transformers fast tokenizer (for HF UAD and the
    translator); a transformers fast tokenizer is returned as is."""
    from transformers import PreTrainedTokenizerFast

    from_backend = _backend(tok, "tok")
    if from_backend is not tok:
        return tok
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False)


_PAIR_FIELDS = (
    "target_vocab",
    "draft_vocab",
    "target_hidden",
    "target_layers",
    "target_heads",
    "target_ffn",
    "target_tied",
    "draft_hidden",
    "draft_layers",
    "draft_heads",
    "draft_ffn",
    "draft_tied",
    "steps",
    "batch_size",
    "seq_len",
    "lr",
    "target_tokenizer",
    "draft_tokenizer",
)


def build_pair(cfg: OmniDraftReproConfig, seed: int) -> dict:
    """The trained target and base drafter (cached per process on the model/training fields of
    ``cfg``, a user tokenizer by its serialised form): a dict with the models, the HF tokenizers,
    the validation CEs and the corpus hash. With ``cfg.draft_tokenizer`` (or
    ``target_tokenizer``) the model is built for and trained on that tokenizer's vocabulary.
    Callers that modify the models must copy them."""
    check_type("cfg", cfg, OmniDraftReproConfig)
    check_positive("seed", seed, strict=False, integer=True)
    key = []
    for f in _PAIR_FIELDS:
        value = getattr(cfg, f)
        if f.endswith("_tokenizer") and value is not None:
            # tokenizers are not hashable: key on the serialised tokenizer, rebuilt below
            value = _backend(value, f).to_str()
        key.append(value)
    return _build_pair(tuple(key), seed)


@lru_cache(maxsize=2)
def _build_pair(key: tuple, seed: int) -> dict:
    from tokenizers import Tokenizer

    values = dict(zip(_PAIR_FIELDS, key, strict=True))
    for f in ("target_tokenizer", "draft_tokenizer"):
        if values[f] is not None:
            values[f] = Tokenizer.from_str(values[f])
    cfg = OmniDraftReproConfig(**values)
    t_data = corpus_data(cfg, "target")
    d_data = corpus_data(cfg, "draft")
    target = tiny_llama(
        vocab_size=t_data.vocab_size,
        hidden_size=cfg.target_hidden,
        num_layers=cfg.target_layers,
        num_heads=cfg.target_heads,
        intermediate_size=cfg.target_ffn,
        max_position_embeddings=256,
        seed=seed,
        tie_word_embeddings=cfg.target_tied,
    )
    drafter = tiny_llama(
        vocab_size=d_data.vocab_size,
        hidden_size=cfg.draft_hidden,
        num_layers=cfg.draft_layers,
        num_heads=cfg.draft_heads,
        intermediate_size=cfg.draft_ffn,
        max_position_embeddings=256,
        seed=seed + 1,
        tie_word_embeddings=cfg.draft_tied,
    )
    t0 = time.perf_counter()
    ce_t = train_docstring_lm(target, t_data, cfg, seed)
    ce_d = train_docstring_lm(drafter, d_data, cfg, seed + 1)
    return {
        "target": target,
        "drafter": drafter,
        "tok_t": hf_tokenizer(t_data.tokenizer),
        "tok_d": hf_tokenizer(d_data.tokenizer),
        "val_ce_target": ce_t,
        "val_ce_drafter": ce_d,
        "train_s": time.perf_counter() - t0,
        "sha256": t_data.sha256,
    }


def prompts(n: int, split: str, chars: int, seed: int = 0) -> list[str]:
    """First lines of docstrings cut at the last space before ``chars`` characters: held-out
    (``"val"``, the validation docstrings in order) or ``"train"`` (a seeded sample)."""
    texts = stdlib_docstrings()
    cut = round(len(texts) * 0.9)
    pool = list(texts[cut:]) if split == "val" else list(texts[:cut])
    if split == "train":
        order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed)).tolist()
        pool = [pool[i] for i in order]
    out = []
    for doc in pool:
        line = doc.split("\n", 1)[0][:chars]
        if " " in line:
            line = line.rsplit(" ", 1)[0]
        if len(line) >= 8:
            out.append(line)
        if len(out) == n:
            break
    return out


def encode_text(tok, text: str) -> torch.Tensor:
    """``text`` as a ``(1, n)`` tensor of ``tok``'s ids (no special tokens)."""
    return torch.tensor([tok.encode(text, add_special_tokens=False)])


@torch.no_grad()
def greedy_references(target, tok_t, texts: list[str], max_new_tokens: int) -> list[torch.Tensor]:
    """The target's own greedy outputs (``generate``, one token per forward)."""
    return [
        target.generate(encode_text(tok_t, t), max_new_tokens=max_new_tokens, do_sample=False)
        for t in texts
    ]


def evaluate(
    target,
    drafter,
    translator,
    tok_t,
    texts,
    refs,
    cfg: OmniDraftReproConfig,
    oracle: bool = False,
    use_cache: bool = True,
) -> dict:
    """OmniDraft over the prompts (the translator's cache persists; ``use_cache=False``: DM only,
    the cache is neither filled nor used): τ, acceptance, exact match."""
    tot = {"new": 0, "fwd": 0, "acc": 0, "prop": 0, "hits": 0, "exact": 0}
    for text, ref in zip(texts, refs, strict=True):
        ids = encode_text(tok_t, text)
        d = OracleDrafter(translator.target.to_bytes(ref[0].tolist())) if oracle else drafter
        out = omnidraft_generate(
            target,
            d,
            input_ids=ids,
            max_new_tokens=cfg.max_new_tokens,
            num_draft_tokens=cfg.num_draft_tokens,
            translator=translator,
            update_cache=use_cache,
        )
        tot["new"] += out.num_new_tokens
        tot["fwd"] += out.num_target_forwards
        tot["acc"] += out.num_accepted
        tot["prop"] += out.num_proposed
        tot["hits"] += out.ngram_hits
        tot["exact"] += int(torch.equal(out.sequences, ref))
    return {
        "tau": tot["new"] / tot["fwd"],
        "acceptance": tot["acc"] / max(tot["prop"], 1),
        "exact_match": tot["exact"] / len(texts),
        "proposed_per_round": tot["prop"] / tot["fwd"],
        "ngram_hits": tot["hits"],
        "cache_size": len(translator.cache),
    }


@torch.no_grad()
def hf_uad(target, drafter, tok_t, tok_d, texts, refs, cfg: OmniDraftReproConfig) -> dict:
    """HF universal assisted decoding on the same pair: τ from a forward hook on the target."""
    d = copy.deepcopy(drafter)
    d.generation_config.num_assistant_tokens = cfg.num_draft_tokens
    d.generation_config.num_assistant_tokens_schedule = "constant"
    d.generation_config.assistant_confidence_threshold = 0.0
    calls = [0]
    hook = target.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    new, exact = 0, 0
    try:
        for text, ref in zip(texts, refs, strict=True):
            ids = encode_text(tok_t, text)
            out = target.generate(
                ids,
                max_new_tokens=cfg.max_new_tokens,
                do_sample=False,
                assistant_model=d,
                tokenizer=tok_t,
                assistant_tokenizer=tok_d,
            )
            new += out.shape[1] - ids.shape[1]
            exact += int(torch.equal(out, ref))
    finally:
        hook.remove()
    return {"tau": new / calls[0], "exact_match": exact / len(texts)}


def collect_responses(target, drafter, translator, tok_t, texts, cfg) -> list[tuple[list, list]]:
    """SD responses of the training prompts (this also fills the online cache)."""
    out = []
    for text in texts:
        ids = encode_text(tok_t, text)
        res = omnidraft_generate(
            target,
            drafter,
            input_ids=ids,
            max_new_tokens=cfg.max_new_tokens,
            num_draft_tokens=cfg.num_draft_tokens,
            translator=translator,
        )
        seq = res.sequences[0].tolist()
        out.append((seq[: ids.shape[1]], seq[ids.shape[1] :]))
    return out


def experiment(cfg: OmniDraftReproConfig, seed: int) -> dict:
    torch.manual_seed(seed)
    pair = build_pair(cfg, seed)
    target, base, tok_t, tok_d = pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"]
    test = prompts(cfg.prompts, "val", cfg.prompt_chars)
    train = prompts(cfg.train_prompts, "train", cfg.prompt_chars, seed)
    refs = greedy_references(target, tok_t, test, cfg.max_new_tokens)
    rows, t0 = {}, time.perf_counter()

    def fresh(cache: NGramCache | None = None) -> CrossVocabTranslator:
        return CrossVocabTranslator(tok_t, tok_d, cache=copy.deepcopy(cache) if cache else None)

    rows["oracle DM"] = evaluate(
        target, None, fresh(), tok_t, test, refs, cfg, oracle=True, use_cache=False
    )
    rows["oracle DM + cache"] = evaluate(target, None, fresh(), tok_t, test, refs, cfg, oracle=True)

    warm = fresh()
    examples = collect_responses(target, base, warm, tok_t, train, cfg)
    cache = warm.cache
    rows["base drafter, DM"] = evaluate(
        target, base, fresh(), tok_t, test, refs, cfg, use_cache=False
    )
    rows["base drafter, DM + cache"] = evaluate(target, base, fresh(cache), tok_t, test, refs, cfg)
    drafters = {}
    modes = {"dm": ("L_DM", 0.0), "hybrid": (f"L_DM + {cfg.lam:g}·L_Ngram", cfg.lam)}
    for name, lam in (modes[m] for m in cfg.distill):
        student = copy.deepcopy(base)
        losses = distill_drafter(
            student,
            target,
            fresh(cache),
            examples,
            loss=HybridDistillationLoss(lam=lam),
            epochs=cfg.distill_epochs,
            lr=cfg.distill_lr,
            batch_size=cfg.distill_batch,
            seed=seed,
        )
        drafters[name] = student
        row = evaluate(target, student, fresh(cache), tok_t, test, refs, cfg)
        row["distill loss first→last"] = f"{losses[0]:.3f}→{losses[-1]:.3f}"
        rows[f"distilled {name}, DM + cache"] = row
    if cfg.uad:
        rows["HF UAD, base drafter"] = hf_uad(target, base, tok_t, tok_d, test, refs, cfg)
        for name, student in drafters.items():
            rows[f"HF UAD, distilled {name} drafter"] = hf_uad(
                target, student, tok_t, tok_d, test, refs, cfg
            )
    return {
        "rows": rows,
        "eval_s": time.perf_counter() - t0,
        "pair": {k: pair[k] for k in ("val_ce_target", "val_ce_drafter", "train_s", "sha256")},
        "train_cache_size": len(cache),
        "test_prompts": test,
    }


PAPER_TITLE = (
    "OmniDraft: A Cross-Vocabulary, Online Adaptive Drafter for On-Device Speculative Decoding"
)
PAPER_HEADLINE = (
    "one Llama-68M drafter serves Vicuna-7B, Qwen2-7B and Llama3-8B targets through the n-gram "
    "cache and online hybrid distillation: up to 1.5-2x speed-up"
)
_PAPER = "up to 1.5-2x speed-up, Llama-68M drafter with Vicuna-7B / Qwen2-7B / Llama3-8B (math, code, text)"


def _quick_config() -> OmniDraftReproConfig:
    # Quick mode: fewer prompts (the budget); full mode is the spec's setting. The 400 training
    # steps stay: at 250 the target collapses (val CE 5.40, its greedy text holds no merged
    # token, the cache stays empty and every cache claim reads 0).
    return OmniDraftReproConfig(prompts=8, train_prompts=32)


@threads(1)
def run(mode: Mode = "quick", seed: int = 0, cfg: OmniDraftReproConfig | None = None) -> Result:
    cfg = cfg or (OmniDraftReproConfig() if mode == "full" else _quick_config())
    if set(cfg.distill) != {"dm", "hybrid"} or not cfg.uad:
        raise ValueError("the llm.omnidraft claims need distill=('dm', 'hybrid') and uad=True")
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    outs = {s: experiment(cfg, s) for s in seeds}
    out = outs[seed]
    rows = out["rows"]
    result = Result(
        name="llm.omnidraft",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    result.table = [
        {
            "mode": name,
            "τ (tokens/target forward)": r["tau"],
            "acceptance": r.get("acceptance", float("nan")),
            "exact match": r["exact_match"],
            "n-gram hits": r.get("ngram_hits", ""),
            "cache size": r.get("cache_size", ""),
        }
        for name, r in rows.items()
    ]
    hyb_name = f"distilled L_DM + {cfg.lam:g}·L_Ngram, DM + cache"
    ldm_name, base_name = "distilled L_DM, DM + cache", "base drafter, DM + cache"
    k = cfg.num_draft_tokens

    def per_seed(fn) -> list[float]:
        return [float(fn(outs[s]["rows"])) for s in seeds]

    def diff(a: str, b: str, key: str):
        return per_seed(lambda r: r[a][key] - r[b][key])

    result.claims += [
        Claim(
            f"exact match with target greedy: {name} (fraction of prompts, every seed)",
            0.0,
            1.0,
            values=per_seed(lambda r, n=name: r[n]["exact_match"]),
            seeds=seeds,
        )
        for name in rows
    ]
    result.claims += [
        Claim(
            "min τ over all modes (≥ 1, every seed)",
            0.0,
            1.0,
            values=per_seed(lambda r: min(m["tau"] for m in r.values())),
            seeds=seeds,
        ),
        Claim(
            f"max τ over all modes (≤ k + 1 = {k + 1}, every seed)",
            0.0,
            k + 1,
            "<=",
            values=per_seed(lambda r: max(m["tau"] for m in r.values())),
            seeds=seeds,
        ),
        paper_claim(
            "τ: hybrid-distilled − base drafter (both DM + cache)",
            diff(hyb_name, base_name, "tau"),
            0.5,
            seeds=seeds,
            paper=_PAPER,
            headline=True,
        ),
        paper_claim(
            "oracle drafter τ: DM + cache − DM only",
            diff("oracle DM + cache", "oracle DM", "tau"),
            0.3,
            seeds=seeds,
            paper="the n-gram cache removes false rejections of merged tokens (no number of its own)",
            # quick mode (8 prompts, one seed) cannot resolve it: the gain moves with the
            # CPU's float kernels (+0.22 tau / +0.07 on an AVX-512 machine, seed 0)
            modes=("full",),
        ),
        paper_claim(
            "oracle drafter acceptance: DM + cache − DM only",
            diff("oracle DM + cache", "oracle DM", "acceptance"),
            0.15,
            seeds=seeds,
            paper="the n-gram cache removes false rejections of merged tokens (no number of its own)",
            # quick mode (8 prompts, one seed) cannot resolve it: the gain moves with the
            # CPU's float kernels (+0.22 tau / +0.07 on an AVX-512 machine, seed 0)
            modes=("full",),
        ),
        paper_claim(
            "acceptance: hybrid-distilled − L_DM-distilled",
            diff(hyb_name, ldm_name, "acceptance"),
            0.05,
            seeds=seeds,
            paper="hybrid distillation (L_DM + L_Ngram) above L_DM only in acceptance rate",
            modes=("full",),
        ),
        paper_claim(
            "τ: hybrid-distilled − L_DM-distilled",
            diff(hyb_name, ldm_name, "tau"),
            0.05,
            seeds=seeds,
            expected="xfail",
            reason=(
                "seed noise at 12 prompts (median +0.00 over seeds 0-4); merged tokens take "
                "several of the k = 4 draft slots"
            ),
            paper="hybrid distillation (L_DM + L_Ngram) above L_DM only in speed-up",
            modes=("full",),
        ),
    ]
    result.metrics.update({**out, "config": _config_dict(cfg)})
    result.metrics.pop("rows")
    result.metrics["modes"] = rows
    result.metrics["per_seed"] = {
        s: {
            "modes": {
                n: {"tau": r["tau"], "acceptance": r.get("acceptance")}
                for n, r in o["rows"].items()
            },
            "val_ce_target": o["pair"]["val_ce_target"],
        }
        for s, o in outs.items()
    }
    pair = out["pair"]
    uad = rows.get(f"HF UAD, distilled L_DM + {cfg.lam:g}·L_Ngram drafter")
    hyb, ldm, base = rows[hyb_name], rows[ldm_name], rows[base_name]
    result.notes += [
        f"corpus sha256 {pair['sha256'][:12]}…; target val CE {pair['val_ce_target']:.3f}, drafter "
        f"val CE {pair['val_ce_drafter']:.3f} (training {pair['train_s']:.1f} s)",
        f"{cfg.prompts} held-out prompts, {cfg.train_prompts} training prompts, {cfg.steps} "
        f"training steps, k = {k}, {cfg.max_new_tokens} new tokens, greedy; cache after the "
        f"training prompts: {out['train_cache_size']} entries",
    ]
    result.notes.append(
        f"target tokens proposed per round (k = {k} draft tokens; a merged token spends several): "
        f"L_DM {ldm['proposed_per_round']:.2f}, hybrid {hyb['proposed_per_round']:.2f}"
    )
    for s in seeds:
        r = outs[s]["rows"]
        result.notes.append(
            f"seed {s}: τ base {r[base_name]['tau']:.3f}, L_DM {r[ldm_name]['tau']:.3f}, hybrid "
            f"{r[hyb_name]['tau']:.3f}; acceptance L_DM {r[ldm_name]['acceptance']:.3f}, hybrid "
            f"{r[hyb_name]['acceptance']:.3f}; oracle τ {r['oracle DM']['tau']:.3f} → "
            f"{r['oracle DM + cache']['tau']:.3f}"
        )
    if uad is not None:
        result.notes.append(
            f"τ OmniDraft (hybrid, DM + cache) {hyb['tau']:.3f} vs HF UAD with the same drafter "
            f"{uad['tau']:.3f} (base drafter: {base['tau']:.3f} vs "
            f"{rows['HF UAD, base drafter']['tau']:.3f})"
        )
    return result
