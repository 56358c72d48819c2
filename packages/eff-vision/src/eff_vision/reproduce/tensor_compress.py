"""Reproduction ``vision.tensor_compress``: data-informed Tucker-2 / CPD of a digits CNN's conv
layers without fine-tuning, against the Frobenius decompositions (the Σ = I case of the same ALS).

Data and model (spec): sklearn digits (8×8, /16), 1200 train / 597 test (seeded split); CNN c1 1→16,
c2 16→32 (3×3) → maxpool → c3 32→32 → global average pool → FC; Adam 3e-3 (40 epochs in full
mode as in quick mode; the original accuracy actually reached is reported; full mode also reports
seeds +1 and +2 without claims). c2 and c3 are
compressed at ratio 0.25 of their parameters (Tucker ranks 8 and 12; CP ranks 20 and 31). Σ is the
**uncentred** second moment of the im2col patches of 256 training images (the prototype's setting,
``centered=False``); Σ-ALS runs 30 (Tucker) / 40 (CPD) iterations initialised at the package's own
Frobenius solution (100 iterations from the SVD init). The centred (official) Σ is also reported.
tensorly is not imported here (it is a test-only cross-check); the Σ = I Tucker-2 ALS is instead
checked against HOOI (alternating SVDs), an independent algorithm for the same optimum.

Full mode adds a sweep of compression ratios (:data:`SWEEP_RATIOS`, every seed): accuracy vs ratio
of the four decompositions and of Tucker-2-ALS-Σ at ranks chosen by
:func:`~eff_vision.tensor_compress.tucker2_rank_search`, the smallest ratio from which each stays
within 4 points of the original, and paper claims at the strong ratio 0.15. ``experiment`` takes a
calibration set of the user's choice for Σ (``calib=``).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from eff_shared.errors import check_choice, check_int
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_vision._training import accuracy, train_classifier
from eff_vision.data.digits import digits_splits
from eff_vision.models import DigitsCNN  # re-exported: it lived here
from eff_vision.tensor_compress import (
    conv_flops,
    cp_als_sigma,
    cp_rank_for_ratio,
    cp_to_weight,
    decompose_conv,
    frobenius_error,
    input_covariance,
    sigma_error,
    sqrt_sigma,
    tucker2_als_sigma,
    tucker2_rank_for_ratio,
    tucker2_rank_search,
    tucker2_to_weight,
)

__all__ = [
    "SWEEP_RATIOS",
    "DigitsCNN",
    "TensorCompressConfig",
    "TensorCompressReproConfig",
    "experiment",
    "run",
    "within_points",
]

LAYERS = ("c2", "c3")
SWEEP_RATIOS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)  # full mode's accuracy-vs-ratio sweep
STRONG_RATIO = 0.15  # "strong compression": the ratio of the paper claims beyond 0.25
SWEEP_METHODS = (
    "Tucker-2 Frobenius",
    "Tucker-2-ALS-Σ",
    "CPD Frobenius",
    "CPD-ALS-Σ",
    "Tucker-2-ALS-Σ (searched ranks)",
)


@dataclass(frozen=True)
class TensorCompressReproConfig:
    """Data, training, ratio and ALS settings (defaults: the spec). ``sweep_ratios``: ratios at which
    :func:`experiment` also compresses the same trained CNN (empty: no sweep); ``sweep_rank_search``
    adds Tucker-2-ALS-Σ at Σ-searched ranks to the sweep."""

    n_train: int = 1200
    n_test: int = 597
    epochs: int = 40
    lr: float = 3e-3
    batch_size: int = 64
    calib_images: int = 256
    ratio: float = 0.25
    frob_iters: int = 100
    tucker_iters: int = 30
    cp_iters: int = 40
    centered: bool = False
    report_centered: bool = True
    sweep_ratios: tuple[float, ...] = ()
    sweep_rank_search: bool = True

    def __post_init__(self) -> None:
        for name in ("n_train", "n_test", "epochs", "batch_size", "calib_images"):
            check_int(name, getattr(self, name), minimum=1)
        if not 0 < self.ratio <= 1:
            raise ValueError(f"ratio must lie in (0, 1], got {self.ratio}")
        bad = [r for r in self.sweep_ratios if not 0 < r <= 1]
        if bad or list(self.sweep_ratios) != sorted(set(self.sweep_ratios)):
            raise ValueError(
                f"sweep_ratios must be increasing ratios in (0, 1], got {self.sweep_ratios!r}"
            )


#: the former name (kept as an alias)
TensorCompressConfig = TensorCompressReproConfig


def train_digits_cnn(cfg: TensorCompressReproConfig, seed: int) -> tuple[DigitsCNN, dict[str, Any]]:
    (xtr, ytr), (xte, yte) = digits_splits((cfg.n_train, cfg.n_test), seed)
    torch.manual_seed(seed)
    model = DigitsCNN()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    t0 = time.perf_counter()
    train_classifier(model, xtr, ytr, cfg.epochs, opt, cfg.batch_size, seed)
    data = {"xtr": xtr, "ytr": ytr, "xte": xte, "yte": yte, "train_s": time.perf_counter() - t0}
    return model, data


def _replace(model: nn.Module, layers: dict[str, nn.Module]) -> nn.Module:
    import copy

    out = copy.deepcopy(model)
    for name, new in layers.items():
        setattr(out, name, new)
    return out


def _layer_from_weight(conv: nn.Conv2d, weight: torch.Tensor) -> nn.Conv2d:
    import copy

    new = copy.deepcopy(conv)
    new.weight.data = weight.to(conv.weight.dtype).clone()
    return new


def _hooi(weight: torch.Tensor, rank: tuple[int, int], iters: int = 500) -> torch.Tensor:
    """Frobenius Tucker-2 by HOOI (alternating truncated SVDs): the independent reference."""
    w = weight.to(torch.float64)
    o, i = w.shape[:2]
    u_i = torch.linalg.svd(w.permute(1, 0, 2, 3).reshape(i, -1), full_matrices=False)[0][
        :, : rank[1]
    ]
    prev = None
    for _ in range(iters):
        y = torch.einsum("oihw,ib->obhw", w, u_i).reshape(o, -1)
        u_o = torch.linalg.svd(y, full_matrices=False)[0][:, : rank[0]]
        y = torch.einsum("oihw,oa->iahw", w, u_o).reshape(i, -1)
        u_i = torch.linalg.svd(y, full_matrices=False)[0][:, : rank[1]]
        core = torch.einsum("oihw,oa,ib->abhw", w, u_o, u_i)
        approx = tucker2_to_weight(core, [u_o, u_i])
        if prev is not None and (approx - prev).norm() <= 1e-14 * approx.norm():
            break
        prev = approx
    return approx


def _calib_batches(
    calib: torch.Tensor | Iterable | None, data: dict, cfg: TensorCompressReproConfig
) -> list:
    if calib is None:
        return [data["xtr"][: cfg.calib_images]]
    if isinstance(calib, torch.Tensor):
        batches = [calib]
    elif isinstance(calib, Iterable):
        batches = list(calib)  # Σ is accumulated twice (uncentred, centred): keep the batches
    else:
        raise TypeError(
            f"calib must be None, an image tensor (N, 1, 8, 8) or an iterable of batches, got {type(calib).__name__}"
        )
    for b in batches:
        x = b[0] if isinstance(b, list | tuple) else b
        if not isinstance(x, torch.Tensor) or x.ndim != 4 or tuple(x.shape[1:]) != (1, 8, 8):
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"calib batches must be image tensors (N, 1, 8, 8), got {got}")
    if not batches:
        raise ValueError("calib must hold at least one batch of images")
    return batches


def experiment(
    cfg: TensorCompressReproConfig, seed: int, calib: torch.Tensor | Iterable | None = None
) -> dict[str, Any]:
    """Train the digits CNN, estimate Σ, compress c2 and c3 with the four decompositions.

    ``calib``: the calibration images for Σ — a tensor (N, 1, 8, 8) or an iterable of such batches
    (or of (images, ...) tuples); None (default) takes the first ``cfg.calib_images`` training
    images. The Frobenius decompositions do not depend on it. With ``cfg.sweep_ratios`` the result
    also holds ``"sweep"`` (see :func:`_sweep`).
    """
    model, data = train_digits_cnn(cfg, seed)
    orig_acc = accuracy(model, data["xte"], data["yte"])
    calib_batches = _calib_batches(calib, data, cfg)
    sig_sets = {"uncentred": input_covariance(model, calib_batches, list(LAYERS), centered=False)}
    if cfg.report_centered:
        sig_sets["centred"] = input_covariance(model, calib_batches, list(LAYERS), centered=True)
    sig_main = sig_sets["centred" if cfg.centered else "uncentred"]
    convs = {n: getattr(model, n) for n in LAYERS}
    ranks = {
        "tucker2": {n: tucker2_rank_for_ratio(tuple(c.weight.shape), cfg.ratio) for n, c in convs.items()},
        "cp": {n: cp_rank_for_ratio(tuple(c.weight.shape), cfg.ratio) for n, c in convs.items()},
    }  # fmt: skip
    w64 = {n: c.weight.detach().to(torch.float64) for n, c in convs.items()}
    rows: list[dict[str, Any]] = []
    approx: dict[str, dict[str, torch.Tensor]] = {}
    traces: dict[str, list[float]] = {}
    als_s: dict[str, float] = {}

    frob: dict[str, dict[str, Any]] = {"tucker2": {}, "cp": {}}
    t0 = time.perf_counter()
    for n in LAYERS:
        r = ranks["tucker2"][n]
        frob["tucker2"][n] = tucker2_als_sigma(w64[n], (r, r), None, cfg.frob_iters, name=n)
        frob["cp"][n] = cp_als_sigma(w64[n], ranks["cp"][n], None, cfg.frob_iters, name=n)
    als_s["Frobenius"] = time.perf_counter() - t0
    approx["Tucker-2 Frobenius"] = {n: tucker2_to_weight(*frob["tucker2"][n]) for n in LAYERS}
    approx["CPD Frobenius"] = {n: cp_to_weight(*frob["cp"][n], (3, 3)) for n in LAYERS}

    for label, sigs in sig_sets.items():
        suffix = "" if (label == "centred") == cfg.centered else f" ({label} Σ)"
        for method, key in (("tucker2", "Tucker-2-ALS-Σ"), ("cp", "CPD-ALS-Σ")):
            name = key + suffix
            approx[name] = {}
            t0 = time.perf_counter()
            for n in LAYERS:
                if method == "tucker2":
                    r = ranks["tucker2"][n]
                    out, tr = tucker2_als_sigma(
                        w64[n], (r, r), sigs[n], cfg.tucker_iters, init=frob["tucker2"][n],
                        name=n, return_trace=True,
                    )  # fmt: skip
                    approx[name][n] = tucker2_to_weight(*out)
                else:
                    out, tr = cp_als_sigma(
                        w64[n], ranks["cp"][n], sigs[n], cfg.cp_iters, init=frob["cp"][n],
                        name=n, return_trace=True,
                    )  # fmt: skip
                    approx[name][n] = cp_to_weight(*out, (3, 3))
                traces[f"{name} {n}"] = tr.errors
            als_s[name] = time.perf_counter() - t0

    dense_params = sum(convs[n].weight.numel() for n in LAYERS)
    dense_macs = sum(conv_flops(convs[n], hw)[0] for n, hw in (("c2", (8, 8)), ("c3", (4, 4))))
    rows.append(
        {"method": "original", "accuracy": orig_acc, "conv params (c2+c3)": dense_params,
         "conv MACs (c2+c3)": dense_macs}
    )  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    for name, weights in approx.items():
        method = "tucker2" if name.startswith("Tucker") else "cp"
        compressed = _replace(model, {n: _layer_from_weight(convs[n], weights[n]) for n in LAYERS})
        acc = accuracy(compressed, data["xte"], data["yte"])
        seqs = {
            n: decompose_conv(
                convs[n],
                method,
                rank=ranks[method][n] if method == "cp" else (ranks[method][n],) * 2,
                n_iter_max=0,
                name=n,
            )
            for n in LAYERS
        }  # fmt: skip  (factorised layers for the parameter/MAC counts only)
        params = sum(
            sum(p.numel() for p in s.parameters()) - convs[n].bias.numel() for n, s in seqs.items()
        )
        macs = sum(conv_flops(seqs[n], hw)[0] for n, hw in (("c2", (8, 8)), ("c3", (4, 4))))
        row: dict[str, Any] = {"method": name, "accuracy": acc}
        res = {"accuracy": acc}
        for n in LAYERS:
            se = sigma_error(w64[n], weights[n], sig_main[n])
            fe = frobenius_error(w64[n], weights[n])
            row[f"Σ-error {n}"] = se
            row[f"Frobenius error {n}"] = fe
            res[f"sigma_{n}"], res[f"frob_{n}"] = se, fe
        row["conv params (c2+c3)"] = params
        row["conv MACs (c2+c3)"] = macs
        row["ALS s"] = als_s.get(name, als_s["Frobenius"] / 2)
        rows.append(row)
        results[name] = res
    hooi_diff = {
        n: float(
            (tucker2_to_weight(*tucker2_als_sigma(w64[n], (ranks["tucker2"][n],) * 2, None, 5000, tol=0.0, name=n))
             - _hooi(w64[n], (ranks["tucker2"][n],) * 2)).norm() / w64[n].norm()
        )
        for n in LAYERS
    }  # fmt: skip
    out = {
        "rows": rows, "results": results, "orig_acc": orig_acc, "ranks": ranks, "traces": traces,
        "hooi_diff": hooi_diff, "train_s": data["train_s"], "epochs": cfg.epochs,
    }  # fmt: skip
    if cfg.sweep_ratios:
        out["sweep"] = _sweep(model, data, cfg, sig_main)
    return out


def _sweep(
    model: nn.Module, data: dict, cfg: TensorCompressReproConfig, sig: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """Accuracy (no fine-tuning) of every :data:`SWEEP_METHODS` entry at each of
    ``cfg.sweep_ratios``, with the ranks used; the protocol of the main comparison at each ratio
    (Frobenius ALS ``frob_iters``; Σ-ALS from it, ``tucker_iters`` / ``cp_iters``)."""
    convs = {n: getattr(model, n) for n in LAYERS}
    w64 = {n: c.weight.detach().to(torch.float64) for n, c in convs.items()}

    def acc_of(weights: dict[str, torch.Tensor]) -> float:
        compressed = _replace(model, {n: _layer_from_weight(convs[n], weights[n]) for n in LAYERS})
        return accuracy(compressed, data["xte"], data["yte"])

    def tucker(ranks: dict[str, tuple[int, int]]) -> tuple[float, float]:
        frob = {
            n: tucker2_als_sigma(w64[n], ranks[n], None, cfg.frob_iters, name=n) for n in LAYERS
        }
        sig_w = {
            n: tucker2_to_weight(*tucker2_als_sigma(
                w64[n], ranks[n], sig[n], cfg.tucker_iters, init=frob[n], name=n))
            for n in LAYERS
        }  # fmt: skip
        return acc_of({n: tucker2_to_weight(*frob[n]) for n in LAYERS}), acc_of(sig_w)

    acc: dict[str, list[float]] = {
        m: [] for m in SWEEP_METHODS if cfg.sweep_rank_search or "searched" not in m
    }
    used: dict[str, list[dict[str, Any]]] = {"tucker2": [], "cp": [], "tucker2_searched": []}
    for ratio in cfg.sweep_ratios:
        rt = {
            n: (tucker2_rank_for_ratio(tuple(c.weight.shape), ratio),) * 2 for n, c in convs.items()
        }
        rc = {n: cp_rank_for_ratio(tuple(c.weight.shape), ratio) for n, c in convs.items()}
        tf, ts = tucker(rt)
        cf = {n: cp_als_sigma(w64[n], rc[n], None, cfg.frob_iters, name=n) for n in LAYERS}
        cs = {
            n: cp_als_sigma(w64[n], rc[n], sig[n], cfg.cp_iters, init=cf[n], name=n) for n in LAYERS
        }
        acc["Tucker-2 Frobenius"].append(tf)
        acc["Tucker-2-ALS-Σ"].append(ts)
        acc["CPD Frobenius"].append(acc_of({n: cp_to_weight(*cf[n], (3, 3)) for n in LAYERS}))
        acc["CPD-ALS-Σ"].append(acc_of({n: cp_to_weight(*cs[n], (3, 3)) for n in LAYERS}))
        used["tucker2"].append({n: list(r) for n, r in rt.items()})
        used["cp"].append(rc)
        if cfg.sweep_rank_search:
            rs = {n: tucker2_rank_search(w64[n], ratio, sig[n], name=n) for n in LAYERS}
            acc["Tucker-2-ALS-Σ (searched ranks)"].append(tucker(rs)[1])
            used["tucker2_searched"].append({n: list(r) for n, r in rs.items()})
    return {"ratios": list(cfg.sweep_ratios), "accuracy": acc, "ranks": used}


def within_points(
    ratios: list[float], accuracies: list[float], original: float, points: float = 0.04
) -> float | None:
    """The smallest ratio from which the accuracy stays within ``points`` of ``original`` at every
    larger ratio of the sweep (None when it is not within at the largest)."""
    best = None
    for r, a in zip(reversed(ratios), reversed(accuracies), strict=True):
        if a < original - points:
            break
        best = r
    return best


def _mechanics(seed: int) -> list[Claim]:
    """Factorised layers reproduce the reconstructed conv; Σ matches dense unfold; the jitter."""
    gen = torch.Generator().manual_seed(seed)
    conv = nn.Conv2d(6, 10, 3, stride=2, padding=2, dilation=2, bias=True).double()
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen, dtype=torch.float64))
        conv.bias.copy_(torch.randn(10, generator=gen, dtype=torch.float64))
    x = torch.randn(3, 6, 11, 13, generator=gen, dtype=torch.float64)
    worst = 0.0
    for method, rank in (("tucker2", (4, 3)), ("cp", 7)):
        seq = decompose_conv(conv, method, rank=rank, n_iter_max=5)
        with torch.no_grad():
            ref = F.conv2d(x, seq.reconstructed_weight, conv.bias, 2, 2, 2)
            worst = max(worst, float((seq(x) - ref).abs().max() / ref.abs().max()))
    holder = nn.Sequential(conv)
    cov = input_covariance(holder, [x[:2], x[2:]], ["0"], centered=True)["0"]
    p = F.unfold(x, 3, dilation=2, padding=2, stride=2).transpose(1, 2).reshape(-1, 54)
    dense = torch.cov(p.T, correction=0)
    cov_err = float((cov - dense).abs().max() / dense.abs().max())
    # A rank-deficient Σ: the fallback must pick the smallest working jitter 10^p.
    low = torch.randn(40, 5, generator=gen, dtype=torch.float64)
    singular = low @ low.T
    _, jitter = sqrt_sigma(singular)
    smaller_fails = jitter > 0 and (
        int(torch.linalg.cholesky_ex(singular + jitter / 10 * torch.eye(40, dtype=torch.float64))[1]) != 0
        or jitter == 1e-9
    )  # fmt: skip
    return [
        Claim(
            "factorised nn.Sequential (Tucker-2 and CP; stride 2, padding 2, dilation 2, bias) vs "
            "the conv with the reconstructed weight, max rel. output error",
            worst, 1e-5, "<=",
        ),
        Claim("input_covariance vs a dense F.unfold covariance, max rel. error", cov_err, 1e-10, "<="),
        Claim(
            "Cholesky fallback on a rank-5 40×40 Σ picks the smallest working jitter 10^p (1 = yes)",
            float(smaller_fails), 1.0, ">=",
        ),
    ]  # fmt: skip


PAPER = ("ResNet-18/50, GoogLeNet on ImageNet / CIFAR / FGVC-Aircraft: the data-informed (Σ) Tucker-2 and "
         "CPD are competitive without fine-tuning, where Frobenius decompositions need it (numbers not "
         "retrieved)")  # fmt: skip


def _accuracies(out: dict[str, Any]) -> dict[str, float]:
    res, orig = out["results"], out["orig_acc"]
    tucker_s, cp_s = res["Tucker-2-ALS-Σ"], res["CPD-ALS-Σ"]
    return {
        "tucker_vs_f": tucker_s["accuracy"] - res["Tucker-2 Frobenius"]["accuracy"],
        "tucker_vs_orig": tucker_s["accuracy"] - orig,
        "cp_vs_f": cp_s["accuracy"] - res["CPD Frobenius"]["accuracy"],
        "cp_vs_orig": cp_s["accuracy"] - orig,
    }


# Expected verdicts of the strong-compression claims, set by their first 5-seed run (claims.md;
# seeds 0-4 at ratio 0.15: Tucker Σ − Frobenius +0.474 [+0.159, +0.539], CPD +0.151 [+0.079,
# +0.377], Tucker-Σ − original −0.101 [−0.154, −0.032], CPD-Σ − original −0.010 [−0.025, −0.002]).
_STRONG_EXPECTED: dict[str, tuple[str, str]] = {
    "tucker_vs_f": ("reproduces", ""),
    "cp_vs_f": ("reproduces", ""),
    "tucker_vs_orig": (
        "xfail",
        "inherent to the equal ranks R_O = R_I (6 / 9), not a bug: the Σ-ALS has converged (1000 "
        "iterations, SVD or Frobenius start: same error); regularising Σ (+λ·mean diag, λ ≤ 0.1) or "
        "1200 calibration images move it ≤ 0.014, the centred Σ is worse; c2 keeps a relative "
        "Σ-error of 0.24-0.28 at (6, 6) vs 0.13-0.15 at the Σ-searched (10, 3), which loses a "
        "median 0.027 (tucker2_rank_search)",
    ),
    "cp_vs_orig": ("reproduces", ""),
}


def _add_sweep(result: Result, outs: dict[int, dict[str, Any]], seeds: list[int]) -> None:
    """Full mode: the accuracy-vs-ratio plot (median over seeds), the smallest ratio from which each
    method stays within 4 points of the original, and the paper claims at ratio 0.15."""
    ratios = list(SWEEP_RATIOS)
    sw = {s: outs[s]["sweep"]["accuracy"] for s in seeds}
    orig = {s: outs[s]["orig_acc"] for s in seeds}
    methods = list(sw[seeds[0]])
    med = statistics.median
    drops = {
        m: [med([sw[s][m][j] - orig[s] for s in seeds]) for j in range(len(ratios))]
        for m in methods
    }
    result.add_series(
        "accuracy_vs_ratio",
        {
            "x": ratios,
            "original": [med(orig.values())] * len(ratios),
            **{m: [med([sw[s][m][j] for s in seeds]) for j in range(len(ratios))] for m in methods},
        },
        title=f"Accuracy without fine-tuning vs compression ratio (median over seeds {seeds[0]}-{seeds[-1]})",
        xlabel="parameter ratio of c2 and c3 (compressed / original)",
        ylabel="test accuracy",
        yscale="linear",
    )
    within = {
        m: {
            "median_drop": within_points(ratios, drops[m], 0.0),
            "per_seed": [within_points(ratios, sw[s][m], orig[s]) for s in seeds],
        }
        for m in methods
    }
    result.metrics["sweep"] = {
        "ratios": ratios,
        "seeds": seeds,
        "original": {str(s): orig[s] for s in seeds},
        "accuracy": {str(s): sw[s] for s in seeds},
        "median_drop": drops,
        "ranks": {str(s): outs[s]["sweep"]["ranks"] for s in seeds},
        "within_4_points": within,
    }

    def fmt(r: float | None) -> str:
        return "never" if r is None else f"{r:g}"

    result.notes.append(
        "Within 4 points of the original accuracy (no fine-tuning) from ratio (median drop over "
        f"seeds; per seed in brackets), swept {', '.join(f'{r:g}' for r in ratios)}: "
        + "; ".join(
            f"{m} {fmt(w['median_drop'])} [{', '.join(fmt(r) for r in w['per_seed'])}]"
            for m, w in within.items()
        )
    )
    j = ratios.index(STRONG_RATIO)

    def diff(a: str, b: str | None) -> list[float]:
        return [sw[s][a][j] - (orig[s] if b is None else sw[s][b][j]) for s in seeds]

    tag = f"ratio {STRONG_RATIO:g} (strong compression; ranks Tucker 6 / 9, CP 12 / 18)"
    specs = (
        ("tucker_vs_f", f"{tag}: acc(Tucker-2-ALS-Σ) − acc(Tucker-2 Frobenius), no fine-tuning",
         diff("Tucker-2-ALS-Σ", "Tucker-2 Frobenius"), 0.10),
        ("cp_vs_f", f"{tag}: acc(CPD-ALS-Σ) − acc(CPD Frobenius)",
         diff("CPD-ALS-Σ", "CPD Frobenius"), 0.0),
        ("tucker_vs_orig", f"{tag}: acc(Tucker-2-ALS-Σ) − acc(original)",
         diff("Tucker-2-ALS-Σ", None), -0.04),
        ("cp_vs_orig", f"{tag}: acc(CPD-ALS-Σ) − acc(original)", diff("CPD-ALS-Σ", None), -0.02),
    )  # fmt: skip
    for key, text, values, threshold in specs:
        expected, reason = _STRONG_EXPECTED[key]
        result.claims.append(
            paper_claim(
                text, values, threshold, ">=", seeds=seeds, paper=PAPER, modes=("full",),
                expected=expected, reason=reason,
            )
        )  # fmt: skip
    if "Tucker-2-ALS-Σ (searched ranks)" in methods:
        searched = diff("Tucker-2-ALS-Σ (searched ranks)", None)
        ranks = outs[seeds[0]]["sweep"]["ranks"]["tucker2_searched"][j]
        result.notes.append(
            f"Tucker-2-ALS-Σ at ratio {STRONG_RATIO:g} with Σ-searched ranks (tucker2_rank_search; seed "
            f"{seeds[0]}: {ranks}) instead of R_O = R_I: acc − original median {med(searched):+.3f} "
            f"[{min(searched):+.3f}, {max(searched):+.3f}] vs {med(diff('Tucker-2-ALS-Σ', None)):+.3f} "
            "at equal ranks (information)"
        )


def run(
    mode: Mode = "quick", seed: int = 0, cfg: TensorCompressReproConfig | None = None
) -> Result:
    """Accuracy comparisons are paper claims over seeds (quick: 1 seed; full: seeds seed..seed+4,
    each training its own CNN); the Σ-error ratios, ALS monotonicity, HOOI equivalence and the
    mechanics are checks at the master seed. ``cfg`` (default: the mode's) replaces the
    configuration; ``mode`` still picks the seeds."""
    check_choice("mode", mode, ["quick", "full"])
    sweep = SWEEP_RATIOS if mode == "full" else ()
    cfg = TensorCompressReproConfig(sweep_ratios=sweep) if cfg is None else cfg
    out = experiment(cfg, seed)
    res, orig = out["results"], out["orig_acc"]
    tucker_s, cp_s = res["Tucker-2-ALS-Σ"], res["CPD-ALS-Σ"]
    tucker_f, cp_f = res["Tucker-2 Frobenius"], res["CPD Frobenius"]
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    others = {s: experiment(replace(cfg, report_centered=False), s) for s in seeds[1:]}
    acc = {seed: _accuracies(out), **{s: _accuracies(o) for s, o in others.items()}}
    result = Result(
        name="vision.tensor_compress", mode=mode, seed=seed,
        paper_title="Distribution-Aware Tensor Decomposition for Compression of Convolutional Neural Networks",
        headline="Tucker-2 / CPD fitted in a data-informed norm (the layer-input covariance Σ) keep the "
        "accuracy without fine-tuning where Frobenius-norm decompositions lose it (ResNet, GoogLeNet on "
        "ImageNet / CIFAR; numbers not retrieved)",
    )  # fmt: skip
    result.table = out["rows"]
    vals = lambda key: [acc[s][key] for s in seeds]  # noqa: E731
    result.claims += [
        paper_claim("acc(Tucker-2-ALS-Σ) − acc(Tucker-2 Frobenius), no fine-tuning", vals("tucker_vs_f"), 0.10, ">=",
                    seeds=seeds, paper=PAPER, headline=True),
        paper_claim("acc(Tucker-2-ALS-Σ) − acc(original)", vals("tucker_vs_orig"), -0.04, ">=", seeds=seeds,
                    paper=PAPER, headline=True),
        paper_claim("acc(CPD-ALS-Σ) − acc(CPD Frobenius)", vals("cp_vs_f"), 0.0, ">=", seeds=seeds, paper=PAPER),
        paper_claim("acc(CPD-ALS-Σ) − acc(original)", vals("cp_vs_orig"), -0.02, ">=", seeds=seeds, paper=PAPER),
    ]  # fmt: skip
    for label, s_res, f_res in (("Tucker-2", tucker_s, tucker_f), ("CPD", cp_s, cp_f)):
        for n in LAYERS:
            result.claims.append(
                Claim(
                    f"{label} {n}: Σ-error(ALS-Σ) / Σ-error(Frobenius)",
                    s_res[f"sigma_{n}"] / f_res[f"sigma_{n}"], 0.6, "<=",
                )
            )  # fmt: skip
    increases = [
        max([b - a for a, b in itertools.pairwise(errs)] or [0.0])
        for errs in out["traces"].values()
    ]
    result.claims.append(
        Claim(
            "largest increase of the relative Σ-error between ALS iterations (all Σ-ALS runs)",
            max(increases), 0.0, "<=",
        )
    )  # fmt: skip
    result.claims.append(
        Claim(
            "Σ = I Tucker-2 ALS vs HOOI (alternating SVDs), trained c2/c3, max rel. difference of "
            "the reconstructions (the test suite also checks tensorly)",
            max(out["hooi_diff"].values()), 1e-6, "<=",
        )
    )  # fmt: skip
    result.claims += _mechanics(seed)
    result.metrics = {
        "original_accuracy": orig, "epochs": out["epochs"], "train_s": out["train_s"],
        "ranks": out["ranks"], "hooi_rel_diff": out["hooi_diff"],
    }  # fmt: skip
    result.add_series(
        "sigma_als_error",
        {
            "x": list(range(max(len(v) for v in out["traces"].values()))),
            **{k: v + [v[-1]] * (max(len(u) for u in out["traces"].values()) - len(v)) for k, v in out["traces"].items()},
        },
        title=f"Data-informed (Σ) ALS convergence per layer, seed {seed}",
        xlabel="ALS iteration (0 = Frobenius initialisation)",
        ylabel="relative Σ-error ‖(W − W̃)L‖ / ‖WL‖",
    )  # fmt: skip
    result.notes += [
        f"Original CNN trained {out['epochs']} epochs (Adam 3e-3): test accuracy {orig:.3f} "
        "(the spec's prototype reached 0.980).",
        "Σ for the thresholds: uncentred second moment of the im2col patches of 256 training "
        "images; rows marked '(centred Σ)' use the official centred covariance (no claim).",
        "Frobenius baselines are the package's own ALS with Σ = I (tensorly is used only in the "
        "tests to check them).",
    ]
    result.metrics["seeds"] = seeds
    for extra, o in others.items():
        accs = ", ".join(f"{k} {v['accuracy']:.3f}" for k, v in o["results"].items())
        result.notes.append(f"seed {extra}: original {o['orig_acc']:.3f}; {accs}")
        result.metrics[f"seed_{extra}"] = {
            "original": o["orig_acc"],
            **{k: v["accuracy"] for k, v in o["results"].items()},
        }
    if mode == "full":
        _add_sweep(result, {seed: out, **others}, seeds)
    if not all(math.isfinite(c.measured) for c in result.claims):
        result.notes.append("some measurements are not finite")
    return result
