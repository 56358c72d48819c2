"""Synthetic tasks shared by the eff-llm reproductions (all generated, nothing downloaded).

- **Modular arithmetic** (DEFT, LoRASuite): prompts ``[a, op, b, SEP]`` (or ``[a, b, SEP]`` without the
  operator token) whose next token is ``(a op b) mod 16``. Token ids: numbers ``0..15``, ``+`` = 16,
  ``-`` = 17, ``SEP`` = 18; ids ``19..vocab_size-1`` are unused. :func:`arithmetic_table` gives all
  256 pairs, :func:`arithmetic_vocab` the string vocabulary (for LoRASuite's vocabulary matching).
- **Hierarchical regression** (S'MoRE): :func:`hierarchical_regression` (public as
  ``eff_llm.smore.hierarchical_regression``) — x = Σ_l c^l_{z_l} + 0.5·ε with one cluster per level
  (default: a group g and a sub-group j), and a teacher whose weight update depends on the clusters
  and their path, so no single low-rank update (LoRA) can fit it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from eff_shared.errors import check_choice, check_positive

__all__ = [
    "MINUS",
    "MODULUS",
    "PLUS",
    "SEP",
    "HierarchicalRegression",
    "arithmetic_table",
    "arithmetic_vocab",
    "hierarchical_regression",
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
class HierarchicalRegression:
    """Teacher and sampler of :func:`hierarchical_regression` (all tensors float32).

    Level l (0-based) has ``groups[l]`` clusters; a sample belongs to one cluster per level,
    z = (z_0, …, z_{L−1}), and to the path of prefixes (z_0), (z_0, z_1), ….
    """

    dim: int
    groups: tuple[int, ...]
    noise: float
    centres: tuple[torch.Tensor, ...]  # per level l: (groups[l], D)
    w0: torch.Tensor  # (D, D) frozen base weight
    level_deltas: tuple[torch.Tensor, ...]  # per level l: (groups[l], D, D), rank level_rank
    # per prefix length k = 2 … L: (groups[0], …, groups[k-1], D, D), rank path_rank
    path_deltas: tuple[torch.Tensor, ...]

    @property
    def levels(self) -> int:
        return len(self.groups)

    def weight(self, z: torch.Tensor) -> torch.Tensor:
        """The teacher's weight W0 + Σ_l ΔW^l_{z_l} + Σ_{k≥2} ΔW_{z_0…z_{k−1}} per row of ``z``
        (n, L) → (n, D, D)."""
        w = self.w0
        for lvl, delta in enumerate(self.level_deltas):
            w = w + delta[z[:, lvl]]
        for k, delta in enumerate(self.path_deltas, start=2):
            w = w + delta[tuple(z[:, i] for i in range(k))]
        return w

    def sample(
        self, n: int, generator: torch.Generator, *, return_clusters: bool = False
    ) -> tuple[torch.Tensor, ...]:
        """``n`` pairs ``(x, y)``: x = Σ_l c^l_{z_l} + noise·ε, y = W(z) x; with
        ``return_clusters=True`` also z (n, L)."""
        z = torch.stack(
            [torch.randint(0, g, (n,), generator=generator) for g in self.groups], dim=1
        )
        eps = torch.randn(n, self.dim, generator=generator)
        x = self.centres[0][z[:, 0]]
        for lvl in range(1, self.levels):
            x = x + self.centres[lvl][z[:, lvl]]
        x = x + self.noise * eps
        y = torch.einsum("nod,nd->no", self.weight(z), x)
        return (x, y, z) if return_clusters else (x, y)


DELTA_NORMS = ("frobenius", "per_direction")


def hierarchical_regression(
    levels: int = 2,
    groups: int | Sequence[int] = 4,
    dim: int = 32,
    noise: float = 0.5,
    delta_scale: float = 1.0,
    seed: int = 0,
    *,
    centre_scale: float = 1.0,
    delta_norm: Literal["frobenius", "per_direction"] = "frobenius",
    level_rank: int = 2,
    path_rank: int = 1,
) -> HierarchicalRegression:
    """S'MoRE's toy teacher (spec, "Reproduction"), with any number of levels.

    A sample has one cluster z_l ∈ {0..groups[l]−1} per level; its input is
    x = Σ_l c^l_{z_l} + noise·ε and its target y = (W0 + Σ_l ΔW^l_{z_l} + Σ_{k=2}^{L} ΔW_{z_0…z_{k−1}}) x:
    a rank-``level_rank`` delta per cluster of each level and a rank-``path_rank`` delta per path
    prefix of length ≥ 2 (so the update depends on the whole hierarchy and no single low-rank update,
    i.e. LoRA, can fit it). The default (L = 2, 4 groups) is the spec's two-level task: group g,
    sub-group j, rank-2 ΔW_g and ΔW_j and rank-1 ΔW_gj, bit-identical to the task the reproduction
    has always used. ``groups`` is one count for every level or one per level; the path deltas hold
    Σ_{k=2}^{L} Π_{l<k} groups[l] matrices of D×D.

    Centres are ``centre_scale`` × standard Gaussian vectors, W0 has N(0, 1/dim) entries and each
    rank-k delta is ``delta_scale · U Vᵀ / n`` with standard Gaussian U, V ∈ R^{dim×k} and
    n = √(k·dim) for ``delta_norm="frobenius"`` (every delta has entries of variance 1/dim, whatever
    its rank) or n = dim for ``"per_direction"`` (every rank-one direction has |u||v|/dim ≈ 1, so a
    rank-2 delta carries twice the energy of a rank-1 one). The spec fixes neither scale; the
    reproduction calibrates them on its baselines (see :mod:`eff_llm.reproduce.smore`).
    """
    check_positive("levels", levels, integer=True)
    if isinstance(groups, bool) or not isinstance(groups, int | Sequence):
        raise TypeError(f"groups must be an int or a sequence of ints, got {groups!r}")
    sizes = (groups,) * levels if isinstance(groups, int) else tuple(groups)
    if len(sizes) != levels:
        raise ValueError(f"groups must hold one count per level ({levels}), got {groups!r}")
    for g in sizes:
        check_positive("groups", g, integer=True)
    check_positive("dim", dim, integer=True)
    check_positive("noise", noise, strict=False)
    check_positive("delta_scale", delta_scale)
    check_positive("centre_scale", centre_scale)
    check_choice("delta_norm", delta_norm, list(DELTA_NORMS))
    for name, rank in (("level_rank", level_rank), ("path_rank", path_rank)):
        check_positive(name, rank, integer=True)
        if rank > dim:
            raise ValueError(f"{name} must be <= dim={dim}, got {rank}")
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    def low_rank(rank: int, *lead: int) -> torch.Tensor:
        u, v = randn(*lead, dim, rank), randn(*lead, dim, rank)
        norm = (rank * dim) ** 0.5 if delta_norm == "frobenius" else dim
        return delta_scale * (u @ v.transpose(-1, -2)) / norm

    # Draw order (centres, W0, level deltas, path deltas) keeps the two-level default identical to
    # the original generator's.
    centres = tuple(centre_scale * randn(g, dim) for g in sizes)
    w0 = randn(dim, dim) / dim**0.5
    level_deltas = tuple(low_rank(level_rank, g) for g in sizes)
    path_deltas = tuple(low_rank(path_rank, *sizes[:k]) for k in range(2, levels + 1))
    return HierarchicalRegression(
        dim=dim,
        groups=sizes,
        noise=noise,
        centres=centres,
        w0=w0,
        level_deltas=level_deltas,
        path_deltas=path_deltas,
    )
