"""`eff vision ...`: the command-line entry of eff-vision, plugged into `eff` via `eff.commands`.

Each method owns one section below (``# --- <method> ---``; edit only your own section). Keep
imports of heavy modules inside the command functions so `eff --help` stays fast. Every command
pins torch/BLAS to one thread, takes ``--seed`` and ``--json PATH`` and prints a table.
"""

from pathlib import Path
from typing import Annotated

import typer

from eff_shared.cli import domain_app

app = domain_app("eff-vision", torch_report=True)

# --- shared helpers ----------------------------------------------------------------------------


def _pin_threads() -> None:
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)


def _print_rows(title: str, rows: list[dict], json_path: Path | None, extra=None) -> None:
    """Print ``rows`` (one dict per method) as a table; write them (and ``extra``) as JSON."""
    import json
    import sys

    from rich.console import Console
    from rich.table import Table

    from eff_shared.report import format_value

    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(format_value(row.get(c, "")) for c in columns))
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"rows": rows, **(extra or {})}
        json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def _split(text: str, allowed: tuple[str, ...], name: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise typer.BadParameter(f"choose from {', '.join(allowed)}; got {text!r}", param_hint=name)
    return items


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
    _pin_threads()
    from eff_vision.reproduce.tensor_compress import TensorCompressConfig, experiment

    methods = _split(method, ("tucker2", "cp"), "--method")
    out = experiment(TensorCompressConfig(ratio=ratio, epochs=epochs), seed)
    keep = {"tucker2": "Tucker", "cp": "CPD"}
    rows = [
        r
        for r in out["rows"]
        if r["method"] == "original" or any(r["method"].startswith(keep[m]) for m in methods)
    ]
    _print_rows(
        f"eff vision tensor-compress: ratio {ratio}, seed {seed} (Σ: uncentred second moment)",
        rows,
        json_path,
        {"ranks": out["ranks"], "original_accuracy": out["orig_acc"]},
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
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """Frequency-component fingerprint (our construction) vs a naive weight watermark under attacks."""
    _pin_threads()
    from eff_vision.reproduce.fingerprint import ATTACKS, FingerprintReproConfig, experiment

    kinds = tuple(_split(attack, ATTACKS, "--attack"))
    cfg = FingerprintReproConfig(
        bits=bits, attacks=kinds, owner_epochs=owner_epochs, attack_epochs=attack_epochs
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
    _print_rows(f"eff vision fingerprint: {bits} bits, seed {seed}", rows, json_path)
