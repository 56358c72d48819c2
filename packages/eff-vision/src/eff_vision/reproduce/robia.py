"""Reproduction ``vision.robia``: RobIA (reconstruction) vs no adaptation, BN-adapt and full
fine-tuning on a continual stream of synthetic stereo domains.

Setting (spec): procedural scenes (``eff_vision.data.stereo``), 64×128, D = 24; 256 clean source
pairs train :class:`TinyStereoNet` (300 Adam steps, lr 1e-3, batch 4, smooth-L1 on ``x ≥ D``).
RobIA's experts are then trained on the same source pairs (:func:`train_experts`, base frozen).
Stream: noise (σ 0.12) → blur (σ 1.8) → dark (× 0.23) → fog (0.9) at severity 1.5, 20 new scenes
per domain, 2 cycles (160 frames) in full mode; quick mode: 1 cycle of 10 per domain (40 frames).
Every method adapts online on the same frames (prediction before the update, one Adam step per
frame at lr 1e-3, SGBM labels with ``numDisparities = 32``). Metrics on ``x ≥ D``: stream-mean EPE,
bad-1, D1 (for completeness); clean EPE on 16 held-out clean pairs before and after the stream.

Rows: no adaptation (source), BN-adapt (test-batch statistics), full fine-tuning on SGBM labels
(all parameters), RobIA (router + norm affines), and the ablations "without teacher" (SGBM term
only) and "experts without router" (uniform gates, s = 1; only the norm affines adapt), plus
"router only" (no norm affines) and "RobIA experts, no adaptation" (information). Expert training
(ours): 300 steps (150 in quick mode) of Adam 3e-3, chosen on source-side validation (augmented
held-out source scenes), not on the stream.

The thresholds are the spec's reconstructed "(a)" values, **not validated end to end**; where
one is not met, the measured numbers are reported (no tuning).

Low-texture scenes (issue #26; full mode, :func:`low_texture_section`): 30 % of the surfaces flat
or striped (:data:`LOW_TEXTURE`, source data included), where SGBM has no texture to match and the
teacher is meant to fill in; RobIA with and without its teacher on seeds seed..seed+4, the
paper claim judged on bad-1 over the flat/striped pixels, the whole-image bad-1 printed.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed
from eff_shared.torch import count_parameters
from eff_vision.data.stereo import (
    TEXTURES,
    SyntheticStereo,
    TinyStereoNet,
    render_dataset,
    stereo_stream,
)
from eff_vision.metrics.stereo import bad_px, epe
from eff_vision.robia import (
    AttExMoE,
    FullFineTune,
    RobIA,
    RobustAdaptBNTeacher,
    StereoBNAdapt,
    robia_loss,
    sgbm_sparse_labels,
    stream_eval,
    train_experts,
)

__all__ = [
    "LOW_TEXTURE",
    "RobIAReproConfig",
    "experiment",
    "low_texture_config",
    "low_texture_section",
    "mechanics",
    "run",
    "source_models",
    "teacher_ablation",
    "teacher_coverage",
]


@dataclass(frozen=True)
class RobIAReproConfig:
    height: int = 64
    width: int = 128
    max_disp: int = 24
    n_source: int = 256
    source_steps: int = 300
    expert_steps: int = 300
    expert_lr: float = 3e-3
    batch_size: int = 4
    lr: float = 1e-3
    domains: tuple[str, ...] = ("noise", "blur", "dark", "fog")
    cycles: int = 2
    pairs_per_domain: int = 20
    severity: float = 1.5
    n_clean: int = 16
    num_disparities: int = 32
    scene: SyntheticStereo | None = None  # None -> SyntheticStereo(height, width, max_disp)

    def __post_init__(self) -> None:
        for name in (
            "n_source",
            "source_steps",
            "batch_size",
            "cycles",
            "pairs_per_domain",
            "n_clean",
        ):
            check_int(name, getattr(self, name), minimum=1)
        if self.max_disp >= self.width:
            raise ValueError(f"max_disp ({self.max_disp}) must be < width ({self.width})")
        if self.scene is None:
            object.__setattr__(
                self, "scene", SyntheticStereo(self.height, self.width, self.max_disp)
            )
        elif not isinstance(self.scene, SyntheticStereo):
            raise TypeError(f"scene must be a SyntheticStereo, got {type(self.scene).__name__}")
        dims = (self.scene.height, self.scene.width, self.scene.max_disp)
        if dims != (self.height, self.width, self.max_disp):
            raise ValueError(
                f"scene (height, width, max_disp) = {dims} must equal the config's "
                f"{(self.height, self.width, self.max_disp)}"
            )


_CACHE: dict[tuple, dict[str, Any]] = {}


def _mask(cfg: RobIAReproConfig) -> torch.Tensor:
    m = torch.zeros(cfg.height, cfg.width, dtype=torch.bool)
    m[:, cfg.max_disp :] = True
    return m


def source_models(cfg: RobIAReproConfig, seed: int) -> dict[str, Any]:
    """The trained source net and its MoE copy with trained experts (cached in-process; copy them)."""
    key = (seed, cfg.height, cfg.width, cfg.max_disp, cfg.n_source, cfg.source_steps,
           cfg.expert_steps, cfg.expert_lr, cfg.batch_size, cfg.lr, cfg.scene)  # fmt: skip
    if key in _CACHE:
        return _CACHE[key]
    data = render_dataset(cfg.scene, cfg.n_source, seed=derive_seed(seed, 81))
    left = torch.from_numpy(data["left"][:, None])
    right = torch.from_numpy(data["right"][:, None])
    disp = torch.from_numpy(data["disp"])
    torch.manual_seed(derive_seed(seed, 82))
    net = TinyStereoNet(cfg.max_disp)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(derive_seed(seed, 83))
    mask = _mask(cfg)
    net.train()
    t0 = time.process_time()
    for _ in range(cfg.source_steps):
        idx = torch.randperm(cfg.n_source, generator=gen)[: cfg.batch_size]
        pred = net(left[idx], right[idx])
        loss = F.smooth_l1_loss(pred[:, mask], disp[idx][:, mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    net.eval()
    source_s = time.process_time() - t0
    moe_net = copy.deepcopy(net)
    torch.manual_seed(derive_seed(seed, 84))
    moe_net.moe = AttExMoE(net.features[-1].num_features)
    t0 = time.process_time()
    expert_losses = train_experts(
        moe_net, "moe", left, right, disp, steps=cfg.expert_steps, batch_size=cfg.batch_size,
        lr=cfg.expert_lr, seed=derive_seed(seed, 85),
    )  # fmt: skip
    _CACHE[key] = {
        "source": net, "moe": moe_net, "source_cpu_s": source_s,
        "expert_cpu_s": time.process_time() - t0, "expert_losses": expert_losses,
    }  # fmt: skip
    return _CACHE[key]


def _clean_set(
    cfg: RobIAReproConfig, seed: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, str]]:
    b = cfg.scene.render(cfg.n_clean, seed=derive_seed(seed, 86))
    return [(b.left[i], b.right[i], b.disp[i], "clean") for i in range(cfg.n_clean)]


def _clean_epe(model: nn.Module, clean, cfg: RobIAReproConfig) -> float:
    """EPE on the clean pairs with the model as it stands (its own BN mode), no adaptation."""
    errs = []
    with torch.no_grad():
        for left, right, gt, _ in clean:
            pred = model(torch.from_numpy(left)[None, None], torch.from_numpy(right)[None, None])
            errs.append(epe(pred[0], gt, _mask(cfg).numpy()))
    return float(np.mean(errs))


def build_methods(models: dict[str, Any], cfg: RobIAReproConfig) -> dict[str, Any]:
    src, moe = models["source"], models["moe"]
    uniform = copy.deepcopy(moe)
    uniform.moe.routing = "uniform"
    nd = cfg.num_disparities
    return {
        "no adaptation": copy.deepcopy(src).eval(),
        "BN-adapt": StereoBNAdapt(copy.deepcopy(src)),
        "full fine-tuning (SGBM labels)": FullFineTune(copy.deepcopy(src), lr=cfg.lr, num_disparities=nd),
        "RobIA": RobIA(copy.deepcopy(moe), "moe", lr=cfg.lr, num_disparities=nd),
        "RobIA w/o teacher": RobIA(copy.deepcopy(moe), "moe", lr=cfg.lr, use_teacher=False, num_disparities=nd),
        "experts w/o router (uniform gates)": RobIA(uniform, "moe", lr=cfg.lr, num_disparities=nd),
        "RobIA router only (no norm affines)": RobIA(copy.deepcopy(moe), "moe", lr=cfg.lr,
                                                     train_norm_affine=False, num_disparities=nd),
        "RobIA experts, no adaptation": StereoBNAdapt(copy.deepcopy(moe)),
    }  # fmt: skip


def _trainable(method: Any) -> tuple[int, int]:
    model = method.model if hasattr(method, "model") else method
    total = count_parameters(model)
    if isinstance(method, RobIA | FullFineTune):
        return method.num_adapted(), total
    return 0, total


def experiment(
    cfg: RobIAReproConfig,
    seed: int,
    names: tuple[str, ...] | None = None,
    texture_kinds: bool = False,
) -> dict[str, Any]:
    """Every method (or ``names``) on the same stream of ``cfg.scene``; ``texture_kinds`` adds
    each row's bad-1 on the pixels of flat or striped surfaces (``"bad-1 flat/striped"``)."""
    models = source_models(cfg, seed)
    frames = list(stereo_stream(cfg.domains, cfg.cycles, cfg.pairs_per_domain, cfg.severity,
                                derive_seed(seed, 87), cfg.scene, texture_kinds))  # fmt: skip
    clean = _clean_set(cfg, seed)
    methods = build_methods(models, cfg)
    if names is not None:
        methods = {k: v for k, v in methods.items() if k in names}
    rows, out = [], {}
    for name, method in methods.items():
        model = method.model if hasattr(method, "model") else method
        before = _clean_epe(model, clean, cfg)
        gates: list[list[float]] = []
        hook = (
            (lambda i, p, m=method, log=gates: log.append(m.stats["gates"][0]))
            if isinstance(method, RobIA)
            else None
        )
        res = stream_eval(method, frames, cfg.max_disp, on_frame=hook)
        after = _clean_epe(model, clean, cfg)
        n_train, n_total = _trainable(method)
        out[name] = {**res, "clean_before": before, "clean_after": after, "trainable": n_train,
                     "total": n_total, "gates": gates, "method": method}  # fmt: skip
        if isinstance(method, RobIA):
            out[name]["teacher_fraction"] = method.stats["teacher_fraction_sum"] / len(frames)
        rows.append({
            "method": name, "EPE": float(np.mean(res["epe"])), "bad-1": float(np.mean(res["bad1"])),
            "D1": float(np.mean(res["d1"])), "trainable params": n_train,
            "trainable %": 100.0 * n_train / n_total, "ms/frame": res["ms_per_frame"],
            "clean EPE before": before, "clean EPE after": after,
        })  # fmt: skip
        if texture_kinds:
            rows[-1]["bad-1 flat/striped"] = float(np.nanmean(res["bad1_low_texture"]))
    return {"rows": rows, "runs": out, "models": models, "frames": len(frames)}


def _sgbm_check(seed: int, n: int = 6) -> tuple[float, float]:
    """SGBM density (whole image) and bad-1 on valid pixels, clean 96×160 pairs, D = 32."""
    b = SyntheticStereo(96, 160, 32).render(n, seed=derive_seed(seed, 88))
    dens, bad = [], []
    for i in range(n):
        d, v = sgbm_sparse_labels(b.left[i], b.right[i], num_disparities=32)
        dens.append(v.mean())
        bad.append(bad_px(d, b.disp[i], 1.0, v))
    return float(np.mean(dens)), float(np.mean(bad))


def mechanics(cfg: RobIAReproConfig, seed: int, runs: dict[str, Any]) -> dict[str, float]:
    models = source_models(cfg, seed)
    moe0 = models["moe"].moe
    robia = runs["RobIA"]["method"]
    # experts frozen: bit-identical after the stream and never given a gradient
    experts_same = all(
        torch.equal(p, q) and p.grad is None
        for p, q in zip(robia.moe.experts.parameters(), moe0.experts.parameters(), strict=True)
    )
    router_moved = any(
        not torch.equal(p, q)
        for p, q in zip(robia.moe.router_parameters(), moe0.router_parameters(), strict=True)
    )
    gates = np.asarray(runs["RobIA"]["gates"])
    gates_ok = bool(
        len(gates)
        and ((gates > 0).sum(1) == robia.moe.top_k).all()
        and np.abs(gates.sum(1) - 1).max() < 1e-6
    )
    # attention of a row depends only on that row
    g = torch.Generator().manual_seed(derive_seed(seed, 89))
    feat = torch.randn(2, 16, 6, 20, generator=g)
    pert = feat.clone()
    pert[:, :, 2] += torch.randn(2, 16, 20, generator=g)
    with torch.no_grad():
        za, zb = moe0.attend(feat), moe0.attend(pert)
    others = [r for r in range(6) if r != 2]
    row_local = bool(
        torch.equal(za[:, others], zb[:, others]) and not torch.equal(za[:, 2], zb[:, 2])
    )
    # the teacher term uses only pixels outside V_H with c_T > τ
    d_s = torch.randn(1, 8, 10, generator=g, requires_grad=True)
    d_h, d_t = torch.randn(1, 8, 10, generator=g), torch.randn(1, 8, 10, generator=g)
    valid = torch.rand(1, 8, 10, generator=g) > 0.5
    conf = torch.rand(1, 8, 10, generator=g)
    loss, _ = robia_loss(d_s, d_h, valid, d_t, conf, 0.5, 1.0)
    loss.backward()
    grad = d_s.grad[0]
    used = grad != 0
    allowed = valid[0] | (conf[0] > 0.5)
    teacher_ok = bool((used <= allowed).all() and used[~valid[0] & (conf[0] > 0.5)].all())
    # the first prediction equals the unadapted model's, and reset() restores the initial state
    frames = list(
        stereo_stream(cfg.domains[:1], 1, 3, cfg.severity, derive_seed(seed, 90), cfg.scene)
    )
    lt = [torch.from_numpy(f[0])[None, None] for f in frames]
    rt = [torch.from_numpy(f[1])[None, None] for f in frames]
    fresh = RobIA(
        copy.deepcopy(models["moe"]), "moe", lr=cfg.lr, num_disparities=cfg.num_disparities
    )
    ref = StereoBNAdapt(copy.deepcopy(models["moe"]))
    with torch.no_grad():
        first, unadapted = fresh(lt[0], rt[0]), ref(lt[0], rt[0])
    first_ok = float((first - unadapted).abs().max())
    for a, b in zip(lt[1:], rt[1:], strict=True):
        fresh(a, b)
    fresh.reset()
    state0 = RobIA(copy.deepcopy(models["moe"]), "moe").model.state_dict()
    reset_ok = all(torch.equal(v, state0[k]) for k, v in fresh.model.state_dict().items())
    reset_ok &= all(
        torch.equal(v, RobustAdaptBNTeacher(models["moe"]).model.state_dict()[k])
        for k, v in fresh.teacher.model.state_dict().items()
    )
    with torch.no_grad():
        reset_ok &= bool(torch.equal(fresh(lt[0], rt[0]), first))
    density, bad1 = _sgbm_check(seed)
    return {
        "experts_frozen": float(experts_same), "router_moved": float(router_moved),
        "gates_topk_sum1": float(gates_ok), "row_local_attention": float(row_local),
        "teacher_pixels_ok": float(teacher_ok), "first_prediction_diff": first_ok,
        "reset_restores": float(reset_ok), "sgbm_density": density, "sgbm_bad1": bad1,
    }  # fmt: skip


# --- the teacher in low-texture scenes (issue #26) ----------------------------------------------

LOW_TEXTURE: dict[str, float] = {"noise": 0.7, "flat": 0.15, "stripes": 0.15}
TEACHER_ABLATION = ("RobIA", "RobIA w/o teacher")


def low_texture_config(
    cfg: RobIAReproConfig, texture: dict[str, float] | None = None
) -> RobIAReproConfig:
    """``cfg`` with a scene whose surfaces are flat or striped with the fractions of ``texture``
    (default :data:`LOW_TEXTURE`: 30 % flat or striped), source data included."""
    scene = dataclasses.replace(cfg.scene, texture=LOW_TEXTURE if texture is None else texture)
    return dataclasses.replace(cfg, scene=scene)


def teacher_ablation(cfg: RobIAReproConfig, seed: int) -> dict[str, Any]:
    """RobIA with and without its teacher on the same stream of ``cfg`` (source models trained
    on ``cfg.scene``): bad-1 over the evaluated pixels and over the flat/striped ones [points]."""
    out = experiment(cfg, seed, TEACHER_ABLATION, texture_kinds=True)
    rows = {r["method"]: r for r in out["rows"]}
    bad = {m: 100 * rows[m]["bad-1"] for m in TEACHER_ABLATION}
    low = {m: 100 * rows[m]["bad-1 flat/striped"] for m in TEACHER_ABLATION}
    return {
        "bad1": bad, "bad1_low_texture": low, "epe": {m: rows[m]["EPE"] for m in TEACHER_ABLATION},
        "minus_no_teacher": bad["RobIA"] - bad["RobIA w/o teacher"],
        "minus_no_teacher_low": low["RobIA"] - low["RobIA w/o teacher"],
        "teacher_fraction": out["runs"]["RobIA"]["teacher_fraction"],
    }  # fmt: skip


def teacher_coverage(cfg: RobIAReproConfig, seed: int) -> dict[str, float]:
    """Where the teacher term acts, on this seed's stream, before adaptation: the source teacher
    (:class:`RobustAdaptBNTeacher` of the MoE model) against the student's starting point (the
    MoE model on test-batch statistics) and the SGBM labels. Fractions of pixels; bad-1 in [0, 1].

    ``teacher_pixels``: ∉ V_H with c_T > τ (whole image); ``teacher_in_border``: the share of
    them in the columns x < num_disparities, where SGBM never labels and the metrics do not look
    (x < max_disp); ``teacher_covers_low``: share of the evaluated flat/striped pixels it reaches;
    ``sgbm_valid_low`` / ``sgbm_bad1_low``: SGBM's density and bad-1 on those pixels;
    ``teacher_bad1_unlabelled`` / ``student_bad1_unlabelled``: bad-1 of the teacher and of the
    student on every evaluated pixel without an SGBM label (what the teacher could fill)."""
    models = source_models(cfg, seed)
    teacher = RobustAdaptBNTeacher(models["moe"])
    student = StereoBNAdapt(copy.deepcopy(models["moe"]))
    frames = stereo_stream(cfg.domains, cfg.cycles, cfg.pairs_per_domain, cfg.severity,
                           derive_seed(seed, 87), cfg.scene, texture_kinds=True)  # fmt: skip
    low_kinds = [TEXTURES.index("flat"), TEXTURES.index("stripes")]
    acc: dict[str, list[float]] = {}
    for left, right, gt, _, kind in frames:
        lt, rt = torch.from_numpy(left)[None, None], torch.from_numpy(right)[None, None]
        with torch.no_grad():
            d_t, conf = (t[0].numpy() for t in teacher.predict(lt, rt))
            d_s = student(lt, rt)[0].numpy()
        d_h, valid = sgbm_sparse_labels(left, right, num_disparities=cfg.num_disparities)
        t_mask = ~valid & (conf > teacher.conf_threshold)
        ev = _mask(cfg).numpy()
        low, unl = ev & np.isin(kind, low_kinds), ev & ~valid
        add = lambda k, v: acc.setdefault(k, []).append(float(v))  # noqa: E731
        add("teacher_pixels", t_mask.mean())
        if t_mask.any():
            add("teacher_in_border", t_mask[:, : cfg.num_disparities].sum() / t_mask.sum())
        if low.any():
            add("teacher_covers_low", (t_mask & low).sum() / low.sum())
            add("sgbm_valid_low", (valid & low).sum() / low.sum())
            if (valid & low).any():
                add("sgbm_bad1_low", bad_px(d_h, gt, 1.0, valid & low))
        if unl.any():
            add("teacher_bad1_unlabelled", bad_px(d_t, gt, 1.0, unl))
            add("student_bad1_unlabelled", bad_px(d_s, gt, 1.0, unl))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def low_texture_section(cfg: RobIAReproConfig, seeds: list[int]) -> dict[int, dict[str, Any]]:
    """:func:`teacher_ablation` on :func:`low_texture_config` of ``cfg`` at each seed (each
    seed's source models are trained on the low-texture scene), with its wall seconds."""
    low = low_texture_config(cfg)
    out = {}
    for s in seeds:
        t0 = time.perf_counter()
        out[s] = {**teacher_ablation(low, s), "wall_s": time.perf_counter() - t0}
    return out


#: expected verdict of the low-texture teacher claim, set by the first measurement (seeds 0-2:
#: the 5-seed run exceeds the measurement budget, ~5 min a seed): +0.06, +0.51, +0.18 on the
#: flat/striped pixels, 0/3 seeds <= 0; whole image -0.17, +0.71, +1.31
LOW_TEXTURE_REASON = (
    "the teacher term acts on ~1 % of each frame (its peak probability rarely exceeds τ = 0.5), "
    "77–91 % of that in the border columns SGBM never labels; it reaches 0.5–1.8 % of the "
    "flat/striped pixels, and where SGBM is missing its bad-1 (0.60–0.71) is worse than the "
    "student's (0.43–0.46): median +0.18 points [+0.06, +0.51], 0/3 seeds ≤ 0 (seeds 0–2)"
)


def _low_texture_claims(
    result: Result, section: dict[int, dict[str, Any]], seeds: list[int]
) -> None:
    """Claim, metrics and note of the low-texture section (see :func:`low_texture_section`)."""
    low = [section[s]["minus_no_teacher_low"] for s in seeds]
    whole = [section[s]["minus_no_teacher"] for s in seeds]
    result.claims.append(
        paper_claim(
            "low-texture scenes (30 % flat/striped surfaces): bad-1(RobIA) − bad-1(RobIA w/o teacher) "
            "on the flat/striped pixels [points] (the teacher helps)",
            low, 0.0, "<=", seeds=seeds, modes=FULL, paper=TEACHER_PAPER,
            expected="xfail" if LOW_TEXTURE_REASON else "reproduces", reason=LOW_TEXTURE_REASON,
        )
    )  # fmt: skip
    result.metrics["low_texture"] = {
        "texture": dict(LOW_TEXTURE), "seeds": seeds,
        "wall_s": sum(section[s]["wall_s"] for s in seeds),
        "per_seed": {str(s): section[s] for s in seeds},
    }  # fmt: skip
    result.notes.append(
        "Low-texture scenes (issue #26; " + ", ".join(f"{k} {v:.0%}" for k, v in LOW_TEXTURE.items())
        + " of the surfaces), RobIA − RobIA w/o teacher, bad-1 [points] on the flat/striped pixels "
        "(claimed) / on the whole image (information): " + "; ".join(
            f"{s}: {a:+.2f} / {b:+.2f}" for s, a, b in zip(seeds, low, whole, strict=True))
        + f"; median {np.median(low):+.2f} / {np.median(whole):+.2f}; teacher pixels "
        + ", ".join(f"{100 * section[s]['teacher_fraction']:.1f} %" for s in seeds) + " of each frame."
    )  # fmt: skip


FULL: tuple[Mode, ...] = ("full",)
TEACHER_PAPER = ("no number published (abstract: the AdaptBN teacher provides dense supervision "
                 "where the handcrafted labels are missing)")  # fmt: skip
QUICK_METHODS = ("no adaptation", "BN-adapt", "full fine-tuning (SGBM labels)", "RobIA")
PAPER = "no number published (abstract: RobIA beats continual stereo TTA baselines under dynamic shifts)"


def _one_seed(cfg: RobIAReproConfig, seed: int, names: tuple[str, ...] | None) -> dict[str, Any]:
    """The per-seed numbers of the paper claims (every method on the same frames of this seed)."""
    out = experiment(cfg, seed, names)
    epes = {r["method"]: r["EPE"] for r in out["rows"]}
    r = out["runs"]["RobIA"]
    return {
        "out": out,
        "epe": epes,
        "ratio_noad": epes["RobIA"] / epes["no adaptation"],
        "minus_bn": epes["RobIA"] - epes["BN-adapt"],
        "minus_ft": epes["RobIA"] - epes["full fine-tuning (SGBM labels)"],
        "clean_ratio": r["clean_after"] / r["clean_before"],
    }


def run(mode: Mode = "quick", seed: int = 0, cfg: RobIAReproConfig | None = None) -> Result:
    """Paper claims over seeds (full: seeds
    seed..seed+4, 160 frames; the ablation rows run at the master seed only).
    Quick mode is a smoke run at one seed (64 source pairs, 60 source and 30 expert steps, 20
    frames, the four claimed methods): it judges the checks; its under-trained source net cannot
    resolve the paper claims, which are judged in full mode. ``cfg`` (default: the mode's)
    replaces the configuration; ``mode`` still picks the seeds and methods."""
    check_choice("mode", mode, ["quick", "full"])
    if cfg is not None:
        pass  # the caller's configuration
    elif mode == "quick":
        # quick (CI budget): a smaller source set and shorter source/expert training, 40 frames
        cfg = RobIAReproConfig(
            n_source=64, source_steps=60, expert_steps=30, cycles=1, pairs_per_domain=5
        )
    else:
        cfg = RobIAReproConfig()
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {
        s: _one_seed(cfg, s, None if (mode == "full" and s == seed) else QUICK_METHODS)
        for s in seeds
    }
    out = per[seed]["out"]
    runs = out["runs"]
    result = Result(
        name="vision.robia", mode=mode, seed=seed,
        paper_title="RobIA: Robust Instance-aware Continual Test-time Adaptation for Deep Stereo",
        headline="RobIA outperforms continual test-time adaptation baselines for stereo (BN-adapt, "
        "full fine-tuning on proxy labels) across dynamic target domains while adapting few parameters "
        "(no numbers published; the thresholds are the spec's reconstruction)",
    )  # fmt: skip
    result.table = out["rows"]
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731
    epes = per[seed]["epe"]
    r = runs["RobIA"]
    mech = mechanics(cfg, seed, runs)
    result.claims += [
        paper_claim("stream-mean EPE(RobIA) / EPE(no adaptation)", vals("ratio_noad"), 0.6, "<=",
                    seeds=seeds, modes=FULL, paper=PAPER, headline=True),
        paper_claim("EPE(RobIA) − EPE(BN-adapt) [px]", vals("minus_bn"), -0.3, "<=", seeds=seeds,
                    modes=FULL, paper=PAPER, headline=True, expected="xfail",
                    reason="BN-adapt is already strong on this toy: median −0.120 px over seeds 0–4, 0/5 ≤ −0.3"),
        paper_claim("EPE(RobIA) − EPE(full fine-tuning) [px]", vals("minus_ft"), 0.15, "<=", seeds=seeds,
                    modes=FULL, paper=PAPER, headline=True, expected="xfail",
                    reason="full fine-tuning on SGBM labels adapts as well here: median +0.154 px over seeds "
                    "0–4, 2/5 ≤ +0.15 (it forgets: clean EPE 0.76 → 1.20 at seed 0)"),
        paper_claim("RobIA clean EPE after / before the stream", vals("clean_ratio"), 1.25, "<=", seeds=seeds,
                    modes=FULL, paper="no number published (the spec's forgetting bound)"),
        Claim("RobIA trainable parameters / total", r["trainable"] / r["total"], 0.10, "<="),
        Claim("experts bit-identical and without gradient after the stream (1 = yes)", mech["experts_frozen"], 1, ">="),
        Claim("every frame: exactly top_k gates non-zero, summing to 1 (1 = yes)", mech["gates_topk_sum1"], 1, ">="),
        Claim("attention output of a row depends only on that row (1 = yes)", mech["row_local_attention"], 1, ">="),
        Claim("teacher term only on pixels ∉ V_H with c_T > τ (1 = yes)", mech["teacher_pixels_ok"], 1, ">="),
        Claim("first prediction of the stream vs the unadapted model, max |Δ| [px]", mech["first_prediction_diff"], 0.0, "<="),
        Claim("reset() restores the initial state (student, teacher, first prediction; 1 = yes)", mech["reset_restores"], 1, ">="),
        Claim("SGBM density on clean 96×160 pairs (whole image)", mech["sgbm_density"], 0.7, ">="),
        Claim("SGBM bad-1 on its valid pixels, clean 96×160 pairs", mech["sgbm_bad1"], 0.08, "<="),
    ]  # fmt: skip
    ft_ms = runs["full fine-tuning (SGBM labels)"]["ms_per_frame"]
    bn_ms = runs["BN-adapt"]["ms_per_frame"]
    result.metrics = {
        "epe": epes, "frames": out["frames"], "mechanics": mech, "seeds": seeds,
        "per_seed_epe": {str(s): per[s]["epe"] for s in seeds},
        "teacher_pixel_fraction": r.get("teacher_fraction"), "router_moved": mech["router_moved"],
        "time_ratio_vs_full_ft": r["ms_per_frame"] / ft_ms, "time_ratio_vs_bn_adapt": r["ms_per_frame"] / bn_ms,
        "source_cpu_s": out["models"]["source_cpu_s"], "expert_cpu_s": out["models"]["expert_cpu_s"],
        "per_domain_epe": {
            name: {d: float(np.mean([e for e, dd in zip(v["epe"], v["domain"], strict=True) if dd == d]))
                   for d in cfg.domains}
            for name, v in runs.items()
        },
    }  # fmt: skip
    result.add_series(
        "stream_epe",
        {
            "x": list(range(1, out["frames"] + 1)),
            **{name: v["epe"] for name, v in runs.items()},
        },
        title=f"Stereo error per frame on the {'→'.join(cfg.domains)} stream, seed {seed}",
        xlabel="frame of the stream",
        ylabel="end-point error (px)",
    )
    result.notes += [
        f"{out['frames']} frames ({'→'.join(cfg.domains)} × {cfg.cycles}, severity {cfg.severity}); "
        f"SGBM numDisparities {cfg.num_disparities}; student BN on test-batch statistics; seeds {seeds}"
        + ("; the ablation rows run at the master seed only." if mode == "full" else
           "; quick mode runs the four claimed methods only (the ablations are in full mode)."),
        "EPE per seed (RobIA / no adaptation / BN-adapt / full FT): " + "; ".join(
            f"{s}: " + " / ".join(f"{per[s]['epe'][m]:.3f}" for m in
                                  ("RobIA", "no adaptation", "BN-adapt", "full fine-tuning (SGBM labels)"))
            for s in seeds),
        f"teacher pixels (∉ V_H, c_T > 0.5): {100 * (r.get('teacher_fraction') or 0):.1f} % of each frame on average.",
        f"time per frame: RobIA / full fine-tuning = {r['ms_per_frame'] / ft_ms:.2f}, RobIA / BN-adapt = "
        f"{r['ms_per_frame'] / bn_ms:.2f} (includes SGBM on the CPU).",
        "RobIA is our reconstruction (no code, equations or numbers were available); its "
        "thresholds were not validated end to end.",
    ]  # fmt: skip
    if mode == "full":  # issue #26: the teacher where SGBM has nothing to match
        _low_texture_claims(result, low_texture_section(cfg, seeds), seeds)
    return result
