#!/usr/bin/env python
"""Benchmark: Pan-LUT inference throughput (megapixels/s) on one CPU thread against PNN-lite.

Issue #25's targets, measured in one process: the float LUT path (``impl="fused"``, compiled
kernels) ≥ 1× PNN-lite's throughput *at identical PSNR* (it computes the trained float model's
function: max |fused − gather| and ΔPSNR on the test images are printed and checked), and the baked
path (uint8 nearest PGLUT/AOLUT, ``bake(impl="fused")``) ≥ 5× PNN-lite within 0.3 dB of the
float model. Before the fused kernels: optimised (grid) Pan-LUT 0.30× PNN-lite, baked 0.25×.

Trains Pan-LUT and PNN-lite as the reproduction does (``experiment``, seed 0, ``--steps`` LUT
steps, PNN-lite 4×), scores every path on the reproduction's test images (coffee, chelsea), then
times tiled inference (``--tile``) of a ``--size``² scene — the test image ``coffee``
mirror-tiled and Wald-degraded (natural image statistics) — and of the same size of uniform noise
(the worst case for a LUT's caches): interleaved rounds, medians of CPU time, one thread
(``_bench``). The torch paths (``gather``, ``grid``, baked torch) and PNN (9-5-5) are timed once
on a 512² crop of the scene, as information; a per-stage profile of one tile shows where the time
goes. Exit status 1 when a target fails.

    uv run --frozen python tools/bench/vision_panlut.py [--steps 300] [--size 1024] [--tile 512]
        [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
from _bench import Bench, add_json_arg, cpu_per_call, median_cpu

from eff_vision.data.images import sample_image
from eff_vision.data.pansharpen import wald_degrade
from eff_vision.metrics import pansharpen as M
from eff_vision.panlut import bicubic_upsample, peak_tensor_bytes
from eff_vision.panlut.baselines import PNN
from eff_vision.reproduce.panlut import PanLUTReproConfig, experiment, torch_predict

GATHER, FUSED = "Pan-LUT gather (reference)", "Pan-LUT fused"
BAKED_TORCH, BAKED = "Pan-LUT baked, torch", "Pan-LUT baked, fused"
PNN_LITE = "PNN-lite"


def scenes(size: int, ratio: int = 4) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(ms_lr, pan) of a size² natural scene and of uniform noise."""
    img = sample_image("coffee")
    pad = [(0, max(0, size - img.shape[0])), (0, max(0, size - img.shape[1])), (0, 0)]
    hr = np.pad(img, pad, mode="symmetric")[:size, :size]
    rng = np.random.default_rng(0)
    noise = (
        rng.random((size // ratio, size // ratio, 3)).astype(np.float32),
        rng.random((size, size)).astype(np.float32),
    )
    return {"scene": wald_degrade(hr, ratio, seed=0), "noise": noise}


def scored(model, tests) -> tuple[float, list[np.ndarray]]:
    """(mean PSNR over the test images, the sharpened images)."""
    images = [torch_predict(model, t["ms"], t["pan"]) for t in tests]
    return float(
        np.mean([M.psnr(t["gt"], im) for t, im in zip(tests, images, strict=True)])
    ), images


@torch.no_grad()
def stage_profile(lut, baked, ms: np.ndarray, pan: np.ndarray) -> dict[str, float]:
    """ns per HR pixel of each stage of the fused and baked paths on one tile."""
    t_ms, t_pan = torch.from_numpy(ms).permute(2, 0, 1)[None], torch.from_numpy(pan)[None, None]
    up = bicubic_upsample(t_ms, lut.ratio)
    x = torch.cat([up, t_pan], dim=1)
    pg = torch.clamp(lut.pg(x), 0, 1)
    sd = lut.sd(pg)
    steps = {
        "bicubic upsampling": lambda: bicubic_upsample(t_ms, lut.ratio),
        "PGLUT (multilinear)": lambda: lut.pg(x),
        "SDLUT chain (16 lookups)": lambda: lut.sd(pg),
        "AOLUT (multilinear)": lambda: lut.ao(sd),
        "PGLUT (baked, nearest)": lambda: baked._nearest_fused(x, baked.pg_q),
        "AOLUT (baked, nearest)": lambda: baked._nearest_fused(sd, baked.ao_q),
        "whole fused tile (fuse)": lambda: lut.fuse(up, t_pan),
        "whole baked tile (fuse)": lambda: baked.fuse(up, t_pan),
    }
    return {k: 1e9 * cpu_per_call(fn, 3) / pan.size for k, fn in steps.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="Pan-LUT training steps")
    parser.add_argument("--size", type=int, default=1024, help="side of the timed input (HR px)")
    parser.add_argument("--tile", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    add_json_arg(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench = Bench("vision_panlut")
    out = experiment(PanLUTReproConfig(steps=args.steps), seed=0)
    lut, pnn, tests = out["lut"], out["pnn"], out["tests"]
    baked = lut.bake(impl="fused")

    # ---- quality on the reproduction's test images (the torch paths' SDLUTs on "gather")
    lut.impl = "gather"
    psnr = {GATHER: scored(lut, tests), BAKED_TORCH: scored(lut.bake(), tests)}
    lut.impl = "fused"
    psnr.update(
        {FUSED: scored(lut, tests), BAKED: scored(baked, tests), PNN_LITE: scored(pnn, tests)}
    )
    err = {
        fast: max(float(np.abs(a - b).max()) for a, b in zip(psnr[fast][1], psnr[ref][1], strict=True))
        for fast, ref in ((FUSED, GATHER), (BAKED, BAKED_TORCH))
    }  # fmt: skip
    d_fused, d_baked = (psnr[k][0] - psnr[GATHER][0] for k in (FUSED, BAKED))

    # ---- throughput: interleaved rounds of the fast paths and PNN-lite on both inputs
    data = scenes(args.size)
    tiled = lambda model, ms, pan: (lambda: model.predict_tiled(ms, pan, tile=args.tile), 1)  # noqa: E731
    jobs = {
        (label, name): tiled(model, *data[name])
        for name in data
        for label, model in ((FUSED, lut), (BAKED, baked), (PNN_LITE, pnn))
    }  # fmt: skip
    mps = {k: args.size**2 / 1e6 / s for k, s in median_cpu(jobs, args.rounds).items()}
    # ---- the torch paths and PNN (9-5-5), once each on a 512² crop of the scene
    crop = data["scene"][0][:128, :128], data["scene"][1][:512, :512]
    lut.impl = "gather"
    slow = {GATHER: lut, BAKED_TORCH: lut.bake(), "PNN (74K MAC/px, speed only)": PNN(3, "full")}
    for label, model in slow.items():
        mps[(label, "scene")] = crop[1].size / 1e6 / cpu_per_call(tiled(model, *crop)[0], 1)
    lut.impl = "grid"
    mps[("Pan-LUT grid (old torch optimised)", "scene")] = (
        crop[1].size / 1e6 / cpu_per_call(tiled(lut, *crop)[0], 1)
    )
    lut.impl = "fused"

    print(f"Pan-LUT {args.steps} steps, PNN-lite {4 * args.steps}; tiled {args.size}² input, "
          f"tile {args.tile}, 1 thread (torch paths and PNN: a 512² crop)")  # fmt: skip
    print(f"{'path':36s} {'PSNR':>7s} {'MP/s scene':>11s} {'MP/s noise':>11s}")
    for label in dict.fromkeys([*psnr, *(k for k, _ in mps)]):
        p = f"{psnr[label][0]:7.2f}" if label in psnr else ""
        cells = " ".join(
            f"{mps[(label, n)]:11.3f}" if (label, n) in mps else " " * 11 for n in data
        )
        print(f"{label:36s} {p:>7s} {cells}")
    for fast, e in err.items():
        print(f"max |{fast} − its torch path| over the test images: {e:.3g}")
    gap = psnr[PNN_LITE][0] - psnr[GATHER][0]
    if abs(gap) > 1:
        print(
            f"PSNRs differ by {abs(gap):.2f} dB: {'PNN-lite' if gap > 0 else 'Pan-LUT'} is the better model"
        )
    profile = stage_profile(lut, baked, data["scene"][0][:128, :128], data["scene"][1][:512, :512])
    print("where the time goes (one 512² tile, ns per HR pixel): "
          + ", ".join(f"{k} {v:.0f}" for k, v in profile.items()))  # fmt: skip

    ratio = {(k, n): mps[(k, n)] / mps[(PNN_LITE, n)] for k in (FUSED, BAKED) for n in data}
    bench.info.update({
        "steps": args.steps, "size": args.size, "tile": args.tile,
        "mp_per_s": {f"{k} [{n}]": v for (k, n), v in mps.items()},
        "psnr_db": {k: v[0] for k, v in psnr.items()}, "max_abs_vs_torch": err,
        "ratios": {f"{k} / PNN-lite [{n}]": v for (k, n), v in ratio.items()},
        "stage_ns_per_px": profile,
    })  # fmt: skip
    for n in data:
        bench.check(f"Pan-LUT fused / PNN-lite throughput, {n}", ratio[(FUSED, n)], ">=", 1.0)
    bench.check("|PSNR(fused) − PSNR(gather)|, test images", abs(d_fused), "<=", 1e-6, " dB")
    for n in data:
        bench.check(f"Pan-LUT baked / PNN-lite throughput, {n}", ratio[(BAKED, n)], ">=", 5.0)
    bench.check("|PSNR(baked) − PSNR(float)|, test images", abs(d_baked), "<=", 0.3, " dB")

    # ---- memory: the largest torch tensor of tiled inference per tile (torch grid path)
    lut.impl = "grid"
    for tile in (128, 256, 512):
        _, peak = peak_tensor_bytes(lambda t=tile: lut.predict_tiled(*crop, tile=t))
        print(f"largest tensor of tiled inference (grid path), tile {tile}: {peak / 1e6:.1f} MB")
        bench.info[f"peak_tensor_mb_tile_{tile}"] = peak / 1e6
    return bench.finish(args.json)


if __name__ == "__main__":
    sys.exit(main())
