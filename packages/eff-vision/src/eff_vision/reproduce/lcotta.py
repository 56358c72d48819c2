"""Reproduction ``vision.lcotta``: LCoTTA vs source, norm-adapt, TENT and EATA (filter only) on a
long stream of corrupted scikit-learn digits.

Setting (spec): source = 1,000 digits (seeded split), stream = the other 797 under six corruptions
at severity 1.8 (``eff_vision.data.corruptions``; contrast scales around 0), each a permuted pass
in batches of 32, the six-corruption round repeated 24 times (3,600 steps). Model: MLP
64-128-64-10 with LayerNorm after each inner linear layer (the ViT-like case; the 384 LN affine
parameters adapt), trained on the source with Adam. Every adaptive method: SGD lr 0.02, momentum
0.9 with Nesterov (the official framework's default); EATA and LCoTTA with
``e_margin = 0.4 ln 10`` and ``d_margin = 0.4`` (EATA's CIFAR-10 value: 0.05 rejects almost every
sample at C = 10); LCoTTA rank / window / record-every = 4 / 30 / 3.
Metric: online error per round (prediction before the update), mean, last round, and max − min
over rounds. All methods see the same stream (materialised once).

Beyond the defaults (issue #26, full mode): ``LCoTTAReproConfig(params="all")`` adapts every
parameter instead of the norm affines; :func:`adapted_set_sweep` runs EATA and LCoTTA over
:data:`SWEEP_LRS` × :data:`ADAPTED_SETS` on seeds 0–4 (table rows, the ``lr_sweep`` series, the
smallest lr where LCoTTA's median last-round error exceeds the source's by > 0.02), and the
paper claim err_last(LCoTTA) − err_last(source) ≤ 0.02 is judged with all parameters adapted at
the default lr (xfail: the model collapses before the projection starts).

Honest reading (spec): LCoTTA avoiding TENT's long-stream collapse reproduces in this toy; LCoTTA
beating the EATA-style filter alone did **not** reproduce in the spec's prototype (0.03–0.07 worse
in 4 settings): "LCoTTA beats EATA" is an xfail paper claim. Paper claims are judged on the
median over seeds (quick: 1 seed, 8 rounds = 1,200 steps; full: 5 seeds, the spec's 24 rounds).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed
from eff_vision._training import accuracy, train_classifier
from eff_vision.data.corruptions import DIGIT_CORRUPTIONS, digits_stream
from eff_vision.data.digits import digits_splits
from eff_vision.lcotta import GradientSubspaceTracker, LCoTTA
from eff_vision.models import LNDigitsMLP  # re-exported: it lived here
from eff_vision.tta import EATA, NormAdapt, Tent

__all__ = [
    "ADAPTED_SETS",
    "SWEEP_LRS",
    "LCoTTAReproConfig",
    "LNDigitsMLP",
    "adapted_set_sweep",
    "experiment",
    "mechanics",
    "run",
    "source_model",
]

METHODS = ("source", "norm", "tent", "eata", "lcotta")


#: The adapted sets of :class:`LCoTTAReproConfig` ``params``: the norm layers' affines (the
#: released code's choice, 384 parameters here) or every parameter of the model (17,610).
ADAPTED_SETS = ("norm", "all")


@dataclass(frozen=True)
class LCoTTAReproConfig:
    """The reproduction's settings (spec): stream (``rounds``, ``severity``, ``batch_size``), the
    adaptive methods' SGD (``lr``, ``momentum``) and adapted set ``params`` (``"norm"``: the norm
    affines, default; ``"all"``: every parameter, for TENT, EATA and LCoTTA alike), LCoTTA's
    subspace (``rank``, ``window``, ``record_every``), EATA's ``d_margin``, and the source training."""

    rounds: int = 24
    severity: float = 1.8
    batch_size: int = 32
    lr: float = 0.02
    momentum: float = 0.9
    rank: int = 4
    window: int = 30
    record_every: int = 3
    d_margin: float = 0.4
    source_epochs: int = 60
    source_lr: float = 1e-3
    params: str = "norm"

    def __post_init__(self) -> None:
        for name in ("rounds", "batch_size", "rank", "window", "record_every", "source_epochs"):
            check_int(name, getattr(self, name), minimum=1)
        check_choice("params", self.params, ADAPTED_SETS)

    @property
    def e_margin(self) -> float:
        return 0.4 * math.log(10)


_SOURCE_CACHE: dict[tuple[int, int, float], tuple[LNDigitsMLP, dict[str, Any]]] = {}


def source_model(cfg: LCoTTAReproConfig, seed: int) -> tuple[LNDigitsMLP, dict[str, Any]]:
    """The source LN-MLP trained on the 1,000 source digits (cached in-process; copy before use)."""
    key = (seed, cfg.source_epochs, cfg.source_lr)
    if key not in _SOURCE_CACHE:
        (xs, ys), (xt, yt) = digits_splits((1000, 797), seed)
        torch.manual_seed(derive_seed(seed, 51))
        model = LNDigitsMLP()
        t0 = time.process_time()
        opt = torch.optim.Adam(model.parameters(), lr=cfg.source_lr)
        train_classifier(model, xs, ys, cfg.source_epochs, opt, 64, derive_seed(seed, 52))
        info = {
            "train_cpu_s": time.process_time() - t0,
            "clean_stream_accuracy": accuracy(model, xt, yt),
            "stream_images": (xt, yt),
        }
        _SOURCE_CACHE[key] = (model, info)
    return _SOURCE_CACHE[key]


def make_method(name: str, model: nn.Module, cfg: LCoTTAReproConfig) -> nn.Module:
    m = copy.deepcopy(model)
    if name == "source":
        return m.eval()
    if name == "norm":
        return NormAdapt(m)
    if name == "tent":
        return Tent(m, lr=cfg.lr, momentum=cfg.momentum, params=cfg.params)
    if name == "eata":
        return EATA(
            m, lr=cfg.lr, momentum=cfg.momentum, e_margin=cfg.e_margin, d_margin=cfg.d_margin,
            params=cfg.params,
        )  # fmt: skip
    if name == "lcotta":
        return LCoTTA(
            m, lr=cfg.lr, momentum=cfg.momentum, rank=cfg.rank, window=cfg.window,
            record_every=cfg.record_every, e_margin=cfg.e_margin, d_margin=cfg.d_margin,
            params=cfg.params,
        )  # fmt: skip
    raise ValueError(f"method must be one of {list(METHODS)}, got {name!r}")


def run_stream(method: nn.Module, stream: list[tuple[torch.Tensor, torch.Tensor, str]],
               per_round: int) -> dict[str, Any]:  # fmt: skip
    """Online errors (prediction before the update) per round."""
    wrong = np.zeros(len(stream) // per_round)
    seen = np.zeros_like(wrong)
    t0 = time.process_time()
    for i, (x, y, _) in enumerate(stream):
        if isinstance(method, nn.Module) and not hasattr(method, "reset"):
            with torch.no_grad():
                out = method(x)
        else:
            out = method(x)
        r = i // per_round
        wrong[r] += int((out.argmax(1) != y).sum())
        seen[r] += len(y)
    err = (wrong / seen).tolist()
    return {
        "per_round": err,
        "mean": float(np.mean(err)),
        "last": float(err[-1]),
        "range": float(max(err) - min(err)),
        "cpu_s": time.process_time() - t0,
    }


def experiment(
    cfg: LCoTTAReproConfig, seed: int, methods: tuple[str, ...] = METHODS
) -> dict[str, Any]:
    model, info = source_model(cfg, seed)
    stream = list(
        digits_stream(
            cfg.severity, cfg.rounds, cfg.batch_size, seed=seed, images=info["stream_images"]
        )
    )
    per_round = len(stream) // cfg.rounds
    results, extra = {}, {}
    for name in methods:
        method = make_method(name, model, cfg)
        results[name] = run_stream(method, stream, per_round)
        if name in ("eata", "lcotta"):
            extra[name] = {
                "kept_fraction": method.kept_fraction,
                "skipped": method.stats["skipped"],
            }
        if name == "lcotta":
            extra[name].update({
                "projected_steps": method.stats["projected"], "energy_ratio": method.energy_ratio,
                "basis_refreshes": method.subspace.refreshes, "recorded": method.subspace.recorded,
            })  # fmt: skip
    return {"results": results, "extra": extra, "info": info, "steps": len(stream)}


def subspace_retention(
    seed: int, d: int = 2000, n: int = 100, rank: int = 10
) -> tuple[float, float]:
    """The spec's mechanism test: window of n gradients = (3-dim subspace part, scale 3) + an
    isotropic part of the same norm; fraction of a fresh in-subspace / isotropic gradient's norm
    kept by the rank-``rank`` projection."""
    g = torch.Generator().manual_seed(derive_seed(seed, 53))
    basis = torch.linalg.qr(torch.randn(d, 3, generator=g, dtype=torch.float64))[0].T  # (3, d)

    def sub() -> torch.Tensor:
        return (3 * torch.randn(3, generator=g, dtype=torch.float64)) @ basis

    tracker = GradientSubspaceTracker(rank, n, 1)
    for t in range(1, n + 1):
        s = sub()
        iso = torch.randn(d, generator=g, dtype=torch.float64)
        tracker.observe(t, s + iso / iso.norm() * s.norm())
    fresh_s = sub()
    fresh_iso = torch.randn(d, generator=g, dtype=torch.float64)
    keep_s = float(tracker.project(fresh_s).norm() / fresh_s.norm())
    keep_iso = float(tracker.project(fresh_iso).norm() / fresh_iso.norm())
    return keep_s, keep_iso


def mechanics(cfg: LCoTTAReproConfig, seed: int) -> dict[str, float]:
    """No projection before k·s steps; refresh only on window change; PCA match; empty filter."""
    from sklearn.decomposition import PCA

    model, info = source_model(cfg, seed)
    stream = list(
        digits_stream(cfg.severity, 1, cfg.batch_size, seed=seed, images=info["stream_images"])
    )
    k, s = cfg.rank, cfg.record_every
    lc = make_method("lcotta", model, cfg)
    first_projected, refresh_ok = None, True
    for i, (x, _, _) in enumerate(stream[: k * s + 3 * s]):
        before = (lc.stats["projected"], lc.subspace.recorded, lc.subspace.refreshes)
        lc(x)
        if lc.stats["projected"] > before[0] and first_projected is None:
            first_projected = i
        # a refresh happens iff the window changed (and the tracker is ready)
        refreshed = lc.subspace.refreshes - before[2]
        changed = lc.subspace.recorded - before[1]
        refresh_ok &= refreshed == (1 if (changed and lc.subspace.ready) else 0)
    window = torch.stack(list(lc.subspace._window)).double().numpy()
    pca = PCA(n_components=k, svd_solver="full").fit(window)
    ours = lc.subspace.basis.double().numpy()
    k_eff = ours.shape[0]
    pca_err = float(np.abs(np.abs(ours @ pca.components_[:k_eff].T) - np.eye(k_eff)).max())
    # a batch where no sample passes the filter (e_margin tiny) leaves the parameters unchanged
    strict = LCoTTA(copy.deepcopy(model), lr=cfg.lr, rank=k, window=cfg.window, record_every=s,
                    e_margin=1e-6, d_margin=cfg.d_margin)  # fmt: skip
    p0 = [p.detach().clone() for p in strict.params]
    for x, _, _ in stream[:3]:
        strict(x)
    unchanged = all(torch.equal(a, b) for a, b in zip(p0, strict.params, strict=True))
    # same seed ⇒ same error curve (one round)
    short = LCoTTAReproConfig(**{**cfg.__dict__, "rounds": 1})
    curves = [
        experiment(short, seed, ("lcotta",))["results"]["lcotta"]["per_round"] for _ in range(2)
    ]
    keep_s, keep_iso = subspace_retention(seed)
    return {
        "first_projected_step": float(first_projected if first_projected is not None else -1),
        "k_times_s": float(k * s),
        "refresh_only_on_change": float(refresh_ok),
        "pca_axes_err": pca_err,
        "empty_filter_unchanged": float(unchanged and strict.stats["skipped"] == 3),
        "same_seed_same_curve": float(curves[0] == curves[1]),
        "retain_subspace": keep_s,
        "retain_isotropic": keep_iso,
    }


#: The learning rates of the adapted-set sweep (issue #26): 1/20 to 10× the reproduction's 0.02.
SWEEP_LRS = (0.001, 0.005, 0.02, 0.05, 0.2)
SWEEP_METHODS = ("eata", "lcotta")


def adapted_set_sweep(
    cfg: LCoTTAReproConfig,
    seeds: list[int],
    lrs: tuple[float, ...] = SWEEP_LRS,
    sets: tuple[str, ...] = ADAPTED_SETS,
    methods: tuple[str, ...] = SWEEP_METHODS,
    done: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Where the subspace stops protecting LCoTTA: every ``(adapted set, lr)`` of ``sets × lrs``
    runs ``methods`` (and the source) on each seed's stream with ``cfg`` otherwise unchanged.

    Returns ``{"runs": {(set, lr): {seed: {method: run_stream result}}}, "rows": [...]}``, one
    row per ``(set, lr)`` with the medians over seeds of each method's last-round error minus the
    source's, and LCoTTA's per-round range. ``done`` (``{seed: experiment results}``) reuses the
    runs of ``cfg`` itself.
    """
    for lr in lrs:
        LCoTTAReproConfig(**{**cfg.__dict__, "lr": lr})  # validates
    runs: dict[tuple[str, float], dict[int, dict[str, Any]]] = {}
    rows = []
    for params in sets:
        for lr in lrs:
            c = LCoTTAReproConfig(**{**cfg.__dict__, "lr": lr, "params": params})
            per: dict[int, dict[str, Any]] = {}
            for s in seeds:
                if done is not None and s in done and c == cfg:
                    per[s] = {k: done[s][k] for k in ("source", *methods)}
                else:
                    per[s] = experiment(c, s, ("source", *methods))["results"]
            runs[(params, lr)] = per
            row: dict[str, Any] = {"adapted set": params, "lr": lr}
            for m in methods:
                gaps = [per[s][m]["last"] - per[s]["source"]["last"] for s in seeds]
                row[f"{m} − source (median)"] = float(np.median(gaps))
                row[f"{m} − source (max)"] = float(np.max(gaps))
            if "lcotta" in methods:
                row["lcotta range (median)"] = float(
                    np.median([per[s]["lcotta"]["range"] for s in seeds])
                )
            rows.append(row)
    return {"runs": runs, "rows": rows}


PAPER = ("abstract: LCoTTA overcomes degeneration and significantly outperforms existing methods "
         "(TENT, EATA, CoTTA, ...) in long-term continual adaptation on ImageNet-C / CIFAR-C "
         "(the paper's tables were not available: no number)")  # fmt: skip


def _one_seed(cfg: LCoTTAReproConfig, seed: int) -> dict[str, Any]:
    """Every method on the same stream of one seed, and the per-seed numbers of the paper claims."""
    out = experiment(cfg, seed)
    res = out["results"]
    lc, tent, src, eata = res["lcotta"], res["tent"], res["source"], res["eata"]
    return {
        "out": out, "tent_last": tent["last"], "vs_source": lc["last"] - src["last"],
        "vs_tent": lc["last"] - tent["last"], "range": lc["range"], "vs_eata": lc["last"] - eata["last"],
    }  # fmt: skip


#: Expected verdict of the all-parameters claim, set by the first 5-seed sweep (seeds 0-4).
_ALL_PARAMS_REASON = (
    "+0.276 [+0.207, +0.307], 0/5 seeds: adapting all 17,610 parameters at lr 0.02, the entropy "
    "loss collapses the model within the first k·s = 12 batches, before the projection starts "
    "(LCoTTA = EATA exactly at 4/5 seeds); at lr 0.001 LCoTTA is still +0.087 while EATA's filter "
    "alone is -0.114: the top principal gradient directions are the collapse direction"
)


def _breakdown_lr(rows: list[dict[str, Any]], params: str, bound: float = 0.02) -> float:
    """The smallest swept lr where the median of LCoTTA − source exceeds ``bound`` (nan: none)."""
    bad = [
        r["lr"]
        for r in rows
        if r["adapted set"] == params and r["lcotta − source (median)"] > bound
    ]
    return min(bad) if bad else float("nan")


def _sweep_into(result: Result, cfg: LCoTTAReproConfig, seeds: list[int],
                done: dict[int, dict[str, Any]], lrs: tuple[float, ...] = SWEEP_LRS) -> None:  # fmt: skip
    """Full mode: the lr × adapted-set sweep as table rows, a series, metrics, a note and the
    all-parameters paper claim at the default lr."""
    sweep = adapted_set_sweep(cfg, seeds, lrs, done=done)
    rows = sweep["rows"]
    for r in rows:
        result.table.append({
            "method": f"sweep: LCoTTA, {r['adapted set']} params, lr {r['lr']:g} (median of {len(seeds)} seeds)",
            "max − min": r["lcotta range (median)"],
            "LCoTTA − source": r["lcotta − source (median)"], "EATA − source": r["eata − source (median)"],
        })  # fmt: skip
    series: dict[str, list[float]] = {"x": list(lrs)}
    for params in ADAPTED_SETS:
        for m, label in (("lcotta", "LCoTTA"), ("eata", "EATA")):
            series[f"{label}, {params} params"] = [
                r[f"{m} − source (median)"] for r in rows if r["adapted set"] == params
            ]
    result.add_series(
        "lr_sweep", series,
        title="Last-round error minus the source model's, by learning rate and adapted set (median of seeds)",
        xlabel="SGD learning rate", ylabel="last-round error − source error", yscale="linear",
    )  # fmt: skip
    runs = sweep["runs"]
    breakdown = {p: _breakdown_lr(rows, p) for p in ADAPTED_SETS}
    result.metrics["adapted_set_sweep"] = {
        "lrs": list(lrs), "rows": rows, "breakdown_lr": breakdown,
        "per_seed_last": {f"{p} lr {lr:g}": {str(s): {m: r["last"] for m, r in per.items()} for s, per in d.items()}
                          for (p, lr), d in runs.items()},
    }  # fmt: skip
    result.notes.append(
        "lr × adapted-set sweep (median over seeds of last-round error − source; LCoTTA / EATA): "
        + "; ".join(
            f"{r['adapted set']} lr {r['lr']:g}: {r['lcotta − source (median)']:+.3f} / {r['eata − source (median)']:+.3f}"
            for r in rows
        )
        + ". The subspace stops protecting LCoTTA (median > +0.02) from lr "
        + ", ".join(f"{breakdown[p]:g} ({p} params)" for p in ADAPTED_SETS)
        + f"; swept lrs {list(lrs)}."
    )  # fmt: skip
    default = runs[("all", cfg.lr)]
    result.claims.append(
        paper_claim(f"[all parameters adapted, lr {cfg.lr:g}] err_last(LCoTTA) − err_last(source)",
                    [default[s]["lcotta"]["last"] - default[s]["source"]["last"] for s in seeds], 0.02, "<=",
                    seeds=seeds, modes=("full",), paper=PAPER, expected="xfail", reason=_ALL_PARAMS_REASON)
    )  # fmt: skip


def run(mode: Mode = "quick", seed: int = 0, cfg: LCoTTAReproConfig | None = None) -> Result:
    """Paper claims over seeds (quick: 1 seed, 8 rounds; full: seeds seed..seed+4, 24 rounds);
    the mechanics are checks at the master seed. ``cfg`` (default: the mode's) replaces the
    configuration; ``mode`` still picks the seeds."""
    check_choice("mode", mode, ["quick", "full"])
    if cfg is None:
        cfg = LCoTTAReproConfig(rounds=8 if mode == "quick" else 24)
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {s: _one_seed(cfg, s) for s in seeds}
    out = per[seed]["out"]
    res = out["results"]
    result = Result(
        name="vision.lcotta", mode=mode, seed=seed,
        paper_title="Lifelong Test-Time Adaptation via Online Learning in Tracked Low-Dimensional Subspace",
        headline="LCoTTA (EATA's filtered entropy + projection on a tracked low-dimensional gradient "
        "subspace) avoids long-stream collapse and significantly outperforms existing TTA methods "
        "(TENT, EATA, ...) in lifelong adaptation (no number available)",
    )  # fmt: skip
    labels = {"source": "source", "norm": "norm-adapt (= source: LayerNorm only)", "tent": "TENT",
              "eata": "EATA (filter only, fisher_alpha=0)", "lcotta": "LCoTTA (filter + rank-4 projection)"}  # fmt: skip
    for name in METHODS:
        r = res[name]
        result.table.append({
            "method": labels[name], "first round": r["per_round"][0], "mean": r["mean"],
            "last round": r["last"], "max − min": r["range"], "CPU s": r["cpu_s"],
        })  # fmt: skip
    mech = mechanics(cfg, seed)
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731
    result.claims += [
        paper_claim("err_last(TENT): collapse is shown", vals("tent_last"), 0.85, ">=", seeds=seeds,
                    paper="the long-stream collapse of TENT that LCoTTA avoids (no number)"),
        paper_claim("err_last(LCoTTA) − err_last(source)", vals("vs_source"), 0.02, "<=", seeds=seeds,
                    paper=PAPER, headline=True),
        paper_claim("err_last(LCoTTA) − err_last(TENT)", vals("vs_tent"), -0.25, "<=", seeds=seeds,
                    paper=PAPER, headline=True),
        paper_claim("stability: max − min of LCoTTA's per-round error", vals("range"), 0.06, "<=", seeds=seeds,
                    paper="abstract: no degeneration over the long stream (no number)"),
        paper_claim("err_last(LCoTTA) − err_last(EATA, filter only): LCoTTA beats EATA", vals("vs_eata"), 0.0, "<",
                    seeds=seeds, paper=PAPER, headline=True, expected="xfail",
                    reason="the subspace projection does not beat EATA's filter alone on this toy: last-round "
                    "error +0.099 over seeds 0–4 (0/5; the spec's prototype 0.03–0.07 worse)"),
        Claim("R^2000 window (3-dim subspace + isotropic): fraction of an in-subspace gradient kept (rank 10)", mech["retain_subspace"], 0.95, ">="),
        Claim("R^2000 window: fraction of an isotropic gradient kept (rank 10)", mech["retain_isotropic"], 0.15, "<="),
        Claim(f"first projected step (must be k·s = {cfg.rank * cfg.record_every})", mech["first_projected_step"], mech["k_times_s"], ">="),
        Claim("first projected step ≤ k·s (projection starts exactly at k·s)", mech["first_projected_step"], mech["k_times_s"], "<="),
        Claim("basis refreshed iff the window changed (1 = yes)", mech["refresh_only_on_change"], 1, ">="),
        Claim("basis vs sklearn PCA axes up to sign: max | |⟨u_i, v_j⟩| − δ_ij |", mech["pca_axes_err"], 1e-6, "<="),
        Claim("batches where no sample passes the filter leave the parameters unchanged (1 = yes)", mech["empty_filter_unchanged"], 1, ">="),
        Claim("same seed ⇒ same error curve (1 = yes)", mech["same_seed_same_curve"], 1, ">="),
    ]  # fmt: skip
    result.metrics = {
        **{name: r for name, r in res.items()},
        "lcotta_stats": out["extra"].get("lcotta"),
        "eata_stats": out["extra"].get("eata"),
        "mechanics": mech,
        "source_clean_stream_accuracy": out["info"]["clean_stream_accuracy"],
        "steps": out["steps"],
        "seeds": seeds,
        "per_seed_last": {
            str(s): {n: r["last"] for n, r in per[s]["out"]["results"].items()} for s in seeds
        },
    }
    result.add_series(
        "online_error",
        {
            "x": list(range(1, cfg.rounds + 1)),
            **{labels[n]: res[n]["per_round"] for n in METHODS},
        },
        title=f"Online error on the long corrupted-digits stream, seed {seed}",
        xlabel="round (one pass over the six corruptions)",
        ylabel="online error rate (before each update)",
        yscale="linear",
    )
    result.notes += [
        f"{out['steps']} adaptation steps ({cfg.rounds} rounds × {len(DIGIT_CORRUPTIONS)} corruptions); "
        f"source clean accuracy on the stream images {out['info']['clean_stream_accuracy']:.3f}; seeds {seeds} "
        f"(the table is seed {seed}).",
        "Last-round error per seed (source / TENT / EATA / LCoTTA): " + "; ".join(
            f"{s}: " + " / ".join(f"{per[s]['out']['results'][n]['last']:.3f}" for n in ("source", "tent", "eata", "lcotta"))
            for s in seeds
        ),
        f"d_margin = {cfg.d_margin} (EATA's CIFAR-10 value), e_margin = 0.4·ln 10 = {cfg.e_margin:.3f}.",
        "contrast = x · 0.17 (around 0, the spec's literal 'contrast × 0.17'): the one unspecified "
        "corruption detail, chosen on the SOURCE error only against the prototype's 0.566 (seed 0): "
        "around 0 gives 0.574, around the per-image mean (ImageNet-C) 0.664.",
    ]  # fmt: skip
    if mode == "full":
        _sweep_into(result, cfg, seeds, {s: per[s]["out"]["results"] for s in seeds})
    return result
