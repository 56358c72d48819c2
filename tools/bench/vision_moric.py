"""Benchmark: MoRIC decoding cost — MACs/pixel (analytic) against Cool-Chic-lite and CompressAI's
``bmshj2018_factorized`` synthesis (MACs from its published layer sizes; no weights, no compressai
dependency), plus decode wall time per megapixel, range-decoder symbols/s, encode (overfitting) time
and the contour share of the bits, measured in one process.

    uv run --frozen python tools/bench/vision_moric.py [--size 128] [--iters 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from eff_vision.data import sample_image, smooth_label_map
from eff_vision.moric import MoRIC, RegionCodecConfig, decode_macs_per_pixel
from eff_vision.moric.rangecoder import RangeDecoder, RangeEncoder, decode_laplace, encode_laplace


def bmshj2018_factorized_macs(n: int = 128, m: int = 192) -> float:
    """Synthesis g_s of Ballé et al. 2018 (factorized prior): four 5×5 stride-2 transposed convs
    (M→N, N→N, N→N, N→3) with inverse GDN (N² per position) after the first three; MACs counted
    per input position of each layer, normalised per output pixel."""
    layers = [(m, n, 1 / 256), (n, n, 1 / 64), (n, n, 1 / 16), (n, 3, 1 / 4)]
    deconv = sum(cin * cout * 25 * frac for cin, cout, frac in layers)
    igdn = n * n * (1 / 64 + 1 / 16 + 1 / 4)
    return deconv + igdn


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    moric_cfg = RegionCodecConfig(levels=5, iters=args.iters)
    lite_cfg = RegionCodecConfig(levels=5, iters=args.iters, modulator=False)
    print("decoding MACs per pixel (analytic)")
    for name, macs in (
        (
            "MoRIC (default config, 3 regions)",
            decode_macs_per_pixel(RegionCodecConfig(), 3)["total"],
        ),
        ("MoRIC (bench config, 3 regions)", decode_macs_per_pixel(moric_cfg, 3)["total"]),
        ("Cool-Chic-lite (1 region, no modulator)", decode_macs_per_pixel(lite_cfg, 1)["total"]),
        ("bmshj2018-factorized synthesis (N=128, M=192)", bmshj2018_factorized_macs()),
    ):
        print(f"  {name:48s} {macs:10.0f}")
    img = sample_image("astronaut", max_side=args.size)
    labels = smooth_label_map(img.shape[:2], 3, seed=0)
    for name, cfg, lab in (
        ("MoRIC, 3 regions", moric_cfg, labels),
        ("Cool-Chic-lite", lite_cfg, np.zeros_like(labels)),
    ):
        codec = MoRIC(cfg)
        bs = codec.encode(img, lab)
        data = bs.to_bytes()
        t0 = time.perf_counter()
        MoRIC.decode(data)
        dec_s = time.perf_counter() - t0
        parts = bs.bits_by_part()
        mp = img.shape[0] * img.shape[1] / 1e6
        print(f"{name}: {len(data)} bytes, {bs.bpp():.3f} bpp; encode {codec.last_encode_s:.1f} s "
              f"({args.iters} iters); decode {dec_s:.2f} s = {dec_s / mp:.1f} s/MP; "
              f"contours {parts['contours'] / sum(parts.values()):.1%} of the bits")  # fmt: skip
    rng = np.random.default_rng(0)
    vals = np.round(rng.laplace(0, 2, 50_000)).astype(int)
    enc = RangeEncoder()
    t0 = time.perf_counter()
    for v in vals.tolist():
        encode_laplace(enc, v, 0, 30, 0)
    data = enc.finish()
    enc_s = time.perf_counter() - t0
    dec = RangeDecoder(data)
    t0 = time.perf_counter()
    for _ in range(vals.size):
        decode_laplace(dec, 0, 30, 0)
    dec_s = time.perf_counter() - t0
    print(
        f"range coder (Python): encode {vals.size / enc_s / 1e3:.0f} k symbols/s, decode {vals.size / dec_s / 1e3:.0f} k symbols/s"
    )


if __name__ == "__main__":
    main()
