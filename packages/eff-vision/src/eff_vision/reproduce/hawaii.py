"""Reproduction ``vision.hawaii`` (spec: "design, not run"; our reading of HAWAII, not prototyped).

Teachers (spec): the four frozen toy digit backbones of the ComBo reproduction
(:func:`eff_vision.data.backbones.toy_digit_backbones`: supervised on digits 0–4, autoencoder,
rotation prediction, random init), each giving its relu2 map (32 channels on a 4×4 grid). The spec
also lists the image tower of the CLIC reproduction's tiny CLIP; full mode adds it as a fifth
teacher (digits replicated to 3 channels and resized to 32×32; its 8×8 conv map is resampled to the
4×4 student grid).

Student: :class:`eff_vision.hawaii.TinyViT` (4 layers, patch 2 on 8×8 → 16 tokens, width 64),
pre-trained 10 epochs as an autoencoder on the 800-image pool, then frozen, with LoRA (r = 4,
α = 8) on every MLP's fc1/fc2. Distillation: unlabelled, on the same 800-image pool, 20 epochs,
Adam 2e-3, batch 64, from the same pre-trained student for every variant:

- **lite** (MoVE-KD-lite, "plain multi-teacher feature regression"): one shared LoRA, per-teacher
  linear adapters, unweighted MSE, no router;
- **single-teacher distillation** from each teacher t (one LoRA + teacher t's adapter, plain MSE);
- **hawaii, teacher t only** (full mode, threshold 2): HAWAII's machinery with only teacher t's
  fine and coarse losses — is expert t the route when distilling from teacher t?
- **hawaii**: teacher-specific LoRA + teacher router + CLS-attention token weighting + 2 general
  LoRA experts with their router (coarse-grained distillation);
- **hawaii without token weights** (threshold 3).

Evaluation: a linear probe (:func:`logistic_probe`: multinomial logistic regression on standardised
features, L-BFGS, C = 1) on the mean-pooled student tokens for the four ComBo tasks (train 700,
test 297); the last epoch of every run is evaluated (no selection). Quick mode distils 8 epochs
and skips the per-teacher router runs of threshold 2; full mode runs the spec's 20 epochs.

Full mode, seeds 0–4: hawaii − lite +0.024 [−0.007, +0.037], 4/5 seeds in the first full run (the
ledger's, an earlier 2-core box) and +0.017 [−0.003, +0.019], 3/5 on an Intel Xeon (CPU model 207,
AVX-512) — reproduces on both; hawaii − best single teacher +0.004 [−0.008, +0.028], 4/5 in the first
run but a tie on the Xeon (median −7e-9, float32 rounding of equal accuracies, 2/5), so that
headline is an ``xfail`` (:data:`SINGLE_XFAIL`). The first run's commit gives the Xeon's numbers on
the Xeon: the same code and seeds train differently from the first float-kernel difference on, and
the margin is within that spread.

Another teacher set (issue #26; full mode, :func:`other_teacher_set`): the headline comparisons
with the teachers autoencoder, rotation and random (no supervised teacher), in a smaller section of
:data:`OTHER_EPOCHS` = 10 distillation epochs (half the spec's 20) with only the lite, hawaii and
no-token-weights runs, seeds seed..seed+4. ``HawaiiReproConfig(teachers=...)`` (and
``eff vision hawaii --teachers``) picks any teacher set.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from eff_shared.errors import check_choice, check_positive
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.torch import seeded
from eff_vision.data.backbones import BACKBONE_KINDS, digit_probe_tasks, toy_digit_backbones
from eff_vision.hawaii import (
    HawaiiConfig,
    HawaiiDistiller,
    HawaiiModel,
    TinyViT,
    balance_loss,
    get_hawaii_model,
    merge_and_unload,
)
from eff_vision.models import ClipImageTeacher

__all__ = [
    "OTHER_EPOCHS",
    "OTHER_TEACHERS",
    "SINGLE_XFAIL",
    "HawaiiReproConfig",
    "experiment",
    "logistic_probe",
    "main_claims",
    "other_teacher_set",
    "pretrained_student",
    "run",
]

NUM_CLASSES = {"digit10": 10, "parity": 2, "rot4": 4, "flip_noise": 10}
#: the other teacher set of full mode (issue #26): the self-supervised and random teachers only
OTHER_TEACHERS = ("ae", "rot", "random")
OTHER_EPOCHS = 10  # the section's distillation epochs (the spec's runs: 20)


@dataclass(frozen=True)
class HawaiiReproConfig:
    """Settings of the reproduction. ``teachers``: the teacher set, any non-empty subset of
    ``("sup", "ae", "rot", "random", "clip")`` (the toy digit backbones and the tiny-CLIP image
    tower), in order (expert t is teacher t)."""

    teachers: tuple[str, ...] = BACKBONE_KINDS
    ntr: int = 700
    pretrain_epochs: int = 10
    epochs: int = 20
    lr: float = 2e-3
    batch_size: int = 64
    r: int = 4
    lora_alpha: int = 8
    probe_iters: int = 200
    router_runs: bool = True
    no_weights: bool = True
    singles: bool = True

    def __post_init__(self) -> None:
        for name in ("ntr", "pretrain_epochs", "epochs", "batch_size", "r", "probe_iters"):
            check_positive(name, getattr(self, name), integer=True)
        allowed = (*BACKBONE_KINDS, "clip")
        if not isinstance(self.teachers, tuple):
            raise TypeError(
                f"teachers must be a tuple of names from {list(allowed)}, got {type(self.teachers).__name__}"
            )
        if len(set(self.teachers)) != len(self.teachers):
            raise ValueError(f"teachers must not repeat a name, got {list(self.teachers)!r}")
        bad = [t for t in self.teachers if t not in allowed]
        if bad or not self.teachers:
            raise ValueError(
                f"teachers must be a non-empty subset of {list(allowed)}, got {list(self.teachers)!r}"
            )

    def hawaii_config(self, **kw) -> HawaiiConfig:
        kw.setdefault("top_k", 1 if kw.get("variant") == "lite" else len(self.teachers))
        return HawaiiConfig(
            r=self.r, lora_alpha=self.lora_alpha, num_teachers=len(self.teachers), **kw
        )


@lru_cache(maxsize=2)
def _pretrained_state(seed: int, epochs: int) -> dict[str, torch.Tensor]:
    bb = toy_digit_backbones(seed)
    x = bb.pool[0]
    with seeded(seed + 101):
        vit = TinyViT()
        decoder = nn.Linear(64, 4)  # one 2×2 patch per token
        opt = torch.optim.Adam([*vit.parameters(), *decoder.parameters()], lr=1e-3)
        gen = torch.Generator().manual_seed(seed + 102)
        target = F.unfold(x, 2, stride=2).transpose(1, 2)  # [N, 16, 4] patches in token order
        for _ in range(epochs):
            for idx in torch.randperm(len(x), generator=gen).split(64):
                loss = F.mse_loss(decoder(vit(x[idx])[:, 1:]), target[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    return {k: v.detach().clone() for k, v in vit.state_dict().items()}


def pretrained_student(seed: int = 0, epochs: int = 10) -> TinyViT:
    """A fresh copy of the autoencoder-pre-trained TinyViT student (cached per seed)."""
    vit = TinyViT()
    vit.load_state_dict(_pretrained_state(seed, epochs))
    return vit.eval()


def _teachers(cfg: HawaiiReproConfig, seed: int) -> dict[str, nn.Module]:
    bb = toy_digit_backbones(seed)
    out: dict[str, nn.Module] = {}
    for name in cfg.teachers:
        if name == "clip":
            from eff_vision.clic.pretrain import pretrained_tiny_clip

            out[name] = ClipImageTeacher(pretrained_tiny_clip(seed).visual)
        else:
            out[name] = bb.models[name]
    return out


@torch.no_grad()
def _features(model: HawaiiModel | nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    if isinstance(model, HawaiiModel):
        with model.route("router"):
            return model.patch_tokens(x).mean(1)
    return model(x)[:, 1:].mean(1)


def logistic_probe(
    ftr: torch.Tensor,
    ytr: torch.Tensor,
    fte: torch.Tensor,
    yte: torch.Tensor,
    num_classes: int,
    iters: int = 100,
    c: float = 1.0,
) -> float:
    """Linear probe: multinomial logistic regression on standardised features (full-batch L-BFGS,
    L2 penalty ‖W‖²/(2·C·n) like scikit-learn's C = 1); test accuracy."""
    mu, sd = ftr.mean(0), ftr.std(0).clamp_min(1e-6)
    a, b = (ftr - mu) / sd, (fte - mu) / sd
    w = torch.zeros(a.shape[1], num_classes, dtype=a.dtype, requires_grad=True)
    bias = torch.zeros(num_classes, dtype=a.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w, bias], lr=1.0, max_iter=iters, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(a @ w + bias, ytr) + (w**2).sum() / (2 * c * len(a))
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(((b @ w + bias).argmax(1) == yte).float().mean())


def _probe(cfg: HawaiiReproConfig, model, tasks, seed: int) -> dict[str, float]:
    accs = {}
    for task, (xtr, ytr, xte, yte) in tasks.items():
        ftr, fte = _features(model, xtr).double(), _features(model, xte).double()
        accs[task] = logistic_probe(ftr, ytr, fte, yte, NUM_CLASSES[task], cfg.probe_iters)
    accs["mean"] = sum(accs.values()) / len(accs)
    return accs


def _distil(
    cfg: HawaiiReproConfig, hcfg: HawaiiConfig, teachers, x, seed: int, active=None, stats: int = 0
):
    torch.manual_seed(seed)
    dist = HawaiiDistiller(pretrained_student(seed, cfg.pretrain_epochs), teachers, hcfg)
    t0 = time.process_time()
    hist = dist.fit(
        x,
        epochs=cfg.epochs,
        lr=cfg.lr,
        batch_size=cfg.batch_size,
        seed=seed,
        active=active,
        stats_every=stats,
    )
    return dist, hist, time.process_time() - t0


def _macs(model: nn.Module, x: torch.Tensor) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() / 2 / len(x)


def experiment(cfg: HawaiiReproConfig, seed: int) -> dict[str, Any]:
    bb = toy_digit_backbones(seed)
    x = bb.pool[0]
    teachers = _teachers(cfg, seed)
    snapshot = {n: copy.deepcopy(m.state_dict()) for n, m in teachers.items()}
    tasks = digit_probe_tasks(*bb.downstream, cfg.ntr, seed)
    rows, runs = [], {}

    def add(variant: str, accs: dict, extra: dict | None = None) -> None:
        rows.append({"variant": variant, "mean probe accuracy": accs["mean"],
                     **{t: accs[t] for t in tasks}, **(extra or {})})  # fmt: skip

    base = pretrained_student(seed, cfg.pretrain_epochs)
    add("AE student (no distillation)", _probe(cfg, base, tasks, seed))
    lite, lite_hist, lite_s = _distil(cfg, cfg.hawaii_config(variant="lite"), teachers, x, seed)
    runs["lite"] = lite
    add(
        "lite (shared LoRA, linear adapters)",
        _probe(cfg, lite.student, tasks, seed),
        {"distil CPU s": lite_s},
    )
    hcfg = cfg.hawaii_config()
    single, routes = {}, {}
    for name in (
        teachers if cfg.singles else ()
    ):  # single-teacher distillation: one LoRA + the teacher's adapter, plain MSE
        d, _, s = _distil(cfg, cfg.hawaii_config(variant="lite"), teachers, x, seed, active=[name])
        single[name] = {"accs": _probe(cfg, d.student, tasks, seed), "cpu_s": s}
        add(f"single teacher: {name}", single[name]["accs"], {"distil CPU s": s})
    if cfg.router_runs:  # HAWAII's machinery distilled from teacher t alone: is expert t the route?
        for name in teachers:
            d, _, s = _distil(cfg, hcfg, teachers, x, seed, active=[name])
            st = d.student.router_stats(x[:256])
            routes[name] = {"share": st["share"][d.teacher_index(name)], "entropy": st["entropy"],
                            "accs": _probe(cfg, d.student, tasks, seed), "cpu_s": s}  # fmt: skip
            add(f"hawaii, teacher {name} only", routes[name]["accs"],
                {"route share of own expert": routes[name]["share"], "distil CPU s": s})  # fmt: skip
    hw, hw_hist, hw_s = _distil(cfg, hcfg, teachers, x, seed, stats=max(1, cfg.epochs // 4))
    runs["hawaii"] = hw
    hw_stats = hw.student.router_stats(x[:256])
    add("hawaii", _probe(cfg, hw.student, tasks, seed),
        {"router entropy": hw_stats["entropy"], "route shares": [round(v, 3) for v in hw_stats["share"]],
         "distil CPU s": hw_s})  # fmt: skip
    if cfg.no_weights:
        nw, _, nw_s = _distil(cfg, replace(hcfg, token_weighting=None), teachers, x, seed)
        add(
            "hawaii without token weights",
            _probe(cfg, nw.student, tasks, seed),
            {"distil CPU s": nw_s},
        )
    unchanged = all(
        torch.equal(v, teachers[n].state_dict()[k])
        for n in teachers
        for k, v in snapshot[n].items()
    ) and all(
        p.grad is None and not p.requires_grad for m in teachers.values() for p in m.parameters()
    )
    probe_x = x[:64]
    student_macs = _macs(hw.student, probe_x)
    teacher_macs = {n: _macs(m, probe_x) for n, m in teachers.items()}
    return {
        "rows": rows, "single": single, "routes": routes, "hawaii_hist": hw_hist, "lite_hist": lite_hist, "runs": runs,
        "teachers_unchanged": unchanged, "student_macs": student_macs, "teacher_macs": teacher_macs,
        "teachers": teachers, "timing": {"hawaii_s": hw_s, "lite_s": lite_s},
    }  # fmt: skip


def _mechanics(out: dict[str, Any], seed: int, cfg: HawaiiReproConfig) -> list[Claim]:
    x = toy_digit_backbones(seed).pool[0][:64]
    # B = 0: the wrapped student equals the original
    orig = pretrained_student(seed, cfg.pretrain_epochs)
    wrapped = get_hawaii_model(copy.deepcopy(orig), cfg.hawaii_config())
    with torch.no_grad():
        ref = orig(x)
        zero_err = max(
            float((_routed(wrapped, mode, x) - ref).abs().max())
            for mode in ("router", "coarse", ("teacher", 1))
        )
    # merge_and_unload (float64, so that only the algebra is compared): lite (single expert) and
    # a trained hawaii with a fixed teacher route
    lite = copy.deepcopy(out["runs"]["lite"].student).double().eval()
    hw = copy.deepcopy(out["runs"]["hawaii"].student).double().eval()
    x64 = x.double()
    with torch.no_grad():
        lite_ref = lite(x64)
        lite_merged = merge_and_unload(copy.deepcopy(lite))(x64)
        with hw.route(("teacher", 0)):
            hw_ref = hw(x64)
        hw_merged = merge_and_unload(copy.deepcopy(hw), route=0)(x64)
    merge_err = max(
        float((lite_merged - lite_ref).abs().max()), float((hw_merged - hw_ref).abs().max())
    )
    # balance loss: 1 for a uniform router, never lower for random routers, E when collapsed
    gen = torch.Generator().manual_seed(seed)
    uniform = float(balance_loss(torch.full((500, 4), 0.25)))
    rand_min = min(
        float(balance_loss((scale * torch.randn(500, 4, generator=gen) + torch.randn(4, generator=gen)).softmax(-1)))
        for scale in (0.1, 1.0, 3.0) for _ in range(50)
    )  # fmt: skip
    # same seed ⇒ same numbers (a short distillation twice)
    short = replace(cfg, epochs=1)
    params = []
    for _ in range(2):
        d, _, _ = _distil(short, cfg.hawaii_config(), out["teachers"], x, seed)
        params.append(torch.cat([p.detach().flatten() for p in d.trainable_parameters()]))
    return [
        Claim("all LoRA B = 0: wrapped student vs original, max abs output difference (router, coarse, teacher modes)",
              zero_err, 0.0, "<="),
        Claim("merge_and_unload vs the wrapped model (lite; hawaii with route = teacher 0; float64), max abs difference",
              merge_err, 1e-5, "<="),
        Claim("balance loss of a uniform router (E·Σ mean p · mean onehot)", uniform, 1.0 + 1e-6, "<="),
        Claim("min balance loss over 150 random routers − uniform router's", rand_min - uniform, -1e-6, ">="),
        Claim("teachers bit-identical, requires_grad False and no .grad after every distillation (1 = yes)",
              float(out["teachers_unchanged"]), 1.0, ">="),
        Claim("same seed ⇒ same trainable parameters after a 1-epoch distillation, max abs difference",
              float((params[0] - params[1]).abs().max()), 0.0, "<="),
    ]  # fmt: skip


def _routed(model: HawaiiModel, mode, x: torch.Tensor) -> torch.Tensor:
    with model.route(mode):
        return model(x)


PAPER = ("abstract: HAWAII's teacher-specific LoRA experts, routers and fine/coarse distillation beat "
         "MoVE-KD-style multi-teacher distillation and single-teacher students on VLM benchmarks "
         "(LLaVA-1.5 setting; no number in our sources)")  # fmt: skip


def _one_seed(cfg: HawaiiReproConfig, seed: int) -> dict[str, Any]:
    """Every variant at one seed (same pre-trained student, teachers and probe tasks) and the
    per-seed numbers the paper claims judge."""
    out = experiment(cfg, seed)
    by = {r["variant"]: r for r in out["rows"]}
    hw = by["hawaii"]["mean probe accuracy"]
    router = out["hawaii_hist"]["router"]
    vals = {
        "out": out, "best_name": None,
        "vs_lite": hw - by["lite (shared LoRA, linear adapters)"]["mean probe accuracy"],
        "entropy": router[-1][1]["entropy"] - router[0][1]["entropy"],
    }  # fmt: skip
    if out["single"]:
        best_name = max(out["single"], key=lambda n: out["single"][n]["accs"]["mean"])
        vals["best_name"] = best_name
        vals["vs_single"] = hw - out["single"][best_name]["accs"]["mean"]
    if out["routes"]:
        vals["share"] = min(r["share"] for r in out["routes"].values())
    if cfg.no_weights:
        vals["no_weights"] = by["hawaii without token weights"]["mean probe accuracy"] - hw
    return vals


def other_teacher_set(
    seeds: list[int],
    teachers: tuple[str, ...] = OTHER_TEACHERS,
    epochs: int = OTHER_EPOCHS,
    **overrides: Any,
) -> dict[int, dict[str, Any]]:
    """The headline comparisons with another teacher set (issue #26): per seed, ``vs_lite``
    (hawaii − lite), ``no_weights`` (hawaii without token weights − hawaii), ``entropy`` and the
    variant rows; only the lite, hawaii and no-token-weights runs (no single-teacher or router
    runs). ``overrides`` go to :class:`HawaiiReproConfig` (e.g. ``pretrain_epochs``)."""
    cfg = HawaiiReproConfig(
        teachers=teachers, epochs=epochs, router_runs=False, singles=False, **overrides
    )
    out = {}
    for s in seeds:
        t0 = time.perf_counter()
        vals = _one_seed(cfg, s)
        vals["rows"] = vals.pop("out")["rows"]  # drop the trained models
        vals["wall_s"] = time.perf_counter() - t0
        out[s] = vals
    return out


#: expected verdicts of the other-teacher-set claims, set by the first full run (seeds 0-4)
_OTHER_XFAIL: dict[str, str] = {
    "vs_lite": "median -0.004 [-0.019, +0.001] over seeds 0-4 (0/5 seeds >= +0.01) at 10 epochs: "
    "with the autoencoder, rotation and random teachers every distilled student stays within "
    "+0.03 of the undistilled AE student (0.60-0.64), and hawaii gains less than lite on 3/5 seeds",
}


def _other_claims(
    result: Result, other: dict[int, dict[str, Any]], seeds: list[int], teachers, epochs: int
) -> None:
    """Table rows (master seed), claims and notes of the other-teacher-set section."""
    tag = f"teachers {', '.join(teachers)} ({epochs} epochs)"
    result.table += [{"seed": seeds[0], **r, "variant": f"{tag}: {r['variant']}"}
                     for r in other[seeds[0]]["rows"]]  # fmt: skip
    kw: dict[str, Any] = {"seeds": seeds, "modes": ("full",)}

    def claim(key: str, text: str, values: list[float], threshold: float, op: str, paper: str):
        return paper_claim(
            text, values, threshold, op, paper=paper, reason=_OTHER_XFAIL.get(key, ""),
            expected="xfail" if key in _OTHER_XFAIL else "reproduces", **kw,
        )  # fmt: skip

    result.claims += [
        claim("vs_lite", f"{tag}: hawaii − lite (plain multi-teacher feature regression), mean probe accuracy",
              [other[s]["vs_lite"] for s in seeds], 0.01, ">=", PAPER),
        claim("no_weights", f"{tag}: hawaii without token-importance weights − hawaii, mean probe accuracy (must not improve)",
              [other[s]["no_weights"] for s in seeds], 0.0, "<=",
              "abstract: token-importance weighting of the fine-grained distillation (no number)"),
    ]  # fmt: skip
    cost = sum(other[s]["wall_s"] for s in seeds)
    result.metrics["other_teacher_set"] = {
        "teachers": list(teachers), "epochs": epochs, "wall_s": cost,
        "per_seed": {s: {k: v for k, v in other[s].items() if k != "rows"} for s in seeds},
    }  # fmt: skip
    result.notes.append(
        f"Another teacher set (issue #26): {tag}, lite / hawaii / no-token-weights runs only, seeds "
        f"{seeds}, {cost / 60:.1f} min wall. Per seed hawaii − lite / no token weights − hawaii: "
        + "; ".join(
            f"{s}: {other[s]['vs_lite']:+.3f} / {other[s]['no_weights']:+.3f}" for s in seeds
        )
    )


#: the best-single-teacher headline held in the first full run and is a tie on another machine
#: (same code and seeds: the first run's commit gives the second machine's numbers there)
SINGLE_XFAIL = (
    "depends on the machine: +0.004 [-0.008, +0.028], 4/5 seeds in the first full run (an earlier "
    "2-core box, worker processes); a tie on an Intel Xeon (CPU model 207, AVX-512), median -7e-9 "
    "[-0.013, +0.013], 2/5 seeds (at seed 1 hawaii and the best single teacher classify the same "
    "number of test images; -7e-9 is float32 rounding of the per-task accuracies), at the first "
    "run's commit too: same code and seeds, and the per-seed margins (±16 of the 4 × 297 test "
    "images) lie within the spread of training"
)


def main_claims(
    per: dict[int, dict[str, Any]], seeds: list[int], cfg: HawaiiReproConfig
) -> list[Claim]:
    """The paper claims of the main section from the per-seed numbers of :func:`_one_seed`
    (``vs_lite``, ``entropy``, and where run ``vs_single``, ``share``, ``no_weights``)."""
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731
    judged: tuple[Mode, ...] = ("full",)
    claims = [
        paper_claim("hawaii − lite (plain multi-teacher feature regression), mean linear-probe accuracy over 4 tasks",
                    vals("vs_lite"), 0.01, ">=", seeds=seeds, modes=judged, paper=PAPER, headline=True),
        paper_claim("teacher-router entropy: end − start of the hawaii distillation (nats)", vals("entropy"), 0.0, "<",
                    seeds=seeds, modes=judged, paper="abstract: the router learns to switch between teachers"),
    ]  # fmt: skip
    if cfg.singles:
        claims.append(
            paper_claim("hawaii − best single-teacher distillation (per seed), mean probe accuracy",
                        vals("vs_single"), 0.0, ">=", seeds=seeds, modes=judged, paper=PAPER, headline=True,
                        expected="xfail", reason=SINGLE_XFAIL)
        )  # fmt: skip
    if "share" in per[seeds[0]]:
        claims.append(
            paper_claim("min over teachers t of the share of (token, layer) routes to expert t when distilling "
                        "from teacher t alone", vals("share"), 0.60, ">=", seeds=seeds, modes=judged,
                        expected="xfail", paper="abstract: expert e_t is tied to teacher t (no number)",
                        reason="measured 0.25–0.49 at seed 0 (our reading of unreleased code; dense routing)")
        )  # fmt: skip
    if cfg.no_weights:
        claims.append(
            paper_claim("hawaii without token-importance weights − hawaii, mean probe accuracy (must not improve)",
                        vals("no_weights"), 0.0, "<=", seeds=seeds, modes=judged,
                        paper="abstract: token-importance weighting of the fine-grained distillation (no number)")
        )  # fmt: skip
    return claims


def run(mode: Mode = "quick", seed: int = 0, cfg: HawaiiReproConfig | None = None) -> Result:
    check_choice("mode", mode, ["quick", "full"])
    # quick (CI budget): one seed, 4 teachers, 5 pre-training and 3 distillation epochs, probes of
    # 50 L-BFGS iterations, no single-teacher, router or no-token-weights runs; the learning claims
    # are judged in full mode only (3 epochs cannot resolve them). Full: the spec's 20 epochs, the tiny-CLIP image tower as a fifth
    # teacher, the router runs, seeds seed..seed+4.
    if cfg is not None:
        pass  # the caller's configuration
    elif mode == "quick":
        cfg = HawaiiReproConfig(
            pretrain_epochs=5, epochs=3, probe_iters=50, router_runs=False, no_weights=False,
            singles=False,
        )  # fmt: skip
    else:
        cfg = HawaiiReproConfig(teachers=(*BACKBONE_KINDS, "clip"))
    t0 = time.perf_counter()
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {s: _one_seed(cfg, s) for s in seeds}
    out = per[seed]["out"]
    best_name = per[seed]["best_name"]
    router = out["hawaii_hist"]["router"]
    result = Result(
        name="vision.hawaii", mode=mode, seed=seed,
        paper_title="HAWAII: Hierarchical Visual Knowledge Transfer for Efficient Vision-Language Models",
        headline="distilling several visual experts into one vision encoder with teacher-specific LoRA "
        "experts + routers (fine-grained) and general LoRA experts (coarse-grained) beats plain "
        "multi-teacher distillation (MoVE-KD) on VLM benchmarks (LLaVA-1.5; no number in our sources)",
    )  # fmt: skip
    result.table = [{"seed": seed, **r} for r in out["rows"]]
    result.claims += main_claims(per, seeds, cfg)
    result.claims += _mechanics(out, seed, cfg)
    tm = sum(out["teacher_macs"].values())
    shares = [round(v, 3) for v in router[-1][1]["share"]]
    result.metrics = {
        "student_macs_per_image": out["student_macs"], "teacher_macs_per_image": out["teacher_macs"],
        "teachers_over_student_macs": tm / out["student_macs"],
        "router_entropy": [(e, s["entropy"]) for e, s in router], "router_share_end": router[-1][1]["share"],
        "route_share_own_expert": {n: r["share"] for n, r in out["routes"].items()},
        "distil_cpu_s": out["timing"], "epochs": cfg.epochs, "teachers": list(cfg.teachers), "seeds": seeds,
        "per_seed": {s: {k: v for k, v in per[s].items() if k != "out"} for s in seeds},
    }  # fmt: skip
    result.notes += [
        "Our reading of HAWAII (code unreleased), not prototyped in the spec; the thresholds are "
        "proposals. Adapters sit on the student side (student tokens → teacher width; targets are "
        "LayerNormed teacher tokens): with MoVE-KD's teacher-side adapters and no language-modelling "
        "loss the joint objective collapses (student and adapters agree on a constant; `adapter_side="
        "'teacher'`).",
        f"Distillation: {cfg.epochs} epochs, teachers {', '.join(cfg.teachers)}; dense teacher routing "
        "(top_k = number of teachers): with top-1 routing an expert that is not selected never "
        f"receives a gradient, so a router cannot move tokens to it. Seeds {seeds}; the table is seed {seed}.",
        f"Best single teacher at seed {seed}: {best_name}. Per seed hawaii − lite / − best single: "
        + "; ".join(f"{s}: {per[s]['vs_lite']:+.3f} / {per[s].get('vs_single', float('nan')):+.3f}" for s in seeds),
        "Router entropy (hawaii, all teachers) by epoch: "
        + ", ".join(f"{e}: {s['entropy']:.3f}" for e, s in router) + f"; final route shares {shares}.",
        f"Inference MACs per image: student {out['student_macs']:.0f} (router mode, LoRA and routers "
        f"included) vs teachers {tm:.0f} in total ({tm / out['student_macs']:.2f}×): at this toy scale "
        "the 4-layer ViT student costs more than all conv teachers together.",
    ]  # fmt: skip
    if out["routes"]:
        result.notes.append(
            "Route share of its own expert when distilling from one teacher: "
            + ", ".join(f"{n} {r['share']:.3f}" for n, r in out["routes"].items())
        )
    else:
        result.notes.append(
            "Quick mode is a smoke run (3 epochs): the learning claims are judged in full mode, where "
            "the single-teacher, route-share and no-token-weights runs are made."
        )
    if mode == "full":
        other = other_teacher_set(seeds)
        _other_claims(result, other, seeds, OTHER_TEACHERS, OTHER_EPOCHS)
    result.metrics["wall_s"] = time.perf_counter() - t0
    return result
