"""Torch parts of :mod:`eff_theory.pnn_identifiability` (extra ``eff-theory[torch]``).

:class:`PolynomialNetwork` is the (biased) hPNN f(x) = W_L ρ(⋯ρ(W_1 x + b_1)⋯) + b_L with
ρ_r(t) = t^r, in float64 by default; :func:`shallow_tensor_from_function` reads the partially
symmetric tensor T = ∇^r f / r! of a black-box homogeneous degree-r map by nested
``torch.func.jacfwd`` (exact for a homogeneous polynomial: the r-th derivative is constant).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from eff_shared.errors import check_int
from eff_theory.pnn_identifiability import check_architecture

__all__ = ["PolynomialNetwork", "shallow_tensor_from_function"]


class PolynomialNetwork(nn.Module):
    """Polynomial neural network with widths (d_0, …, d_L) and hidden degrees (r_1, …, r_{L−1}).

    Weights start i.i.d. N(0, 1/d_{ℓ−1}) from ``torch.Generator().manual_seed(seed)`` (a fresh random
    seed when ``seed`` is None). ``weights[ℓ]`` is W_{ℓ+1} of shape (d_{ℓ+1}, d_ℓ).
    """

    def __init__(
        self,
        widths: Sequence[int],
        degrees: Sequence[int] | int,
        bias: bool = False,
        seed: int | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        self.widths, self.degrees = check_architecture(widths, degrees)
        gen = torch.Generator()
        gen.manual_seed(seed if seed is not None else int(torch.seed() % 2**63))
        self.weights = nn.ParameterList(
            nn.Parameter(torch.randn(d_out, d_in, generator=gen, dtype=dtype) / math.sqrt(d_in))
            for d_in, d_out in zip(self.widths[:-1], self.widths[1:], strict=True)
        )
        self.biases: nn.ParameterList | None = None
        if bias:
            self.biases = nn.ParameterList(
                nn.Parameter(torch.randn(d, generator=gen, dtype=dtype)) for d in self.widths[1:]
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x of shape (..., d_0) → (..., d_L)."""
        h = x
        for layer, W in enumerate(self.weights):
            h = h @ W.T
            if self.biases is not None:
                h = h + self.biases[layer]
            if layer < len(self.degrees):
                h = h ** self.degrees[layer]
        return h


def shallow_tensor_from_function(
    f: Callable[[torch.Tensor], torch.Tensor], d0: int, r: int
) -> np.ndarray:
    """T = ∇^r f / r! of a map f: R^{d0} → R^{d2}, homogeneous of degree r, as a numpy array of
    shape (d0,)*r + (d2,) — the tensor :func:`~eff_theory.pnn_identifiability.identify_shallow`
    takes. Evaluated at x = 0 by r nested ``torch.func.jacfwd`` (exact for polynomials), on the
    device and in the dtype of ``f``'s parameters when ``f`` is a module."""
    d0 = check_int("d0", d0, minimum=1)
    r = check_int("r", r, minimum=1)
    # Evaluate where the model lives: device and dtype of its first parameter (CPU float64 otherwise).
    first = next(f.parameters(), None) if isinstance(f, nn.Module) else None
    kw = (
        {"device": first.device, "dtype": first.dtype}
        if first is not None
        else {"dtype": torch.float64}
    )
    g = f
    for _ in range(r):
        g = torch.func.jacfwd(g)
    with warnings.catch_warnings(), torch.no_grad():
        # torch's forward-mode AD loads its JVP decompositions through the deprecated
        # torch.jit.script on first use; that FutureWarning is torch-internal, not ours.
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
        D = g(torch.zeros(d0, **kw))
    if D.dim() != r + 1:
        raise ValueError(
            f"f must map a vector of size d0 to a vector; got a derivative of shape {tuple(D.shape)}"
        )
    return np.moveaxis(D.detach().cpu().numpy(), 0, -1) / math.factorial(r)
