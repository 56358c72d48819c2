"""SVDecode: steering-vector decoding on top of a PEFT warm start ("Distribution-Aligned Decoding
for Efficient LLM Task Adaptation", arXiv 2509.15888, §2–3, Algorithms 1–2, App. B–F; no public code).

1. **Warm start** (Algorithm 1, step 1): a short PEFT (LoRA, IA3, prompt tuning, ...) or full
   fine-tune gives φ; θ is the frozen base (with peft: the same model under ``disable_adapter()``).
2. **Steering vector** (Eq. 5–7): at each step, on the same context, p_φ = softmax(z_φ) and
   p_θ = softmax(z_θ); the KL gradient g_P = −[log(p_φ/p_θ) + 1] is projected to logit space by the
   softmax Jacobian J = diag(p_φ) − p_φ p_φᵀ: δz = J g_P, in closed form
   δz_y = −p_φ(y)·(log(p_φ(y)/p_θ(y)) − KL(p_φ ‖ p_θ)) (Σ_y δz_y = 0); δz = −∇_z KL(softmax(z) ‖ p_θ)
   at z = z_φ.
3. **Mask** (Table 6): I(y) = 1[p_φ(y) ≥ α·max p_φ] (α = 0.1); steered logits
   ẑ = z_φ + μ̄·δz on I and ``penalty`` (−∞) elsewhere. **Our required rule:** the penalty is placed
   *outside* the μ scaling (never μ·(−∞), which turns into +∞ when μ < 0) and masked entries get
   weight 0 in the μ estimate (otherwise the sums are NaN).
4. **μ̄** (App. D): per token the Gauss–Newton step μ* = ⟨e_y* − p_φ, δ̂z⟩ / (‖δ̂z‖² + 1e-12) on a
   labelled calibration split (δ̂z = δz on the mask, 0 elsewhere). The paper averages μ* (App. D.2,
   ``reduction="mean"``), which is heavy-tailed (‖δ̂z‖ ≈ 0 ⇒ huge μ*); the default is App. D.3's
   sequence form, the **ratio of sums** Σ⟨e − p, δ̂z⟩ / Σ‖δ̂z‖² (``"ratio"``); ``"median"`` and
   ``"trimmed"`` (10 % trimmed mean) are also offered. With Algorithm 1's signs δz points back toward
   p_θ, so μ̄ usually comes out **negative**: it is kept signed, never clamped.

Decoding with :class:`SVDecodeLogitsProcessor` (``generate(..., logits_processor=
LogitsProcessorList([proc]))``) costs a second forward per token: the processor runs θ incrementally
with its own ``DynamicCache``. Any decoding rule (greedy, sampling, top-k/p) applies to ẑ.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from contextlib import nullcontext
from typing import Any, Literal

import torch
from torch import nn
from transformers import DynamicCache, LogitsProcessor

from eff_shared.errors import check_choice, check_positive, check_type
from eff_shared.torch import seeded

__all__ = [
    "SVDecodeLogitsProcessor",
    "calibrate_mu",
    "mu_star",
    "steer_logits",
    "steering_vector",
    "svdecode_logprobs",
    "warm_start",
]

_REDUCTIONS = ("ratio", "mean", "median", "trimmed")


def _check_alpha(alpha: float) -> None:
    check_type("alpha", alpha, (int, float))
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")


def _check_penalty(penalty: float) -> None:
    check_type("penalty", penalty, (int, float))
    if math.isnan(penalty) or penalty == float("inf"):
        raise ValueError(f"penalty must be finite or -inf (not +inf or NaN), got {penalty!r}")


def _check_vocab(z_phi: torch.Tensor, z_theta: torch.Tensor) -> None:
    if z_phi.shape != z_theta.shape:
        raise ValueError(
            "the warm-start (phi) and base (theta) logits must share one vocabulary/tokenizer: "
            f"shapes {tuple(z_phi.shape)} and {tuple(z_theta.shape)}"
        )


def steering_vector(
    logits_phi: torch.Tensor, logits_theta: torch.Tensor, alpha: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """δz = −∇_z KL(softmax(z) ‖ p_θ) at z = z_φ (closed form, Σ δz = 0) and the mask
    I = [p_φ ≥ α·max p_φ], over the last dimension; computed in float32 or wider."""
    _check_alpha(alpha)
    _check_vocab(logits_phi, logits_theta)
    dtype = torch.promote_types(logits_phi.dtype, torch.float32)
    lp_phi = torch.log_softmax(logits_phi.to(dtype), -1)
    lp_theta = torch.log_softmax(logits_theta.to(dtype), -1)
    p_phi = lp_phi.exp()
    log_ratio = lp_phi - lp_theta
    # 0·log 0 terms: where p_phi underflows to 0 the product is 0 (avoid inf − inf).
    log_ratio = torch.where(p_phi > 0, log_ratio, torch.zeros_like(log_ratio))
    kl = (p_phi * log_ratio).sum(-1, keepdim=True)
    delta = -p_phi * (log_ratio - kl)
    mask = p_phi >= alpha * p_phi.amax(-1, keepdim=True)
    return delta, mask


def steer_logits(
    logits_phi: torch.Tensor,
    delta: torch.Tensor,
    mask: torch.Tensor,
    mu: float,
    penalty: float = float("-inf"),
) -> torch.Tensor:
    """ẑ = z_φ + μ·δz on the mask, ``penalty`` outside — applied after the scaling, so the sign of μ
    never flips the penalty."""
    steered = logits_phi.to(delta.dtype) + mu * delta
    return torch.where(mask, steered, torch.full_like(steered, penalty))


def mu_star(
    logits_phi: torch.Tensor,
    delta: torch.Tensor,
    mask: torch.Tensor,
    labels: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token numerator ⟨e_y − p_φ, δ̂z⟩ and denominator ‖δ̂z‖² (masked entries weigh 0);
    μ* = num / (den + 1e-12)."""
    p_phi = torch.softmax(logits_phi.to(delta.dtype), -1)
    d_hat = torch.where(mask, delta, torch.zeros_like(delta))
    e = torch.nn.functional.one_hot(labels, delta.shape[-1]).to(delta.dtype)
    return ((e - p_phi) * d_hat).sum(-1), (d_hat * d_hat).sum(-1)


def _reduce(num: torch.Tensor, den: torch.Tensor, reduction: str) -> float:
    if reduction == "ratio":
        return float(num.sum() / (den.sum() + 1e-12))
    per = num / (den + 1e-12)
    if reduction == "mean":
        return float(per.mean())
    if reduction == "median":
        return float(per.median())
    s = per.sort().values
    cut = int(0.1 * len(s))
    return float(s[cut : len(s) - cut].mean()) if len(s) > 2 * cut else float(s.mean())


def _adapter_off(model: nn.Module):
    """``model.disable_adapter()`` for a peft model, else a no-op context."""
    fn = getattr(model, "disable_adapter", None)
    return fn() if callable(fn) else nullcontext()


def _positions(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(input_ids, attention_mask, labels) from a ``(input_ids, labels)`` pair or a dict."""
    if isinstance(batch, dict):
        ids, labels, mask = batch["input_ids"], batch["labels"], batch.get("attention_mask")
    else:
        ids, labels = batch[0], batch[1]
        mask = None
    return ids, mask, labels


def _scored_logits(model, ids, mask, labels, theta: bool = False):
    """Logits at the scored positions and their labels: labels of shape (B,) score the last
    position (next token after the prompt); (B, T) labels follow the HF causal-LM convention
    (shifted internally, −100 ignored)."""
    ctx = _adapter_off(model) if theta else nullcontext()
    with ctx:
        logits = model(input_ids=ids, attention_mask=mask).logits
    if labels.ndim == 1:
        return logits[:, -1], labels
    if labels.shape != ids.shape:
        raise ValueError(
            f"labels must be (batch,) or (batch, seq) like input_ids, got {tuple(labels.shape)}"
        )
    lg, lb = logits[:, :-1], labels[:, 1:]
    keep = lb != -100
    return lg[keep], lb[keep]


@torch.no_grad()
def calibrate_mu(
    model_phi: nn.Module,
    model_theta: nn.Module,
    dataloader: Iterable[Any],
    alpha: float = 0.1,
    reduction: Literal["ratio", "mean", "median", "trimmed"] = "ratio",
) -> float:
    """μ̄ from one labelled pass over ``dataloader`` (batches ``(input_ids, labels)`` or dicts).

    ``model_theta`` may be the same peft model as ``model_phi``: θ is then evaluated under
    ``disable_adapter()``. Raises ``ValueError`` on an empty calibration set or a non-finite μ̄.
    """
    _check_alpha(alpha)
    check_choice("reduction", reduction, _REDUCTIONS)
    same = model_theta is model_phi
    if same and not callable(getattr(model_phi, "disable_adapter", None)):
        raise ValueError(
            "model_theta is model_phi but it has no disable_adapter() (not a peft model)"
        )
    nums, dens = [], []
    for batch in dataloader:
        ids, mask, labels = _positions(batch)
        z_phi, lab = _scored_logits(model_phi, ids, mask, labels)
        z_theta, _ = _scored_logits(model_theta, ids, mask, labels, theta=same)
        delta, m = steering_vector(z_phi, z_theta, alpha)
        n, d = mu_star(z_phi, delta, m, lab.to(z_phi.device))
        nums.append(n)
        dens.append(d)
    if not nums or sum(len(n) for n in nums) == 0:
        raise ValueError("the calibration set is empty (no labelled position)")
    mu = _reduce(torch.cat(nums), torch.cat(dens), reduction)
    if not math.isfinite(mu):
        raise ValueError(f"calibrated mu is not finite ({mu!r}); check the calibration data")
    return mu


@torch.no_grad()
def svdecode_logprobs(
    model_phi: nn.Module,
    model_theta: nn.Module,
    input_ids: torch.Tensor,
    mu: float,
    alpha: float = 0.1,
    penalty: float = float("-inf"),
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Steered next-token log-probabilities at every position, (batch, seq, vocab) — for scoring
    multiple-choice answers (−inf outside the mask)."""
    _check_alpha(alpha)
    _check_penalty(penalty)
    _check_mu(mu)
    z_phi = model_phi(input_ids=input_ids, attention_mask=attention_mask).logits
    ctx = _adapter_off(model_theta) if model_theta is model_phi else nullcontext()
    with ctx:
        z_theta = model_theta(input_ids=input_ids, attention_mask=attention_mask).logits
    delta, mask = steering_vector(z_phi, z_theta, alpha)
    return torch.log_softmax(steer_logits(z_phi, delta, mask, mu, penalty), -1)


def _check_mu(mu: float) -> None:
    check_type("mu", mu, (int, float))
    if not math.isfinite(mu):
        raise ValueError(f"mu must be finite, got {mu!r}")


class SVDecodeLogitsProcessor(LogitsProcessor):
    """Steering-vector decoding as a transformers ``LogitsProcessor``.

    The model passed to ``generate`` is φ (the warm start); ``base_model`` is θ, run incrementally
    here with its own ``DynamicCache``. ``base_model`` may be a peft model — also the very model
    being generated from: θ is then its base under ``disable_adapter()``. Put this processor first
    in the list (it expects the raw logits z_φ). Batched greedy/sampling generation is supported;
    beam search (``num_beams > 1``) reorders rows, which the private cache does not follow, and
    raises ``NotImplementedError``.
    """

    def __init__(
        self,
        base_model: nn.Module,
        mu: float,
        alpha: float = 0.1,
        penalty: float = float("-inf"),
    ):
        check_type("base_model", base_model, nn.Module)
        _check_mu(mu)
        _check_alpha(alpha)
        _check_penalty(penalty)
        self.base_model, self.mu, self.alpha, self.penalty = base_model, float(mu), alpha, penalty
        self.reset()

    def reset(self) -> None:
        """Forget the cached context (a new ``generate`` call also resets it)."""
        self._cache: DynamicCache | None = None
        self._seen: torch.Tensor | None = None
        self._last: torch.Tensor | None = None

    @torch.no_grad()
    def base_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """θ's next-token logits after ``input_ids`` (incremental when extending the last call)."""
        seen = self._seen
        extends = (
            seen is not None
            and input_ids.shape[0] == seen.shape[0]
            and input_ids.shape[1] > seen.shape[1]
            and torch.equal(input_ids[:, : seen.shape[1]], seen)
        )
        if not extends:
            if (
                seen is not None
                and input_ids.shape == (seen.shape[0], seen.shape[1] + 1)
                and bool((input_ids[:, None, :-1] == seen[None]).all(-1).any(1).all())
            ):
                # every row continues *some* previous row, but not the same one: beam reordering
                raise NotImplementedError(
                    "num_beams > 1 is not supported by SVDecodeLogitsProcessor (its base-model "
                    "cache does not follow beam reordering); call reset() between generations"
                )
            self._cache = DynamicCache(config=self.base_model.config)
            new = input_ids
        else:
            new = input_ids[:, seen.shape[1] :]
        dev = next(self.base_model.parameters()).device
        with _adapter_off(self.base_model):
            out = self.base_model(input_ids=new.to(dev), cache=self._cache, use_cache=True)
        self._seen = input_ids.clone()
        self._last = out.logits[:, -1]
        return self._last

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        z_theta = self.base_logits(input_ids).to(scores.device)
        if z_theta.shape[-1] != scores.shape[-1]:
            raise ValueError(
                "the warm-start (phi) and base (theta) models must share one vocabulary/tokenizer: "
                f"vocab sizes {scores.shape[-1]} and {z_theta.shape[-1]}"
            )
        delta, mask = steering_vector(scores, z_theta, self.alpha)
        return steer_logits(scores, delta, mask, self.mu, self.penalty).to(scores.dtype)


def warm_start(
    base: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    lr: float = 1e-3,
    batch_size: int = 32,
    seed: int = 0,
    peft_config: Any = None,
) -> nn.Module:
    """φ: a copy of ``base`` fine-tuned for ``steps`` Adam steps on the last-token task
    (``input_ids`` (n, L) → ``labels`` (n,)); with a peft ``peft_config`` (e.g. ``LoraConfig``) a peft
    model around the copy (θ = ``phi.disable_adapter()``), else a full fine-tune. ``base`` is
    untouched.

    ``seed`` fixes everything random: the batch order, and the adapter's initialisation and the
    dropout masks (peft and ``nn.Dropout`` draw from torch's global RNG, so they run under a global
    RNG seeded from ``seed`` — the caller's global RNG state is restored afterwards and never read).
    Same seed ⇒ same φ, whatever ran before.
    """
    from eff_llm._models import train_last_token

    check_positive("steps", steps, integer=True)
    model = copy.deepcopy(base)
    # Stream (seed, 1) for the global RNG, decorrelated from the batch sampler's
    # torch.Generator(seed); a full fine-tune without dropout draws nothing from it.
    with seeded(seed, 1):
        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
        train_last_token(
            model, input_ids, labels, steps=steps, lr=lr, batch_size=batch_size, seed=seed
        )
    model.eval()
    return model
