"""Synthetic tasks shared by the eff-llm reproductions (all generated, nothing downloaded).

- **Modular arithmetic** (DEFT, LoRASuite): prompts ``[a, op, b, SEP]`` (or ``[a, b, SEP]`` without the
  operator token) whose next token is ``(a op b) mod 16``. Token ids: numbers ``0..15``, ``+`` = 16,
  ``-`` = 17, ``SEP`` = 18; ids ``19..vocab_size-1`` are unused. :func:`arithmetic_table` gives all
  256 pairs, :func:`arithmetic_vocab` the string vocabulary (for LoRASuite's vocabulary matching).
- **Clustered regression** (S'MoRE): :func:`clustered_regression` — x = c_g + c_j + 0.5·ε with a group
  g and a sub-group j, and a teacher whose weight update depends on (g, j), so no single low-rank
  update (LoRA) can fit it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from eff_shared.errors import check_choice, check_positive

__all__ = [
    "MINUS",
    "MODULUS",
    "PLUS",
    "SEP",
    "ClusteredRegression",
    "arithmetic_table",
    "arithmetic_vocab",
    "clustered_regression",
]

MODULUS = 16
PLUS, MINUS, SEP = 16, 17, 18
_OPS = {"+": PLUS, "-": MINUS}


def arithmetic_table(
    op: Literal["+", "-"] = "+", *, with_op_token: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """All 256 prompts of ``(a op b) mod 16`` and their answers: ``(input_ids (256, L), labels (256,))``."""
    check_choice("op", op, list(_OPS))
    a, b = torch.meshgrid(torch.arange(MODULUS), torch.arange(MODULUS), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    sep = torch.full_like(a, SEP)
    cols = [a, torch.full_like(a, _OPS[op]), b, sep] if with_op_token else [a, b, sep]
    labels = (a + b) % MODULUS if op == "+" else (a - b) % MODULUS
    return torch.stack(cols, dim=1), labels


def arithmetic_vocab(vocab_size: int = 64) -> dict[str, int]:
    """The string vocabulary of the arithmetic tasks: numbers, ``+``, ``-``, ``<sep>``, ``<unused_i>``."""
    check_positive("vocab_size", vocab_size, integer=True)
    if vocab_size < SEP + 1:
        raise ValueError(f"vocab_size must be >= {SEP + 1}, got {vocab_size}")
    vocab = {str(i): i for i in range(MODULUS)}
    vocab.update({"+": PLUS, "-": MINUS, "<sep>": SEP})
    vocab.update({f"<unused_{i}>": i for i in range(SEP + 1, vocab_size)})
    return vocab


@dataclass(frozen=True)
class ClusteredRegression:
    """Teacher and sampler of :func:`clustered_regression` (all tensors float32)."""

    dim: int
    groups: int
    noise: float
    centers_g: torch.Tensor  # (G, D)
    centers_j: torch.Tensor  # (G, D) sub-group centres
    w0: torch.Tensor  # (D, D) frozen base weight
    delta_g: torch.Tensor  # (G, D, D) rank-2 group updates
    delta_j: torch.Tensor  # (G, D, D) rank-2 sub-group updates
    delta_gj: torch.Tensor  # (G, G, D, D) rank-1 pair updates

    def sample(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` pairs ``(x, y)`` with y = (W0 + ΔW_g + ΔW_j + ΔW_gj) x."""
        g = torch.randint(0, self.groups, (n,), generator=generator)
        j = torch.randint(0, self.groups, (n,), generator=generator)
        eps = torch.randn(n, self.dim, generator=generator)
        x = self.centers_g[g] + self.centers_j[j] + self.noise * eps
        w = self.w0 + self.delta_g[g] + self.delta_j[j] + self.delta_gj[g, j]
        return x, torch.einsum("nod,nd->no", w, x)


DELTA_NORMS = ("frobenius", "per_direction")


def clustered_regression(
    dim: int = 32,
    groups: int = 4,
    noise: float = 0.5,
    delta_scale: float = 1.0,
    seed: int = 0,
    *,
    centre_scale: float = 1.0,
    delta_norm: Literal["frobenius", "per_direction"] = "frobenius",
) -> ClusteredRegression:
    """The S'MoRE toy teacher (spec): x = c_g + c_j + noise·ε, g, j ∈ {0..groups-1}, and
    y = W0 x + ΔW_g x + ΔW_j x + ΔW_{gj} x with rank-2 group / sub-group and rank-1 pair deltas.

    Centres are ``centre_scale`` × standard Gaussian vectors, W0 has N(0, 1/dim) entries and each
    rank-k delta is ``delta_scale · U Vᵀ / n`` with standard Gaussian U, V ∈ R^{dim×k} and
    n = √(k·dim) for ``delta_norm="frobenius"`` (every delta has entries of variance 1/dim, whatever
    its rank) or n = dim for ``"per_direction"`` (every rank-one direction has |u||v|/dim ≈ 1, so a
    rank-2 delta carries twice the energy of a rank-1 one). The spec fixes neither scale; the
    reproduction calibrates them on its baselines (see :mod:`eff_llm.reproduce.smore`).
    """
    check_positive("dim", dim, integer=True)
    check_positive("groups", groups, integer=True)
    check_positive("noise", noise, strict=False)
    check_positive("delta_scale", delta_scale)
    check_positive("centre_scale", centre_scale)
    check_choice("delta_norm", delta_norm, list(DELTA_NORMS))
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    def low_rank(rank: int, *lead: int) -> torch.Tensor:
        u, v = randn(*lead, dim, rank), randn(*lead, dim, rank)
        norm = (rank * dim) ** 0.5 if delta_norm == "frobenius" else dim
        return delta_scale * (u @ v.transpose(-1, -2)) / norm

    return ClusteredRegression(
        dim=dim,
        groups=groups,
        noise=noise,
        centers_g=centre_scale * randn(groups, dim),
        centers_j=centre_scale * randn(groups, dim),
        w0=randn(dim, dim) / dim**0.5,
        delta_g=low_rank(2, groups),
        delta_j=low_rank(2, groups),
        delta_gj=low_rank(1, groups, groups),
    )
