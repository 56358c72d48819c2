"""Nemotron-Flash's latency look-up table (§2.4; item 3 of :mod:`eff_llm.nemotron_flash`):
:class:`HybridArch` (operators and hidden size), :class:`LatencyLUT` (measured or synthetic
per-operator decode latencies) and :func:`decode_latency`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from eff_llm.nemotron_flash.model import MIXERS, HybridSLM, HybridSLMConfig, parse_operators
from eff_shared.errors import check_positive
from eff_shared.torch import seeded

__all__ = ["HybridArch", "LatencyLUT", "decode_latency"]


@dataclass(frozen=True)
class HybridArch:
    """A concrete architecture: operator sequence and hidden size (the LUT's unit)."""

    operators: tuple[str, ...]
    hidden_size: int

    @property
    def num_mixers(self) -> int:
        return sum(o in MIXERS for o in self.operators)


@dataclass
class LatencyLUT:
    """Per-operator decode latency (ms per token) by hidden size, plus a per-hidden-size overhead.

    ``table[(op, hidden)]`` and ``overhead[hidden]``; build it with :meth:`measure` (timed on this
    device) or directly (a synthetic LUT). ``predict`` interpolates linearly between hidden sizes.
    """

    table: dict[tuple[str, int], float]
    overhead: dict[int, float] = field(default_factory=dict)
    device: str = "synthetic"
    seq_len: int = 0

    def hidden_sizes(self) -> list[int]:
        return sorted({h for _, h in self.table})

    def _at(self, values: dict[int, float], hidden: int) -> float:
        hs = sorted(values)
        if hidden in values:
            return values[hidden]
        if not hs or hidden < hs[0] or hidden > hs[-1]:
            raise ValueError(f"hidden size {hidden} is outside the LUT's range {hs}")
        return float(np.interp(hidden, hs, [values[h] for h in hs]))

    def op_latency(self, op: str, hidden: int) -> float:
        values = {h: t for (o, h), t in self.table.items() if o == op}
        if not values:
            raise ValueError(
                f"operator {op!r} is not in the LUT (has {sorted({o for o, _ in self.table})})"
            )
        return self._at(values, hidden)

    def predict(self, arch: HybridArch) -> float:
        """Predicted decode latency (ms/token) of ``arch``: overhead + Σ per-operator latencies."""
        base = self._at(self.overhead, arch.hidden_size) if self.overhead else 0.0
        return base + sum(self.op_latency(o, arch.hidden_size) for o in arch.operators)

    @classmethod
    def measure(
        cls,
        ops: Sequence[str] = ("a", "d", "m2", "f"),
        hidden_sizes: Sequence[int] = (64, 128),
        device: str | torch.device = "cpu",
        seq_len: int = 64,
        decode_tokens: int = 8,
        repeats: int = 3,
        window: int = 32,
        seed: int = 0,
    ) -> LatencyLUT:
        """Time single-token decode after a ``seq_len`` prefill on ``device``: per operator,
        (t(3 blocks) − t(1 block)) / 2; overhead = t(1 block of ``f``) − LUT[f]. Median of ``repeats``."""
        ops = parse_operators(list(ops))
        table: dict[tuple[str, int], float] = {}
        overhead: dict[int, float] = {}
        for h in hidden_sizes:
            check_positive("hidden_sizes", h, integer=True)
            one: dict[str, float] = {}
            for op in dict.fromkeys([*ops, "f"]):
                t1 = decode_latency([op], h, device, seq_len, decode_tokens, repeats, window, seed)
                t3 = decode_latency(
                    [op] * 3, h, device, seq_len, decode_tokens, repeats, window, seed
                )
                table[(op, h)] = max((t3 - t1) / 2, 0.0)
                one[op] = t1
            overhead[h] = max(one["f"] - table[("f", h)], 0.0)
        table = {k: v for k, v in table.items() if k[0] in ops}
        return cls(table=table, overhead=overhead, device=str(device), seq_len=seq_len)


def _lut_config(operators: Sequence[str], hidden: int, window: int) -> HybridSLMConfig:
    heads = max(1, hidden // 32)
    return HybridSLMConfig(
        operators=list(operators),
        hidden_size=hidden,
        ffn_size=2 * hidden,
        num_heads=heads,
        window=window if "swa" in operators else None,
        vocab_size=256,
        mamba_head_dim=min(32, 2 * hidden),
        deltanet_heads=heads,
        deltanet_head_dim=hidden // heads,
    )


@torch.no_grad()
def decode_latency(
    operators: Sequence[str],
    hidden: int,
    device: str | torch.device = "cpu",
    seq_len: int = 64,
    decode_tokens: int = 8,
    repeats: int = 3,
    window: int = 32,
    seed: int = 0,
    model: HybridSLM | None = None,
) -> float:
    """Median wall time (ms) of one cached single-token decode step of a (seeded) hybrid model."""
    dev = torch.device(device)
    if model is None:
        with seeded(seed):
            model = HybridSLM(_lut_config(operators, hidden, window))
    model = model.to(dev).eval()
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), generator=gen).to(dev)
    times = []
    for _ in range(repeats):
        cache = DynamicCache(config=model.config)
        out = model(input_ids=ids, cache=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        model(input_ids=nxt, cache=cache, use_cache=True)  # warm-up step
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        for _ in range(decode_tokens):
            out = model(input_ids=nxt, cache=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(1000 * (time.perf_counter() - start) / decode_tokens)
    return float(np.median(times))
