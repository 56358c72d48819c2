"""Reproduction ``vision.moric``: the contour coder and the region codec (our design), from the actual
bytes of their streams, against OpenCV's 1-bit PNG (masks) and JPEG / WebP (single object).

(1) Contour coder on deterministic masks from bundled images (coffee Otsu cup, astronaut suit at
512², a disk with a hole), 200 seeded random masks (blobs, 1-px lines, diagonal-only pixels, nested
islands, border-touching, single pixels, full, noise) and a 3-region smooth label map.
(2) Codec mechanics on a small 3-region image (48×48, 4 latent levels): decode = encoder
reconstruction, bits per part, λ monotonicity (three λ a factor 4 apart), every truncation point and
flipped bytes in every section raise ``MoRICDecodeError``.
(3) Single-object codec: astronaut resized to 256×256 (``INTER_AREA``), suit region, λ = 0.02; JPEG
and WebP on the bounding-box crop with out-of-mask pixels set to the region mean, PSNR on region
pixels, bits of the whole file (headers included); MoRIC's bits from its whole stream, contour
included. Full mode trains 1200 iterations (the spec's setting) at seeds seed..seed+4 (paper
claims: MoRIC vs JPEG, a sanity bound, and vs WebP, the paper's headline, xfail); quick mode 150
iterations at one seed (a smoke run). The contour coder and the codec mechanics are checks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from eff_shared.errors import check_choice
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_vision.data.images import sample_image
from eff_vision.data.masks import (
    RANDOM_MASK_KINDS,
    astronaut_suit_mask,
    coffee_mask,
    disk_with_hole,
    random_mask,
    smooth_label_map,
)
from eff_vision.metrics.image import psnr
from eff_vision.moric.baselines import codec_curve, matched_psnr, png_bilevel_bits
from eff_vision.moric.bitstream import Bitstream, MoRICDecodeError
from eff_vision.moric.chain import ChainCoder, boundary_pixels, iou
from eff_vision.moric.codec import MoRIC, RegionCodecConfig, decode_macs_per_pixel

__all__ = [
    "MoRICReproConfig",
    "contour_experiment",
    "mechanics_experiment",
    "run",
    "single_object_experiment",
    "suit_image",
]


@dataclass(frozen=True)
class MoRICReproConfig:
    random_masks: int = 200
    lossy_eps: float = 1.5
    min_iou: float = 0.98
    lam: float = 0.02
    single_iters: int = 400
    mech_iters: int = 120
    mech_lams: tuple[float, float, float] = (0.005, 0.02, 0.08)
    lite: bool = False


def suit_image() -> tuple[np.ndarray, np.ndarray]:
    """Astronaut at 256² (INTER_AREA, uint8) and the suit mask computed at that size."""
    import cv2

    img = cv2.resize(
        (sample_image("astronaut") * 255).round().astype(np.uint8),
        (256, 256),
        interpolation=cv2.INTER_AREA,
    )
    return img, astronaut_suit_mask(256)


def contour_experiment(cfg: MoRICReproConfig, seed: int) -> dict[str, Any]:
    cc = ChainCoder()
    rows, stats = [], {}
    for name, mask in (("coffee (Otsu) 400×600", coffee_mask()), ("astronaut suit 512²", astronaut_suit_mask()),
                       ("disk with hole 256²", disk_with_hole())):  # fmt: skip
        lossless = cc.encode(mask)
        exact = bool(np.array_equal(cc.decode(lossless), mask))
        lossy = cc.encode_lossy(mask, cfg.lossy_eps)
        adaptive = cc.encode_adaptive(mask, cfg.min_iou)
        bp = boundary_pixels(mask)
        png = png_bilevel_bits(mask)
        stats[name] = {
            "exact": exact, "bits": 8 * len(lossless), "boundary": bp, "png": png,
            "lossy_bits": 8 * len(lossy), "lossy_iou": iou(cc.decode(lossy), mask),
            "adaptive_bits": 8 * len(adaptive), "adaptive_iou": iou(cc.decode(adaptive), mask),
        }  # fmt: skip
        s = stats[name]
        rows.append({
            "part": "contours", "what": name, "exact": exact, "bits": s["bits"],
            "bits / boundary px": s["bits"] / bp, "reference bits": png, "reference": "1-bit PNG",
            "lossy bits": s["lossy_bits"], "lossy IoU": s["lossy_iou"], "adaptive bits": s["adaptive_bits"],
        })  # fmt: skip
    failures = 0
    for k in range(cfg.random_masks):
        kind = RANDOM_MASK_KINDS[k % len(RANDOM_MASK_KINDS)]
        mask = random_mask(seed * 10_000 + k, kind, (16 + (k * 7) % 29, 16 + (k * 11) % 31))
        failures += not np.array_equal(cc.decode(cc.encode(mask)), mask)
    labels = smooth_label_map((96, 96), 3, seed)
    part = cc.encode_partition(labels)
    part_exact = bool(np.array_equal(cc.decode_partition(part), labels))
    masks_bits = sum(8 * len(cc.encode(labels == r)) for r in range(3))
    rows.append({
        "part": "contours", "what": "3-region label map 96² (partition coder)", "exact": part_exact,
        "bits": 8 * len(part), "reference bits": masks_bits, "reference": "3 masks coded independently",
    })  # fmt: skip
    return {"rows": rows, "stats": stats, "random_failures": failures, "partition_exact": part_exact,
            "partition_bits": 8 * len(part), "masks_bits": masks_bits}  # fmt: skip


def mechanics_experiment(cfg: MoRICReproConfig, seed: int) -> dict[str, Any]:
    img = sample_image("astronaut", max_side=64)[8:56, 8:56]
    labels = smooth_label_map((48, 48), 3, seed)
    streams = []
    for lam in cfg.mech_lams:
        codec = MoRIC(RegionCodecConfig(levels=4, iters=cfg.mech_iters, lam=lam, seed=seed))
        streams.append(codec.encode(img, labels))
    bs = streams[1]
    data = bs.to_bytes()
    decoded = MoRIC.decode(data)
    exact_diff = int(np.abs(decoded.astype(int) - bs.reconstruction.astype(int)).max())
    parts = bs.bits_by_part()
    lengths = [len(s.to_bytes()) for s in streams]
    not_raised = 0
    for cut in range(len(data)):
        try:
            MoRIC.decode(data[:cut])
            not_raised += 1
        except MoRICDecodeError:
            pass
    flips, flip_fail = 0, 0
    offsets = _section_offsets(data)
    for start, end in offsets.values():
        for p in sorted({start, start + 1, (start + end) // 2, end - 1}):
            bad = bytearray(data)
            bad[p] ^= 0x5A
            flips += 1
            try:
                MoRIC.decode(bytes(bad))
                flip_fail += 1
            except MoRICDecodeError as exc:
                if not str(exc):
                    flip_fail += 1
    try:
        MoRIC.decode(data + b"\x00")
        trailing_ok = False
    except MoRICDecodeError:
        trailing_ok = True
    return {
        "exact_diff": exact_diff, "parts": parts, "bits": 8 * len(data), "lengths": lengths,
        "truncations_not_raised": not_raised, "flips": flips, "flips_not_raised": flip_fail,
        "trailing_raises": trailing_ok, "psnr": psnr(img, decoded), "bpp": bs.bpp(),
        "sections": list(offsets),
    }  # fmt: skip


def _section_offsets(data: bytes) -> dict[str, tuple[int, int]]:
    """Byte ranges of the header and of every section of a valid stream."""
    bs = Bitstream.from_bytes(data)
    head = len(bs._header())
    out = {"header": (0, head)}
    pos = head
    for s in bs.sections:
        n = len(s.to_bytes())
        out[s.name] = (pos, pos + n)
        pos += n
    return out


def single_object_experiment(
    cfg: MoRICReproConfig, seed: int, modulator: bool = True
) -> dict[str, Any]:
    img, mask = suit_image()
    codec = MoRIC(
        RegionCodecConfig(iters=cfg.single_iters, lam=cfg.lam, seed=seed, modulator=modulator)
    )
    t0 = time.perf_counter()
    bs = codec.encode(img, mask.astype(np.int32), only=1)
    enc_s = time.perf_counter() - t0
    data = bs.to_bytes()
    t0 = time.perf_counter()
    decoded = MoRIC.decode(data)
    dec_s = time.perf_counter() - t0
    bpp = bs.bpp("region")
    curves = {c: codec_curve(img, mask, c) for c in ("jpeg", "webp")}
    return {
        "bpp_region": bpp, "bpp_image": bs.bpp("image"), "psnr": psnr(img, decoded, mask),
        "parts": bs.bits_by_part(), "region_px": int(mask.sum()), "curves": curves,
        "jpeg": matched_psnr(curves["jpeg"], bpp), "webp": matched_psnr(curves["webp"], bpp),
        "encode_s": enc_s, "decode_s": dec_s, "exact": bool(np.array_equal(decoded, bs.reconstruction)),
        "history": codec.last_history,
    }  # fmt: skip


PAPER = ("state of the art in single-object compression (DAVIS) for bpp > 0.5 against learned codecs "
         "including ROI-based ones, and beats overfitted codecs (C3, Cool-Chic) on Kodak (no numbers "
         "retrieved)")  # fmt: skip
FULL: tuple[Mode, ...] = ("full",)


def run(mode: Mode = "quick", seed: int = 0, cfg: MoRICReproConfig | None = None) -> Result:
    """The contour coder and codec mechanics are checks (master seed); the single-object
    comparisons are paper claims over seeds seed..seed+4 (full mode, 1200 iterations). Quick mode
    runs 150 iterations at one seed: a smoke run whose paper claims are judged in full mode.
    ``cfg`` (default: the mode's) replaces the configuration; ``mode`` still picks the seeds."""
    check_choice("mode", mode, ["quick", "full"])
    full = mode == "full"
    if cfg is None:
        cfg = MoRICReproConfig(single_iters=1200 if full else 150, lite=full)
    con = contour_experiment(cfg, seed)
    mech = mechanics_experiment(cfg, seed)
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    objs = {s: single_object_experiment(cfg, s) for s in seeds}
    obj = objs[seed]
    result = Result(
        name="vision.moric", mode=mode, seed=seed,
        paper_title="MoRIC: A Modular Region-based Implicit Codec for Image Compression",
        headline="a region-based overfitted implicit codec (per-region latents, shared modulator, "
        "contour coding) is state of the art for single-object compression (DAVIS, bpp > 0.5) and beats "
        "overfitted codecs (C3, Cool-Chic) on Kodak (no numbers retrieved)",
    )  # fmt: skip
    st = con["stats"]
    names = list(st)
    smooth = [n for n in names if not n.startswith("coffee")]
    parts = obj["parts"]
    by_part = ", ".join(f"{k} {v}" for k, v in parts.items())
    rd = [{
        "part": "single object", "what": f"MoRIC (λ={cfg.lam}, {cfg.single_iters} iters; contour included)",
        "bits": sum(parts.values()), "bpp (region)": obj["bpp_region"], "PSNR region": obj["psnr"],
        "reference": f"bits per part: {by_part}",
    }]  # fmt: skip
    for c in ("jpeg", "webp"):
        p, inside = obj[c]
        rd.append({"part": "single object", "what": f"{c.upper()} at MoRIC's bpp" + ("" if inside else " (curve end: below its lowest rate)"),
                   "bpp (region)": obj["bpp_region"], "PSNR region": p})  # fmt: skip
        for rate, ps, q in obj["curves"][c]:
            if q in (5, 10, 20, 30, 50, 75, 95):
                rd.append(
                    {
                        "part": "single object",
                        "what": f"{c.upper()} q={q} (file incl. headers)",
                        "bpp (region)": rate,
                        "PSNR region": ps,
                    }
                )
    if cfg.lite:
        lite = single_object_experiment(cfg, seed, modulator=False)
        rd.append({"part": "single object", "what": "Cool-Chic-lite (no modulator)", "bpp (region)": lite["bpp_region"],
                   "PSNR region": lite["psnr"]})  # fmt: skip
    result.table = con["rows"] + rd
    jpeg_p, jpeg_inside = obj["jpeg"]
    # lengths are ordered by increasing λ: a larger λ must never give more bytes
    lam_increase = max(b - a for a, b in zip(mech["lengths"], mech["lengths"][1:], strict=False))
    result.claims += [
        Claim("lossless chain code: masks not decoded bit-identically (3 masks + 200 random)", sum(not st[n]["exact"] for n in names) + con["random_failures"], 0, "<="),
        Claim("bits per boundary pixel from the actual bytes, max over the 3 masks", max(st[n]["bits"] / st[n]["boundary"] for n in names), 3.0, "<="),
        Claim("1-bit PNG bits / chain-code bits, min over the 3 masks", min(st[n]["png"] / st[n]["bits"] for n in names), 2.0, ">="),
        Claim(f"lossy ε={cfg.lossy_eps}: IoU, min over astronaut and disk", min(st[n]["lossy_iou"] for n in smooth), 0.98, ">="),
        Claim(f"lossy ε={cfg.lossy_eps}: byte saving vs lossless, min over astronaut and disk", min(1 - st[n]["lossy_bits"] / st[n]["bits"] for n in smooth), 0.20, ">="),
        Claim("adaptive mode: IoU, min over the 3 masks", min(st[n]["adaptive_iou"] for n in names), cfg.min_iou, ">="),
        Claim("adaptive mode: bits − lossless bits (the mode flag lives in the header), max", max(st[n]["adaptive_bits"] - st[n]["bits"] for n in names), 0, "<="),
        Claim("3-region partition: decoded bit-identically (1 = yes)", float(con["partition_exact"]), 1.0, ">="),
        Claim("partition bits / bits of the 3 region masks coded independently", con["partition_bits"] / con["masks_bits"], 1.0, "<"),
        Claim("MoRIC.decode(bytes) vs the encoder's reconstruction, max abs difference (uint8)", mech["exact_diff"], 0, "<="),
        Claim("bits_by_part() sum − 8·len(bytes)", abs(sum(mech["parts"].values()) - mech["bits"]), 0, "<="),
        Claim(f"bytes increase when λ grows ×4 (λ = {', '.join(map(str, cfg.mech_lams))}), max", lam_increase, 0, "<="),
        Claim("truncation points that did not raise MoRICDecodeError", mech["truncations_not_raised"], 0, "<="),
        Claim(f"flipped bytes (4 per section, {len(mech['sections'])} parts) that did not raise MoRICDecodeError", mech["flips_not_raised"] + (not mech["trailing_raises"]), 0, "<="),
    ]  # fmt: skip
    vs_jpeg = [objs[s]["psnr"] - objs[s]["jpeg"][0] for s in seeds]
    vs_webp = [objs[s]["psnr"] - objs[s]["webp"][0] for s in seeds]
    result.claims += [
        paper_claim("single object: PSNR(MoRIC) − PSNR_JPEG(at MoRIC's bpp), dB (sanity bound)", vs_jpeg, -3.0, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER),
        paper_claim("single object: PSNR(MoRIC) − PSNR_WebP(at MoRIC's bpp), dB (MoRIC at least as good)", vs_webp,
                    0.0, ">=", seeds=seeds, modes=FULL, paper=PAPER, headline=True, expected="xfail",
                    reason="an overfitted codec on one 256² image with 1200 iterations loses to WebP "
                    "(seed 0 full: 27.2 vs 34.2 dB; in the prototype 87 % of the bits were network parameters)"),
    ]  # fmt: skip
    macs = decode_macs_per_pixel(RegionCodecConfig())
    result.metrics = {
        "seeds": seeds,
        "per_seed_single_object": {
            str(s): {"psnr": objs[s]["psnr"], "bpp_region": objs[s]["bpp_region"],
                     "jpeg": objs[s]["jpeg"][0], "webp": objs[s]["webp"][0]} for s in seeds
        },
        "single_object": {k: v for k, v in obj.items() if k not in ("curves", "history")},
        "jpeg_curve": obj["curves"]["jpeg"], "webp_curve": obj["curves"]["webp"],
        "decode_macs_per_pixel": macs, "mechanics": {k: v for k, v in mech.items() if k != "sections"},
        "contour_share_of_bits": parts["contours"] / sum(parts.values()),
    }  # fmt: skip
    result.add_series(
        "moric_single_object_loss",
        {"x": list(range(len(obj["history"]))), "loss": obj["history"]},
        title=f"MoRIC overfitting on one object (astronaut suit), seed {seed}",
        xlabel="iteration",
        ylabel="loss: MSE + λ·bits, per coded pixel",
    )
    result.notes += [
        "Our design (no MoRIC code exists): Cool-Chic/C3-style per-region overfitted latents with an "
        "ARM, a shared per-level FiLM modulator, crack-code contours, a range-coded container.",
        f"Single object ({obj['region_px']} px): PSNR {obj['psnr']:.2f} dB at {obj['bpp_region']:.3f} bits per "
        f"region pixel (all bytes, contour included); JPEG {jpeg_p:.2f} dB"
        + (
            ""
            if jpeg_inside
            else " (JPEG cannot go that low: its lowest-quality file is larger, so its end point is used)"
        )
        + f", WebP {obj['webp'][0]:.2f} dB at the same rate (seed {seed}).",
        f"Seeds {seeds}: MoRIC − JPEG / − WebP per seed (dB): "
        + "; ".join(
            f"{s}: {a:+.2f} / {b:+.2f}" for s, a, b in zip(seeds, vs_jpeg, vs_webp, strict=True)
        ),
        f"Decoding cost: {macs['total']:.0f} MACs/pixel (analytic; default config), decode {obj['decode_s']:.2f} s "
        f"(compiled range decoder, exact ARM and contour paths), encode {obj['encode_s']:.1f} s.",
    ]
    return result
