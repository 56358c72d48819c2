"""OmniDraft: translator and cache, exact greedy equivalence, distribution preservation, losses."""

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy import stats
from tokenizers import Tokenizer, decoders, models

from eff_llm._models import tiny_llama
from eff_llm.corpus import corpus_sha256, docstring_lm_data, stdlib_docstrings, train_bpe
from eff_llm.omnidraft import (
    AcceptanceHead,
    CrossVocabTranslator,
    HybridDistillationLoss,
    NGramCache,
    OnlineDistiller,
    OracleDrafter,
    SpeculativeOutput,
    distill_drafter,
    omnidraft_decoding_loop,
    omnidraft_generate,
    token_byte_forms,
)
from eff_llm.reproduce.omnidraft import (
    OmniDraftReproConfig,
    build_pair,
    greedy_references,
    hf_tokenizer,
    prompts,
)

# ---------------------------------------------------------------------------------------------
# Hand-made tiny vocabularies (plain string tokens): target {a b c ab ca abc}, draft {a b c bc}.

TV = {"a": 0, "b": 1, "c": 2, "ab": 3, "ca": 4, "abc": 5}
DV = {"a": 0, "b": 1, "c": 2, "bc": 3}


def tiny_tokenizers():
    tok_t = Tokenizer(models.BPE(vocab=TV, merges=[("a", "b"), ("c", "a"), ("ab", "c")]))
    tok_d = Tokenizer(models.BPE(vocab=DV, merges=[("b", "c")]))
    return tok_t, tok_d


def tiny_models(t_init=0.2, d_init=0.3):
    kw = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "intermediate_size": 32}
    target = tiny_llama(vocab_size=6, initializer_range=t_init, seed=3, **kw).eval()
    drafter = tiny_llama(vocab_size=4, initializer_range=d_init, seed=4, **kw).eval()
    return target, drafter


def tiny_cache():
    # (a, b) → ab, (a, b, c) → abc (nested keys), (c, a) → ca, (a, bc) → abc
    return NGramCache({(0, 1): 3, (0, 1, 2): 5, (2, 0): 4, (0, 3): 5})


@pytest.fixture(scope="module")
def pair():
    """The trained docstring pair of the reproduction (target vocab 1200, drafter vocab 400)."""
    return build_pair(OmniDraftReproConfig(), 0)


# ---------------------------------------------------------------------------------------------
# Byte forms, direct mapping, cache


def test_byte_forms_normalise_bytelevel_and_sentencepiece_markers():
    bl = docstring_lm_data(400).tokenizer
    forms = token_byte_forms(bl)
    vocab = bl.get_vocab()
    assert forms[vocab["Ġ"]] == b" " and forms[vocab["Ċ"]] == b"\n"
    sp = Tokenizer(models.WordLevel({"\u2581the": 0, "<0x0A>": 1, "[UNK]": 2}, unk_token="[UNK]"))
    sp.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback()])
    sp.add_special_tokens(["[UNK]"])
    sp_forms = token_byte_forms(sp)
    assert sp_forms[0] == b" the" and sp_forms[1] == b"\n" and sp_forms[2] is None
    # the byte-level "Ġthe" and the SentencePiece "▁the" meet as the same target token
    bl_the = {v: k for k, v in vocab.items()}
    the_id = next(i for i, b in enumerate(forms) if b == b" the")
    tr = CrossVocabTranslator(bl, sp)
    assert tr.direct == {0: the_id, 1: vocab["Ċ"]} and bl_the[the_id] == "Ġthe"


def test_nested_vocabularies_map_directly(pair):
    # the spec's target is a tied LlamaConfig (input and output embeddings shared)
    target = pair["target"]
    assert target.config.tie_word_embeddings
    assert target.lm_head.weight.data_ptr() == target.model.embed_tokens.weight.data_ptr()
    tr = CrossVocabTranslator(pair["tok_t"], pair["tok_d"])
    # greedy BPE merges on one corpus: the 400-token vocabulary is a subset of the 1200 one
    assert len(tr.direct) == 400
    for d, t in tr.direct.items():
        assert tr.draft.bytes[d] == tr.target.bytes[t]
    print("corpus sha256", corpus_sha256())


def test_reverse_translation_inserts_byte_exact_ngrams_first_seen_wins(pair):
    tok_t, tok_d = pair["tok_t"], pair["tok_d"]
    tr = CrossVocabTranslator(tok_t, tok_d)
    text = " ".join(d.split("\n", 1)[0] for d in stdlib_docstrings()[:40])
    ids = tok_t.encode(text, add_special_tokens=False)
    added = sum(tr.reverse(ids[:i], ids[i : i + 5]) for i in range(0, len(ids), 5))
    assert added == len(tr.cache) > 20
    for key, t in tr.cache.items():
        assert len(key) >= 2
        assert b"".join(tr.draft.bytes[d] for d in key) == tr.target.bytes[t]
    key, value = next(iter(tr.cache.items()))
    assert tr.cache.update([(key, value + 1)]) == 0 and tr.cache[key] == value
    state = tr.cache.state_dict()
    other = NGramCache()
    other.load_state_dict(state)
    assert dict(other) == dict(tr.cache)


def test_translation_longest_match_direct_map_and_stop():
    tok_t, tok_d = tiny_tokenizers()
    tr = CrossVocabTranslator(tok_t, tok_d, cache=tiny_cache())
    # a b c | c a | b | bc (unmappable: no "bc" in the target vocabulary, no key)
    out = tr.translate([0, 1, 2, 2, 0, 1, 3], torch.full((7,), 0.5))
    assert out.target_ids == [5, 4, 1]
    assert out.kinds == ["ngram", "ngram", "direct"]
    assert out.draft_spans == [(0, 3), (3, 5), (5, 6)] and out.stopped
    assert out.q_prime == pytest.approx([0.125, 0.25, 0.5])
    assert tr.translate([0, 3]).target_ids == [5]  # (a, bc) → abc
    tr2 = CrossVocabTranslator(tok_t, tok_d, max_ngram=2, cache=tiny_cache())
    assert tr2.translate([0, 1, 2]).target_ids == [3, 2]  # 3-gram beyond max_ngram


def test_eq2_proposal_distribution():
    tok_t, tok_d = tiny_tokenizers()
    tr = CrossVocabTranslator(tok_t, tok_d)
    q = torch.tensor([0.5, 0.1, 0.15, 0.25])
    r = tr.eq2_distribution(q, 6)
    assert torch.allclose(r, torch.tensor([0.5, 0.1, 0.15, 0.0, 0.0, 0.0]))
    r2 = tr.eq2_distribution(q, 6, ngram=(0, 3, 0.2))  # (a, b) → ab drafted with Π q = 0.2
    assert torch.allclose(r2, torch.tensor([0.3, 0.1, 0.15, 0.2, 0.0, 0.0]))


def test_exact_proposal_is_a_distribution_and_reduces_to_dm_without_cache():
    from eff_llm.omnidraft.decoding import _DraftPolicy, _ModelDrafter

    _, drafter = tiny_models()
    tok_t, tok_d = tiny_tokenizers()
    for cache in (None, tiny_cache()):
        tr = CrossVocabTranslator(tok_t, tok_d, cache=cache)
        pol = _DraftPolicy(tr, True, 1.0, torch.Generator().manual_seed(0), None, 0.5)
        src = _ModelDrafter(drafter, pol)
        src.sync([0, 2])
        d = src.draft(3)
        r = src.exact_proposal(d, 0, set(), 6)
        q = d.probs[0]
        stop_mass = float(q[3])  # "bc" cannot start a proposal
        assert float(r.sum()) == pytest.approx(1 - stop_mass, abs=1e-6)
        if cache is None:
            assert torch.allclose(r, tr.eq2_distribution(q, 6))
        else:  # mass moved from "a" to the n-gram tokens ab / abc
            assert float(r[0]) < float(q[0]) and float(r[3] + r[5]) > 0


# ---------------------------------------------------------------------------------------------
# Greedy exactness across tokenizers


def _check_greedy(target, drafter, tok_t, tok_d, texts, translator=None, **kw):
    tr = translator or CrossVocabTranslator(tok_t, tok_d)
    refs = greedy_references(target, tok_t, texts, 24)
    taus, matches = [], 0
    for text, ref in zip(texts, refs, strict=True):
        ids = torch.tensor([tok_t.encode(text, add_special_tokens=False)])
        out = omnidraft_generate(
            target, drafter, input_ids=ids, max_new_tokens=24, translator=tr, **kw
        )
        matches += int(torch.equal(out.sequences, ref))
        taus.append(out.tokens_per_target_forward)
        assert 1.0 <= out.tokens_per_target_forward <= 5.0
    return matches, float(np.mean(taus)), tr


def test_greedy_equals_target_greedy_on_trained_pair(pair):
    texts = prompts(8, "val", 48)
    matches, tau, tr = _check_greedy(
        pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"], texts
    )
    print(f"trained 1200/400 pair: mean accepted tokens per target forward τ = {tau:.3f}")
    assert matches == len(texts) and len(tr.cache) > 0
    # oracle drafter: the target's own continuation, re-tokenized into the draft vocabulary
    refs = greedy_references(pair["target"], pair["tok_t"], texts, 24)
    for text, ref in zip(texts, refs, strict=True):
        ids = torch.tensor([pair["tok_t"].encode(text, add_special_tokens=False)])
        out = omnidraft_generate(
            pair["target"],
            OracleDrafter(tr.target.to_bytes(ref[0].tolist())),
            input_ids=ids,
            max_new_tokens=24,
            translator=tr,
        )
        assert torch.equal(out.sequences, ref) and out.tokens_per_target_forward > 2.0


def test_greedy_equals_target_greedy_across_unrelated_tokenizers():
    docs = stdlib_docstrings()
    tok_a = hf_tokenizer(train_bpe(docs[0::2], 700))  # two BPEs trained on different text
    tok_b = hf_tokenizer(train_bpe(docs[1::2], 500))
    texts = prompts(6, "val", 40)
    for (tok_t, tok_d), seeds in (((tok_a, tok_b), (5, 6)), ((tok_b, tok_a), (7, 8))):
        kw = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
        target = tiny_llama(vocab_size=len(tok_t), max_position_embeddings=128, seed=seeds[0], **kw)
        drafter = tiny_llama(
            vocab_size=len(tok_d), max_position_embeddings=128, seed=seeds[1], **kw
        )
        tr = CrossVocabTranslator(tok_t, tok_d)
        assert 0 < len(tr.direct) < len(tok_d)  # partial intersection
        matches, tau, _ = _check_greedy(target.eval(), drafter.eval(), tok_t, tok_d, texts, tr)
        assert matches == len(texts)
        # the oracle drafter isolates the translator: partial intersection + online cache
        refs = greedy_references(target, tok_t, texts, 24)
        taus = []
        for text, ref in zip(texts, refs, strict=True):
            ids = torch.tensor([tok_t.encode(text, add_special_tokens=False)])
            oracle = OracleDrafter(tr.target.to_bytes(ref[0].tolist()))
            out = omnidraft_generate(
                target, oracle, input_ids=ids, max_new_tokens=24, translator=tr
            )
            assert torch.equal(out.sequences, ref)
            taus.append(out.tokens_per_target_forward)
        print(
            f"vocab {len(tok_t)} target / {len(tok_d)} drafter: τ random drafter {tau:.3f}, "
            f"oracle {np.mean(taus):.3f}, cache {len(tr.cache)} entries"
        )
        assert np.mean(taus) > 1.5


def test_custom_generate_hook_matches_standalone_and_target_greedy(pair):
    target, drafter, tok_t, tok_d = pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"]
    ids = torch.tensor([tok_t.encode("Return the number of", add_special_tokens=False)])
    ref = target.generate(ids, max_new_tokens=20, do_sample=False)
    seq = target.generate(
        ids,
        max_new_tokens=20,
        do_sample=False,
        custom_generate=omnidraft_decoding_loop,
        drafter=drafter,
        target_tokenizer=tok_t,
        draft_tokenizer=tok_d,
    )
    assert torch.equal(seq, ref)
    out = target.generate(
        ids,
        max_new_tokens=20,
        do_sample=False,
        custom_generate=omnidraft_decoding_loop,
        drafter=drafter,
        translator=CrossVocabTranslator(tok_t, tok_d),
        return_dict_in_generate=True,
    )
    alone = omnidraft_generate(target, drafter, tok_t, tok_d, ids, max_new_tokens=20)
    assert isinstance(out, SpeculativeOutput) and torch.equal(out.sequences, ref)
    assert out.num_target_forwards == alone.num_target_forwards


def test_acceptance_head_stops_drafting_and_keeps_exactness(pair):
    target, drafter, tok_t, tok_d = pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"]
    ids = torch.tensor([tok_t.encode("Create a new", add_special_tokens=False)])
    ref = target.generate(ids, max_new_tokens=16, do_sample=False)
    head = AcceptanceHead(drafter.config.hidden_size)
    proposed = {}
    for bias in (-20.0, 20.0):  # σ ≈ 0: stop after one token; σ ≈ 1: never stop early
        torch.nn.init.constant_(head.net[-1].bias, bias)
        torch.nn.init.zeros_(head.net[-1].weight)
        out = omnidraft_generate(
            target,
            drafter,
            tok_t,
            tok_d,
            ids,
            max_new_tokens=16,
            acceptance_head=head,
            stop_threshold=0.5,
            translator=CrossVocabTranslator(tok_t, tok_d),
        )
        assert torch.equal(out.sequences, ref)
        proposed[bias] = out.num_proposed / out.num_target_forwards
    assert proposed[-20.0] <= 1.0 < proposed[20.0]


# ---------------------------------------------------------------------------------------------
# Sampling: the output follows the target distribution


def _target_pair_distribution(target) -> np.ndarray:
    with torch.no_grad():
        seqs = torch.tensor([[0, x] for x in range(6)])
        p = torch.softmax(target(input_ids=seqs).logits.double(), -1)
    return (p[0, 0][:, None] * p[:, 1]).numpy().ravel()  # p(x1 | a) p(x2 | a x1)


def _sample_pairs(target, drafter, residual, n, seed, cache):
    tok_t, tok_d = tiny_tokenizers()
    tr = CrossVocabTranslator(tok_t, tok_d, cache=cache)
    gen = torch.Generator().manual_seed(seed)
    counts, hits = np.zeros(36), 0
    for _ in range(n):
        out = omnidraft_generate(
            target,
            drafter,
            input_ids=torch.tensor([[0]]),
            max_new_tokens=2,
            num_draft_tokens=3,
            do_sample=True,
            translator=tr,
            residual=residual,
            generator=gen,
            update_cache=False,
        )
        s = out.sequences[0].tolist()
        counts[6 * s[1] + s[2]] += 1
        hits += out.ngram_hits
    return counts, hits


def _chi2_pvalue(counts: np.ndarray, p: np.ndarray) -> float:
    e = p / p.sum() * counts.sum()
    small = e < 5  # pool the rare cells
    obs = np.append(counts[~small], counts[small].sum()) if small.any() else counts
    exp = np.append(e[~small], e[small].sum()) if small.any() else e
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.slow
def test_sampling_preserves_the_target_distribution():
    """χ² over the 36 two-token continuations of a tiny-vocabulary target: the exact residual
    (and DM-only speculative sampling) preserve p; the paper's Eq. 2 with nested n-gram keys and
    an unmappable draft token does not (it ignores the n-grams not drafted this round)."""
    target, drafter = tiny_models()
    p = _target_pair_distribution(target)
    n = 800
    counts, hits = _sample_pairs(target, drafter, "exact", n, 0, tiny_cache())
    tv_exact = 0.5 * np.abs(counts / n - p).sum()
    assert hits > 150  # n-gram merges are frequent
    assert _chi2_pvalue(counts, p) > 1e-3, tv_exact
    dm_counts, _ = _sample_pairs(target, drafter, "eq2", n, 1, None)  # empty cache: DM only
    assert _chi2_pvalue(dm_counts, p) > 1e-3
    eq2_counts, _ = _sample_pairs(target, drafter, "eq2", n, 2, tiny_cache())
    tv_eq2 = 0.5 * np.abs(eq2_counts / n - p).sum()
    print(f"TV to the target: exact residual {tv_exact:.3f}, Eq. 2 {tv_eq2:.3f}")
    assert _chi2_pvalue(eq2_counts, p) < 1e-3 and tv_eq2 > tv_exact


def test_same_seed_same_sample():
    target, drafter = tiny_models()
    outs = []
    for _ in range(2):
        tok_t, tok_d = tiny_tokenizers()
        tr = CrossVocabTranslator(tok_t, tok_d, cache=tiny_cache())
        outs.append(
            omnidraft_generate(
                target,
                drafter,
                input_ids=torch.tensor([[0, 1]]),
                max_new_tokens=12,
                do_sample=True,
                temperature=0.8,
                translator=tr,
                generator=torch.Generator().manual_seed(7),
            )
        )
    assert torch.equal(outs[0].sequences, outs[1].sequences)
    assert outs[0].num_accepted == outs[1].num_accepted


# ---------------------------------------------------------------------------------------------
# Hybrid distillation


def _loss_setup():
    tok_t, tok_d = tiny_tokenizers()
    tr = CrossVocabTranslator(tok_t, tok_d, cache=tiny_cache())
    # prompt "c", response "a" "b" "abc" (target ids 2 | 0 1 5); draft text "c a b a bc"
    al = tr.align([2], [0, 1, 5])
    g = torch.Generator().manual_seed(0)
    d_logits = torch.randn(len(al.draft_ids), 4, generator=g, requires_grad=True)
    t_logits = torch.randn(4, 6, generator=g)
    return tr, al, d_logits, t_logits


def test_alignment_by_byte_offsets():
    _, al, _, _ = _loss_setup()
    assert al.draft_ids == [2, 0, 1, 0, 3]
    assert al.direct == [(1, 1), (2, 2)] and al.ngram == [([3, 4], 3)] and al.skipped == 0


def test_ngram_positions_are_cache_entries_of_the_target_token():
    # I_Ngram (Eq. 4): a merged target token counts only when its draft span is a cache entry of it
    tok_t, tok_d = tiny_tokenizers()
    without = CrossVocabTranslator(tok_t, tok_d, cache=NGramCache({(0, 1): 3}))
    al = without.align([2], [0, 1, 5])  # "abc" = (a, bc): not in this cache
    assert al.draft_ids == [2, 0, 1, 0, 3]
    assert al.direct == [(1, 1), (2, 2)] and al.ngram == [] and al.skipped == 1
    wrong = CrossVocabTranslator(tok_t, tok_d, cache=NGramCache({(0, 3): 3}))  # maps to "ab"
    assert wrong.align([2], [0, 1, 5]).ngram == []
    loss, parts = HybridDistillationLoss(lam=1.0)(
        torch.zeros(5, 4), torch.zeros(4, 6), al, without, [2, 0, 1, 5]
    )
    assert parts["ngram"] == 0 and parts["direct"] == 2 and torch.isfinite(loss)


def test_hybrid_loss_terms_match_their_definitions():
    tr, al, dl, tl = _loss_setup()
    ids = [2, 0, 1, 5]
    dm_d, dm_t = [0, 1, 2], [0, 1, 2]  # a, b, c map directly
    # reverse KL(q' ‖ p) over the intersection, renormalised, at the two DM positions
    kl = 0.0
    for j, i in al.direct:
        lq = torch.log_softmax(dl[j, dm_d], -1)
        lp = torch.log_softmax(tl[i, dm_t], -1)
        kl = kl + (lq.exp() * (lq - lp)).sum()
    nll = -(torch.log_softmax(dl, -1)[3, 0] + torch.log_softmax(dl, -1)[4, 3])
    loss0, parts0 = HybridDistillationLoss(lam=0.0)(dl, tl, al, tr, ids)
    assert torch.allclose(loss0, kl / 3) and parts0["direct"] == 2 and parts0["ngram"] == 1
    loss1, _ = HybridDistillationLoss(lam=1.0)(dl, tl, al, tr, ids)
    assert torch.allclose(loss1, (kl + nll) / 3)
    lam = torch.softmax(tl[3], -1)[5]
    loss_p, _ = HybridDistillationLoss(lam="target_prob")(dl, tl, al, tr, ids)
    assert torch.allclose(loss_p, (kl + lam * nll) / 3)
    raw, _ = HybridDistillationLoss(lam=0.0, renormalize_intersection=False)(dl, tl, al, tr, ids)
    assert not torch.allclose(raw, loss0)
    loss1.backward()
    assert dl.grad is not None and dl.grad[0].abs().sum() == 0  # row 0 predicts nothing


def test_distillation_is_seeded_and_lowers_the_loss(pair):
    target, base, tok_t, tok_d = pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"]
    texts = prompts(8, "train", 48, 0)
    refs = greedy_references(target, tok_t, texts, 16)
    examples = [
        (
            tok_t.encode(t, add_special_tokens=False),
            r[0, len(tok_t.encode(t, add_special_tokens=False)) :].tolist(),
        )
        for t, r in zip(texts, refs, strict=True)
    ]
    runs = []
    for _ in range(2):
        student = copy.deepcopy(base)
        tr = CrossVocabTranslator(tok_t, tok_d)
        runs.append(distill_drafter(student, target, tr, examples, epochs=4, lr=1e-3, batch_size=4))
    assert runs[0] == runs[1]
    assert np.mean(runs[0][-2:]) < np.mean(runs[0][:2])


@pytest.mark.parametrize("schedule", ["joint", "interleaved"])
def test_online_distiller_updates_every_interval(pair, schedule):
    target, base, tok_t, tok_d = pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"]
    student = copy.deepcopy(base)
    head = AcceptanceHead(student.config.hidden_size)
    tr = CrossVocabTranslator(tok_t, tok_d)
    dist = OnlineDistiller(
        student,
        tr,
        torch.optim.AdamW(student.parameters(), lr=1e-4),
        target=target,
        update_interval=3,
        schedule=schedule,
        acceptance_head=head,
        head_optimizer=torch.optim.AdamW(head.parameters(), lr=1e-3),
        buffer_size=4,
        head_updates=2,
        batch_size=2,
    )
    before = [p.detach().clone() for p in student.parameters()]
    ran = []
    for text in prompts(6, "train", 40, 1):
        ids = torch.tensor([tok_t.encode(text, add_special_tokens=False)])
        out = omnidraft_generate(target, student, input_ids=ids, max_new_tokens=8, translator=tr)
        seq = out.sequences[0].tolist()
        ran.append(dist.observe(seq[: ids.shape[1]], seq[ids.shape[1] :]))
    assert ran == [False, False, True, False, False, True] and dist.updates == 2
    assert not dist.queue and len(dist.replay) <= 4
    assert any(not torch.equal(a, b) for a, b in zip(before, student.parameters(), strict=True))
    # joint: one head step per drafter batch (2 batches × 2 updates); interleaved: 2 × 2
    assert len(dist.history["head"]) == 4


# ---------------------------------------------------------------------------------------------
# Bad input


def test_bad_input_raises_named_errors():
    tok_t, tok_d = tiny_tokenizers()
    target, drafter = tiny_models()
    tr = CrossVocabTranslator(tok_t, tok_d)
    ids = torch.tensor([[0, 1]])

    def gen(**kw):
        args = {"input_ids": ids, "max_new_tokens": 2, "translator": tr}
        return omnidraft_generate(target, drafter, **{**args, **kw})

    with pytest.raises(ValueError, match="batch size 1"):
        gen(input_ids=torch.tensor([[0, 1], [1, 0]]))
    with pytest.raises(ValueError, match="num_draft_tokens"):
        gen(num_draft_tokens=0)
    with pytest.raises(ValueError, match="stop_threshold"):
        gen(stop_threshold=1.5, acceptance_head=AcceptanceHead(16))
    with pytest.raises(ValueError, match="temperature"):
        gen(temperature=-0.1, do_sample=True)
    with pytest.raises(ValueError, match="residual"):
        gen(residual="approx")
    disjoint = Tokenizer(models.BPE(vocab={"x": 0, "y": 1}, merges=[]))
    with pytest.raises(ValueError, match="no token of the draft vocabulary maps"):
        CrossVocabTranslator(tok_t, disjoint)
    with pytest.raises(ValueError, match="same device"):
        omnidraft_generate(
            target,
            copy.deepcopy(drafter).to("meta"),
            input_ids=ids,
            max_new_tokens=2,
            translator=tr,
        )
    with pytest.raises(TypeError, match="get_vocab"):
        CrossVocabTranslator(object(), tok_d)
    with pytest.raises(ValueError, match="n-gram key"):
        NGramCache({(1,): 2})
    with pytest.raises(ValueError, match="OracleDrafter"):
        omnidraft_generate(
            target,
            OracleDrafter("ab"),
            input_ids=ids,
            max_new_tokens=2,
            translator=tr,
            do_sample=True,
        )


@pytest.mark.slow
def test_quick_reproduction_claims():
    """Quick mode (8 held-out / 32 training prompts, seed 0) reuses the trained pair of the fixtures.

    Every check passes (exact match in every mode incl. HF UAD, 1 ≤ τ ≤ k + 1) and no claim FAILs.
    The oracle cache gains are paper claims whose size depends on how many merged tokens the tiny
    target's greedy text holds, which changes with the CPU's float kernels (seed 0, full mode:
    +0.89 τ on the machine of the README's numbers, +0.29 τ / +0.09 acceptance on an AVX-512 one;
    quick mode there +0.22 / +0.07): this test asserts only that the cache helps (> 0), and the reproduction judges them in full mode
    only. The two
    "hybrid − L_DM" claims are judged in full mode only (median over seeds 0-4)."""
    from eff_llm.reproduce.omnidraft import run

    result = run("quick", 0)
    checks = [c for c in result.claims if c.kind == "check"]
    failed = [(c.text, c.values) for c in checks if not c.passed]
    assert not failed, failed
    assert len(checks) == 11
    paper = {c.text: c for c in result.claims if c.kind == "paper"}
    assert len(paper) == 5
    assert paper["τ: hybrid-distilled − base drafter (both DM + cache)"].passed
    assert paper["τ: hybrid-distilled − base drafter (both DM + cache)"].headline
    oracle = [c for t, c in paper.items() if t.startswith("oracle drafter")]
    assert len(oracle) == 2 and all(c.measured > 0 for c in oracle), [
        (c.text, c.measured) for c in oracle
    ]
    assert all(c.verdict("quick") == "not judged" for c in oracle)
    hybrid_vs_dm = [c for t, c in paper.items() if "L_DM-distilled" in t]
    assert len(hybrid_vs_dm) == 2 and all(c.verdict("quick") == "not judged" for c in hybrid_vs_dm)
    assert any("HF UAD" in n for n in result.notes)


def _metaspace_bpe(texts, vocab_size: int):
    """A SentencePiece-style BPE (Metaspace "▁" with a prepended space, byte fallback), as Llama's."""
    from tokenizers import pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    bytes_ = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=bytes_, show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    return tok


@pytest.mark.parametrize("drafter_kind", ["bytelevel", "metaspace"])
def test_cache_round_trip_with_bytelevel_and_metaspace_drafters(drafter_kind):
    """Re-encoding a window with a Metaspace drafter prepends "▁": every cache-update window must
    still be covered (it was rejected before), the cache fills, and greedy output stays exact."""
    docs = stdlib_docstrings()
    tok_t = hf_tokenizer(train_bpe(docs[0::2], 700))
    if drafter_kind == "metaspace":
        tok_d = hf_tokenizer(_metaspace_bpe(docs[1::2], 600))
        assert tok_d.encode("value", add_special_tokens=False) == tok_d.encode(
            " value", add_special_tokens=False
        )  # the prepended space
    else:
        tok_d = hf_tokenizer(train_bpe(docs[1::2], 600))
    tr = CrossVocabTranslator(tok_t, tok_d)
    ids = tok_t.encode(docs[3][:600], add_special_tokens=False)
    windows = [tr.target.to_bytes(ids[i : i + 4]) for i in range(len(ids) - 4)]
    covered = [tr._draft_cover(w) is not None for w in windows if w.decode("utf-8", "ignore")]
    assert np.mean(covered) > 0.95, f"{drafter_kind}: {np.mean(covered):.2f} of windows covered"
    for i in range(1, len(ids)):
        tr.reverse(ids[:i], ids[i : i + 1])
    assert len(tr.cache) >= 5, f"{drafter_kind}: cache has {len(tr.cache)} entries"
    kw = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
    target = tiny_llama(vocab_size=len(tok_t), max_position_embeddings=128, seed=5, **kw).eval()
    drafter = tiny_llama(vocab_size=len(tok_d), max_position_embeddings=128, seed=6, **kw).eval()
    texts = prompts(3, "val", 40)
    matches, _, _ = _check_greedy(target, drafter, tok_t, tok_d, texts, tr)
    assert matches == len(texts)


def test_draft_logits_processor_sees_the_draft_context_and_keeps_the_output_exact(pair):
    from transformers import LogitsProcessor, LogitsProcessorList

    target, drafter, tok_t, tok_d = pair["target"], pair["drafter"], pair["tok_t"], pair["tok_d"]

    class BanAndRecord(LogitsProcessor):
        def __init__(self, banned: int) -> None:
            self.banned, self.calls = banned, []

        def __call__(self, input_ids, scores):
            self.calls.append(input_ids[0].tolist())
            scores = scores.clone()
            scores[:, self.banned] = float("-inf")
            return scores

    text = "Return the number of"
    ids = torch.tensor([tok_t.encode(text, add_special_tokens=False)])
    ref = target.generate(ids, max_new_tokens=16, do_sample=False)
    plain = omnidraft_generate(target, drafter, tok_t, tok_d, ids, max_new_tokens=16)
    # ban the drafter's favourite first token: the drafts change, the output may not
    first = int(
        drafter(torch.tensor([tok_d.encode(text, add_special_tokens=False)])).logits[0, -1].argmax()
    )
    proc = BanAndRecord(first)
    out = omnidraft_generate(
        target, drafter, tok_t, tok_d, ids, max_new_tokens=16,
        draft_logits_processor=LogitsProcessorList([proc]),
    )  # fmt: skip
    assert torch.equal(out.sequences, ref) and torch.equal(plain.sequences, ref)
    assert proc.calls[0] == tok_d.encode(text, add_special_tokens=False)  # the draft context
    # each later call extends a committed draft context by the tokens drafted so far
    assert all(len(c) > 0 for c in proc.calls) and len(proc.calls) > 1
    with pytest.raises(TypeError, match="draft_logits_processor must be a LogitsProcessorList"):
        omnidraft_generate(target, drafter, tok_t, tok_d, ids, max_new_tokens=2,
                           draft_logits_processor=proc)  # fmt: skip


def test_build_pair_with_a_user_metaspace_drafter_tokenizer():
    """A drafter tokenizer built offline (SentencePiece-style Metaspace BPE): the drafter is built
    for and trained on its vocabulary, and OmniDraft stays exact with it."""
    import math

    from eff_llm.reproduce.omnidraft import corpus_data, train_docstring_lm

    docs = stdlib_docstrings()
    meta = _metaspace_bpe(docs[: round(0.9 * len(docs))], 500)
    small = {"target_hidden": 32, "target_heads": 2, "target_ffn": 64, "draft_hidden": 32,
             "draft_ffn": 64, "steps": 30, "target_vocab": 600}  # fmt: skip
    cfg = OmniDraftReproConfig(**small, draft_tokenizer=meta)
    pair = build_pair(cfg, 0)
    drafter, tok_d, tok_t = pair["drafter"], pair["tok_d"], pair["tok_t"]
    assert drafter.get_input_embeddings().weight.shape[0] == meta.get_vocab_size() == len(tok_d)
    text = "Return the value of the key"
    assert (
        tok_d.encode(text, add_special_tokens=False)
        == meta.encode(text, add_special_tokens=False).ids
    )
    assert tok_d.convert_ids_to_tokens(tok_d.encode(text, add_special_tokens=False))[0][0] == "▁"
    assert pair["val_ce_drafter"] < math.log(len(tok_d))  # trained on the Metaspace stream
    data = corpus_data(cfg, "draft")
    assert data.vocab_size == meta.get_vocab_size() and int(data.train.max()) < data.vocab_size
    # the same tokenizer as a transformers fast tokenizer: the same drafter
    via_hf = build_pair(replace(cfg, draft_tokenizer=hf_tokenizer(meta)), 0)["drafter"]
    assert all(
        torch.equal(a, b)
        for a, b in zip(via_hf.state_dict().values(), drafter.state_dict().values(), strict=True)
    )
    target = pair["target"]
    texts = prompts(2, "val", 40)
    refs = greedy_references(target, tok_t, texts, 12)
    for text, ref in zip(texts, refs, strict=True):
        ids = torch.tensor([tok_t.encode(text, add_special_tokens=False)])
        out = omnidraft_generate(target, drafter, tok_t, tok_d, ids, max_new_tokens=12)
        assert torch.equal(out.sequences, ref)
    with pytest.raises(TypeError, match=r"draft_tokenizer must be a tokenizers\.Tokenizer"):
        OmniDraftReproConfig(draft_tokenizer="sentencepiece.model")
    with pytest.raises(ValueError, match="fewer than the data's vocabulary"):
        train_docstring_lm(tiny_llama(vocab_size=10), data, cfg, 0)
    with pytest.raises(ValueError, match="role must be one of"):
        corpus_data(cfg, "student")
