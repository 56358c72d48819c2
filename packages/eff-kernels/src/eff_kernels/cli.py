"""`eff kernels ...`: the command-line entry of eff-kernels, plugged into `eff` via `eff.commands`.

``eff kernels sage-attention`` (accuracy of INT8/FP8/NVFP4/MXFP4 attention vs float64 and KV bytes
per token), ``eff kernels lrqk`` (selection quality and transfers of LRQK vs baselines),
``eff kernels paretoq`` (PTQ vs QAT per bit width, optional budget split) and ``eff kernels bench``
(the GPU benchmark; ``--dry-run`` runs it on CPU with tiny shapes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from eff_shared.cli import csv_option, domain_app
from eff_shared.report import format_value, print_rows, write_rows_json

app = domain_app("eff-kernels", torch_report=True)

JsonOpt = Annotated[
    Path | None, typer.Option("--json", help="Also write the results as JSON here.")
]


@app.command("sage-attention")
def sage_attention_cmd(
    dist: Annotated[
        str, typer.Option("--dist", help="Comma-separated: gauss,peaky,outlier.")
    ] = "gauss,peaky,outlier",
    seq: Annotated[int, typer.Option("--seq", min=1, help="Sequence length N = M.")] = 1024,
    head_dim: Annotated[int, typer.Option("--head-dim", min=1, max=256, help="Head dim D.")] = 64,
    heads: Annotated[int, typer.Option("--heads", min=1, help="Heads H.")] = 4,
    formats: Annotated[
        str,
        typer.Option(
            "--formats",
            help="Comma-separated: int8-fp16,int8-fp16-nosmooth,int8-fp8,nvfp4,nvfp4-nosmooth,mxfp4.",
        ),
    ] = "int8-fp16,int8-fp8,nvfp4,mxfp4",
    causal: Annotated[bool, typer.Option("--causal", help="Causal attention.")] = False,
    backward: Annotated[
        bool, typer.Option("--backward", help="Also measure SageBwd gradients (gauss, outlier).")
    ] = False,
    backend: Annotated[
        str, typer.Option("--backend", help="reference | triton (interpreted on CPU).")
    ] = "reference",
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    json_path: JsonOpt = None,
) -> None:
    """Accuracy of SageAttention formats vs float64 attention (cos, rel-L1, RMSE) and KV bytes per token."""
    from eff_kernels.attention import kv_bytes_per_token
    from eff_kernels.reproduce.sage_attention import (
        DISTS,
        FORMATS,
        SageAttentionReproConfig,
        accuracy_table,
        sagebwd_errors,
    )
    from eff_shared.torch import pin_threads

    pin_threads(1)
    dists, fmts = csv_option(dist, option="--dist"), csv_option(formats, option="--formats")
    for d in dists:
        if d not in DISTS:
            raise typer.BadParameter(
                f"unknown dist {d!r}; valid: {', '.join(DISTS)}", param_hint="--dist"
            )
    for f in fmts:
        if f not in FORMATS:
            raise typer.BadParameter(
                f"unknown format {f!r}; valid: {', '.join(FORMATS)}", param_hint="--formats"
            )
    if backend not in ("reference", "triton"):
        raise typer.BadParameter("must be one of ['reference', 'triton']", param_hint="--backend")
    cfg = SageAttentionReproConfig(heads=heads, seq=seq, head_dim=head_dim, bwd_seq=min(512, seq))
    rows = accuracy_table(cfg, [seed], tuple(dists), tuple(fmts), backend=backend, is_causal=causal)
    print_rows(
        f"SageAttention vs float64 attention (B=1, H={heads}, N={seq}, D={head_dim}, causal={causal}, {backend})",
        rows,
        columns=["dist", "format", "cos", "rel_l1", "rmse"],
    )
    kv = [
        {"format": f, **kv_bytes_per_token(f, head_dim)}
        for f in ("fp16", "int8-fp16", "int8-fp8", "nvfp4", "mxfp4")
    ]
    print_rows(
        f"KV cache bytes per token and head (D={head_dim}, measured from quantized tensors)",
        kv,
        columns=["format", "bytes_per_token", "ratio_to_fp16"],
    )
    extra: dict[str, Any] = {"kv_bytes_per_token": kv}
    if backward:
        bwd = []
        for d in ("gauss", "outlier"):
            for smooth in (True, False):
                e = sagebwd_errors(cfg, d, seed, smooth_k=smooth, backend=backend)
                bwd.append(
                    {
                        "dist": d,
                        "smooth_k": smooth,
                        **{f"{k} cos": v["cos"] for k, v in e.items()},
                        **{f"{k} rel_l1": v["rel_l1"] for k, v in e.items()},
                    }
                )
        cols = ["dist", "smooth_k"] + [
            f"{n} {m}" for n in ("O", "dQ", "dK", "dV") for m in ("cos", "rel_l1")
        ]
        print_rows(
            f"SageBwd (INT8, dP in FP16) vs float64 autograd (H={cfg.bwd_heads}, N={cfg.bwd_seq})",
            bwd,
            columns=cols,
        )
        extra["sagebwd"] = bwd
    if json_path is not None:
        write_rows_json(json_path, rows, extra)


@app.command("lrqk")
def lrqk_cmd(
    seq: Annotated[int, typer.Option("--seq", min=2, help="Prefill length L.")] = 1024,
    decode: Annotated[int, typer.Option("--decode", min=1, help="Decode steps T.")] = 16,
    rank: Annotated[int, typer.Option("--rank", min=1, help="Rank r of the Q/K factors.")] = 8,
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Selected tokens k.")] = 64,
    window: Annotated[int, typer.Option("--window", min=0, help="Recent window w.")] = 16,
    heads: Annotated[int, typer.Option("--heads", min=1, help="Query heads.")] = 2,
    kv_heads: Annotated[
        int | None,
        typer.Option("--kv-heads", min=1, help="K/V heads (GQA; must divide --heads)."),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Sequences decoded together.")] = 1,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    json_path: JsonOpt = None,
) -> None:
    """LRQK vs oracle top-k, PCA-of-K (Loki-like), random projection and the recent window."""
    from eff_kernels.reproduce.lrqk import LRQKReproConfig, simulate
    from eff_shared.torch import pin_threads

    pin_threads(1)
    if rank > 64:
        raise typer.BadParameter("must be <= head_dim (64)", param_hint="--rank")
    if kv_heads is not None and heads % kv_heads:
        raise typer.BadParameter(f"must divide --heads ({heads})", param_hint="--kv-heads")
    cfg = LRQKReproConfig(
        heads=heads,
        prefill=seq,
        decode=decode,
        rank=rank,
        top_k=top_k,
        window=window,
        batch=batch,
        kv_heads=kv_heads,
    )
    res = simulate(cfg, seed)
    methods = ("lrqk", "oracle", "pca_k", "rand_proj", "window")
    rows = [{"method": n, **res[n]} for n in methods]
    print_rows(
        f"LRQK selection (L={seq}, T={decode}, r={rank}, k={top_k}, w={window}, seed {seed})",
        rows,
        columns=["method", "recall", "mass", "relerr"],
    )
    typer.echo(
        f"transferred K/V rows per step / k: {format_value(res['transferred_per_k'])} "
        f"(1.0 without hit/miss); hit rate {format_value(res['hit_rate'])}"
    )
    if json_path is not None:
        write_rows_json(json_path, rows, {k: v for k, v in res.items() if k not in methods})


@app.command("paretoq")
def paretoq_cmd(
    bits: Annotated[
        str, typer.Option("--bits", help="Comma-separated bit widths from 1,1.58,2,3,4.")
    ] = "1,1.58,2,3,4",
    steps: Annotated[
        int, typer.Option("--steps", min=1, help="FP training steps (also the split budget).")
    ] = 800,
    qat_steps: Annotated[
        int, typer.Option("--qat-steps", min=1, help="QAT steps after FP training.")
    ] = 200,
    split: Annotated[
        str | None, typer.Option("--split", help="FP fractions of the budget, e.g. 0,0.5,0.9.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    json_path: JsonOpt = None,
) -> None:
    """ParetoQ on the teacher–student task: PTQ vs QAT rel_mse and weight change per bit width."""
    from eff_kernels.paretoq import ParetoQConfig
    from eff_kernels.reproduce.paretoq import ParetoQReproConfig, budget_split, sweep
    from eff_shared.torch import pin_threads

    pin_threads(1)
    try:
        bit_list = tuple(
            ParetoQConfig(bits=b).bits for b in csv_option(bits, float, option="--bits")
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--bits") from exc
    fractions = tuple(csv_option(split, float, option="--split")) if split else ()
    if any(not 0 <= f < 1 for f in fractions):
        raise typer.BadParameter("fractions must lie in [0, 1)", param_hint="--split")
    cfg = ParetoQReproConfig(fp_steps=steps, qat_steps=qat_steps)
    res = sweep(cfg, seed, bit_list)
    rows = [{"bits": b, **v} for b, v in res["bits"].items()]
    print_rows(
        f"ParetoQ, teacher–student (FP rel_mse {format_value(res['fp_rel_mse'])}, seed {seed})",
        rows,
        columns=["bits", "ptq_rel_mse", "qat_rel_mse", "weight_change"],
    )
    extra: dict[str, Any] = {k: v for k, v in res.items() if k != "bits"}
    if fractions:
        sp = [r for b in bit_list for r in budget_split(cfg, seed, b, fractions, total=steps)]
        print_rows(
            f"budget split: {steps} steps, a fraction in FP then QAT (information)",
            sp,
            columns=["bits", "fp_fraction", "rel_mse"],
        )
        extra["budget_split"] = sp
    if json_path is not None:
        write_rows_json(json_path, rows, extra)


@app.command("bench")
def bench_cmd(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Tiny shapes on CPU (Triton interpreted).")
    ] = False,
    sections: Annotated[
        str, typer.Option("--sections", help="Comma-separated: attention,lrqk,paretoq.")
    ] = "attention,lrqk,paretoq",
    json_path: JsonOpt = None,
) -> None:
    """GPU benchmark of the kernels (TOPS vs SDPA, LRQK decode, low-bit GEMM); see tools/bench/kernels_gpu.py."""
    from eff_kernels.bench import SECTIONS, run_bench

    chosen = csv_option(sections, option="--sections")
    for s in chosen:
        if s not in SECTIONS:
            raise typer.BadParameter(
                f"unknown section {s!r}; valid: {', '.join(SECTIONS)}", param_hint="--sections"
            )
    try:
        res = run_bench(dry_run=dry_run, sections=chosen, echo=typer.echo)
    except RuntimeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dry-run") from exc
    print_rows(
        "eff kernels bench: sections",
        [{"section": s, "ok": res[s]["ok"], "seconds": res[s]["seconds"]} for s in chosen],
        json_path,
        extra=res,
    )
    if not res["ok"]:
        raise typer.Exit(1)
