"""The CFR family on the sequence-form engine: the baselines of RTCFR+ (Meng et al., NeurIPS 2025).

All solvers use OpenSpiel's vocabulary (``evaluate_and_update_policy``, ``current_policy``,
``average_policy``) and, except MMD, **alternating updates**: in iteration t player 0 updates
against σ_1^t, then player 1 against player 0's new σ_0^{t+1} (OpenSpiel's ``CFRSolverBase`` with
``alternating_updates=true``). One player's pass is: sequence forms x_q, x_p; the counterfactual
gradient g_p(x_q); the bottom-up counterfactual values v(I,a) and V(I) = Σ_a σ(I,a) v(I,a); the
instantaneous regrets r(I,a) = v(I,a) − V(I).

- :class:`CFRSolver` — Zinkevich et al. (2007): R ← R + r, σ = RM(R) (regret matching, uniform
  where Σ R⁺ = 0); average weighted by own reach (w_t = 1). Reproduces ``pyspiel.CFRSolver``.
- :class:`CFRPlusSolver` — Tammelin (2014), Tammelin et al. (2015): R ← max(R + r, 0) (RM+), linear
  averaging w_t = t. Reproduces ``pyspiel.CFRPlusSolver``.
- :class:`DCFRSolver` — Brown & Sandholm (2019), discounted CFR (α = 1.5, β = 0, γ = 2): before
  iteration t's regrets are added, positive regrets are scaled by (t−1)^α/((t−1)^α + 1) and negative
  ones by (t−1)^β/((t−1)^β + 1); the average is ``avg ← avg·((t−1)/t)^γ + x^t`` (LiteEFG's ``DCFR.py``).
- :class:`PCFRPlusSolver` — Farina, Kroer & Sandholm (2021), predictive CFR+: R ← max(R + r, 0),
  σ = RM(R + r) (the last instantaneous regret is the prediction), linear averaging (LiteEFG's
  ``PCFR.py``).
- :class:`MMDSolver` — Sokota et al. (2023), magnetic mirror descent over the sequence form with the
  dilated entropy and a uniform magnet, simultaneous updates (OpenSpiel's ``mmd_dilated.py``);
  defaults η = 0.1, τ = 0.01 (LiteEFG's ``MMD.py`` script).

The average strategy is accumulated in sequence form, ``avg_p += w_t·x_p^t`` with x_p^t taken before
p's update in iteration t, and turned back into a behavioural strategy per infoset.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from eff_games import kernels
from eff_games.efg import EFG
from eff_games.policy import TabularPolicy
from eff_shared.errors import check_int, check_positive, check_real

__all__ = [
    "CFRPlusSolver",
    "CFRSolver",
    "DCFRConfig",
    "DCFRSolver",
    "MMDConfig",
    "MMDSolver",
    "PCFRPlusSolver",
    "Solver",
]


class Solver:
    """Shared machinery: the game, the iteration counter, behavioural iterates, policies.

    ``backend`` picks the implementation of an iteration: ``"numba"`` (compiled kernels,
    :mod:`eff_games.kernels`; the default) or ``"numpy"`` (the vectorised reference); both give
    the same iterates (bit for bit where every infoset has ≤ 8 actions, to rounding otherwise).
    """

    #: the algorithm's name in :func:`eff_games.solve.solve` and the CLI
    name: ClassVar[str] = ""
    #: whether the solver keeps an average strategy
    has_average: ClassVar[bool] = True

    def __init__(self, game: EFG, *, backend: str | None = None) -> None:
        if not isinstance(game, EFG):
            raise TypeError(f"game must be an eff_games EFG, got {type(game).__name__}")
        self.game = game
        self.backend = kernels.check_backend(backend)
        self.iteration = 0
        self._tp = game.treeplexes
        self._beh = [tp.uniform() for tp in self._tp]
        # the compiled path's buffer, which the state lists view once bound (at the first step)
        self._buf: kernels.Buffer | None = None

    def evaluate_and_update_policy(self) -> None:
        """One iteration (both players)."""
        self.step(1)

    def step(self, n: int = 1) -> Solver:
        """Run ``n`` iterations; returns ``self``."""
        n = check_int("n", n, minimum=1)
        if self.backend == "numba":
            self._bind()
            self._steps_compiled(self.iteration + 1, n)
            self.iteration += n
            return self
        for _ in range(n):
            self.iteration += 1
            self._iterate(self.iteration)
        return self

    # The compiled path (:mod:`eff_games.kernels`): the state lists named in ``_compiled_state``
    # become views of one buffer (``_bind``; again whenever one of them was replaced, e.g. by
    # ``load_state_dict``), and ``_steps_compiled`` runs iterations t0, ..., t0 + n − 1 in one call.
    _regions: ClassVar[tuple[str, ...]] = ()
    _compiled_state: ClassVar[tuple[str, ...]] = ()

    def _bind(self) -> kernels.Buffer:
        buf = self._buf
        if buf is None or not buf.binds(self, self._compiled_state):
            buf = kernels.Buffer(self.game, self._regions)
            for name in self._compiled_state:
                setattr(self, "_" + name, buf.bind(getattr(self, "_" + name), name))
            self._buf = buf
        return buf

    def _steps_compiled(self, t0: int, n: int) -> None:
        raise NotImplementedError

    def current_policy(self) -> TabularPolicy:
        """The current iterate σ^{T+1} after T iterations."""
        return TabularPolicy(self.game, self._beh)

    def average_policy(self) -> TabularPolicy:
        """The solver's average strategy, turned from sequence form into a behavioural policy
        (uniform at infosets never reached)."""
        avg = getattr(self, "_avg", None)
        if not self.has_average or avg is None:
            raise NotImplementedError(f"{type(self).__name__} keeps no average strategy")
        return TabularPolicy(
            self.game, [tp.normalize(a) for tp, a in zip(self._tp, avg, strict=True)]
        )

    # Attributes that define the solver rather than its progress: rebuilt from (game, config).
    _NOT_STATE: ClassVar[frozenset[str]] = frozenset(
        {"game", "config", "backend", "_tp", "_buf", "_one_minus_alpha"}
    )

    def state_dict(self) -> dict[str, Any]:
        """Everything a solve has accumulated (iteration, iterates, regrets, averages, reference,
        the current γ, ...), as copies. ``load_state_dict`` on a solver built with the same game
        and config resumes the solve bit for bit."""
        state: dict[str, Any] = {}
        for key, value in vars(self).items():
            if key in self._NOT_STATE:
                continue
            if isinstance(value, list) and all(isinstance(a, np.ndarray) for a in value):
                state[key] = [a.copy() for a in value]
            elif isinstance(value, np.ndarray):
                state[key] = value.copy()
            elif isinstance(value, int | float) and not isinstance(value, bool):
                state[key] = value
        return state

    def load_state_dict(self, state: dict[str, Any]) -> Solver:
        """Restore a :meth:`state_dict`; raises ``ValueError`` on missing/unknown entries or
        array shapes that do not match this solver's game."""
        own = self.state_dict()
        if set(state) != set(own):
            raise ValueError(
                f"state does not match {type(self).__name__}: missing {sorted(set(own) - set(state))}, "
                f"unknown {sorted(set(state) - set(own))}"
            )
        for key, value in state.items():
            mine = own[key]
            if isinstance(mine, list):
                if len(value) != len(mine) or any(
                    np.shape(v) != m.shape for v, m in zip(value, mine, strict=False)
                ):
                    raise ValueError(f"state[{key!r}] has shapes that do not match the game")
                setattr(
                    self,
                    key,
                    [np.array(v, dtype=m.dtype) for v, m in zip(value, mine, strict=True)],
                )
            elif isinstance(mine, np.ndarray):
                setattr(self, key, np.array(value, dtype=mine.dtype).reshape(mine.shape))
            else:
                setattr(self, key, type(mine)(value))
        return self

    def save(self, path: str | Path) -> Path:
        """Write the solver (class, config, game name and state) to ``path`` (``.npz``)."""
        path = Path(path)
        arrays: dict[str, np.ndarray] = {}
        scalars: dict[str, Any] = {}
        for key, value in self.state_dict().items():
            if isinstance(value, list):
                arrays |= {f"{key}.{i}": a for i, a in enumerate(value)}
                scalars[key] = {"list": len(value)}
            elif isinstance(value, np.ndarray):
                arrays[key] = value
            else:
                scalars[key] = value
        config = getattr(self, "config", None)
        meta = {
            "solver": type(self).__name__,
            "game": self.game.name,
            "sizes": [tp.size for tp in self._tp],
            "config": asdict(config) if config is not None else {},
            "scalars": scalars,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            np.savez(f, __meta__=np.array(json.dumps(meta)), **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path, game: EFG, *, backend: str | None = None) -> Solver:
        """A solver saved with :meth:`save`, rebuilt on ``game`` (the same game it was saved
        from: name and sizes are checked) and ready to continue with ``step`` on ``backend``."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"solver file {path} does not exist")
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["__meta__"]))
                arrays = {k: data[k] for k in data.files if k != "__meta__"}
        except Exception as exc:
            raise ValueError(f"{path}: not a saved eff-games solver ({exc})") from exc
        classes = {c.__name__: c for c in _all_subclasses(Solver)}
        solver_cls = classes.get(meta["solver"])
        if solver_cls is None or not issubclass(solver_cls, cls):
            raise ValueError(f"{path} holds a {meta['solver']}, not a {cls.__name__}")
        if not isinstance(game, EFG):
            raise TypeError(f"game must be an eff_games EFG, got {type(game).__name__}")
        if game.name != meta["game"] or [tp.size for tp in game.treeplexes] != meta["sizes"]:
            raise ValueError(
                f"{path} was saved on game {meta['game']!r} (sequence sizes {meta['sizes']}), "
                f"not on {game.name!r}"
            )
        solver = solver_cls(game, **meta["config"], backend=backend)
        state: dict[str, Any] = {}
        for key, value in meta["scalars"].items():
            if isinstance(value, dict) and "list" in value:
                state[key] = [arrays[f"{key}.{i}"] for i in range(value["list"])]
            else:
                state[key] = value
        state |= {k: v for k, v in arrays.items() if "." not in k}
        return solver.load_state_dict(state)

    def _iterate(self, t: int) -> None:
        raise NotImplementedError

    def _pass(self, p: int, beh_p: np.ndarray, x_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Counterfactual values (v, V) of player p playing ``beh_p`` against x_q."""
        return self._tp[p].cf_values(self.game.gradient(p, x_q), beh_p)


_NO_DISCOUNTS = (np.zeros(0), np.zeros(0), np.zeros(0))


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_all_subclasses(sub)]
    return out


class _AveragingSolver(Solver):
    """Alternating regret-based solvers with a sequence-form average."""

    #: the update rule's id in the compiled kernel (:func:`eff_games.kernels.averaging_pass`)
    _rule: ClassVar[int] = kernels.CFR
    _regions = kernels.AVERAGING_REGIONS
    _compiled_state = ("beh", "regret", "avg")

    def __init__(self, game: EFG, *, backend: str | None = None) -> None:
        super().__init__(game, backend=backend)
        self._regret = [np.zeros(tp.size) for tp in self._tp]
        self._avg = [np.zeros(tp.size) for tp in self._tp]

    def _iterate(self, t: int) -> None:
        x = [tp.seq_form(b) for tp, b in zip(self._tp, self._beh, strict=True)]
        for p in (0, 1):
            tp = self._tp[p]
            v, V = self._pass(p, self._beh[p], x[1 - p])
            inst = tp.instant_regrets(v, V)
            self._accumulate_average(p, x[p], t)
            self._beh[p] = self._update(p, inst, t)
            if p == 0:
                x[0] = tp.seq_form(self._beh[0])

    def _discounts(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """DCFR's (average scale, positive-, negative-regret scale) of iterations t0 .. t0+n−1."""
        return _NO_DISCOUNTS

    def _steps_compiled(self, t0: int, n: int) -> None:
        assert self._buf is not None
        scales, pos, neg = self._discounts(t0, n)
        kernels.averaging_steps(
            *kernels.packed(self.game), self._buf.data, self._buf.offsets, self._rule, t0, n,
            scales, pos, neg,
        )  # fmt: skip

    def _accumulate_average(self, p: int, x_p: np.ndarray, t: int) -> None:
        self._avg[p] += x_p

    def _update(self, p: int, inst: np.ndarray, t: int) -> np.ndarray:
        raise NotImplementedError


class CFRSolver(_AveragingSolver):
    """Vanilla CFR (Zinkevich et al., NeurIPS 2007), alternating updates, uniform averaging.

    Same iterates as ``pyspiel.CFRSolver`` (up to floating-point summation order).
    """

    name = "cfr"
    _rule = kernels.CFR

    def _update(self, p: int, inst: np.ndarray, t: int) -> np.ndarray:
        self._regret[p] += inst
        return self._tp[p].regret_matching(self._regret[p])


class CFRPlusSolver(_AveragingSolver):
    """CFR+ (Tammelin 2014): RM+ regrets R ← max(R + r, 0), alternating updates, linear averaging.

    Same iterates as ``pyspiel.CFRPlusSolver`` (up to floating-point summation order).
    """

    name = "cfr+"
    _rule = kernels.CFR_PLUS

    def _accumulate_average(self, p: int, x_p: np.ndarray, t: int) -> None:
        self._avg[p] += t * x_p

    def _update(self, p: int, inst: np.ndarray, t: int) -> np.ndarray:
        R = self._regret[p]
        R += inst
        np.maximum(R, 0.0, out=R)
        return self._tp[p].regret_matching(R)


class PCFRPlusSolver(CFRPlusSolver):
    """Predictive CFR+ (Farina, Kroer & Sandholm, AAAI 2021): σ = RM(max(R + r, 0) + r), where
    R ← max(R + r, 0) and the prediction is the last instantaneous regret r; linear averaging."""

    name = "pcfr+"
    _rule = kernels.PCFR_PLUS

    def _update(self, p: int, inst: np.ndarray, t: int) -> np.ndarray:
        R = self._regret[p]
        R += inst
        np.maximum(R, 0.0, out=R)
        return self._tp[p].regret_matching(R + inst)


@dataclass(frozen=True)
class DCFRConfig:
    """Discounting of DCFR (Brown & Sandholm, AAAI 2019): positive regrets by t^α/(t^α+1),
    negative by t^β/(t^β+1), average contributions by (t/(t+1))^γ."""

    alpha: float = 1.5
    beta: float = 0.0
    gamma: float = 2.0

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):
            object.__setattr__(self, name, check_real(name, getattr(self, name)))


class DCFRSolver(_AveragingSolver):
    """Discounted CFR (Brown & Sandholm, AAAI 2019), alternating updates, as LiteEFG's ``DCFR.py``."""

    name = "dcfr"
    _rule = kernels.DCFR

    def __init__(
        self,
        game: EFG,
        *,
        alpha: float = 1.5,
        beta: float = 0.0,
        gamma: float = 2.0,
        backend: str | None = None,
    ) -> None:
        self.config = DCFRConfig(alpha, beta, gamma)
        super().__init__(game, backend=backend)

    def _discounts(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # the same Python float arithmetic as _accumulate_average and _update
        c = self.config
        ts = range(t0, t0 + n)
        scales = np.array([((t - 1) / t) ** c.gamma for t in ts])
        pos = np.array(
            [(t - 1.0) ** c.alpha / ((t - 1.0) ** c.alpha + 1.0) if t > 1 else 1.0 for t in ts]
        )
        neg = np.array(
            [(t - 1.0) ** c.beta / ((t - 1.0) ** c.beta + 1.0) if t > 1 else 1.0 for t in ts]
        )
        return scales, pos, neg

    def _accumulate_average(self, p: int, x_p: np.ndarray, t: int) -> None:
        self._avg[p] *= ((t - 1) / t) ** self.config.gamma
        self._avg[p] += x_p

    def _update(self, p: int, inst: np.ndarray, t: int) -> np.ndarray:
        R = self._regret[p]
        if t > 1:
            s = float(t - 1)
            pos = s**self.config.alpha / (s**self.config.alpha + 1.0)
            neg = s**self.config.beta / (s**self.config.beta + 1.0)
            R *= np.where(R >= 0.0, pos, neg)
        R += inst
        return self._tp[p].regret_matching(R)


@dataclass(frozen=True)
class MMDConfig:
    """Step size η > 0 and regularisation τ ≥ 0 of MMD (defaults η = 0.1, τ = 0.01 as LiteEFG's
    ``MMD.py`` script). Linear last-iterate convergence to the τ-QRE needs η ≤ τ / max|A|²
    (OpenSpiel's default step size), with A the chance-weighted sequence-form payoff matrix."""

    eta: float = 0.1
    tau: float = 0.01

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", check_real("eta", self.eta))
        check_positive("eta", self.eta)
        object.__setattr__(self, "tau", check_real("tau", self.tau, minimum=0.0))


class MMDSolver(Solver):
    """Magnetic mirror descent (Sokota et al., ICLR 2023) over the sequence form with the dilated
    entropy ψ and a uniform magnet, simultaneous updates (OpenSpiel's ``mmd_dilated.py``)::

        x_p ← argmax_x ⟨η·g_p(x_q) + ∇ψ(x_p), x⟩ − (1 + ητ)·ψ(x)

    solved in closed form bottom-up: with G = (η·g_p + log σ_p)/(1 + ητ) (the +1 and −#children
    terms of ∇ψ cancel between an infoset and its parent sequence), σ_p(I) = softmax(G[I]) and
    G[p(I)] += logsumexp(G[I]). The last iterate converges to the τ-QRE (the fixed point
    σ = argmax ⟨g/τ, x⟩ − ψ(x)); ``average_policy`` is the uniform sequence-form average of
    x^0 (uniform), ..., x^T, as OpenSpiel's ``get_avg_policies``.
    """

    name = "mmd"

    def __init__(
        self, game: EFG, *, eta: float = 0.1, tau: float = 0.01, backend: str | None = None
    ) -> None:
        self.config = MMDConfig(eta, tau)
        # MMD's closed-form prox (softmax/logsumexp per infoset) has no compiled kernel yet:
        # ``backend`` is validated and the numpy path runs
        kernels.check_backend(backend)
        super().__init__(game, backend="numpy")
        # Σ_{k=0}^{T} x^k including the uniform start, as OpenSpiel's ``get_avg_policies``
        self._avg = [tp.seq_form(b) for tp, b in zip(self._tp, self._beh, strict=True)]

    def _iterate(self, t: int) -> None:
        eta, tau = self.config.eta, self.config.tau
        x = [tp.seq_form(b) for tp, b in zip(self._tp, self._beh, strict=True)]
        new = []
        for p in (0, 1):
            G = eta * self.game.gradient(p, x[1 - p])
            with np.errstate(divide="ignore"):
                G[1:] += np.log(self._beh[p][1:])
            G /= 1.0 + eta * tau
            new.append(self._tp[p].entropy_prox(G)[0])
            self._avg[p] += self._tp[p].seq_form(new[p])
        self._beh = new
