"""OmniDraft's drafting and verification (:mod:`eff_llm.omnidraft`): model and oracle drafters
(with the adaptive stop of an acceptance head and the exact proposal distribution over the cache
trie), the speculative decoding loop with greedy or distribution-preserving sampling verification,
:func:`omnidraft_generate` and the ``generate(custom_generate=...)`` hook
:func:`omnidraft_decoding_loop`."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from transformers import DynamicCache, LogitsProcessorList, TemperatureLogitsWarper

from eff_llm.omnidraft.translator import CrossVocabTranslator, Translation
from eff_shared.errors import check_choice, check_positive, check_type

__all__ = [
    "OracleDrafter",
    "SpeculativeOutput",
    "omnidraft_decoding_loop",
    "omnidraft_generate",
]

_RESIDUALS = ("exact", "eq2")


# ---------------------------------------------------------------------------------------------
# Drafters


@dataclass
class _Draft:
    tokens: list[int]
    probs: list[torch.Tensor]  # q at each drafted position (V_q,)
    hiddens: list[torch.Tensor | None]  # hidden state that produced each token
    cums: list[float]  # Π σ(f(e_j)) over drafted tokens before position i
    base_len: int  # drafter cache length at the start of the round
    budget: int
    head_stopped: bool = False
    context: list[int] = field(default_factory=list)  # the draft ids before the first draft token


class _DraftPolicy:
    """How draft tokens are drawn: temperature, greedy/sampling, suppression, adaptive stop."""

    def __init__(self, translator, do_sample, temperature, generator, head, gamma, processor=None):
        self.translator, self.do_sample, self.temperature = translator, do_sample, temperature
        self.generator, self.head, self.gamma = generator, head, gamma
        self.processor = processor if processor is not None and len(processor) else None

    def dist(self, logits: torch.Tensor, context: list[int] | None = None) -> torch.Tensor:
        """The drafter's proposal q for the next draft token; ``context`` is the draft-token
        sequence the logits condition on (what a drafter ``logits_processor`` sees)."""
        logits = logits.float()
        if self.processor is not None and context is not None:
            ids = torch.tensor([context], device=logits.device)
            logits = self.processor(ids, logits[None])[0].float()
        if self.translator.suppress_unmappable:
            mask = self.translator.allowed_draft_mask(logits.shape[-1], logits.device)
            logits = logits.masked_fill(~mask, float("-inf"))
        if not self.do_sample:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        return torch.softmax(logits / self.temperature, -1)

    def pick(self, q: torch.Tensor) -> int:
        if not self.do_sample:
            return int(q.argmax())
        return int(torch.multinomial(q, 1, generator=self.generator))

    def accept_prob(self, hidden: torch.Tensor | None) -> float:
        if self.head is None or hidden is None:
            return 1.0
        with torch.no_grad():
            return float(torch.sigmoid(self.head(hidden.to(next(self.head.parameters()).dtype))))

    def stops(self, cum: float) -> bool:
        return self.head is not None and 1.0 - cum > self.gamma


class _ModelDrafter:
    """An HF causal LM as drafter, with its own KV cache kept in sync with the committed text."""

    def __init__(self, model: nn.Module, policy: _DraftPolicy):
        self.model, self.policy = model, policy
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []
        self.logits: torch.Tensor | None = None
        self.hidden: torch.Tensor | None = None
        self.forwards = 0
        self.device = next(model.parameters()).device

    @torch.no_grad()
    def _forward(self, ids: list[int], cache: DynamicCache | None = None, batch=None):
        inp = torch.tensor([ids], device=self.device) if batch is None else batch
        out = self.model(
            input_ids=inp,
            cache=self.cache if cache is None else cache,
            use_cache=True,
            output_hidden_states=self.policy.head is not None,
        )
        self.forwards += 1
        hidden = out.hidden_states[-1][:, -1] if self.policy.head is not None else None
        return out.logits[:, -1].float(), hidden

    def sync(self, draft_ids: list[int]) -> None:
        if not draft_ids:
            raise ValueError("the prompt has no draft tokens (empty text)")
        lcp = 0
        for a, b in zip(self.ids, draft_ids, strict=False):
            if a != b:
                break
            lcp += 1
        keep = min(lcp, len(draft_ids) - 1)
        cached = self.cache.get_seq_length()
        if cached > keep:
            self.cache.crop(keep - cached)
        logits, hidden = self._forward(draft_ids[keep:])
        self.ids = list(draft_ids)
        self.logits, self.hidden = logits[0], None if hidden is None else hidden[0]

    def draft(self, k: int) -> _Draft:
        pol = self.policy
        d = _Draft([], [], [], [], self.cache.get_seq_length(), k, context=list(self.ids))
        logits, hidden, cum = self.logits, self.hidden, 1.0
        for i in range(k):
            q = pol.dist(logits, d.context + d.tokens)
            tok = pol.pick(q)
            d.tokens.append(tok)
            d.probs.append(q)
            d.hiddens.append(hidden)
            d.cums.append(cum)
            cum *= pol.accept_prob(hidden)
            if pol.stops(cum):
                d.head_stopped = True
                break
            if i == k - 1:
                break
            lg, hd = self._forward([tok])
            logits, hidden = lg[0], None if hd is None else hd[0]
        self.ids = self.ids + d.tokens[:-1]  # the cache holds every drafted token but the last
        return d

    # -- exact proposal distribution (residual="exact") --------------------------------------

    def exact_proposal(
        self, d: _Draft, pos: int, forbidden: set[tuple[int, ...]], target_size: int
    ) -> torch.Tensor:
        """r(t) at draft position ``pos``: the exact distribution of the next proposed target token
        given the drafter state there, conditioned on not drafting a ``forbidden`` continuation."""
        tr = self.policy.translator
        if pos >= len(d.tokens):  # drafting ended here (budget or head): nothing is proposed
            return torch.zeros(target_size, device=self.device)
        q0 = d.probs[pos]
        r = tr.map_distribution(q0, target_size)
        budget = min(d.budget - pos, tr.max_ngram)
        cum0 = d.cums[pos] * self.policy.accept_prob(d.hiddens[pos])
        removed = 0.0

        def best_of(node: tuple[int, ...], prev: int) -> int:
            if len(node) >= 2 and node in tr.cache:
                return tr.cache[node]
            return prev

        def forb_children(node: tuple[int, ...]) -> set[int]:
            return {
                f[len(node)] for f in forbidden if len(f) > len(node) and f[: len(node)] == node
            }

        def move(mass: float, src: int, dst: int | None) -> None:
            nonlocal removed
            if src >= 0:
                r[src] -= mass
            if dst is None:
                removed += mass
            elif dst >= 0:
                r[dst] += mass

        # depth 1: forbidden single tokens lose their mass
        for f in forbidden:
            if len(f) == 1:
                move(float(q0[f[0]]), tr.direct.get(f[0], -1), None)
        live = not self.policy.stops(cum0) and budget >= 2
        frontier: list[tuple[tuple[int, ...], float, int, float]] = []  # node, P, best, cum
        if live:
            firsts = set(tr.cache.children(())) | forb_children(())
            for a in sorted(firsts):
                if (a,) in forbidden or float(q0[a]) == 0.0:
                    continue
                if not (tr.cache.children((a,)) or forb_children((a,))):
                    continue
                frontier.append(((a,), float(q0[a]), tr.direct.get(a, -1), cum0))
        cache = None
        parent_rows: list[int] = []
        depth = 1
        while frontier:
            # forward the drafter on the frontier's last tokens (rows follow the parent rows)
            if cache is None:
                cache = copy.deepcopy(self.cache)
                extra = cache.get_seq_length() - (d.base_len + pos)
                if extra > 0:
                    cache.crop(-extra)
                cache.batch_repeat_interleave(len(frontier))
            else:
                cache.batch_select_indices(torch.tensor(parent_rows, device=self.device))
            batch = torch.tensor([[n[0][-1]] for n in frontier], device=self.device)
            logits, hidden = self._forward([], cache=cache, batch=batch)
            nxt, rows = [], []
            for row, (node, p_node, best, cum) in enumerate(frontier):
                q = self.policy.dist(logits[row], d.context + d.tokens[:pos] + list(node))
                h = None if hidden is None else hidden[row]
                cum_child = cum * self.policy.accept_prob(h)
                can_extend = depth + 1 < budget and not self.policy.stops(cum_child)
                for c in sorted(tr.cache.children(node) | forb_children(node)):
                    mass = p_node * float(q[c])
                    if mass == 0.0:
                        continue
                    child = (*node, c)
                    if child in forbidden:
                        move(mass, best, None)
                        continue
                    new_best = best_of(child, best)
                    if new_best != best:
                        move(mass, best, new_best)
                    if can_extend and (tr.cache.children(child) or forb_children(child)):
                        nxt.append((child, mass, new_best, cum_child))
                        rows.append(row)
            frontier, parent_rows = nxt, rows
            depth += 1
        r = r.clamp_min(0.0)
        if removed > 0:
            r = r / max(1.0 - removed, 1e-30)
        return r


class OracleDrafter:
    """A text-level oracle drafter (diagnostic, greedy only): proposes the draft tokenization of a
    reference continuation (the target's own greedy output), isolating the translator.

    ``reference``: the full reference text (prompt + continuation) as ``str`` or ``bytes``.
    """

    def __init__(self, reference: str | bytes):
        self.reference = reference.encode() if isinstance(reference, str) else bytes(reference)


class _OracleSource:
    def __init__(self, oracle: OracleDrafter, translator: CrossVocabTranslator):
        self.oracle, self.tr = oracle, translator
        self.text = b""
        self.forwards = 0

    def sync_text(self, committed: bytes) -> None:
        self.text = committed

    def draft(self, k: int, size: int) -> _Draft:
        ref = self.oracle.reference
        tokens: list[int] = []
        if ref.startswith(self.text) and len(ref) > len(self.text):
            rest = ref[len(self.text) :].decode("utf-8", errors="ignore")
            tokens = self.tr.draft.encode(rest)[:k]
        self.forwards += len(tokens)
        probs = [torch.nn.functional.one_hot(torch.tensor(t), size).float() for t in tokens]
        return _Draft(tokens, probs, [None] * len(tokens), [1.0] * len(tokens), 0, k)


# ---------------------------------------------------------------------------------------------
# The decoding loop


@dataclass
class SpeculativeOutput:
    """Result of an OmniDraft generation (batch size 1)."""

    sequences: torch.Tensor
    num_new_tokens: int = 0
    num_target_forwards: int = 0
    num_draft_forwards: int = 0
    num_proposed: int = 0
    num_accepted: int = 0
    ngram_hits: int = 0
    ngram_accepted: int = 0
    cache_size: int = 0
    accepted_per_round: list[int] = field(default_factory=list)

    @property
    def tokens_per_target_forward(self) -> float:
        """τ: committed target tokens per target forward (bonus included)."""
        return self.num_new_tokens / max(self.num_target_forwards, 1)

    @property
    def acceptance(self) -> float:
        """Accepted / proposed target tokens."""
        return self.num_accepted / max(self.num_proposed, 1)


def _check_common(num_draft_tokens, temperature, stop_threshold, residual, acceptance_head):
    check_positive("num_draft_tokens", num_draft_tokens, integer=True)
    check_positive("temperature", temperature, strict=False)
    check_choice("residual", residual, _RESIDUALS)
    if stop_threshold is not None:
        check_type("stop_threshold", stop_threshold, (int, float))
        if not 0 < stop_threshold < 1:
            raise ValueError(f"stop_threshold must lie in (0, 1), got {stop_threshold!r}")
    if acceptance_head is not None:
        check_type("acceptance_head", acceptance_head, nn.Module)


def _run_loop(
    target: nn.Module,
    drafter: nn.Module | OracleDrafter,
    translator: CrossVocabTranslator,
    input_ids: torch.Tensor,
    *,
    max_length: int,
    target_cache: DynamicCache,
    logits_processor: LogitsProcessorList,
    num_draft_tokens: int,
    do_sample: bool,
    temperature: float,
    acceptance_head: nn.Module | None,
    stop_threshold: float | None,
    residual: str,
    generator: torch.Generator | None,
    eos_token_ids: set[int],
    update_cache: bool = True,
    draft_logits_processor: LogitsProcessorList | None = None,
) -> SpeculativeOutput:
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(
            f"OmniDraft supports batch size 1: input_ids must be (1, seq), got {tuple(input_ids.shape)}"
        )
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids must hold at least one prompt token")
    device = input_ids.device
    t_dev = next(target.parameters()).device
    if draft_logits_processor is not None and not isinstance(draft_logits_processor, list):
        raise TypeError(
            "draft_logits_processor must be a LogitsProcessorList (or a list of processors), "
            f"got {type(draft_logits_processor).__name__}"
        )
    if isinstance(drafter, OracleDrafter):
        if do_sample:
            raise ValueError("OracleDrafter is deterministic: use do_sample=False")
        if draft_logits_processor:
            raise ValueError("draft_logits_processor needs a model drafter, not an OracleDrafter")
        source: Any = _OracleSource(drafter, translator)
        d_size = translator.draft.size
    else:
        check_type("drafter", drafter, nn.Module)
        d_dev = next(drafter.parameters()).device
        if d_dev != t_dev:
            raise ValueError(
                f"target and drafter must be on the same device, got {t_dev} and {d_dev}"
            )
        gamma = 0.5 if stop_threshold is None else float(stop_threshold)
        procs = LogitsProcessorList(list(draft_logits_processor or []))
        policy = _DraftPolicy(
            translator, do_sample, temperature, generator, acceptance_head, gamma, procs
        )
        source = _ModelDrafter(drafter, policy)
        d_size = drafter.config.vocab_size
    if input_ids.device != t_dev:
        input_ids = input_ids.to(t_dev)
    v_p = target.config.vocab_size
    out = SpeculativeOutput(sequences=input_ids)
    seq = input_ids[0].tolist()
    n_prompt = len(seq)
    pending = list(seq)  # tokens whose KV is not yet in the target cache
    if target_cache.get_seq_length() != 0:
        raise ValueError("target_cache must be empty at the start of generation")

    while len(seq) < max_length:
        # 1. draft in draft space, from the draft tokenization of the committed text
        text = translator.target.to_bytes(seq)
        if isinstance(source, _OracleSource):
            source.sync_text(text)
            draft = source.draft(num_draft_tokens, d_size)
        else:
            source.sync(translator.draft.encode(text.decode("utf-8", errors="replace")))
            draft = source.draft(num_draft_tokens)
        # 2. translate into target tokens
        tr = translator.translate(draft.tokens, torch.stack(draft.probs) if draft.probs else None)
        cand = tr.target_ids[: max_length - len(seq)]
        # 3. one target forward over the pending tokens and the candidates
        inp = torch.tensor([pending + cand], device=t_dev)
        logits = target(input_ids=inp, cache=target_cache, use_cache=True).logits[0]
        out.num_target_forwards += 1
        logits = logits[len(pending) - 1 :].float()  # row i predicts the token after cand[:i]
        ctx = torch.tensor([seq + cand], device=t_dev)
        for i in range(len(cand) + 1):
            if len(logits_processor):
                logits[i] = logits_processor(ctx[:, : len(seq) + i], logits[i : i + 1])[0]
        out.num_proposed += len(cand)
        out.ngram_hits += sum(k == "ngram" for k in tr.kinds[: len(cand)])
        # 4. accept / correct
        n_acc, next_tok = 0, None
        forbidden: set[tuple[int, ...]] = set()
        for i, t in enumerate(cand):
            if not do_sample:
                choice = int(logits[i].argmax())
                if choice == t:
                    n_acc += 1
                    continue
                next_tok = choice
                break
            p = torch.softmax(logits[i], -1)
            r = _proposal(source, translator, draft, tr, i, forbidden, residual, v_p, p.device)
            ratio = float(p[t]) / max(float(r[t]), 1e-30)
            u = float(torch.rand((), generator=generator))
            if u < min(1.0, ratio):
                n_acc += 1
                forbidden = _next_forbidden(translator, draft, tr, i, forbidden)
                continue
            next_tok = _residual_sample(p, r, generator)
            break
        if next_tok is None:  # all accepted (or nothing proposed): the next target token
            i = n_acc
            if not do_sample:
                next_tok = int(logits[i].argmax())
            else:
                p = torch.softmax(logits[i], -1)
                if n_acc < len(tr.target_ids):  # candidates truncated by max_length
                    r = torch.zeros_like(p)
                else:
                    r = _proposal(
                        source, translator, draft, tr, i, forbidden, residual, v_p, p.device
                    )
                next_tok = _residual_sample(p, r, generator)
        new = [*cand[:n_acc], next_tok]
        new = new[: max_length - len(seq)]
        for j, t in enumerate(new):
            if t in eos_token_ids:
                new = new[: j + 1]
                break
        out.num_accepted += n_acc
        out.ngram_accepted += sum(k == "ngram" for k in tr.kinds[:n_acc])
        out.accepted_per_round.append(n_acc)
        # 5. roll the target cache back to the committed tokens (the last one is still pending)
        n_cached = target_cache.get_seq_length()
        keep = len(seq) + len(new) - 1
        if n_cached > keep:
            target_cache.crop(keep - n_cached)
        if update_cache:
            translator.reverse(seq, new)
        seq = seq + new
        pending = [seq[-1]]
        if new and new[-1] in eos_token_ids:
            break
    out.sequences = torch.tensor([seq], device=device)
    out.num_new_tokens = len(seq) - n_prompt
    out.num_draft_forwards = source.forwards
    out.cache_size = len(translator.cache)
    return out


def _proposal(source, translator, draft, tr: Translation, i, forbidden, residual, v_p, device):
    """r at target position i (the i-th translated token, or the stop position i = len)."""
    pos = tr.draft_spans[i][0] if i < len(tr.draft_spans) else tr.consumed
    if pos >= len(draft.tokens):
        return torch.zeros(v_p, device=device)
    if residual == "exact" and isinstance(source, _ModelDrafter):
        return source.exact_proposal(draft, pos, forbidden, v_p).to(device)
    ngram = None
    if i < len(tr.kinds) and tr.kinds[i] == "ngram":
        ngram = (draft.tokens[pos], tr.target_ids[i], tr.q_prime[i])
    return translator.eq2_distribution(draft.probs[pos], v_p, ngram).to(device)


def _next_forbidden(translator, draft, tr: Translation, i, forbidden) -> set[tuple[int, ...]]:
    """Continuations excluded after accepting translated token i (longest-match conditioning)."""
    s, e = tr.draft_spans[i]
    w = tuple(draft.tokens[s:e])
    n = len(w)
    out = {f[n:] for f in forbidden if len(f) > n and f[:n] == w}
    out |= set(translator.cache.extensions(w, translator.max_ngram))
    return out


def _residual_sample(p: torch.Tensor, r: torch.Tensor, generator) -> int:
    res = (p - r).clamp_min(0.0)
    total = float(res.sum())
    if total <= 1e-12:  # r ≥ p everywhere up to rounding: p itself
        res, total = p, float(p.sum())
    return int(torch.multinomial(res / total, 1, generator=generator))


def _make_translator(translator, target_tokenizer, draft_tokenizer):
    if translator is not None:
        check_type("translator", translator, CrossVocabTranslator)
        return translator
    if target_tokenizer is None or draft_tokenizer is None:
        raise ValueError("pass translator= or both target_tokenizer= and draft_tokenizer=")
    return CrossVocabTranslator(target_tokenizer, draft_tokenizer)


@torch.no_grad()
def omnidraft_generate(
    target: nn.Module,
    drafter: nn.Module | OracleDrafter,
    target_tokenizer: Any = None,
    draft_tokenizer: Any = None,
    input_ids: torch.Tensor | None = None,
    *,
    max_new_tokens: int,
    num_draft_tokens: int = 4,
    do_sample: bool = False,
    temperature: float = 1.0,
    translator: CrossVocabTranslator | None = None,
    acceptance_head: nn.Module | None = None,
    stop_threshold: float | None = None,
    residual: Literal["exact", "eq2"] = "exact",
    generator: torch.Generator | None = None,
    logits_processor: LogitsProcessorList | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    update_cache: bool = True,
    draft_logits_processor: LogitsProcessorList | None = None,
) -> SpeculativeOutput:
    """Cross-vocabulary speculative decoding of ``max_new_tokens`` tokens (batch size 1).

    ``translator`` (with its n-gram cache) persists across calls — pass the same one to keep the
    online cache; otherwise one is built from the two tokenizers. ``do_sample`` draws from
    softmax(logits / temperature) (plus ``logits_processor``) and preserves that distribution;
    greedy output equals the target's own greedy output. ``draft_logits_processor`` is applied to
    the drafter's logits (called with the draft-token context) before its proposal is formed: it
    changes only the acceptance rate, never the output distribution — e.g. the target's watermark
    processor with the same key when the drafter shares the tokenizer, so that the drafter proposes
    from the watermarked distribution the target will verify against.
    """
    check_positive("max_new_tokens", max_new_tokens, integer=True)
    _check_common(num_draft_tokens, temperature, stop_threshold, residual, acceptance_head)
    if do_sample and temperature == 0:
        raise ValueError("temperature must be > 0 when do_sample=True")
    if input_ids is None:
        raise ValueError("input_ids is required")
    tr = _make_translator(translator, target_tokenizer, draft_tokenizer)
    procs = LogitsProcessorList(list(logits_processor or []))
    if do_sample and temperature != 1.0:
        procs.insert(0, TemperatureLogitsWarper(temperature))
    eos = (
        set()
        if eos_token_id is None
        else {int(eos_token_id)}
        if isinstance(eos_token_id, int)
        else set(map(int, eos_token_id))
    )
    return _run_loop(
        target,
        drafter,
        tr,
        input_ids,
        max_length=input_ids.shape[-1] + max_new_tokens,
        target_cache=DynamicCache(config=target.config),
        logits_processor=procs,
        num_draft_tokens=num_draft_tokens,
        do_sample=do_sample,
        temperature=temperature if do_sample else 1.0,
        acceptance_head=acceptance_head,
        stop_threshold=stop_threshold,
        residual=residual,
        generator=generator,
        eos_token_ids=eos,
        update_cache=update_cache,
        draft_logits_processor=draft_logits_processor,
    )


def omnidraft_decoding_loop(
    model: nn.Module,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: Any,
    generation_config: Any,
    synced_gpus: bool = False,
    streamer: Any = None,
    drafter: nn.Module | OracleDrafter | None = None,
    draft_tokenizer: Any = None,
    target_tokenizer: Any = None,
    translator: CrossVocabTranslator | None = None,
    num_draft_tokens: int = 4,
    acceptance_head: nn.Module | None = None,
    stop_threshold: float | None = None,
    residual: Literal["exact", "eq2"] = "exact",
    generator: torch.Generator | None = None,
    **model_kwargs: Any,
) -> torch.LongTensor | SpeculativeOutput:
    """``target.generate(ids, custom_generate=omnidraft_decoding_loop, drafter=d, target_tokenizer=
    tok_t, draft_tokenizer=tok_d, max_new_tokens=...)``: OmniDraft inside ``generate``.

    generate prepares the cache, the logits processors (temperature, top-k, ... — applied to the
    target's verification logits as in HF assisted decoding) and the length/EOS limits. Returns the
    sequences, or a :class:`SpeculativeOutput` with ``return_dict_in_generate=True``. The drafter
    samples from softmax(logits / temperature).
    """
    if drafter is None:
        raise ValueError(
            "omnidraft_decoding_loop needs drafter= (an HF causal LM or OracleDrafter)"
        )
    if streamer is not None:
        raise ValueError("streamer is not supported by omnidraft_decoding_loop")
    _check_common(num_draft_tokens, 1.0, stop_threshold, residual, acceptance_head)
    tr = _make_translator(translator, target_tokenizer, draft_tokenizer)
    cache = model_kwargs.get("cache")
    if not isinstance(cache, DynamicCache):
        cache = DynamicCache(config=model.config)
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError("OmniDraft does not support padded inputs (batch size 1, no padding)")
    eos = getattr(generation_config, "_eos_token_tensor", None)
    eos_ids = set() if eos is None else set(eos.flatten().tolist())
    do_sample = bool(generation_config.do_sample)
    out = _run_loop(
        model,
        drafter,
        tr,
        input_ids,
        max_length=int(generation_config.max_length),
        target_cache=cache,
        logits_processor=logits_processor,
        num_draft_tokens=num_draft_tokens,
        do_sample=do_sample,
        temperature=float(generation_config.temperature or 1.0) if do_sample else 1.0,
        acceptance_head=acceptance_head,
        stop_threshold=stop_threshold,
        residual=residual,
        generator=generator,
        eos_token_ids=eos_ids,
    )
    if generation_config.return_dict_in_generate:
        return out
    return out.sequences  # type: ignore[return-value]
