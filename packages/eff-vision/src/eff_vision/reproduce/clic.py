"""Reproduction ``vision.clic``: CLIC vs plain CLIP fine-tuning (and NegCLIP) on coloured shapes.

Data (spec, "CLIC → Reproduction"; :func:`eff_vision.data.shapes.make_shape_pairs`): 32×32 images
with two objects (left and right half), each a colour of {red, green, blue, yellow} (different
within an image) and a shape of {circle, square, triangle}; captions "c1 s1 and c2 s2" with the
objects in random order; 2000 training images, 400 fixed test images (another seed stream).

Model: :class:`eff_vision.clic.tiny.TinyCLIP` pre-trained from scratch (both towers, plain CLIP
loss, Adam 2e-3, batch 96, 600 steps), then every method is fine-tuned **from the same
checkpoint, on the same data and seed**: the official recipe's structure (vision tower frozen,
alternation f = 1, loss weights 0.5 / 0.5 / 1, cosine schedule with 20 % warm-up, logit scale
≤ 100) with the toy's optimiser settings (AdamW lr 3e-4, weight decay 0.1, 300 steps; the official
1e-6 is for a pretrained ViT). CLIC batches: 64 concatenated pairs side by side (32×64), positives
p1/p2, one between-caption swap negative (colours and shapes are the toy's POS tags); plain CLIP
batches: 96 single images. Baselines: plain CLIP fine-tuning (single images) and NegCLIP (single
images, in-caption swap negative). Evaluation (SugarCrepe-like): swap-attribute accuracy,
replace-attribute accuracy and image→text R@1 over the 400 test captions.

Honest reading (spec): a prototype saw swap-attribute accuracy near chance for every model, so
the toy cannot show the paper's compositional gain; the claims are mechanics, non-inferiority
and the printed comparison. Quick mode pre-trains 100 steps and fine-tunes 40 (CI budget).
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from eff_shared.errors import check_choice, check_positive
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import make_rng
from eff_shared.torch import seeded
from eff_vision.clic import (
    CLICConfig,
    CLICTrainer,
    ConcatPairDataset,
    SwapFallbackWarning,
    TinyCLIP,
    alternation_pattern,
    clic_loss,
    clip_loss,
    compositional_eval,
    concat_texts,
    swap_candidates,
)
from eff_vision.clic.pretrain import (
    images_to_tensor,
    pretrained_tiny_clip,
    shape_data,
    shape_tokenizer,
)
from eff_vision.data.shapes import ShapeCaptionDataset, shape_word_types

__all__ = ["CLICReproConfig", "experiment", "pretrained_tiny_clip", "run", "shape_data"]

METHODS = ("pretrained", "CLIP-FT", "NegCLIP", "CLIC")


@dataclass(frozen=True)
class CLICReproConfig:
    n_train: int = 2000
    n_test: int = 400
    pretrain_steps: int = 600
    pretrain_batch: int = 96
    pretrain_lr: float = 2e-3
    finetune_steps: int = 300
    lr: float = 3e-4
    weight_decay: float = 0.1
    clic_batch: int = 64
    clip_batch: int = 96
    freeze_vision: bool = True

    def __post_init__(self) -> None:
        for name in (
            "n_train",
            "n_test",
            "pretrain_steps",
            "pretrain_batch",
            "finetune_steps",
            "clic_batch",
            "clip_batch",
        ):
            check_positive(name, getattr(self, name), integer=True)
        check_positive("lr", self.lr)
        check_positive("pretrain_lr", self.pretrain_lr)


def _dataset(train, seed: int) -> ConcatPairDataset:
    return ConcatPairDataset(
        ShapeCaptionDataset(train), shape_tokenizer(), additional_positives=0, seed=seed,
        word_types=shape_word_types, layout="side_by_side", mean=None, std=None,
    )  # fmt: skip


def _finetune(cfg: CLICReproConfig, method: str, seed: int) -> tuple[TinyCLIP, dict, float]:
    train, _ = shape_data(seed, cfg.n_train, cfg.n_test)
    model = pretrained_tiny_clip(
        seed, cfg.pretrain_steps, cfg.pretrain_batch, cfg.pretrain_lr, cfg.n_train
    )
    single = method != "clic"
    ccfg = CLICConfig(
        lr=cfg.lr, lr_start=cfg.lr * 1e-2, lr_end=cfg.lr * 1e-2, weight_decay=cfg.weight_decay,
        freeze_vision=cfg.freeze_vision, steps=cfg.finetune_steps, method=method, seed=seed,
        batch_size=cfg.clip_batch if single else cfg.clic_batch, clip_batch_size=cfg.clip_batch,
    )  # fmt: skip
    t0 = time.process_time()
    with seeded(seed, 305), warnings.catch_warnings(record=True) as caught:
        # the official fallback (two random tokens swapped when the captions share every word of
        # every taggable type) is frequent with the toy's 7-word vocabulary: count it, don't print it
        warnings.simplefilter("always", SwapFallbackWarning)
        hist = CLICTrainer(model, ccfg, shape_tokenizer()).fit(_dataset(train, seed))
    hist["fallback_negatives"] = sum(issubclass(w.category, SwapFallbackWarning) for w in caught)
    for w in caught:
        if not issubclass(w.category, SwapFallbackWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model, hist, time.process_time() - t0


def _evaluate(model: TinyCLIP, test) -> dict[str, float]:
    return compositional_eval(
        model,
        images_to_tensor(test.images),
        test.captions,
        test.swapped,
        test.replaced,
        shape_tokenizer(),
    )


def experiment(cfg: CLICReproConfig, seed: int) -> dict[str, Any]:
    train, test = shape_data(seed, cfg.n_train, cfg.n_test)
    t0 = time.process_time()
    base = pretrained_tiny_clip(
        seed, cfg.pretrain_steps, cfg.pretrain_batch, cfg.pretrain_lr, cfg.n_train
    )
    pretrain_s = time.process_time() - t0
    scores = {"pretrained": _evaluate(base, test)}
    models, hists, cpu = {}, {}, {}
    for method, key in (("clip", "CLIP-FT"), ("negclip", "NegCLIP"), ("clic", "CLIC")):
        models[key], hists[key], cpu[key] = _finetune(cfg, method, seed)
        scores[key] = _evaluate(models[key], test)
    rows = [
        {"method": m, "swap-att": scores[m]["swap_att"], "replace-att": scores[m]["replace_att"],
         "R@1": scores[m]["R@1"], "train CPU s (pre-train for pretrained)": cpu.get(m, pretrain_s if m == "pretrained" else 0.0)}
        for m in METHODS
    ]  # fmt: skip
    vis_same = all(
        torch.equal(v, models["CLIC"].visual.state_dict()[k])
        for k, v in base.visual.state_dict().items()
    )
    return {
        "rows": rows, "scores": scores, "hists": hists, "cpu": cpu, "pretrain_s": pretrain_s,
        "vision_unchanged": vis_same, "base": base, "train": train, "test": test,
    }  # fmt: skip


def _data_mechanics(seed: int) -> list[Claim]:
    """Threshold 1 on official-geometry datasets of both orientations and on the toy."""
    import cv2

    rng = make_rng(seed, 311)
    imgs = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(6)]  # wider
    imgs += [rng.integers(0, 256, (80, 40, 3), dtype=np.uint8) for _ in range(6)]  # higher
    caps = [[f"a {c} {s} on the table", f"the {s} is {c}"] for c, s in zip(
        ["red", "blue", "green", "white", "black", "pink"] * 2, ["cat", "dog", "cup", "box", "car", "hat"] * 2, strict=True)]  # fmt: skip
    tags = {"red": "ADJ", "blue": "ADJ", "green": "ADJ", "white": "ADJ", "black": "ADJ", "pink": "ADJ",
            "cat": "NOUN", "dog": "NOUN", "cup": "NOUN", "box": "NOUN", "car": "NOUN", "hat": "NOUN",
            "table": "NOUN", "on": "ADP", "the": "DET", "a": "DET", "is": "AUX", ".": "PUNCT"}  # fmt: skip

    def word_types(c: str) -> list[tuple[str, str]]:
        return [(w, tags.get(w, "X")) for w in c.replace(".", " . ").split()]

    base = list(zip(imgs, caps, strict=True))
    ds = ConcatPairDataset(base, lambda t: torch.zeros(4, dtype=torch.long), additional_positives=2, seed=seed,
                           word_types=word_types)  # fmt: skip
    mean, std = np.array(ds.mean), np.array(ds.std)
    halves_err, geometry_ok, orient_ok = 0.0, True, True
    for i in range(len(base)):
        item = ds[i]
        j, first = item["partner"], bool(item["order"])
        im = item["image"].numpy().transpose(1, 2, 0) * std + mean
        wider = i < 6
        geometry_ok &= im.shape == (224, 224, 3)
        orient_ok &= (j < 6) == wider
        hw = (112, 224) if wider else (224, 112)
        ref = [np.clip(cv2.resize(b.astype(np.float32) / 255, (hw[1], hw[0]), interpolation=cv2.INTER_CUBIC), 0, 1)
               for b in (imgs[i], imgs[j])]  # fmt: skip
        a, b = ref if first else ref[::-1]
        got = (im[:112], im[112:]) if wider else (im[:, :112], im[:, 112:])
        halves_err = max(
            halves_err, float(np.abs(got[0] - a).max()), float(np.abs(got[1] - b).max())
        )
    # the two orders: frequency over many epochs
    orders = []
    for epoch in range(200):
        ds.set_epoch(epoch)
        orders += [ds[i]["order"] for i in range(len(base))]
    freq = float(np.mean(orders))
    # texts on the toy: p2 is p1 with the captions exchanged; one same-type swapped pair in the negative
    train, _ = shape_data(seed)
    toy = _dataset(train, seed)
    text_ok, neg_ok, fallback = 0, 0, 0
    n_check = 200
    for i in range(n_check):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SwapFallbackWarning)
            t = toy[i]["texts"]
        text_ok += int(
            t["positives"][0] == concat_texts([t["c1"], t["c2"]])
            and t["positives"][1] == concat_texts([t["c2"], t["c1"]])
        )
        if (
            caught
        ):  # official fallback: no (non-degenerate) same-type pair once shared words are dropped
            fallback += 1
            neg_ok += int(not swap_candidates(t["c1"], t["c2"], shape_word_types))
        else:
            neg_ok += int(_one_swap(t["negative"], t["c1"], t["c2"]))
    return [
        Claim("concatenated halves vs the single images resized (bicubic) to 112×224 / 224×112, max abs error",
              halves_err, 1e-5, "<="),
        Claim("224×224 concatenations and partners of the same orientation (both orientations, 1 = yes)",
              float(geometry_ok and orient_ok), 1.0, ">="),
        Claim("|frequency of image-1-first − 0.5| over 2400 draws", abs(freq - 0.5), 0.05, "<="),
        Claim(f"p2 = concat(c2, c1) and p1 = concat(c1, c2) (toy items, count of {n_check})", float(text_ok), float(n_check), ">="),
        Claim(f"negative = p1 or p2 with exactly one same-type word pair swapped between the captions, ≠ p1, p2; "
              f"fallback only when no such swap exists ({fallback} fallbacks; count of {n_check})",
              float(neg_ok), float(n_check), ">="),
    ]  # fmt: skip


def _one_swap(neg: str, c1: str, c2: str) -> bool:
    """The negative is concat(c1', c2') or concat(c2', c1') where c1' and c2' differ from c1, c2 in
    one word each, the two words exchanged and of the same type."""
    parts = [p.strip() for p in neg.split(".") if p.strip()]
    if len(parts) != 2 or neg in (concat_texts([c1, c2]), concat_texts([c2, c1])):
        return False
    tag = dict(shape_word_types(c1 + " " + c2))
    for a, b in (parts, parts[::-1]):
        d1 = [(x, y) for x, y in zip(c1.split(), a.split(), strict=False) if x != y]
        d2 = [(x, y) for x, y in zip(c2.split(), b.split(), strict=False) if x != y]
        if len(c1.split()) != len(a.split()) or len(c2.split()) != len(b.split()):
            continue
        if (
            len(d1) == 1
            and len(d2) == 1
            and d1[0] == d2[0][::-1]
            and tag[d1[0][0]] == tag[d1[0][1]]
        ):
            return True
    return False


def _loss_mechanics(out: dict[str, Any], seed: int) -> list[Claim]:
    g = torch.Generator().manual_seed(seed)
    b, d = 12, 16
    img = torch.randn(b, d, generator=g, dtype=torch.float64)
    pos = [torch.randn(b, d, generator=g, dtype=torch.float64) for _ in range(4)]
    neg = torch.randn(b, d, generator=g, dtype=torch.float64)
    scale = torch.tensor(7.0, dtype=torch.float64)
    got = clic_loss(img, pos, neg, scale)["total"]
    ref = _naive_clic(img, pos, neg, scale)
    one = clic_loss(img, pos[:1], None, scale, cont=1.0)["total"]
    uni = clic_loss(img, [pos[0], pos[0].clone()], neg, scale)["uni"]
    official = {0.5: [True, False, False], 1: [True, False], 2: [False, True, True]}
    pattern_ok = all(alternation_pattern(f) == p for f, p in official.items())
    clic_hist = out["hists"]["CLIC"]
    kinds = Counter(clic_hist["kind"])
    return [
        Claim("clic_loss vs a naive per-set loop (4 positive sets, a negative; float64), abs difference",
              float((got - ref).abs()), 1e-6, "<="),
        Claim("clic_loss with one positive set and no negative − clip_loss, abs difference",
              float((one - clip_loss(img, pos[0], scale)).abs()), 1e-12, "<="),
        Claim("L_uni when p1 and p2 embed identically", float(uni), 0.0, "<="),
        Claim("alternation pattern = official create_normal_clip_loss_pattern for f ∈ {0.5, 1, 2} (1 = yes)",
              float(pattern_ok), 1.0, ">="),
        Claim(f"CLIC run alternates CLIC/CLIP batches 1:1 ({kinds['clic']} CLIC, {kinds['clip']} CLIP steps), |difference|",
              float(abs(kinds["clic"] - kinds["clip"])), 1.0, "<="),
        Claim("freeze_vision: image tower bit-identical after CLIC fine-tuning (1 = yes)", float(out["vision_unchanged"]), 1.0, ">="),
        Claim("largest logit scale seen in any fine-tuning step", max(h["max_logit_scale"] for h in out["hists"].values()), 100.0, "<="),
    ]  # fmt: skip


def _naive_clic(img, pos, neg, scale):
    import torch.nn.functional as F

    img = F.normalize(img, dim=-1)
    pos = [F.normalize(p, dim=-1) for p in pos]
    neg = F.normalize(neg, dim=-1)
    b = len(img)
    conts, snegs = [], []
    for p in pos:
        i2t = t2i = sn = 0.0
        for k in range(b):
            row = scale * torch.stack([img[k] @ p[m] for m in range(b)])
            col = scale * torch.stack([p[k] @ img[m] for m in range(b)])
            i2t = i2t - torch.log_softmax(row, 0)[k] / b
            t2i = t2i - torch.log_softmax(col, 0)[k] / b
            pair = scale * torch.stack([img[k] @ p[k], img[k] @ neg[k]])
            sn = sn - torch.log_softmax(pair, 0)[0] / b
        conts.append((i2t + t2i) / 2)
        snegs.append(sn)
    uni = sum(((pos[0][k] - pos[1][k]) ** 2).sum() for k in range(b)) / b
    return 0.5 * sum(conts) / len(pos) + 0.5 * sum(snegs) / len(pos) + 1.0 * uni


PAPER = ("SugarCrepe / SugarCrepe++ swap and replace: CLIC improves compositionality over CLIP "
         "fine-tuning across CLIP models, with consistent retrieval gains (numbers not retrieved)")  # fmt: skip
FULL: tuple[Mode, ...] = ("full",)


def _one_seed(cfg: CLICReproConfig, seed: int) -> dict[str, Any]:
    """Every method at one seed (same pre-trained checkpoint, data and test set)."""
    out = experiment(cfg, seed)
    sc = out["scores"]
    return {
        "out": out,
        "r1": sc["CLIC"]["R@1"] - sc["pretrained"]["R@1"],
        "swap": sc["CLIC"]["swap_att"] - sc["CLIP-FT"]["swap_att"],
    }


def run(mode: Mode = "quick", seed: int = 0, cfg: CLICReproConfig | None = None) -> Result:
    """Paper claims over seeds seed..seed+4 in full mode; quick mode (1 seed, 100 pre-training and
    40 fine-tuning steps) is a smoke run that judges the checks (the paper claims in full mode).
    ``cfg`` (default: the mode's) replaces the configuration; ``mode`` still picks the seeds."""
    check_choice("mode", mode, ["quick", "full"])
    if cfg is None:
        cfg = (
            CLICReproConfig()
            if mode == "full"
            else CLICReproConfig(pretrain_steps=100, finetune_steps=40)
        )
    t0 = time.perf_counter()
    seeds = claim_seeds(mode, seed, quick=1, full=5)
    per = {s: _one_seed(cfg, s) for s in seeds}
    out = per[seed]["out"]
    sc = out["scores"]
    result = Result(
        name="vision.clic", mode=mode, seed=seed,
        paper_title="Advancing Compositional Awareness in CLIP with Efficient Fine-Tuning",
        headline="CLIC (concatenated image pairs, between-caption swap negatives, shuffled positives) "
        "improves CLIP's compositionality (SugarCrepe swap/replace, SugarCrepe++) over plain and "
        "NegCLIP fine-tuning while keeping retrieval (numbers not retrieved)",
    )  # fmt: skip
    result.table = out["rows"]
    result.claims += _data_mechanics(seed)
    result.claims += _loss_mechanics(out, seed)
    complete = all(
        all(np.isfinite(r[k]) for k in ("swap-att", "replace-att", "R@1")) for r in out["rows"]
    )
    vals = lambda key: [per[s][key] for s in seeds]  # noqa: E731
    result.claims += [
        paper_claim("CLIC R@1 − pretrained R@1 (non-inferiority, 400 test images)", vals("r1"), -0.05, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER),
        paper_claim("CLIC swap-att − CLIP-FT swap-att (non-inferiority)", vals("swap"), -0.02, ">=",
                    seeds=seeds, modes=FULL, paper=PAPER, headline=True, expected="xfail",
                    reason="every model is near chance on attribute binding at this scale "
                    "(seed 0: CLIC 0.520 vs CLIP-FT 0.585)"),
        Claim("table rows with every metric (pretrained, CLIP-FT, NegCLIP, CLIC)", float(len(out["rows"]) * complete), 4.0, ">="),
    ]  # fmt: skip
    h = out["hists"]["CLIC"]
    clic_step = float(np.mean(h["clic_s"])) if h["clic_s"] else float("nan")
    clip_step = float(np.mean(out["hists"]["CLIP-FT"]["clip_s"]))
    result.metrics = {
        "scores": sc, "pretrain_cpu_s": out["pretrain_s"], "finetune_cpu_s": out["cpu"],
        "clic_over_clip_step_time": clic_step / clip_step,
        "clic_data_pipeline_share": h["data_s"] / (sum(h["clic_s"]) + sum(h["clip_s"])),
        "pretrain_steps": cfg.pretrain_steps, "finetune_steps": cfg.finetune_steps, "seeds": seeds,
        "per_seed_scores": {str(s): per[s]["out"]["scores"] for s in seeds},
    }  # fmt: skip
    best_swap = max(METHODS, key=lambda m: sc[m]["swap_att"])
    result.notes += [
        f"Pre-training {cfg.pretrain_steps} steps, fine-tuning {cfg.finetune_steps} steps (vision frozen, lr {cfg.lr}); "
        f"seeds {seeds}, the table is seed {seed}" + ("" if mode == "full" else " (quick: a smoke run)") + ".",
        "Comparison (printed whichever wins): " + "; ".join(
            f"{m}: swap-att {sc[m]['swap_att']:.3f}, replace-att {sc[m]['replace_att']:.3f}, R@1 {sc[m]['R@1']:.3f}" for m in METHODS
        ) + f". Best swap-att: {best_swap}. With 400 test images the standard error of swap-att is ≈ 0.025.",
        "Per seed CLIC − CLIP-FT swap-att / CLIC − pretrained R@1: "
        + "; ".join(f"{s}: {per[s]['swap']:+.3f} / {per[s]['r1']:+.3f}" for s in seeds),
        f"Step time CLIC / CLIP-FT (same run): {clic_step / clip_step:.2f}; data-pipeline share of the CLIC run "
        f"{result.metrics['clic_data_pipeline_share']:.2f}.",
        f"Official fallback negatives (random token swap: no same-type swap that is not just the two captions "
        "exchanged) "
        f"in the CLIC run: {h['fallback_negatives']} of {sum(k == 'clic' for k in h['kind']) * cfg.clic_batch} pairs.",
    ]  # fmt: skip
    result.metrics["wall_s"] = time.perf_counter() - t0
    return result
