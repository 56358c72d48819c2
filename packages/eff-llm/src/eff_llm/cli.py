"""`eff llm ...`: the command-line entry of eff-llm, plugged into `eff` via `eff.commands`.

Each method owns one section below (edit only your own section). Keep imports of heavy modules
inside the command functions so `eff --help` stays fast.
"""

from pathlib import Path
from typing import Annotated

import typer

from eff_shared.cli import domain_app
from eff_shared.report import parse_csv, print_rows

app = domain_app("eff-llm", torch_report=True)

# --- smore -----------------------------------------------------------------------------------


@app.command("smore")
def smore_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    dim: Annotated[int, typer.Option("--dim", min=2, help="Width D of the regression toy.")] = 32,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Adam steps per model.")] = 800,
    levels: Annotated[
        int, typer.Option("--levels", min=1, help="S'MoRE sub-layers L (4 experts, top-2, rank 2).")
    ] = 2,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """S'MoRE vs MoLoRA and LoRA on the clustered regression toy (the llm.smore task)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.smore import SMoREReproConfig, experiment

    cfg = SMoREReproConfig(
        dim=dim,
        steps=steps,
        num_experts=(4,) * levels,
        num_active=(2,) * levels,
        expert_ranks=(2,) * levels,
    )
    out = experiment(cfg, seed)
    print_rows(
        f"eff llm smore: D={dim}, L={levels}, {steps} steps, seed {seed}", out["rows"], json_path
    )


# --- deft ------------------------------------------------------------------------------------


@app.command("deft")
def deft_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    rank: Annotated[int, typer.Option("--rank", min=1, help="Adapter rank (DEFT and LoRA).")] = 4,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Adaptation steps.")] = 300,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """DEFT (relu, qr) vs LoRA adapting a tiny '+' Llama to '-' (the llm.deft task)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.deft import DeftReproConfig, experiment

    out = experiment(DeftReproConfig(rank=rank, adapt_steps=steps), seed)
    print_rows(
        f"eff llm deft: rank {rank}, {steps} steps, seed {seed} (base '+' accuracy "
        f"{out['base_acc']:.3f})",
        out["rows"],
        json_path,
        extra={"checks": out["checks"]},
    )


# --- lorasuite -------------------------------------------------------------------------------


@app.command("lorasuite")
def lorasuite_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    lft_steps: Annotated[int, typer.Option("--lft-steps", min=1, help="LFT Adam steps.")] = 60,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """Transfer a subtraction LoRA to a rotated / permuted / deepened tiny Llama (llm.lorasuite)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    import numpy as np

    from eff_llm.reproduce.lorasuite import LoRASuiteReproConfig, experiment

    out = experiment(LoRASuiteReproConfig(lft_steps=lft_steps), seed)
    truth, report = out["truth"], out["official"]["report"]
    wx = float((report.transfer_matrix - truth.rotation).norm() / truth.rotation.norm())
    heads = float(
        np.mean([np.mean(report.head_maps[i] == truth.head_perms[i]) for i in truth.head_perms])
    )
    summary = {
        "W_x error": wx,
        "layer map": str(report.layer_map),
        "true layer map": str(truth.layer_map),
        "head-map accuracy": heads,
        "old addition": out["old_add"],
        "old LoRA subtraction": out["old_lora_sub"],
    }
    print_rows(f"eff llm lorasuite: seed {seed}", [summary], None)
    print_rows(
        "subtraction accuracy on the new model", out["rows"], json_path, extra={"summary": summary}
    )


# --- prompt_memorization ---------------------------------------------------------------------


def _int_list(text: str, name: str) -> list[int]:
    """``"8 16 32"`` or ``"8,16,32"`` → ints; a usage error naming the option otherwise."""
    try:
        return parse_csv(text.replace(" ", ","), int, name=name)
    except ValueError as exc:
        raise typer.BadParameter(f"expected integers, got {text!r}", param_hint=name) from exc


@app.command("prompt-memorization")
def prompt_memorization_cmd(
    arch: Annotated[str, typer.Option("--arch", help="gpt2 | llama | qwen2")] = "gpt2",
    n: Annotated[str, typer.Option("--n", help="Dataset sizes, e.g. '8 16 32'.")] = "8 16 32",
    grid: Annotated[str, typer.Option("--grid", help="Prompt lengths tried.")] = "1 2 4 8 16 32",
    init_range: Annotated[
        str, typer.Option("--init-range", help="Backbone initializer_range values.")
    ] = "0.02 0.2",
    structure: Annotated[
        str, typer.Option("--structure", help="random and/or low_rank")
    ] = "random low_rank",
    seeds: Annotated[str, typer.Option("--seeds", help="Data seeds.")] = "2 3",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """Minimal soft-prompt length m*(n) that memorizes n random examples on a frozen random model."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.prompt_memorization import memorization_sweep

    try:
        inits = parse_csv(init_range.replace(" ", ","), float, name="--init-range")
    except ValueError as exc:
        raise typer.BadParameter(
            f"expected numbers, got {init_range!r}", param_hint="--init-range"
        ) from exc
    try:
        rows = memorization_sweep(
            _int_list(n, "--n"),
            _int_list(grid, "--grid"),
            parse_csv(structure.replace(" ", ","), name="--structure"),
            inits,
            _int_list(seeds, "--seeds"),
            arch=arch,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    shown = [
        {
            **{k: v for k, v in r.items() if k != "accuracy_per_m"},
            "accuracy per m": ", ".join(f"{m}: {a:.3f}" for m, a in r["accuracy_per_m"].items()),
        }
        for r in rows
    ]
    print_rows(f"eff llm prompt-memorization ({arch})", shown, json_path)


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
    optimizer: Annotated[
        str, typer.Option("--optimizer", help="Clients' optimizer: sgd | adam | adamw.")
    ] = "sgd",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result as JSON.")
    ] = None,
) -> None:
    """FedSVD vs FFA-LoRA and FedAvg-LoRA under the same DP noise (the llm.fedsvd task)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    _check_backend(backend)
    from eff_llm.reproduce.fedsvd import FedSVDReproConfig
    from eff_llm.reproduce.fedsvd import run as run_fedsvd

    if backend == "flower":
        _flower_fedsvd(seed, eps, rank, rounds, clients, alpha, optimizer)
        return
    try:
        cfg = FedSVDReproConfig(
            rank=rank,
            epsilon=eps,
            rounds=rounds,
            clients=clients,
            dirichlet_alpha=alpha,
            clients_per_round=max(1, clients // 2),
            optimizer=optimizer,
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
    from eff_shared.torch import pin_threads

    pin_threads(1)
    _check_backend(backend, allowed=("inprocess",))
    from eff_llm.reproduce.yoco import YOCOReproConfig
    from eff_llm.reproduce.yoco import run as run_yoco

    try:
        result = run_yoco(
            "quick", seed, YOCOReproConfig(clients=clients, dirichlet_alpha=alpha, a_reg=a_reg)
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
    seed: int, eps: float, rank: int, rounds: int, clients: int, alpha: float, optimizer: str
) -> None:
    """FedSVD on a Flower simulation (Ray backend), clients as simulated supernodes."""
    import numpy as np

    from eff_llm._lora import lora_state
    from eff_llm._lowrank_task import accuracy, lora_model, make_lowrank_task
    from eff_llm.fedsvd import DPConfig, FedSVDAggregator, calibrate_noise, make_dp_lora_client
    from eff_llm.reproduce.fedsvd import FedSVDReproConfig
    from eff_shared.federated import dirichlet_partition
    from eff_shared.federated.flower import make_client_app, make_server_app, run_simulation

    try:
        cfg = FedSVDReproConfig(
            rank=rank, epsilon=eps, rounds=rounds, clients=clients, dirichlet_alpha=alpha,
            optimizer=optimizer,
        )  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
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
        optimizer=cfg.optimizer,
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


@app.command("omnidraft")
def omnidraft_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    target_vocab: Annotated[int, typer.Option("--target-vocab", min=257)] = 1200,
    draft_vocab: Annotated[int, typer.Option("--draft-vocab", min=257)] = 400,
    k: Annotated[int, typer.Option("--k", min=1, help="Draft tokens per round.")] = 4,
    prompts: Annotated[int, typer.Option("--prompts", min=1, help="Held-out prompts.")] = 12,
    train_prompts: Annotated[
        int, typer.Option("--train-prompts", min=1, help="Prompts whose SD outputs are distilled.")
    ] = 48,
    steps: Annotated[
        int, typer.Option("--steps", min=1, help="LM training steps per model.")
    ] = 400,
    distill: Annotated[
        str, typer.Option("--distill", help="none | dm | hybrid | all (dm and hybrid)")
    ] = "all",
    target_tokenizer: Annotated[
        Path | None,
        typer.Option("--target-tokenizer", help="A tokenizer.json for the target (not trained)."),
    ] = None,
    draft_tokenizer: Annotated[
        Path | None,
        typer.Option("--draft-tokenizer", help="A tokenizer.json for the drafter (not trained)."),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """OmniDraft (oracle/learned drafter, DM vs n-gram cache, distillation) vs HF UAD (llm.omnidraft)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.omnidraft import OmniDraftReproConfig, experiment

    choices = {"none": (), "dm": ("dm",), "hybrid": ("hybrid",), "all": ("dm", "hybrid")}
    if distill not in choices:
        raise typer.BadParameter(
            f"must be one of {list(choices)}, got {distill!r}", param_hint="--distill"
        )
    from tokenizers import Tokenizer

    toks = {}
    for hint, path in (
        ("--target-tokenizer", target_tokenizer),
        ("--draft-tokenizer", draft_tokenizer),
    ):
        if path is not None:
            try:
                toks[hint] = Tokenizer.from_file(str(path))
            except Exception as exc:  # tokenizers raises its own Exception type
                raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint=hint) from exc
    try:
        cfg = OmniDraftReproConfig(
            target_tokenizer=toks.get("--target-tokenizer"),
            draft_tokenizer=toks.get("--draft-tokenizer"),
            target_vocab=target_vocab,
            draft_vocab=draft_vocab,
            num_draft_tokens=k,
            prompts=prompts,
            train_prompts=train_prompts,
            steps=steps,
            distill=choices[distill],
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    out = experiment(cfg, seed)
    t_size, d_size = (
        toks[h].get_vocab_size() if h in toks else v
        for h, v in (("--target-tokenizer", target_vocab), ("--draft-tokenizer", draft_vocab))
    )
    rows = [
        {
            "mode": name,
            "τ": r["tau"],
            "acceptance": r.get("acceptance", ""),
            "exact match": r["exact_match"],
            "n-gram hits": r.get("ngram_hits", ""),
            "cache size": r.get("cache_size", ""),
        }
        for name, r in out["rows"].items()
    ]
    print_rows(
        f"eff llm omnidraft: vocab {t_size} target / {d_size} drafter, k = {k}, "
        f"{prompts} prompts, seed {seed} (τ = tokens per target forward)",
        rows,
        json_path,
        extra={"pair": out["pair"], "train_cache_size": out["train_cache_size"]},
    )


# --- svdecode --------------------------------------------------------------------------------


def _seed_list(text: str) -> list[int]:
    """'1-4' or '1,2,5' → list of ints."""
    try:
        if "-" in text and "," not in text:
            lo, hi = (int(t) for t in text.split("-", 1))
            return list(range(lo, hi + 1))
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError as exc:
        raise typer.BadParameter(f"expected '1-4' or '1,2,3', got {text!r}") from exc


@app.command("svdecode")
def svdecode_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0, help="Offset added to --seeds.")] = 0,
    modulus: Annotated[int, typer.Option("--modulus", min=2)] = 16,
    shift: Annotated[int, typer.Option("--shift", min=1, help="Downstream (a+b+shift) mod m.")] = 5,
    warm_steps: Annotated[
        str, typer.Option("--warm-steps", help="Warm-start lengths, e.g. '4,8,16,32'.")
    ] = "4,8,16,32",
    seeds: Annotated[str, typer.Option("--seeds", help="e.g. '1-4' or '1,2'.")] = "1-4",
    mu_reduction: Annotated[
        str, typer.Option("--mu-reduction", help="ratio | mean | median | trimmed")
    ] = "ratio",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result as JSON.")
    ] = None,
) -> None:
    """SVDecode vs the warm start on the shifted modular-addition task (llm.svdecode)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.svdecode import SVDecodeReproConfig
    from eff_llm.reproduce.svdecode import run as run_svdecode

    try:
        cfg = SVDecodeReproConfig(
            modulus=modulus,
            shift=shift,
            warm_steps=tuple(_int_list(warm_steps, "--warm-steps")),
            seeds=tuple(_seed_list(seeds)),
            mu_reduction=mu_reduction,
        )
        result = run_svdecode("quick", seed, cfg)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    _print_result(result, json_path)


# --- watermark -------------------------------------------------------------------------------


@app.command("watermark")
def watermark_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    methods: Annotated[
        str, typer.Option("--methods", help="Comma list of kgw,gumbel,simplexwater,heavywater.")
    ] = "kgw,gumbel,simplexwater,heavywater",
    vocab: Annotated[int, typer.Option("--vocab", min=2)] = 1000,
    entropy_scale: Annotated[float, typer.Option("--entropy-scale")] = 9.0,
    tokens: Annotated[int, typer.Option("--tokens", min=1)] = 30,
    seqs: Annotated[int, typer.Option("--seqs", min=1)] = 100,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result as JSON.")
    ] = None,
) -> None:
    """HeavyWater / SimplexWater vs KGW and Gumbel on the synthetic low-entropy LM (llm.watermark)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.watermark import WatermarkReproConfig
    from eff_llm.reproduce.watermark import run as run_watermark

    allowed = ("kgw", "gumbel", "simplexwater", "heavywater")
    try:
        chosen = parse_csv(methods, name="--methods", allowed=allowed)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--methods") from exc
    # The claims compare against KGW and the HeavyWater tilt: always run them.
    run_methods = tuple(
        dict.fromkeys([*chosen, "kgw", "simplexwater", "heavywater", "heavywater_tilt"])
    )
    try:
        cfg = WatermarkReproConfig(
            vocab=vocab,
            entropy_scale=entropy_scale,
            tokens=tokens,
            seqs=seqs,
            methods=run_methods,
        )
        result = run_watermark("quick", seed, cfg)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    _print_result(result, json_path)


# --- lrc -------------------------------------------------------------------------------------


@app.command("lrc")
def lrc_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    student_hidden: Annotated[
        int, typer.Option("--student-hidden", min=1, help="Student hidden size d_S (< 128).")
    ] = 48,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Distillation steps.")] = 200,
    clone_weight: Annotated[
        float, typer.Option("--clone-weight", min=0.0, help="α of the activation-clone loss.")
    ] = 0.2,
    baseline: Annotated[str, typer.Option("--baseline", help="scratch | no-clone | both")] = "both",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """Low-Rank Clone of a tiny docstring-LM teacher vs scratch / no-clone baselines (llm.lrc)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.lrc import LRCReproConfig, experiment

    chosen = {"scratch": ("scratch",), "no-clone": ("no_clone",), "both": ("scratch", "no_clone")}
    if baseline not in chosen:
        raise typer.BadParameter(
            f"must be one of {list(chosen)}, got {baseline!r}", param_hint="--baseline"
        )
    try:
        cfg = LRCReproConfig(student_hidden=student_hidden, steps=steps, clone_weight=clone_weight)
        out = experiment(cfg, seed, chosen[baseline])
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    rows = [{"model": name, **r} for name, r in out["rows"].items()]
    print_rows(
        f"eff llm lrc: d_S={student_hidden}, {steps} steps, α={clone_weight}, seed {seed} "
        f"(max |Δlogit| merged vs functional {out['checks']['max_logit_diff']:.1e})",
        rows,
        json_path,
        extra={"checks": out["checks"], "corpus_sha256": out["sha256"]},
    )


@app.command("lrc-train")
def lrc_train_cmd(
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimisation steps.")] = 4,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Global batch (split over processes).")
    ] = 8,
    seq_len: Annotated[int, typer.Option("--seq-len", min=2, help="Window length.")] = 16,
    teacher_hidden: Annotated[
        int, typer.Option("--teacher-hidden", min=4, help="Teacher hidden size (4 heads).")
    ] = 32,
    student_hidden: Annotated[
        int, typer.Option("--student-hidden", min=1, help="Student hidden size d_S.")
    ] = 16,
    lr: Annotated[float, typer.Option("--lr", min=0.0, help="AdamW learning rate.")] = 3e-3,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    corpus: Annotated[
        bool, typer.Option("--corpus", help="Docstring corpus + BPE-1200 (else random tokens).")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", "--json", help="Write the summary (losses, parameters) as JSON."),
    ] = None,
) -> None:
    """Train a tiny LRC student with ``accelerate`` (``accelerate launch -m eff_shared llm
    lrc-train ...`` for several processes or GPUs); the main process prints and writes the summary.

    The teacher is a seeded random tiny Llama and the data random tokens, so the command needs no
    corpus and runs in seconds; with ``--corpus`` it uses the docstring corpus and BPE-1200.
    """
    from eff_shared.torch import pin_threads

    pin_threads(1)
    import torch
    from accelerate import Accelerator

    from eff_llm._lm_train import TrainConfig, train_lm
    from eff_llm._models import tiny_llama
    from eff_llm.lrc import LowRankClone, LowRankCloneConfig

    acc = Accelerator()
    if corpus:
        from eff_llm.corpus import docstring_lm_data

        stream = docstring_lm_data(1200).train
        vocab = 1200
    else:
        vocab = 64
        stream = torch.randint(0, vocab, (4096,), generator=torch.Generator().manual_seed(seed))
    teacher = tiny_llama(
        vocab_size=vocab,
        hidden_size=teacher_hidden,
        num_heads=4,
        intermediate_size=2 * teacher_hidden,
        max_position_embeddings=max(64, seq_len),
        seed=seed,
    )
    model = LowRankClone(teacher, LowRankCloneConfig(student_hidden, kl_temperature=1.0), seed=seed)
    cfg = TrainConfig(steps=steps, batch_size=batch_size, seq_len=seq_len, lr=lr, seed=seed)
    log = train_lm(model, lambda m, x: m(x).loss, stream, cfg, accelerator=acc)
    params = {
        k: v.detach().cpu()
        for k, v in acc.unwrap_model(model).named_parameters()
        if v.requires_grad
    }
    summary = {
        "num_processes": log.num_processes,
        "losses": log.losses,
        "params": {k: v.reshape(-1).tolist() for k, v in params.items()},
    }
    if acc.is_main_process:
        from eff_shared.report import print_rows

        row = {
            "processes": log.num_processes,
            "steps": steps,
            "first loss": log.losses[0],
            "last loss": log.losses[-1],
            "trainable": sum(v.numel() for v in params.values()),
        }
        title = f"eff llm lrc-train: d_T={teacher_hidden} → d_S={student_hidden}"
        print_rows(title, [row], out, extra=summary)
    acc.wait_for_everyone()


# --- nemotron_flash --------------------------------------------------------------------------

nemotron_flash_app = typer.Typer(
    help="Nemotron-Flash: weight-norm training, hybrid-architecture search, CPU latency LUT.",
    no_args_is_help=True,
)
app.add_typer(nemotron_flash_app, name="nemotron-flash")


@nemotron_flash_app.command("wnorm")
def nemotron_flash_wnorm_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Training steps per run.")] = 300,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds seed, seed+1, ...")] = 3,
    family: Annotated[
        str,
        typer.Option("--family", help="llama | qwen3_next | nemotron_h | hybrid_slm"),
    ] = "llama",
    operators: Annotated[
        str, typer.Option("--operators", help="HybridSLM operators (--family hybrid_slm).")
    ] = "d f a f",
    normalise_deltanet: Annotated[
        bool,
        typer.Option(
            "--normalise-deltanet/--keep-deltanet",
            help="Also normalise the Gated DeltaNet projections (default: left alone).",
        ),
    ] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """Weight normalisation (wd 0) vs AdamW wd 0.1 on a tiny docstring LM (val CE)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.nemotron_flash import NemotronFlashReproConfig, weight_norm_experiment

    try:
        cfg = NemotronFlashReproConfig(
            steps=steps,
            family=family,
            hybrid_operators=operators,
            **({"wnorm_exclude_modules": ()} if normalise_deltanet else {}),
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    rows = []
    for s in range(seed, seed + seeds):
        for name, r in weight_norm_experiment(cfg, s).items():
            rows.append({"seed": s, "run": name, **r})
    print_rows(f"eff llm nemotron-flash wnorm: {family}, {steps} steps", rows, json_path)


@nemotron_flash_app.command("search")
def nemotron_flash_search_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    budget_ms: Annotated[
        float, typer.Option("--budget-ms", help="Latency budget (synthetic LUT, ms/token).")
    ] = 3.0,
    cycles: Annotated[int, typer.Option("--cycles", min=1)] = 20,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result as JSON.")
    ] = None,
) -> None:
    """Aging evolution vs random search on the synthetic PPL proxy (llm.nemotron_flash item 4)."""
    from eff_llm.nemotron_flash import SearchSpace, aging_evolution, random_search
    from eff_llm.reproduce.nemotron_flash import SyntheticObjective, synthetic_lut

    space = SearchSpace(max_blocks=3)
    lut, objective = synthetic_lut(space), SyntheticObjective()
    try:
        ae = aging_evolution(space, objective, lut, budget_ms, cycles=cycles, seed=seed)
        rs = random_search(space, objective, lut, budget_ms, evaluations=ae.evaluations, seed=seed)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    rows = [
        {
            "search": name,
            "fitness": r.fitness,
            "latency ms": r.latency_ms,
            "hidden": r.arch.hidden_size,
            "operators": " ".join(r.arch.operators),
            "evaluations": r.evaluations,
        }
        for name, r in (("aging evolution", ae), ("random search", rs))
    ]
    print_rows(f"eff llm nemotron-flash search: budget {budget_ms} ms", rows, json_path)


@nemotron_flash_app.command("lut")
def nemotron_flash_lut_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    hidden: Annotated[str, typer.Option("--hidden", help="Hidden sizes, e.g. '64 128'.")] = "64",
    seq_len: Annotated[int, typer.Option("--seq-len", min=1, help="Prefill length.")] = 64,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """Measure the per-operator single-token decode LUT on this device (ms/token)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.nemotron_flash import LatencyLUT

    sizes = _int_list(hidden, "--hidden")
    lut = LatencyLUT.measure(
        ops=("a", "swa", "d", "m2", "f"), hidden_sizes=sizes, seq_len=seq_len, seed=seed
    )
    rows = [{"operator": o, "hidden": h, "ms/token": t} for (o, h), t in sorted(lut.table.items())]
    rows += [{"operator": "overhead", "hidden": h, "ms/token": t} for h, t in lut.overhead.items()]
    print_rows(f"eff llm nemotron-flash lut ({lut.device})", rows, json_path)


# --- gain_rl ---------------------------------------------------------------------------------


@app.command("gain-rl")
def gain_rl_cmd(
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    task: Annotated[str, typer.Option("--task", help="modadd ((a + b) mod 16)")] = "modadd",
    seeds: Annotated[int, typer.Option("--seeds", min=1)] = 1,
    sampler: Annotated[str, typer.Option("--sampler", help="uniform | gainrl | both")] = "both",
    threshold: Annotated[float, typer.Option("--threshold", help="Train-accuracy target.")] = 0.8,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Max GRPO steps.")] = 1200,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON.")
    ] = None,
) -> None:
    """GRPO with the GAIN-RL angle curriculum vs uniform sampling on the toy task (llm.gain_rl)."""
    from eff_shared.torch import pin_threads

    pin_threads(1)
    from eff_llm.reproduce.gain_rl import GainRLReproConfig, end_to_end

    if task != "modadd":
        raise typer.BadParameter(f"must be one of ['modadd'], got {task!r}", param_hint="--task")
    chosen = {"uniform": ("uniform",), "gainrl": ("gainrl",), "both": ("uniform", "gainrl")}
    if sampler not in chosen:
        raise typer.BadParameter(
            f"must be one of {list(chosen)}, got {sampler!r}", param_hint="--sampler"
        )
    try:
        cfg = GainRLReproConfig(threshold=threshold, steps=steps)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    rows = []
    for s in range(seed, seed + seeds):
        out = end_to_end(cfg, s, chosen[sampler])
        for name in chosen[sampler]:
            rows.append(
                {
                    "seed": s,
                    "sampler": name,
                    "warm-start accuracy": out["warm_accuracy"],
                    f"steps to {threshold:.0%}": out[name]["steps_to_threshold"],
                    "final accuracy": out[name]["final_accuracy"],
                    "seconds": out[name]["seconds"],
                }
            )
    print_rows(f"eff llm gain-rl: {task}, ≤ {steps} steps", rows, json_path)
