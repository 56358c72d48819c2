"""`eff theory ...`: the command-line entry of eff-theory, plugged into `eff` via `eff.commands`.

Each method owns one section below (edit only your own section).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from eff_shared.cli import csv_option, domain_app
from eff_shared.report import write_rows_json
from eff_theory._runtime import blas_threads

app = domain_app("eff-theory")

# --- heavy_rnn -------------------------------------------------------------------------------
# _parse_numbers and _emit are shared by the commands below.

JsonPathOpt = Annotated[
    Path | None, typer.Option("--json", help="Write rows and curves as JSON here.")
]
PlotPathOpt = Annotated[
    Path | None, typer.Option("--plot", help="Write a PNG plot here (needs the plot extra).")
]


def _parse_numbers(option: str, values: list[str], kind: type) -> list[Any]:
    """``--opt 1,2 --opt "3 4"`` → [1, 2, 3, 4]; a bad token is a usage error naming the option."""
    return csv_option([v.replace(" ", ",") for v in values], kind, option=option)


def _emit(
    heading: str,
    rows: list[dict[str, Any]],
    *,
    params: dict[str, Any],
    series: dict[str, dict[str, list[float]]],
    json_path: Path | None,
    plot: Path | None,
    **plot_labels: Any,
) -> None:
    """Print ``rows`` as a table; write rows, ``params`` and ``series`` as JSON; plot each series
    (one PNG at ``plot``, or ``<stem>_<name>.png`` each when there are several)."""
    from eff_shared.report import plot_series, print_rows

    print_rows(heading, rows)
    if plot is not None:
        for name, curves in series.items():
            path = plot if len(series) == 1 else plot.with_name(f"{plot.stem}_{name}{plot.suffix}")
            if plot_series(path, curves, **plot_labels) is None:
                raise typer.BadParameter(
                    "PNG plots need matplotlib: pip install 'eff-theory[plot]'", param_hint="--plot"
                )
            typer.echo(f"plot written to {path}")
    if json_path is not None:
        extra = {"command": heading, "params": params, "series": series}
        typer.echo(f"json written to {write_rows_json(json_path, rows, extra)}")


@app.command("heavy-rnn")
def heavy_rnn_cmd(
    alphas: Annotated[
        list[str] | None, typer.Option("--alphas", help="Tail indices α ∈ (0, 2]; default 1,1.5,2.")
    ] = None,
    n: Annotated[int, typer.Option("--n", help="Network size N.")] = 300,
    trials: Annotated[int, typer.Option("--trials", help="Networks per α.")] = 4,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    dimension: Annotated[
        bool, typer.Option("--dimension", help="Also the full spectrum: D_KY, PR at --g.")
    ] = False,
    g: Annotated[float, typer.Option("--g", help="Gain of the --dimension run.")] = 2.0,
    json_path: JsonPathOpt = None,
    plot: PlotPathOpt = None,
) -> None:
    """Heavy-tailed RNN: g*, median 1/ρ, mean-MLE crossing g_c and g_c/g* per α (Xie et al. 2025)."""
    from eff_theory.reproduce.heavy_rnn import transition_summary

    alpha_list = _parse_numbers("--alphas", alphas or ["1,1.5,2"], float)
    try:
        rows, series = transition_summary(
            tuple(alpha_list), n, trials=trials, seed=seed, dimension=dimension, gain=g
        )
    except (ValueError, TypeError) as exc:
        raise typer.BadParameter(str(exc)) from None
    _emit(
        f"heavy-tailed RNN, N={n}, {trials} networks, seed {seed}",
        rows,
        params={
            "alphas": alpha_list,
            "n": n,
            "trials": trials,
            "seed": seed,
            "dimension": dimension,
            "g": g,
        },
        series={"mean_mle": series},
        json_path=json_path,
        plot=plot,
        title=f"mean MLE over {trials} networks, N={n}",
        xlabel="g / g*",
        ylabel="maximal Lyapunov exponent",
        logy=False,
    )


# --- label_noise_gd --------------------------------------------------------------------------


@app.command("label-noise-gd")
def label_noise_gd_cmd(
    n: Annotated[int, typer.Option("--n", help="Training samples.")] = 100,
    d: Annotated[int, typer.Option("--d", help="Patch dimension.")] = 1000,
    m: Annotated[int, typer.Option("--m", help="Filters per class.")] = 10,
    mu_norm: Annotated[float, typer.Option("--mu-norm", help="‖μ‖ (SNR = ‖μ‖/(σ_p√d)).")] = 1.5,
    sigma_p: Annotated[float, typer.Option("--sigma-p", help="Noise std σ_p.")] = 0.5,
    flip_prob: Annotated[
        float, typer.Option("--flip-prob", help="LNGD flip probability p ∈ [0, 0.5).")
    ] = 0.1,
    lr: Annotated[float, typer.Option("--lr", help="Step size η.")] = 0.5,
    steps: Annotated[int, typer.Option("--steps", help="Full-batch GD steps.")] = 2000,
    seeds: Annotated[
        list[str] | None, typer.Option("--seeds", help="Seeds; default 0,1,2,3.")
    ] = None,
    json_path: JsonPathOpt = None,
    plot: PlotPathOpt = None,
) -> None:
    """Label-noise GD vs GD vs label smoothing on the signal–noise model (Huang et al. 2025)."""
    from eff_theory.label_noise_gd import LNGDConfig, lngd_experiment
    from eff_theory.reproduce.label_noise_gd import LABELS, summarize

    seed_list = _parse_numbers("--seeds", seeds or ["0,1,2,3"], int)
    rows: list[dict[str, Any]] = []
    series: dict[str, dict[str, list[float]]] = {}
    try:
        for s in seed_list:
            cfg = LNGDConfig(
                n=n,
                d=d,
                m=m,
                mu_norm=mu_norm,
                sigma_p=sigma_p,
                flip_prob=flip_prob,
                lr=lr,
                steps=steps,
                seed=s,
            )
            with blas_threads(1):
                exp = lngd_experiment(cfg)
            rows += summarize(exp)
            series[f"test_error_seed{s}"] = {
                "x": [float(t) for t in exp["gd"].history["step"]],
                **{LABELS[k]: exp[k].history["test_error"] for k in LABELS},
            }
    except (ValueError, TypeError) as exc:
        raise typer.BadParameter(str(exc)) from None
    _emit(
        f"label-noise GD, n={n}, d={d}, m={m}, ‖μ‖={mu_norm}, {steps} steps",
        rows,
        params={
            "n": n,
            "d": d,
            "m": m,
            "mu_norm": mu_norm,
            "sigma_p": sigma_p,
            "flip_prob": flip_prob,
            "lr": lr,
            "steps": steps,
            "seeds": seed_list,
        },
        series=series,
        json_path=json_path,
        plot=plot,
        title="test error",
        xlabel="GD step",
        ylabel="0-1 test error",
        logy=False,
    )


# --- quantized_oja ---------------------------------------------------------------------------


@app.command("quantized-oja")
def quantized_oja_cmd(
    dims: Annotated[
        list[str] | None, typer.Option("--dims", help="Dimensions d; default 50,500.")
    ] = None,
    bits: Annotated[
        list[str] | None, typer.Option("--bits", help="Bit widths β; default 6,8,10,12.")
    ] = None,
    n: Annotated[int, typer.Option("--n", help="Stream length.")] = 5000,
    batches: Annotated[int, typer.Option("--batches", help="Batches b of batched Oja.")] = 25,
    trials: Annotated[int, typer.Option("--trials", help="Independent runs averaged.")] = 10,
    decay: Annotated[
        float, typer.Option("--decay", help="Spectrum λ_i = i^(−decay); 2 as the paper, 1 flat.")
    ] = 2.0,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    json_path: JsonPathOpt = None,
    plot: PlotPathOpt = None,
) -> None:
    """Mean sin² of batched/standard Oja, full precision vs linear/log grids (Dasgupta et al. 2025)."""
    from eff_theory.reproduce.quantized_oja import VARIANTS, sweep

    dim_list = _parse_numbers("--dims", dims or ["50,500"], int)
    bit_list = _parse_numbers("--bits", bits or ["6,8,10,12"], int)
    try:
        with blas_threads(1):
            err = sweep(
                tuple(dim_list),
                tuple(bit_list),
                n=n,
                n_batches=batches,
                trials=trials,
                seed=seed,
                decay=decay,
            )
    except (ValueError, TypeError) as exc:
        raise typer.BadParameter(str(exc)) from None
    rows = []
    series: dict[str, dict[str, list[float]]] = {}
    for d in dim_list:
        curves: dict[str, list[float]] = {"x": [float(b) for b in bit_list]}
        for label, _, scheme in VARIANTS:
            values = [err[(label, d, b if scheme else None)] for b in bit_list]
            rows.append(
                {
                    "d": d,
                    "variant": label,
                    **{f"{b} bits": v for b, v in zip(bit_list, values, strict=True)},
                }
            )
            curves[label] = values
        series[f"d{d}"] = curves
    _emit(
        f"quantized Oja: mean sin² over {trials} runs, n={n}, b={batches} (full precision repeats)",
        rows,
        params={
            "dims": dim_list,
            "bits": bit_list,
            "n": n,
            "batches": batches,
            "trials": trials,
            "decay": decay,
            "seed": seed,
        },
        series=series,
        json_path=json_path,
        plot=plot,
        title="quantized Oja",
        xlabel="bits β",
        ylabel="mean sin²",
        logy=True,
    )


# --- spam_select -----------------------------------------------------------------------------


@app.command("spam-select")
def spam_select_cmd(
    p: Annotated[
        list[str], typer.Option("--p", help="Numbers of coordinates p, e.g. 100,10000.")
    ] = ["100,10000"],  # noqa: B006
    a: Annotated[
        list[str], typer.Option("--a", help="Signal scales a, e.g. 0.3,0.5,0.7,1.0,1.5.")
    ] = ["0.3,0.5,0.7,1.0,1.5"],  # noqa: B006
    reps: Annotated[int, typer.Option("--reps", help="Monte-Carlo repetitions per (p, a).")] = 100,
    selectors: Annotated[
        list[str],
        typer.Option(
            "--selectors", help="Among recovery, adaptive, suboptimal, univariate, testing."
        ),
    ] = ["recovery,adaptive,suboptimal"],  # noqa: B006
    s: Annotated[int, typer.Option("--s", help="Number of signal functions (at most 5).")] = 5,
    sigma2: Annotated[float, typer.Option("--sigma2", help="Noise level σ² = 1/n.")] = 1 / 300,
    delta: Annotated[float, typer.Option("--delta", help="Error level δ ∈ (0, 1).")] = 0.1,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    json_path: JsonPathOpt = None,
    plot: PlotPathOpt = None,
) -> None:
    """χ² selectors of Liu 2025 in the sequence model: P(Ŝ≠S), FDR+FNR, mean |Ŝ| per (p, a, selector)."""
    from eff_shared.seeding import make_rng
    from eff_theory.reproduce.spam_select import risk_row, selection_risks

    p_list = _parse_numbers("--p", p, int)
    a_list = _parse_numbers("--a", a, float)
    names = tuple(_parse_numbers("--selectors", selectors, str))
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[float]] = {"x": a_list}
    try:
        for i, pp in enumerate(p_list):
            for j, aa in enumerate(a_list):
                with blas_threads(1):
                    risks = selection_risks(
                        pp, s, aa, reps, make_rng(seed, i, j), names, sigma2=sigma2, delta=delta
                    )
                for name, r in risks.items():
                    rows.append({"p": pp, "a": aa, "selector": name, **risk_row(r)})
                    if pp == p_list[-1]:
                        curves.setdefault(name, []).append(r["p_wrong"])
    except (ValueError, TypeError) as exc:
        raise typer.BadParameter(str(exc)) from None
    _emit(
        f"SpAM selection, σ²={sigma2:.4g}, s={s}, δ={delta}, {reps} reps, seed {seed}",
        rows,
        params={
            "p": p_list,
            "a": a_list,
            "reps": reps,
            "selectors": list(names),
            "s": s,
            "sigma2": sigma2,
            "delta": delta,
            "seed": seed,
        },
        series={"p_wrong": curves},
        json_path=json_path,
        plot=plot,
        title=f"P(Ŝ ≠ S) at p = {p_list[-1]}",
        xlabel="signal scale a",
        ylabel="P(Ŝ ≠ S)",
        logy=False,
    )


# --- lora_meta -------------------------------------------------------------------------------


@app.command("lora-meta")
def lora_meta_cmd(
    d: Annotated[int, typer.Option("--d", help="Dimension d.")] = 10,
    k: Annotated[int, typer.Option("--k", help="Adapter rank k.")] = 1,
    tasks: Annotated[
        int, typer.Option("--tasks", help="Retraining tasks T (>= 2; T >= 3 for exact recovery).")
    ] = 3,
    n_retrain: Annotated[
        int, typer.Option("--n-retrain", help="Samples N per retraining task.")
    ] = 2000,
    n_finetune: Annotated[
        list[str], typer.Option("--n-finetune", help="Fine-tuning sizes n', e.g. 25,50,100.")
    ] = ["25,50,100,400,1600"],  # noqa: B006
    seeds: Annotated[list[str], typer.Option("--seeds", help="Seeds, e.g. 0,1,2.")] = ["0,1,2"],  # noqa: B006
    noise_std: Annotated[float, typer.Option("--noise-std", help="Label noise std.")] = 0.1,
    outer_steps: Annotated[
        int, typer.Option("--outer-steps", help="LoRA-ML outer iterations.")
    ] = 3000,
    json_path: JsonPathOpt = None,
    plot: PlotPathOpt = None,
) -> None:
    """LoRA-ML vs standard retraining (Block et al. 2025): median excess risk after rank-k adaptation."""
    import numpy as np

    from eff_theory.reproduce.lora_meta import METHODS, compare_bases

    grid = tuple(_parse_numbers("--n-finetune", n_finetune, int))
    if min(grid) < 1:
        raise typer.BadParameter(f"sizes must be >= 1, got {min(grid)}", param_hint="--n-finetune")
    seed_list = _parse_numbers("--seeds", seeds, int)
    try:
        with blas_threads(1):
            runs = [
                compare_bases(
                    sd,
                    d=d,
                    k=k,
                    num_tasks=tasks,
                    n_retrain=n_retrain,
                    n_finetune=grid,
                    noise_std=noise_std,
                    outer_steps=outer_steps,
                )
                for sd in seed_list
            ]
    except (ValueError, TypeError) as exc:
        raise typer.BadParameter(str(exc)) from None

    def med(method: str, n: int) -> float:
        return float(np.median([r["excess"][method][n] for r in runs]))

    rows = [
        {
            "method": m,
            **{f"n'={n}": med(m, n) for n in grid},
            "base error": float(np.median([r["base_error"][m] for r in runs])),
        }
        for m in METHODS
    ]
    _emit(
        f"LoRA-ML, d={d}, k={k}, T={tasks}, N={n_retrain}, median excess risk over seeds {seed_list}",
        rows,
        params={
            "d": d,
            "k": k,
            "tasks": tasks,
            "n_retrain": n_retrain,
            "n_finetune": list(grid),
            "seeds": seed_list,
            "noise_std": noise_std,
            "outer_steps": outer_steps,
        },
        series={
            "excess": {
                "x": [float(n) for n in grid],
                **{m: [med(m, n) for n in grid] for m in METHODS},
            }
        },
        json_path=json_path,
        plot=plot,
        title="excess risk after rank-k adaptation",
        xlabel="fine-tuning samples n'",
        ylabel="‖A*_{T+1} − Â − UVᵀ‖²_F",
        logy=True,
    )


# --- pnn_identifiability ---------------------------------------------------------------------


@app.command("pnn-identifiability")
def pnn_identifiability_cmd(
    widths: Annotated[
        list[str] | None, typer.Option("--widths", help="Layer widths d_0,...,d_L, e.g. 4,3,2.")
    ] = None,
    degrees: Annotated[
        list[str] | None,
        typer.Option("--degrees", help="Hidden-layer degrees r_1,...,r_{L-1}, e.g. 2."),
    ] = None,
    bias: Annotated[bool, typer.Option("--bias", help="Biased PNN (degree <= R).")] = False,
    table: Annotated[
        bool, typer.Option("--table", help="Print the reference dimension and verdict tables.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    json_path: JsonPathOpt = None,
) -> None:
    """Exact neurovariety dimension and identifiability verdict of a polynomial network (Usevich et al. 2025)."""
    from eff_theory.pnn_identifiability import check_identifiability
    from eff_theory.reproduce.pnn_identifiability import dimension_rows, verdict_rows

    if table:
        with blas_threads(1):
            dims, verdicts = dimension_rows(seed), verdict_rows(seed)
        for heading, rows in (
            ("neurovariety dimensions (exact, mod p)", dims),
            ("identifiability verdicts", verdicts),
        ):
            _emit(heading, rows, params={"seed": seed}, series={}, json_path=None, plot=None)
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            payload = {"seed": seed, "dimensions": dims, "verdicts": verdicts}
            json_path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
            typer.echo(f"json written to {json_path}")
        return
    if not widths:
        raise typer.BadParameter("give --widths (and --degrees), or --table", param_hint="--widths")
    ws = _parse_numbers("--widths", widths, int)
    rs = _parse_numbers("--degrees", degrees, int) if degrees else []
    try:
        with blas_threads(1):
            rep = check_identifiability(ws, rs, bias=bias, seed=seed)
    except (ValueError, TypeError) as exc:
        raise typer.BadParameter(str(exc)) from None
    row = {
        "widths": str(tuple(ws)),
        "degrees": str(tuple(rs)),
        "bias": bias,
        "verdict": rep.verdict,
        "P - s": rep.params_minus_symmetries,
        "ambient": rep.ambient_dim,
        "expected dim": rep.expected_dim,
        "exact dim": rep.dim,
        "ranks per trial": str(rep.ranks),
        "dense inputs": rep.dense_inputs,
        "blocks pass Kruskal": str(rep.block_ok),
    }
    _emit(
        "PNN identifiability",
        [row],
        params={"widths": ws, "degrees": rs, "bias": bias, "seed": seed, "reasons": rep.reasons},
        series={},
        json_path=json_path,
        plot=None,
    )
    for reason in rep.reasons:
        typer.echo(f"- {reason}")
