"""OmniDraft: one drafter for any target — cross-vocabulary speculative decoding with an online
n-gram cache, hybrid distillation and adaptive drafting (Ramakrishnan et al., Qualcomm AI Research,
arXiv 2507.02659; no public code — built from §3.1–3.3 and Algorithms 1–4).

A drafter q over V_q proposes ``k`` draft tokens; they are translated into target tokens and the
target p over V_p verifies them in one forward pass (speculative decoding, Leviathan et al. 2023).

- **Direct mapping (DM, §3.1):** d ↔ t when their byte strings are identical. Every token is first
  normalised to its bytes (ByteLevel 'Ġ'/'Ċ' through the GPT-2 byte table, SentencePiece '▁' → space,
  ``<0xNN>`` byte fall-back), so tokenizers with different marker conventions meet on one alphabet.
- **Online n-gram cache (§3.2, Algorithm 1):** C = {(d_1..d_n) → t}, n ≥ 2. After each verification
  round the committed target tokens are re-tokenized with the draft tokenizer *in context*; every
  target token that the draft tokenizer splits into n ≥ 2 draft tokens whose bytes concatenate to
  the target token's bytes gives an entry. First-seen wins, no eviction. Character spans of target
  tokens come from decoding token by token, never from re-encoding (the target emits
  non-canonical tokenizations).
- **Translation:** left to right, the **longest** run of draft tokens that hits C becomes its
  target token with q′(t) = Π_j q(d_j); else the direct mapping, q′(t) = q(d); else the proposal
  stops. ``suppress_unmappable`` (UAG's alternative) masks draft tokens that can never be
  translated while drafting.
- **Verification:** greedy — accept while the target argmax equals the proposal, then the target's
  own token (so the output equals the target's greedy output exactly). Sampling — accept t with
  min(1, p(t)/r(t)), else sample norm(max(0, p − r)) (Leviathan et al., Algorithm 1) where r is the
  proposal distribution of target tokens at that position. ``residual="eq2"`` is the paper's Eq. 2:
  r(t_ng) = Π q(d_ij) for the n-gram drafted this round, r(d_i1) = q(d_i1) − Π q(d_ij), r = q on the
  other directly mapped tokens, 0 on unmapped ones. Eq. 2 ignores the n-grams *not* drafted this
  round and the longest-match look-ahead, so with a non-empty cache it is only approximately
  distribution-preserving. ``residual="exact"`` (**our addition**) computes r exactly: it expands
  the drafter over the cache trie from the current draft state (batched drafter forwards, one per
  trie level) and conditions on the continuations excluded by the longest-match rule at earlier
  positions; with it the output follows the target distribution exactly (tested with a χ² test).
  A translation that stops at an unmappable draft token is treated as a rejection (the stop event
  has probability 1 − Σ r), so the next token is drawn from the residual, not from p as the paper's
  "bonus from p" would (which is biased whenever the drafter puts mass on unmappable tokens); when
  the draft budget is exhausted r ≡ 0 and the residual is p itself (the usual bonus token).
- **Hybrid distillation (§3.3, Eq. 3–4):** L = Σ_i I_DM(d_i)·KL(q′_θ ‖ p)(t_i | x) − λ Σ_i
  I_Ngram(d_i)·log q_θ(d_i | x): reverse KL in target space on directly mapped positions, NLL in draft
  space on the sub-tokens of merged tokens that are n-gram cache entries (I_Ngram), λ constant or
  λ = p(t_i). q′ lives on the vocabulary intersection, so q′ and p are renormalised over it
  (unstated in the paper: ``renormalize_intersection``).
  Responses are aligned to draft tokens by byte offsets; draft tokens straddling a target-token
  boundary belong to neither term. Loss = sum over counted target tokens / their number.
- **Adaptive drafting (SpecDec++, §3.3, Algorithms 3–4):** a head f_φ on the drafter hidden state
  that produced each proposed token, P(accept_i | previous) = σ(f_φ(e_i)); drafting stops after
  token i when 1 − Π_{j≤i} σ(f_φ(e_j)) > γ. Trained with a weighted BCE on the soft labels
  min(1, p(y_i)/q_θ(y_i)) (for merged tokens the merged ratio p(t)/Π q(d_j) on every sub-token), in
  the **joint** (one head step per drafter step on the same batch) or **interleaved** (several head
  steps per drafter update from a replay buffer of at most N examples, oldest evicted) schedule.
  γ, the BCE weight and the head (1 hidden layer) are not given in the paper: ours.

τ (committed target tokens per target forward, bonus included) and the acceptance rate
(accepted / proposed target tokens) are the hardware-independent metrics. The loop runs inside
``target.generate(input_ids, custom_generate=omnidraft_decoding_loop, drafter=..., ...)`` (the
transformers 5.x hook for a custom decoding loop; there is no public hook for a custom
``CandidateGenerator``) or standalone through :func:`omnidraft_generate`. Batch size 1.
"""

from __future__ import annotations

import copy
import json
import math
from collections import deque
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from transformers import DynamicCache, LogitsProcessorList, TemperatureLogitsWarper

from eff_shared.errors import check_choice, check_positive, check_type
from eff_shared.progress import track

__all__ = [
    "AcceptanceHead",
    "Alignment",
    "CrossVocabTranslator",
    "HybridDistillationLoss",
    "NGramCache",
    "OnlineDistiller",
    "OracleDrafter",
    "SpeculativeOutput",
    "Translation",
    "distill_drafter",
    "omnidraft_decoding_loop",
    "omnidraft_generate",
    "token_byte_forms",
]

_RESIDUALS = ("exact", "eq2")


# ---------------------------------------------------------------------------------------------
# Token byte forms


def _gpt2_byte_decoder() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}


def _backend_json(tokenizer: Any) -> dict | None:
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    to_str = getattr(backend, "to_str", None)
    if not callable(to_str):
        return None
    try:
        return json.loads(to_str())
    except (TypeError, ValueError):
        return None


def _scheme(tokenizer: Any, vocab: dict[str, int]) -> str:
    """'bytelevel', 'sentencepiece' or 'plain': how token strings encode bytes."""
    spec = _backend_json(tokenizer)
    if spec is not None:
        text = json.dumps(spec.get("decoder"))
        if '"ByteLevel"' in text:
            return "bytelevel"
        if "ByteFallback" in text or "Metaspace" in text or "\u2581" in text:
            return "sentencepiece"
        return "plain"
    if any("\u2581" in t for t in vocab):
        return "sentencepiece"
    if any("\u0120" in t for t in vocab):
        return "bytelevel"
    return "plain"


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", None) or [])
    decoder = getattr(tokenizer, "get_added_tokens_decoder", None)
    if callable(decoder):
        ids |= {i for i, tok in decoder().items() if getattr(tok, "special", True)}
    return ids


def token_byte_forms(tokenizer: Any, name: str = "tokenizer") -> list[bytes | None]:
    """The byte string of every token id (``None`` for special tokens and unused ids).

    Accepts a ``tokenizers.Tokenizer`` or a transformers tokenizer; raises ``TypeError`` when the
    object has no ``get_vocab()``.
    """
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if not callable(get_vocab):
        raise TypeError(
            f"{name} must be a tokenizers.Tokenizer or a transformers tokenizer with get_vocab() "
            f"and encode(), got {type(tokenizer).__name__}"
        )
    vocab: dict[str, int] = get_vocab()
    if not vocab:
        raise ValueError(f"{name} has an empty vocabulary")
    scheme = _scheme(tokenizer, vocab)
    special = _special_ids(tokenizer)
    table = _gpt2_byte_decoder() if scheme == "bytelevel" else {}
    out: list[bytes | None] = [None] * (max(vocab.values()) + 1)
    for tok, idx in vocab.items():
        if idx in special:
            continue
        if scheme == "bytelevel" and all(c in table for c in tok):
            out[idx] = bytes(table[c] for c in tok)
        elif scheme == "sentencepiece" and len(tok) == 6 and tok.startswith("<0x"):
            out[idx] = bytes([int(tok[3:5], 16)])
        elif scheme == "sentencepiece":
            out[idx] = tok.replace("\u2581", " ").encode()
        else:
            out[idx] = tok.encode()
        if out[idx] == b"":
            out[idx] = None
    return out


class _Vocab:
    """Byte forms and ``encode`` of one tokenizer."""

    def __init__(self, tokenizer: Any, name: str):
        self.bytes = token_byte_forms(tokenizer, name)
        encode = getattr(tokenizer, "encode", None)
        if not callable(encode):
            raise TypeError(f"{name} must have an encode() method, got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        self._hf = hasattr(tokenizer, "all_special_ids")
        self.size = len(self.bytes)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._hf:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def to_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self.bytes[i] or b"" if i < self.size else b"" for i in ids)


# ---------------------------------------------------------------------------------------------
# n-gram cache and translator


class NGramCache(MutableMapping):
    """The online n-gram cache C = {(d_1, ..., d_n) → t}, n ≥ 2 (draft ids → target id).

    :meth:`update` inserts only unseen keys (first-seen wins, the paper's rule) and returns how many
    it inserted; ``cache[key] = t`` overwrites. No eviction. Keeps a prefix trie for the
    longest-match translation and the exact proposal distribution.
    """

    def __init__(self, entries: Iterable[tuple[Sequence[int], int]] | None = None):
        self._data: dict[tuple[int, ...], int] = {}
        self._children: dict[tuple[int, ...], set[int]] = {}
        self._tokens: set[int] = set()
        self.version = 0
        if entries is not None:
            self.update(entries)

    @staticmethod
    def _key(key: Any) -> tuple[int, ...]:
        if not isinstance(key, tuple | list) or len(key) < 2:
            raise ValueError(f"an n-gram key must be a tuple of >= 2 draft ids, got {key!r}")
        return tuple(int(k) for k in key)

    def __getitem__(self, key: tuple[int, ...]) -> int:
        return self._data[tuple(key)]

    def __setitem__(self, key: tuple[int, ...], value: int) -> None:
        key = self._key(key)
        self._data[key] = int(value)
        for n in range(len(key)):
            self._children.setdefault(key[:n], set()).add(key[n])
        self._tokens.update(key)
        self.version += 1

    def __delitem__(self, key: tuple[int, ...]) -> None:
        del self._data[tuple(key)]
        items = list(self._data.items())
        self._data.clear()
        self._children.clear()
        self._tokens.clear()
        for k, v in items:
            self[k] = v

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def update(self, entries=(), /, **_: Any) -> int:  # type: ignore[override]
        """Insert the unseen ``(key, target_id)`` pairs (first-seen wins); returns the count."""
        items = entries.items() if isinstance(entries, dict) else entries
        added = 0
        for key, value in items:
            key = self._key(key)
            if key not in self._data:
                self[key] = value
                added += 1
        return added

    def children(self, prefix: tuple[int, ...]) -> set[int]:
        """Next draft ids after ``prefix`` on the way to some key."""
        return self._children.get(prefix, set())

    def extensions(self, prefix: tuple[int, ...], max_len: int) -> list[tuple[int, ...]]:
        """Suffixes s ≠ () with prefix + s a key of length ≤ ``max_len``."""
        out, stack = [], [prefix]
        while stack:
            node = stack.pop()
            for c in self.children(node):
                child = (*node, c)
                if len(child) > max_len:
                    continue
                if child in self._data:
                    out.append(child[len(prefix) :])
                stack.append(child)
        return out

    @property
    def tokens(self) -> set[int]:
        """Draft ids that occur in some key."""
        return self._tokens

    def state_dict(self) -> dict[str, list]:
        return {"keys": [list(k) for k in self._data], "values": list(self._data.values())}

    def load_state_dict(self, state: dict[str, list]) -> None:
        if set(state) != {"keys", "values"} or len(state["keys"]) != len(state["values"]):
            raise ValueError("state must have equally long 'keys' and 'values' lists")
        self._data.clear()
        self._children.clear()
        self._tokens.clear()
        for k, v in zip(state["keys"], state["values"], strict=True):
            self[tuple(k)] = v


@dataclass(frozen=True)
class Translation:
    """A draft proposal translated into target tokens.

    ``draft_spans[i]`` is the ``[start, end)`` range of draft positions merged into
    ``target_ids[i]``; ``kinds[i]`` is ``"direct"`` or ``"ngram"``; ``q_prime[i]`` = Π q(d_j) over the
    span (1.0 when no probabilities were given); ``stopped`` is True when translation stopped at an
    untranslatable draft token (at draft position ``draft_spans[-1][1]``, or 0).
    """

    target_ids: list[int]
    q_prime: list[float]
    kinds: list[str]
    draft_spans: list[tuple[int, int]]
    stopped: bool

    @property
    def consumed(self) -> int:
        return self.draft_spans[-1][1] if self.draft_spans else 0


@dataclass(frozen=True)
class Alignment:
    """Response target tokens aligned to the draft tokenization of the same text (byte offsets).

    ``direct``: ``(draft_pos, target_pos)`` pairs of directly mapped tokens; ``ngram``:
    ``(draft_positions, target_pos)`` for target tokens split into ≥ 2 draft tokens that form an
    n-gram cache entry of that target token; positions index ``draft_ids`` / the full target
    sequence (prompt + response); ``skipped`` counts the other response target tokens (span not a
    union of whole draft tokens, or a merged token without its cache entry).
    """

    draft_ids: list[int]
    direct: list[tuple[int, int]]
    ngram: list[tuple[list[int], int]]
    skipped: int


class CrossVocabTranslator:
    """Direct mapping + n-gram cache between a draft and a target vocabulary (OmniDraft §3.1–3.2).

    ``max_ngram`` bounds the length of cache keys used and inserted; ``suppress_unmappable`` masks,
    while drafting, the draft tokens that neither map directly nor occur in a cache key.
    """

    def __init__(
        self,
        target_tokenizer: Any,
        draft_tokenizer: Any,
        cache: NGramCache | None = None,
        max_ngram: int = 6,
        suppress_unmappable: bool = False,
    ):
        check_positive("max_ngram", max_ngram, integer=True)
        if max_ngram < 2:
            raise ValueError(f"max_ngram must be >= 2 (n-grams have n >= 2), got {max_ngram}")
        check_type("suppress_unmappable", suppress_unmappable, bool)
        if cache is not None:
            check_type("cache", cache, NGramCache)
        self.target = _Vocab(target_tokenizer, "target_tokenizer")
        self.draft = _Vocab(draft_tokenizer, "draft_tokenizer")
        self.cache = cache if cache is not None else NGramCache()
        self.max_ngram = max_ngram
        self.suppress_unmappable = suppress_unmappable
        by_bytes = {b: i for i, b in enumerate(self.target.bytes) if b is not None}
        self.direct: dict[int, int] = {
            d: by_bytes[b]
            for d, b in enumerate(self.draft.bytes)
            if b is not None and b in by_bytes
        }
        if not self.direct and not len(self.cache):
            raise ValueError(
                "no token of the draft vocabulary maps to the target vocabulary (empty intersection "
                "and empty n-gram cache): pass a non-empty cache or tokenizers that share tokens"
            )
        self._dm_draft = torch.tensor(sorted(self.direct), dtype=torch.long)
        self._dm_target = torch.tensor(
            [self.direct[d] for d in sorted(self.direct)], dtype=torch.long
        )
        self._allowed: tuple[int, torch.Tensor] | None = None

    # -- proposals --------------------------------------------------------------------------

    def translate(
        self, draft_ids: Sequence[int], draft_probs: torch.Tensor | None = None
    ) -> Translation:
        """Translate draft tokens left to right: longest cache hit, else direct map, else stop.

        ``draft_probs``: ``(k, V_q)`` drafter distributions or ``(k,)`` probabilities of the drafted
        tokens; q′ of a target token is the product over its span.
        """
        ids = [int(d) for d in draft_ids]
        if draft_probs is not None:
            if draft_probs.ndim == 2:
                token_p = draft_probs[torch.arange(len(ids)), torch.tensor(ids, dtype=torch.long)]
            else:
                token_p = draft_probs
            token_p = token_p.tolist()
            if len(token_p) != len(ids):
                raise ValueError(f"draft_probs has {len(token_p)} rows for {len(ids)} draft tokens")
        else:
            token_p = [1.0] * len(ids)
        targets, qs, kinds, spans = [], [], [], []
        i, stopped = 0, False
        while i < len(ids):
            hit = None
            for n in range(min(self.max_ngram, len(ids) - i), 1, -1):
                key = tuple(ids[i : i + n])
                if key in self.cache:
                    hit = (self.cache[key], n, "ngram")
                    break
            if hit is None and ids[i] in self.direct:
                hit = (self.direct[ids[i]], 1, "direct")
            if hit is None:
                stopped = True
                break
            t, n, kind = hit
            targets.append(t)
            qs.append(math.prod(token_p[i : i + n]))
            kinds.append(kind)
            spans.append((i, i + n))
            i += n
        return Translation(targets, qs, kinds, spans, stopped)

    def map_distribution(self, q: torch.Tensor, target_size: int) -> torch.Tensor:
        """A draft distribution (..., V_q) moved to target space through the direct mapping."""
        out = q.new_zeros((*q.shape[:-1], target_size))
        if len(self._dm_draft):
            dm_t = self._dm_target.to(q.device)
            out.index_add_(-1, dm_t, q.index_select(-1, self._dm_draft.to(q.device)))
        return out

    def eq2_distribution(
        self,
        q_first: torch.Tensor,
        target_size: int,
        ngram: tuple[int, int, float] | None = None,
    ) -> torch.Tensor:
        """The paper's Eq. 2 proposal distribution over V_p at one position: q on directly mapped
        tokens; with an n-gram ``(first_draft_id, target_id, Π q)`` drafted here, Π q moves from the
        first sub-token's target token to the n-gram's target token."""
        r = self.map_distribution(q_first, target_size)
        if ngram is not None:
            first, tid, prob = ngram
            if first in self.direct:
                r[self.direct[first]] = (r[self.direct[first]] - prob).clamp_min(0.0)
            r[tid] += prob
        return r

    def allowed_draft_mask(self, size: int, device: torch.device) -> torch.Tensor:
        """Draft tokens that can be translated (direct map or part of a cache key)."""
        if self._allowed is None or self._allowed[0] != self.cache.version:
            mask = torch.zeros(size, dtype=torch.bool)
            ids = [i for i in set(self.direct) | self.cache.tokens if i < size]
            mask[torch.tensor(ids, dtype=torch.long)] = True
            self._allowed = (self.cache.version, mask)
        return self._allowed[1].to(device)

    # -- reverse translation (cache update) and alignment -----------------------------------

    def _spans(self, vocab: _Vocab, ids: Sequence[int]) -> list[tuple[int, int]]:
        spans, pos = [], 0
        for i in ids:
            n = len(vocab.bytes[i] or b"") if i < vocab.size else 0
            spans.append((pos, pos + n))
            pos += n
        return spans

    def _draft_cover(
        self, text_bytes: bytes
    ) -> tuple[list[int], dict[int, int], dict[int, int]] | None:
        """Draft tokenization of ``text_bytes`` with start-offset → index and end-offset → index."""
        try:
            text = text_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return None
        d_ids = self.draft.encode(text)
        got = self.draft.to_bytes(d_ids)
        # SentencePiece-style drafters (Metaspace, Llama's "▁") prepend a space to text that does
        # not start with one: the draft tokens then cover b" " + text, one byte ahead of it.
        shift = 1 if got != text_bytes and got == b" " + text_bytes else 0
        if got[shift:] != text_bytes:
            return None
        spans = [(s - shift, e - shift) for s, e in self._spans(self.draft, d_ids)]
        starts = {s: j for j, (s, e) in enumerate(spans) if e > s and s >= 0}
        ends = {e: j for j, (s, e) in enumerate(spans) if e > s and e > 0}
        return d_ids, starts, ends

    def reverse(
        self, ctx_target_ids: Sequence[int], new_target_ids: Sequence[int], context: int = 16
    ) -> int:
        """Add the n-grams of the newly committed target tokens to the cache (Algorithm 1).

        The text of a left context (back to the last token starting with whitespace among the
        previous ``context`` tokens) plus the new tokens is re-tokenized with the draft tokenizer;
        each new target token whose byte span is exactly covered by n ∈ [2, max_ngram] draft
        tokens gives the entry (d_1..d_n) → t. Returns the number of inserted entries.
        """
        ctx = [int(t) for t in ctx_target_ids][-context:]
        new = [int(t) for t in new_target_ids]
        if not new:
            return 0
        start = 0
        for j in range(len(ctx) - 1, -1, -1):
            b = self.target.bytes[ctx[j]] if ctx[j] < self.target.size else None
            if b and b[:1].isspace():
                start = j
                break
        window = ctx[start:] + new
        cover = self._draft_cover(self.target.to_bytes(window))
        if cover is None:
            return 0
        d_ids, starts, ends = cover
        spans = self._spans(self.target, window)
        pairs = []
        n_ctx = len(window) - len(new)
        for t, (s, e) in zip(window[n_ctx:], spans[n_ctx:], strict=True):
            if e == s or s not in starts or e not in ends:
                continue
            i, j = starts[s], ends[e]
            if 2 <= j - i + 1 <= self.max_ngram:
                pairs.append((tuple(d_ids[i : j + 1]), t))
        return self.cache.update(pairs)

    def align(
        self, prompt_target_ids: Sequence[int], response_target_ids: Sequence[int]
    ) -> Alignment:
        """Align the response's target tokens to the draft tokenization of prompt + response text
        (byte offsets from token-by-token decoding). A target token covered by one draft token is
        a DM position; one covered by n ≥ 2 draft tokens is an n-gram position only when those
        draft tokens are a cache entry mapping to it (I_Ngram of Eq. 4), else it is skipped."""
        ids = [int(t) for t in prompt_target_ids] + [int(t) for t in response_target_ids]
        n_prompt = len(ids) - len(response_target_ids)
        cover = self._draft_cover(self.target.to_bytes(ids))
        if cover is None:
            return Alignment([], [], [], len(response_target_ids))
        d_ids, starts, ends = cover
        spans = self._spans(self.target, ids)
        direct, ngram, skipped = [], [], 0
        for pos in range(n_prompt, len(ids)):
            s, e = spans[pos]
            if e == s or s not in starts or e not in ends or starts[s] == 0:
                skipped += 1
                continue
            i, j = starts[s], ends[e]
            if i == j:
                if self.direct.get(d_ids[i]) == ids[pos]:
                    direct.append((i, pos))
                else:
                    skipped += 1
            elif self.cache.get(tuple(d_ids[i : j + 1])) == ids[pos]:
                ngram.append((list(range(i, j + 1)), pos))
            else:  # a merged token without its cache entry: neither DM nor n-gram
                skipped += 1
        return Alignment(d_ids, direct, ngram, skipped)


# ---------------------------------------------------------------------------------------------
# Drafters


class AcceptanceHead(nn.Module):
    """SpecDec++ acceptance head: P(accept_i | previous accepted) = σ(f_φ(e_i)) on the drafter hidden
    state e_i that produced draft token i (a 1-hidden-layer MLP; the architecture is ours)."""

    def __init__(self, hidden_size: int, width: int = 64):
        super().__init__()
        check_positive("hidden_size", hidden_size, integer=True)
        check_positive("width", width, integer=True)
        self.net = nn.Sequential(nn.Linear(hidden_size, width), nn.GELU(), nn.Linear(width, 1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of acceptance, shape ``hidden.shape[:-1]``."""
        return self.net(hidden).squeeze(-1)


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


# ---------------------------------------------------------------------------------------------
# Hybrid distillation and the online distiller


class HybridDistillationLoss(nn.Module):
    """OmniDraft's hybrid distillation loss (Eq. 3–4).

    L = [Σ_{DM} KL(q′_θ ‖ p)(t_i | x) − Σ_{n-gram} λ_i Σ_j log q_θ(d_ij | x)] / #counted target tokens,
    q′_θ = the drafter distribution moved to target space over the vocabulary intersection; with
    ``renormalize_intersection`` q′ and p are renormalised over the intersection (our choice; the
    paper leaves it unstated), else both are the raw (sub-)probabilities. ``lam`` is a constant
    (0 gives the L_DM-only baseline) or ``"target_prob"`` (λ_i = p(t_i), detached).
    """

    def __init__(
        self, lam: float | Literal["target_prob"] = 1.0, renormalize_intersection: bool = True
    ):
        super().__init__()
        if lam != "target_prob":
            check_positive("lam", lam, strict=False)
        self.lam = lam
        self.renormalize_intersection = renormalize_intersection

    def forward(
        self,
        draft_logits: torch.Tensor,
        target_logits: torch.Tensor,
        alignment: Alignment,
        translator: CrossVocabTranslator,
        target_ids: Sequence[int],
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``draft_logits[j]`` predicts ``alignment.draft_ids[j]`` (row j = drafter output at j − 1;
        row 0 unused), ``target_logits[i]`` predicts ``target_ids[i]`` likewise."""
        zero = draft_logits.sum() * 0.0
        kl_sum, nll_sum = zero, zero
        n_dm, n_ng = len(alignment.direct), len(alignment.ngram)
        if n_dm:
            dpos = torch.tensor([a for a, _ in alignment.direct], device=draft_logits.device)
            tpos = torch.tensor([b for _, b in alignment.direct], device=target_logits.device)
            dm_d = translator._dm_draft.to(draft_logits.device)
            dm_t = translator._dm_target.to(target_logits.device)
            zq = draft_logits[dpos][:, dm_d].float()
            zp = target_logits[tpos][:, dm_t].float().to(draft_logits.device)
            if self.renormalize_intersection:
                lq, lp = torch.log_softmax(zq, -1), torch.log_softmax(zp, -1)
            else:
                lq = torch.log_softmax(draft_logits[dpos].float(), -1)[:, dm_d]
                lp = torch.log_softmax(target_logits[tpos].float(), -1)[:, dm_t].to(lq.device)
            kl_sum = (lq.exp() * (lq - lp)).sum()
        if n_ng:
            logq = torch.log_softmax(draft_logits.float(), -1)
            logp = (
                torch.log_softmax(target_logits.float(), -1) if self.lam == "target_prob" else None
            )
            terms = []
            for dps, tp in alignment.ngram:
                ids = torch.tensor([alignment.draft_ids[j] for j in dps], device=logq.device)
                nll = -logq[torch.tensor(dps, device=logq.device), ids].sum()
                if logp is not None:
                    lam = logp[tp, int(target_ids[tp])].exp().detach().to(nll.device)
                else:
                    lam = float(self.lam)
                terms.append(lam * nll)
            nll_sum = torch.stack(terms).sum()
        count = max(n_dm + n_ng, 1)
        loss = (kl_sum + nll_sum) / count
        return loss, {
            "kl": float(kl_sum.detach()) / max(n_dm, 1),
            "nll": float(nll_sum.detach()) / max(n_ng, 1),
            "direct": n_dm,
            "ngram": n_ng,
        }


@dataclass
class _Example:
    ids: list[int]  # prompt + response target ids
    alignment: Alignment
    target_logits: torch.Tensor


def _prepare(target, translator, examples) -> list[_Example]:
    dev = next(target.parameters()).device
    out = []
    with torch.no_grad():
        for prompt, response in examples:
            prompt, response = [int(t) for t in prompt], [int(t) for t in response]
            al = translator.align(prompt, response)
            if not al.draft_ids:
                continue
            ids = prompt + response
            logits = target(input_ids=torch.tensor([ids], device=dev)).logits[0].float()
            # row i predicts token i: shift by one (row 0 unused)
            shifted = torch.cat([logits[:1] * 0, logits[:-1]], 0)
            out.append(_Example(ids, al, shifted))
    return out


def _draft_forward(drafter, ex: _Example, hidden: bool = False):
    dev = next(drafter.parameters()).device
    out = drafter(
        input_ids=torch.tensor([ex.alignment.draft_ids], device=dev), output_hidden_states=hidden
    )
    logits = out.logits[0]
    shifted = torch.cat([logits[:1] * 0, logits[:-1]], 0)
    if not hidden:
        return shifted, None
    h = out.hidden_states[-1][0]
    return shifted, torch.cat([h[:1] * 0, h[:-1]], 0)


def _head_targets(
    ex: _Example, draft_logits: torch.Tensor, translator
) -> tuple[list[int], torch.Tensor]:
    """Soft labels min(1, p(y)/q(y)) for the draft positions of one example (see module doc)."""
    with torch.no_grad():
        q = torch.softmax(draft_logits.float(), -1)
        p = torch.softmax(ex.target_logits.float(), -1).to(q.device)
        pos, labels = [], []
        for j, i in ex.alignment.direct:
            pos.append(j)
            labels.append(
                min(
                    1.0, float(p[i, ex.ids[i]]) / max(float(q[j, ex.alignment.draft_ids[j]]), 1e-12)
                )
            )
        for dps, i in ex.alignment.ngram:
            qq = math.prod(float(q[j, ex.alignment.draft_ids[j]]) for j in dps)
            lab = min(1.0, float(p[i, ex.ids[i]]) / max(qq, 1e-12))
            for j in dps:
                pos.append(j)
                labels.append(lab)
    return pos, torch.tensor(labels)


def _weighted_bce(
    logits: torch.Tensor, labels: torch.Tensor, rejection_weight: float
) -> torch.Tensor:
    ls = torch.nn.functional.logsigmoid(logits)
    l1 = torch.nn.functional.logsigmoid(-logits)
    return -(labels * ls + rejection_weight * (1 - labels) * l1).mean()


def distill_drafter(
    drafter: nn.Module,
    target: nn.Module,
    translator: CrossVocabTranslator,
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    loss: HybridDistillationLoss | None = None,
    epochs: int = 1,
    lr: float = 1e-4,
    batch_size: int = 8,
    weight_decay: float = 0.0,
    optimizer: torch.optim.Optimizer | None = None,
    seed: int = 0,
) -> list[float]:
    """Offline hybrid distillation on speculative-decoding outputs ``(prompt_ids, response_ids)``
    (target ids): AdamW (0.9, 0.999), seeded shuffling; returns the loss per step."""
    check_positive("epochs", epochs, integer=True)
    check_positive("batch_size", batch_size, integer=True)
    check_positive("lr", lr)
    if not examples:
        raise ValueError("examples must not be empty")
    loss = loss if loss is not None else HybridDistillationLoss()
    prepared = _prepare(target, translator, examples)
    if not prepared:
        raise ValueError("no example could be aligned to the draft tokenizer")
    opt = optimizer or torch.optim.AdamW(
        drafter.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay
    )
    gen = torch.Generator().manual_seed(seed)
    drafter.train()
    history = []
    for _ in track(range(epochs), "OmniDraft distillation (epochs)"):
        order = torch.randperm(len(prepared), generator=gen).tolist()
        for b in range(0, len(order), batch_size):
            batch = [prepared[k] for k in order[b : b + batch_size]]
            total = 0.0
            opt.zero_grad(set_to_none=True)
            for ex in batch:
                dl, _ = _draft_forward(drafter, ex)
                value, _ = loss(dl, ex.target_logits, ex.alignment, translator, ex.ids)
                (value / len(batch)).backward()
                total += float(value.detach()) / len(batch)
            opt.step()
            history.append(total)
    drafter.eval()
    return history


class OnlineDistiller:
    """Online (on-policy) drafter updates during speculative decoding (Algorithm 2), with optional
    acceptance-head training (Algorithms 3–4).

    :meth:`observe` buffers each ``(prompt, response)`` from SD; every ``update_interval`` prompts
    the drafter takes one epoch of :class:`HybridDistillationLoss` steps over the buffer, which is
    then cleared. With an ``acceptance_head``: ``"joint"`` takes one head step per drafter step on
    the same batch; ``"interleaved"`` pushes the buffer into a replay buffer of at most
    ``buffer_size`` examples (oldest evicted) and takes ``head_updates`` head steps on random
    mini-batches of it after each drafter update.
    """

    def __init__(
        self,
        drafter: nn.Module,
        translator: CrossVocabTranslator,
        optimizer: torch.optim.Optimizer,
        *,
        target: nn.Module,
        loss: HybridDistillationLoss | None = None,
        update_interval: int = 8,
        schedule: Literal["joint", "interleaved"] = "joint",
        acceptance_head: AcceptanceHead | None = None,
        head_optimizer: torch.optim.Optimizer | None = None,
        buffer_size: int = 256,
        head_updates: int = 4,
        batch_size: int = 8,
        rejection_weight: float = 1.0,
        seed: int = 0,
    ):
        check_positive("update_interval", update_interval, integer=True)
        check_choice("schedule", schedule, ["joint", "interleaved"])
        check_positive("buffer_size", buffer_size, integer=True)
        check_positive("head_updates", head_updates, integer=True)
        check_positive("batch_size", batch_size, integer=True)
        check_positive("rejection_weight", rejection_weight)
        if acceptance_head is not None and head_optimizer is None:
            raise ValueError("head_optimizer is required with acceptance_head")
        self.drafter, self.translator, self.optimizer, self.target = (
            drafter,
            translator,
            optimizer,
            target,
        )
        self.loss = loss or HybridDistillationLoss()
        self.update_interval, self.schedule = update_interval, schedule
        self.head, self.head_optimizer = acceptance_head, head_optimizer
        self.replay: deque[tuple[torch.Tensor, torch.Tensor]] = deque(maxlen=buffer_size)
        self.head_updates, self.batch_size, self.rejection_weight = (
            head_updates,
            batch_size,
            rejection_weight,
        )
        self.queue: list[tuple[list[int], list[int]]] = []
        self.gen = torch.Generator().manual_seed(seed)
        self.history: dict[str, list[float]] = {"drafter": [], "head": []}
        self.updates = 0

    def observe(self, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> bool:
        """Buffer one SD output; run an update when the buffer holds ``update_interval`` prompts."""
        self.queue.append(([int(t) for t in prompt_ids], [int(t) for t in response_ids]))
        if len(self.queue) >= self.update_interval:
            self.update()
            return True
        return False

    def _head_step(self, feats: torch.Tensor, labels: torch.Tensor) -> float:
        assert self.head is not None and self.head_optimizer is not None
        self.head.train()
        loss = _weighted_bce(self.head(feats), labels.to(feats.device), self.rejection_weight)
        self.head_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.head_optimizer.step()
        self.head.eval()
        return float(loss.detach())

    def update(self) -> None:
        """One epoch over the buffered examples, then clear the buffer."""
        if not self.queue:
            return
        prepared = _prepare(self.target, self.translator, self.queue)
        self.queue = []
        order = torch.randperm(len(prepared), generator=self.gen).tolist()
        want_h = self.head is not None
        self.drafter.train()
        for b in range(0, len(order), self.batch_size):
            batch = [prepared[k] for k in order[b : b + self.batch_size]]
            self.optimizer.zero_grad(set_to_none=True)
            total, feats, labels = 0.0, [], []
            for ex in batch:
                dl, hid = _draft_forward(self.drafter, ex, hidden=want_h)
                value, _ = self.loss(dl, ex.target_logits, ex.alignment, self.translator, ex.ids)
                (value / len(batch)).backward()
                total += float(value.detach()) / len(batch)
                if want_h:
                    pos, lab = _head_targets(ex, dl.detach(), self.translator)
                    if pos:
                        f = hid.detach()[torch.tensor(pos)]
                        feats.append(f)
                        labels.append(lab)
                        self.replay.append((f, lab))
            self.optimizer.step()
            self.history["drafter"].append(total)
            if want_h and feats and self.schedule == "joint":
                self.history["head"].append(self._head_step(torch.cat(feats), torch.cat(labels)))
        self.drafter.eval()
        if want_h and self.schedule == "interleaved" and self.replay:
            for _ in range(self.head_updates):
                idx = torch.randint(
                    0,
                    len(self.replay),
                    (min(self.batch_size, len(self.replay)),),
                    generator=self.gen,
                )
                f = torch.cat([self.replay[i][0] for i in idx.tolist()])
                lab = torch.cat([self.replay[i][1] for i in idx.tolist()])
                self.history["head"].append(self._head_step(f, lab))
        self.updates += 1
