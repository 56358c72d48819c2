"""Offline text corpus and BPE tokenizers for the language-modelling reproductions and pipelines
(nothing downloaded).

The spec's corpus: docstrings of ~90 Python standard-library modules gathered with :mod:`inspect`
(module, class, function and method docstrings, de-duplicated, in a fixed order), about 345 KB of
English technical prose. Docstrings depend on the Python version, so reproductions report
:func:`corpus_sha256` and their thresholds carry margin.

- :func:`stdlib_docstrings` — the docstrings (cached; of :data:`STDLIB_MODULES` or of other modules);
- :func:`train_bpe` — a ByteLevel BPE ``tokenizers.Tokenizer`` trained with ``BpeTrainer`` (deterministic);
- :func:`docstring_lm_data` — the corpus tokenized with a BPE of a given vocabulary size, split 90/10 by
  position into train/validation token streams (cached per vocabulary size);
- :func:`lm_windows` — seeded random ``(batch, seq_len)`` windows of a token stream;
- :func:`validation_windows` — the deterministic non-overlapping windows of a validation stream.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import warnings
from dataclasses import dataclass
from functools import lru_cache

import torch

from eff_shared.errors import check_fraction, check_positive

__all__ = [
    "STDLIB_MODULES",
    "LMData",
    "corpus_sha256",
    "docstring_lm_data",
    "lm_windows",
    "stdlib_docstrings",
    "tokenized_lm_data",
    "train_bpe",
    "validation_windows",
]

# A fixed list (import order is irrelevant: docstrings are sorted by qualified name per module).
STDLIB_MODULES: tuple[str, ...] = (
    "abc", "argparse", "ast", "asyncio", "base64", "bisect", "bz2", "calendar", "cmd", "code",
    "codecs", "collections", "colorsys", "concurrent.futures", "configparser", "contextlib",
    "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "dis", "doctest", "email",
    "enum", "filecmp", "fileinput", "fnmatch", "fractions", "ftplib", "functools", "getopt",
    "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "html", "http.client", "imaplib",
    "inspect", "io", "ipaddress", "itertools", "json", "keyword", "linecache", "locale",
    "logging", "lzma", "mailbox", "mimetypes", "numbers", "operator", "optparse", "os",
    "pathlib", "pickle", "pkgutil", "platform", "plistlib", "poplib", "pprint", "queue",
    "quopri", "random", "re", "reprlib", "sched", "secrets", "selectors", "shelve", "shlex",
    "shutil", "smtplib", "socket", "socketserver", "statistics", "string", "struct",
    "subprocess", "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize",
    "traceback", "typing", "unittest", "urllib.parse", "uuid", "warnings", "weakref",
    "zipfile",
)  # fmt: skip


@lru_cache(maxsize=4)
def stdlib_docstrings(
    min_chars: int = 80, modules: tuple[str, ...] = STDLIB_MODULES
) -> tuple[str, ...]:
    """Module, class, function and method docstrings (≥ ``min_chars`` characters, first occurrence
    kept, sorted by name within each module) of ``modules`` (default :data:`STDLIB_MODULES`)."""
    check_positive("min_chars", min_chars, integer=True)
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise TypeError(f"modules must be a tuple of module names, got {modules!r}")
    seen: set[str] = set()
    out: list[str] = []

    def add(doc: str | None) -> None:
        if doc and len(doc) >= min_chars and doc not in seen:
            seen.add(doc)
            out.append(doc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few modules warn on import or attribute access
        for name in modules:
            try:
                mod = importlib.import_module(name)
            except ImportError:  # a minimal Python build may lack one; the hash records it
                continue
            add(inspect.getdoc(mod))
            members = sorted(vars(mod).items())
            for attr, obj in members:
                if attr.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                    continue
                if inspect.isclass(obj):
                    add(inspect.getdoc(obj))
                    for _, meth in sorted(vars(obj).items()):
                        if inspect.isfunction(meth):
                            add(inspect.getdoc(meth))
                elif inspect.isfunction(obj):
                    add(inspect.getdoc(obj))
    return tuple(out)


def corpus_sha256(texts: tuple[str, ...] | None = None) -> str:
    """sha256 of the corpus (default :func:`stdlib_docstrings`), joined by blank lines."""
    texts = stdlib_docstrings() if texts is None else texts
    return hashlib.sha256("\n\n".join(texts).encode()).hexdigest()


def train_bpe(texts: tuple[str, ...] | list[str], vocab_size: int):
    """A ByteLevel BPE ``tokenizers.Tokenizer`` of ``vocab_size`` tokens trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    check_positive("vocab_size", vocab_size, integer=True)
    if vocab_size < 257:
        raise ValueError(f"vocab_size must be >= 257 (256 bytes + merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=[],
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


@dataclass(frozen=True)
class LMData:
    """A tokenized corpus: train/validation token streams (int64) and the tokenizer."""

    train: torch.Tensor
    val: torch.Tensor
    vocab_size: int
    tokenizer: object
    sha256: str


@lru_cache(maxsize=4)
def docstring_lm_data(vocab_size: int = 1200, val_fraction: float = 0.1) -> LMData:
    """The docstring corpus tokenized with a BPE of ``vocab_size``, split by position into
    train (first 1 − ``val_fraction``) and validation token streams. The BPE is trained on the
    training part only."""
    check_fraction("val_fraction", val_fraction, closed=False)
    texts = stdlib_docstrings()
    cut = round(len(texts) * (1 - val_fraction))
    train_texts, val_texts = texts[:cut], texts[cut:]
    tok = train_bpe(train_texts, vocab_size)

    def stream(part: tuple[str, ...]) -> torch.Tensor:
        return torch.tensor(
            [i for e in tok.encode_batch(list(part)) for i in e.ids], dtype=torch.long
        )

    return LMData(
        train=stream(train_texts),
        val=stream(val_texts),
        vocab_size=tok.get_vocab_size(),
        tokenizer=tok,
        sha256=corpus_sha256(texts),
    )


def tokenized_lm_data(tokenizer, val_fraction: float = 0.1) -> LMData:
    """The docstring corpus tokenized with a user's ``tokenizers.Tokenizer`` (no special tokens),
    split by position as :func:`docstring_lm_data` (the tokenizer is used as given, not trained)."""
    from tokenizers import Tokenizer

    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
    check_fraction("val_fraction", val_fraction, closed=False)
    texts = stdlib_docstrings()
    cut = round(len(texts) * (1 - val_fraction))

    def stream(part: tuple[str, ...]) -> torch.Tensor:
        enc = tokenizer.encode_batch(list(part), add_special_tokens=False)
        return torch.tensor([i for e in enc for i in e.ids], dtype=torch.long)

    return LMData(
        train=stream(texts[:cut]),
        val=stream(texts[cut:]),
        vocab_size=tokenizer.get_vocab_size(),
        tokenizer=tokenizer,
        sha256=corpus_sha256(texts),
    )


def lm_windows(
    stream: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator
) -> torch.Tensor:
    """``(batch_size, seq_len)`` windows of ``stream`` at uniformly random offsets."""
    check_positive("batch_size", batch_size, integer=True)
    check_positive("seq_len", seq_len, integer=True)
    if len(stream) <= seq_len:
        raise ValueError(
            f"seq_len={seq_len} must be shorter than the stream ({len(stream)} tokens)"
        )
    starts = torch.randint(0, len(stream) - seq_len, (batch_size,), generator=generator)
    return torch.stack([stream[s : s + seq_len] for s in starts.tolist()])


def validation_windows(stream: torch.Tensor, seq_len: int, max_windows: int) -> torch.Tensor:
    """The first ``max_windows`` non-overlapping ``seq_len`` windows of ``stream``."""
    check_positive("seq_len", seq_len, integer=True)
    check_positive("max_windows", max_windows, integer=True)
    n = min(max_windows, len(stream) // seq_len)
    if n == 0:
        raise ValueError(f"seq_len={seq_len} is longer than the stream ({len(stream)} tokens)")
    return stream[: n * seq_len].view(n, seq_len)
