"""Heavy-tailed RNNs: finite-size transition to chaos, Lyapunov spectra and dimensions.

Xie, Mihalas, Kuśmierz, "Slow Transition to Low-Dimensional Chaos in Heavy-Tailed Recurrent Neural
Networks", NeurIPS 2025 (arXiv 2505.09816); official code ``AllenInstitute/HeavyRNN_public``.

Model (paper Sec. 2): x(t+1) = tanh(g W x(t) + I(t)) with W_ij i.i.d. symmetric α-stable,
W_ij ~ L_α(N^{-1/α}) where L_α(σ) has characteristic function exp(−|σk|^α), 0 < α ≤ 2.

Conventions (read before comparing with other code):

* α = 2 gives N(0, 2σ²): the Gaussian network has variance 2g²/N and its transition is at
  g = 1/√2, not 1 (the official ``'normal'`` init uses std √2·g/√N for the same reason).
* The predicted transition gain g*(α, N) (paper Eq. for the annealed quiescent-state stability, Fig. 1A)
  is where the *quiescent state* x = 0 loses stability, not where the nonlinear maximal Lyapunov
  exponent turns positive; with heavy tails the MLE stays ≤ 0 well above g* (the "slow transition").
* g* predicts the *quenched average of the log*: the annealed growth rate ln g + E[Ξ] is matched by
  the disorder average E_W[ln ρ(gW)] of the quenched networks' growth rates, so the quenched
  transition gain to compare with g* is exp(E_W[ln 1/ρ(W)]) (:func:`quenched_transition_gain`,
  ``statistic="log_mean"``). The *median* 1/ρ(W) (the typical network) agrees with g* within a few
  per cent for α ≥ 1 but is 15–45 % above it for α < 1, at every N from 100 to 800: ln ρ(W) is
  right-skewed there (rare networks with a large cycle of big weights). That gap is a statistic
  mismatch, not a finite-size effect (measured in the reproduction's full mode).
* The Lyapunov spectrum propagates the tangent space with the Jacobian of the step just taken,
  J_t = diag(1 − x_{t+1}²)·gW applied as J_t Q (not Jᵀ Q, and not the Jacobian of the next step,
  both of which are in the published code and shift the paper's Fig. 2 crossings).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

import numpy as np

from eff_shared.errors import check_choice, check_int, check_real, check_type, finite_array
from eff_theory._runtime import RngLike

__all__ = [
    "HeavyTailedRNN",
    "annealed_max_lyapunov_exponent",
    "kaplan_yorke_dimension",
    "levy_weight_matrix",
    "lyapunov_spectrum",
    "max_lyapunov_exponent",
    "participation_ratio",
    "predicted_transition_gain",
    "quenched_statistic",
    "quenched_transition_gain",
    "quiescent_instability_gain",
    "sample_levy_stable",
    "transition_gain_from_sweep",
]

_CLIP = 1e300  # CMS draws beyond this would overflow |z|^α sums; they are clipped (spec).
_CHUNK = 2_000_000  # numbers per Monte Carlo chunk: bounds memory at ~16 MB per array


def _check_alpha(alpha: Any) -> float:
    check_type("alpha", alpha, (int, float, np.integer, np.floating))
    alpha = float(alpha)
    if not 0.0 < alpha <= 2.0:
        raise ValueError(f"alpha must lie in (0, 2], got {alpha}")
    return alpha


def _check_gain(gain: Any) -> np.ndarray:
    g = finite_array("gain", gain, ndim=(0, 1))
    if np.any(g <= 0):
        raise ValueError(f"gain must be > 0, got {gain!r}")
    return g


def _check_size(size: object) -> None:
    dims = size if isinstance(size, tuple) else (size,)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            raise TypeError(f"size must be an int or a tuple of ints, got {size!r}")
        if d < 0:
            raise ValueError(f"size must be >= 0 in every dimension, got {size!r}")


def sample_levy_stable(
    alpha: float, size: int | tuple[int, ...], *, scale: float = 1.0, rng: RngLike = None
) -> np.ndarray:
    """Symmetric α-stable draws with characteristic function exp(−|scale·k|^α).

    Chambers–Mallows–Stuck (1976) with β = 0 (scipy's ``levy_stable`` "S1" parameterisation, which for
    β = 0 equals S0): V ~ U(−π/2, π/2), E ~ Exp(1),
    Z = sin(αV)/cos(V)^{1/α} · (cos((1−α)V)/E)^{(1−α)/α}; α = 1 is the Cauchy tan(V) and α = 2 is
    N(0, 2) (drawn directly). |Z| is clipped at 1e300 so that sums of |Z|^α stay finite; for
    α < 0.5 a ``RuntimeWarning`` says that such clipping becomes likely.
    """
    alpha = _check_alpha(alpha)
    scale = check_real("scale", scale)
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    _check_size(size)
    if alpha < 0.5:
        warnings.warn(
            f"alpha={alpha} < 0.5: draws overflow float64 easily; |z| is clipped at 1e300",
            RuntimeWarning,
            stacklevel=2,
        )
    gen = np.random.default_rng(rng)
    if alpha == 2.0:
        return gen.normal(0.0, math.sqrt(2.0) * scale, size)
    v = gen.random(size)
    v -= 0.5
    v *= math.pi
    if alpha == 1.0:
        z = np.tan(v)
    else:
        e = gen.standard_exponential(size)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            # cos((1−α)V)/E, then the two powers; written in place to keep one temporary.
            z = np.cos((1.0 - alpha) * v)
            z /= e
            z **= (1.0 - alpha) / alpha
            z *= np.sin(alpha * v)
            z /= np.cos(v) ** (1.0 / alpha)
        np.nan_to_num(z, copy=False, nan=0.0)
    np.clip(z, -_CLIP, _CLIP, out=z)
    if scale != 1.0:
        z *= scale
    return z


def levy_weight_matrix(
    n: int, alpha: float, gain: float = 1.0, *, rng: RngLike = None
) -> np.ndarray:
    """An ``(n, n)`` weight matrix gain · n^{−1/α} · Z with Z_ij i.i.d. L_α(1) (paper Eq. 1)."""
    n = check_int("n", n, minimum=2)
    alpha = _check_alpha(alpha)
    gain = float(_check_gain(gain))
    return sample_levy_stable(alpha, (n, n), scale=gain * n ** (-1.0 / alpha), rng=rng)


def predicted_transition_gain(
    alpha: float,
    n: int,
    *,
    n_samples: int = 10_000,
    rng: RngLike = 0,
    method: Literal["mc", "asymptotic"] = "mc",
    return_stderr: bool = False,
) -> float | tuple[float, float]:
    """g*(α, N) = exp(−E[Ξ_{N,α}]), Ξ_{N,α} = (1/α)·ln((1/N) Σ_{j≤N} |z_j|^α), z_j ~ L_α(1).

    The annealed linear stability of the quiescent state (paper Sec. 3, Fig. 1A; official
    ``estimate_g_star``): with W redrawn every step, ‖δx‖_α grows by g·exp(Ξ) per step, so x = 0 loses
    stability at ln g* = −E[Ξ]. ``method="mc"`` (default) estimates E[Ξ] from ``n_samples`` length-N
    vectors, drawn in chunks of ~2M numbers; ``return_stderr`` adds the delta-method standard error
    g*·sd(Ξ)/√n_samples. ``method="asymptotic"`` returns the leading-order (2C_α ln N)^{−1/α},
    C_α = Γ(α) sin(πα/2)/π, with a warning: it is far off at practical N (α = 1, N = 1000: 0.23 vs
    Monte Carlo 0.163); for α = 2 the limit is 1/√2.
    """
    alpha = _check_alpha(alpha)
    n = check_int("n", n, minimum=2)
    n_samples = check_int("n_samples", n_samples, minimum=2)
    check_choice("method", method, ("mc", "asymptotic"))
    if method == "asymptotic":
        warnings.warn(
            "the asymptotic g* is leading order in 1/ln N and far off at practical N; "
            "use method='mc'",
            UserWarning,
            stacklevel=2,
        )
        if alpha == 2.0:
            g = 1.0 / math.sqrt(2.0)
        else:
            c_alpha = math.gamma(alpha) * math.sin(math.pi * alpha / 2.0) / math.pi
            g = (2.0 * c_alpha * math.log(n)) ** (-1.0 / alpha)
        return (g, 0.0) if return_stderr else g
    gen = np.random.default_rng(rng)
    xi = np.empty(n_samples)
    if alpha == 2.0:
        # Σ z² with z ~ N(0, 2) is 2·χ²_N: the same distribution, without drawing N numbers per sample.
        xi[:] = 0.5 * np.log(2.0 * gen.chisquare(n, size=n_samples) / n)
    else:
        rows = max(1, _CHUNK // n)
        for start in range(0, n_samples, rows):
            stop = min(n_samples, start + rows)
            z = sample_levy_stable(alpha, (stop - start, n), rng=gen)
            np.abs(z, out=z)
            z **= alpha
            xi[start:stop] = np.log(z.mean(axis=1)) / alpha
    g = math.exp(-float(xi.mean()))
    if return_stderr:
        return g, g * float(xi.std(ddof=1)) / math.sqrt(n_samples)
    return g


def quiescent_instability_gain(W_unit: Any) -> float | np.ndarray:
    """1/ρ(W): the gain at which x = 0 of the *quenched* network x ← tanh(gWx) loses stability.

    ``W_unit`` is a weight matrix at gain 1, ``(N, N)`` or a stack ``(R, N, N)`` (then an array).
    """
    W = _check_weights(W_unit)
    rho = np.abs(np.linalg.eigvals(W)).max(axis=-1)
    out = 1.0 / rho
    return float(out) if out.ndim == 0 else out


QUENCHED_STATISTICS = ("log_mean", "median")


def quenched_statistic(
    inverse_radii: Any, statistic: Literal["log_mean", "median"] = "log_mean"
) -> tuple[float, float]:
    """(estimate, standard error) of the quenched transition gain from per-network 1/ρ(W) values.

    ``"log_mean"``: exp(mean ln 1/ρ), the quenched average of the log that g*(α, N) predicts, with
    the delta-method error estimate·sd(ln 1/ρ)/√K; ``"median"``: the typical network's 1/ρ, with the
    half-width of the order-statistic interval between ranks K/2 ± √K/2 (≈ 68 %, distribution-free,
    so valid for the skewed 1/ρ) as its error.
    """
    check_choice("statistic", statistic, QUENCHED_STATISTICS)
    inv = finite_array("inverse_radii", inverse_radii, ndim=1)
    if inv.size < 2 or np.any(inv <= 0):
        raise ValueError("inverse_radii must hold at least 2 positive values")
    k = inv.size
    if statistic == "log_mean":
        logs = np.log(inv)
        g = math.exp(float(logs.mean()))
        return g, g * float(logs.std(ddof=1)) / math.sqrt(k)
    srt = np.sort(inv)
    half = math.sqrt(k) / 2
    lo = srt[max(0, math.floor(k / 2 - half))]
    hi = srt[min(k - 1, math.ceil(k / 2 + half) - 1)]
    return float(np.median(inv)), float(hi - lo) / 2


def quenched_transition_gain(
    alpha: float,
    n: int,
    *,
    n_networks: int = 40,
    statistic: Literal["log_mean", "median"] = "log_mean",
    rng: RngLike = 0,
    return_stderr: bool = False,
) -> float | tuple[float, float]:
    """The quiescent-state transition gain of *quenched* networks, estimated over ``n_networks``
    draws of W = n^{−1/α}·L_α(1): exp(mean ln 1/ρ(W)) by default (``statistic="log_mean"``), the
    quantity that :func:`predicted_transition_gain` predicts, or the median 1/ρ(W)
    (``statistic="median"``; above g* by 15–45 % for α < 1, see the module docstring). One
    eigen-decomposition per network, O(n³) each; networks are drawn one at a time (memory O(n²)).
    ``return_stderr`` adds the standard error of :func:`quenched_statistic`.
    """
    alpha = _check_alpha(alpha)
    n = check_int("n", n, minimum=2)
    n_networks = check_int("n_networks", n_networks, minimum=2)
    check_choice("statistic", statistic, QUENCHED_STATISTICS)
    gen = np.random.default_rng(rng)
    inv = np.array(
        [
            quiescent_instability_gain(levy_weight_matrix(n, alpha, 1.0, rng=gen))
            for _ in range(n_networks)
        ]
    )
    g, se = quenched_statistic(inv, statistic)
    return (g, se) if return_stderr else g


def _check_weights(W: Any) -> np.ndarray:
    W = finite_array("W", W, ndim=(2, 3))
    if W.shape[-1] != W.shape[-2]:
        raise ValueError(f"W must be square (N, N) or a stack (R, N, N), got shape {W.shape}")
    if W.shape[-1] < 2:
        raise ValueError(f"W must have N >= 2 units, got shape {W.shape}")
    return W


class HeavyTailedRNN:
    """The autonomous or noise-driven network x(t+1) = tanh(W x(t) + I(t)) of the paper (Eq. 1).

    ``W = levy_weight_matrix(n, alpha, gain)`` (so ``W`` already includes the gain); with
    ``input_std > 0`` the input is I(t) ~ N(0, input_std² I) (paper: 0.1, input weights = identity).
    ``rng`` seeds W, then the initial state and the input noise of :meth:`simulate`.
    """

    def __init__(
        self, n: int, alpha: float, gain: float, *, input_std: float = 0.0, rng: RngLike = None
    ) -> None:
        self.n = check_int("n", n, minimum=2)
        self.alpha = _check_alpha(alpha)
        self.gain = float(_check_gain(gain))
        self.input_std = _check_input_std(input_std)
        self.rng = np.random.default_rng(rng)
        self.W = levy_weight_matrix(self.n, self.alpha, self.gain, rng=self.rng)

    def step(self, x: Any, inp: Any = None) -> np.ndarray:
        """One step tanh(W x + inp) (no input when ``inp`` is None)."""
        h = self.W @ x
        if inp is not None:
            h = h + inp
        return np.tanh(h)

    def jacobian(self, x_next: Any) -> np.ndarray:
        """∂x(t+1)/∂x(t) = diag(1 − x(t+1)²)·W, evaluated at the state the step produced."""
        x_next = np.asarray(x_next, dtype=np.float64)
        return (1.0 - x_next**2)[:, None] * self.W

    def simulate(self, n_steps: int, x0: Any = None) -> np.ndarray:
        """States x(1) … x(n_steps) as an ``(n_steps, n)`` array; x0 ~ N(0, I) when None."""
        n_steps = check_int("n_steps", n_steps, minimum=1)
        x = self.rng.standard_normal(self.n) if x0 is None else _check_x0(x0, (self.n,))
        out = np.empty((n_steps, self.n))
        for t in range(n_steps):
            inp = self.input_std * self.rng.standard_normal(self.n) if self.input_std else None
            x = self.step(x, inp)
            out[t] = x
        return out

    def lyapunov_spectrum(self, **kwargs: Any) -> np.ndarray:
        """:func:`lyapunov_spectrum` of this network (same keywords; gain is already in ``W``)."""
        kwargs.setdefault("input_std", self.input_std)
        kwargs.setdefault("rng", self.rng)
        return lyapunov_spectrum(self.W, 1.0, **kwargs)


def _check_input_std(input_std: Any) -> float:
    input_std = check_real("input_std", input_std)
    if input_std < 0:
        raise ValueError(f"input_std must be >= 0, got {input_std}")
    return input_std


def _check_x0(x0: Any, shape: tuple[int, ...]) -> np.ndarray:
    try:
        arr = np.asarray(x0, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"x0 must be a numeric array, got {type(x0).__name__}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError("x0 must be finite (no NaN or inf)")
    try:
        return np.broadcast_to(arr, shape).copy()
    except ValueError:
        raise ValueError(f"x0 must broadcast to {shape}, got shape {arr.shape}") from None


# Floor of a squared stretching factor: units saturated beyond |h| ≈ 355 have sech² = 0 exactly,
# and a direction they all squash would otherwise give log(0).
_TINY = np.finfo(np.float64).tiny


def _lyapunov(
    W: Any,
    gain: Any,
    k: int | None,
    n_steps: int,
    warmup: int,
    input_std: float,
    x0: Any,
    rng: RngLike,
    return_trajectory: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Benettin/QR Lyapunov exponents, vectorised over stacked W (R) and gains (G)."""
    W = _check_weights(W)
    gains = _check_gain(gain)
    n = W.shape[-1]
    k = n if k is None else check_int("k", k, minimum=1, maximum=n)
    n_steps = check_int("n_steps", n_steps, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    if n_steps <= warmup:
        raise ValueError(f"n_steps must exceed warmup, got n_steps={n_steps}, warmup={warmup}")
    input_std = _check_input_std(input_std)
    batch_w, batch_g = W.shape[:-2], gains.shape
    Ws = W.reshape(-1, n, n)
    n_real, n_gain = Ws.shape[0], gains.size
    gcol = gains.reshape(1, 1, n_gain)
    gen = np.random.default_rng(rng)
    out_batch = (*batch_w, *batch_g)
    if x0 is None:
        x = gen.standard_normal((n_real, n, n_gain))
    else:
        # the user's layout is batch + (N,); the loop's is (R, N, G) so that W @ x is one GEMM.
        x = _check_x0(x0, (*out_batch, n)).reshape(n_real, n_gain, n).transpose(0, 2, 1).copy()
    traj = np.empty((n_steps, n_real, n, n_gain)) if return_trajectory else None
    # Tangent vectors: (R, N, G) on the k = 1 path (one GEMM per step), else (R, G, N, k).
    if k == 1:
        tangent = np.zeros((n_real, n, n_gain))
        tangent[:, 0, :] = 1.0
    else:
        tangent = np.broadcast_to(np.eye(n)[:, :k], (n_real, n_gain, n, k)).copy()
    n_acc = n_steps - warmup
    # Σ_t ln R_ii² (k > 1); the k = 1 path keeps its squared stretching factors ‖J_t q‖² (a few
    # numbers per step) and takes their logs at the end, which saves a ufunc call per step.
    log_r2 = np.zeros((n_real, n_gain, k))
    stretch2 = np.empty((n_acc, n_real, n_gain)) if k == 1 else None
    with np.errstate(over="ignore"):  # cosh(h) overflows to inf for |h| > 710: then sech² = 0
        for t in range(n_steps):
            h = np.matmul(Ws, x)
            h *= gcol
            if input_std:
                h += input_std * gen.standard_normal(h.shape)
            x = np.tanh(h)
            if traj is not None:
                traj[t] = x
            if t < warmup:
                continue
            # J_t = diag(1 − x_{t+1}²)·gW, the Jacobian of the step t → t+1 just taken, applied as
            # J_t Q; 1 − tanh² is computed as 1/cosh², exact where 1 − x² would round to 0.
            cosh2 = np.cosh(h, out=h)
            cosh2 *= cosh2
            if k == 1:
                tangent = np.matmul(Ws, tangent)
                tangent *= gcol
                tangent /= cosh2
                sq = np.maximum(np.einsum("rng,rng->rg", tangent, tangent), _TINY)
                stretch2[t - warmup] = sq
                tangent /= np.sqrt(sq)[:, None, :]
            else:
                z = np.matmul(Ws[:, None], tangent)
                z *= (gcol / cosh2).transpose(0, 2, 1)[..., None]
                tangent, r = np.linalg.qr(z)
                diag = np.diagonal(r, axis1=-2, axis2=-1)
                # flip signs so diag(R) > 0; the exponents use |R_ii| either way.
                tangent *= np.where(diag < 0, -1.0, 1.0)[..., None, :]
                log_r2 += np.log(np.maximum(diag * diag, _TINY))
    if stretch2 is not None:
        log_r2[..., 0] = np.log(stretch2).sum(axis=0)
    exps = 0.5 * log_r2 / n_acc
    exps = -np.sort(-exps, axis=-1)
    exps = exps.reshape(*out_batch, k)
    if traj is not None:
        traj = traj.transpose(0, 1, 3, 2).reshape(n_steps, *out_batch, n)
    return exps, traj


def lyapunov_spectrum(
    W: Any,
    gain: Any = 1.0,
    *,
    n_steps: int = 3000,
    warmup: int = 2900,
    k: int | None = None,
    input_std: float = 0.0,
    x0: Any = None,
    rng: RngLike = None,
    return_trajectory: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The k largest Lyapunov exponents of x ← tanh(gain·W x + I), descending (QR/Benettin method).

    Steps t = 0 … n_steps−1: h_t = gain·W x_t + I_t, x_{t+1} = tanh(h_t); for t ≥ warmup,
    J_t = diag(1 − x_{t+1}²)·gain·W, Q_{t+1}R_{t+1} = J_t Q_t (reduced QR, diag R > 0), Q at the
    first accumulated step = I[:, :k], and λ_i = Σ_t ln R_ii / (n_steps − warmup) (paper App.,
    official ``calc_LEs_an`` with the Jacobian orientation and timing corrected). Paper defaults:
    3000 steps of which 2900 warmup; k = N (default) for the full spectrum.

    ``W`` is any weight matrix (random, connectome, ...), ``(N, N)`` or a stack ``(R, N, N)``;
    ``gain`` a scalar or a 1-D array of gains (swept together, one trajectory per gain). Returns
    shape ``W.shape[:-2] + gain.shape + (k,)``; with ``return_trajectory`` also the states x_1 …
    x_{n_steps}, shape ``(n_steps,) + W.shape[:-2] + gain.shape + (N,)``. x0 ~ N(0, I) when None
    (broadcast to the batch otherwise); I_t ~ N(0, input_std²) (0: autonomous). Cost per
    accumulated step: O(N²k) for J Q and O(Nk²) for the QR. A stretching factor that is exactly 0
    (all directions squashed by saturated units) is floored at 1e-154 (√ of the smallest normal).
    """
    exps, traj = _lyapunov(W, gain, k, n_steps, warmup, input_std, x0, rng, return_trajectory)
    return (exps, traj) if return_trajectory else exps


def max_lyapunov_exponent(
    W: Any,
    gain: Any = 1.0,
    *,
    n_steps: int = 3000,
    warmup: int = 2900,
    input_std: float = 0.0,
    x0: Any = None,
    rng: RngLike = None,
) -> float | np.ndarray:
    """The maximal Lyapunov exponent: :func:`lyapunov_spectrum` with k = 1 (O(N²) per step, no QR).

    Returns a float for one W and a scalar gain, else an array ``W.shape[:-2] + gain.shape``.
    """
    exps, _ = _lyapunov(W, gain, 1, n_steps, warmup, input_std, x0, rng, False)
    mle = exps[..., 0]
    return float(mle) if mle.ndim == 0 else mle


def annealed_max_lyapunov_exponent(
    n: int,
    alpha: float,
    gain: float,
    *,
    n_steps: int = 3000,
    warmup: int = 2900,
    input_std: float = 0.0,
    rng: RngLike = None,
) -> float:
    """The maximal Lyapunov exponent of the *annealed* dynamics: a fresh W_t = n^{−1/α}·L_α(1)
    drawn at every step, x(t+1) = tanh(g W_t x(t) + I(t)).

    The annealed approximation behind g*(α, N) (the paper's mean-field argument) assumes the
    weights seen by a perturbation are independent across steps; comparing this with the quenched
    :func:`max_lyapunov_exponent` (one fixed W) separates the finite-N effect of the quenched
    disorder from the approximation itself. Same step/warm-up conventions and tangent update
    (J_t = diag(1 − x_{t+1}²)·g W_t) as :func:`lyapunov_spectrum`; O(N²) per step plus N² stable
    draws.
    """
    n = check_int("n", n, minimum=2)
    alpha = _check_alpha(alpha)
    g = float(_check_gain(gain))
    n_steps = check_int("n_steps", n_steps, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    if n_steps <= warmup:
        raise ValueError(f"n_steps must exceed warmup, got n_steps={n_steps}, warmup={warmup}")
    input_std = _check_input_std(input_std)
    gen = np.random.default_rng(rng)
    x = gen.standard_normal(n)
    q = np.zeros(n)
    q[0] = 1.0
    total = 0.0
    with np.errstate(over="ignore"):
        for t in range(n_steps):
            W = levy_weight_matrix(n, alpha, g, rng=gen)
            h = W @ x
            if input_std:
                h += input_std * gen.standard_normal(n)
            x = np.tanh(h)
            if t < warmup:
                continue
            q = (W @ q) / np.cosh(h) ** 2
            sq = max(float(q @ q), _TINY)
            total += math.log(sq)
            q /= math.sqrt(sq)
    return 0.5 * total / (n_steps - warmup)


def kaplan_yorke_dimension(exponents: Any) -> float:
    """Kaplan–Yorke (Lyapunov) dimension D = j* + c_{j*}/|λ_{j*+1}|.

    Exponents sorted descending, c_j their cumulative sums, j* the number of non-negative c_j
    (official ``lyapunov_dimension``). D = 0 when λ_1 < 0, D = k when every c_j ≥ 0.
    """
    exps = finite_array("exponents", exponents, ndim=1)
    if exps.size == 0:
        raise ValueError("exponents must not be empty")
    exps = np.sort(exps)[::-1]
    csum = np.cumsum(exps)
    negative = np.flatnonzero(csum < 0)
    if negative.size == 0:
        return float(exps.size)
    j = int(negative[0])  # = j*: c_1 … c_{j*} ≥ 0 and c_{j*+1} < 0
    if j == 0:
        return 0.0
    return float(j + csum[j - 1] / abs(exps[j]))


def participation_ratio(states: Any, warmup: int = 0) -> float:
    """(tr C)² / tr(C²) of the covariance C of ``states[warmup:]`` (``(T, N)``; paper Fig. 3C)."""
    states = finite_array("states", states, ndim=2)
    warmup = check_int("warmup", warmup, minimum=0, maximum=states.shape[0] - 2)
    c = np.cov(states[warmup:], rowvar=False)
    denom = float(np.sum(c * c))
    return float(np.trace(c) ** 2 / denom) if denom > 0 else 0.0


def transition_gain_from_sweep(gains: Any, mle: Any) -> float:
    """The first gain at which the (mean) MLE reaches 0, interpolated linearly in log g.

    ``gains`` ascending, ``mle`` the MLE at each. The paper (Fig. 2) reports the first grid gain
    with MLE ≥ 0; interpolating between that gain and the one before removes the grid step.
    Returns ``gains[0]`` if the MLE is already ≥ 0 there and NaN if it never reaches 0.
    """
    g = finite_array("gains", gains, ndim=1)
    m = finite_array("mle", mle, ndim=1)
    if g.shape != m.shape or g.size < 2:
        raise ValueError(
            f"gains and mle must be 1-D of the same length >= 2, got {g.shape}, {m.shape}"
        )
    if np.any(g <= 0) or np.any(np.diff(g) <= 0):
        raise ValueError("gains must be positive and strictly increasing")
    above = np.flatnonzero(m >= 0)
    if above.size == 0:
        return math.nan
    i = int(above[0])
    if i == 0:
        return float(g[0])
    lo, hi = math.log(g[i - 1]), math.log(g[i])
    frac = -m[i - 1] / (m[i] - m[i - 1])
    return float(math.exp(lo + frac * (hi - lo)))
