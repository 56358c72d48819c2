"""Identifiability of deep polynomial neural networks: exact dimensions, verdicts, shallow recovery.

K. Usevich, R. Borsoi, C. Dérand, M. Clausel, "Identifiability of Deep Polynomial Neural Networks",
NeurIPS 2025 (arXiv 2506.17093). The paper's theorem statements could not be read; the conditions
here are derived and checked numerically (see the eff-theory spec), so none of them is labelled as a
theorem of the paper. Anchors: Kileel–Trager–Bruna 2019 (finite-field Jacobian ranks) and Finkel et
al. 2024 (activation thresholds).

* hPNN f_θ(x) = W_L ρ_{r_{L−1}}(W_{L−1} ⋯ ρ_{r_1}(W_1 x)), ρ_r(t) = t^r entrywise, W_ℓ ∈ R^{d_ℓ×d_{ℓ−1}}:
  d_L homogeneous forms of degree R = Π r_ℓ in d_0 variables (biased PNN: ρ(W_ℓ h + b_ℓ), degree ≤ R).
* Symmetries per hidden layer: permutation and scaling (W_ℓ, W_{ℓ+1}) → (PDW_ℓ, W_{ℓ+1}D^(−r_ℓ)Pᵀ),
  s = Σ_{ℓ<L} d_ℓ. Neurovariety dimension = generic rank of the Jacobian of θ ↦ f_θ; expected
  dimension min(P − s, ambient), P = Σ d_ℓ d_{ℓ−1} (biased: Σ d_ℓ(d_{ℓ−1}+1)), ambient
  d_L·C(d_0+R−1, R) (biased: d_L·C(d_0+R, R)). **Finitely identifiable ⇔ dim = P − s.**
* The dimension is computed **exactly** in modular arithmetic, as KTB did: integer parameters and
  points mod a prime p < 2³¹ (products fit in int64), the Jacobian of the evaluation map at
  C(d_0+R−1, R) + 5 points by forward mode, rank by Gaussian elimination mod p. rank_p ≤ rank_Q(J(θ))
  ≤ generic rank ≤ P − s, so rank_p = P − s certifies finite identifiability; a lower rank_p on
  independent trials (other seeds and primes) is strong, probabilistic (Schwartz–Zippel) evidence of
  a defect. Float64 SVD ranks are unreliable once R ≥ 8 (``method="float"`` only for comparison).
* Shallow link: f(x) = W_2(W_1x)^r ↔ the partially symmetric tensor T = Σ_k w_k^{⊗r} ⊗ v_k (rows w_k
  of W_1, columns v_k of W_2); Kruskal gives uniqueness if r·k(W_1ᵀ) + k(W_2) ≥ 2d_1 + r, generically
  k(W_1ᵀ) = min(d_0, d_1), k(W_2) = min(d_2, d_1). Deep pyramidal networks (d_0 ≥ … ≥ d_{L−2}) have
  Zariski-dense block inputs, so every block (d_{ℓ−1}, d_ℓ, d_{ℓ+1}; r_ℓ) is checked as a shallow
  network (localisation). For expanding widths per-block checks are **wrong**: (2,4,6,7) r=(4,2)
  passes every block but has rank 60 < P − s = 64.
* :func:`identify_shallow` recovers (W_1, W_2) from T by simultaneous diagonalisation (Jennrich) on a
  grouping of the r+1 modes into (s1, s2, s3 + output).

The torch parts (:class:`PolynomialNetwork`, :func:`shallow_tensor_from_function`, ∇^r f / r! by
nested ``torch.func.jacfwd``) need the extra ``eff-theory[torch]`` and load lazily.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.optimize

from eff_shared.errors import check_int
from eff_theory._runtime import RngLike
from eff_theory._torch_extra import import_torch_part

__all__ = [
    "DEFAULT_PRIME",
    "IdentifiabilityReport",
    "alignment_error",
    "ambient_dimension",
    "check_architecture",
    "check_identifiability",
    "evaluation_jacobian",
    "expected_dimension",
    "identify_shallow",
    "jacobian_ranks",
    "kruskal_block_condition",
    "neurovariety_dimension",
    "num_parameters",
    "rank_mod_p",
    "shallow_tensor",
    "symmetry_dimension",
]

#: The default prime (largest below 2³¹ − 18), as in KTB-style finite-field rank computations.
DEFAULT_PRIME = 2_147_483_629

# Torch-only names (not in __all__, so a star import never pulls torch in).
_TORCH_NAMES = ("PolynomialNetwork", "shallow_tensor_from_function")


def __getattr__(name: str) -> Any:
    # The torch parts load on first use, so importing this module never imports torch.
    if name in _TORCH_NAMES:
        module = import_torch_part(
            "eff_theory._pnn_torch", f"eff_theory.pnn_identifiability.{name}"
        )
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- architecture checks


def _int_like(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer)


def _check_widths(widths: Any) -> tuple[int, ...]:
    try:
        ws = tuple(widths)
    except TypeError:
        raise ValueError(f"widths must be a sequence of ints, got {widths!r}") from None
    if len(ws) < 2:
        raise ValueError(f"widths must hold at least 2 layer widths (d_0, ..., d_L), got {ws!r}")
    if not all(_int_like(w) and w >= 1 for w in ws):
        raise ValueError(f"every width must be an integer >= 1, got {ws!r}")
    return tuple(int(w) for w in ws)


def check_architecture(widths: Any, degrees: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validated (widths, degrees); an int degree is shorthand for the same degree in every layer."""
    ws = _check_widths(widths)
    if _int_like(degrees):
        degrees = (degrees,) * (len(ws) - 2)
    try:
        rs = tuple(degrees)
    except TypeError:
        raise ValueError(f"degrees must be an int or a sequence of ints, got {degrees!r}") from None
    if len(rs) != len(ws) - 2:
        raise ValueError(
            f"len(degrees) must be len(widths) - 2 = {len(ws) - 2} (one per hidden layer), got {len(rs)}"
        )
    if not all(_int_like(r) and r >= 1 for r in rs):
        raise ValueError(f"every degree must be an integer >= 1, got {rs!r}")
    return ws, tuple(int(r) for r in rs)


def num_parameters(widths: Sequence[int], bias: bool = False) -> int:
    """P = Σ_ℓ d_ℓ d_{ℓ−1} (biased: Σ_ℓ d_ℓ (d_{ℓ−1} + 1))."""
    ws = _check_widths(widths)
    return sum(ws[i] * (ws[i - 1] + int(bias)) for i in range(1, len(ws)))


def symmetry_dimension(widths: Sequence[int]) -> int:
    """s = Σ of the hidden widths (one scaling per hidden neuron)."""
    ws = _check_widths(widths)
    return sum(ws[1:-1])


def ambient_dimension(
    widths: Sequence[int], degrees: Sequence[int] | int, bias: bool = False
) -> int:
    """d_L·C(d_0+R−1, R) (forms of degree R = Π r_ℓ) or, biased, d_L·C(d_0+R, R)."""
    ws, rs = check_architecture(widths, degrees)
    R = math.prod(rs)
    return ws[-1] * math.comb(ws[0] + R - (0 if bias else 1), R)


def expected_dimension(
    widths: Sequence[int], degrees: Sequence[int] | int, bias: bool = False
) -> int:
    """min(P − s, ambient dimension)."""
    return min(
        num_parameters(widths, bias) - symmetry_dimension(widths),
        ambient_dimension(widths, degrees, bias),
    )


# --------------------------------------------------------------------------- exact ranks mod p


def _is_prime(n: int) -> bool:
    """Deterministic Miller–Rabin for n < 3.3·10²⁴."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    if n in small:
        return True
    if any(n % q == 0 for q in small):
        return False
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _check_prime(prime: Any) -> int:
    if not _int_like(prime) or not _is_prime(int(prime)) or prime >= 2**31:
        raise ValueError(
            f"prime must be a prime below 2**31 (so products fit in int64), got {prime!r}"
        )
    return int(prime)


def _previous_prime(n: int) -> int:
    n -= 1
    while n >= 2 and not _is_prime(n):
        n -= 1
    if n < 2:
        raise ValueError(
            "ran out of primes below the given prime; use a larger prime or fewer trials"
        )
    return n


def rank_mod_p(matrix: Any, prime: int = DEFAULT_PRIME) -> int:
    """Rank over GF(p) of an integer matrix, by Gaussian elimination in int64 (p < 2³¹)."""
    p = _check_prime(prime)
    A = np.array(matrix, dtype=np.int64) % p
    if A.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {A.shape}")
    n_rows, n_cols = A.shape
    rank = 0
    for col in range(n_cols):
        if rank == n_rows:
            break
        nz = np.flatnonzero(A[rank:, col])
        if nz.size == 0:
            continue
        piv = rank + int(nz[0])
        if piv != rank:
            A[[rank, piv]] = A[[piv, rank]]
        inv = pow(int(A[rank, col]), p - 2, p)
        A[rank, col:] = A[rank, col:] * inv % p
        below = A[rank + 1 :, col]
        rows = rank + 1 + np.flatnonzero(below)
        if rows.size:
            f = A[rows, col][:, None]
            A[rows, col:] = (A[rows, col:] - f * A[rank, col:] % p) % p
        rank += 1
    return rank


def _matmul_mod(W: np.ndarray, H: np.ndarray, p: int) -> np.ndarray:
    """(W @ H) mod p for W (m, n) and H (..., n, M), reducing after every product (no overflow)."""
    out = np.zeros((*H.shape[:-2], W.shape[0], H.shape[-1]), dtype=np.int64)
    for j in range(W.shape[1]):
        out = (out + W[:, j, None] * H[..., j, None, :] % p) % p
    return out


def _pow_mod(z: np.ndarray, e: int, p: int) -> np.ndarray:
    out = np.ones_like(z)
    for _ in range(e):
        out = out * z % p
    return out


def evaluation_jacobian(
    ws: tuple[int, ...],
    rs: tuple[int, ...],
    bias: bool,
    params: list[tuple[np.ndarray, np.ndarray | None]],
    X: np.ndarray,
    p: int | None,
) -> np.ndarray:
    """Jacobian (d_L·M, P) of θ ↦ (f_θ(x_m))_m by forward mode; mod p, or float when p is None.

    The tangent tensor dh[q] = ∂h/∂θ_q has shape (P, d_ℓ, M); parameters are ordered W_1 (row-major),
    b_1, W_2, b_2, ….
    """
    P = num_parameters(ws, bias)
    M = X.shape[1]
    mod = (lambda a: a % p) if p is not None else (lambda a: a)
    mm = (lambda W, H: _matmul_mod(W, H, p)) if p is not None else (lambda W, H: W @ H)
    h = X
    dh = np.zeros((P, ws[0], M), dtype=X.dtype)
    offset = 0
    for layer, (W, b) in enumerate(params):
        d_out, d_in = W.shape
        z = mm(W, h)
        dz = mm(W, dh)
        rows, cols = np.indices((d_out, d_in)).reshape(2, -1)
        idx = offset + np.arange(d_out * d_in)
        dz[idx, rows, :] = mod(dz[idx, rows, :] + h[cols, :])
        offset += d_out * d_in
        if b is not None:
            z = mod(z + b[:, None])
            bidx = offset + np.arange(d_out)
            dz[bidx, np.arange(d_out), :] = mod(dz[bidx, np.arange(d_out), :] + 1)
            offset += d_out
        if layer == len(params) - 1:
            return dz.reshape(P, -1).T
        r = rs[layer]
        if p is not None:
            h = _pow_mod(z, r, p)
            dh = r * _pow_mod(z, r - 1, p) % p * dz % p
        else:
            h = z**r
            dh = r * z ** (r - 1) * dz
    raise AssertionError("unreachable")


def _draw(
    ws: tuple[int, ...], bias: bool, M: int, gen: np.random.Generator, p: int | None
) -> tuple[list[tuple[np.ndarray, np.ndarray | None]], np.ndarray]:
    def sample(shape: tuple[int, ...]) -> np.ndarray:
        if p is None:
            return gen.standard_normal(shape)
        return gen.integers(1, p, size=shape, dtype=np.int64)

    params = [
        (sample((ws[i], ws[i - 1])), sample((ws[i],)) if bias else None) for i in range(1, len(ws))
    ]
    return params, sample((ws[0], M))


def jacobian_ranks(
    widths: Sequence[int],
    degrees: Sequence[int] | int,
    bias: bool = False,
    method: Literal["modp", "float"] = "modp",
    prime: int = DEFAULT_PRIME,
    trials: int = 2,
    seed: RngLike = 0,
    max_rows: int = 50_000,
) -> list[int]:
    """The Jacobian rank of each trial: mod ``prime``, then mod the next smaller primes (``"modp"``),
    or float64 SVD ranks (``"float"``); every trial draws fresh parameters and points."""
    ws, rs = check_architecture(widths, degrees)
    if method not in ("modp", "float"):
        raise ValueError(f"method must be one of ['modp', 'float'], got {method!r}")
    trials = check_int("trials", trials, minimum=1)
    max_rows = check_int("max_rows", max_rows, minimum=1)
    p = _check_prime(prime)
    R = math.prod(rs)
    monomials = math.comb(ws[0] + R - (0 if bias else 1), R)
    M = monomials + 5
    if ws[-1] * M > max_rows:
        raise ValueError(
            f"the Jacobian would have d_L * (monomials + 5) = {ws[-1]} * ({monomials} + 5) = "
            f"{ws[-1] * M} rows ({monomials} monomials of degree {R} in {ws[0]} variables), "
            f"above max_rows={max_rows}"
        )
    if method == "float" and R >= 6:
        warnings.warn(
            f"float rank unreliable at total degree R={R} >= 6, use method='modp'",
            UserWarning,
            stacklevel=2,
        )
    gen = np.random.default_rng(seed)
    ranks = []
    for _ in range(trials):
        if method == "float":
            params, X = _draw(ws, bias, M, gen, None)
            ranks.append(
                int(np.linalg.matrix_rank(evaluation_jacobian(ws, rs, bias, params, X, None)))
            )
            continue
        params, X = _draw(ws, bias, M, gen, p)
        ranks.append(rank_mod_p(evaluation_jacobian(ws, rs, bias, params, X, p), p))
        p = _previous_prime(p)
    return ranks


def neurovariety_dimension(
    widths: Sequence[int],
    degrees: Sequence[int] | int,
    bias: bool = False,
    method: Literal["modp", "float"] = "modp",
    prime: int = DEFAULT_PRIME,
    trials: int = 2,
    seed: RngLike = 0,
    max_rows: int = 50_000,
) -> int:
    """Dimension of the neurovariety: the largest Jacobian rank over ``trials`` (see :func:`jacobian_ranks`).

    With ``"modp"`` every rank is a certified lower bound of the generic rank, and the result equals
    it unless every trial hit a Schwartz–Zippel exception (probability ≲ deg/p per trial).
    """
    return max(jacobian_ranks(widths, degrees, bias, method, prime, trials, seed, max_rows))


# --------------------------------------------------------------------------- verdicts


def kruskal_block_condition(d_in: int, d_hidden: int, d_out: int, r: int) -> bool:
    """Kruskal's condition r·k(W_1ᵀ) + k(W_2) ≥ 2·d_hidden + r at generic weights.

    k(W_1ᵀ) = min(d_in, d_hidden), k(W_2) = min(d_out, d_hidden); a single hidden neuron (rank-one
    tensor) is always unique up to scaling.
    """
    for name, v in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out), ("r", r)):
        check_int(name, v, minimum=1)
    if d_hidden == 1:
        return True
    return r * min(d_in, d_hidden) + min(d_out, d_hidden) >= 2 * d_hidden + r


Verdict = Literal["identifiable", "finitely_identifiable", "not_identifiable", "unknown"]


@dataclass
class IdentifiabilityReport:
    """Verdict of :func:`check_identifiability` with the evidence behind it."""

    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    expected_dim: int = 0
    dim: int | None = None
    block_ok: list[bool] = field(default_factory=list)
    dense_inputs: bool = False
    params_minus_symmetries: int = 0
    ambient_dim: int = 0
    ranks: list[int] = field(default_factory=list)


def check_identifiability(
    widths: Sequence[int],
    degrees: Sequence[int] | int,
    bias: bool = False,
    numeric: bool = True,
    **dim_kw: Any,
) -> IdentifiabilityReport:
    """Decide (finite) identifiability of the architecture at generic weights.

    Order: (1) ``not_identifiable`` if P − s > ambient dimension, or some r_ℓ = 1 with d_ℓ ≥ 2
    (a GL symmetry), or the exact rank_p < P − s on every trial; (2) ``identifiable`` if block inputs
    are dense (d_0 ≥ … ≥ d_{L−2}; always for shallow networks) and every block passes Kruskal
    (homogeneous networks only); (3) ``finitely_identifiable`` if rank_p = P − s; (4) ``unknown``.
    ``dim_kw`` go to :func:`jacobian_ranks` (prime, trials, seed, max_rows); ``numeric=False`` skips
    the rank computation.
    """
    ws, rs = check_architecture(widths, degrees)
    P = num_parameters(ws, bias)
    s = symmetry_dimension(ws)
    ambient = ambient_dimension(ws, rs, bias)
    blocks = [kruskal_block_condition(ws[i], ws[i + 1], ws[i + 2], rs[i]) for i in range(len(rs))]
    dense = all(ws[i] >= ws[i + 1] for i in range(len(ws) - 3))  # d_0 ≥ … ≥ d_{L−2}
    report = IdentifiabilityReport(
        verdict="unknown",
        expected_dim=min(P - s, ambient),
        block_ok=blocks,
        dense_inputs=dense,
        params_minus_symmetries=P - s,
        ambient_dim=ambient,
    )
    reasons = report.reasons
    if P - s > ambient:
        reasons.append(f"parameter count: P - s = {P - s} exceeds the ambient dimension {ambient}")
    linear = [i + 1 for i, r in enumerate(rs) if r == 1 and ws[i + 1] >= 2]
    if linear:
        reasons.append(f"degree 1 in hidden layer(s) {linear} of width >= 2: a GL symmetry")
    if numeric:
        report.ranks = jacobian_ranks(ws, rs, bias, **dim_kw)
        report.dim = max(report.ranks)
        if report.dim < P - s:
            reasons.append(
                f"exact Jacobian rank {report.ranks} < P - s = {P - s} on every trial (defective)"
            )
    if reasons:
        report.verdict = "not_identifiable"
        return report
    if not bias and dense and all(blocks):
        report.verdict = "identifiable"
        reasons.append(
            "dense block inputs (non-increasing widths up to d_{L-2}) and every 2-layer block "
            "passes Kruskal: unique up to permutation and scaling"
        )
    elif report.dim is not None and report.dim == P - s:
        report.verdict = "finitely_identifiable"
        reasons.append(
            f"exact Jacobian rank = P - s = {P - s}: finitely identifiable (uniqueness not certified)"
        )
    else:
        reasons.append("no sufficient condition applies (run with numeric=True for the exact rank)")
    return report


# --------------------------------------------------------------------------- shallow tensors


def shallow_tensor(W1: Any, W2: Any, r: int) -> np.ndarray:
    """T = Σ_k w_k^{⊗r} ⊗ v_k of shape (d_0,)*r + (d_2,), with w_k the rows of W1 (d_1, d_0) and v_k
    the columns of W2 (d_2, d_1); contracting x into the first r modes gives W2 (W1 x)^r."""
    W1 = _float_matrix("W1", W1)
    W2 = _float_matrix("W2", W2)
    r = check_int("r", r, minimum=1)
    if W2.shape[1] != W1.shape[0]:
        raise ValueError(f"W2 must have d_1 = {W1.shape[0]} columns, got shape {W2.shape}")
    d1, d0 = W1.shape
    terms = W2.T  # (d1, d2)
    for _ in range(r):
        terms = W1.reshape((d1, d0) + (1,) * (terms.ndim - 1)) * terms[:, None]
    return terms.sum(axis=0)


def _float_matrix(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a finite 2-D array, got shape {arr.shape}")
    return arr


def _check_tensor(T: Any, tol: float) -> tuple[np.ndarray, int, int, int]:
    T = np.asarray(T, dtype=np.float64)
    if T.ndim < 2 or not np.all(np.isfinite(T)):
        raise ValueError(f"T must be a finite tensor of shape (d0,)*r + (d2,), got shape {T.shape}")
    r, d0, d2 = T.ndim - 1, T.shape[0], T.shape[-1]
    if any(n != d0 for n in T.shape[:r]):
        raise ValueError(f"the first r = {r} modes of T must have equal size, got {T.shape}")
    scale = max(float(np.linalg.norm(T)), np.finfo(float).tiny)
    for i in range(r - 1):  # adjacent transpositions generate the symmetric group
        if np.linalg.norm(T - np.swapaxes(T, i, i + 1)) > tol * scale:
            raise ValueError(
                f"T is not partially symmetric in its first r = {r} modes (modes {i} and {i + 1} "
                f"differ beyond tol={tol})"
            )
    return T, r, d0, d2


def _jennrich_grouping(r: int, d0: int, d1: int, d2: int) -> tuple[int, int, int] | None:
    """(s1, s2, s3) with C(d0+s−1, s) ≥ d1 for the first two groups and a third group of k-rank ≥ 2."""
    options = []
    for s1 in range(1, r):
        for s2 in range(s1, r - s1 + 1):
            s3 = r - s1 - s2
            full_rank = all(math.comb(d0 + g - 1, g) >= d1 for g in (s1, s2))
            distinct = d1 == 1 or (s3 >= 1 and d0 >= 2) or d2 >= 2
            if full_rank and distinct:
                options.append((max(s1, s2), s1 + s2, (s1, s2, s3)))
    return min(options)[2] if options else None


def identify_shallow(
    T: Any,
    hidden_width: int,
    method: Literal["jennrich", "als"] = "jennrich",
    seed: RngLike = 0,
    *,
    tol: float = 1e-8,
    als_iterations: int = 2000,
) -> tuple[np.ndarray, np.ndarray]:
    """Recover (W1, W2) of f(x) = W2 (W1 x)^r from its tensor T, up to permutation and scaling.

    ``"jennrich"``: group the r+1 modes as (s1, s2, s3 + output), reshape T into a 3-way tensor
    Σ_k a_k ⊗ b_k ⊗ c_k with a_k = w_k^{⊗s1}, project onto the column spaces of the first two
    unfoldings, and read a_k off the eigenvectors of T_a T_b⁻¹ (two random contractions of the
    third mode); w_k is the rank-one factor of a_k, and W2 follows by least squares. Exact for
    generic weights when a grouping exists. ``"als"``: CP-ALS from a random start, **no guarantee**
    (it failed on the spec's hard cases). ``tol`` bounds the relative asymmetry accepted in T.
    """
    hidden_width = check_int("hidden_width", hidden_width, minimum=1)
    if method not in ("jennrich", "als"):
        raise ValueError(f"method must be one of ['jennrich', 'als'], got {method!r}")
    T, r, d0, d2 = _check_tensor(T, tol)
    d1 = int(hidden_width)
    gen = np.random.default_rng(seed)
    if method == "als":
        W1 = _cp_als_first_factor(T, d1, als_iterations, gen)
    else:
        grouping = _jennrich_grouping(r, d0, d1, d2)
        if grouping is None:
            raise ValueError(
                f"no Jennrich grouping exists for d0={d0}, d1={d1}, d2={d2}, r={r} (needs s1, s2 >= 1 "
                "with C(d0+s-1, s) >= d1 and a third group of k-rank >= 2); method='als' runs but has "
                "no recovery guarantee"
            )
        W1 = _jennrich_first_factor(T, d1, grouping, gen)
    Phi = np.stack([_outer_power(w, r).ravel() for w in W1], axis=1)  # (d0^r, d1)
    V = np.linalg.lstsq(Phi, T.reshape(-1, d2), rcond=None)[0]  # (d1, d2)
    return W1, V.T


def _outer_power(w: np.ndarray, r: int) -> np.ndarray:
    out = w
    for _ in range(r - 1):
        out = np.multiply.outer(out, w)
    return out


def _rank_one_vector(a: np.ndarray, d0: int) -> np.ndarray:
    u = np.linalg.svd(a.reshape(d0, -1), full_matrices=False)[0][:, 0]
    return u / np.linalg.norm(u)


def _jennrich_first_factor(
    T: np.ndarray, d1: int, grouping: tuple[int, int, int], gen: np.random.Generator
) -> np.ndarray:
    s1, s2, _ = grouping
    d0 = T.shape[0]
    n1, n2 = d0**s1, d0**s2
    T3 = T.reshape(n1, n2, -1)
    U1 = np.linalg.svd(T3.reshape(n1, -1), full_matrices=False)[0][:, :d1]
    U2 = np.linalg.svd(T3.transpose(1, 0, 2).reshape(n2, -1), full_matrices=False)[0][:, :d1]
    core = np.einsum("ia,jb,ijk->abk", U1, U2, T3)
    Ta = core @ gen.standard_normal(core.shape[2])
    Tb = core @ gen.standard_normal(core.shape[2])
    _, vecs = np.linalg.eig(Ta @ np.linalg.inv(Tb))
    A = U1 @ np.real(vecs)
    return np.stack([_rank_one_vector(A[:, k], d0) for k in range(d1)])


def _cp_als_first_factor(
    T: np.ndarray, d1: int, iterations: int, gen: np.random.Generator
) -> np.ndarray:
    """Plain (non-symmetric) CP-ALS on the order-(r+1) tensor; W1 from the first mode's factor."""
    order = T.ndim
    factors = [gen.standard_normal((n, d1)) for n in T.shape]
    unfold = [np.moveaxis(T, m, 0).reshape(T.shape[m], -1) for m in range(order)]
    for _ in range(iterations):
        for m in range(order):
            others = [factors[i] for i in range(order) if i != m]
            kr = others[0]
            for f in others[1:]:
                kr = (kr[:, None, :] * f[None, :, :]).reshape(-1, d1)
            gram = np.ones((d1, d1))
            for f in others:
                gram *= f.T @ f
            factors[m] = np.linalg.lstsq(gram, (unfold[m] @ kr).T, rcond=None)[0].T
    W1 = factors[0].T
    return W1 / np.maximum(np.linalg.norm(W1, axis=1, keepdims=True), np.finfo(float).tiny)


def alignment_error(W1: Any, W2: Any, W1_hat: Any, W2_hat: Any, r: int) -> float:
    """Relative error between the rank-one terms w_k^{⊗r} ⊗ v_k of two shallow networks after optimal
    (Hungarian) matching: sqrt(Σ_k ‖t_k − t̂_π(k)‖²) / sqrt(Σ_k ‖t_k‖²). Invariant to the
    permutation and scaling symmetries."""
    W1, W2, W1_hat, W2_hat = (
        _float_matrix(n, v)
        for n, v in (("W1", W1), ("W2", W2), ("W1_hat", W1_hat), ("W2_hat", W2_hat))
    )
    if W1.shape != W1_hat.shape or W2.shape != W2_hat.shape:
        raise ValueError(
            f"the two networks must have equal shapes, got {W1.shape}/{W1_hat.shape} and "
            f"{W2.shape}/{W2_hat.shape}"
        )
    terms = np.stack(
        [shallow_tensor(W1[k : k + 1], W2[:, k : k + 1], r).ravel() for k in range(len(W1))]
    )
    hats = np.stack(
        [shallow_tensor(W1_hat[k : k + 1], W2_hat[:, k : k + 1], r).ravel() for k in range(len(W1))]
    )
    cost = ((terms[:, None, :] - hats[None, :, :]) ** 2).sum(axis=2)
    rows, cols = scipy.optimize.linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].sum() / max((terms**2).sum(), np.finfo(float).tiny)))
