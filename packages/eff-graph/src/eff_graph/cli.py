"""`eff graph ...`: the command-line entry of eff-graph, plugged into `eff` via `eff.commands`.

``eff graph imgda`` trains ImGDA and its baselines on generated CSBM domain pairs; ``eff graph
remindrag`` runs naive traversal and ReMindRAG over the passes of the multi-hop QA world. Both print a
table and take ``--json PATH``. torch runs single-threaded (shared machines).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer

from eff_shared.cli import csv_option, domain_app
from eff_shared.report import parse_csv, print_rows, write_rows_json

app = domain_app("eff-graph", torch_report=True)

API_KEY_VARS = ("EFF_LLM_API_KEY", "OPENAI_API_KEY")


def _choice(value: str, allowed: tuple[str, ...], hint: str) -> str:
    if value not in allowed:
        raise typer.BadParameter(f"must be one of {list(allowed)}, got {value!r}", param_hint=hint)
    return value


@app.command("imgda")
def imgda_cmd(
    imbalance: Annotated[
        float, typer.Option("--imbalance", help="Source imbalance factor ρ (>= 1).")
    ] = 20.0,
    num_classes: Annotated[
        int, typer.Option("--num-classes", min=2, help="Classes C of the CSBM pair (>= 2).")
    ] = 5,
    seeds: Annotated[str, typer.Option("--seeds", help="Comma-separated seeds.")] = "0,1,2",
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Training epochs.")] = 100,
    global_op: Annotated[str, typer.Option("--global-op", help="ppr | ppmi")] = "ppr",
    cross_domain: Annotated[
        str, typer.Option("--cross-domain", help="infonce | official")
    ] = "infonce",
    prototypes: Annotated[str, typer.Option("--prototypes", help="anchors | all")] = "anchors",
    shift: Annotated[
        str,
        typer.Option(
            "--shift",
            help="Target shift: both (features and sparser graph) | structure | feature.",
        ),
    ] = "both",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the per-run results as JSON.")
    ] = None,
) -> None:
    """ImGDA vs GCN source-only, class-balanced GCN, DANN-GCN and the dual-branch CE-only ablation on
    CSBM source/target pairs; target macro-F1, accuracy and minority recall (last epoch)."""
    import numpy as np

    with warnings.catch_warnings():  # torch_geometric 2.8 calls the deprecated torch.jit.script
        warnings.filterwarnings("ignore", message=".*torch.jit.script", category=FutureWarning)
        from eff_graph.da import DANNGCN, ClassBalancedGCN, SourceOnlyGCN
        from eff_graph.imgda import CROSS_DOMAIN, GLOBAL_OPS, PROTOTYPES, ImGDA
    from eff_graph.data import SHIFTS, csbm_domain_pair
    from eff_graph.metrics import accuracy, macro_f1, per_class_recall
    from eff_shared.torch import pin_threads

    pin_threads(1)
    _choice(shift, SHIFTS, "--shift")
    _choice(global_op, GLOBAL_OPS, "--global-op")
    _choice(cross_domain, CROSS_DOMAIN, "--cross-domain")
    _choice(prototypes, PROTOTYPES, "--prototypes")
    seed_list = csv_option(seeds, int, option="--seeds")
    if min(seed_list) < 0:
        raise typer.BadParameter("give at least one seed >= 0", param_hint="--seeds")
    c, hidden = num_classes, 64
    common = {"hidden_channels": hidden, "anchors_per_class": 50, "epochs": epochs}
    methods = {
        "GCN source-only": lambda s: SourceOnlyGCN(32, c, seed=s, epochs=epochs),
        "GCN class-balanced": lambda s: ClassBalancedGCN(32, c, seed=s, epochs=epochs),
        "DANN-GCN (λ 0.1)": lambda s: DANNGCN(32, c, grl_weight=0.1, seed=s, epochs=epochs),
        "dual-branch CE only": lambda s: ImGDA(
            32, c, seed=s, global_op=global_op, cb_weight=0.0, cd_weight=0.0, **common
        ),
        "ImGDA": lambda s: ImGDA(
            32, c, seed=s, global_op=global_op, cross_domain=cross_domain, prototypes=prototypes,
            **common,
        ),
    }  # fmt: skip
    rows = []
    for s in seed_list:
        try:
            source, target = csbm_domain_pair(
                num_classes=c, imbalance=imbalance, seed=s, shift=shift
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--imbalance") from exc
        for name, make in methods.items():
            pred = make(s).fit(source, target).predict(target)
            rows.append(
                {
                    "method": name,
                    "seed": s,
                    "macro_f1": macro_f1(pred, target.y),
                    "accuracy": accuracy(pred, target.y),
                    "minority_recall": float(per_class_recall(pred, target.y, c)[c - 1]),
                }
            )
    columns = {"macro_f1": "macro-F1", "accuracy": "accuracy", "minority_recall": "minority recall"}
    means = [
        {"method": name, "seed": "mean"}
        | {k: float(np.mean([r[k] for r in rows if r["method"] == name])) for k in columns}
        for name in methods
    ]
    print_rows(
        f"eff graph imgda: imbalance {imbalance:g}, {epochs} epochs, global op {global_op}, "
        f"cross-domain {cross_domain}, prototypes {prototypes}, shift {shift} "
        "(last epoch, target graph)",
        [
            {"method": r["method"], "seed": r["seed"]} | {columns[k]: r[k] for k in columns}
            for r in rows + means
        ],
    )
    if json_path is not None:
        settings = {
            "imbalance": imbalance,
            "num_classes": num_classes,
            "epochs": epochs,
            "global_op": global_op,
            "cross_domain": cross_domain,
            "prototypes": prototypes,
            "shift": shift,
            "seeds": seed_list,
        }
        write_rows_json(json_path, rows, {"settings": settings})


@app.command("remindrag")
def remindrag_cmd(
    embedder: Annotated[str, typer.Option("--embedder", help="hashing | minilm")] = "hashing",
    passes: Annotated[
        str,
        typer.Option("--passes", help="Passes after the original one: repeat, para1, para2."),
    ] = "repeat,para1,para2",
    seed: Annotated[int, typer.Option("--seed", min=0, help="World seed.")] = 0,
    hash_dim: Annotated[
        int, typer.Option("--hash-dim", min=1, help="Buckets of the hashing embedder.")
    ] = 4096,
    hops: Annotated[
        str,
        typer.Option(
            "--hops",
            help="Hop counts of the questions, cycled (2-5; 4 = birth country, 5 = continent).",
        ),
    ] = "2,3",
    max_jumps: Annotated[
        int,
        typer.Option(
            "--max-jumps",
            min=0,
            help="ReMindRAG traversal budget; 4+ hop questions need more than the default 10.",
        ),
    ] = 10,
    llm_base_url: Annotated[
        str | None,
        typer.Option(
            "--llm-base-url",
            help="OpenAI-compatible server (API key from $EFF_LLM_API_KEY or $OPENAI_API_KEY); "
            "default: the deterministic scripted reader.",
        ),
    ] = None,
    llm_model: Annotated[str, typer.Option("--llm-model", help="Model name.")] = "gpt-4o-mini",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the per-pass results as JSON.")
    ] = None,
) -> None:
    """Naive LLM-guided KG traversal vs ReMindRAG over repeated and paraphrased multi-hop questions:
    accuracy, LLM calls and prompt tokens per query."""
    from eff_graph.data import PASSES, multihop_world
    from eff_graph.metrics import answer_correct
    from eff_graph.remindrag import (
        HashingEmbedder,
        LLMProtocolError,
        MiniLMEmbedder,
        OpenAICompatibleClient,
        ReMindRAG,
        ScriptedReader,
        build_world_kg,
    )
    from eff_shared.torch import pin_threads

    _choice(embedder, ("hashing", "minilm"), "--embedder")
    chosen = csv_option(passes, str, option="--passes")
    for p in chosen:
        _choice(p, PASSES[1:], "--passes")
    run_passes = ["original", *chosen]
    if embedder == "minilm":
        pin_threads(1)
        try:
            emb: Any = MiniLMEmbedder()
        except ImportError as exc:
            raise typer.BadParameter(str(exc), param_hint="--embedder") from exc
    else:
        emb = HashingEmbedder(hash_dim)
    try:
        hop_list = tuple(parse_csv(hops, int, name="--hops"))
        chunks, triples, questions = multihop_world(seed=seed, hops=hop_list)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--hops") from exc
    if llm_base_url:
        key = next((os.environ[v] for v in API_KEY_VARS if os.environ.get(v)), None)
        try:
            llm: Any = OpenAICompatibleClient(llm_base_url, api_key=key, model=llm_model)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--llm-base-url") from exc
    else:
        llm = ScriptedReader([q for p in PASSES for q in questions[p]])
    rows, errors = [], 0
    for method, kw in (("naive traversal", {"memorize": False}), ("ReMindRAG", {})):
        rag = ReMindRAG(build_world_kg(chunks, triples), llm, emb, max_jumps=max_jumps, **kw)
        for p in run_passes:
            correct, calls, tokens = [], [], []
            for q in questions[p]:
                try:
                    r = rag.query(q.text)
                except LLMProtocolError:
                    errors += 1
                    correct.append(False)
                    continue
                correct.append(answer_correct(r.answer, q.answer))
                calls.append(r.llm_calls)
                tokens.append(r.prompt_tokens)
            rows.append(
                {
                    "pass": p,
                    "method": method,
                    "accuracy": sum(correct) / len(correct),
                    "calls_per_query": sum(calls) / max(len(calls), 1),
                    "prompt_tokens_per_query": sum(tokens) / max(len(tokens), 1),
                }
            )
    naive = {r["pass"]: r["calls_per_query"] for r in rows if r["method"] == "naive traversal"}
    for r in rows:
        r["calls_vs_naive"] = r["calls_per_query"] / naive[r["pass"]] if naive[r["pass"]] else 0.0
    llm_name = llm_model if llm_base_url else "scripted reader"
    columns = {
        "pass": "pass",
        "method": "method",
        "accuracy": "accuracy",
        "calls_per_query": "calls/q",
        "prompt_tokens_per_query": "prompt tokens/q",
        "calls_vs_naive": "ratio vs naive",
    }
    print_rows(
        f"eff graph remindrag: world seed {seed}, {embedder} embedder, {llm_name}",
        [
            {label: r[k] for k, label in columns.items()}
            for r in sorted(rows, key=lambda r: run_passes.index(r["pass"]))
        ],
    )
    if errors:
        typer.echo(f"{errors} queries failed with unusable LLM replies (counted as wrong)")
    if json_path is not None:
        settings = {
            "embedder": embedder,
            "passes": run_passes,
            "seed": seed,
            "hash_dim": hash_dim if embedder == "hashing" else None,
            "hops": list(hop_list),
            "max_jumps": max_jumps,
            "llm": llm_name,
        }
        write_rows_json(json_path, rows, {"settings": settings, "protocol_errors": errors})
