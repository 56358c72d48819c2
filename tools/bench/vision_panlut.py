"""Benchmark: Pan-LUT CPU throughput (megapixels/s) against the CNN pan-sharpeners, same process.

Trains Pan-LUT (``--steps``, default 600) and PNN-lite (4× the steps) under the reproduction's
synthetic Wald protocol, reports their test PSNR (coffee, chelsea), then times tiled inference of a
``--size``² input (default 2048) for Pan-LUT's naive (exact ``gather``), optimised (``grid_sample``)
and baked (uint8 nearest PGLUT/AOLUT) paths, PNN-lite and PNN (9-5-5, speed only), at one thread and
at all cores. Prints the optimised-LUT / PNN-lite ratio (spec target ≥ 0.5) and, when the two PSNRs
differ by more than 1 dB, which model is better; then the largest tensor of tiled inference per tile.

    uv run --frozen python tools/bench/vision_panlut.py [--steps 600] [--size 2048] [--tile 512]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from eff_vision.panlut import peak_tensor_bytes
from eff_vision.panlut.baselines import PNN
from eff_vision.reproduce.panlut import PanLUTReproConfig, experiment


def throughput(model, ms: np.ndarray, pan: np.ndarray, tile: int) -> float:
    t0 = time.perf_counter()
    model.predict_tiled(ms, pan, tile=tile)
    return pan.size / 1e6 / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--tile", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = experiment(PanLUTReproConfig(steps=args.steps), seed=0)
    rows = {r["method"]: r for r in out["rows"]}
    lut, pnn = out["lut"], out["pnn"]
    psnr_lut, psnr_pnn = rows[out["label_lut"]]["PSNR"], rows[out["label_pnn"]]["PSNR"]
    rng = np.random.default_rng(0)
    ms = rng.random((args.size // 4, args.size // 4, 3)).astype(np.float32)
    pan = rng.random((args.size, args.size)).astype(np.float32)
    pnn_full = PNN(3, "full")
    models = {}
    for impl in ("gather", "grid"):
        lut.impl = impl
        models[f"Pan-LUT ({'naive' if impl == 'gather' else 'optimised'})"] = (lut, impl, psnr_lut)
    print(f"input {args.size}×{args.size} (tiled, tile {args.tile}); Pan-LUT {args.steps} steps")
    print(f"{'model':28s} {'PSNR':>7s} {'MP/s 1 thr':>11s} {'MP/s all':>9s}")
    results = {}
    for threads in (1, os.cpu_count() or 1):
        torch.set_num_threads(threads)
        for name, (model, impl, _) in models.items():
            model.impl = impl
            results.setdefault(name, []).append(throughput(model, ms, pan, args.tile))
        lut.impl = "grid"
        results.setdefault("Pan-LUT (baked)", []).append(throughput(lut.bake(), ms, pan, args.tile))
        results.setdefault("PNN-lite (8K MAC/px)", []).append(throughput(pnn, ms, pan, args.tile))
        results.setdefault("PNN (74K MAC/px, speed only)", []).append(
            throughput(pnn_full, ms, pan, args.tile)
        )
    psnrs = {
        "Pan-LUT (naive)": psnr_lut,
        "Pan-LUT (optimised)": psnr_lut,
        "PNN-lite (8K MAC/px)": psnr_pnn,
    }
    for name, (one, many) in results.items():
        p = psnrs.get(name)
        print(f"{name:28s} {p if p is None else round(p, 2)!s:>7s} {one:11.3f} {many:9.3f}")
    ratio = results["Pan-LUT (optimised)"][0] / results["PNN-lite (8K MAC/px)"][0]
    print(f"optimised Pan-LUT / PNN-lite throughput (1 thread): {ratio:.2f} (spec target >= 0.5)")
    if abs(psnr_lut - psnr_pnn) > 1:
        better = "PNN-lite" if psnr_pnn > psnr_lut else "Pan-LUT"
        print(f"PSNRs differ by {abs(psnr_lut - psnr_pnn):.2f} dB: {better} is the better model")
    torch.set_num_threads(1)
    lut.impl = "gather"
    small_ms, small_pan = ms[:256, :256], pan[:1024, :1024]
    for tile in (128, 256, 512):
        _, peak = peak_tensor_bytes(lambda t=tile: lut.predict_tiled(small_ms, small_pan, tile=t))
        print(f"largest tensor of tiled inference, tile {tile}: {peak / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
