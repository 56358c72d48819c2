"""RTCFR+: reward-transformed CFR+ with last-iterate convergence.

Meng, L., et al. "Efficient Last-Iterate Convergence in Solving Extensive-Form Games", NeurIPS 2025
(arXiv 2308.11256 for the early version that defines RTRM+). Official code: the LiteEFG computation
graph ``RTCFRPlusGraph`` in ``menglinjian/NeurIPS-2025-RTCFR/main.py``; this module implements that
graph's semantics on the sequence-form engine (the paper body was not available; equation numbers
below follow the comments of the official code).

Per player p (updated **alternately**: player 1 sees player 0's new σ̂_0), with the unperturbed
strategy σ_p, the perturbed (played and reported) strategy σ̂_p, the RM+ regrets R_p and the
reference r_p (a sequence-form strategy):

- reward transformation (eq. 4, "v̂"): g̃_p = g_p(x̂_q) − μ·(x̂_p − r_p), the gradient of the payoff
  minus the Euclidean regulariser μ/2·‖x − r‖² on the player's own-reach sequence form
  (x̂ = seqform(σ̂); not dilated, not weighted by the opponent's reach);
- counterfactual values bottom-up with the **unperturbed** σ: v(I,a) = g̃(I,a) + Σ_{J: p(J)=(I,a)} V(J),
  V(I) = ⟨σ_p(I), v(I,·)⟩; instantaneous regret m̂(I,a) = v(I,a) − V(I);
- CFR+ on the transformed game: R_p ← max(R_p + m̂, 0), σ_p ← R_p⁺/ΣR_p⁺ (uniform when 0); with
  ``inner="pcfr+"`` σ_p ← normalize((R_p + m̂)⁺) (commented out in the official code);
- perturbation: σ̂_p(I,·) ∝ (1 − α_I)·σ_p(I,·) + γ with α_I = γ₀·|A(I)| fixed (the official graph
  computes α in its static block) while γ halves at every reference update;
- every T_u iterations, **before** that iteration's update: r_p ← seqform(σ̂_p) for both players and
  γ ← γ/2. Regrets are not reset (warm start) and nothing is averaged.

The output is the last perturbed iterate σ̂; ``average_policy`` raises ``NotImplementedError``.
μ = 0 reduces to alternating CFR+ without averaging. Simultaneous updates (``alternating=False``)
do not converge (measured: exploitability ≈ 0.09 on Leduc after 10 000 iterations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from eff_games import kernels
from eff_games.cfr import Solver
from eff_games.efg import EFG
from eff_games.policy import TabularPolicy
from eff_shared.errors import check_int, check_real

__all__ = ["INNER_SOLVERS", "RTCFRConfig", "RTCFRPlus"]

INNER_SOLVERS = ("cfr+", "pcfr+")


@dataclass(frozen=True)
class RTCFRConfig:
    """Hyper-parameters of RTCFR+ (defaults of the official ``RTCFRPlusGraph.__init__``).

    ``mu`` (μ ≥ 0) weighs the Euclidean regulariser, ``gamma`` (γ₀ ≥ 0) is the initial perturbation,
    ``ref_update_interval`` (T_u ≥ 1) the number of iterations between reference updates, ``inner``
    the regret minimiser at each infoset, ``alternating`` the update order.
    """

    mu: float = 1e-3
    gamma: float = 1e-10
    ref_update_interval: int = 100
    inner: Literal["cfr+", "pcfr+"] = "cfr+"
    alternating: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", check_real("mu", self.mu, minimum=0.0))
        object.__setattr__(self, "gamma", check_real("gamma", self.gamma, minimum=0.0))
        ri = check_int("ref_update_interval", self.ref_update_interval, minimum=1)
        object.__setattr__(self, "ref_update_interval", ri)
        if self.inner not in INNER_SOLVERS:
            raise ValueError(f"inner must be one of {list(INNER_SOLVERS)}, got {self.inner!r}")
        if not isinstance(self.alternating, bool):
            raise TypeError(f"alternating must be a bool, got {type(self.alternating).__name__}")


class RTCFRPlus(Solver):
    """RTCFR+ (Meng et al., NeurIPS 2025): CFR+ on a reward-transformed game whose Euclidean
    regulariser is re-centred on the current perturbed iterate every ``ref_update_interval``
    iterations; converges in the last iterate.

    ``current_policy()`` is the perturbed σ̂ (what the paper reports); ``reference_policy`` the
    current reference r as a behavioural policy; ``unperturbed_policy()`` the CFR+ iterate σ.
    """

    name = "rtcfr+"
    has_average = False
    _regions = kernels.RTCFR_REGIONS
    _compiled_state = ("sigma", "regret", "beh", "ref_beh", "ref", "one_minus_alpha")

    def __init__(
        self,
        game: EFG,
        *,
        mu: float = 1e-3,
        gamma: float = 1e-10,
        ref_update_interval: int = 100,
        inner: Literal["cfr+", "pcfr+"] = "cfr+",
        alternating: bool = True,
        backend: str | None = None,
    ) -> None:
        self.config = RTCFRConfig(mu, gamma, ref_update_interval, inner, alternating)
        super().__init__(game, backend=backend)
        max_a = max(tp.max_actions for tp in self._tp)
        if self.config.gamma * max_a >= 1.0:
            raise ValueError(
                f"gamma must satisfy gamma * max|A(I)| < 1 (max|A(I)| = {max_a}), got {self.config.gamma!r}"
            )
        self.gamma = self.config.gamma  # the current γ, halved at every reference update
        # α_I = γ₀·|A(I)| per sequence (fixed, as in the official graph's static block)
        self._one_minus_alpha = []
        for tp in self._tp:
            w = np.ones(tp.size)
            w[1:] -= self.config.gamma * tp.nact[tp.seq_infoset[1:]]
            self._one_minus_alpha.append(w)
        self._sigma = [tp.uniform() for tp in self._tp]  # unperturbed
        self._regret = [np.zeros(tp.size) for tp in self._tp]
        self._beh = [self._perturb(p, s) for p, s in enumerate(self._sigma)]
        self._ref_beh = [tp.uniform() for tp in self._tp]
        self._ref = [tp.seq_form(b) for tp, b in zip(self._tp, self._ref_beh, strict=True)]

    @property
    def reference_policy(self) -> TabularPolicy:
        """The reference r (the perturbed iterate at the last reference update; uniform first)."""
        return TabularPolicy(self.game, self._ref_beh)

    def unperturbed_policy(self) -> TabularPolicy:
        """σ, the CFR+ iterate before the γ perturbation."""
        return TabularPolicy(self.game, self._sigma)

    def average_policy(self) -> TabularPolicy:
        raise NotImplementedError(
            "RTCFR+ is a last-iterate method and keeps no average; use current_policy()"
        )

    def _perturb(self, p: int, sigma: np.ndarray) -> np.ndarray:
        w = self._one_minus_alpha[p] * sigma + self.gamma
        return self._tp[p].normalize(w)

    def _iterate(self, t: int) -> None:
        if t % self.config.ref_update_interval == 0:
            self._ref_beh = [b.copy() for b in self._beh]
            self._ref = [tp.seq_form(b) for tp, b in zip(self._tp, self._beh, strict=True)]
            self.gamma *= 0.5
        x = [tp.seq_form(b) for tp, b in zip(self._tp, self._beh, strict=True)]
        new = []
        for p in (0, 1):
            tp = self._tp[p]
            g = self.game.gradient(p, x[1 - p])
            if self.config.mu:
                g -= self.config.mu * (x[p] - self._ref[p])
            v, V = tp.cf_values(g, self._sigma[p])
            inst = tp.instant_regrets(v, V)
            R = self._regret[p]
            R += inst
            np.maximum(R, 0.0, out=R)
            sigma = tp.regret_matching(R if self.config.inner == "cfr+" else R + inst)
            self._sigma[p] = sigma
            beh = self._perturb(p, sigma)
            if self.config.alternating:
                self._beh[p] = beh
                if p == 0:
                    x[0] = tp.seq_form(beh)
            else:
                new.append(beh)
        if not self.config.alternating:
            self._beh = new

    def _steps_compiled(self, t0: int, n: int) -> None:
        assert self._buf is not None
        c = self.config
        self.gamma = kernels.rtcfr_steps(
            *kernels.packed(self.game), self._buf.data, self._buf.offsets, t0, n, float(c.mu),
            c.ref_update_interval, c.inner == "pcfr+", c.alternating, float(self.gamma),
        )  # fmt: skip
