"""LoRA-ML: meta-learning a base model for later low-rank adaptation (numpy core).

J. L. Block, S. Srinivasan, L. Collins, A. Mokhtari, S. Shakkottai, "Provable Meta-Learning with
Low-Rank Adaptations", NeurIPS 2025 (arXiv 2410.22264).

Linear task family (the paper's experiments): Y_t = A*_t X_t + E_t with A*_t = A* + U*_t U*_tᵀ,
A* = (G + Gᵀ)/2 and U*_t ∈ R^{d×k} Gaussian; a test task has a fresh U*_{T+1} and the same A*.

* **Standard retraining (SR)** fits one model to the pooled tasks,
  Â_SR = argmin_A Σ_t ‖Y_t − A X_t‖²_F (closed form here); its population value is
  A* + (1/T) Σ_t U*_t U*_tᵀ, so A*_{T+1} − Â_SR has rank up to (T+1)k and a rank-k adapter leaves an
  error that does not shrink with the fine-tuning sample size n′.
* **LoRA-ML retraining** minimises Σ_t ‖Y_t − (A + U_t U_tᵀ) X_t‖²_F *jointly* over the base A and
  one symmetric adapter per task, then discards the adapters. This is plain joint/alternating
  minimisation — **not** MAML (no unrolled inner loops, no second-order terms). For T ≥ 3 its global
  minimisers recover A* (U_t up to rotation) and the test error after rank-k adaptation is O(kd/n′);
  for T = 2 recovery is only partial (strict-saddle landscape, the paper's code uses rank 3k then).
* **Test adaptation** fits an asymmetric rank-k LoRA UVᵀ on the frozen base: by default in closed
  form as reduced-rank regression (the exact global optimum of the rank-k least-squares problem),
  or by gradient descent as in the official code.

The torch wrapper for real networks (:class:`MultiTaskLoRA`, :func:`meta_retrain`) needs the extra
``eff-theory[torch]`` and is imported lazily from :mod:`eff_theory._lora_torch`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from eff_shared.errors import check_choice, check_int, check_positive, check_type, finite_array
from eff_theory._runtime import RngLike
from eff_theory._torch_extra import import_torch_part

__all__ = [
    "LoRAMetaLearner",
    "LowRankTaskFamily",
    "adapt_lora",
    "excess_risk",
    "make_lowrank_task_family",
    "sample_task",
    "standard_retraining",
]

# Torch-only names (not in __all__, so a star import never pulls torch in).
_TORCH_NAMES = ("MultiTaskLoRA", "meta_retrain")


def __getattr__(name: str) -> Any:
    # The torch parts load on first use, so `import eff_theory.lora_meta` never imports torch.
    if name in _TORCH_NAMES:
        return getattr(
            import_torch_part("eff_theory._lora_torch", f"eff_theory.lora_meta.{name}"), name
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class LowRankTaskFamily:
    """A* (d, d) and the task adapters U*_t (T+1, d, k); task T (the last) is the test task."""

    A_star: np.ndarray
    U_star: np.ndarray

    def __post_init__(self) -> None:
        A = finite_array("A_star", self.A_star, 2)
        U = finite_array("U_star", self.U_star, 3)
        if A.shape[0] != A.shape[1] or U.shape[1] != A.shape[0]:
            raise ValueError(
                f"A_star must be (d, d) and U_star (T+1, d, k); got {A.shape}, {U.shape}"
            )
        object.__setattr__(self, "A_star", A)
        object.__setattr__(self, "U_star", U)

    @property
    def d(self) -> int:
        return self.A_star.shape[0]

    @property
    def k(self) -> int:
        return self.U_star.shape[2]

    @property
    def num_tasks(self) -> int:
        """T, the number of retraining tasks (the test task is index T)."""
        return self.U_star.shape[0] - 1

    def task_matrix(self, task: int) -> np.ndarray:
        """A*_t = A* + U*_t U*_tᵀ."""
        t = check_int("task", task, 0, self.num_tasks)
        return self.A_star + self.U_star[t] @ self.U_star[t].T


def make_lowrank_task_family(
    d: int = 10, k: int = 1, num_tasks: int = 3, seed: RngLike = 0
) -> LowRankTaskFamily:
    """A* = (G + Gᵀ)/2 with G Gaussian, and num_tasks + 1 Gaussian U*_t ∈ R^{d×k} (official code)."""
    d = check_int("d", d, 2)
    k = check_int("k", k, 1, d - 1)
    num_tasks = check_int("num_tasks", num_tasks, 2)
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((d, d))
    U = rng.standard_normal((num_tasks + 1, d, k))
    return LowRankTaskFamily((G + G.T) / 2, U)


def sample_task(
    family: LowRankTaskFamily, task: int, n: int, noise_std: float = 0.1, rng: RngLike = None
) -> tuple[np.ndarray, np.ndarray]:
    """X (d, n) with i.i.d. N(0, 1) entries and Y = A*_task X + noise_std·E."""
    check_type("family", family, LowRankTaskFamily)
    A = family.task_matrix(task)
    n = check_int("n", n, 1)
    check_positive("noise_std", noise_std, strict=False)
    gen = np.random.default_rng(rng)
    X = gen.standard_normal((family.d, n))
    Y = A @ X + noise_std * gen.standard_normal((family.d, n))
    return X, Y


def _check_datasets(datasets: Any, minimum: int) -> list[tuple[np.ndarray, np.ndarray]]:
    if isinstance(datasets, tuple) and len(datasets) == 2 and isinstance(datasets[0], np.ndarray):
        raise TypeError("datasets must be a sequence of (X, Y) pairs, got a single pair")
    try:
        pairs = list(datasets)
    except TypeError:
        raise TypeError(
            f"datasets must be a sequence of (X, Y) pairs, got {type(datasets).__name__}"
        ) from None
    if len(pairs) < minimum:
        raise ValueError(f"datasets must hold at least {minimum} tasks, got {len(pairs)}")
    out = []
    for t, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"datasets[{t}] must be an (X, Y) pair")
        X = finite_array(f"datasets[{t}] X", pair[0], 2)
        Y = finite_array(f"datasets[{t}] Y", pair[1], 2)
        _check_xy_shapes(X, Y, f"datasets[{t}]")
        if out and X.shape[0] != out[0][0].shape[0]:
            raise ValueError(
                f"all tasks must share d: datasets[0] has d={out[0][0].shape[0]}, datasets[{t}] d={X.shape[0]}"
            )
        out.append((X, Y))
    return out


def _check_xy_shapes(X: np.ndarray, Y: np.ndarray, where: str) -> None:
    if X.shape != Y.shape:
        raise ValueError(f"{where}: X and Y must both be (d, n), got {X.shape} and {Y.shape}")


def standard_retraining(datasets: Sequence[tuple[Any, Any]]) -> np.ndarray:
    """Â_SR = (Σ_t Y_t X_tᵀ)(Σ_t X_t X_tᵀ)⁻¹, the pooled least-squares fit (closed form)."""
    pairs = _check_datasets(datasets, 1)
    Sxx = sum(X @ X.T for X, _ in pairs)
    Syx = sum(Y @ X.T for X, Y in pairs)
    return np.linalg.lstsq(Sxx, Syx.T, rcond=None)[0].T


class LoRAMetaLearner:
    """LoRA-ML retraining (Block et al., NeurIPS 2025): joint minimisation of
    Σ_t ‖Y_t − (A + U_t U_tᵀ) X_t‖²_F over the base A and per-task adapters, adapters then discarded.

    Optimiser of the official code, on sufficient statistics Σ_xx = XXᵀ/N, Σ_yx = YXᵀ/N (every step
    is a d×d operation): A = 0, U_t ~ N(0, init_std²); ``outer_steps`` times {``inner_steps`` GD steps
    on all adapters, U_t ← U_t − inner_lr·(G_t + G_tᵀ)U_t with G_t = (A + U_tU_tᵀ)Σ_xx,t − Σ_yx,t; then
    A ← A − outer_lr·(1/T)Σ_t G_t with G_t recomputed}. ``symmetric=False`` uses asymmetric adapters
    U_t V_tᵀ (gradients G_t V_t and G_tᵀ U_t).

    After :meth:`fit`: ``base_`` (d, d), ``adapters_`` ((T, d, r), plus ``adapters_v_`` when
    asymmetric) and ``history_`` (mean task loss ‖Y_t − M_t X_t‖²/N after each outer step).
    """

    def __init__(
        self,
        rank: int = 1,
        outer_steps: int = 3000,
        inner_steps: int = 10,
        inner_lr: float = 3e-3,
        outer_lr: float = 3e-2,
        symmetric: bool = True,
        init_std: float = 0.1,
        seed: RngLike = 0,
    ) -> None:
        self.rank = check_int("rank", rank, 1)
        self.outer_steps = check_int("outer_steps", outer_steps, 1)
        self.inner_steps = check_int("inner_steps", inner_steps, 0)
        check_positive("inner_lr", inner_lr)
        check_positive("outer_lr", outer_lr)
        check_type("symmetric", symmetric, bool)
        check_positive("init_std", init_std)
        self.inner_lr = float(inner_lr)
        self.outer_lr = float(outer_lr)
        self.symmetric = symmetric
        self.init_std = float(init_std)
        self.seed = seed

    def fit(self, datasets: Sequence[tuple[Any, Any]]) -> LoRAMetaLearner:
        """Retrain on the tasks' (X_t, Y_t) pairs, X_t and Y_t of shape (d, N_t)."""
        pairs = _check_datasets(datasets, 2)
        d = pairs[0][0].shape[0]
        if self.rank >= d:
            raise ValueError(f"rank must lie in [1, d) = [1, {d}), got {self.rank}")
        if len(pairs) == 2:
            warnings.warn(
                "LoRA-ML with T = 2 tasks: exact recovery of the base needs T >= 3 "
                "(the paper's code adapts with rank 3k at test time)",
                UserWarning,
                stacklevel=2,
            )
        Sxx = np.stack([X @ X.T / X.shape[1] for X, _ in pairs])
        Syx = np.stack([Y @ X.T / X.shape[1] for X, Y in pairs])
        Syy = np.array([np.sum(Y * Y) / Y.shape[1] for _, Y in pairs])
        rng = np.random.default_rng(self.seed)
        T = len(pairs)
        A = np.zeros((d, d))
        U = self.init_std * rng.standard_normal((T, d, self.rank))
        V = U if self.symmetric else self.init_std * rng.standard_normal((T, d, self.rank))
        history = np.empty(self.outer_steps)

        def grads(U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            M = A + U @ V.transpose(0, 2, 1)
            return M, M @ Sxx - Syx

        for step in range(self.outer_steps):
            for _ in range(self.inner_steps):
                _, G = grads(U, V)
                if self.symmetric:
                    U = U - self.inner_lr * (G + G.transpose(0, 2, 1)) @ U
                    V = U
                else:
                    U, V = U - self.inner_lr * G @ V, V - self.inner_lr * G.transpose(0, 2, 1) @ U
            M, G = grads(U, V)
            A = A - self.outer_lr * G.mean(axis=0)
            history[step] = _mean_loss(M, Sxx, Syx, Syy)
        self.base_ = A
        self.adapters_ = U
        if not self.symmetric:
            self.adapters_v_ = V
        self.history_ = history
        return self


def _mean_loss(M: np.ndarray, Sxx: np.ndarray, Syx: np.ndarray, Syy: np.ndarray) -> float:
    """mean_t ‖Y_t − M_t X_t‖²/N_t = tr(M Σxx Mᵀ) − 2 tr(M Σyxᵀ) + tr(Σyy), from the statistics."""
    quad = np.einsum("tij,tjk,tik->t", M, Sxx, M)
    cross = np.einsum("tij,tij->t", M, Syx)
    return float(np.mean(quad - 2 * cross + Syy))


def adapt_lora(
    base: Any,
    X: Any,
    Y: Any,
    rank: int,
    method: Literal["rrr", "gd"] = "rrr",
    steps: int = 10_000,
    lr: float = 5e-3,
    seed: RngLike = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Fit an asymmetric rank-``rank`` adapter UVᵀ on the frozen ``base`` to (X, Y), both (d, n).

    ``"rrr"``: reduced-rank regression, the exact rank-r least-squares optimum — B = (Y − base·X)Xᵀ
    (XXᵀ)⁻¹ (minimum-norm when n < d), Q = top-r left singular vectors of BX, UVᵀ = QQᵀB.
    ``"gd"``: gradient descent as in the official code (U, V ~ N(0, 0.1²), ``steps`` steps of ``lr``
    on ‖Y − (base + UVᵀ)X‖²/n). Returns U (d, r), V (d, r).
    """
    A = finite_array("base", base, 2)
    X = finite_array("X", X, 2)
    Y = finite_array("Y", Y, 2)
    _check_xy_shapes(X, Y, "adapt_lora")
    d = X.shape[0]
    if A.shape != (d, d):
        raise ValueError(f"base must be (d, d) = ({d}, {d}), got {A.shape}")
    rank = check_int("rank", rank, 1, d - 1)
    check_choice("method", method, ("rrr", "gd"))
    R = Y - A @ X
    if method == "rrr":
        B = np.linalg.lstsq(X.T, R.T, rcond=None)[0].T
        Q = np.linalg.svd(B @ X, full_matrices=False)[0][:, :rank]
        return Q, B.T @ Q
    steps = check_int("steps", steps, 1)
    check_positive("lr", lr)
    n = X.shape[1]
    Sxx, Srx = X @ X.T / n, R @ X.T / n
    rng = np.random.default_rng(seed)
    U = 0.1 * rng.standard_normal((d, rank))
    V = 0.1 * rng.standard_normal((d, rank))
    for _ in range(steps):
        G = U @ (V.T @ Sxx) - Srx
        U, V = U - lr * G @ V, V - lr * G.T @ U
    return U, V


def excess_risk(A_task: Any, base: Any, U: Any, V: Any) -> float:
    """Population excess risk ‖A_task − base − UVᵀ‖²_F (= E‖error·x‖² for x ~ N(0, I))."""
    A_task = finite_array("A_task", A_task, 2)
    base = finite_array("base", base, 2)
    U = finite_array("U", U, 2)
    V = finite_array("V", V, 2)
    if A_task.shape != base.shape or U.shape != V.shape or U.shape[0] != base.shape[0]:
        raise ValueError(
            f"shapes must be A_task, base (d, d) and U, V (d, r); got {A_task.shape}, "
            f"{base.shape}, {U.shape}, {V.shape}"
        )
    return float(np.sum((A_task - base - U @ V.T) ** 2))
