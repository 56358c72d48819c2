"""Reproduction ``vision.fedphoenix``: FedPhoenix vs FedAvg on Dirichlet non-IID digits, on the
in-process federated runtime (``eff_shared.federated``).

Setting (spec): scikit-learn digits (8×8, /16), 1,437 train / 360 test (seeded split); CNN
conv(1→16) → ReLU → conv(16→32) → ReLU → maxpool 2 → fc(512→10); 20 clients, Dirichlet β = 0.1
(``dirichlet_partition``, at least 10 samples each), 5 clients per round, 150 rounds, 1 local
epoch of SGD (lr 0.05, batch 16). FedPhoenix: θ = 2/32, r_s ∈ {0.8, 0.4}·rounds, the reset applied
to each selected client's copy through the runner's ``pre_local_train`` hook. Every method starts
from the same initial model and the same client sampling / batch streams (one master seed).
Metric: mean test accuracy over the last 10 rounds (no model selection); best accuracy and rounds
to 0.9 are printed as information.

The paper's gain (up to +20.73 %) did **not** reproduce in the spec's prototype (FedAvg 0.940,
FedPhoenix 0.858 / 0.896): the resets hurt on this small, easy task with a short recovery window.
The learning claim is therefore a non-inferiority bound (FedPhoenix with r_s = 0.4·R within 0.06 of
FedAvg, a paper claim over seeds) and the paper's gain is an xfail paper claim; the mechanics items
are checks. Quick mode runs 100 rounds with r_s = 0.4·R at one seed; full mode runs 150 rounds at
5 seeds, adds r_s = 0.8·R (reported, no claim) and β = 0.3 (information, master seed).

Client-specific spurious features (issue #26; full mode, :func:`marker_section`), the setting the
paper motivates: on client c every training image carries a marker pixel (value
:data:`MARKER`, outside the digits' [0, 1]) at row c mod 8, column y mod 8 — a label code at a
position of the client's own — and the test set has none (:func:`marker_transform`). FedPhoenix
(r_s = 0.4·R) against FedAvg on seeds seed..seed+4 in federations of :data:`MARKER_ROUNDS`
rounds (as the main runs); whether FedAvg learned the marker at all is printed (its accuracy
with the marker added to the test images against without, :func:`marker_reliance`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from eff_shared.errors import check_choice, check_int, check_type
from eff_shared.federated import FedAvg, InProcessRunner, dirichlet_partition
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed, make_rng
from eff_shared.torch import torch_generator
from eff_vision.data.digits import digits_splits
from eff_vision.fedphoenix import PhoenixReset, ResetTrace, phoenix_pre_local_train
from eff_vision.models import FedDigitsCNN  # re-exported: it lived here

__all__ = [
    "ClientConfig",
    "FedDigitsCNN",
    "FedPhoenixReproConfig",
    "accuracy",
    "client_update",
    "federate",
    "marker_reliance",
    "marker_section",
    "marker_transform",
    "mechanics",
    "run",
    "with_marker",
]


@dataclass(frozen=True)
class FedPhoenixReproConfig:
    n_train: int = 1437
    n_test: int = 360
    n_clients: int = 20
    beta: float = 0.1
    min_size: int = 10
    clients_per_round: int = 5
    rounds: int = 150
    local_epochs: int = 1
    lr: float = 0.05
    batch_size: int = 16
    theta: float = 2 / 32
    last: int = 10
    target: float = 0.9

    def __post_init__(self) -> None:
        for name in ("n_train", "n_test", "n_clients", "clients_per_round", "rounds",
                     "local_epochs", "batch_size", "last"):  # fmt: skip
            check_int(name, getattr(self, name), minimum=1)
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")


@dataclass(frozen=True)
class ClientConfig:
    """The local training of :func:`client_update`: ``epochs`` passes of plain SGD (learning rate
    ``lr``, mini-batches of ``batch_size`` in a fresh order each epoch)."""

    epochs: int = 1
    lr: float = 0.05
    batch_size: int = 16


ClientData = tuple[torch.Tensor, torch.Tensor]
Transform = Callable[[torch.Tensor, torch.Tensor, int, np.random.Generator], ClientData]
TestTransform = Callable[[torch.Tensor, torch.Tensor], ClientData]


def client_update(
    global_state: dict[str, Any], data: ClientData, cfg: ClientConfig, rng: np.random.Generator
) -> tuple[dict[str, torch.Tensor], int, dict[str, float]]:
    """The runner's ``client_update``: plain local SGD of a :class:`FedDigitsCNN` loaded with the
    client's (possibly reset) copy ``global_state`` on the client's ``data = (x, y)`` (``x`` of
    shape (n, 1, 8, 8), ``y`` int64 labels); batch orders come from ``rng``. Returns the full
    local state, ``n`` and ``{"loss": mean training loss}``."""
    x, y = data
    model = FedDigitsCNN()
    model.load_state_dict(global_state)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    gen = torch_generator(rng)
    total, count = 0.0, 0
    for _ in range(cfg.epochs):
        for batch in torch.randperm(len(y), generator=gen).split(cfg.batch_size):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(batch)
            count += len(batch)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, len(y), {"loss": total / max(count, 1)}


def accuracy(state: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy on ``(x, y)`` of a :class:`FedDigitsCNN` loaded with ``state``."""
    model = FedDigitsCNN()
    model.load_state_dict(state)
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def federate(
    cfg: FedPhoenixReproConfig,
    seed: int,
    reset: PhoenixReset | None,
    traces: list[tuple[int, ResetTrace]] | None = None,
    rounds: int | None = None,
    *,
    transform: Transform | None = None,
    test_transform: TestTransform | None = None,
    update: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """One federation (FedAvg when ``reset`` is None, else FedPhoenix); returns its accuracy curve.

    ``traces`` collects ``(round, ResetTrace)`` of every reset; ``rounds`` overrides
    ``cfg.rounds``. ``transform(x, y, client_id, rng) -> (x, y)`` changes each client's training
    data once, before the federation (e.g. a client-specific spurious feature); ``rng`` is a numpy
    generator of its own per (seed, client). ``test_transform(x, y) -> (x, y)`` changes the test
    set. ``update`` replaces :func:`client_update` (same signature; it receives the client's
    ``(x, y)`` and a :class:`ClientConfig`). Without these the federation is unchanged.
    """
    (xtr, ytr), (xte, yte) = digits_splits((cfg.n_train, cfg.n_test), seed)
    parts = dirichlet_partition(ytr.numpy(), cfg.n_clients, cfg.beta, seed, min_size=cfg.min_size)
    data = []
    for c, part in enumerate(parts):
        idx = torch.from_numpy(np.asarray(part, dtype=np.int64))
        xy = (xtr[idx], ytr[idx])
        data.append(xy if transform is None else tuple(transform(*xy, c, make_rng(seed, 94, c))))
    if test_transform is not None:
        xte, yte = test_transform(xte, yte)
    torch.manual_seed(derive_seed(seed, 91))
    init = {k: v.clone() for k, v in FedDigitsCNN().state_dict().items()}
    hook = None if reset is None else phoenix_pre_local_train(FedDigitsCNN(), reset, traces)
    runner = InProcessRunner(
        rounds or cfg.rounds,
        cfg.clients_per_round,
        seed,
        pre_local_train=hook,
        evaluate_fn=lambda s, r: {"accuracy": accuracy(s, xte, yte)},
    )
    client_cfg = ClientConfig(cfg.local_epochs, cfg.lr, cfg.batch_size)
    t0 = time.process_time()
    res = runner.run(init, update or client_update, FedAvg(), data, client_cfg)
    dropped = {r.round: r.dropped for r in res.rounds if r.dropped}
    if dropped:  # the runner drops failing clients; in a reproduction that is a bug
        raise RuntimeError(f"clients failed during the federation: {dropped}")
    acc = [float(a) for a in res.history("accuracy")]
    reach = next((i + 1 for i, a in enumerate(acc) if a >= cfg.target), None)
    return {
        "accuracy": acc,
        "final": float(np.mean(acc[-cfg.last :])),
        "best": float(max(acc)),
        "rounds_to_target": reach,
        "cpu_s": time.process_time() - t0,
        "final_state": res.final_state,
    }


#: the spurious marker's value: the digits are scaled to [0, 1], so it never occurs naturally
MARKER = 2.0
#: rounds of the marker section's federations (as the main runs)
MARKER_ROUNDS = 150


def with_marker(
    x: torch.Tensor, y: torch.Tensor, row: int, value: float = MARKER, shift: int = 0
) -> torch.Tensor:
    """A copy of the images ``x`` (n, 1, 8, 8) with pixel (``row``, (y + ``shift``) mod 8) set to
    ``value`` in each: the label code of :func:`marker_transform` (``shift`` ≠ 0 misleads)."""
    check_type("row", row, int)
    if not 0 <= row < x.shape[-2]:
        raise ValueError(f"row must lie in [0, {x.shape[-2]}), got {row}")
    out = x.clone()
    out[torch.arange(len(y)), 0, row, (y + shift) % x.shape[-1]] = value
    return out


def marker_transform(value: float = MARKER) -> Transform:
    """The ``transform`` of :func:`federate` for client-specific spurious features: client c's
    images get the marker ``value`` at row c mod 8, column y mod 8 (:func:`with_marker`)."""
    check_type("value", value, (int, float))
    if not math.isfinite(value) or 0.0 <= value <= 1.0:
        raise ValueError(
            f"value must be finite and outside the digits' range [0, 1] (a pixel that never "
            f"occurs naturally), got {value}"
        )

    def transform(x, y, client_id, rng):
        return with_marker(x, y, client_id % x.shape[-2], value), y

    return transform


def marker_reliance(
    cfg: FedPhoenixReproConfig, seed: int, state: dict[str, torch.Tensor], value: float = MARKER
) -> dict[str, float]:
    """Accuracy of ``state`` on the seed's clean test set, and with the marker added at each of
    the 8 rows (mean): at the label's column (``marked``) and one column off (``misleading``).
    ``marked`` ≫ ``clean`` ≫ ``misleading`` means the model reads the marker."""
    _, (xte, yte) = digits_splits((cfg.n_train, cfg.n_test), seed)
    rows = range(xte.shape[-2])
    marked = [accuracy(state, with_marker(xte, yte, r, value), yte) for r in rows]
    wrong = [accuracy(state, with_marker(xte, yte, r, value, shift=1), yte) for r in rows]
    return {"clean": accuracy(state, xte, yte), "marked": float(np.mean(marked)),
            "misleading": float(np.mean(wrong))}  # fmt: skip


def marker_section(
    cfg: FedPhoenixReproConfig, seeds: list[int], rounds: int = MARKER_ROUNDS
) -> dict[int, dict[str, Any]]:
    """FedAvg and FedPhoenix (r_s = 0.4·``rounds``) with :func:`marker_transform` on the clients
    and a clean test set, per seed: final accuracies, ``gain`` (FedPhoenix − FedAvg) and each
    final model's :func:`marker_reliance`."""
    out = {}
    for s in seeds:
        t0 = time.perf_counter()
        reset = PhoenixReset(theta=cfg.theta, stop_round=round(0.4 * rounds))
        runs = {name: federate(cfg, s, r, rounds=rounds, transform=marker_transform())
                for name, r in (("FedAvg", None), ("FedPhoenix", reset))}  # fmt: skip
        out[s] = {
            "final": {n: r["final"] for n, r in runs.items()},
            "gain": runs["FedPhoenix"]["final"] - runs["FedAvg"]["final"],
            "reliance": {n: marker_reliance(cfg, s, r["final_state"]) for n, r in runs.items()},
            "wall_s": time.perf_counter() - t0,
        }
    return out


#: expected verdict of the marker claim, set by the first measurement (seeds 0-4)
MARKER_REASON = (
    "first 5-seed run (150 rounds): FedPhoenix − FedAvg −0.043 median [−0.082, +0.053], 1/5 seeds. "
    "FedAvg does read the marker (test accuracy with it at the label's column 0.91–0.94, without "
    "0.69–0.85, one column off 0.64–0.78), and FedPhoenix's resets of θ = 1/16 of the kernels do "
    "not remove that reliance on the 2-conv digits CNN; the paper's gains are on VGG / CIFAR-10"
)


def _marker_claims(
    result: Result, section: dict[int, dict[str, Any]], seeds: list[int], rounds: int
) -> None:
    """Claim, metrics and note of the marker section (see :func:`marker_section`)."""
    gains = [section[s]["gain"] for s in seeds]
    result.claims.append(
        paper_claim(
            f"client-specific spurious marker (absent at test), {rounds} rounds: final accuracy "
            "FedPhoenix (r_s = 0.4·R) − FedAvg (FedPhoenix beats FedAvg)",
            gains, 0.0, ">", seeds=seeds, modes=("full",), paper=PAPER,
            expected="xfail" if MARKER_REASON else "reproduces", reason=MARKER_REASON,
        )
    )  # fmt: skip
    result.metrics["marker"] = {
        "value": MARKER, "rounds": rounds, "seeds": seeds,
        "wall_s": sum(section[s]["wall_s"] for s in seeds),
        "per_seed": {str(s): section[s] for s in seeds},
    }  # fmt: skip
    rel = lambda s, k: section[s]["reliance"]["FedAvg"][k]  # noqa: E731
    result.notes.append(
        f"Spurious marker (issue #26; {rounds} rounds): FedPhoenix − FedAvg per seed "
        + ", ".join(f"{s}: {section[s]['gain']:+.3f}" for s in seeds)
        + f" (median {np.median(gains):+.3f}). FedAvg reads the marker — test accuracy with it at the "
        "label's column / without / one column off: "
        + "; ".join(f"{s}: {rel(s, 'marked'):.3f} / {rel(s, 'clean'):.3f} / {rel(s, 'misleading'):.3f}"
                    for s in seeds) + "."
    )  # fmt: skip


def _check_traces(traces: list[tuple[int, ResetTrace]], reset: PhoenixReset) -> dict[str, float]:
    """Count violations of the schedule and of the per-layer count in a federation's traces."""
    bad_count = bad_stop = pairs = same = 0
    by_round: dict[int, list[ResetTrace]] = {}
    for r, trace in traces:
        n = len(trace.layers)
        for layer in trace.layers:
            should = reset.is_active(layer.depth, n, r)
            if layer.active != should or (not should and layer.indices):
                bad_stop += 1
            if should and len(layer.indices) != reset.n_reset(layer.out_channels):
                bad_count += 1
        by_round.setdefault(r, []).append(trace)
    for ts in by_round.values():
        if not all(layer.active for layer in ts[0].layers):
            continue
        for i in range(len(ts)):
            for j in range(i + 1, len(ts)):
                pairs += 1
                same += ts[i].indices() == ts[j].indices()
    return {"bad_count": bad_count, "bad_stop": bad_stop, "pairs": pairs, "same_pairs": same}


def mechanics(seed: int) -> dict[str, float]:
    """Direct checks of one reset: KS test of the values, untouched parameters, stopped layers."""
    from scipy.stats import kstest

    gen = torch.Generator().manual_seed(derive_seed(seed, 92))
    torch.manual_seed(derive_seed(seed, 93))
    big = nn.Sequential(nn.Conv2d(64, 128, 3), nn.BatchNorm2d(128), nn.Conv2d(128, 8, 1), nn.Flatten(),
                        nn.Linear(8, 4))  # fmt: skip
    before = {k: v.clone() for k, v in big.state_dict().items()}
    reset = PhoenixReset(theta=0.25, stop_round=10)
    trace = reset(big, 0, gen)
    layer0 = trace.layers[0]
    values = big[0].weight[list(layer0.indices)].detach().flatten().double().numpy()
    p_value = float(kstest(values, "norm", args=(layer0.mean, layer0.std)).pvalue)
    w0 = before["0.weight"].clone()
    w0[list(layer0.indices)] = big[0].weight[list(layer0.indices)]
    others_identical = all(
        torch.equal(v, before[k])
        for k, v in big.state_dict().items()
        if k not in ("0.weight", "2.weight")
    ) and torch.equal(big[0].weight.detach(), w0)
    untouched_rows = [i for i in range(128) if i not in layer0.indices]
    rows_identical = torch.equal(big[0].weight[untouched_rows], before["0.weight"][untouched_rows])
    # stair schedule with 2 conv layers and r_s = 10: depth 0 stops at t = 5, depth 1 at t = 10
    stopped_ok = True
    for t, active in (
        (4, (True, True)),
        (5, (False, True)),
        (9, (False, True)),
        (10, (False, False)),
    ):
        snap = {k: v.clone() for k, v in big.state_dict().items()}
        tr = reset(big, t, gen)
        for layer, want, key in zip(tr.layers, active, ("0.weight", "2.weight"), strict=True):
            changed = not torch.equal(big.state_dict()[key], snap[key])
            stopped_ok &= layer.active == want and changed == want
    return {
        "ks_p": p_value,
        "ks_n": float(values.size),
        "others_identical": float(others_identical and rows_identical),
        "stopped_ok": float(stopped_ok),
    }


def _same_seed_trace(cfg: FedPhoenixReproConfig, seed: int) -> float:
    reset = PhoenixReset(theta=cfg.theta, stop_round=4)
    t1: list = []
    t2: list = []
    a = federate(cfg, seed, reset, t1, rounds=3)
    b = federate(cfg, seed, PhoenixReset(theta=cfg.theta, stop_round=4), t2, rounds=3)
    same_state = all(
        torch.equal(a["final_state"][k], b["final_state"][k]) for k in a["final_state"]
    )
    return float(t1 == t2 and a["accuracy"] == b["accuracy"] and same_state)


PAPER = ("up to +20.73 % accuracy over FedAvg and other FL baselines (abstract; VGG/CIFAR-10 and "
         "ImageNet-scale, Dirichlet non-IID)")  # fmt: skip


def _one_seed(
    cfg: FedPhoenixReproConfig, seed: int, fractions: tuple[float, ...]
) -> dict[str, Any]:
    """FedAvg and FedPhoenix (each r_s) at one seed, from the same initial model, partition and
    client sampling / batch streams."""
    runs: dict[str, dict[str, Any]] = {"FedAvg": federate(cfg, seed, None)}
    traces: dict[float, list] = {}
    for frac in fractions:
        reset = PhoenixReset(theta=cfg.theta, stop_round=round(frac * cfg.rounds))
        traces[frac] = []
        runs[f"FedPhoenix r_s={frac}·R"] = federate(cfg, seed, reset, traces[frac])
    gain = runs["FedPhoenix r_s=0.4·R"]["final"] - runs["FedAvg"]["final"]
    return {"runs": runs, "traces": traces, "gain": gain}


def run(mode: Mode = "quick", seed: int = 0, cfg: FedPhoenixReproConfig | None = None) -> Result:
    """Paper claims over seeds (quick: 1 seed, 100 rounds, r_s = 0.4·R; full: seeds seed..seed+4,
    150 rounds, r_s ∈ {0.4, 0.8}·R, and β = 0.3 at the master seed as information). ``cfg``
    (default: the mode's) replaces the configuration; ``mode`` still picks seeds and extra rows."""
    check_choice("mode", mode, ["quick", "full"])
    if cfg is None:
        cfg = FedPhoenixReproConfig() if mode == "full" else FedPhoenixReproConfig(rounds=100)
    result = Result(
        name="vision.fedphoenix", mode=mode, seed=seed,
        paper_title="Rising from Ashes: Generalized Federated Learning via Dynamic Parameter Reset",
        headline="FedPhoenix (random per-client resets of a fraction θ of conv kernels on a stair "
        "schedule) improves federated accuracy under non-IID data by up to +20.73 % over FedAvg",
    )  # fmt: skip
    fractions = (0.4,) if mode == "quick" else (0.4, 0.8)
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {s: _one_seed(cfg, s, fractions) for s in seeds}
    runs, all_traces = per[seed]["runs"], per[seed]["traces"]
    for s in seeds:
        for name, r in per[s]["runs"].items():
            result.table.append({
                "seed": s, "method": name, "beta": cfg.beta, "final accuracy (last 10)": r["final"],
                "best accuracy": r["best"], f"rounds to {cfg.target}": r["rounds_to_target"] or "never",
                "CPU s": r["cpu_s"],
            })  # fmt: skip
    fedavg = runs["FedAvg"]["final"]
    phoenix = runs["FedPhoenix r_s=0.4·R"]["final"]
    gains = [per[s]["gain"] for s in seeds]
    main_reset = PhoenixReset(theta=cfg.theta, stop_round=round(0.4 * cfg.rounds))
    checks = _check_traces(all_traces[0.4], main_reset)
    mech = mechanics(seed)
    result.claims += [
        paper_claim("final accuracy FedPhoenix (r_s = 0.4·R) − FedAvg, β = 0.1 (non-inferiority)", gains, -0.06, ">=",
                    seeds=seeds, paper=PAPER),
        paper_claim("final accuracy FedPhoenix (r_s = 0.4·R) − FedAvg, β = 0.1 (FedPhoenix beats FedAvg)", gains, 0.0, ">",
                    seeds=seeds, paper=PAPER, headline=True, expected="xfail",
                    reason="the resets cost accuracy on this small, easy task with a short recovery window "
                    "(seed 0: 0.899 vs FedAvg 0.911; the spec's prototype 0.896 vs 0.940)"),
        Claim("active layers whose number of reset kernels ≠ ⌊θ·C_out⌋ (federation traces)", checks["bad_count"], 0, "<="),
        Claim("layer resets at t ≥ (d+1)·r_s/n_conv or activity ≠ schedule (federation traces)", checks["bad_stop"], 0, "<="),
        Claim("stopped layers bit-identical, active ones changed (direct check, 1 = yes)", mech["stopped_ok"], 1, ">="),
        Claim(f"KS p-value of {int(mech['ks_n'])} reset values vs N(μ_layer, σ_layer)", mech["ks_p"], 0.01, ">"),
        Claim("biases, BatchNorm, fc and the non-chosen kernels bit-identical (1 = yes)", mech["others_identical"], 1, ">="),
        Claim(f"same-round client pairs with identical kernel sets (of {checks['pairs']})", checks["same_pairs"] / max(checks["pairs"], 1), 0.01, "<="),
        Claim("same seed ⇒ same reset trace, accuracy curve and final state (1 = yes)", _same_seed_trace(cfg, seed), 1, ">="),
    ]  # fmt: skip
    result.metrics = {
        name: {k: v for k, v in r.items() if k != "final_state"} for name, r in runs.items()
    }
    result.metrics["mechanics"] = {**mech, **checks}
    result.metrics["seeds"] = seeds
    result.metrics["per_seed_final"] = {
        str(s): {n: r["final"] for n, r in per[s]["runs"].items()} for s in seeds
    }
    result.add_series(
        "test_accuracy",
        {
            "x": list(range(1, cfg.rounds + 1)),
            **{name: r["accuracy"] for name, r in runs.items()},
        },
        title=f"Test accuracy per round on non-IID digits (Dirichlet β = {cfg.beta}), seed {seed}",
        xlabel="communication round",
        ylabel="test accuracy",
        yscale="linear",
    )
    result.notes += [
        f"Seed {seed}: FedAvg {fedavg:.3f} vs FedPhoenix (r_s = 0.4·R) {phoenix:.3f} (mean of the last "
        f"{cfg.last} rounds). Per seed FedPhoenix − FedAvg: "
        + ", ".join(f"{s}: {per[s]['gain']:+.3f}" for s in seeds)
        + " (the spec's prototype: FedAvg 0.940, FedPhoenix 0.896 / 0.858 for r_s = 0.4 / 0.8·R).",
        f"{cfg.n_clients} clients, Dirichlet β = {cfg.beta}, {cfg.clients_per_round} per round, "
        f"{cfg.rounds} rounds, 1 local epoch SGD {cfg.lr}, batch {cfg.batch_size}; θ = 2/32 "
        "(conv1: 1 of 16 kernels, conv2: 2 of 32 per client copy while active).",
    ]
    if mode == "full":
        cfg3 = replace(cfg, beta=0.3)
        a3 = federate(cfg3, seed, None)
        p3 = federate(cfg3, seed, PhoenixReset(theta=cfg.theta, stop_round=round(0.4 * cfg.rounds)))
        for name, r in (("FedAvg", a3), ("FedPhoenix r_s=0.4·R", p3)):
            result.table.append({
                "seed": seed, "method": name, "beta": 0.3, "final accuracy (last 10)": r["final"],
                "best accuracy": r["best"], f"rounds to {cfg.target}": r["rounds_to_target"] or "never",
                "CPU s": r["cpu_s"],
            })  # fmt: skip
        result.notes.append(
            f"β = 0.3 (no claim, seed {seed}): FedAvg {a3['final']:.3f}, FedPhoenix {p3['final']:.3f}"
        )
        _marker_claims(result, marker_section(cfg, seeds), seeds, MARKER_ROUNDS)
    return result
