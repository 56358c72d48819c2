"""`eff rl ...`: the command-line entry of eff-rl, plugged into `eff` via `eff.commands`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eff_shared.cli import csv_option, domain_app

app = domain_app("eff-rl", torch_report=True)


@app.command("cka-rl")
def cka_rl_cmd(
    tasks: Annotated[str, typer.Option("--tasks", help="Task sequence name (flip4).")] = "flip4",
    steps: Annotated[
        int, typer.Option("--steps", min=1, help="Environment steps per task.")
    ] = 40_000,
    methods: Annotated[
        str, typer.Option("--methods", help="Comma-separated: scratch,finetune,cka-rl.")
    ] = "scratch,finetune,cka-rl",
    seeds: Annotated[str, typer.Option("--seeds", help="Comma-separated seeds.")] = "0",
    pool_size: Annotated[
        int, typer.Option("--pool-size", min=1, help="Knowledge-pool capacity (CKA-RL).")
    ] = 3,
    merge_scope: Annotated[str, typer.Option("--merge-scope", help="task | tensor")] = "task",
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="Worker processes (one run each).")
    ] = 2,
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option("--checkpoint-dir", help="Save a safetensors checkpoint after every task."),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the per-run results as JSON.")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write learning curves (PNG) into this folder.")
    ] = None,
) -> None:
    """Train methods over a continual task sequence and print the continual-RL metrics."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import numpy as np

    from eff_rl.envs import task_sequence
    from eff_rl.metrics import forward_transfer
    from eff_rl.ppo import METHODS
    from eff_rl.reproduce.cka_rl import CKARLReproConfig, summarise
    from eff_shared.report import format_value, plot_series, print_rows

    method_list = [m.replace("-", "_") for m in csv_option(methods, str, option="--methods")]
    for m in method_list:
        if m not in METHODS:
            raise typer.BadParameter(
                f"unknown method {m!r}; valid: scratch, finetune, cka-rl", param_hint="--methods"
            )
    if merge_scope not in ("task", "tensor"):
        raise typer.BadParameter("must be one of ['task', 'tensor']", param_hint="--merge-scope")
    try:
        task_sequence(tasks)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    seed_list = csv_option(seeds, int, option="--seeds")
    cfg = CKARLReproConfig(sequence=tasks, steps_per_task=steps)
    jobs = [
        (
            cfg,
            m,
            s,
            pool_size,
            merge_scope,
            str(checkpoint_dir / f"{m}_seed{s}") if checkpoint_dir else None,
        )
        for s in seed_list
        for m in method_list
    ]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as ex:
        runs = list(ex.map(_cli_job, jobs))
    summaries = {(j[1], j[2]): summarise(r, steps) for j, r in zip(jobs, runs, strict=True)}

    rows = []
    for (m, s), sm in summaries.items():
        base = summaries.get(("scratch", s))
        ft = float("nan")
        if base is not None and m != "scratch":
            ft = float(
                np.nanmean(
                    [
                        forward_transfer(sm["auc"][k], base["auc"][k])
                        for k in range(1, len(sm["auc"]))
                    ]
                )
            )
        rows.append(
            {
                "method": m,
                "seed": s,
                "AUC per task": " ".join(format_value(a) for a in sm["auc"]),
                "mean AUC": sm["mean_auc"],
                "final perf (greedy)": sm["final_perf"],
                "FT": ft,
                "forgetting": float(np.mean(sm["forgetting"])),
                "pool bytes": sm["pool_bytes"],
                "env steps/s": sm["env_steps"] / max(sm["seconds"], 1e-9),
            }
        )
    runs_out = [{"method": j[1], "seed": j[2], **r} for j, r in zip(jobs, runs, strict=True)]
    print_rows(
        f"eff rl cka-rl: {tasks}, {steps} steps per task, seeds {seed_list}",
        rows,
        json_path,
        extra={"runs": runs_out},
    )
    if plot is not None:
        for j, r in zip(jobs, runs, strict=True):
            steps_all, rets = [], []
            for t in r["tasks"]:
                steps_all += [t["task"] * steps + s for s in t["curve"]["episode_steps"]]
                rets += t["curve"]["episode_returns"]
            out = plot_series(
                plot / f"{j[1]}_seed{j[2]}.png",
                {"x": steps_all, "episode return": rets},
                title=f"{j[1]}, seed {j[2]}",
                xlabel="env steps",
                ylabel="return",
                logy=False,
            )
            if out is None:
                raise typer.BadParameter("--plot needs matplotlib: pip install 'eff-rl[plot]'")


def _cli_job(args: tuple) -> dict:
    """One (method, seed) run in a worker process (the worker's entry point: one torch thread)."""
    from eff_rl.envs import task_sequence
    from eff_rl.ppo import train_sequence
    from eff_shared.torch import pin_threads

    pin_threads(1)
    cfg, method, seed, pool_size, scope, ckpt = args
    res = train_sequence(
        task_sequence(cfg.sequence),
        method,
        cfg.steps_per_task,
        seed,
        pool_size,
        merge_scope=scope,
        checkpoint_dir=ckpt,
        **cfg.train_kwargs(),
    )
    return res.to_dict()
