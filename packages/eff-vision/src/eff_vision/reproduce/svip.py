"""Reproduction ``vision.svip``: SVIP (reconstruction) vs source-only, a SHOT-style baseline and an
unsupervised VI-ReID baseline, with SVIP's three ablations, on generated visible/infrared persons.

Data (spec; ``eff_vision.data.synthetic_persons``): source domain 100 identities × (8 visible + 8
infrared), light background; unlabelled target domain 60 *new* identities × (8 + 8), darker greenish
palette, contrast × 0.7, other size distribution; target test 30 further identities, 4 visible
queries and 8 infrared gallery images each. Model: :class:`ReIDNet` (4 conv + BN, 4×2 part pooling,
64-d embedding), trained on the source with identity cross-entropy + batch-hard triplet (60 epochs
of 6 P×K batches, 16 identities × (2 visible + 2 infrared), Adam 1e-3). The pooling and the sampler
were chosen on held-out *source* identities (cross-modal Rank-1 0.24 with a global pool, 0.43 with
parts), never on the target.
Adaptation: 10 epochs, Adam 3.5e-4, batch 64 per modality, k = 5, τ = 0.05, memory momentum 0.2,
DBSCAN ``min_samples`` = 4. Metric: visible → infrared Rank-1 / Rank-5 / mAP (cosine distance,
torchreid conventions), measured after the last epoch (no model selection).

The thresholds are the spec's reconstructed proposals (**unverified**). Claim 3 ("each ablation is
below full SVIP in mAP on 2 of 3 seeds") needs seeds 0–2: full mode runs them; quick mode runs
seed 0 only and claims the ablation comparison at that seed. Where a threshold is not met, the
measured numbers are reported (no tuning).

Other target settings (issue #26): :func:`experiment` takes the target domain's infrared blur
(``ir_blur``) or a whole target generator (``target``), the source model unchanged. Full mode
reports, at the master seed, how many reliable pairs SVIP selects at :data:`PAIR_SCALES`
(target identities × infrared blur) — information: a run that selects none warns and its
cross-modal term never acts.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from eff_shared.errors import check_choice, check_int, check_real
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed
from eff_shared.torch import count_parameters
from eff_vision.data.synthetic_persons import VIReIDSet, make_vi_reid
from eff_vision.metrics.reid import evaluate_rank
from eff_vision.svip import (
    ReIDNet,
    ResidualTransfer,
    ShotBaseline,
    SVIPAdapter,
    UnsupervisedVIBaseline,
    embed,
    reliable_cross_modal_pairs,
    train_source_reid,
)

__all__ = [
    "METHODS",
    "PAIR_SCALES",
    "SVIPReproConfig",
    "TargetGenerator",
    "evaluate",
    "experiment",
    "mechanics",
    "pair_counts",
    "run",
]

#: ``target(num_ids, per_id, seed) -> VIReIDSet``: the unlabelled target set and the target test
#: set of :func:`experiment` (``per_id`` an int or ``(n_vis, n_ir)``, as in ``make_vi_reid``)
TargetGenerator = Callable[[int, "int | tuple[int, int]", int], VIReIDSet]

METHODS = ("source-only", "SHOT-style", "unsupervised (no source guidance)", "SVIP",
           "SVIP −RTL (full fine-tuning)", "SVIP −SGCL (clusters from f_t)", "SVIP −SCCA")  # fmt: skip
ABLATION_OF = {
    "SVIP −RTL (full fine-tuning)": "rtl",
    "SVIP −SGCL (clusters from f_t)": "sgcl",
    "SVIP −SCCA": "scca",
}


@dataclass(frozen=True)
class SVIPReproConfig:
    src_ids: int = 100
    tgt_ids: int = 60
    test_ids: int = 30
    per_id: int = 8
    queries_per_id: int = 4
    gallery_per_id: int = 8
    source_epochs: int = 60
    epochs: int = 10
    lr: float = 3.5e-4
    k: int = 5

    def __post_init__(self) -> None:
        for name in ("src_ids", "tgt_ids", "test_ids", "per_id", "source_epochs", "epochs", "k"):
            check_int(name, getattr(self, name), minimum=1)


_SOURCE: dict[tuple, tuple[ReIDNet, float]] = {}


def source_model(cfg: SVIPReproConfig, seed: int) -> tuple[ReIDNet, float]:
    """The source ReIDNet (cached in-process; copy it before changing it) and its CPU seconds."""
    key = (seed, cfg.src_ids, cfg.per_id, cfg.source_epochs)
    if key not in _SOURCE:
        src = make_vi_reid(cfg.src_ids, cfg.per_id, "source", derive_seed(seed, 111))
        x = torch.from_numpy(np.concatenate([src.vis, src.ir]))
        ids = torch.from_numpy(np.concatenate([src.vis_ids, src.ir_ids]))
        modality = torch.cat([torch.zeros(len(src.vis_ids)), torch.ones(len(src.ir_ids))]).long()
        torch.manual_seed(derive_seed(seed, 112))
        model = ReIDNet()
        t0 = time.process_time()
        train_source_reid(
            model, x, ids, modality, epochs=cfg.source_epochs, seed=derive_seed(seed, 113)
        )
        _SOURCE[key] = (model, time.process_time() - t0)
    return _SOURCE[key]


def evaluate(model: torch.nn.Module, test: VIReIDSet) -> dict[str, float]:
    """Visible → infrared retrieval of ``model`` on ``test`` (visible queries, infrared gallery,
    cosine distance): ``evaluate_rank``'s Rank-1 / Rank-5 / mAP / mINP."""
    q = embed(model, torch.from_numpy(test.vis))
    g = embed(model, torch.from_numpy(test.ir))
    return evaluate_rank(q, test.vis_ids, g, test.ir_ids)


# The first 5-seed run (claims.md: expected xfail unless it holds), mAP(SVIP) − mAP(ablation):
# −RTL +3.5 [−2.2, +5.5] 3/5 and −SGCL +0.8 [−0.2, +1.7] 4/5 hold; −SCCA −1.2 [−3.1, +0.7] 1/5 does not.
# A second 5-seed run of the same code on another CPU (AMD EPYC, AVX2; the first: Intel Xeon,
# AVX-512) trains differently from the first float-kernel difference on, and there −SGCL gave −0.12
# [−0.62, +4.12], 2/5 (−RTL +2.5 [−3.6, +6.3], 4/5 and −SCCA −1.8, 0/5 kept their verdicts): −SGCL's
# margin lies within that spread, so it is not a result this scale can claim.
ABLATION_EXPECTED = {
    "SVIP −RTL (full fine-tuning)": "reproduces",
    "SVIP −SGCL (clusters from f_t)": "xfail",
    "SVIP −SCCA": "xfail",
}
ABLATION_REASON = {
    "SVIP −SGCL (clusters from f_t)": "depends on the CPU's float kernels: +0.80 [−0.21, +1.70], 4/5 "
    "seeds on an Intel Xeon (AVX-512), −0.12 [−0.62, +4.12], 2/5 on an AMD EPYC (AVX2) — the "
    "ablation's margin is within the spread of SVIP's training",
    "SVIP −SCCA": "the ablation lands within noise of SVIP",
}


def make_method(name: str, source: ReIDNet, cfg: SVIPReproConfig, seed: int) -> Any:
    s = derive_seed(seed, 114)
    if name == "SHOT-style":
        return ShotBaseline(source, lr=cfg.lr, seed=s)
    if name == "unsupervised (no source guidance)":
        return UnsupervisedVIBaseline(source, lr=cfg.lr, k=cfg.k, seed=s)
    if name == "SVIP":
        return SVIPAdapter(source, k=cfg.k, lr=cfg.lr, seed=s)
    if name in ABLATION_OF:
        return SVIPAdapter(source, k=cfg.k, lr=cfg.lr, ablate={ABLATION_OF[name]}, seed=s)
    raise ValueError(f"method must be one of {list(METHODS)}, got {name!r}")


def experiment(
    cfg: SVIPReproConfig,
    seed: int,
    names: tuple[str, ...] = METHODS,
    *,
    ir_blur: float | None = None,
    target: TargetGenerator | None = None,
) -> dict[str, Any]:
    """Every method (or ``names``) adapted on the seed's unlabelled target set and evaluated on
    its target test set (and on a source-domain test set). ``ir_blur``: the Gaussian σ of the
    target domain's infrared images (None: ``make_vi_reid``'s 0.8); ``target``: a generator of
    both target sets (:data:`TargetGenerator`; default ``make_vi_reid(..., "target")``), not to
    be combined with ``ir_blur``. The source model and its data never change."""
    if target is not None and ir_blur is not None:
        raise ValueError(
            "pass ir_blur or target, not both (ir_blur sets the default generator's blur)"
        )
    if target is None:
        kw = {} if ir_blur is None else {"ir_blur": _check_blur(ir_blur)}

        def target(num_ids: int, per_id: int | tuple[int, int], seed: int) -> VIReIDSet:
            return make_vi_reid(num_ids, per_id, "target", seed, **kw)

    elif not callable(target):
        raise TypeError(
            f"target must be a callable (num_ids, per_id, seed) -> VIReIDSet, got {type(target).__name__}"
        )
    source, source_s = source_model(cfg, seed)
    tgt = target(cfg.tgt_ids, cfg.per_id, derive_seed(seed, 115))
    test = target(cfg.test_ids, (cfg.queries_per_id, cfg.gallery_per_id), derive_seed(seed, 116))
    for name, data in (("target (adaptation set)", tgt), ("target (test set)", test)):
        if not isinstance(data, VIReIDSet):
            raise TypeError(
                f"target must return a VIReIDSet, got {type(data).__name__} for the {name}"
            )
    src_test = make_vi_reid(
        cfg.test_ids, (cfg.queries_per_id, cfg.gallery_per_id), "source", derive_seed(seed, 117)
    )
    x_v, x_r = torch.from_numpy(tgt.vis), torch.from_numpy(tgt.ir)
    rows, metrics, paired = [], {}, {}
    total = count_parameters(source)
    for name in names:
        t0 = time.process_time()
        if name == "source-only":
            model, trainable, per_epoch, method = source, 0, 0.0, None
        else:
            method = make_method(name, source, cfg, seed)
            with warnings.catch_warnings():  # no-pair runs are reported in the table instead
                warnings.simplefilter("ignore", UserWarning)
                model = method.fit(x_v, x_r, cfg.epochs)
            per_epoch = (time.process_time() - t0) / cfg.epochs
            trainable = count_parameters(model, trainable_only=True)
            if isinstance(model, ResidualTransfer):
                trainable = count_parameters(model.residual)
        res = evaluate(model, test)
        res_src = evaluate(model, src_test)
        metrics[name] = {**res, "source_domain": res_src, "trainable": trainable}
        rows.append({
            "method": name, "Rank-1": res["rank1"], "Rank-5": res["rank5"], "mAP": res["mAP"],
            "source-domain Rank-1": res_src["rank1"], "trainable params": trainable,
            "trainable %": 100.0 * trainable / total, "CPU s/epoch": per_epoch,
            "paired visible samples (max over epochs)": _max_paired(method),
        })  # fmt: skip
        paired[name] = [h["paired_vis"] for h in getattr(method, "history", ())]
    return {"rows": rows, "metrics": metrics, "source_cpu_s": source_s, "paired_per_epoch": paired}


def _check_blur(ir_blur: float) -> float:
    """``ir_blur`` validated: a finite Gaussian σ ≥ 0 (pixels)."""
    return check_real("ir_blur", ir_blur, minimum=0)


#: (target identities, infrared blur σ) of the full mode's pair-count report: the default
#: (60, 0.8), more identities, stronger blur, both
PAIR_SCALES: tuple[tuple[int, float], ...] = ((60, 0.8), (120, 0.8), (60, 2.0), (120, 2.0))


def pair_counts(
    cfg: SVIPReproConfig, seed: int, scales: tuple[tuple[int, float], ...] = PAIR_SCALES
) -> list[dict[str, Any]]:
    """SVIP and source-only at each (target identities, infrared blur) of ``scales``: the reliable
    pairs SVIP selects per epoch (paired visible samples), and Rank-1 / mAP of both."""
    out = []
    for ids, blur in scales:
        res = experiment(replace(cfg, tgt_ids=ids), seed, ("source-only", "SVIP"), ir_blur=blur)
        m, paired = res["metrics"], res["paired_per_epoch"]["SVIP"]
        out.append({
            "target ids": ids, "ir blur": blur, "paired per epoch": paired,
            "max paired": max(paired, default=0), "epochs with a pair": sum(p > 0 for p in paired),
            "epochs adapted": len(paired),  # an epoch whose samples are all outliers is skipped
            "visible target images": ids * cfg.per_id,
            "Rank-1 SVIP": m["SVIP"]["rank1"], "Rank-1 source-only": m["source-only"]["rank1"],
            "mAP SVIP": m["SVIP"]["mAP"], "mAP source-only": m["source-only"]["mAP"],
        })  # fmt: skip
    return out


def _max_paired(method: Any) -> int | None:
    """How many visible samples SCCA/Hungarian ever pulled to an infrared cluster (None: no SVIP)."""
    counts = [h["paired_vis"] for h in getattr(method, "history", ()) if "paired_vis" in h]
    return max(counts) if counts else None


def hand_built_pairs_case() -> tuple[torch.Tensor, torch.Tensor, set[tuple[int, int]]]:
    """Two groups of three people seen in both modalities (each infrared sample a near copy of
    its visible one) and a decoy pair that is a mutual nearest neighbour but whose neighbourhoods
    disagree (visible decoy near group A, infrared decoy near group B): the reliable pairs are
    (i, i) for i < 6, and the decoy (6, 6) fails the Jaccard test (1/5 < 0.5)."""
    e = torch.eye(12)
    groups = (e[0], e[1])
    z_vis = [g + 0.3 * e[2 + 3 * a + i] for a, g in enumerate(groups) for i in range(3)]
    z_ir = [v + 0.01 * e[8] for v in z_vis]
    z_vis.append(e[10] + 0.5 * e[0])
    z_ir.append(e[10] + 0.5 * e[1])
    return torch.stack(z_vis), torch.stack(z_ir), {(i, i) for i in range(6)}


def mechanics(cfg: SVIPReproConfig, seed: int) -> dict[str, float]:
    """f_t = f_s before the first update; f_s never changes; the reliable-pair rule on a
    hand-built case; torchreid's conventions on a hand-computed example."""
    import copy

    source, _ = source_model(cfg, seed)
    tgt = make_vi_reid(12, 4, "target", derive_seed(seed, 118))
    x = torch.from_numpy(np.concatenate([tgt.vis, tgt.ir]))
    frozen = copy.deepcopy(source)
    rtl = ResidualTransfer(copy.deepcopy(source).requires_grad_(False), source.feat_dim)
    with torch.no_grad():
        same_start = float((rtl(x) - source(x)).abs().max())
    adapter = SVIPAdapter(source, k=3, lr=cfg.lr, seed=1)
    with warnings.catch_warnings():  # 12 identities, one epoch: no reliable pair is expected here
        warnings.simplefilter("ignore", UserWarning)
        adapter.fit(torch.from_numpy(tgt.vis), torch.from_numpy(tgt.ir), 1)
    src_unchanged = all(torch.equal(p, q) for p, q in zip(source.state_dict().values(),
                                                          frozen.state_dict().values(), strict=True))  # fmt: skip
    inner_unchanged = all(
        torch.equal(p, q) for p, q in zip(adapter.model.source.state_dict().values(),
                                          frozen.state_dict().values(), strict=True)
    )  # fmt: skip
    z_vis, z_ir, expected = hand_built_pairs_case()
    pairs = reliable_cross_modal_pairs(z_vis, z_ir, k=3, jaccard_threshold=0.5)
    got = {tuple(p) for p in pairs.tolist()}
    # torchreid convention, hand-computed: 2 queries, gallery ids [0, 1, 0, 2]
    dist = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.2, 0.3]])
    from eff_vision.metrics.reid import evaluate_rank_distmat

    r = evaluate_rank_distmat(dist, [0, 2], [0, 1, 0, 2], cmc_ranks=(1, 2))
    # q0: matches at ranks 1, 3 -> AP = (1 + 2/3) / 2; q1: order 1,2,3,0 -> match at rank 3: AP 1/3
    ap = ((1 + 2 / 3) / 2 + 1 / 3) / 2
    reid_err = max(abs(r["mAP"] - ap), abs(r["rank1"] - 0.5), abs(r["rank2"] - 0.5))
    return {
        "same_start": same_start, "source_unchanged": float(src_unchanged and inner_unchanged),
        "pairs_ok": float(got == expected), "reid_err": reid_err,
    }  # fmt: skip


QUICK_METHODS = ("source-only", "unsupervised (no source guidance)", "SVIP")
FULL: tuple[Mode, ...] = ("full",)
PAPER = ("abstract: SVIP outperforms source-free and unsupervised VI-ReID methods on SYSU-MM01 and "
         "RegDB (no number available to us; the thresholds are the spec's proposals)")  # fmt: skip
REASON_BASE = ("the source features give near-random target clusters (DBSCAN ARI ≈ 0.04–0.08): "
               "little to bootstrap from at this scale")  # fmt: skip


def _one_seed(cfg: SVIPReproConfig, seed: int, names: tuple[str, ...]) -> dict[str, Any]:
    """Every method at one seed (same source model, target data and test split) and the per-seed
    differences the paper claims judge."""
    out = experiment(cfg, seed, names)
    m = out["metrics"]
    return {
        "out": out,
        "rank1_vs_source": 100 * (m["SVIP"]["rank1"] - m["source-only"]["rank1"]),
        "map_vs_unsup": 100 * (m["SVIP"]["mAP"] - m["unsupervised (no source guidance)"]["mAP"]),
        **{f"abl_{a}": 100 * (m["SVIP"]["mAP"] - m[a]["mAP"]) for a in ABLATION_OF if a in m},
    }


def run(mode: Mode = "quick", seed: int = 0, cfg: SVIPReproConfig | None = None) -> Result:
    """Paper claims over seeds seed..seed+4 (full mode, every method); the mechanics are checks at
    the master seed. Quick mode is a smoke run (one seed, a smaller data set, 6 source epochs, one
    adaptation epoch, three methods) that judges the checks; the paper claims are judged in full
    mode. ``cfg`` (default: the mode's) replaces the configuration; ``mode`` still picks the
    seeds and methods."""
    check_choice("mode", mode, ["quick", "full"])
    if mode == "quick":
        default = SVIPReproConfig(
            src_ids=32, tgt_ids=16, test_ids=12, per_id=4, source_epochs=6, epochs=1
        )
        names = QUICK_METHODS
    else:
        default, names = SVIPReproConfig(), METHODS
    cfg = default if cfg is None else cfg
    result = Result(
        name="vision.svip", mode=mode, seed=seed,
        paper_title="Learning Source-free Domain Adaptation for Visible-Infrared Person Re-Identification",
        headline="SVIP (residual transfer + source-guided contrast + structural cross-modal alignment) beats "
        "source-only and unsupervised VI-ReID on SYSU-MM01 / RegDB, and each module helps (no number "
        "available to us)",
    )  # fmt: skip
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {s: _one_seed(cfg, s, names) for s in seeds}
    for s in seeds:
        for row in per[s]["out"]["rows"]:
            result.table.append({"seed": s, **row})
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731
    result.claims += [
        paper_claim("Rank-1(SVIP) − Rank-1(source-only), visible → infrared [points]", vals("rank1_vs_source"),
                    10, ">=", seeds=seeds, modes=FULL, expected="xfail", paper=PAPER, headline=True,
                    reason=f"{REASON_BASE}; SVIP ≈ source-only (−1.7 [−4.2, +5.0] points, 0/5 seeds)"),
        # expected from the first 5-seed run (claims.md: xfail unless it holds): +14.0 [+1.5, +16.1], 4/5
        paper_claim("mAP(SVIP) − mAP(unsupervised baseline) [points]", vals("map_vs_unsup"), 3, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER, headline=True),
    ]  # fmt: skip
    for abl in ABLATION_OF if mode == "full" else ():  # the ablations run in full mode
        result.claims.append(
            paper_claim(
                f"mAP(SVIP) − mAP({abl}) [points] (ablation below SVIP on most seeds)",
                vals(f"abl_{abl}"),
                0.0,
                ">",
                seeds=seeds,
                expected=ABLATION_EXPECTED[abl],
                paper=PAPER,
                reason=(
                    f"{REASON_BASE}; {ABLATION_REASON[abl]}"
                    if ABLATION_EXPECTED[abl] == "xfail"
                    else ""
                ),
            )
        )
    mech = mechanics(cfg, seed)
    result.claims += [
        Claim("f_t = f_s before the first update: max |Δ embedding|", mech["same_start"], 0.0, "<="),
        Claim("f_s parameters never change (1 = yes)", mech["source_unchanged"], 1, ">="),
        Claim("reliable pairs = mutual NN passing the Jaccard test on a hand-built case (1 = yes)", mech["pairs_ok"], 1, ">="),
        Claim("evaluate_rank vs a hand-computed example (torchreid conventions), max abs error", mech["reid_err"], 1e-12, "<="),
    ]  # fmt: skip
    short = replace(cfg, epochs=1)
    same = experiment(short, seed, ("SVIP",))["metrics"]["SVIP"]
    again = experiment(short, seed, ("SVIP",))["metrics"]["SVIP"]
    result.claims.append(Claim("same seed ⇒ same result (1 = yes)", float(same == again), 1, ">="))
    result.metrics = {f"seed_{s}": per[s]["out"]["metrics"] for s in seeds}
    if mode == "full":  # issue #26: does SCCA select pairs at other scales?
        scales = pair_counts(cfg, seed)
        result.metrics["pair_counts"] = scales
        result.notes.append(
            f"Reliable pairs at other scales (issue #26, seed {seed}; max paired visible samples over "
            f"{cfg.epochs} epochs / epochs with a pair; Rank-1 SVIP vs source-only): "
            + "; ".join(
                f"{r['target ids']} ids, IR blur {r['ir blur']}: {r['max paired']} of "
                f"{r['visible target images']} / {r['epochs with a pair']}; "
                f"{r['Rank-1 SVIP']:.3f} vs {r['Rank-1 source-only']:.3f}"
                for r in scales
            )
        )
    result.metrics["mechanics"] = mech
    result.metrics["seeds"] = seeds
    result.metrics["source_cpu_s"] = per[seed]["out"]["source_cpu_s"]
    result.notes += [
        "SVIP is our reconstruction (no code, equations or numbers were available); the thresholds "
        "are unverified proposals.",
        f"lr {cfg.lr} (cluster-contrast-reid's default; no source gives SVIP's), {cfg.epochs} epochs "
        f"({cfg.source_epochs} source epochs), k = {cfg.k}, DBSCAN eps = median distance to the 4th "
        f"neighbour; seeds {seeds}"
        + (
            ""
            if mode == "full"
            else "; quick mode is a smoke run (fewer epochs, no SHOT-style row)."
        ),
    ]
    return result
