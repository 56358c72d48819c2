"""Reproduction ``graph.imgda``: ImGDA vs graph-DA baselines on a class-imbalanced CSBM transfer.

Data (spec): contextual SBMs, C = 5, D = 32; source class sizes [400, 189, 89, 42, 20] (ρ = 20),
p_in 0.03 / p_out 0.004, σ = 1.0; balanced target (300 per class) with feature shift
``μ_t = μ(0.8 I + 0.2 R) + 0.3 ξ``, σ = 1.2, sparser homophily p_in 0.015. Every model: 2 GCN layers of
width 64, Adam 0.01, weight decay 1e-3, dropout 0.1, 100 epochs, **last epoch** evaluated (no model
selection on target labels). ImGDA: shared weights on the GCN and PPR (α 0.15, top-32) operators,
top-50-degree anchors, ``τ_c`` with τ0 0.5, intended cross-domain InfoNCE (top 30 % per pseudo-class,
from 50 % of the epochs, weight 0.1). Seeds ``seed, seed+1, seed+2`` (data and model) in both modes;
full mode adds UDAGCN, ImGDA with the release's PPMI operator and ImGDA with the release's other
settings. Claims are the spec's "(a)" thresholds. Full mode also judges two of them in harder
settings (issue #26; :func:`harder_settings`): the minority recall at imbalance 50 (smallest source
class 8 nodes) and ImGDA vs its CE-only ablation under a structure-only shift
(``csbm_domain_pair(shift="structure")``: the source's feature distribution on a sparser target).

Beyond the defaults: :func:`run_seed` takes ``num_classes`` and ``imbalance`` (the generator's
``C`` and ρ) and ``epochs``; every factory in :data:`METHODS` / :data:`FULL_METHODS` takes
``(seed, num_classes=C)``. The claims of :func:`run` stay at C = 5, ρ = 20.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from eff_graph.da import DANNGCN, UDAGCN, ClassBalancedGCN, SourceOnlyGCN
from eff_graph.data import csbm_domain_pair
from eff_graph.imgda import (
    ImGDA,
    class_prototypes,
    class_temperatures,
    degree_anchors,
    ppmi_operator,
    ppr_operator,
)
from eff_graph.metrics import accuracy, macro_f1, per_class_recall
from eff_shared.errors import check_choice, check_int, check_positive
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import threads

__all__ = [
    "EPOCHS",
    "HIDDEN",
    "IMBALANCE",
    "METHODS",
    "STRONG_IMBALANCE",
    "C",
    "ImGDAReproConfig",
    "harder_settings",
    "run",
    "run_seed",
]

EPOCHS = 100
HIDDEN = 64
ANCHORS = 50
C = 5  # classes of the spec's domain pair
IMBALANCE = 20.0  # source imbalance factor ρ of the spec's domain pair
STRONG_IMBALANCE = 50.0  # issue #26: source classes [400, 150, 56, 21, 8]

IMGDA = "ImGDA"
SRC, BAL, DANN, CE_ONLY = (
    "GCN source-only",
    "GCN class-balanced",
    "DANN-GCN (λ 0.1)",
    "dual-branch CE only",
)
UDA, PPMI, RELEASE = "UDAGCN", "ImGDA (PPMI operator)", "ImGDA (release losses + offsets)"


def _imgda(seed: int, num_classes: int = C, **kw: Any) -> ImGDA:
    return ImGDA(
        32,
        num_classes,
        hidden_channels=HIDDEN,
        anchors_per_class=ANCHORS,
        epochs=EPOCHS,
        seed=seed,
        **kw,
    )


# factories ``(seed, num_classes=C) -> model``
METHODS: dict[str, Callable[..., Any]] = {
    SRC: lambda s, c=C: SourceOnlyGCN(32, c, seed=s),
    BAL: lambda s, c=C: ClassBalancedGCN(32, c, seed=s),
    DANN: lambda s, c=C: DANNGCN(32, c, grl_weight=0.1, seed=s),
    CE_ONLY: lambda s, c=C: _imgda(s, c, cb_weight=0.0, cd_weight=0.0),
    IMGDA: lambda s, c=C: _imgda(s, c),
}
FULL_METHODS: dict[str, Callable[..., Any]] = {
    UDA: lambda s, c=C: UDAGCN(32, c, seed=s),
    PPMI: lambda s, c=C: _imgda(s, c, global_op="ppmi"),
    RELEASE: lambda s, c=C: _imgda(
        s,
        c,
        prototypes="all",
        cross_domain="official",
        source_offsets=True,
        cd_start=0.0,
        cd_weight=1.0,
    ),
}


@dataclass(frozen=True)
class ImGDAReproConfig:
    """The domain pair and training of the headline comparison (:func:`run_seed`'s keywords):
    ``num_classes`` and source ``imbalance`` ρ (:func:`csbm_domain_pair`), ``epochs`` (None: each
    model's own, 100), the target's ``shift`` (``"both"``, ``"structure"``, ``"feature"``)."""

    num_classes: int = C
    imbalance: float = IMBALANCE
    epochs: int | None = None
    shift: str = "both"

    def __post_init__(self) -> None:
        check_int("num_classes", self.num_classes, minimum=2)
        check_positive("imbalance", self.imbalance)
        if self.epochs is not None:
            check_int("epochs", self.epochs, minimum=1)
        check_choice("shift", self.shift, ["both", "structure", "feature"])

    def run_kwargs(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "imbalance": self.imbalance,
                "epochs": self.epochs, "shift": self.shift}  # fmt: skip


def run_seed(
    seed: int,
    methods: dict[str, Callable[..., Any]],
    *,
    num_classes: int = C,
    imbalance: float = IMBALANCE,
    epochs: int | None = None,
    shift: str = "both",
) -> dict[str, dict[str, Any]]:
    """Train every method on the seed's domain pair; target macro-F1, accuracy, recalls, seconds.

    ``num_classes`` and ``imbalance`` go to :func:`csbm_domain_pair` (source class sizes
    :func:`long_tail_sizes` ``(400, num_classes, imbalance)``; ``ValueError`` when a class would be
    empty); ``recall`` then has ``num_classes`` entries, the last one the minority class. A factory
    is called as ``make(seed, num_classes)`` (``make(seed)`` at the default C, so one-argument
    factories keep working). ``epochs`` (default: each model's own, 100 here) overrides the
    training length. ``shift`` (``"both"``, ``"structure"``, ``"feature"``) picks the target's
    shift (:func:`csbm_domain_pair`)."""
    source, target = csbm_domain_pair(
        num_classes=num_classes, imbalance=imbalance, seed=seed, shift=shift
    )
    out = {}
    for name, make in methods.items():
        t0 = time.perf_counter()
        model = make(seed) if num_classes == C else make(seed, num_classes)
        model = model.fit(source, target) if epochs is None else model.fit(source, target, epochs)
        pred = model.predict(target)
        out[name] = {
            "f1": macro_f1(pred, target.y),
            "acc": accuracy(pred, target.y),
            "recall": per_class_recall(pred, target.y, num_classes).tolist(),
            "seconds": time.perf_counter() - t0,
            "history": getattr(model, "history", []),
        }
    return out


def _anchor_mismatches(edge_index: torch.Tensor, y: torch.Tensor, k: int) -> int:
    """Anchors differing from a plain-Python top-k by (−degree, node id)."""
    deg = np.bincount(edge_index[0].numpy(), minlength=y.numel())
    got = degree_anchors(edge_index, y, k, C)
    bad = 0
    for c in range(C):
        members = [i for i in range(y.numel()) if int(y[i]) == c]
        ref = sorted(members, key=lambda i: (-deg[i], i))[:k]
        bad += int(got[c].tolist() != ref)
    return bad


def _mechanics(seed: int) -> tuple[list[Claim], dict[str, Any]]:
    source, target = csbm_domain_pair(seed=seed)
    t0 = time.perf_counter()
    ppr_ei, ppr_w = ppr_operator(target.edge_index, target.num_nodes)
    ppr_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ppmi_operator(
        target.edge_index, target.num_nodes, generator=torch.Generator().manual_seed(seed)
    )
    ppmi_s = time.perf_counter() - t0
    n = target.num_nodes
    dense = torch.zeros(n, n, dtype=torch.float64)
    dense[ppr_ei[0], ppr_ei[1]] = ppr_w.double()
    no_loop = int((dense.diagonal() <= 0).sum())
    src_ppr_ei, _ = ppr_operator(source.edge_index, source.num_nodes)
    mismatches = _anchor_mismatches(source.edge_index, source.y, ANCHORS) + _anchor_mismatches(
        src_ppr_ei, source.y, ANCHORS
    )
    counts = torch.bincount(source.y, minlength=C)
    ref_tau = 0.5 + 0.5 * counts.double().numpy() / counts.max().item()
    tau_err = float(np.abs(class_temperatures(counts, 0.5).double().numpy() - ref_tau).max())
    anchors = degree_anchors(source.edge_index, source.y, ANCHORS, C)
    p_anchor = class_prototypes(source.x, source.y, anchors, "anchors")
    p_all = class_prototypes(source.x, source.y, anchors, "all")
    proto_gap = float((p_anchor[0] - p_all[0]).norm())
    claims = [
        Claim(
            "anchors that differ from the top-50 by (-degree, node id), every class, local and PPR graphs",
            mismatches, 0, "<=", "classes",
        ),
        Claim("max |tau_c - (tau0 + (1 - tau0) n_c / n_max)|, tau0 = 0.5", tau_err, 1e-6, "<="),
        Claim(
            "||prototype from anchors - prototype from all nodes||, class 0 (k = 50 < n_0 = 400)",
            proto_gap, 1e-6, ">",
        ),
        Claim("PPR operator (target graph): max |S_ij - S_ji|", float((dense - dense.T).abs().max()), 1e-6, "<="),
        Claim("PPR operator (target graph): smallest weight", float(ppr_w.min()), 0.0, ">="),
        Claim("PPR operator (target graph): nodes without a self-loop", no_loop, 0, "<=", "nodes"),
    ]  # fmt: skip
    return claims, {"ppr_build_s_target": ppr_s, "ppmi_build_s_target": ppmi_s}


def _epoch_costs(seed: int) -> dict[str, float]:
    """Seconds per training epoch with the operators already cached: GCN vs ImGDA (both phases)."""
    source, target = csbm_domain_pair(seed=seed)
    gcn = SourceOnlyGCN(32, C, seed=seed)
    gcn.fit(source, target, epochs=1)  # builds and caches the operator
    t0 = time.perf_counter()
    gcn.fit(source, target, epochs=20)
    gcn_epoch = (time.perf_counter() - t0) / 20
    model = _imgda(seed)
    for data in (source, target):
        for branch in ("local", "global"):
            model.encoder.operator(data.edge_index, data.num_nodes, branch)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    model.fit(source, target, epochs=20)  # cross-domain term active for the last 10 epochs
    imgda_epoch = (time.perf_counter() - t0) / 20
    return {
        "gcn_epoch_s": gcn_epoch,
        "imgda_epoch_s": imgda_epoch,
        "imgda_over_gcn_epoch": imgda_epoch / gcn_epoch,
    }


def _determinism(seed: int, epochs: int) -> float:
    """|F1 of one ImGDA fit - F1 of a second fit|, same seed, ``epochs`` epochs."""
    source, target = csbm_domain_pair(seed=seed)
    f1 = [
        macro_f1(_imgda(seed).fit(source, target, epochs).predict(target), target.y)
        for _ in range(2)
    ]
    return abs(f1[0] - f1[1])


HARDER = ("imbalance 50", "structure-only shift")


def harder_settings(seeds: list[int], epochs: int | None = None) -> dict[str, dict[int, Any]]:
    """The spec's claims in two harder settings (issue #26), per seed: ``"imbalance 50"`` runs
    ImGDA and the source-only GCN on the pair with ρ = :data:`STRONG_IMBALANCE` (source classes
    [400, 150, 56, 21, 8]); ``"structure-only shift"`` runs ImGDA, its CE-only ablation and the
    source-only GCN on ``csbm_domain_pair(shift="structure")`` (same class means and noise as the
    source, target homophily 0.015 instead of 0.03). Returns ``{setting: {seed: run_seed(...)}}``."""
    pick = {k: METHODS[k] for k in (IMGDA, CE_ONLY, SRC)}
    return {
        HARDER[0]: {
            s: run_seed(
                s, {k: pick[k] for k in (IMGDA, SRC)}, imbalance=STRONG_IMBALANCE, epochs=epochs
            )
            for s in seeds
        },
        HARDER[1]: {s: run_seed(s, pick, shift="structure", epochs=epochs) for s in seeds},
    }


#: expected verdicts set by the first full run (seeds 0-4, 100 epochs)
_HARDER_REASON = (
    "mean -0.042 [-0.054, -0.017] over seeds 0-4, 0/5 seeds on the claimed side: without a "
    "feature shift CE alone transfers well (0.846) and the cross-branch prototype contrast costs "
    "-0.05 (ImGDA with it alone 0.79); the cross-domain InfoNCE alone adds +0.00 to +0.03"
)


def _harder_claims(
    result: Result, harder: dict[str, dict[int, Any]], seeds: list[int]
) -> list[Claim]:
    """Table rows and the two paper claims of :func:`harder_settings`."""
    minority = C - 1
    for setting, runs in harder.items():
        for name in runs[seeds[0]]:
            row: dict[str, Any] = {"method": f"{setting}: {name}"}
            row.update({f"F1 seed {s}": runs[s][name]["f1"] for s in seeds})
            row["mean F1"] = float(np.mean([runs[s][name]["f1"] for s in seeds]))
            row["mean accuracy"] = float(np.mean([runs[s][name]["acc"] for s in seeds]))
            row["minority recall"] = float(
                np.mean([runs[s][name]["recall"][minority] for s in seeds])
            )
            row["s per run"] = float(np.mean([runs[s][name]["seconds"] for s in seeds]))
            result.table.append(row)
    strong, struct = harder[HARDER[0]], harder[HARDER[1]]
    kw: dict[str, Any] = {"seeds": seeds, "paper": _PAPER, "statistic": "mean", "modes": ("full",)}
    return [
        paper_claim(  # the same claim as at rho 20; it holds at zero margin (0.400)
            "ImGDA target recall of the minority class, imbalance 50 (8 source nodes)",
            [strong[s][IMGDA]["recall"][minority] for s in seeds], 0.4, ">=", **kw,
        ),
        paper_claim(
            "structure-only shift: F1(ImGDA) - F1(dual-branch CE only), target macro-F1",
            [struct[s][IMGDA]["f1"] - struct[s][CE_ONLY]["f1"] for s in seeds], 0.01, ">=",
            expected="xfail", reason=_HARDER_REASON, **kw,
        ),
    ]  # fmt: skip


PAPER_TITLE = (
    "Dual Prototype-Enhanced Contrastive Framework for Class-Imbalanced Graph Domain Adaptation"
)
HEADLINE = (
    "ImGDA beats the state of the art in class-imbalanced graph domain adaptation (UDAGCN citation "
    "graphs ACMv9 / Citationv1 / DBLPv7, source long-tailed with imbalance factor 20); the tables "
    "were not available, only the abstract's claim"
)
_PAPER = "abstract: beats graph-DA baselines (UDAGCN citation graphs, imbalance 20); no numbers available"


def run(mode: Mode = "quick", seed: int = 0, cfg: ImGDAReproConfig | None = None) -> Result:
    """Paper claims over seeds (quick: 1 seed; full: seeds seed..seed+4 and the harder settings).
    ``cfg`` (default :class:`ImGDAReproConfig`) sets the domain pair and training of the headline
    comparison; ``mode`` still picks the seeds and the extra rows."""
    with threads(1):
        return _run(mode, seed, ImGDAReproConfig() if cfg is None else cfg)


def _run(mode: Mode, seed: int, cfg: ImGDAReproConfig) -> Result:
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    if mode == "full":
        methods = {**METHODS, **FULL_METHODS}
    else:  # the class-balanced GCN is in no claim
        methods = {k: v for k, v in METHODS.items() if k != BAL}
    runs = {s: run_seed(s, methods, **cfg.run_kwargs()) for s in seeds}

    def mean(name: str, key: str) -> float:
        return float(np.mean([runs[s][name][key] for s in seeds]))

    def gain(other: str) -> list[float]:
        return [runs[s][IMGDA]["f1"] - runs[s][other]["f1"] for s in seeds]

    minority = cfg.num_classes - 1
    result = Result(
        name="graph.imgda", mode=mode, seed=seed, paper_title=PAPER_TITLE, headline=HEADLINE
    )
    for name in methods:
        row: dict[str, Any] = {"method": name}
        row.update({f"F1 seed {s}": runs[s][name]["f1"] for s in seeds})
        row["mean F1"] = mean(name, "f1")
        row["mean accuracy"] = mean(name, "acc")
        row["minority recall"] = float(np.mean([runs[s][name]["recall"][minority] for s in seeds]))
        row["s per run"] = mean(name, "seconds")
        result.table.append(row)
    kw: dict[str, Any] = {"seeds": seeds, "paper": _PAPER}
    result.claims += [
        paper_claim(
            "F1(ImGDA) - F1(GCN source-only), target macro-F1, last epoch",
            gain(SRC), 0.12, ">=", headline=True, **kw,
        ),
        paper_claim(
            "F1(ImGDA) - F1(DANN-GCN, GRL weight 0.1), target macro-F1",
            gain(DANN), 0.10, ">=", statistic="mean", headline=True, **kw,
        ),
        paper_claim(  # one seed cannot resolve it (seeds 0-2: -0.014, -0.020, +0.073)
            "F1(ImGDA) - F1(dual-branch CE only), target macro-F1 (the contrastive terms)",
            gain(CE_ONLY), 0.01, ">=", statistic="mean", modes=("full",), **kw,
        ),
        paper_claim(
            "ImGDA target recall of the minority class (20 source nodes)",
            [runs[s][IMGDA]["recall"][minority] for s in seeds], 0.4, ">=", statistic="mean", **kw,
        ),
    ]  # fmt: skip
    harder: dict[str, dict[int, Any]] = {}
    if mode == "full":
        harder = harder_settings(seeds)
        result.claims += _harder_claims(result, harder, seeds)
    mech, op_costs = _mechanics(seed)
    result.claims += mech
    if mode == "full":
        rerun = run_seed(seed, {IMGDA: METHODS[IMGDA]}, **cfg.run_kwargs())[IMGDA]["f1"]
        det, det_text = abs(runs[seed][IMGDA]["f1"] - rerun), f"{EPOCHS} epochs"
    else:
        det, det_text = _determinism(seed, 20), "two 20-epoch fits"
    result.claims.append(
        Claim(
            f"|F1 - F1 of a rerun|, ImGDA seed {seed}, {det_text} (same seed => same result)",
            det, 0.0, "<=",
        )
    )  # fmt: skip
    costs: dict[str, float] = dict(op_costs)
    if mode == "full":
        costs.update(_epoch_costs(seed))
        costs["ppr_build_over_gcn_epoch"] = costs["ppr_build_s_target"] / costs["gcn_epoch_s"]
        costs["ppmi_build_over_gcn_epoch"] = costs["ppmi_build_s_target"] / costs["gcn_epoch_s"]
    result.metrics.update(
        {
            "seeds": seeds,
            "epochs": EPOCHS,
            "per_seed": {
                str(s): {
                    m: {k: v for k, v in r.items() if k != "history"} for m, r in runs[s].items()
                }
                for s in seeds
            },
            **costs,
        }
    )
    if harder:
        result.metrics["harder_settings"] = {
            setting: {
                str(s): {m: {k: v for k, v in r.items() if k != "history"} for m, r in rs.items()}
                for s, rs in runs.items()
            }
            for setting, runs in harder.items()
        }
    hist = runs[seed][IMGDA]["history"]
    result.add_series(
        "imgda_loss",
        {
            "x": [h["epoch"] for h in hist],
            "cross-entropy": [h["ce"] for h in hist],
            "prototype contrast": [h["cb"] for h in hist],
            "total": [h["loss"] for h in hist],
        },
        title=f"ImGDA training loss on the imbalanced source graph, seed {seed}",
        xlabel="epoch",
        ylabel="training loss (nats)",
    )
    result.notes += ["Last-epoch target metrics; target labels are used only for evaluation."]
    if mode == "full":
        result.notes += [
            f"Epoch cost with cached operators: ImGDA / GCN = {costs['imgda_over_gcn_epoch']:.2f}x "
            f"(spec target <= 4x); PPR build (target, dense) = {costs['ppr_build_over_gcn_epoch']:.0f} "
            f"GCN epochs; PPMI build = {costs['ppmi_build_over_gcn_epoch']:.0f} GCN epochs.",
            "Full-mode extras (no claims): UDAGCN; ImGDA with the release's random-walk PPMI operator "
            "(its log(P·N/L) weights depend on the graph size, so source and target operators differ "
            "in scale at 740/1,500 nodes); ImGDA with prototypes='all', cross_domain='official' "
            "(from epoch 0, weight 1) and source offsets.",
            "Harder settings (issue #26; rows 'imbalance 50: ...' and 'structure-only shift: ...'): "
            "source imbalance 50 (classes [400, 150, 56, 21, 8]) and a structure-only shift "
            "(csbm_domain_pair(shift='structure'): source class means and noise on the target, "
            "target homophily 0.015 vs 0.03).",
        ]
    return result
