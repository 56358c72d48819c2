"""`eff llm ...`: the command-line entry of eff-llm, plugged into `eff` via `eff.commands`.

Each method owns one section below (edit only your own section). Keep imports of heavy modules
inside the command functions so `eff --help` stays fast.
"""

from pathlib import Path
from typing import Annotated

import typer

from eff_shared.cli import domain_app

app = domain_app("eff-llm", torch_report=True)

# --- smore -----------------------------------------------------------------------------------

# --- deft ------------------------------------------------------------------------------------

# --- lorasuite -------------------------------------------------------------------------------

# --- prompt_memorization ---------------------------------------------------------------------

# --- fedsvd ----------------------------------------------------------------------------------


@app.command("fedsvd")
def fedsvd_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    eps: Annotated[float, typer.Option("--eps", help="Target epsilon of sample-level DP.")] = 6.0,
    rank: Annotated[int, typer.Option("--rank", min=1)] = 4,
    rounds: Annotated[int, typer.Option("--rounds", min=1)] = 40,
    clients: Annotated[int, typer.Option("--clients", min=1)] = 6,
    alpha: Annotated[
        float, typer.Option("--alpha", help="Dirichlet concentration of the label split.")
    ] = 0.5,
    backend: Annotated[str, typer.Option("--backend", help="inprocess | flower")] = "inprocess",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result as JSON.")
    ] = None,
) -> None:
    """FedSVD vs FFA-LoRA and FedAvg-LoRA under the same DP noise (the llm.fedsvd task)."""
    import torch

    torch.set_num_threads(1)
    _check_backend(backend)
    from eff_llm.reproduce.fedsvd import FedSVDRunConfig
    from eff_llm.reproduce.fedsvd import run as run_fedsvd

    if backend == "flower":
        _flower_fedsvd(seed, eps, rank, rounds, clients, alpha)
        return
    try:
        cfg = FedSVDRunConfig(
            rank=rank,
            epsilon=eps,
            rounds=rounds,
            clients=clients,
            dirichlet_alpha=alpha,
            clients_per_round=max(1, clients // 2),
        )
        result = run_fedsvd("quick", seed, cfg)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    _print_result(result, json_path)


@app.command("yoco")
def yoco_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    clients: Annotated[int, typer.Option("--clients", min=1)] = 10,
    alpha: Annotated[
        float, typer.Option("--alpha", help="Dirichlet concentration of the label split.")
    ] = 0.5,
    a_reg: Annotated[str, typer.Option("--a-reg", help="l1 | orth_rr | orth_code")] = "l1",
    backend: Annotated[
        str, typer.Option("--backend", help="inprocess (YOCO is one-shot; Flower: num_rounds=1)")
    ] = "inprocess",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result as JSON.")
    ] = None,
) -> None:
    """One-shot YOCO vs one-shot FedAvg-LoRA (the llm.yoco task)."""
    import torch

    torch.set_num_threads(1)
    _check_backend(backend, allowed=("inprocess",))
    from eff_llm.reproduce.yoco import YOCORunConfig
    from eff_llm.reproduce.yoco import run as run_yoco

    try:
        result = run_yoco(
            "quick", seed, YOCORunConfig(clients=clients, dirichlet_alpha=alpha, a_reg=a_reg)
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    _print_result(result, json_path)


def _check_backend(backend: str, allowed: tuple[str, ...] = ("inprocess", "flower")) -> None:
    if backend not in allowed:
        raise typer.BadParameter(
            f"must be one of {list(allowed)}, got {backend!r}", param_hint="--backend"
        )


def _print_result(result, json_path: Path | None) -> None:
    from rich.console import Console

    from eff_shared.report import print_results, write_json

    print_results([result], Console())
    if json_path is not None:
        write_json([result], json_path)


def _flower_fedsvd(
    seed: int, eps: float, rank: int, rounds: int, clients: int, alpha: float
) -> None:
    """FedSVD on a Flower simulation (Ray backend), clients as simulated supernodes."""
    import numpy as np

    from eff_llm._federated_lora import make_dp_lora_client
    from eff_llm._lora import lora_state
    from eff_llm._lowrank_task import accuracy, lora_model, make_lowrank_task
    from eff_llm.fedsvd import DPConfig, FedSVDAggregator, calibrate_noise
    from eff_llm.reproduce.fedsvd import FedSVDRunConfig
    from eff_shared.federated import dirichlet_partition
    from eff_shared.federated.flower import make_client_app, make_server_app, run_simulation

    cfg = FedSVDRunConfig(
        rank=rank, epsilon=eps, rounds=rounds, clients=clients, dirichlet_alpha=alpha
    )
    task = make_lowrank_task(seed, n_train=cfg.n_train, shift=cfg.shift)
    parts = dirichlet_partition(task.y_train.numpy(), clients, alpha, seed, min_size=cfg.batch_size)
    q = cfg.batch_size / float(np.mean([len(p) for p in parts]))
    sigma = calibrate_noise(
        DPConfig(eps, cfg.delta, cfg.max_grad_norm), q, cfg.local_steps * rounds
    )
    model = lora_model(task, rank, seed)
    client = make_dp_lora_client(
        model,
        "fedsvd",
        sigma=sigma,
        max_grad_norm=cfg.max_grad_norm,
        lr=cfg.lr,
        steps=cfg.local_steps,
        batch_size=cfg.batch_size,
    )
    out = {}
    server = make_server_app(
        FedSVDAggregator(), lora_state(model), rounds, on_finish=lambda r: out.setdefault("r", r)
    )
    app_ = make_client_app(
        client, lambda pid, n: (task.x_train[parts[pid]], task.y_train[parts[pid]]), seed=seed
    )
    run_simulation(server, app_, clients)
    from eff_llm._lora import load_lora_state

    load_lora_state(model, out["r"].final_state)
    print(
        f"FedSVD on Flower: sigma {sigma:.4f}, test accuracy {accuracy(model, task.x_test, task.y_test):.4f}"
    )


# --- yoco ------------------------------------------------------------------------------------

# --- omnidraft -------------------------------------------------------------------------------

# --- svdecode --------------------------------------------------------------------------------

# --- watermark -------------------------------------------------------------------------------

# --- lrc -------------------------------------------------------------------------------------

# --- nemotron_flash --------------------------------------------------------------------------

# --- gain_rl ---------------------------------------------------------------------------------
