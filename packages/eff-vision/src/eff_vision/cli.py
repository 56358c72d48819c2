"""`eff vision ...`: the command-line entry of eff-vision, plugged into `eff` via `eff.commands`.

Each method owns one section below (``# --- <method> ---``; edit only your own section). Keep
imports of heavy modules inside the command functions so `eff --help` stays fast. Every command
pins torch/BLAS to one thread, takes ``--seed`` and ``--json PATH`` and prints a table.
"""

from pathlib import Path
from typing import Annotated

import typer
from threadpoolctl import threadpool_limits

from eff_shared.cli import csv_option, domain_app
from eff_shared.report import print_rows

app = domain_app("eff-vision", torch_report=True)

# --- shared helpers ----------------------------------------------------------------------------


JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the rows as JSON.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Master seed.")]


# --- tensor_compress ---------------------------------------------------------------------------


@app.command("tensor-compress")
def tensor_compress_cmd(
    ratio: Annotated[
        float, typer.Option("--ratio", min=0.01, max=1.0, help="Parameter budget per layer.")
    ] = 0.25,
    method: Annotated[
        str, typer.Option("--method", help="Comma-separated: tucker2, cp.")
    ] = "tucker2,cp",
    epochs: Annotated[
        int, typer.Option("--epochs", min=1, help="Digits-CNN training epochs.")
    ] = 40,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """Data-informed (Σ) vs Frobenius Tucker-2 / CPD of a digits CNN's c2 and c3, no fine-tuning."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.reproduce.tensor_compress import TensorCompressReproConfig, experiment

    methods = csv_option(method, option="--method", allowed=("tucker2", "cp"))
    out = experiment(TensorCompressReproConfig(ratio=ratio, epochs=epochs), seed)
    keep = {"tucker2": "Tucker", "cp": "CPD"}
    rows = [
        r
        for r in out["rows"]
        if r["method"] == "original" or any(r["method"].startswith(keep[m]) for m in methods)
    ]
    print_rows(
        f"eff vision tensor-compress: ratio {ratio}, seed {seed} (Σ: uncentred second moment)",
        rows,
        json_path,
        extra={"ranks": out["ranks"], "original_accuracy": out["orig_acc"]},
    )


# --- fingerprint -------------------------------------------------------------------------------


@app.command("fingerprint")
def fingerprint_cmd(
    bits: Annotated[int, typer.Option("--bits", min=1, help="Fingerprint / watermark bits.")] = 256,
    attack: Annotated[
        str,
        typer.Option(
            "--attack", help="Comma-separated: sgd, sgd_wd, adam, adam_1e-2, lora_sgd, perm."
        ),
    ] = "sgd,sgd_wd,adam,perm",
    owner_epochs: Annotated[int, typer.Option("--owner-epochs", min=1)] = 30,
    attack_epochs: Annotated[int, typer.Option("--attack-epochs", min=1)] = 15,
    kernel_size: Annotated[
        int, typer.Option("--kernel-size", min=1, help="Fingerprint conv size K (odd).")
    ] = 5,
    band: Annotated[int, typer.Option("--band", min=0, help="Low-pass band U0.")] = 1,
    padding_mode: Annotated[
        str,
        typer.Option(
            "--padding-mode",
            help="circular (exact invariance), zeros, reflect or replicate (approximate).",
        ),
    ] = "circular",
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """Frequency-component fingerprint (our construction) vs a naive weight watermark under attacks."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.fingerprint import PADDING_MODES, invariant_basis
    from eff_vision.reproduce.fingerprint import ATTACKS, FingerprintReproConfig, experiment

    kinds = tuple(csv_option(attack, option="--attack", allowed=ATTACKS))
    if padding_mode not in PADDING_MODES:
        raise typer.BadParameter(
            f"must be one of {', '.join(PADDING_MODES)}", param_hint="--padding-mode"
        )
    if kernel_size % 2 == 0 or kernel_size > 8:
        raise typer.BadParameter(
            "must be odd and <= 8 (the 8x8 feature map)", param_hint="--kernel-size"
        )
    if invariant_basis(kernel_size, (8, 8), band).shape[1] == 0:
        raise typer.BadParameter(
            f"no invariant coordinate for --kernel-size {kernel_size}", param_hint="--band"
        )
    cfg = FingerprintReproConfig(
        bits=bits,
        attacks=kinds,
        owner_epochs=owner_epochs,
        attack_epochs=attack_epochs,
        kernel_size=kernel_size,
        band=band,
        padding_mode=padding_mode,
    )
    out = experiment(cfg, seed)
    own = out["owner"]
    rows = [
        {"attack": "none (owner, SGD)", "accuracy": own["acc"], "BER fingerprint": own["ber"],
         "rel. change": own["change"], "BER naive": own["ber_naive"]},
    ]  # fmt: skip
    for kind, a in out["attacks"].items():
        if kind == "perm":
            rows.append(
                {"attack": "perm + ×3.7", "BER fingerprint": a["ber"],
                 "rel. change": f"perm recovered {a['perm_exact']}, unaligned BER {a['ber_unaligned']:.3f}"}
            )  # fmt: skip
        else:
            change = a["change_rescaled"] if kind == "sgd_wd" else a["change"]
            rows.append(
                {"attack": kind, "accuracy": a["acc"], "BER fingerprint": a["ber"],
                 "rel. change": change, "BER naive": a["ber_naive"]}
            )  # fmt: skip
    print_rows(f"eff vision fingerprint: {bits} bits, seed {seed}", rows, json_path)


# --- lasq --------------------------------------------------------------------------------------


def _read_rgb(path: Path, param_hint: str = "--input"):
    import cv2

    if not path.is_file():
        raise typer.BadParameter(f"{path} does not exist", param_hint=param_hint)
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise typer.BadParameter(f"cannot read an image from {path}", param_hint=param_hint)
    if img.ndim == 2:
        raise typer.BadParameter(f"{path} is grey; give an RGB image", param_hint=param_hint)
    if img.shape[2] == 4:
        raise typer.BadParameter(
            f"{path} has an alpha channel; drop it first", param_hint=param_hint
        )
    if img.dtype != "uint8":
        raise typer.BadParameter(f"{path} must be 8-bit, got {img.dtype}", param_hint="--input")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _write_rgb(path: Path, img) -> None:
    import cv2
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    u8 = np.clip(np.rint(np.asarray(img) * 255.0), 0, 255).astype(np.uint8)
    if not cv2.imwrite(str(path), cv2.cvtColor(u8, cv2.COLOR_RGB2BGR)):
        raise typer.BadParameter(f"cannot write {path}", param_hint="--output")


@app.command("lasq")
def lasq_cmd(
    images: Annotated[
        str, typer.Option("--images", help="Comma-separated bundled images (reproduction data).")
    ] = "astronaut,coffee,chelsea,rocket,immunohistochemistry",
    alpha: Annotated[float, typer.Option("--alpha", min=0.0, help="Low-light gain α.")] = 0.4,
    gamma: Annotated[float, typer.Option("--gamma", min=0.0, help="Low-light power γ.")] = 2.0,
    sigma: Annotated[float, typer.Option("--sigma", min=0.0, help="Noise std.")] = 0.01,
    max_side: Annotated[int, typer.Option("--max-side", min=8)] = 256,
    regions: Annotated[
        int, typer.Option("--regions", min=0, help="Luminance-layer regions (0 = per pixel).")
    ] = 16,
    input_path: Annotated[
        Path | None, typer.Option("--input", help="Enhance this RGB image file instead.")
    ] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Enhanced image.")] = None,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """LASQ prior vs auto gamma, CLAHE, HE, gamma + CLAHE and MSRCR on synthetic low light; or
    enhance one file (``--input low.png -o out.png``)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    import time

    if input_path is not None:
        from eff_vision.lasq.prior import LASQPrior

        if output is None:
            raise typer.BadParameter("give -o/--output with --input", param_hint="--output")
        img = _read_rgb(input_path)
        t0 = time.perf_counter()
        out = LASQPrior(seed=seed).enhance(img, None if regions <= 0 else regions)
        _write_rgb(output, out)
        rows = [{"input": str(input_path), "output": str(output), "size": f"{img.shape[0]}×{img.shape[1]}",
                 "regions": regions, "s": time.perf_counter() - t0}]  # fmt: skip
        print_rows("eff vision lasq (one file)", rows, json_path)
        return
    from eff_vision.data.images import BUNDLED_IMAGES
    from eff_vision.reproduce.lasq import LASQReproConfig, experiment

    names = tuple(csv_option(images, option="--images", allowed=BUNDLED_IMAGES))
    if regions == 0:
        raise typer.BadParameter("the comparison needs --regions >= 1", param_hint="--regions")
    cfg = LASQReproConfig(
        images=names, max_side=max_side, alpha=alpha, gamma=gamma, sigma=sigma, regions=regions
    )
    out = experiment(cfg, seed)
    print_rows(
        f"eff vision lasq: α={alpha}, γ={gamma}, σ={sigma}, seed {seed} ({len(names)} images)",
        out["rows"],
        json_path,
    )


# --- panlut ------------------------------------------------------------------------------------


@app.command("panlut")
def panlut_cmd(
    steps: Annotated[int, typer.Option("--steps", min=1, help="Pan-LUT training steps.")] = 600,
    ratio: Annotated[int, typer.Option("--ratio", min=1, help="Resolution ratio R.")] = 4,
    save_model: Annotated[
        Path | None, typer.Option("--save-model", help="Save the trained Pan-LUT (torch state).")
    ] = None,
    model: Annotated[
        Path | None, typer.Option("--model", help="Sharpen with this saved Pan-LUT instead.")
    ] = None,
    ms: Annotated[Path | None, typer.Option("--ms", help="LR MS h×w×3 float .npy.")] = None,
    pan: Annotated[Path | None, typer.Option("--pan", help="PAN H×W float .npy.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Output .npy.")] = None,
    tile: Annotated[
        int, typer.Option("--tile", min=5, help="HR tile size (tiled inference).")
    ] = 512,
    consistency: Annotated[
        bool,
        typer.Option(
            "--consistency",
            help="Also train Pan-LUT with the spectral-consistency projection (held-out scenes); "
            "--save-model then saves that one, and sharpening expects one.",
        ),
    ] = False,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """Pan-LUT vs EXP, Brovey, IHS, GSA and PNN-lite under the synthetic Wald protocol; or sharpen
    ``--ms``/``--pan`` .npy files with a saved model (tiled, memory-mapped: any size; pass the
    ``--ratio`` and ``--consistency`` it was trained with)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    import time

    import numpy as np
    import torch

    from eff_vision.reproduce.panlut import PanLUTReproConfig, experiment, make_panlut

    if ms is not None or pan is not None:
        if model is None or ms is None or pan is None or output is None:
            raise typer.BadParameter(
                "sharpening needs --model, --ms, --pan and -o", param_hint="--ms"
            )
        lut = make_panlut(ratio, consistency=consistency)
        lut.load_state_dict(torch.load(model, weights_only=True))
        ms_arr, pan_arr = np.load(ms, mmap_mode="r"), np.load(pan, mmap_mode="r")
        shape = (pan_arr.shape[0], pan_arr.shape[1], ms_arr.shape[2])
        out = np.lib.format.open_memmap(output, mode="w+", dtype=np.float32, shape=shape)
        t0 = time.perf_counter()
        try:
            lut.predict_tiled(ms_arr, pan_arr, tile=tile, out=out)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--ms/--pan") from exc
        out.flush()
        dt = time.perf_counter() - t0
        rows = [{"output": str(output), "size": f"{shape[0]}×{shape[1]}", "tile": tile, "s": dt,
                 "MP/s": shape[0] * shape[1] / 1e6 / dt}]  # fmt: skip
        print_rows("eff vision panlut (sharpen)", rows, json_path)
        return
    res = experiment(
        PanLUTReproConfig(steps=steps, ratio=ratio, consistency_variant=consistency), seed
    )
    if save_model is not None:
        save_model.parent.mkdir(parents=True, exist_ok=True)
        torch.save(res["lut_consistency" if consistency else "lut"].state_dict(), save_model)
    print_rows(
        f"eff vision panlut: {steps} steps, ratio {ratio}, seed {seed} (test: coffee, chelsea)",
        res["rows"],
        json_path,
    )


# --- rankmatch ---------------------------------------------------------------------------------


@app.command("rankmatch")
def rankmatch_cmd(
    labeled: Annotated[int, typer.Option("--labeled", min=2, help="Labelled samples.")] = 100,
    unlabeled: Annotated[
        int, typer.Option("--unlabeled", min=1, help="Unlabelled samples.")
    ] = 3000,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Training steps.")] = 1500,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """RankMatch (reconstruction) vs KL pseudo-labels and supervised-only: the six LDL metrics."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.reproduce.rankmatch import RankMatchReproConfig, experiment

    cfg = RankMatchReproConfig(n_labeled=labeled, n_unlabeled=unlabeled, steps=steps)
    out = experiment(cfg, seed)
    print_rows(
        f"eff vision rankmatch: {labeled} labels, {steps} steps, seed {seed} "
        "(↓ Cheb/Clark/Canb/KL, ↑ Cos/Inter)",
        out["rows"],
        json_path,
    )


# --- moric -------------------------------------------------------------------------------------

moric_app = typer.Typer(
    no_args_is_help=False,
    add_completion=False,
    help="MoRIC region codec (our design): RD table, or encode/decode files.",
)
app.add_typer(moric_app, name="moric")


@moric_app.callback(invoke_without_command=True)
def moric_cmd(
    ctx: typer.Context,
    image: Annotated[str, typer.Option("--image", help="Bundled image (astronaut).")] = "astronaut",
    region: Annotated[str, typer.Option("--region", help="Single-object region (suit).")] = "suit",
    lam: Annotated[float, typer.Option("--lam", min=0.0, help="Rate weight λ (> 0).")] = 0.02,
    iters: Annotated[int, typer.Option("--iters", min=1, help="Overfitting iterations.")] = 1200,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """MoRIC vs JPEG/WebP at matched bpp on the single object, bits per part, and the contour
    table (without a subcommand); ``encode``/``decode`` work on files."""
    if ctx.invoked_subcommand is not None:
        return
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    if image != "astronaut" or region != "suit":
        raise typer.BadParameter(
            "only --image astronaut --region suit is bundled", param_hint="--region"
        )
    if lam <= 0:
        raise typer.BadParameter("λ must be > 0", param_hint="--lam")
    from eff_vision.reproduce.moric import (
        MoRICReproConfig,
        contour_experiment,
        single_object_experiment,
    )

    cfg = MoRICReproConfig(lam=lam, single_iters=iters)
    obj = single_object_experiment(cfg, seed)
    rows = [{"codec": f"MoRIC (λ={lam}, {iters} iters)", "bpp (region)": obj["bpp_region"],
             "PSNR region": obj["psnr"], **{f"{k} bits": v for k, v in obj["parts"].items()}}]  # fmt: skip
    for c in ("jpeg", "webp"):
        p, inside = obj[c]
        rows.append(
            {
                "codec": c.upper() + (" (curve end)" if not inside else ""),
                "bpp (region)": obj["bpp_region"],
                "PSNR region": p,
            }
        )
    con = contour_experiment(cfg, seed)
    print_rows(f"eff vision moric: astronaut suit, seed {seed}", rows, None)
    print_rows("contour coder (bits from the actual bytes)", con["rows"], json_path,
               extra={"single_object": rows, "curves": obj["curves"]})  # fmt: skip


def _read_labels(path: Path):
    import cv2
    import numpy as np

    lab = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if not path.is_file():
        raise typer.BadParameter(f"{path} does not exist", param_hint="--mask")
    if lab is None:
        raise typer.BadParameter(f"cannot read a mask from {path}", param_hint="--mask")
    if lab.ndim == 3:
        lab = lab[:, :, 0]
    vals = np.unique(lab)
    if set(vals.tolist()) <= {0, 255}:  # a binary mask saved as 0/255
        lab = (lab > 0).astype(np.int32)
    return lab.astype(np.int32)


@moric_app.command("encode")
def moric_encode_cmd(
    image: Annotated[Path, typer.Argument(help="RGB image (8-bit).")],
    mask: Annotated[
        Path, typer.Option("--mask", help="Label map / binary mask image (ids 0..N−1).")
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Output .moric stream.")],
    lam: Annotated[float, typer.Option("--lam", help="Rate weight λ (> 0).")] = 0.02,
    iters: Annotated[int, typer.Option("--iters", min=1)] = 1200,
    levels: Annotated[int, typer.Option("--levels", min=1, max=12)] = 7,
    only: Annotated[
        int | None, typer.Option("--only", help="Single-object mode: code this region id.")
    ] = None,
    no_modulator: Annotated[
        bool, typer.Option("--no-modulator", help="Disable the shared modulator.")
    ] = False,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """Encode IMAGE with its region map into a MoRIC stream (bits are the file's bytes)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.moric import MoRIC, RegionCodecConfig

    img = _read_rgb(image, "IMAGE")
    labels = _read_labels(mask)
    try:
        cfg = RegionCodecConfig(
            levels=levels, iters=iters, lam=lam, seed=seed, modulator=not no_modulator
        )
        bs = MoRIC(cfg).encode(img, labels, only=only)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    data = bs.to_bytes()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(data)
    rows = [{"output": str(output), "bytes": len(data), "bpp (image)": bs.bpp("image"),
             "bpp (region)": bs.bpp("region"), **{f"{k} bits": v for k, v in bs.bits_by_part().items()}}]  # fmt: skip
    print_rows("eff vision moric encode", rows, json_path)


@moric_app.command("decode")
def moric_decode_cmd(
    stream: Annotated[
        Path, typer.Argument(help="A .moric stream.", exists=True, dir_okay=False, readable=True)
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Decoded image (PNG).")],
) -> None:
    """Decode a MoRIC stream to an 8-bit image (a clear error for a malformed stream)."""
    import cv2

    from eff_shared.torch import pin_threads
    from eff_vision.moric import MoRIC, MoRICDecodeError

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    try:
        img = MoRIC.decode(stream.read_bytes())
    except MoRICDecodeError as exc:
        raise typer.BadParameter(f"{stream}: {exc}", param_hint="STREAM") from exc
    output.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(output), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    print_rows(
        "eff vision moric decode",
        [{"output": str(output), "size": f"{img.shape[0]}×{img.shape[1]}"}],
        None,
    )


# --- combo -------------------------------------------------------------------------------------


@app.command("combo")
def combo_cmd(
    ntr: Annotated[
        int, typer.Option("--ntr", min=1, max=996, help="Training images per task.")
    ] = 700,
    decoy: Annotated[str, typer.Option("--decoy", help="Decoy backbone: noise or none.")] = "noise",
    top_k: Annotated[
        int, typer.Option("--top-k", min=1, max=4, help="Backbones kept by importance.")
    ] = 2,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="ComBo training epochs.")] = 60,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """ComBo vs the best single and the pooled linear probe on four frozen toy digit backbones."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.reproduce.combo import ComboReproConfig, experiment

    kind = csv_option(decoy, option="--decoy", allowed=("noise", "none"))[0]
    cfg = ComboReproConfig(
        ntr=ntr, decoy=None if kind == "none" else "noise", top_k=top_k, combo_epochs=epochs
    )
    out = experiment(cfg, seed)
    imp_rows = [
        {
            "task": t,
            **{f"importance {n}": v for n, v in p.get("importance_decoy", p["importance"]).items()},
        }
        for t, p in out["per_task"].items()
    ]
    print_rows("eff vision combo: backbone importance (‖W_k‖ / sqrt(columns))", imp_rows, None)
    print_rows(
        f"eff vision combo: NTR {ntr}, seed {seed} (toy digit backbones)",
        out["rows"],
        json_path,
        extra={"importance": imp_rows},
    )


# --- fedphoenix --------------------------------------------------------------------------------


@app.command("fedphoenix")
def fedphoenix_cmd(
    beta: Annotated[float, typer.Option("--beta", min=1e-6, help="Dirichlet concentration.")] = 0.1,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Federated rounds.")] = 150,
    stop: Annotated[
        str, typer.Option("--stop", help="Comma-separated r_s as fractions of --rounds.")
    ] = "0.4,0.8",
    theta: Annotated[
        float, typer.Option("--theta", min=0.0, max=1.0, help="Reset fraction θ (2/32).")
    ] = 0.0625,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """FedPhoenix (stair-schedule conv-kernel reset of client copies) vs FedAvg on non-IID digits."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.fedphoenix import PhoenixReset
    from eff_vision.reproduce.fedphoenix import FedPhoenixReproConfig, federate

    fracs = csv_option(stop, float, option="--stop")
    if any(not 0 <= f <= 1 for f in fracs):
        raise typer.BadParameter(f"fractions must lie in [0, 1], got {stop!r}", param_hint="--stop")
    cfg = FedPhoenixReproConfig(beta=beta, rounds=rounds, theta=theta)
    runs = {"FedAvg": federate(cfg, seed, None)}
    for f in fracs:
        reset = PhoenixReset(theta=theta, stop_round=round(f * rounds))
        runs[f"FedPhoenix r_s={f}·R"] = federate(cfg, seed, reset)
    rows = [
        {"method": name, "final accuracy (last 10)": r["final"], "best accuracy": r["best"],
         f"rounds to {cfg.target}": r["rounds_to_target"] or "never", "CPU s": r["cpu_s"]}
        for name, r in runs.items()
    ]  # fmt: skip
    print_rows(
        f"eff vision fedphoenix: {cfg.n_clients} clients, β {beta}, {rounds} rounds, seed {seed}",
        rows,
        json_path,
        extra={"accuracy": {name: r["accuracy"] for name, r in runs.items()}},
    )


# --- lcotta ------------------------------------------------------------------------------------


@app.command("lcotta")
def lcotta_cmd(
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Rounds of 6 corruptions.")] = 24,
    lr: Annotated[float, typer.Option("--lr", min=1e-9, help="SGD lr of every method.")] = 0.02,
    rank: Annotated[int, typer.Option("--rank", min=1, help="Subspace rank k.")] = 4,
    window: Annotated[int, typer.Option("--window", min=1, help="Gradient window N_w.")] = 30,
    every: Annotated[int, typer.Option("--every", min=1, help="Record every s batches.")] = 3,
    d_margin: Annotated[
        float, typer.Option("--d-margin", min=1e-9, max=1.0, help="EATA redundancy margin d0.")
    ] = 0.4,
    params: Annotated[
        str, typer.Option("--params", help="Adapted set of TENT/EATA/LCoTTA: norm or all.")
    ] = "norm",
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """LCoTTA vs source, norm-adapt, TENT and EATA: online error per round on corrupted digits."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.reproduce.lcotta import ADAPTED_SETS, METHODS, LCoTTAReproConfig, experiment

    if rank > window:
        raise typer.BadParameter(f"--rank ({rank}) must not exceed --window ({window})")
    if params not in ADAPTED_SETS:
        raise typer.BadParameter(f"--params must be one of {list(ADAPTED_SETS)}, got {params!r}")
    cfg = LCoTTAReproConfig(
        rounds=rounds, lr=lr, rank=rank, window=window, record_every=every, d_margin=d_margin,
        params=params,
    )  # fmt: skip
    out = experiment(cfg, seed)
    res = out["results"]
    per_round = [
        {"round": i + 1, **{m: res[m]["per_round"][i] for m in METHODS}} for i in range(rounds)
    ]
    print_rows(f"eff vision lcotta: online error per round, seed {seed}", per_round, None)
    rows = [
        {"method": m, "mean": res[m]["mean"], "last round": res[m]["last"],
         "max − min": res[m]["range"], "CPU s": res[m]["cpu_s"]}
        for m in METHODS
    ]  # fmt: skip
    print_rows(
        f"eff vision lcotta: {out['steps']} steps, lr {lr}, {params} params, "
        f"rank/window/every {rank}/{window}/{every}",
        rows,
        json_path,
        extra={"per_round": per_round, "lcotta_stats": out["extra"].get("lcotta")},
    )


# --- robia -------------------------------------------------------------------------------------


@app.command("robia")
def robia_cmd(
    domains: Annotated[
        str, typer.Option("--domains", help="Comma-separated: noise, blur, dark, fog, clean.")
    ] = "noise,blur,dark,fog",
    cycles: Annotated[int, typer.Option("--cycles", min=1, help="Passes over the domains.")] = 2,
    pairs: Annotated[int, typer.Option("--pairs", min=1, help="Stereo pairs per domain.")] = 20,
    size: Annotated[str, typer.Option("--size", help="HEIGHTxWIDTH.")] = "64x128",
    max_disp: Annotated[int, typer.Option("--max-disp", min=2, help="Disparities D.")] = 24,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """RobIA (reconstruction) vs no adaptation, BN-adapt and full fine-tuning on a stereo stream."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.reproduce.robia import RobIAReproConfig, experiment

    doms = tuple(
        csv_option(domains, option="--domains", allowed=("noise", "blur", "dark", "fog", "clean"))
    )
    try:
        height, width = (int(v) for v in size.lower().split("x"))
    except ValueError as exc:
        raise typer.BadParameter(
            f"expected HEIGHTxWIDTH, got {size!r}", param_hint="--size"
        ) from exc
    try:
        cfg = RobIAReproConfig(height=height, width=width, max_disp=max_disp, domains=doms,
                               cycles=cycles, pairs_per_domain=pairs)  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    out = experiment(cfg, seed)
    print_rows(
        f"eff vision robia: {out['frames']} frames ({'→'.join(doms)} × {cycles}), {size}, "
        f"D {max_disp}, seed {seed}",
        out["rows"],
        json_path,
    )


# --- svip --------------------------------------------------------------------------------------


@app.command("svip")
def svip_cmd(
    src_ids: Annotated[int, typer.Option("--src-ids", min=2, help="Source identities.")] = 100,
    tgt_ids: Annotated[int, typer.Option("--tgt-ids", min=2, help="Target identities.")] = 60,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Adaptation epochs.")] = 10,
    ir_blur: Annotated[
        float,
        typer.Option("--ir-blur", min=0.0, help="Gaussian sigma of the target's infrared images."),
    ] = 0.8,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """SVIP (reconstruction) vs source-only, SHOT-style and unsupervised VI-ReID, with ablations."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.reproduce.svip import SVIPReproConfig, experiment

    cfg = SVIPReproConfig(src_ids=src_ids, tgt_ids=tgt_ids, epochs=epochs)
    out = experiment(cfg, seed, ir_blur=ir_blur)
    print_rows(
        f"eff vision svip: visible → infrared, {src_ids} source / {tgt_ids} target ids, "
        f"IR blur {ir_blur}, seed {seed}",
        out["rows"],
        json_path,
    )


# --- hawaii ------------------------------------------------------------------------------------


@app.command("hawaii")
def hawaii_cmd(
    teachers: Annotated[
        str, typer.Option("--teachers", help="Comma-separated: sup, ae, rot, random, clip.")
    ] = "sup,ae,rot,random",
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Distillation epochs.")] = 20,
    router_runs: Annotated[
        bool, typer.Option("--router-runs/--no-router-runs", help="Per-teacher router runs.")
    ] = False,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """HAWAII (our reading) vs lite multi-teacher and single-teacher distillation into a tiny ViT."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    from eff_vision.reproduce.hawaii import HawaiiReproConfig, experiment

    names = tuple(
        csv_option(teachers, option="--teachers", allowed=("sup", "ae", "rot", "random", "clip"))
    )
    cfg = HawaiiReproConfig(teachers=names, epochs=epochs, router_runs=router_runs)
    out = experiment(cfg, seed)
    tm = sum(out["teacher_macs"].values())
    print_rows(
        f"eff vision hawaii: teachers {','.join(names)}, {epochs} epochs, seed {seed} "
        f"(student MACs {out['student_macs']:.0f}, teachers' MACs {tm:.0f})",
        out["rows"],
        json_path,
        extra={"student_macs": out["student_macs"], "teacher_macs": out["teacher_macs"]},
    )


# --- clic --------------------------------------------------------------------------------------


@app.command("clic")
def clic_cmd(
    pretrain_steps: Annotated[int, typer.Option("--pretrain-steps", min=1)] = 600,
    finetune_steps: Annotated[int, typer.Option("--finetune-steps", min=1)] = 300,
    lr: Annotated[float, typer.Option("--lr", min=1e-12, help="Fine-tuning learning rate.")] = 3e-4,
    freeze_vision: Annotated[
        bool, typer.Option("--freeze-vision/--train-vision", help="Official default: frozen.")
    ] = True,
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """CLIC vs pretrained, CLIP fine-tuning and NegCLIP on coloured shapes (tiny CLIP from scratch)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    threadpool_limits(1)  # and numpy's BLAS
    import warnings

    from eff_vision.clic import SwapFallbackWarning
    from eff_vision.reproduce.clic import CLICReproConfig, experiment

    cfg = CLICReproConfig(
        pretrain_steps=pretrain_steps,
        finetune_steps=finetune_steps,
        lr=lr,
        freeze_vision=freeze_vision,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SwapFallbackWarning)
        out = experiment(cfg, seed)
    print_rows(
        f"eff vision clic: {pretrain_steps} pre-training / {finetune_steps} fine-tuning steps, lr {lr}, "
        f"vision {'frozen' if freeze_vision else 'trained'}, seed {seed}",
        out["rows"],
        json_path,
    )
