"""Benchmark: OmniDraft vs HF universal assisted decoding (UAD) on the same target/drafter pair.

Prints the hardware-independent τ (committed target tokens per target forward, bonus included)
and, from the same run, wall-clock seconds per generated token and their ratios (plain target
greedy, OmniDraft with the base and the hybrid-distilled drafter, HF UAD with the same drafters).
Also the per-round overhead c = (t_target(k + 1 tokens) + k·t_draft) / t_target(1 token) and the
cost of translation + cache update relative to one drafter step. Tiny CPU models: the target is
only ~2× the drafter's cost, so wall-clock speed-ups are not expected here; τ is the portable
number. One torch thread, methods interleaved, medians of 3 repetitions.

    uv run --frozen python tools/bench/llm_omnidraft.py
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

from eff_llm.omnidraft import (
    CrossVocabTranslator,
    HybridDistillationLoss,
    distill_drafter,
    omnidraft_generate,
)
from eff_llm.reproduce.omnidraft import (
    OmniDraftReproConfig,
    build_pair,
    collect_responses,
    encode_text,
    hf_uad,
    prompts,
)


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    torch.set_num_threads(1)
    cfg = OmniDraftReproConfig()
    pair = build_pair(cfg, 0)
    target, base, tok_t, tok_d = pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"]
    test = prompts(cfg.prompts, "val", cfg.prompt_chars)
    warm = CrossVocabTranslator(tok_t, tok_d)
    examples = collect_responses(
        target, base, warm, tok_t, prompts(cfg.train_prompts, "train", cfg.prompt_chars), cfg
    )
    hybrid = copy.deepcopy(base)
    distill_drafter(
        hybrid,
        target,
        CrossVocabTranslator(tok_t, tok_d, cache=copy.deepcopy(warm.cache)),
        examples,
        loss=HybridDistillationLoss(lam=cfg.lam),
        epochs=cfg.distill_epochs,
        lr=cfg.distill_lr,
        batch_size=cfg.distill_batch,
    )
    ids = [encode_text(tok_t, t) for t in test]
    n_new = cfg.max_new_tokens * len(ids)

    def plain():
        return [target.generate(x, max_new_tokens=cfg.max_new_tokens, do_sample=False) for x in ids]

    def omni(drafter):
        def fn():
            tr = CrossVocabTranslator(tok_t, tok_d, cache=copy.deepcopy(warm.cache))
            outs = [
                omnidraft_generate(
                    target, drafter, input_ids=x, max_new_tokens=cfg.max_new_tokens, translator=tr
                )
                for x in ids
            ]
            return sum(o.num_new_tokens for o in outs) / sum(o.num_target_forwards for o in outs)

        return fn

    refs = plain()

    def uad(drafter):
        return lambda: hf_uad(target, drafter, tok_t, tok_d, test, refs, cfg)["tau"]

    methods = {
        "target greedy": lambda: 1.0,
        "OmniDraft, base drafter": omni(base),
        "OmniDraft, hybrid drafter": omni(hybrid),
        "HF UAD, base drafter": uad(base),
        "HF UAD, hybrid drafter": uad(hybrid),
    }
    times: dict[str, list[float]] = {m: [] for m in methods}
    taus: dict[str, float] = {}
    for _ in range(3):
        for name, fn in methods.items():
            if name == "target greedy":
                dt, _ = _timed(plain)
                taus[name] = 1.0
            else:
                dt, taus[name] = _timed(fn)
            times[name].append(dt / n_new)
    base_t = statistics.median(times["target greedy"])
    print(f"{len(ids)} prompts × {cfg.max_new_tokens} new tokens, k = {cfg.num_draft_tokens}")
    for name in methods:
        med = statistics.median(times[name])
        print(
            f"{name:28s} τ {taus[name]:.3f}  {1e3 * med:7.2f} ms/token  "
            f"wall-clock ratio to target greedy {med / base_t:.3f}x"
        )
    for d in ("base", "hybrid"):
        a = statistics.median(times[f"OmniDraft, {d} drafter"])
        b = statistics.median(times[f"HF UAD, {d} drafter"])
        print(
            f"{d} drafter: OmniDraft / HF UAD wall-clock ratio {a / b:.3f}x, "
            f"τ ratio {taus[f'OmniDraft, {d} drafter'] / taus[f'HF UAD, {d} drafter']:.3f}"
        )
    # per-round overhead c and translation cost
    k = cfg.num_draft_tokens
    x = ids[0]
    with torch.no_grad():
        t1 = statistics.median(_timed(lambda: target(input_ids=x))[0] for _ in range(20))
        tk = statistics.median(
            _timed(lambda: target(input_ids=torch.cat([x, x[:, : k + 1]], 1)))[0] for _ in range(20)
        )
        dx = torch.tensor([tok_d.encode(test[0], add_special_tokens=False)])
        td = statistics.median(_timed(lambda: base(input_ids=dx))[0] for _ in range(20))
    tr = CrossVocabTranslator(tok_t, tok_d, cache=copy.deepcopy(warm.cache))
    d_ids = tok_d.encode(test[0], add_special_tokens=False)[:k]
    seq = refs[0][0].tolist()
    t_tr = statistics.median(
        _timed(lambda: (tr.translate(d_ids), tr.reverse(seq[:-4], seq[-4:])))[0] for _ in range(200)
    )
    print(
        f"overhead c = (t_target(k+1) + k·t_draft) / t_target = {(tk + k * td) / t1:.3f} "
        f"(prompt-length forwards); translation + cache update per round = "
        f"{100 * t_tr / td:.1f} % of one drafter forward"
    )


if __name__ == "__main__":
    main()
