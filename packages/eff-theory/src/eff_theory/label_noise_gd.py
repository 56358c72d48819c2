"""Label-noise gradient descent (LNGD) in the low-SNR signal–noise model.

Huang, Han, Song, Chen, Wu, Zou, Suzuki, "How Does Label Noise Gradient Descent Improve
Generalization in the Low SNR Regime?", NeurIPS 2025 (arXiv 2510.17526). Code only in the paper's
supplementary material; this module follows the main text (Definition 2.1, Algorithm 1,
Theorems 3.2/3.3) and the model family of Cao et al. (2022) / Kou et al. (2023).

* Data (Definition 2.1): y ~ Rademacher, x = (x⁽¹⁾, x⁽²⁾) ∈ R^{2d}; one patch, chosen at random,
  is yμ, the other ξ ~ N(0, σ_p²(I − μμᵀ/‖μ‖²)). SNR = ‖μ‖/(σ_p√d).
* Model: f(W, x) = F₊₁ − F₋₁, F_j = (1/m) Σ_r Σ_p σ(⟨w_{j,r}, x⁽ᵖ⁾⟩), σ(z) = max(0, z)^q (q = 2);
  the second layer is fixed.
* Algorithm 1: full-batch GD on the logistic loss where, at *every* step, *every* label is flipped
  independently with probability p: W ← W − η ∇_W (1/n) Σ_i ℓ(ε_i^{(t)} y_i f(W, x_i)).

Deterministic label smoothing, (1−p)ℓ(yf) + pℓ(−yf), equals the LNGD objective in expectation but
does not behave like it: it converges to the margin log((1−p)/p) and stops learning
(``method="label_smoothing"``, a baseline).
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.special import expit

from eff_shared.errors import check_choice, check_int, check_real, finite_array
from eff_theory._runtime import RngLike

__all__ = [
    "METHODS",
    "LNGDConfig",
    "PatchCNN",
    "SignalNoiseData",
    "TrainResult",
    "lngd_experiment",
    "logistic_loss",
    "make_signal_noise_data",
    "train",
]

Method = Literal["label_noise", "gd", "label_smoothing"]
METHODS: tuple[str, ...] = ("label_noise", "gd", "label_smoothing")
HISTORY_KEYS = (
    "step",
    "clean_loss",
    "noisy_loss",
    "train_error",
    "test_error",
    "max_gamma",
    "max_rho",
)


def _positive(name: str, value: Any, *, strict: bool = True) -> float:
    value = check_real(name, value)
    if value < 0 or (strict and value == 0):
        raise ValueError(f"{name} must be {'>' if strict else '>='} 0, got {value}")
    return value


def _check_flip_prob(flip_prob: Any) -> float:
    flip_prob = check_real("flip_prob", flip_prob)
    if not 0.0 <= flip_prob < 0.5:
        # p ≥ 0.5 makes the flipped labels carry no (or inverted) information.
        raise ValueError(f"flip_prob must lie in [0, 0.5), got {flip_prob}")
    return flip_prob


@dataclass(frozen=True)
class SignalNoiseData:
    """A sample of the signal–noise model: labels, the two patches and the signal vector μ.

    ``signal[i] = y_i μ``; ``noise[i] = ξ_i`` (orthogonal to μ); ``signal_first[i]`` says which
    patch holds the signal (Definition 2.1 puts it at random; f does not depend on the order).
    """

    y: np.ndarray
    signal: np.ndarray
    noise: np.ndarray
    mu: np.ndarray
    signal_first: np.ndarray

    def __post_init__(self) -> None:
        y = np.asarray(self.y)
        if y.ndim != 1 or y.size < 1:
            raise ValueError(f"y must be 1-D with n >= 1 labels, got shape {y.shape}")
        if not np.all(np.isin(y, (-1, 1))):
            raise ValueError("y must hold labels in {-1, +1}")
        n, d = y.size, np.asarray(self.mu).size
        for name in ("signal", "noise"):
            shape = np.asarray(getattr(self, name)).shape
            if shape != (n, d):
                raise ValueError(f"{name} must have shape (n, d) = ({n}, {d}), got {shape}")
        if np.asarray(self.signal_first).shape != (n,):
            raise ValueError(f"signal_first must have shape ({n},)")

    @property
    def n(self) -> int:
        return int(self.y.size)

    @property
    def d(self) -> int:
        return int(self.mu.size)

    @property
    def snr(self) -> float:
        """‖μ‖ / (σ_p √d), with σ_p estimated from the noise (d − 1 free directions)."""
        sigma_p = math.sqrt(float(np.mean(np.sum(self.noise**2, axis=1))) / (self.d - 1))
        return float(np.linalg.norm(self.mu)) / (sigma_p * math.sqrt(self.d))

    def patches(self, shuffle: bool = True) -> np.ndarray:
        """``(n, 2, d)`` inputs; with ``shuffle`` the signal sits in the patch ``signal_first`` says,
        else always first."""
        x = np.stack([self.signal, self.noise], axis=1)
        if shuffle:
            swap = ~np.asarray(self.signal_first, dtype=bool)
            x[swap] = x[swap, ::-1]
        return x


def make_signal_noise_data(
    n: int, d: int, *, mu_norm: float = 2.0, sigma_p: float = 0.5, rng: RngLike = None
) -> SignalNoiseData:
    """Draw ``n`` samples of Definition 2.1 with μ = mu_norm·e₁ (the paper's μ = [2, 0, …, 0])."""
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=2)
    mu_norm = _positive("mu_norm", mu_norm)
    sigma_p = _positive("sigma_p", sigma_p)
    gen = np.random.default_rng(rng)
    mu = np.zeros(d)
    mu[0] = mu_norm
    y = 2 * gen.integers(0, 2, size=n) - 1
    noise = sigma_p * gen.standard_normal((n, d))
    noise[:, 0] = 0.0  # ξ ~ N(0, σ_p²(I − μμᵀ/‖μ‖²)): the component along μ = e₁ removed
    signal_first = gen.random(n) < 0.5
    return SignalNoiseData(y, y[:, None] * mu, noise, mu, signal_first)


def logistic_loss(z: np.ndarray) -> np.ndarray:
    """ℓ(z) = log(1 + e^{−z}), evaluated without overflow for any finite z."""
    return np.logaddexp(0.0, -z)


class PatchCNN:
    """The two-layer patch "CNN" f(W, x) = F₊₁(W₊₁, x) − F₋₁(W₋₁, x) of Cao et al. (2022).

    F_j = (1/m) Σ_{r≤m} Σ_p σ(⟨w_{j,r}, x⁽ᵖ⁾⟩), σ(z) = max(0, z)^power (the LNGD paper: power 2),
    filters shared over patches, fixed second layer ±1/m. ``W`` has shape ``(2, m, d)``: ``W[0]``
    are the filters w_{+1,r}, ``W[1]`` the filters w_{−1,r}; initial entries N(0, sigma0²).
    """

    def __init__(
        self, d: int, m: int, *, sigma0: float = 0.01, power: int = 2, rng: RngLike = None
    ) -> None:
        self.d = check_int("d", d, minimum=2)
        self.m = check_int("m", m, minimum=1)
        self.sigma0 = _positive("sigma0", sigma0, strict=False)
        self.power = check_int("power", power, minimum=2)
        self.W = self.sigma0 * np.random.default_rng(rng).standard_normal((2, self.m, self.d))
        # column j·r of the flattened filters carries the second-layer weight j/m
        self._sign = np.repeat([1.0, -1.0], self.m) / self.m

    def copy(self) -> PatchCNN:
        return copy.deepcopy(self)

    def _flat_inputs(self, X: Any) -> tuple[np.ndarray, int]:
        X = finite_array("X", X, ndim=3)
        if X.shape[2] != self.d:
            raise ValueError(f"X must have shape (n, patches, d={self.d}), got {X.shape}")
        return X.reshape(-1, self.d), X.shape[0]

    def _preact(self, Xf: np.ndarray) -> np.ndarray:
        # ⟨w_{j,r}, x⁽ᵖ⁾⟩ for every (sample·patch, filter): one (nP × d)(d × 2m) GEMM.
        return Xf @ self.W.reshape(2 * self.m, self.d).T

    def _output(self, A: np.ndarray, n: int) -> np.ndarray:
        act = np.maximum(A, 0.0) ** self.power
        return act.reshape(n, -1) @ np.tile(self._sign, act.size // (n * 2 * self.m))

    def _grad(self, A: np.ndarray, Xf: np.ndarray, coef: np.ndarray) -> np.ndarray:
        # ∂f/∂w_{j,r} = (j/m) Σ_p σ'(⟨w_{j,r}, x⁽ᵖ⁾⟩) x⁽ᵖ⁾, σ'(z) = q·ReLU(z)^{q−1}.
        n_rows = A.shape[0]
        dact = self.power * np.maximum(A, 0.0) ** (self.power - 1)
        dact *= np.repeat(coef, n_rows // coef.size)[:, None]
        dact *= self._sign
        return (dact.T @ Xf).reshape(self.W.shape)

    def forward(self, X: Any) -> np.ndarray:
        """f(W, x_i) for inputs ``X`` of shape ``(n, patches, d)``."""
        Xf, n = self._flat_inputs(X)
        return self._output(self._preact(Xf), n)

    def grad(self, X: Any, coef: Any) -> np.ndarray:
        """∇_W Σ_i coef_i f(W, x_i), shape ``(2, m, d)`` (coef_i = ∂loss/∂f_i)."""
        Xf, n = self._flat_inputs(X)
        coef = finite_array("coef", coef, ndim=1)
        if coef.size != n:
            raise ValueError(f"coef must have one entry per sample ({n}), got {coef.size}")
        return self._grad(self._preact(Xf), Xf, coef)

    def signal_coeffs(self, mu: Any) -> np.ndarray:
        """γ_{j,r} ≈ j·⟨w_{j,r}, μ⟩, shape ``(2, m)`` (signal learning; Cao et al.'s decomposition)."""
        mu = finite_array("mu", mu, ndim=1)
        return self.W @ mu * np.array([[1.0], [-1.0]])

    def noise_coeffs(self, xi: Any) -> np.ndarray:
        """ρ_{j,r,i} ≈ ⟨w_{j,r}, ξ_i⟩, shape ``(2, m, n)`` (noise memorisation)."""
        xi = finite_array("xi", xi, ndim=2)
        return self.W @ xi.T


@dataclass
class TrainResult:
    """What :func:`train` returns: the method and its logged history (one list per key).

    Keys: ``step``, ``clean_loss`` (logistic loss on the true labels), ``noisy_loss`` (the
    objective of the last GD step, before its update: flipped labels for LNGD, the smoothed loss for
    label smoothing), ``train_error``, ``test_error`` (NaN without eval data), ``max_gamma``,
    ``max_rho`` (max over j, r (, i) of γ and ρ). ``stopped_early`` is set when the loss became
    non-finite.
    """

    method: str
    history: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in HISTORY_KEYS})
    stopped_early: bool = False

    @property
    def final(self) -> dict[str, float]:
        """The last logged value of every history key."""
        return {k: v[-1] for k, v in self.history.items() if v}


def _errors(f: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.sign(f) != y))


def train(
    model: PatchCNN,
    data: SignalNoiseData,
    *,
    method: Method = "label_noise",
    flip_prob: float = 0.1,
    lr: float = 0.5,
    steps: int = 2000,
    eval_data: SignalNoiseData | None = None,
    log_every: int = 100,
    rng: RngLike = None,
) -> TrainResult:
    """Train ``model`` in place by full-batch GD with ``method``'s labels (Algorithm 1 of the paper).

    ``"label_noise"`` (LNGD): every step draws fresh independent ε_i^{(t)} = −1 w.p. ``flip_prob``
    (else +1) for every sample and descends (1/n) Σ ℓ(ε_i y_i f(W, x_i)). ``"gd"``: the clean labels.
    ``"label_smoothing"``: the deterministic expected loss (1−p)ℓ(y f) + pℓ(−y f). Metrics are logged
    at step 0, every ``log_every`` steps and at the end. A non-finite loss (``lr`` too large) stops
    training with a ``RuntimeWarning``.
    """
    if not isinstance(model, PatchCNN):
        raise TypeError(f"model must be a PatchCNN, got {type(model).__name__}")
    if not isinstance(data, SignalNoiseData):
        raise TypeError(f"data must be SignalNoiseData, got {type(data).__name__}")
    check_choice("method", method, METHODS)
    p = _check_flip_prob(flip_prob)
    lr = _positive("lr", lr)
    steps = check_int("steps", steps, minimum=1)
    log_every = check_int("log_every", log_every, minimum=1)
    for name, ds in (("data", data), ("eval_data", eval_data)):
        if ds is not None and ds.d != model.d:
            raise ValueError(f"{name} has d={ds.d} but the model has d={model.d}")
    gen = np.random.default_rng(rng)
    Xf = data.patches().reshape(-1, model.d)
    y = data.y.astype(np.float64)
    n = data.n
    X_eval = None if eval_data is None else eval_data.patches().reshape(-1, model.d)
    result = TrainResult(method)

    def log(step: int, noisy: float, f: np.ndarray) -> None:
        h = result.history
        h["step"].append(step)
        h["clean_loss"].append(float(np.mean(logistic_loss(y * f))))
        h["noisy_loss"].append(noisy)
        h["train_error"].append(_errors(f, y))
        test = math.nan
        if eval_data is not None:
            test = _errors(model._output(model._preact(X_eval), eval_data.n), eval_data.y)
        h["test_error"].append(test)
        h["max_gamma"].append(float(model.signal_coeffs(data.mu).max()))
        h["max_rho"].append(float(model.noise_coeffs(data.noise).max()))

    A = model._preact(Xf)
    f = model._output(A, n)
    log(0, float(np.mean(logistic_loss(y * f))), f)
    # a too-large lr overflows the weights: reported once, below, as a non-finite loss
    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(1, steps + 1):
            noisy, dloss = _objective(method, y, f, p, gen)
            if not math.isfinite(noisy):
                warnings.warn(
                    f"{method}: the loss became non-finite at step {step}; lr={lr} is too large",
                    RuntimeWarning,
                    stacklevel=2,
                )
                result.stopped_early = True
                break
            model.W -= lr * model._grad(A, Xf, dloss / n)
            A = model._preact(Xf)
            f = model._output(A, n)
            if step % log_every == 0 or step == steps:
                log(step, noisy, f)
    return result


def _objective(
    method: str, y: np.ndarray, f: np.ndarray, p: float, gen: np.random.Generator
) -> tuple[float, np.ndarray]:
    """The step's mean loss and its derivative ∂ℓ_i/∂f_i for every sample."""
    if method == "label_smoothing":
        margin = y * f
        loss = (1 - p) * logistic_loss(margin) + p * logistic_loss(-margin)
        return float(np.mean(loss)), -(1 - p) * y * expit(-margin) + p * y * expit(margin)
    labels = np.where(gen.random(y.size) < p, -y, y) if method == "label_noise" else y
    margin = labels * f  # LNGD: ε_i^{(t)} y_i with fresh flips for every sample at every step
    return float(np.mean(logistic_loss(margin))), -labels * expit(-margin)


@dataclass(frozen=True)
class LNGDConfig:
    """One LNGD-vs-GD experiment (spec defaults: the CPU-scale version of the paper's Section 5).

    The paper's synthetic run is n = 200, d = 2000, m = 20, ‖μ‖ = 2, T = 2000; at this scale the
    second, slow phase in which LNGD's test error drops lies beyond T, so the default config is
    smaller: n = 100, d = 1000, m = 10, ‖μ‖ = 1.5 (SNR ≈ 0.095).
    """

    n: int = 100
    d: int = 1000
    m: int = 10
    mu_norm: float = 1.5
    sigma_p: float = 0.5
    sigma0: float = 0.01
    lr: float = 0.5
    flip_prob: float = 0.1
    steps: int = 2000
    n_test: int = 1000
    log_every: int = 100
    methods: tuple[str, ...] = ("gd", "label_noise", "label_smoothing")
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("n", self.n, minimum=1)
        check_int("d", self.d, minimum=2)
        check_int("m", self.m, minimum=1)
        check_int("n_test", self.n_test, minimum=1)
        check_int("steps", self.steps, minimum=1)
        check_int("log_every", self.log_every, minimum=1)
        check_int("seed", self.seed, minimum=0)
        _positive("mu_norm", self.mu_norm)
        _positive("sigma_p", self.sigma_p)
        _positive("sigma0", self.sigma0, strict=False)
        _positive("lr", self.lr)
        _check_flip_prob(self.flip_prob)
        if not self.methods:
            raise ValueError("methods must name at least one method")
        for method in self.methods:
            check_choice("methods", method, METHODS)


def lngd_experiment(config: LNGDConfig | None = None, **overrides: Any) -> dict[str, Any]:
    """Train every method of ``config`` from the same data and the same initial network.

    Returns ``{"config": dict, "snr": float, <method>: TrainResult, ...}``. Streams derive from
    ``config.seed``: training data, test data, initialisation, and one label-flip stream per method.
    """
    cfg = (
        LNGDConfig(**overrides) if config is None else LNGDConfig(**{**asdict(config), **overrides})
    )
    streams = np.random.SeedSequence(cfg.seed).spawn(3 + len(cfg.methods))
    data = make_signal_noise_data(
        cfg.n, cfg.d, mu_norm=cfg.mu_norm, sigma_p=cfg.sigma_p, rng=streams[0]
    )
    test = make_signal_noise_data(
        cfg.n_test, cfg.d, mu_norm=cfg.mu_norm, sigma_p=cfg.sigma_p, rng=streams[1]
    )
    init = PatchCNN(cfg.d, cfg.m, sigma0=cfg.sigma0, rng=streams[2])
    out: dict[str, Any] = {
        "config": asdict(cfg),
        "snr": cfg.mu_norm / (cfg.sigma_p * math.sqrt(cfg.d)),
    }
    for method, stream in zip(cfg.methods, streams[3:], strict=True):
        out[method] = train(
            init.copy(),
            data,
            method=method,  # type: ignore[arg-type]
            flip_prob=cfg.flip_prob,
            lr=cfg.lr,
            steps=cfg.steps,
            eval_data=test,
            log_every=cfg.log_every,
            rng=stream,
        )
    return out
