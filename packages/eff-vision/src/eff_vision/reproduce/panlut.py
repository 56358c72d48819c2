"""Reproduction ``vision.panlut``: Pan-LUT vs classic pan-sharpening (EXP, Brovey, IHS, GSA) and the
PNN-lite CNN under a synthetic Wald protocol on bundled RGB images (B = 3).

Data (spec): ``wald_degrade`` with the nonlinear PAN term (with a purely linear PAN, GSA/IHS are
near-oracle); train astronaut, rocket, immunohistochemistry, hubble_deep_field; test coffee, chelsea
(cropped to multiples of 32). Models: Pan-LUT for 3-band data = PGLUT (4-D, 17 points, 4 outputs) →
4 sequential SDLUTs (9 points) → AOLUT (4-D, 17 points, 4 → 3), identity-initialised, 689,623
parameters; batches of 4 random 48² HR patches, Adam + cosine decay, L1, lr 1e-2; full mode 600
steps (the thresholds allow ≤ 600) over seeds seed..seed+4; quick mode is a 40-step smoke run that
judges the checks. PNN-lite: lr 2e-3, 4× the LUT's steps (quick: 1×).

At this scale the quality claim reproduces only against the weak baselines (the prototype's Pan-LUT
was undertrained vs GSA/IHS/PNN-lite; the paper trains 1600 epochs): the thresholds are the spec's
"(a)" items; Pan-LUT vs GSA / IHS / PNN-lite (the paper's headline) are xfail paper claims.

Held-out scenes (issue #24): both modes also train ``make_panlut(consistency=True)`` (the same
LUTs, trained with the spectral-consistency projection) and measure both models against bicubic
upsampling (EXP) on :data:`HELDOUT` — a fundus photo, a flat-colour logo and two grey images,
colour statistics unlike the training images'; the worst scene's margin is a paper claim per model
(a pan-sharpener is applied to scenes it was not trained on).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed
from eff_vision.data.images import sample_image
from eff_vision.data.pansharpen import wald_degrade
from eff_vision.metrics import pansharpen as M
from eff_vision.panlut.baselines import PNN, bicubic, brovey, gsa, ihs
from eff_vision.panlut.lut import (
    SDLUT,
    PanLUT,
    bicubic_upsample,
    lut_regularizer,
    lut_transform,
    peak_tensor_bytes,
)
from eff_vision.panlut.training import PanTrainConfig, evaluate, train_pansharpener

__all__ = [
    "PanLUTReproConfig",
    "experiment",
    "heldout_psnr",
    "make_panlut",
    "run",
    "torch_predict",
]

TRAIN = ("astronaut", "rocket", "immunohistochemistry", "hubble_deep_field")
TEST = ("coffee", "chelsea")
# held-out scenes of other content and colour statistics than TRAIN and TEST: a red fundus photo
# on black, a flat-colour logo, and two grey images (r = g = b) given three equal bands
HELDOUT = ("retina", "logo", "moon", "camera")


@dataclass(frozen=True)
class PanLUTReproConfig:
    steps: int = 300
    pnn_factor: int = 4
    lut_lr: float = 1e-2
    pnn_lr: float = 2e-3
    batch: int = 4
    patch: int = 48
    ratio: int = 4
    train_images: tuple[str, ...] = TRAIN
    test_images: tuple[str, ...] = TEST
    memory_sizes: tuple[int, int] = (384, 768)
    memory_tile: int = 128
    heldout_images: tuple[str, ...] = HELDOUT
    heldout_side: int = 512
    consistency_variant: bool = False

    def __post_init__(self) -> None:
        check_int("steps", self.steps, minimum=1)
        check_int("pnn_factor", self.pnn_factor, minimum=1)


def make_panlut(ratio: int = 4, consistency: bool = False) -> PanLUT:
    """The reproduction's 3-band Pan-LUT (689,623 parameters) for resolution ratio ``ratio``;
    ``consistency=True`` adds the spectral-consistency projection (no parameters)."""
    return PanLUT(
        3, pg_dim=17, sd_dim=9, ao_dim=17, ratio=ratio, pg_out_channels=4, consistency=consistency
    )


def _test_set(cfg: PanLUTReproConfig, seed: int) -> list[dict[str, np.ndarray]]:
    out = []
    for i, name in enumerate(cfg.test_images):
        gt = sample_image(name, multiple_of=32)
        ms, pan = wald_degrade(gt, cfg.ratio, seed=derive_seed(seed, 100 + i))
        out.append({"gt": gt.astype(np.float64), "ms": ms, "pan": pan})
    return out


def _heldout_set(cfg: PanLUTReproConfig, seed: int) -> list[dict[str, Any]]:
    """The held-out scenes (longer side ``heldout_side``; grey images as three equal bands)."""
    out = []
    for i, name in enumerate(cfg.heldout_images):
        gt = sample_image(name, multiple_of=32, max_side=cfg.heldout_side)
        if gt.shape[2] == 1:
            gt = np.repeat(gt, 3, axis=2)
        ms, pan = wald_degrade(gt, cfg.ratio, seed=derive_seed(seed, 200 + i))
        out.append({"name": name, "gt": gt.astype(np.float64), "ms": ms, "pan": pan})
    return out


def heldout_psnr(
    model: torch.nn.Module, cfg: PanLUTReproConfig, seed: int
) -> dict[str, dict[str, float]]:
    """PSNR of ``model`` and of bicubic upsampling (EXP) on each held-out scene:
    ``{name: {"model": dB, "EXP": dB}}``."""
    out = {}
    for t in _heldout_set(cfg, seed):
        out[t["name"]] = {
            "model": M.psnr(t["gt"], torch_predict(model, t["ms"], t["pan"])),
            "EXP": M.psnr(t["gt"], bicubic(t["ms"], cfg.ratio)),
        }
    return out


@torch.no_grad()
def torch_predict(model: torch.nn.Module, ms: np.ndarray, pan: np.ndarray) -> np.ndarray:
    """A torch pan-sharpener on one scene: ``ms`` (h, w, C) and ``pan`` (H, W) in, (H, W, C) float64 out."""
    t_ms = torch.from_numpy(ms).permute(2, 0, 1)[None]
    t_pan = torch.from_numpy(pan)[None, None]
    return model(t_ms, t_pan)[0].permute(1, 2, 0).numpy().astype(np.float64)


def experiment(cfg: PanLUTReproConfig, seed: int) -> dict[str, Any]:
    train = [sample_image(n) for n in cfg.train_images]
    tests = _test_set(cfg, seed)
    methods: dict[str, Any] = {
        "EXP (bicubic)": lambda t: bicubic(t["ms"], cfg.ratio),
        "Brovey": lambda t: brovey(bicubic(t["ms"], cfg.ratio), t["pan"]),
        "IHS (fast, hist-matched)": lambda t: ihs(bicubic(t["ms"], cfg.ratio), t["pan"]),
        "GSA": lambda t: gsa(bicubic(t["ms"], cfg.ratio), t["pan"], t["ms"], cfg.ratio),
    }
    params: dict[str, int] = {}
    train_s: dict[str, float] = {}
    torch.manual_seed(seed)
    pnn = PNN(3, "lite", cfg.ratio)
    tr = train_pansharpener(
        pnn, train, PanTrainConfig(cfg.steps * cfg.pnn_factor, cfg.batch, cfg.patch, cfg.pnn_lr, cfg.ratio, seed=seed)
    )  # fmt: skip
    label_pnn = f"PNN-lite ({cfg.steps * cfg.pnn_factor} steps)"
    methods[label_pnn] = lambda t: torch_predict(pnn, t["ms"], t["pan"])
    params[label_pnn], train_s[label_pnn] = sum(p.numel() for p in pnn.parameters()), tr["seconds"]
    lut_cfg = PanTrainConfig(cfg.steps, cfg.batch, cfg.patch, cfg.lut_lr, cfg.ratio, seed=seed)
    lut = make_panlut(cfg.ratio)
    tr_lut = train_pansharpener(lut, train, lut_cfg)
    label_lut = f"Pan-LUT ({cfg.steps} steps)"
    methods[label_lut] = lambda t: torch_predict(lut, t["ms"], t["pan"])
    params[label_lut], train_s[label_lut] = (
        sum(p.numel() for p in lut.parameters()),
        tr_lut["seconds"],
    )
    lut_c, label_c = None, None
    if cfg.consistency_variant:  # the same LUTs and training, with the consistency projection
        lut_c = make_panlut(cfg.ratio, consistency=True)
        tr_c = train_pansharpener(lut_c, train, lut_cfg)
        label_c = f"Pan-LUT + consistency ({cfg.steps} steps)"
        methods[label_c] = lambda t: torch_predict(lut_c, t["ms"], t["pan"])
        params[label_c], train_s[label_c] = params[label_lut], tr_c["seconds"]
    rows = []
    for label, fn in methods.items():
        scores = [evaluate(fn(t), t["gt"], t["ms"], t["pan"], cfg.ratio) for t in tests]
        row: dict[str, Any] = {"method": label}
        row.update({k: float(np.mean([s[k] for s in scores])) for k in scores[0]})
        row["parameters"] = params.get(label, 0)
        row["train s"] = train_s.get(label, 0.0)
        rows.append(row)
    return {
        "rows": rows, "lut": lut, "pnn": pnn, "label_lut": label_lut, "label_pnn": label_pnn,
        "lut_history": tr_lut["history"], "tests": tests, "lut_consistency": lut_c,
        "label_consistency": label_c,
    }  # fmt: skip


def _brute_lut(x: torch.Tensor, lut: torch.Tensor) -> torch.Tensor:
    """Multilinear interpolation written out corner by corner, pixel by pixel."""
    c, n, d = lut.shape[0], lut.ndim - 1, lut.shape[1]
    b, _, h, w = x.shape
    out = torch.zeros(b, c, h, w, dtype=x.dtype)
    for bi, i, j in itertools.product(range(b), range(h), range(w)):
        pos = x[bi, :, i, j] * (d - 1)
        i0 = torch.clamp(torch.floor(pos), 0, d - 2).long()
        f = pos - i0
        for bits in itertools.product((0, 1), repeat=n):
            wgt = torch.prod(torch.stack([f[k] if bt else 1 - f[k] for k, bt in enumerate(bits)]))
            out[bi, :, i, j] += (
                wgt * lut[(slice(None), *[int(i0[k]) + bt for k, bt in enumerate(bits)])]
            )
    return out


def _mechanics(seed: int, cfg: PanLUTReproConfig) -> dict[str, float]:
    gen = torch.Generator().manual_seed(seed)
    # (2) identity before training
    fresh = make_panlut()
    ms = torch.rand(2, 3, 12, 10, generator=gen)
    pan = torch.rand(2, 1, 48, 40, generator=gen)
    with torch.no_grad():
        ident_err = float((fresh(ms, pan) - bicubic_upsample(ms, 4)).abs().max())
    # (3) brute force and gradcheck, n = 2..5
    brute_err, grad_ok = 0.0, True
    for n in (2, 3, 4, 5):
        lut = torch.randn(2, *([4] * n), generator=gen, dtype=torch.float64)
        x = torch.rand(1, n, 2, 3, generator=gen, dtype=torch.float64)
        x[0, 0, 0, 0], x[0, -1, 1, 2] = 1.0, 0.0  # grid-edge values
        brute_err = max(brute_err, float((lut_transform(x, lut) - _brute_lut(x, lut)).abs().max()))
        small = torch.randn(2, *([3] * n), generator=gen, dtype=torch.float64, requires_grad=True)
        xs = (
            0.05 + 0.9 * torch.rand(1, n, 2, 2, generator=gen, dtype=torch.float64)
        ).requires_grad_()
        grad_ok &= bool(torch.autograd.gradcheck(lut_transform, (xs, small), eps=1e-6, atol=1e-5))
    # (4) tiled == whole on an image whose sides are not multiples of the tiles
    model = make_panlut()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen)).clamp_(0, 1)
    rng = np.random.default_rng(seed)
    ms_np = rng.random((23, 19, 3)).astype(np.float32)
    pan_np = rng.random((92, 76)).astype(np.float32)
    whole = torch_predict(model, ms_np, pan_np)
    tiles = (5, 7, 24, 50)  # 5 and 7 are smaller than 4 × halo = 8
    tiled_err = max(
        float(np.abs(model.predict_tiled(ms_np, pan_np, tile=t) - whole).max()) for t in tiles
    )
    model.consistency = True  # the projection's halo (20 HR px): tiles of 41 (the minimum) and 60
    whole_c = torch_predict(model, ms_np, pan_np)
    tiled_err_c = max(
        float(np.abs(model.predict_tiled(ms_np, pan_np, tile=t) - whole_c).max()) for t in (41, 60)
    )
    model.consistency = False
    # (5) bounded memory: the largest tensor does not grow with the image (grid lookups: the same
    # tiling with fewer ops for the dispatch-mode probe)
    model.impl = "grid"
    peaks = []
    for size in cfg.memory_sizes:
        ms_big = np.full((size // 4, size // 4, 3), 0.5, np.float32)
        pan_big = np.full((size, size), 0.5, np.float32)
        _, peak = peak_tensor_bytes(
            lambda m=ms_big, p=pan_big: model.predict_tiled(m, p, tile=cfg.memory_tile)
        )
        peaks.append(peak)
    # (6) mechanics of the SDLUT modes, the regulariser and seeding
    sd_chain = SDLUT(2, 5, mode="chain")
    sd_mean = SDLUT(2, 5, mode="mean")
    with torch.no_grad():
        sd_mean.luts.copy_(
            sd_chain.luts.add_(0.2 * torch.randn(sd_chain.luts.shape, generator=gen))
        )
    x = torch.rand(1, 2, 9, 8, generator=gen)
    with torch.no_grad():
        chain_ref = x
        for k in range(4):
            chain_ref = torch.clamp(sd_chain.stage(chain_ref, k), 0, 1)
        mean_ref = torch.clamp(torch.stack([sd_mean.stage(x, k) for k in range(4)]).mean(0), 0, 1)
        mode_err = max(
            float((sd_chain(x) - chain_ref).abs().max()), float((sd_mean(x) - mean_ref).abs().max())
        )
        modes_differ = float((sd_chain(x) - sd_mean(x)).abs().max())
    with torch.no_grad():
        reg0 = max(
            float(lut_regularizer(fresh.pg.lut)),
            float(lut_regularizer(fresh.ao.lut)),
            float(fresh.regularizer()),
        )
    return {
        "ident_err": ident_err, "brute_err": brute_err, "grad_ok": float(grad_ok),
        "tiled_err": tiled_err, "tiled_err_c": tiled_err_c, "peak_small": peaks[0], "peak_big": peaks[1], "mode_err": mode_err,
        "modes_differ": modes_differ, "reg_identity": reg0,
    }  # fmt: skip


PAPER = ("WV2/WV3/GF2: state of the art at full resolution (QNR) and competitive reduced-resolution "
         "PSNR/SAM/ERGAS/Q against CS/MRA methods and deep nets (PNN, PanNet, ...), < 700K parameters, "
         "9K×9K in < 1 ms on a 2080 Ti (table numbers not retrieved)")  # fmt: skip
FULL: tuple[Mode, ...] = ("full",)
GENERALISES = (
    "the paper applies one trained model to every test scene of a satellite, unseen in "
    "training (reduced- and full-resolution tests): a pan-sharpener must hold on new scenes"
)
HELDOUT_EXPECT: dict[str, str] = {
    "expected": "xfail",
    "reason": "first 5-seed run: worst held-out margin −7.16 dB median [−8.31, −3.95], 0/5 seeds "
    "(the flat-colour logo and the fundus photo: colours the training images never show, where "
    "the LUT cells hold whatever training left); with the consistency projection the same LUTs "
    "are +2.82 dB [+2.41, +3.43] above bicubic on every scene (the next claim)",
}
UNDERTRAINED = ("Pan-LUT is undertrained at ≤ 600 steps (the paper trains 1600 epochs); seed 0 full: "
                "31.4 dB vs GSA 36.1, IHS 35.1, PNN-lite 37.1")  # fmt: skip


def _one_seed(cfg: PanLUTReproConfig, seed: int) -> dict[str, Any]:
    """Every method at one seed (same training patches and Wald-degraded test images)."""
    out = experiment(cfg, seed)
    rows = {r["method"]: r for r in out["rows"]}
    lut, exp = rows[out["label_lut"]], rows["EXP (bicubic)"]
    return {
        "out": out, "rows": rows,
        "vs_exp": lut["PSNR"] - exp["PSNR"], "vs_brovey": lut["PSNR"] - rows["Brovey"]["PSNR"],
        "ergas": lut["ERGAS"] / exp["ERGAS"], "q": lut["Q"], "vs_gsa": lut["PSNR"] - rows["GSA"]["PSNR"],
        "vs_ihs": lut["PSNR"] - rows["IHS (fast, hist-matched)"]["PSNR"],
        "vs_pnn": lut["PSNR"] - rows[out["label_pnn"]]["PSNR"],
        **_generalisation(cfg, seed, out),
    }  # fmt: skip


def _generalisation(cfg: PanLUTReproConfig, seed: int, out: dict[str, Any]) -> dict[str, Any]:
    """Held-out scenes: per model the PSNR margin over EXP per scene and its worst scene."""
    res: dict[str, Any] = {}
    for key, model in (("heldout", out["lut"]), ("heldout_c", out["lut_consistency"])):
        if model is None:
            continue
        per = heldout_psnr(model, cfg, seed)
        res[key] = {n: v["model"] - v["EXP"] for n, v in per.items()}
        res[key + "_min"] = min(res[key].values())
        res[key + "_psnr"] = per
    return res


def run(mode: Mode = "quick", seed: int = 0, cfg: PanLUTReproConfig | None = None) -> Result:
    """Paper claims over seeds seed..seed+4 in full mode (600 LUT steps); the mechanics are checks.
    Quick mode is a smoke run (one seed, 40 LUT and 40 PNN-lite steps, small memory probe) that
    judges the checks; its paper claims are judged in full mode. ``cfg`` (default: the mode's)
    replaces the configuration; ``mode`` still picks the seeds."""
    check_choice("mode", mode, ["quick", "full"])
    full = mode == "full"
    if cfg is None:
        cfg = PanLUTReproConfig(
            steps=600 if full else 40, pnn_factor=4 if full else 1,
            memory_sizes=(1024, 4096) if full else (256, 512), memory_tile=256 if full else 128,
            consistency_variant=True,
        )  # fmt: skip
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {s: _one_seed(cfg, s) for s in seeds}
    out, rows = per[seed]["out"], per[seed]["rows"]
    lut = rows[out["label_lut"]]
    mech = _mechanics(seed, cfg)
    rerun = PanLUTReproConfig(steps=20 if full else 5, pnn_factor=1, test_images=("coffee",))
    a, b = experiment(rerun, seed + 1), experiment(rerun, seed + 1)
    same = max(
        abs(x[k] - y[k])
        for x, y in zip(a["rows"], b["rows"], strict=True)
        for k in ("PSNR", "SAM", "Q")
    )
    result = Result(
        name="vision.panlut", mode=mode, seed=seed,
        paper_title="Pan-LUT: Efficient Pan-sharpening via Learnable Look-Up Tables",
        headline="Pan-LUT (learnable PAN-guided, spatial-detail and adaptive-output LUTs, < 700K "
        "parameters) matches or beats CS/MRA and deep pan-sharpening networks on WV2/WV3/GF2 at orders of "
        "magnitude less compute (9K×9K in < 1 ms on a 2080 Ti)",
    )  # fmt: skip
    result.table = out["rows"]
    s0, s1 = cfg.memory_sizes
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731
    pnn_label = out["label_pnn"].split(" (")[0]
    heldout = ", ".join(cfg.heldout_images)
    result.claims += [
        paper_claim("PSNR(Pan-LUT) − PSNR(EXP), test-image mean, dB", vals("vs_exp"), 3.0, ">=", seeds=seeds,
                    modes=FULL, paper=PAPER),
        paper_claim("PSNR(Pan-LUT) − PSNR(Brovey), dB", vals("vs_brovey"), 3.0, ">=", seeds=seeds, modes=FULL,
                    paper=PAPER),
        paper_claim("ERGAS(Pan-LUT) / ERGAS(EXP)", vals("ergas"), 0.75, "<=", seeds=seeds, modes=FULL, paper=PAPER),
        paper_claim("Q(Pan-LUT) (UIQI, 32×32 blocks, band mean)", vals("q"), 0.90, ">=", seeds=seeds, modes=FULL,
                    paper=PAPER),
        paper_claim("PSNR(Pan-LUT) − PSNR(GSA), dB (Pan-LUT at least as good)", vals("vs_gsa"), 0.0, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER, headline=True, expected="xfail", reason=UNDERTRAINED),
        paper_claim("PSNR(Pan-LUT) − PSNR(IHS), dB (Pan-LUT at least as good)", vals("vs_ihs"), 0.0, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER, headline=True, expected="xfail", reason=UNDERTRAINED),
        paper_claim(f"PSNR(Pan-LUT) − PSNR({pnn_label}), dB (Pan-LUT at least as good)", vals("vs_pnn"), 0.0, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER, headline=True, expected="xfail", reason=UNDERTRAINED),
        paper_claim(f"held-out scenes ({heldout}, ≤ {cfg.heldout_side} px): worst PSNR(Pan-LUT) − PSNR(EXP), dB",
                    vals("heldout_min"), 0.0, ">=", seeds=seeds, modes=FULL, paper=GENERALISES, **HELDOUT_EXPECT),
        paper_claim("held-out scenes: worst PSNR(Pan-LUT + consistency projection) − PSNR(EXP), dB",
                    vals("heldout_c_min"), 0.0, ">=", seeds=seeds, modes=FULL, paper=GENERALISES),
        Claim("identity-initialised Pan-LUT vs clamp(upsampled MS), max abs error", mech["ident_err"], 1e-5, "<"),
        Claim("lut_transform vs a brute-force multilinear reference, n = 2..5, max abs error", mech["brute_err"], 1e-5, "<="),
        Claim("gradcheck (float64, d = 3) w.r.t. inputs and LUT values, n = 2..5 (1 = pass)", mech["grad_ok"], 1.0, ">="),
        Claim("tiled vs whole-image inference, tiles 5/7/24/50 on 92×76, max abs error", mech["tiled_err"], 1e-5, "<="),
        Claim("consistency projection: tiled vs whole-image inference, tiles 41/60 on 92×76, max abs error",
              mech["tiled_err_c"], 1e-5, "<="),
        Claim(f"largest tensor in predict_tiled, |{s1}² − {s0}² input| in bytes (same tile {cfg.memory_tile})", abs(mech["peak_big"] - mech["peak_small"]), 0.0, "<="),
        Claim("SDLUT mode='chain' / 'mean' vs the rotations applied in order / averaged, max abs error", mech["mode_err"], 1e-6, "<="),
        Claim("regulariser of the identity-initialised LUTs", mech["reg_identity"], 1e-12, "<="),
        Claim(f"same seed ⇒ same metrics (|Δ| of PSNR/SAM/Q over two {rerun.steps}-step runs)", same, 0.0, "<="),
    ]  # fmt: skip
    result.metrics = {
        "lut_parameters": lut["parameters"], "peak_bytes": {str(s0): mech["peak_small"], str(s1): mech["peak_big"]},
        "chain_vs_mean_difference": mech["modes_differ"], "final_lut_loss": out["lut_history"][-1],
        "seeds": seeds,
        "per_seed_psnr": {str(s): {m: r["PSNR"] for m, r in per[s]["rows"].items()} for s in seeds},
        "heldout_psnr": {str(s): {"Pan-LUT": per[s]["heldout_psnr"], "Pan-LUT + consistency": per[s]["heldout_c_psnr"]}
                         for s in seeds},
    }  # fmt: skip
    result.add_series(
        "panlut_train_loss",
        {"x": list(range(len(out["lut_history"]))), "L1": out["lut_history"]},
        title=f"Pan-LUT training loss (Wald protocol patches), seed {seed}",
        xlabel="training step",
        ylabel="L1 loss (mean |error|, intensity 0–1)",
    )
    result.notes += [
        "Reconstruction: the pan-sharpening network is not in the official repository; it is rebuilt "
        "from the released PGLUT/SDLUT/IF4DLUT kernels and the VIF fusion network.",
        f"Seeds {seeds} (the table is seed {seed}); per seed PSNR Pan-LUT / GSA / IHS / PNN-lite: " + "; ".join(
            f"{s}: " + " / ".join(f"{per[s]['rows'][m]['PSNR']:.2f}" for m in
                                  (per[s]["out"]["label_lut"], "GSA", "IHS (fast, hist-matched)", per[s]["out"]["label_pnn"]))
            for s in seeds
        ) + "; the paper trains 1600 epochs.",
        "Full-resolution D_λ, D_s and QNR (Vivone definitions) are printed without a threshold.",
    ]  # fmt: skip
    if not full:
        result.notes.append(
            "Quick mode is a smoke run (40 steps): the quality claims are judged in full mode."
        )
    return result
