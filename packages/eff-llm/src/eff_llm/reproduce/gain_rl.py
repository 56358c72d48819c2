"""Reproduction ``llm.gain_rl``: the angle signal, the moving Gaussian sampler, GRPO end to end.

Spec (eff-llm.md, "GAIN-RL"). Mechanism claims: the angle metric equals a reference computation on
fixed tensors (1e-6); the sampler's rank histogram matches the Gaussian (KS p > 0.01); the Δμ formula,
its clipping and μ's monotonicity; seeded determinism; the GRPO loss is zero when a group's rewards
are equal. End to end: GAIN-RL reaches 80 % train accuracy in ≤ 1.0× the steps of uniform sampling
(median of the seeds; stretch ≤ 0.8×, printed).

Claims (``claims.md``): every mechanism item is a check. End to end is a paper claim, expected
``xfail`` on this toy: the step ratio over 5 seeds of ≤ 1200 steps (full mode only: in quick
mode's 100 steps neither arm reaches 80 %; GAIN-RL's steps are censored at the budget, so a ratio
is a lower bound) and GAIN-RL − uniform train accuracy at equal steps (both modes). The paper's
premise is printed as a diagnostic: the Spearman correlation between the prompts' angle
concentration and their per-prompt gain in accuracy (0/1 correct, after − before) from uniform
GRPO training (on this toy it is near 0).

Toy (ours, as the spec describes it): a tiny Llama policy (h 64, 2 layers) on (a + b) mod 16; each of
the 256 pairs appears in ``variants`` prompts ``[d_1 … d_8, a, +, b, SEP]`` whose 8 distractor
tokens are drawn from a prompt-specific number (1–8) of distinct distractor ids, so the angle
concentration of the prompts varies. The policy is SFT-warmed on ``sft_fraction`` of the pairs;
GRPO then trains on all prompts with single-token answers, reward 1/0, G = 8. GAIN-RL orders the
prompts by the offline angle concentration of the warmed policy (no system-prompt segment here, so
the training-time metric is used) and samples with σ = N/8, n = N/16 (the spec's toy scaling);
uniform sampling draws the same number of prompts per epoch uniformly. Both arms run the same GRPO
with the trl script's k3 KL (β = 0.005) to the frozen warm policy.

Units. σ, n and adj_max are ranks (sample indices). The official values (σ = 1000, n = 500,
adj_max = 1000) are the same for every dataset; we scale them in the proportion they have on GSM8K
(N = 7,473, the 0.5B runs): σ/N = 0.134, n/N = 0.067, adj_max = 2n — ours, N = 512:

=====================  ==========================  ==================================
quantity               official (GSM8K, 0.5B)      ours (N = 512)
=====================  ==========================  ==================================
σ                      1000 = 0.134 N              64 = N/8
n (``step``)           500 = 0.067 N               32 = N/16
adj_max                1000 = 2n (never binds)     64 = 2n (never binds: Δμ < 1.73 n)
subset per epoch       256 = 0.034 N               128 = 0.25 N (see below)
GRPO steps per epoch   8 (trl), 1 (verl)           8
μ updates per run      200                         150 (full), 37 (quick)
=====================  ==========================  ==================================

The subset cannot keep both its share of N and the epoch structure: the toy's budget is ~37 passes
over its data (uniform needs 15-37 to reach the threshold), the paper's runs make ~7.
``subset_size = 128`` keeps trl's 8 steps per μ update and about the paper's number of updates per
run (so μ spends the same share of the run sweeping the order); ``subset_size = 16`` keeps the 3 %
share and verl's one step per update (μ updates 1,200 times). Measured with the latter (seed 1,
without the KL term and the rank-order iteration): GAIN-RL ends at 0.646 vs uniform 0.805 — worse
than with 128 under the same conditions (0.697 vs 0.803).
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats

from eff_shared.errors import check_choice, check_positive
from eff_shared.reproduce import Claim, Mode, Result, paper_claim
from eff_shared.torch import threads

from .._data import arithmetic_table
from .._models import tiny_llama, train_last_token
from ..gain_rl import (
    GaussianCurriculumSampler,
    GRPOLite,
    UniformSubsetSampler,
    angle_concentration,
    angle_order,
    collect_angle_signal,
    grpo_train,
)

__all__ = [
    "GainRLReproConfig",
    "end_to_end",
    "gainrl_sampler",
    "make_task",
    "resolve_ordering",
    "run",
    "warm_policy",
]

_DISTRACTORS = 19


@dataclass(frozen=True)
class GainRLReproConfig:
    vocab_size: int = 64
    hidden: int = 64
    variants: int = 2
    distractors: int = 8
    sft_fraction: float = 0.75
    sft_steps: int = 300
    sft_lr: float = 3e-3
    steps: int = 1200
    prompts_per_step: int = 16
    group_size: int = 8
    subset_size: int = 128
    lr: float = 6e-4
    threshold: float = 0.8
    eval_every: int = 10
    seeds: int = 3
    kl_beta: float = 0.005  # the trl script's beta (k3 KL to the frozen warm policy)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name != "kl_beta":
                check_positive(name, value, integer=isinstance(value, int))
        check_positive("kl_beta", self.kl_beta, strict=False)
        if not 0 < self.sft_fraction < 1:
            raise ValueError(f"sft_fraction must lie in (0, 1), got {self.sft_fraction}")


def make_task(cfg: GainRLReproConfig, seed: int) -> dict:
    """Prompts (N, distractors + 4), answers (N,), the pair id of each prompt, the SFT pairs."""
    base, labels = arithmetic_table("+")
    gen = torch.Generator().manual_seed(seed)
    n_pairs = len(base)
    rows, answers, pair = [], [], []
    for _v in range(cfg.variants):
        for i in range(n_pairs):
            k = int(torch.randint(1, cfg.distractors + 1, (1,), generator=gen))
            pool = torch.randperm(cfg.vocab_size - _DISTRACTORS, generator=gen)[:k] + _DISTRACTORS
            d = pool[torch.randint(0, k, (cfg.distractors,), generator=gen)]
            rows.append(torch.cat([d, base[i]]))
            answers.append(labels[i])
            pair.append(i)
    perm = torch.randperm(n_pairs, generator=gen)
    sft_pairs = perm[: int(cfg.sft_fraction * n_pairs)]
    return {
        "prompts": torch.stack(rows),
        "answers": torch.stack(answers),
        "pair": torch.tensor(pair),
        "sft_pairs": sft_pairs,
    }


def warm_policy(cfg: GainRLReproConfig, task: dict, seed: int):
    """The SFT-warmed policy: last-token CE on the prompts of the SFT pairs."""
    policy = tiny_llama(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden,
        num_layers=2,
        num_heads=4,
        intermediate_size=2 * cfg.hidden,
        max_position_embeddings=32,
        seed=seed,
    )
    keep = torch.isin(task["pair"], task["sft_pairs"])
    train_last_token(
        policy,
        task["prompts"][keep],
        task["answers"][keep],
        steps=cfg.sft_steps,
        lr=cfg.sft_lr,
        batch_size=64,
        seed=seed,
    )
    return policy


def _mechanism_checks(seed: int) -> dict:
    """The spec's mechanism thresholds on fixed tensors."""
    from scipy import stats

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 7, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    got = angle_concentration(x, mask=mask)
    ref = []
    for b in range(3):
        n = int(mask[b].sum())
        xb = x[b, :n] / x[b, :n].norm(dim=1, keepdim=True)
        vals = [float(xb[i] @ xb[j]) for i in range(n) for j in range(n) if j <= i + 1]
        ref.append(sum(vals) / len(vals))
    angle_err = float((got - torch.tensor(ref)).abs().max())
    segs = angle_concentration(x[0], segments=((0, 3), (3, 6)))
    xn = x[0] / x[0].norm(dim=1, keepdim=True)
    cm = (xn @ xn.T) * torch.tril(torch.ones(7, 7, dtype=torch.float64), diagonal=1)
    seg_err = abs(float(segs) - float(cm[3:6, 3:6].mean() + 8 * cm[3:6, 0:3].mean()))

    n, sigma, mu = 5000, 500.0, 2000.0
    sampler = GaussianCurriculumSampler(
        torch.arange(n), subset_size=256, std=sigma, mu=mu, seed=seed
    )
    ranks = np.concatenate([sampler.sample_ranks().numpy() for _ in range(8)])
    support = np.arange(n)
    pmf = np.exp(-0.5 * ((support - mu) / sigma) ** 2)
    cdf = np.cumsum(pmf / pmf.sum())
    ks = stats.kstest(ranks, lambda r: np.interp(np.floor(r), support, cdf))

    s = GaussianCurriculumSampler(torch.arange(100), 10, step=500, alpha=2, target_acc=0.5)
    formula = abs(s.delta(0.7, 0.3) - min(500 * (np.tanh(2 * 0.2) + np.tanh(2 * 0.3)), 1000))
    clipped_low = s.delta(0.0, -2.0) == 0.0
    clipped_high = (
        GaussianCurriculumSampler(torch.arange(100), 10, adj_max=100).delta(1.0, 1.0) == 100
    )
    big = GaussianCurriculumSampler(torch.arange(10_000), 10)
    mus = [big.mu]
    for a, c in ((0.0, 0.1), (0.9, 0.8), (0.2, -0.5), (0.5, 0.0)):
        big.update(a, c)
        mus.append(big.mu)
    monotone = all(b >= a for a, b in itertools.pairwise(mus))
    s1 = GaussianCurriculumSampler(torch.arange(300), 40, std=30, seed=3)
    s2 = GaussianCurriculumSampler(torch.arange(300), 40, std=30, seed=3)
    determinism = list(s1) == list(s2) and list(s1) == list(s2)

    grpo = GRPOLite(torch.nn.Identity(), group_size=4)
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    adv = grpo.advantages(rewards)
    logp = torch.randn(8, 3, generator=g, requires_grad=True)
    loss_equal = grpo.loss(logp[:4], logp[:4].detach(), adv[:4])
    loss_equal.backward()
    return {
        "angle_error": angle_err,
        "segment_error": seg_err,
        "ks_p": float(ks.pvalue),
        "delta_formula_error": formula,
        "clipping": float(clipped_low and clipped_high),
        "monotone": float(monotone),
        "determinism": float(determinism),
        "equal_group_loss": float(loss_equal.detach().abs()),
        "equal_group_grad": float(logp.grad[:4].abs().max()),
    }


# The official GSM8K values (rank units) and dataset size; the toy scales σ and n in this proportion
# (the spec's N/8 and N/16) and keeps adj_max = 2n as the official 1000 = 2·500 (module docstring).
_PAPER_N, _PAPER_STD, _PAPER_STEP, _PAPER_ADJ_MAX = 7473, 1000.0, 500.0, 1000.0


def gainrl_sampler(
    order: torch.Tensor, subset_size: int, seed: int = 0
) -> GaussianCurriculumSampler:
    """The toy's sampler: σ = N/8, n = N/16 (≈ the official 1000/7473 N and 500/7473 N),
    adj_max = n·(1000/500) = 2n, adj_min = 0, α = 2, β = 0.5, μ₀ = 0."""
    n = len(order)
    step = n / 16
    return GaussianCurriculumSampler(
        order,
        subset_size,
        std=n / 8,
        step=step,
        adj_max=step * _PAPER_ADJ_MAX / _PAPER_STEP,
        seed=seed,
    )


#: A custom ordering: a permutation (integers), a score per prompt (floats), or a callable
#: ``(warm_policy, task, signal) -> permutation | scores``.
_Ordering = (
    torch.Tensor
    | np.ndarray
    | Sequence[int]
    | Sequence[float]
    | Callable[[torch.nn.Module, dict, torch.Tensor], Any]
)


def resolve_ordering(ordering: Any, n: int) -> torch.Tensor:
    """The rank order (rank 0 first) that ``ordering`` gives ``n`` prompts.

    An integer array (tensor, numpy array or list) must be a permutation of ``range(n)`` and is
    taken as it is; a floating array is a score per prompt, sorted descending with ties by index
    (as :func:`~eff_llm.gain_rl.angle_order` sorts the angle signal). Raises ``ValueError`` on a
    wrong length or shape, a repeated or out-of-range index or a non-finite score, and
    ``TypeError`` on any other type (bools included).
    """
    if isinstance(ordering, torch.Tensor | np.ndarray | list | tuple):
        t = torch.as_tensor(
            np.asarray(ordering) if isinstance(ordering, list | tuple) else ordering
        )
    else:
        raise TypeError(
            "ordering must be None, a permutation of the prompt indices (integers), a score "
            "per prompt (floats), or a callable (policy, task, signal) -> one of those; "
            f"got {type(ordering).__name__}"
        )
    if t.ndim != 1 or len(t) != n:
        raise ValueError(
            f"ordering must be 1-D of length {n} (one per prompt), got {tuple(t.shape)}"
        )
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(
            f"ordering must hold integers (a permutation) or floats (scores), got {t.dtype}"
        )
    if t.is_floating_point():
        if not torch.isfinite(t).all():
            raise ValueError("ordering scores must be finite")
        return angle_order(t)
    t = t.long()
    if not torch.equal(torch.sort(t).values, torch.arange(n)):
        raise ValueError(
            f"an integer ordering must be a permutation of range({n}) (each prompt index once)"
        )
    return t


def end_to_end(
    cfg: GainRLReproConfig,
    seed: int,
    samplers: tuple[str, ...] = ("uniform", "gainrl"),
    *,
    ordering: _Ordering | None = None,
) -> dict:
    """Warm the policy, order the prompts by angle, then GRPO with each of ``samplers``.

    ``ordering`` replaces the order that the ``"gainrl"`` arm's moving Gaussian walks (rank 0 first;
    μ starts there): ``None`` (default) is GAIN-RL's, the warmed policy's angle concentration
    descending; otherwise a permutation of the prompt indices, a score per prompt (sorted
    descending) or a callable ``(warm_policy, task, signal) -> permutation | scores`` (``task`` as
    :func:`make_task` returns it, ``signal`` the angle concentration per prompt) — e.g. a
    difficulty curriculum by the warm policy's loss (see :func:`resolve_ordering`). The uniform arm
    and the premise diagnostic do not depend on it.
    """
    for name in samplers:
        check_choice("samplers", name, ["uniform", "gainrl"])
    task = make_task(cfg, seed)
    n = len(task["prompts"])
    if ordering is not None and not callable(ordering):
        fixed = resolve_ordering(ordering, n)  # fail before the warm-up
    t0 = time.perf_counter()
    warm = warm_policy(cfg, task, seed)
    loader = [task["prompts"][i : i + 256] for i in range(0, n, 256)]
    signal = collect_angle_signal(warm, loader)
    if ordering is None:
        order = angle_order(signal)
    elif callable(ordering):
        # on a copy: whatever the callable does to the policy (forwards, gradients) leaves both
        # arms' starting point alone
        order = resolve_ordering(ordering(copy.deepcopy(warm), task, signal.clone()), n)
    else:
        order = fixed
    out = {"warm_s": time.perf_counter() - t0}
    from ..gain_rl import greedy_accuracy

    out["warm_accuracy"] = greedy_accuracy(warm, task["prompts"], task["answers"])
    with torch.no_grad():
        warm_hit = warm(input_ids=task["prompts"]).logits[:, -1].argmax(-1) == task["answers"]
    for name in samplers:
        policy = copy.deepcopy(warm)
        ref = copy.deepcopy(warm).eval().requires_grad_(False) if cfg.kl_beta > 0 else None
        if name == "uniform":
            sampler = UniformSubsetSampler(n, cfg.subset_size, seed=seed)
        else:
            sampler = gainrl_sampler(order, cfg.subset_size, seed=seed)
        t0 = time.perf_counter()
        log = grpo_train(
            policy,
            task["prompts"],
            task["answers"],
            sampler,
            steps=cfg.steps,
            prompts_per_step=cfg.prompts_per_step,
            group_size=cfg.group_size,
            lr=cfg.lr,
            kl_beta=cfg.kl_beta,
            ref=ref,
            eval_every=cfg.eval_every,
            threshold=cfg.threshold,
            seed=seed,
        )
        with torch.no_grad():
            hit = policy(input_ids=task["prompts"]).logits[:, -1].argmax(-1) == task["answers"]
        seen = torch.isin(task["pair"], task["sft_pairs"])
        if name == "uniform":  # the paper's premise: does the angle rank what training teaches?
            gain = (hit.float() - warm_hit.float()).numpy()
            rho = stats.spearmanr(signal.numpy(), gain).statistic if gain.std() > 0 else np.nan
            out["premise_spearman"] = float(rho)
        steps_per_epoch = cfg.subset_size // cfg.prompts_per_step
        at_end = next((i for i, m in enumerate(log.mu) if m >= n - 1), None)
        out[name] = {
            "steps_to_threshold": log.steps_to_threshold,
            "final_accuracy": log.eval_accuracy[-1] if log.eval_accuracy else float("nan"),
            "eval_steps": log.eval_steps,
            "eval_accuracy": log.eval_accuracy,
            # where the accuracy went: the SFT pairs (forgetting) and the pairs GRPO must teach
            "sft_pairs_accuracy": float(hit[seen].float().mean()),
            "unseen_pairs_accuracy": float(hit[~seen].float().mean()),
            "seconds": time.perf_counter() - t0,
            "mu": log.mu[-5:],
            "steps_until_mu_at_end": None if at_end is None else (at_end + 1) * steps_per_epoch,
            "train_angle_range": (min(log.angle), max(log.angle)) if log.angle else None,
            "rollout_accuracy_min": min(log.rollout_accuracy) if log.rollout_accuracy else None,
            "epochs_mu_moved": sum(h["delta"] > 0 for h in getattr(sampler, "history", [])),
            "epochs": len(getattr(sampler, "history", [])),
        }
    sig = signal.numpy()
    out["angle_range"] = (float(sig.min()), float(sig.max()))
    return out


PAPER_TITLE = "Angles Don't Lie: Unlocking Training-Efficient RL Through the Model's Own Signals"
PAPER_HEADLINE = (
    "GAIN-RL (GRPO with angle-concentration data selection) reaches vanilla GRPO's accuracy in "
    "over 2.5x fewer training steps on math and coding tasks (Qwen2.5 0.5B-7B)"
)
_PAPER = "over 2.5x acceleration in training efficiency vs vanilla GRPO (GSM8K / MATH / coding, Qwen2.5 0.5B-7B)"


@threads(1)
def run(mode: Mode = "quick", seed: int = 0, cfg: GainRLReproConfig | None = None) -> Result:
    """Quick: one end-to-end seed of at most 100 GRPO steps. Full: 5 seeds of at most 1200 steps
    (median step ratio)."""
    if cfg is None:
        quick = mode == "quick"
        cfg = GainRLReproConfig(seeds=1 if quick else 5, steps=100 if quick else 1200)
    result = Result(
        name="llm.gain_rl",
        mode=mode,
        seed=seed,
        paper_title=PAPER_TITLE,
        headline=PAPER_HEADLINE,
    )
    mech = _mechanism_checks(seed)
    e2e_seeds = list(range(seed, seed + cfg.seeds))
    runs = [end_to_end(cfg, s) for s in e2e_seeds]

    def ratio_of(r: dict) -> float:
        g, u = r["gainrl"]["steps_to_threshold"], r["uniform"]["steps_to_threshold"]
        if u is None:  # the baseline never got there: no ratio (the claim cannot pass)
            return float("nan")
        return (cfg.steps if g is None else g) / u  # censored at the budget: a lower bound

    ratios = [ratio_of(r) for r in runs]
    defined = [x for x in ratios if not np.isnan(x)]
    ratio = float(np.median(defined)) if defined else float("nan")

    def gap_at_equal_steps(r: dict) -> float:
        """GAIN-RL − uniform train accuracy at the last step both arms evaluated (an arm stops
        once it reaches the threshold)."""
        g, u = r["gainrl"], r["uniform"]
        common = set(g["eval_steps"]) & set(u["eval_steps"])
        if not common:
            return float("nan")
        last = max(common)
        return (
            g["eval_accuracy"][g["eval_steps"].index(last)]
            - u["eval_accuracy"][u["eval_steps"].index(last)]
        )

    gaps = [gap_at_equal_steps(r) for r in runs]
    final_gap = float(np.median(gaps))
    rhos = [r.get("premise_spearman", float("nan")) for r in runs]
    ranges = [r["gainrl"]["train_angle_range"] for r in runs if r["gainrl"]["train_angle_range"]]
    c_lo = min((a for a, _ in ranges), default=float("nan"))
    c_hi = max((b for _, b in ranges), default=float("nan"))
    accs = [r["gainrl"]["rollout_accuracy_min"] for r in runs]
    acc_lo = min((a for a in accs if a is not None), default=float("nan"))
    at_end = [r["gainrl"]["steps_until_mu_at_end"] for r in runs]
    moved = [f"{r['gainrl']['epochs_mu_moved']}/{r['gainrl']['epochs']}" for r in runs]
    result.table = [
        {
            "seed": s,
            "warm-start train accuracy": r["warm_accuracy"],
            "uniform: steps to 80 %": r["uniform"]["steps_to_threshold"],
            "GAIN-RL: steps to 80 %": r["gainrl"]["steps_to_threshold"],
            "uniform final accuracy": r["uniform"]["final_accuracy"],
            "GAIN-RL final accuracy": r["gainrl"]["final_accuracy"],
            "uniform accuracy SFT / unseen pairs": (
                f"{r['uniform']['sft_pairs_accuracy']:.3f} / "
                f"{r['uniform']['unseen_pairs_accuracy']:.3f}"
            ),
            "GAIN-RL accuracy SFT / unseen pairs": (
                f"{r['gainrl']['sft_pairs_accuracy']:.3f} / "
                f"{r['gainrl']['unseen_pairs_accuracy']:.3f}"
            ),
            "GAIN-RL: μ at the last rank after (steps)": r["gainrl"]["steps_until_mu_at_end"],
        }
        for s, r in zip(e2e_seeds, runs, strict=True)
    ]
    over = "median over the seeds where uniform reached it"
    result.claims += [
        Claim(
            "angle metric − reference on fixed tensors (max |Δ|)", mech["angle_error"], 1e-6, "<="
        ),
        Claim("offline segment metric − reference (|Δ|)", mech["segment_error"], 1e-6, "<="),
        Claim("sampler rank histogram vs the Gaussian: KS p-value", mech["ks_p"], 0.01, ">"),
        Claim(
            "Δμ − n·tanh(α(acc − β)) − n·tanh(α·C̄) (|Δ|)", mech["delta_formula_error"], 1e-9, "<="
        ),
        Claim("adj_min ≤ Δμ ≤ adj_max (clipping; 1 = yes)", mech["clipping"], 1.0, ">="),
        Claim("μ never decreases (adj_min = 0) (1 = yes)", mech["monotone"], 1.0, ">="),
        Claim("same seed ⇒ same subsets (1 = yes)", mech["determinism"], 1.0, ">="),
        Claim(
            "GRPO loss on a group with equal rewards (|loss|)",
            mech["equal_group_loss"],
            1e-12,
            "<=",
        ),
        Claim(
            "GRPO gradient on a group with equal rewards (max |g|)",
            mech["equal_group_grad"],
            1e-12,
            "<=",
        ),
        paper_claim(
            f"steps to 80 % train accuracy: GAIN-RL / uniform ({over}; GAIN-RL censored at "
            f"{cfg.steps} steps)",
            [x for x in ratios if not np.isnan(x)] or [float("nan")],
            1.0,
            "<=",
            seeds=[s for s, x in zip(e2e_seeds, ratios, strict=True) if not np.isnan(x)],
            expected="xfail",
            reason=(
                "GAIN-RL never reaches 80 % while uniform does (480-1200 steps): the angle term "
                "keeps mu moving every epoch and the curriculum ends on the low-angle tail"
            ),
            paper=_PAPER,
            modes=("full",),
            headline=True,
        ),
        paper_claim(
            "train accuracy GAIN-RL − uniform at the last step both arms ran",
            gaps,
            0.0,
            seeds=e2e_seeds,
            expected="xfail",
            reason=(
                "GAIN-RL trails uniform (full mode, seeds 0-2: median -0.070): it forgets the SFT "
                "pairs outside the low-angle tail"
            ),
            paper=_PAPER,
        ),
    ]
    result.metrics.update(
        {
            "mechanisms": mech,
            "runs": runs,
            "ratios": ratios,
            "final_accuracy_gap": final_gap,
            "premise_spearman": rhos,
            "config": asdict(cfg),
        }
    )
    result.table.append({"seed": "median", "GAIN-RL − uniform accuracy at equal steps": final_gap})
    result.notes += [
        # no square brackets: the console renders notes as rich markup ("[inf, inf]" vanished)
        f"step ratio GAIN-RL / uniform per seed: {', '.join(f'{x:g}' for x in ratios)} (nan: "
        f"uniform never reached "
        f"{cfg.threshold:.0%} in {cfg.steps} steps; GAIN-RL counted at {cfg.steps} when it did not: "
        "a lower bound); stretch target "
        f"≤ 0.8 {'met' if ratio <= 0.8 else 'not met'}",
        f"train accuracy at the last step both arms ran, GAIN-RL − uniform (median): "
        f"{final_gap:+.3f}",
        f"Δμ = n·(tanh(2(acc − 0.5)) + tanh(2·C̄)) > 0 unless acc < 0.5 − C̄: GAIN-RL's "
        f"training-time C̄ spans {c_lo:.2f}-{c_hi:.2f}, its per-step rollout accuracy stays ≥ "
        f"{acc_lo:.2f}; μ moved forward in {', '.join(moved)} epochs (per seed) and reached the "
        f"last rank after {', '.join(str(a) for a in at_end)} steps; from there the half-Gaussian "
        "trains the lowest-angle prompts "
        "only (table: accuracy on the SFT pairs vs the unseen pairs GRPO must teach)",
        "the toy task and its distractor design are ours; the paper's 2.5× speed-up is not expected "
        "at this scale (spec)",
        "diagnostic (the paper's premise): Spearman correlation between angle concentration and "
        "the per-prompt gain in accuracy from uniform GRPO training, per seed: "
        f"{', '.join(f'{x:+.3f}' for x in rhos)} (median {float(np.nanmedian(rhos)):+.3f})",
    ]
    return result
