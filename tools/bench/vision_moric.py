#!/usr/bin/env python
"""Benchmark: MoRIC decoding speed, its range coder, and its rate–distortion beside Cool-Chic-lite,
JPEG and WebP.

MoRIC sells a light decoder (≈1.3K MACs/pixel, Cool-Chic-like). Issue #25 measured 19.2 s per
megapixel to decode (Cool-Chic-lite in the same code 13.1 s/MP) with a Python range coder at 0.57 M
symbols/s. Targets, one thread:

- decode ≤ 1 s per megapixel (MoRIC, 3 regions, the default decoder) — and the decoded image
  identical bit for bit to the pure-Python reference decoder's (``MoRIC.decode(reference=True)``)
  and to the synthesis of every region over its whole box (``_synthesize(..., masked=False)``);
- range coder ≥ 10 M Laplace symbols/s to decode (``decode_laplace_zero_center``, the latent
  decoder's kernel), its output equal to the reference ``decode_laplace`` loop.

Information: MACs/pixel (analytic) against Cool-Chic-lite and the ``bmshj2018_factorized``
synthesis (MACs from its published layer sizes), encode (overfitting) time, and rate–distortion of
the whole image — MoRIC and Cool-Chic-lite at their own bpp, JPEG and WebP (OpenCV) at the same bpp
(``matched_psnr``: PSNR interpolated on each codec's quality sweep).

One process, interleaved rounds, medians of CPU time (``_bench``). Exit status 1 when a target fails.

    uv run --frozen python tools/bench/vision_moric.py [--size 512] [--rd-size 128] [--iters 300]
        [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from _bench import Bench, add_json_arg, median_cpu

from eff_vision.data import sample_image, smooth_label_map
from eff_vision.metrics.image import psnr
from eff_vision.moric import Bitstream, MoRIC, RegionCodecConfig, decode_macs_per_pixel
from eff_vision.moric._fast import decode_laplace_zero_center, encode_laplace_array
from eff_vision.moric.baselines import codec_curve, matched_psnr
from eff_vision.moric.codec import _parse_image_stream, _synthesize
from eff_vision.moric.rangecoder import RangeDecoder, RangeEncoder, decode_laplace

SYMBOLS = 1_000_000
SCALE = 30  # Laplace scale index of the coder benchmark (b ≈ 2, as latents near zero)


def bmshj2018_factorized_macs(n: int = 128, m: int = 192) -> float:
    """Synthesis g_s of Ballé et al. 2018 (factorized prior): four 5×5 stride-2 transposed convs
    (M→N, N→N, N→N, N→3) with inverse GDN (N² per position) after the first three; MACs counted
    per input position of each layer, normalised per output pixel."""
    layers = [(m, n, 1 / 256), (n, n, 1 / 64), (n, n, 1 / 16), (n, 3, 1 / 4)]
    deconv = sum(cin * cout * 25 * frac for cin, cout, frac in layers)
    igdn = n * n * (1 / 64 + 1 / 16 + 1 / 4)
    return deconv + igdn


def _encode(img: np.ndarray, lite: bool, iters: int) -> tuple[MoRIC, bytes, RegionCodecConfig, int]:
    labels = smooth_label_map(img.shape[:2], 3, seed=0)
    cfg = RegionCodecConfig(iters=iters, modulator=not lite)
    lab = np.zeros_like(labels) if lite else labels
    codec = MoRIC(cfg)
    return codec, codec.encode(img, lab).to_bytes(), cfg, len(np.unique(lab))


CODECS = (("MoRIC, 3 regions", False), ("Cool-Chic-lite", True))


def decode_rows(img: np.ndarray, iters: int, rounds: int, bench: Bench) -> None:
    """Decode time per megapixel of both codecs (the fast and the reference decoder). The decoder's
    work does not depend on how well the encoder overfitted: a few iterations suffice here."""
    mp = img.shape[0] * img.shape[1] / 1e6
    rows = {}
    for name, lite in CODECS:
        _, data, cfg, regions = _encode(img, lite, iters)
        fast = MoRIC.decode(data)
        t0 = time.process_time()
        ref = MoRIC.decode(data, reference=True)
        ref_s = time.process_time() - t0
        # and the synthesis of every region over its whole box (the masked one's reference)
        whole = _synthesize(_parse_image_stream(Bitstream.from_bytes(data)), masked=False)
        med = median_cpu({"decode": (lambda d=data: MoRIC.decode(d), 1)}, rounds)
        rows[name] = {
            "decode_s_per_mp": med["decode"] / mp, "reference_decode_s_per_mp": ref_s / mp,
            "identical_to_reference": bool(np.array_equal(fast, ref)),
            "identical_to_whole_box_synthesis": bool(np.array_equal(fast, whole)),
            "decode_macs_per_px": decode_macs_per_pixel(cfg, regions)["total"],
        }  # fmt: skip
    print(f"decode, {img.shape[1]}×{img.shape[0]} astronaut ({iters} overfitting iterations):")
    for name, r in rows.items():
        print(f"  {name:18s} {r['decode_macs_per_px']:6.0f} MAC/px; {r['decode_s_per_mp']:.3f} s/MP "
              f"(pure-Python reference {r['reference_decode_s_per_mp']:.1f} s/MP, "
              f"{'bit-exact' if r['identical_to_reference'] else 'DIFFERENT'})")  # fmt: skip
    bench.info["decode"] = rows
    bench.check("MoRIC decode, CPU s per megapixel (3 regions, one thread)",
                rows[CODECS[0][0]]["decode_s_per_mp"], "<=", 1.0, unit=" s/MP")  # fmt: skip
    bench.check("MoRIC and Cool-Chic-lite decode == the pure-Python reference and the whole-box "
                "synthesis (1 = bit-exact)",
                float(all(r["identical_to_reference"] and r["identical_to_whole_box_synthesis"]
                          for r in rows.values())), ">=", 1, unit="")  # fmt: skip


def rd_rows(img: np.ndarray, iters: int, bench: Bench) -> None:
    """Rate–distortion of the whole image: each codec at its own bpp, JPEG / WebP at that bpp."""
    whole = np.ones(img.shape[:2], bool)
    curves = {c: codec_curve(img, whole, c) for c in ("jpeg", "webp")}
    rows = {}
    for name, lite in CODECS:
        codec, data, _, _ = _encode(img, lite, iters)
        bpp = 8 * len(data) / (img.shape[0] * img.shape[1])
        rows[name] = {"bytes": len(data), "bpp": bpp, "psnr": psnr(img, MoRIC.decode(data)),
                      "jpeg_psnr_at_bpp": matched_psnr(curves["jpeg"], bpp),
                      "webp_psnr_at_bpp": matched_psnr(curves["webp"], bpp),
                      "encode_s": codec.last_encode_s}  # fmt: skip
    print(
        f"rate–distortion, {img.shape[1]}×{img.shape[0]} astronaut, {iters} iterations "
        "(PSNR in dB; JPEG and WebP interpolated at the same bpp, * = outside their sweep):"
    )
    for name, r in rows.items():
        (jp, jin), (wp, win) = r["jpeg_psnr_at_bpp"], r["webp_psnr_at_bpp"]
        print(f"  {name:18s} {r['bpp']:.3f} bpp: {r['psnr']:.2f}; JPEG {jp:.2f}{'' if jin else '*'}, "
              f"WebP {wp:.2f}{'' if win else '*'}; encode {r['encode_s']:.0f} s")  # fmt: skip
    bench.info["rate_distortion"] = rows


def coder_rows(rounds: int, bench: Bench) -> None:
    """Laplace symbols through the compiled encoder and decoder; the reference on a slice."""
    rng = np.random.default_rng(0)
    vals = np.round(rng.laplace(0, 2, SYMBOLS)).astype(np.int64)
    enc = RangeEncoder()
    encode_laplace_array(enc, vals, 0, SCALE, 0)
    data = enc.finish()

    def encode() -> None:
        e = RangeEncoder()
        encode_laplace_array(e, vals, 0, SCALE, 0)
        e.finish()

    def decode() -> np.ndarray:
        return decode_laplace_zero_center(RangeDecoder(data), SCALE, SYMBOLS)

    med = median_cpu({"encode": (encode, 1), "decode": (decode, 1)}, rounds)
    n_ref = 50_000
    dec = RangeDecoder(data)
    t0 = time.process_time()
    ref = [decode_laplace(dec, 0, SCALE, 0) for _ in range(n_ref)]
    ref_rate = n_ref / (time.process_time() - t0)
    same = bool(np.array_equal(decode()[:n_ref], np.array(ref)))
    rates = {"encode": SYMBOLS / med["encode"], "decode": SYMBOLS / med["decode"]}
    print(f"range coder, {SYMBOLS:,} Laplace symbols ({len(data):,} bytes): encode "
          f"{rates['encode'] / 1e6:.1f} M/s, decode {rates['decode'] / 1e6:.1f} M/s; "
          f"pure-Python decode {ref_rate / 1e6:.2f} M/s")  # fmt: skip
    bench.info["range_coder"] = {**{f"{k}_symbols_per_s": v for k, v in rates.items()},
                                 "reference_decode_symbols_per_s": ref_rate, "bytes": len(data)}  # fmt: skip
    bench.check("range decoder, M Laplace symbols per CPU second", rates["decode"] / 1e6, ">=", 10,
                unit=" M/s")  # fmt: skip
    bench.check("compiled decoder == reference decode_laplace loop (1 = identical symbols)",
                float(same), ">=", 1, unit="")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512, help="decode timing: image side")
    parser.add_argument("--rd-size", type=int, default=128, help="rate–distortion: image side")
    parser.add_argument(
        "--iters", type=int, default=300, help="rate–distortion: overfitting iterations"
    )
    parser.add_argument("--rounds", type=int, default=5)
    add_json_arg(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench = Bench("vision_moric")
    lite = RegionCodecConfig(modulator=False)
    macs = {
        "MoRIC (default config, 3 regions)": decode_macs_per_pixel(RegionCodecConfig(), 3)["total"],
        "Cool-Chic-lite (1 region, no modulator)": decode_macs_per_pixel(lite, 1)["total"],
        "bmshj2018-factorized synthesis (N=128, M=192)": bmshj2018_factorized_macs(),
    }
    print("decoding MACs per pixel (analytic): "
          + "; ".join(f"{k} {v:,.0f}" for k, v in macs.items()))  # fmt: skip
    bench.info["macs_per_px"] = macs
    decode_rows(sample_image("astronaut", max_side=args.size), 10, args.rounds, bench)
    rd_rows(sample_image("astronaut", max_side=args.rd_size), args.iters, bench)
    coder_rows(args.rounds, bench)
    return bench.finish(args.json)


if __name__ == "__main__":
    sys.exit(main())
