"""OmniDraft's vocabularies, online n-gram cache and cross-vocabulary translator (§3.1–3.2,
Algorithm 1): token byte forms, :class:`NGramCache`, :class:`CrossVocabTranslator` with its
:class:`Translation` (draft → target, longest cache hit first) and :class:`Alignment` (response
target tokens on the draft tokenization, for distillation). The method is described in
:mod:`eff_llm.omnidraft`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from eff_shared.errors import check_positive, check_type

__all__ = [
    "Alignment",
    "CrossVocabTranslator",
    "NGramCache",
    "Translation",
    "token_byte_forms",
]


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
