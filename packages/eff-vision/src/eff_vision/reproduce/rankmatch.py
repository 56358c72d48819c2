"""Reproduction ``vision.rankmatch``: RankMatch (reconstruction) vs the KL-only pseudo-label
baseline and supervised-only training on synthetic label distributions.

Data (spec): ``x ~ N(0, I_20)``, ``d(x) = softmax(W2ᵀ tanh(W1ᵀ x / 4) / 1.5)``, C = 6; 3,000
unlabelled and 3,000 test samples. Model: MLP 20-64-64-6, Adam 3e-3, 1,500 steps, batch 64
labelled + 256 unlabelled; weak augmentation ``+ N(0, 0.1²)``, strong ``+ N(0, 0.2²)``; λ_u ramps
0 → 0.5 over 500 steps after a 200-step warm-up. The three methods share the data, the
initialisation and the sampling seed (they coincide during the warm-up). Metrics are measured after
the last step (no model selection).

Paper claims per label budget (100 and 50 labels), each over seeds seed..seed+4 in full mode
(median); quick mode is a smoke run (100 labels, one seed, 750 steps) judging the checks.
"Semi-supervised beats supervised-only" did **not** reproduce in the spec's prototype: it is an
xfail paper claim beside the non-inferiority bound (KL within 15 %).

Full mode also judges the same four claims, with the same thresholds, in two settings beyond the
defaults (issue #26; :data:`SETTINGS`, :func:`setting_experiment`): real images — the bundled
digits with soft labels from a nearest-neighbour teacher (:func:`eff_vision.data.ldl.make_digits_ldl`,
C = 10) and pixel-shift views (weak ±1, strong ±2 pixels, :class:`eff_vision.rankmatch.RandomShift`)
— and the synthetic task at C = 10 labels.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed
from eff_vision.data.ldl import DIGITS_SHAPE, LDLSplit, make_digits_ldl, make_synthetic_ldl
from eff_vision.metrics.ldl import LOWER_IS_BETTER, ldl_report
from eff_vision.models import ldl_mlp
from eff_vision.rankmatch import (
    Augment,
    GaussianNoise,
    RandomShift,
    RankMatchLoss,
    RankMatchTrainer,
    prr_loss,
    split_xd,
)

__all__ = [
    "METHODS",
    "SETTINGS",
    "RankMatchReproConfig",
    "digits_ldl_builder",
    "experiment",
    "mechanics",
    "run",
    "setting_experiment",
]

METHODS = {
    "sup": "supervised only",
    "kl_pseudo": "KL pseudo-label",
    "rankmatch": "RankMatch (recon.)",
}


@dataclass(frozen=True)
class RankMatchReproConfig:
    """The reproduction's settings. ``n_labeled`` / ``n_unlabeled`` / ``n_test`` and ``n_labels``
    (the number of labels C) size the synthetic data (ignored when :func:`experiment` gets
    ``data``); ``steps``, ``lr``, ``hidden`` the MLP's training; ``weak_std`` / ``strong_std``
    the default ``GaussianNoise`` augmentations; ``lambda_u``, ``warmup_steps``,
    ``rampup_steps`` the unlabelled weight's schedule."""

    n_labeled: int = 100
    n_unlabeled: int = 3000
    n_test: int = 3000
    n_labels: int = 6
    steps: int = 1500
    lr: float = 3e-3
    hidden: int = 64
    weak_std: float = 0.1
    strong_std: float = 0.2
    lambda_u: float = 0.5
    warmup_steps: int = 200
    rampup_steps: int = 500

    def __post_init__(self) -> None:
        for name in ("n_labeled", "n_unlabeled", "n_test", "steps", "hidden"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("n_labels", self.n_labels, minimum=2)


Splits = tuple[Any, Any, Any]
DataBuilder = Callable[[int], Splits]


def _splits(data: Splits | DataBuilder, seed: int) -> tuple[LDLSplit, LDLSplit, LDLSplit]:
    """User data as three float32 :class:`LDLSplit`, checked for matching shapes."""
    if callable(data):
        data = data(seed)
    if not (isinstance(data, tuple | list) and len(data) == 3):
        raise TypeError(
            "data must be (labeled, unlabeled, test) or a builder seed -> (labeled, unlabeled, "
            f"test); got {type(data).__name__}"
        )
    (xl, dl), (xu, _), (xt, dt) = (
        split_xd(part, name, need_d=name != "unlabeled")
        for part, name in zip(data, ("labeled", "unlabeled", "test"), strict=True)
    )
    if not (xl.dim() == xu.dim() == xt.dim() == 2 and xl.shape[1] == xu.shape[1] == xt.shape[1]):
        raise ValueError(
            "data: x of every split must be (n, F) with the same F, got "
            f"{tuple(xl.shape)}, {tuple(xu.shape)}, {tuple(xt.shape)}"
        )
    if dl.dim() != 2 or dl.shape[1] < 2 or dt.shape[1:] != dl.shape[1:]:
        raise ValueError(
            f"data: d must be (n, C) with the same C >= 2 in labeled and test, got "
            f"{tuple(dl.shape)} and {tuple(dt.shape)}"
        )
    return LDLSplit(xl.numpy(), dl.numpy()), LDLSplit(xu.numpy()), LDLSplit(xt.numpy(), dt.numpy())


def experiment(
    cfg: RankMatchReproConfig,
    seed: int,
    *,
    data: Splits | DataBuilder | None = None,
    weak_aug: Augment | None = None,
    strong_aug: Augment | None = None,
) -> dict[str, Any]:
    """Train the three methods on one data draw; returns the metric table and per-method time.

    ``data``: the user's ``(labeled, unlabeled, test)`` — each an ``LDLSplit`` or an ``(x, d)``
    pair (``x`` (n, F), ``d`` (n, C) label distributions; ``unlabeled`` may be ``x`` alone) — or a
    builder ``seed -> (labeled, unlabeled, test)``; C is then read from ``d``. Default: the
    synthetic data of ``cfg`` (C = ``cfg.n_labels``). ``weak_aug`` / ``strong_aug``: callables
    ``aug(x, generator) -> x`` (default ``GaussianNoise(cfg.weak_std)`` /
    ``GaussianNoise(cfg.strong_std)``).
    """
    if data is None:
        lab, unl, test = make_synthetic_ldl(
            cfg.n_labeled, cfg.n_unlabeled, cfg.n_test, n_labels=cfg.n_labels, seed=seed
        )
    else:
        lab, unl, test = _splits(data, seed)
    weak = GaussianNoise(cfg.weak_std) if weak_aug is None else weak_aug
    strong = GaussianNoise(cfg.strong_std) if strong_aug is None else strong_aug
    n_in, n_out = lab.x.shape[1], lab.d.shape[1]
    torch.manual_seed(derive_seed(seed, 72))
    init = ldl_mlp(n_in, cfg.hidden, n_out).state_dict()
    x_test = torch.from_numpy(test.x)
    rows, metrics, times = [], {}, {}
    for key, label in METHODS.items():
        model = ldl_mlp(n_in, cfg.hidden, n_out)
        model.load_state_dict(init)
        loss = RankMatchLoss(
            lambda_u=0.0 if key == "sup" else cfg.lambda_u,
            warmup_steps=cfg.warmup_steps,
            rampup_steps=cfg.rampup_steps,
            unlabeled_loss="kl" if key == "kl_pseudo" else "prr",
        )
        trainer = RankMatchTrainer(
            model, torch.optim.Adam(model.parameters(), lr=cfg.lr), weak, strong, loss,
            seed=derive_seed(seed, 73),
        )  # fmt: skip
        t0 = time.process_time()
        trainer.fit((lab.x, lab.d), unl.x, cfg.steps)
        times[key] = time.process_time() - t0
        with torch.no_grad():
            pred = model(x_test).softmax(-1)
        metrics[key] = ldl_report(pred, test.d)
        rows.append({"method": label, **metrics[key], "CPU s": times[key]})
    return {"rows": rows, "metrics": metrics, "times": times, "n_labels": int(n_out)}


def _naive_prr(p: torch.Tensor, d: torch.Tensor, margin: bool) -> float:
    total = 0.0
    for b in range(p.shape[0]):
        for j in range(p.shape[1]):
            for k in range(p.shape[1]):
                if d[b, j] > d[b, k]:
                    gap = float(d[b, j] - d[b, k]) if margin else 0.0
                    total += max(0.0, gap - float(p[b, j] - p[b, k]))
    return total / (p.shape[0] * p.shape[1])


def mechanics(seed: int) -> list[Claim]:
    """The spec's mechanics items, measured (the test suite checks them too)."""
    gen = torch.Generator().manual_seed(derive_seed(seed, 74))
    d = torch.softmax(torch.randn(16, 6, generator=gen, dtype=torch.float64) * 2, -1)
    p = torch.softmax(torch.randn(16, 6, generator=gen, dtype=torch.float64) * 2, -1)
    # a prediction with the target's ranking but shrunk gaps (zero only without margin)
    same_rank = torch.softmax(torch.log(d) * 0.5, -1)
    err_naive = max(
        abs(float(prr_loss(p, d, margin=m)) - _naive_prr(p, d, m)) for m in (True, False)
    )
    zero_exact = max(
        float(prr_loss(d, d, margin=True)), float(prr_loss(same_rank, d, margin=False))
    )
    shrunk_margin = float(prr_loss(same_rank, d, margin=True))
    loss = RankMatchLoss()
    sched = [loss.unlabeled_weight(t) for t in (0, 199, 200, 450, 700, 1499)]
    model = ldl_mlp(6, 8, 6)
    q = loss.pseudo_label(model, torch.randn(4, 6, generator=gen), GaussianNoise(0.1), gen)
    # hand-computed LDL metrics on a 2-sample example
    pm = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)
    dm = torch.tensor([[0.4, 0.4, 0.2], [0.2, 0.0, 0.8]], dtype=torch.float64)
    rep = ldl_report(pm, dm)
    hand = {
        "chebyshev": 0.1,
        "intersection": 0.9,
        "canberra": (0.1 / 0.9 + 0.1 / 0.7 + 0.0 + 0.1 / 0.3 + 1.0 + 0.0) / 2,
    }
    err_metrics = max(abs(rep[k] - v) for k, v in hand.items())
    return [
        Claim("prr_loss vs a naive double loop, max abs difference (margin and no-margin)", err_naive, 1e-12, "<="),
        Claim("prr_loss at the target (margin) and at the target's ranking (no margin)", zero_exact, 0.0, "<="),
        Claim("prr_loss (margin) of a same-ranking prediction with shrunk gaps (must be > 0)", shrunk_margin, 0.0, ">"),
        Claim("pseudo-labels carry no gradient (1 = requires_grad)", float(q.requires_grad), 0.0, "<="),
        Claim("λ_u during warm-up (steps 0, 199)", max(sched[:2]), 0.0, "<="),
        Claim("λ_u after the ramp (steps 700, 1499) equals 0.5: |λ_u − 0.5|", max(abs(s - 0.5) for s in sched[4:]), 1e-12, "<="),
        Claim("LDL metrics vs hand-computed values, max abs difference", err_metrics, 1e-9, "<="),
    ]  # fmt: skip


PAPER = ("abstract: with few labelled samples RankMatch outperforms supervised LDL and existing "
         "semi-supervised methods (no number retrieved)")  # fmt: skip
FULL: tuple[Mode, ...] = ("full",)


def _one_seed(cfg: RankMatchReproConfig, seed: int, **kw: Any) -> dict[str, Any]:
    """The three methods on one data draw (same data, initialisation and sampling seed) and the
    per-seed numbers of the paper claims; ``kw`` goes to :func:`experiment`."""
    out = experiment(cfg, seed, **kw)
    m = out["metrics"]
    wins = sum(
        (m["rankmatch"][k] < m["kl_pseudo"][k]) if low else (m["rankmatch"][k] > m["kl_pseudo"][k])
        for k, low in LOWER_IS_BETTER.items()
    )
    return {
        "out": out, "wins": float(wins),
        "rel_kl": (m["kl_pseudo"]["kl"] - m["rankmatch"]["kl"]) / m["kl_pseudo"]["kl"],
        "rel_sup": (m["rankmatch"]["kl"] - m["sup"]["kl"]) / m["sup"]["kl"],
    }  # fmt: skip


def digits_ldl_builder(n_labeled: int = 100) -> DataBuilder:
    """The real-image LDL task as a data builder ``seed -> (labeled, unlabeled, test)``:
    :func:`eff_vision.data.ldl.make_digits_ldl` (bundled digits, k = 10 nearest-neighbour teacher
    on a 500-image pool, smoothing 0.5, C = 10) with ``n_labeled`` labelled images."""

    def build(seed: int) -> Splits:
        return make_digits_ldl(n_labeled=n_labeled, n_unlabeled=800, n_test=497 - n_labeled,
                               seed=seed)  # fmt: skip

    return build


#: The settings beyond the defaults judged in full mode (issue #26): name -> (config, keyword
#: arguments of :func:`experiment`). Digits: weak = ±1-pixel shift, strong = ±2-pixel shift of the
#: 8×8 image (FixMatch's weak/strong split, as translations; fixed before any measurement).
SETTINGS: dict[str, tuple[RankMatchReproConfig, dict[str, Any]]] = {
    "digits kNN-teacher LDL (C = 10, shifts ±1/±2), 100 labels": (
        RankMatchReproConfig(n_labeled=100),
        {
            "data": digits_ldl_builder(100),
            "weak_aug": RandomShift(1, DIGITS_SHAPE),
            "strong_aug": RandomShift(2, DIGITS_SHAPE),
        },
    ),
    "synthetic C = 10, 100 labels": (RankMatchReproConfig(n_labeled=100, n_labels=10), {}),
}


def setting_experiment(name: str, seed: int, steps: int | None = None) -> dict[str, Any]:
    """:func:`experiment` in the setting ``name`` of :data:`SETTINGS` (``steps`` overrides the
    config's, e.g. for a short test run)."""
    check_choice("name", name, list(SETTINGS))
    cfg, kw = SETTINGS[name]
    if steps is not None:
        cfg = RankMatchReproConfig(**{**cfg.__dict__, "steps": steps})
    return experiment(cfg, seed, **kw)


_SUP_REASON = ("additive-noise views do not preserve the label distribution, so SSL does not pay "
               "off (seed 0, 100 labels: +4.0 %; the spec's prototype +7.8 % / +13.5 %)")  # fmt: skip

#: Expected verdicts of the settings beyond the defaults, set by the first 5-seed run (seeds 0-4):
#: {setting: {claim key: xfail reason}}; a claim not listed is expected to reproduce.
SETTING_XFAIL: dict[str, dict[str, str]] = {
    "digits kNN-teacher LDL (C = 10, shifts ±1/±2), 100 labels": {
        "wins": "3 [2, 5] of 6 metrics (per seed 2, 5, 3, 2, 5; 2/5 seeds >= 5): with label-preserving "
        "shift views the KL pseudo-label is as good a target as the ranking; not an implementation "
        "bug (PRR checked on the tied vote histograms); it depends on the view gap: at seeds 0-1, "
        "strong = weak = ±1 gives 0/6, strong ±3 gives 6/6 and 5/6",
        "rel_kl": "-1.1 % [-6.5, +6.2] (0/5 seeds >= 20 %): KL pseudo-labels do not suffer the "
        "confirmation bias of the synthetic task here (KL pseudo-label 0.156 vs supervised-only "
        "0.159, medians), so there is little for the ranking loss to win back",
    },
    "synthetic C = 10, 100 labels": {
        "rel_kl": "+18.1 % [+13.6, +19.2] (0/5 seeds >= 20 %; RankMatch wins 6/6 metrics on every "
        "seed): RankMatch stays at supervised-only level (+1.9 %); the gain is the KL baseline's "
        "confirmation bias, +24 % over supervised-only at C = 10, a little less than at C = 6",
        "beats_sup": "+1.9 % [+0.9, +2.7] (0/5 seeds): additive-noise views do not preserve the "
        "label distribution, as at C = 6",
    },
}


def _claims(tag: str, per: dict[int, dict[str, Any]], seeds: list[int],
            xfail: dict[str, str]) -> list[Claim]:  # fmt: skip
    """The four paper claims of one setting (thresholds of the spec's "(a)" items); ``xfail``
    maps a claim key (``wins``, ``rel_kl``, ``noninf``, ``beats_sup``) to its xfail reason."""
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731

    def exp(key: str) -> dict[str, Any]:
        return {"expected": "xfail", "reason": xfail[key]} if key in xfail else {}

    return [
        paper_claim(f"[{tag}] metrics (of 6) where RankMatch beats KL pseudo-label", vals("wins"), 5, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER, **exp("wins")),
        paper_claim(f"[{tag}] relative KL gain of RankMatch over KL pseudo-label", vals("rel_kl"), 0.20, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER, headline=True, **exp("rel_kl")),
        paper_claim(f"[{tag}] relative KL excess of RankMatch over supervised-only (non-inferiority)",
                    vals("rel_sup"), 0.15, "<=", seeds=seeds, modes=FULL, paper=PAPER, **exp("noninf")),
        paper_claim(f"[{tag}] relative KL excess of RankMatch over supervised-only (RankMatch beats it)",
                    vals("rel_sup"), 0.0, "<", seeds=seeds, modes=FULL, paper=PAPER, headline=True,
                    **exp("beats_sup")),
    ]  # fmt: skip


def _record(result: Result, tag: str, per: dict[int, dict[str, Any]], seeds: list[int]) -> None:
    """Table rows, metrics and the per-seed KL note of one setting."""
    for s in seeds:
        for row in per[s]["out"]["rows"]:
            result.table.append({"setting": f"seed {s}, {tag}", **row})
        result.metrics[f"seed {s}, {tag}"] = {
            **per[s]["out"]["metrics"], "cpu_s": per[s]["out"]["times"],
        }  # fmt: skip
    result.notes.append(
        f"{tag}, seeds {seeds}: supervised-only KL "
        + ", ".join(f"{per[s]['out']['metrics']['sup']['kl']:.4f}" for s in seeds)
        + "; RankMatch KL "
        + ", ".join(f"{per[s]['out']['metrics']['rankmatch']['kl']:.4f}" for s in seeds)
        + "; KL pseudo-label KL "
        + ", ".join(f"{per[s]['out']['metrics']['kl_pseudo']['kl']:.4f}" for s in seeds)
    )


def run(mode: Mode = "quick", seed: int = 0, cfg: RankMatchReproConfig | None = None) -> Result:
    """Paper claims per label budget (100 and 50 labels) over seeds seed..seed+4 in full mode,
    and the same claims in the two :data:`SETTINGS` beyond the defaults (full mode only).
    Quick mode is a smoke run (100 labels, one seed, 750 steps: the warm-up and ramp then end
    together) that judges the checks; its paper claims are judged in full mode. ``cfg`` (default:
    the mode's, per budget) replaces the configuration and its ``n_labeled`` is the one budget."""
    check_choice("mode", mode, ["quick", "full"])
    result = Result(
        name="vision.rankmatch", mode=mode, seed=seed,
        paper_title="RankMatch: A Novel Approach to Semi-Supervised Label Distribution Learning "
        "Leveraging Rank Correlation between Labels",
        headline="RankMatch (pseudo-labels from averaged weak views + pairwise relevance ranking) "
        "beats supervised-only and semi-supervised LDL baselines with few labels (no number retrieved)",
    )  # fmt: skip
    if mode == "quick":
        budgets, steps = (100,), 750
    else:
        budgets, steps = (100, 50), RankMatchReproConfig().steps
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    if cfg is not None:  # the caller's configuration: its own label budget
        budgets = (cfg.n_labeled,)
    base = cfg
    for n_lab in budgets:
        cfg = base or RankMatchReproConfig(n_labeled=n_lab, steps=steps)
        per = {s: _one_seed(cfg, s) for s in seeds}
        tag = f"{n_lab} labels"
        _record(result, tag, per, seeds)
        result.claims += _claims(tag, per, seeds, {"beats_sup": _SUP_REASON})
    if mode == "full":
        for name, (cfg, kw) in SETTINGS.items():
            per = {s: _one_seed(cfg, s, **kw) for s in seeds}
            _record(result, name, per, seeds)
            result.claims += _claims(name, per, seeds, SETTING_XFAIL.get(name, {}))
    result.claims += mechanics(seed)
    result.metrics["seeds"] = seeds
    result.notes.append(
        "RankMatch is our reconstruction from the abstracts (PRR with margin on labelled data, "
        "margin-free PRR on averaged weak-view pseudo-labels); supervised-only uses the same labelled "
        "loss (KL + PRR_m)."
        + (" Quick mode: a smoke run (100 labels, 750 steps)." if mode == "quick" else "")
    )
    return result
