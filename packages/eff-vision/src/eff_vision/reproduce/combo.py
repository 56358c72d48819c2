"""Reproduction ``vision.combo``: ComBo vs linear probes on four frozen toy digit backbones.

Data and backbones (spec, "ComBo → Reproduction"): scikit-learn's digits split into an 800-image
pretraining pool and a 997-image downstream pool; four frozen 2-layer conv backbones
(:func:`eff_vision.data.backbones.toy_digit_backbones`: supervised on digits 0–4, autoencoder,
rotation prediction, random init), each giving two 4×4 token maps (relu1 average-pooled from 8×8,
relu2), LayerNorm per map → 16 tokens × 192 channels. Tasks: digit10, parity, rot4, flipped + noisy
digit10; NTR = 700 training images per task, the other 297 test.

Probes: every single (model, layer) linear probe on mean-pooled tokens (100 epochs, lr 1e-2, batch
64) — "best single" is the best of the eight **on the test set** (an oracle choice that only favours
the baseline); the pooled concat-all linear probe (same recipe); ComBo (d = 32, 1 layer, 2 heads,
FF 64, dropout 0.1, AdamW 3e-3, weight decay 1e-4, 60 epochs, batch 32); ComBo on the top-2
backbones by importance; and, for threshold 3, ComBo with a fifth **decoy** backbone whose tokens
are input-independent noise — re-drawn at every use (every epoch, for every training image;
``specs/claims.md``: a noise code cached per image identifies the image and can be memorised) —
and ComBo on its top-2 backbones. The cached-noise decoy is printed as information (full mode).

Honest reading (spec): ComBo beats the best single backbone but did **not** beat the pooled linear
probe in the prototype; claim 2 is non-inferiority and the table prints every row.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from eff_shared.errors import check_choice, check_positive
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_vision.combo import (
    ComBo,
    ConstantDecoy,
    DecoyBackbone,
    LinearProbe,
    MultiBackboneFeatures,
    NoiseDecoy,
    evaluate_probe,
    fit_probe,
    load_features,
    select_backbones,
    select_columns,
)
from eff_vision.data.backbones import (
    PROBE_TASKS,
    ToyDigitBackbones,
    digit_probe_tasks,
    toy_digit_backbones,
)

__all__ = [
    "DECOYS",
    "ComboReproConfig",
    "build_features",
    "experiment",
    "make_decoy",
    "probe_task",
    "run",
]

NUM_CLASSES = {"digit10": 10, "parity": 2, "rot4": 4, "flip_noise": 10}
DECOYS = ("noise", "constant")
Decoy = str | Callable[[torch.Tensor], torch.Tensor] | nn.Module | None


def _check_decoy(decoy: Any) -> None:
    if decoy is None or (decoy in DECOYS if isinstance(decoy, str) else callable(decoy)):
        return
    msg = (f"decoy must be one of {[*DECOYS, None]!r} or a callable / nn.Module decoy backbone, "
           f"got {decoy!r}")  # fmt: skip
    raise ValueError(msg) if isinstance(decoy, str) else TypeError(msg)


def make_decoy(decoy: Decoy, seed: int) -> nn.Module | None:
    """The fifth, input-independent (or user) backbone that backbone relevance should rank last.

    ``"noise"``: :class:`~eff_vision.combo.NoiseDecoy` (32 channels, 4×4; its LayerNormed noise is
    re-drawn at every use while ComBo trains); ``"constant"``:
    :class:`~eff_vision.combo.ConstantDecoy` (one fixed 32×4×4 image for every input, cached like
    real tokens); a callable or ``nn.Module`` ``fn(x) -> map``: wrapped in
    :class:`~eff_vision.combo.DecoyBackbone` (its output resampled to the 4×4 grid, cached);
    ``None``: no decoy.
    """
    _check_decoy(decoy)
    if decoy is None:
        return None
    if isinstance(decoy, str):
        return (NoiseDecoy if decoy == "noise" else ConstantDecoy)(32, (4, 4), seed=seed)
    return DecoyBackbone(decoy)


def _redraws(cfg: ComboReproConfig) -> bool:
    return isinstance(cfg.decoy, str) and cfg.decoy == "noise"


@dataclass(frozen=True)
class ComboReproConfig:
    """The reproduction's settings: ``ntr`` training images per task, ``tasks``, the linear-probe
    and ComBo recipes, ``d_model``, ``top_k`` backbones kept by importance, and ``decoy``, the
    fifth backbone relevance should rank last (:func:`make_decoy`: ``"noise"`` (default),
    ``"constant"``, ``None`` or a user callable / ``nn.Module``)."""

    ntr: int = 700
    tasks: tuple[str, ...] = PROBE_TASKS
    linear_epochs: int = 100
    linear_lr: float = 1e-2
    linear_batch: int = 64
    combo_epochs: int = 60
    combo_lr: float = 3e-3
    combo_batch: int = 32
    d_model: int = 32
    top_k: int = 2
    decoy: Decoy = "noise"
    finetune_baseline: bool = False
    top_without_decoy: bool = True
    cached_decoy: bool = False

    def __post_init__(self) -> None:
        for name in (
            "ntr",
            "linear_epochs",
            "linear_batch",
            "combo_epochs",
            "combo_batch",
            "d_model",
            "top_k",
        ):
            check_positive(name, getattr(self, name), integer=True)
        _check_decoy(self.decoy)
        bad = [t for t in self.tasks if t not in PROBE_TASKS]
        if bad or not self.tasks:
            raise ValueError(
                f"tasks must be a non-empty subset of {list(PROBE_TASKS)}, got {list(self.tasks)!r}"
            )


def _timed_fit(
    model, tr, te, epochs: int, lr: float, batch: int, seed: int, transform=None
) -> tuple[float, float]:
    """Fit a probe (``fit_probe``); test accuracy and the CPU seconds of the fit."""
    t0 = time.process_time()
    fit_probe(
        model, tr[0], tr[1], epochs=epochs, lr=lr, batch_size=batch, seed=seed,
        token_transform=transform,
    )  # fmt: skip
    return evaluate_probe(model, *te), time.process_time() - t0


def _fit_combo(
    cfg: ComboReproConfig, tr, te, dims: dict[str, int], n_cls: int, seed: int, transform=None
) -> tuple[float, ComBo, float]:
    torch.manual_seed(seed)
    model = ComBo(dims, n_cls, d_model=cfg.d_model, num_tokens=tr[0].shape[1])
    acc, secs = _timed_fit(
        model, tr, te, cfg.combo_epochs, cfg.combo_lr, cfg.combo_batch, seed, transform
    )
    return acc, model, secs


def _fit_linear(cfg: ComboReproConfig, tr, te, n_cls: int, seed: int) -> tuple[float, float]:
    torch.manual_seed(seed)
    model = LinearProbe(tr[0].shape[-1], n_cls)
    return _timed_fit(model, tr, te, cfg.linear_epochs, cfg.linear_lr, cfg.linear_batch, seed)


def _finetune_backbone(
    backbone: torch.nn.Module, tr, te, n_cls: int, epochs: int, seed: int
) -> tuple[float, float]:
    """Fine-tune a copy of one backbone + a linear head (cost comparison only)."""
    import copy

    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        copy.deepcopy(backbone).requires_grad_(True),
        torch.nn.Flatten(),
        torch.nn.Linear(512, n_cls),
    )
    t0 = time.process_time()
    fit_probe(net, tr[0], tr[1], epochs=epochs, lr=3e-3, batch_size=32, seed=seed)
    return evaluate_probe(net, *te), time.process_time() - t0


class _Subsets:
    """ComBo fits on subsets of the backbones of one task, cached by the subset (and by whether
    the decoy's noise is re-drawn at every use)."""

    def __init__(self, cfg, tr, te, dims_all, n_cls, seed) -> None:
        self.cfg, self.tr, self.te, self.dims_all, self.n_cls, self.seed = (
            cfg,
            tr,
            te,
            dims_all,
            n_cls,
            seed,
        )
        self.fits: dict[tuple, tuple[float, ComBo, float]] = {}

    def __call__(self, names, redraw: bool = True) -> tuple[float, ComBo, float]:
        key = tuple(n for n in self.dims_all if n in names)
        redraw = redraw and "decoy" in key and _redraws(self.cfg)
        if (key, redraw) not in self.fits:
            tr_s, d_s = select_columns(self.tr[0], self.dims_all, key)
            te_s, _ = select_columns(self.te[0], self.dims_all, key)
            transform = None
            if redraw:
                names_s = list(d_s)
                start = sum(d_s[n] for n in names_s[: names_s.index("decoy")])
                transform = _Redraw(slice(start, start + d_s["decoy"]), self.seed + 17)
            self.fits[(key, redraw)] = _fit_combo(
                self.cfg, (tr_s, self.tr[1]), (te_s, self.te[1]), d_s, self.n_cls, self.seed,
                transform,
            )  # fmt: skip
        return self.fits[(key, redraw)]


class _Redraw:
    """Re-draw the decoy's LayerNormed noise columns of every training image at every epoch (every
    use): the decoy is input-independent (a noise code cached per image would identify it)."""

    def __init__(self, cols: slice, seed: int) -> None:
        self.cols, self.gen = cols, torch.Generator().manual_seed(seed)

    def __call__(self, tok: torch.Tensor) -> torch.Tensor:
        tok = tok.clone()
        noise = torch.randn(tok[..., self.cols].shape, generator=self.gen)
        tok[..., self.cols] = F.layer_norm(noise, (self.cols.stop - self.cols.start,))
        return tok


def probe_task(
    cfg: ComboReproConfig,
    feats: MultiBackboneFeatures,
    task: str,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    seed: int,
    timing: dict | None = None,
) -> tuple[dict, dict]:
    """Every probe of one task: returns ``(numbers, table row)``.

    ``feats``: the extractor (from :func:`build_features`; a backbone named ``"decoy"`` is the
    decoy); ``task``: a key of ``NUM_CLASSES`` (its class count); ``data``: ``(x_train, y_train,
    x_test, y_test)`` as :func:`~eff_vision.data.backbones.digit_probe_tasks` gives them;
    ``seed``: the probes' seed; ``timing``: when a dict with ``combo_s``, ``linear_concat_s`` and
    ``n``, the CPU seconds of the ComBo and concat-linear fits are added to it. With a decoy the
    numbers also hold ``importance_decoy``, ``combo_decoy``, ``top_decoy``, ``combo_top_decoy``
    and ``decoy_lowest``.
    """
    timing = {"combo_s": 0.0, "linear_concat_s": 0.0, "n": 0} if timing is None else timing
    xtr, ytr, xte, yte = data
    n_cls = NUM_CLASSES[task]
    all_tr, all_te = feats.extract(xtr), feats.extract(xte)
    dims_all = dict(feats.in_dims)
    real = [n for n in dims_all if n != "decoy"]
    subsets = _Subsets(cfg, (all_tr, ytr), (all_te, yte), dims_all, n_cls, seed)
    single = {
        f"{name}.{layer}": _fit_linear(
            cfg, (all_tr[..., cols], ytr), (all_te[..., cols], yte), n_cls, seed
        )[0]
        for (name, layer), cols in feats.map_columns.items()
        if name != "decoy"
    }
    best_single_name = max(single, key=single.get)
    tok_tr, _ = select_columns(all_tr, dims_all, real)
    tok_te, _ = select_columns(all_te, dims_all, real)
    concat_acc, concat_s = _fit_linear(cfg, (tok_tr, ytr), (tok_te, yte), n_cls, seed)
    combo_acc, combo, combo_s = subsets(real)
    timing["combo_s"] += combo_s
    timing["linear_concat_s"] += concat_s
    timing["n"] += 1
    imp = combo.backbone_importance()
    top = select_backbones(imp, cfg.top_k)
    top_acc = subsets(top)[0] if cfg.top_without_decoy else float("nan")
    out = {
        "single": single, "best_single": single[best_single_name], "best_single_name": best_single_name,
        "concat": concat_acc, "combo": combo_acc, "top": top, "combo_top": top_acc, "importance": imp,
    }  # fmt: skip
    row = {
        "task": task, "best single linear": out["best_single"], "(best single is)": best_single_name,
        "concat linear": concat_acc, "ComBo (all)": combo_acc, f"ComBo (top-{cfg.top_k})": top_acc,
        "top-k": "+".join(top),
    }  # fmt: skip
    if "decoy" in dims_all:
        # the decoy's noise re-drawn at every use (claims.md); the cached-noise fit is information
        all_acc, combo_d, _ = subsets(list(dims_all))
        imp_d = combo_d.backbone_importance()
        top_d = select_backbones(imp_d, cfg.top_k)
        out.update(
            importance_decoy=imp_d, combo_decoy=all_acc, top_decoy=top_d, combo_top_decoy=subsets(top_d)[0],
            decoy_lowest=min(imp_d, key=imp_d.get) == "decoy",
        )  # fmt: skip
        row.update({
            "ComBo (all + decoy)": all_acc, f"ComBo (top-{cfg.top_k} of all + decoy)": out["combo_top_decoy"],
            "decoy importance rank": sorted(imp_d.values(), reverse=True).index(imp_d["decoy"]) + 1,
        })  # fmt: skip
        if cfg.cached_decoy:
            # information: the decoy's noise drawn once per image and cached like real tokens
            cached_acc, combo_c, _ = subsets(list(dims_all), redraw=False)
            imp_c = combo_c.backbone_importance()
            out.update(importance_cached=imp_c, combo_cached=cached_acc,
                       cached_rank=sorted(imp_c.values(), reverse=True).index(imp_c["decoy"]) + 1)  # fmt: skip
            row["ComBo (all + cached-noise decoy)"] = cached_acc
            row["cached-noise decoy rank"] = out["cached_rank"]
    return out, row


def build_features(
    cfg: ComboReproConfig, seed: int
) -> tuple[MultiBackboneFeatures, ToyDigitBackbones]:
    """The four frozen toy digit backbones of ``seed`` (two 4×4 maps each) plus the decoy of
    ``cfg.decoy`` (:func:`make_decoy`, named ``"decoy"``) as one extractor; and the backbones."""
    bb = toy_digit_backbones(seed)
    backbones: dict[str, torch.nn.Module] = dict(bb.models)
    layers = {n: list(v) for n, v in bb.layers.items()}
    decoy = make_decoy(cfg.decoy, seed)
    if decoy is not None:
        backbones["decoy"] = decoy
        layers["decoy"] = ["out"]
    return MultiBackboneFeatures(backbones, layers, grid=(4, 4)), bb


def experiment(cfg: ComboReproConfig, seed: int) -> dict[str, Any]:
    """Every probe on every task of ``cfg.tasks`` at ``seed`` (:func:`probe_task`), the table rows
    and the frozen-backbone checks."""
    feats, bb = build_features(cfg, seed)
    snapshot = {n: {k: v.clone() for k, v in m.state_dict().items()} for n, m in bb.models.items()}
    tasks = digit_probe_tasks(*bb.downstream, cfg.ntr, seed, tasks=cfg.tasks)
    rows, per_task = [], {}
    timing = {"combo_s": 0.0, "linear_concat_s": 0.0, "n": 0}
    for ti, (task, data) in enumerate(tasks.items()):
        out, row = probe_task(cfg, feats, task, data, seed * 1000 + ti, timing)
        if cfg.finetune_baseline and ti == 0:
            ft_acc, ft_s = _finetune_backbone(
                bb.models["ae"],
                data[:2],
                data[2:],
                NUM_CLASSES[task],
                cfg.combo_epochs,
                seed * 1000,
            )
            out.update(finetune_ae=ft_acc, finetune_s=ft_s)
        per_task[task] = out
        rows.append(row)
    mean = lambda key: sum(per_task[t][key] for t in per_task) / len(per_task)  # noqa: E731
    mean_row: dict[str, Any] = {
        "task": "mean", "best single linear": mean("best_single"), "(best single is)": "",
        "concat linear": mean("concat"), "ComBo (all)": mean("combo"), f"ComBo (top-{cfg.top_k})": mean("combo_top"),
        "top-k": "",
    }  # fmt: skip
    if cfg.decoy is not None:
        mean_row.update({"ComBo (all + decoy)": mean("combo_decoy"), f"ComBo (top-{cfg.top_k} of all + decoy)": mean("combo_top_decoy"),
                         "decoy importance rank": ""})  # fmt: skip
        if cfg.cached_decoy:
            mean_row["ComBo (all + cached-noise decoy)"] = mean("combo_cached")
            mean_row["cached-noise decoy rank"] = ""
    rows.append(mean_row)
    if not cfg.top_without_decoy:
        for r in rows:
            r.pop(f"ComBo (top-{cfg.top_k})")
            r.pop("top-k")
    unchanged = all(
        torch.equal(v, m.state_dict()[k])
        for n, m in bb.models.items()
        for k, v in snapshot[n].items()
    ) and all(p.grad is None for m in bb.models.values() for p in m.parameters())
    return {
        "rows": rows, "per_task": per_task, "timing": timing, "backbones_unchanged": unchanged,
        "grad_enabled_in_backbones": feats.grad_enabled_in_backbones, "in_dims": dict(feats.in_dims),
        "tokens_per_image": 16 * sum(feats.in_dims.values()), "features": feats, "data": bb,
    }  # fmt: skip


def _mechanics(out: dict[str, Any], seed: int) -> list[Claim]:
    feats: MultiBackboneFeatures = out["features"]
    x = out["data"].downstream[0][:96]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokens.npz"
        real = MultiBackboneFeatures(out["data"].models, out["data"].layers, grid=(4, 4))
        real.precompute(
            [(x[i : i + 32], torch.zeros(len(x[i : i + 32]))) for i in range(0, len(x), 32)], path
        )
        cached = load_features(path)["tokens"]
    cache_err = float((cached - real(x)).abs().max())
    tokens_grad = float(real(x).requires_grad)
    # importance columns: a projection that is non-zero only on backbone k's columns
    dims = dict(real.in_dims)
    ok = 0
    for target in dims:
        probe = ComBo(dims, 3, num_tokens=16)
        with torch.no_grad():
            probe.proj.weight.zero_()
            probe.proj.weight[:, real.columns[target]] = 1.0
        imp = probe.backbone_importance()
        ok += int(imp[target] > 0.0 and all(v == 0.0 for n, v in imp.items() if n != target))
    gen = torch.Generator().manual_seed(seed)
    topk_ok = 0
    for _ in range(20):
        vals = torch.rand(6, generator=gen).tolist()
        imp = {f"m{i}": v for i, v in enumerate(vals)}
        want = [f"m{i}" for i in sorted(range(6), key=lambda i: -vals[i])[:3]]
        topk_ok += int(select_backbones(imp, 3) == want)
    # same seed ⇒ same numbers (a short fit twice)
    tok = real(x)
    y = out["data"].downstream[1][:96]
    params = []
    for _ in range(2):
        torch.manual_seed(seed)
        m = ComBo(dims, 10, num_tokens=16)
        fit_probe(m, tok, y, epochs=3, seed=seed)
        params.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    del feats
    return [
        Claim("backbones unchanged (bit-identical state) and no .grad after every probe fit (1 = yes)",
              float(out["backbones_unchanged"]), 1.0, ">="),
        Claim("backbones ran with grad disabled (1 = grad was enabled inside a backbone)",
              float(bool(out["grad_enabled_in_backbones"])), 0.0, "<="),
        Claim("extracted tokens require grad (1 = yes)", tokens_grad, 0.0, "<="),
        Claim("cached (precompute → load_features) vs recomputed tokens, max abs difference", cache_err, 0.0, "<="),
        Claim(f"importance columns map to the right backbone ({len(dims)} one-hot projections, count)",
              float(ok), float(len(dims)), ">="),
        Claim("select_backbones returns the top 3 of 6 (20 random importances, count)", float(topk_ok), 20.0, ">="),
        Claim("same seed ⇒ same ComBo parameters after a short fit, max abs difference",
              float((params[0] - params[1]).abs().max()), 0.0, "<="),
    ]  # fmt: skip


FULL: tuple[Mode, ...] = ("full",)
PAPER = ("VTAB-1k (19 tasks, 1,000 training images each): ComBo beats previous probing methods "
         "(linear, Head2Toe-like) on frozen foundation-model features")  # fmt: skip


def _one_seed(cfg: ComboReproConfig, seed: int) -> dict[str, Any]:
    """Every probe at one seed (same backbones, tasks and splits) and the per-seed numbers of the
    paper claims."""
    out = experiment(cfg, seed)
    mean = {r["task"]: r for r in out["rows"]}["mean"]
    per = out["per_task"]
    return {
        "out": out, "mean": mean,
        "vs_single": mean["ComBo (all)"] - mean["best single linear"],
        "vs_concat": mean["ComBo (all)"] - mean["concat linear"],
        "top_vs_all": mean[f"ComBo (top-{cfg.top_k} of all + decoy)"] - mean["ComBo (all + decoy)"],
        "decoy_lowest": float(sum(bool(p["decoy_lowest"]) for p in per.values())),
    }  # fmt: skip


def run(mode: Mode = "quick", seed: int = 0, cfg: ComboReproConfig | None = None) -> Result:
    check_choice("mode", mode, ["quick", "full"])
    # quick (CI budget): a smoke run at one seed (NTR 300, linear probes 20 epochs, ComBo 15) that
    # judges the checks (the decoy included); the paper claims are judged in full mode.
    # Full: seeds seed..seed+4 at the spec's recipe; the information rows (ComBo top-k without the
    # decoy, the cached-noise decoy, fine-tuning a backbone, NTR 200) at the master seed only.
    full = mode == "full"
    if cfg is not None:  # the caller's configuration at every seed
        base = master = cfg
    elif full:
        base = ComboReproConfig(top_without_decoy=False)
        master = replace(base, finetune_baseline=True, top_without_decoy=True, cached_decoy=True)
    else:
        base = master = ComboReproConfig(
            ntr=300, linear_epochs=20, combo_epochs=15, top_without_decoy=False
        )
    cfg = master
    t0 = time.perf_counter()
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per_seed = {s: _one_seed(master if s == seed else base, s) for s in seeds}
    out = per_seed[seed]["out"]
    per = out["per_task"]
    result = Result(
        name="vision.combo", mode=mode, seed=seed,
        paper_title="Fantastic Features and Where to Find Them: A Probing Method to combine Features "
        "from Multiple Foundation Models",
        headline="ComBo (a small transformer probe over the tokens of several frozen models and layers) "
        "beats previous probing methods (linear, Head2Toe-like) on VTAB-1k, and its backbone importance "
        "selects a cheaper subset with little loss",
    )  # fmt: skip
    result.table = out["rows"]
    vals = lambda key: [per_seed[s][key] for s in seeds]  # noqa: E731
    k = cfg.top_k
    result.claims += [
        paper_claim(f"ComBo(all) − best single (model, layer) linear probe, mean accuracy over the 4 tasks (NTR {cfg.ntr})",
                    vals("vs_single"), 0.03, ">=", seeds=seeds, modes=FULL, paper=PAPER, headline=True),
        paper_claim("ComBo(all) − pooled concat-all linear probe, mean accuracy (non-inferiority)",
                    vals("vs_concat"), -0.03, ">=", seeds=seeds, modes=FULL, paper=PAPER, headline=True),
        paper_claim(f"ComBo(top-{k} by importance, decoy among the candidates) − ComBo(all + decoy), mean accuracy",
                    vals("top_vs_all"), -0.01, ">=", seeds=seeds, modes=FULL,
                    paper="backbone importance selects a subset of models with little loss (no number)"),
        Claim("tasks (of 4) on which the input-independent decoy (noise re-drawn at every use) has the lowest "
              "importance, every seed", min(vals("decoy_lowest")), float(len(per)), ">=",
              values=vals("decoy_lowest"), seeds=seeds),
    ]  # fmt: skip
    result.claims += _mechanics(out, seed)
    tm = out["timing"]
    mean = per_seed[seed]["mean"]
    result.metrics = {
        "mean": {k: v for k, v in mean.items() if isinstance(v, float)},
        "per_seed_mean": {str(s): {k: v for k, v in per_seed[s]["mean"].items() if isinstance(v, float)}
                          for s in seeds},
        "importance": {t: p["importance"] for t, p in per.items()},
        "importance_with_decoy": {t: p.get("importance_decoy") for t, p in per.items()},
        "single_probes": {t: p["single"] for t, p in per.items()},
        "combo_train_cpu_s_per_task": tm["combo_s"] / tm["n"],
        "concat_linear_train_cpu_s_per_task": tm["linear_concat_s"] / tm["n"],
        "cached_floats_per_image": out["tokens_per_image"],
        "cached_bytes_per_image": 4 * out["tokens_per_image"],
        "seeds": seeds,
    }  # fmt: skip
    ranks = {t: sorted(p["importance_decoy"].values(), reverse=True).index(p["importance_decoy"]["decoy"]) + 1
             for t, p in per.items()}  # fmt: skip
    result.notes += [
        "Best single linear probe is chosen on the test set (oracle; favours the baseline).",
        f"Seeds {seeds}; the table is seed {seed}. Per seed ComBo − best single / − concat linear: "
        + "; ".join(f"{s}: {per_seed[s]['vs_single']:+.3f} / {per_seed[s]['vs_concat']:+.3f}" for s in seeds),
        f"Training cost per task (CPU s, same run): ComBo {tm['combo_s'] / tm['n']:.2f}, pooled linear "
        f"{tm['linear_concat_s'] / tm['n']:.2f}; cached tokens 16×{sum(out['in_dims'].values())} floats per image "
        f"({4 * out['tokens_per_image']} bytes, decoy included).",
        "Importance (no decoy): " + "; ".join(
            f"{t}: " + ", ".join(f"{n} {v:.3f}" for n, v in p["importance"].items()) for t, p in per.items()
        ),
        "Importance (decoy re-drawn at every use): " + "; ".join(
            f"{t}: " + ", ".join(f"{n} {v:.3f}" for n, v in p["importance_decoy"].items()) for t, p in per.items()
        ),
        f"Decoy importance rank (1 = most important of 5, noise re-drawn every epoch) per task at seed {seed}: "
        f"{ranks}.",
    ]  # fmt: skip
    if not full:
        result.notes.append(
            "Quick mode is a smoke run (NTR 300, linear probes 20 epochs, ComBo 15; full: NTR 700, 100 / 60): "
            "the paper claims and the information rows (cached-noise decoy, top-k without the decoy, "
            "fine-tuning, NTR 200) are in full mode."
        )
    if full:
        cached = {t: p["cached_rank"] for t, p in per.items()}
        result.metrics["importance_cached_decoy"] = {
            t: p["importance_cached"] for t, p in per.items()
        }
        result.notes.append(
            f"Information: with the decoy's noise drawn once per image and cached, its rank per task is {cached} "
            f"(lowest on {sum(r == 5 for r in cached.values())}/{len(cached)}): a cached noise code identifies "
            "each training image and ComBo can memorise it (700 images, weight decay 1e-4), so the projection "
            "weights on the decoy grow; input-independent means re-drawn at every use (claims.md)."
        )
        ft = next(iter(per.values()))
        result.metrics["finetune_ae_digit10"] = {
            "accuracy": ft["finetune_ae"],
            "cpu_s": ft["finetune_s"],
        }
        result.notes.append(
            f"Fine-tuning the autoencoder backbone + linear head on {next(iter(per))} ({cfg.combo_epochs} epochs): "
            f"accuracy {ft['finetune_ae']:.3f}, {ft['finetune_s']:.2f} CPU s (vs ComBo {tm['combo_s'] / tm['n']:.2f})."
        )
        low = experiment(ComboReproConfig(ntr=200, decoy=None), seed)
        m200 = {r["task"]: r for r in low["rows"]}["mean"]
        result.metrics["ntr_200_mean"] = {k: v for k, v in m200.items() if isinstance(v, float)}
        result.notes.append(
            "NTR 200 (no claim): "
            + ", ".join(f"{k} {v:.3f}" for k, v in m200.items() if isinstance(v, float))
        )
        keys = list(result.table[0])
        for r in low["rows"]:
            result.table.append(
                {k: (f"{r['task']} (NTR 200)" if k == "task" else r.get(k, "")) for k in keys}
            )
    result.metrics["wall_s"] = time.perf_counter() - t0
    return result
