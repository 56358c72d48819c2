import contextlib
import warnings

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from eff_vision.clic import (
    CLICConfig,
    CLICTrainer,
    ConcatPairDataset,
    SwapFallbackWarning,
    TinyCLIP,
    WordTokenizer,
    alternation_pattern,
    clic_loss,
    clip_loss,
    collate_pairs,
    compositional_eval,
    concat_texts,
    cosine_schedule,
    negclip_loss,
    param_groups,
    swap_negative,
    swap_within,
)
from eff_vision.data.shapes import (
    COLOURS,
    ShapeCaptionDataset,
    canonical_caption,
    make_shape_pairs,
    shape_vocabulary,
    shape_word_types,
)

TAGS = {"red": "ADJ", "blue": "ADJ", "green": "ADJ", "big": "ADJ", "cat": "NOUN", "dog": "NOUN", "car": "NOUN",
        "box": "NOUN", "sits": "VERB", "runs": "VERB", "the": "DET", "a": "DET", "and": "CCONJ", ".": "PUNCT"}  # fmt: skip


def word_types(caption):
    return [(w, TAGS.get(w, "X")) for w in caption.replace(".", " . ").split()]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _images(n_wide=4, n_high=4, seed=0):
    rng = _rng(seed)
    wide = [rng.integers(0, 256, (30, 50, 3), dtype=np.uint8) for _ in range(n_wide)]
    high = [rng.integers(0, 256, (60, 20, 3), dtype=np.uint8) for _ in range(n_high)]
    return wide + high


def _base(n_wide=4, n_high=4, extras=2):
    imgs = _images(n_wide, n_high)
    words = ["red cat", "blue dog", "green car", "big box"]
    caps = []
    for i in range(len(imgs)):
        main = f"the {words[i % 4]} sits"
        caps.append([main] + [f"a {words[(i + k) % 4]} runs {i}{k}" for k in range(1, extras + 1)])
    return list(zip(imgs, caps, strict=True))


def _tok(text):
    return torch.tensor([len(text)], dtype=torch.long)


def test_concatenation_follows_the_official_geometry_for_both_orientations():
    base = _base()
    ds = ConcatPairDataset(base, _tok, word_types=word_types, seed=3)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    seen_orders = set()
    for i in range(len(base)):
        item = ds[i]
        j, first = item["partner"], bool(item["order"])
        assert j != i and (j < 4) == (i < 4)  # partner of the same orientation, never itself
        img = item["image"].numpy().transpose(1, 2, 0) * std + mean
        assert img.shape == (224, 224, 3)
        wider = i < 4
        hw = (112, 224) if wider else (224, 112)
        ref = [
            np.clip(
                cv2.resize(
                    b.astype(np.float32) / 255, (hw[1], hw[0]), interpolation=cv2.INTER_CUBIC
                ),
                0,
                1,
            )
            for b in (base[i][0], base[j][0])
        ]
        a, b = ref if first else ref[::-1]
        halves = (
            (img[:112], img[112:]) if wider else (img[:, :112], img[:, 112:])
        )  # stacked / side by side
        np.testing.assert_allclose(halves[0], a, atol=1e-5)
        np.testing.assert_allclose(halves[1], b, atol=1e-5)
        seen_orders.add(first)
        single, text = ds.single(i)
        np.testing.assert_allclose(
            single.numpy().transpose(1, 2, 0) * std + mean, base[i][0] / 255, atol=1e-5
        )
        assert text == base[i][1][0]
    assert seen_orders == {True, False}


def test_order_is_random_with_probability_half_and_items_are_seeded():
    ds = ConcatPairDataset(_base(), _tok, word_types=word_types, seed=0, size=32)
    orders = []
    for epoch in range(250):
        ds.set_epoch(epoch)
        orders += [ds[i]["order"] for i in range(len(ds))]
    assert abs(np.mean(orders) - 0.5) <= 0.05
    again = ConcatPairDataset(_base(), _tok, word_types=word_types, seed=0, size=32)
    other = ConcatPairDataset(_base(), _tok, word_types=word_types, seed=1, size=32)
    ds.set_epoch(0)
    a, b = [ds[i]["texts"] for i in range(8)], [again[i]["texts"] for i in range(8)]
    assert a == b and torch.equal(ds[5]["image"], again[5]["image"])
    assert [other[i]["texts"] for i in range(8)] != a


def test_positives_shuffled_positive_and_additional_positives():
    base = _base(extras=3)
    ds = ConcatPairDataset(base, _tok, additional_positives=2, word_types=word_types, seed=0)
    for i in range(len(base)):
        t = ds[i]["texts"]
        c1, c2 = t["c1"], t["c2"]
        p = t["positives"]
        assert p[0] == concat_texts([c1, c2]) and p[1] == concat_texts([c2, c1])
        assert len(p) == 4 and ds[i]["positives"].shape == (4, 1)
        extras_i, extras_j = base[i][1][1:], base[ds[i]["partner"]][1][1:]
        pairs = [tuple(s.strip() + "." for s in q.split(".") if s.strip()) for q in p[2:]]
        firsts = []
        for x, y in pairs:  # one extra caption of each image, in either order
            assert (x[:-1] in extras_i and y[:-1] in extras_j) or (
                y[:-1] in extras_i and x[:-1] in extras_j
            )
            firsts.append(x[:-1] if x[:-1] in extras_i else y[:-1])
        assert len(set(firsts)) == 2  # >= 2 extras: sampled without repetition
    few = ConcatPairDataset(_base(extras=1), _tok, additional_positives=2, word_types=word_types)
    t = few[0]["texts"]["positives"]
    assert len(t) == 4  # one extra caption: repeated to reach 2
    assert concat_texts(["a ", "b."]) == "a. b."


def test_swap_negative_swaps_one_same_type_pair_between_the_captions():
    c1, c2 = "the red cat sits and the red cat runs", "a blue dog sits"
    for seed in range(30):
        neg = swap_negative(c1, c2, word_types, _rng(seed))
        parts = [p.strip() for p in neg.split(".") if p.strip()]
        assert len(parts) == 2 and neg not in (concat_texts([c1, c2]), concat_texts([c2, c1]))
        m1 = next(p for p in parts if len(p.split()) == len(c1.split()))
        m2 = next(p for p in parts if p != m1)
        d1 = {(a, b) for a, b in zip(c1.split(), m1.split(), strict=True) if a != b}
        d2 = {(a, b) for a, b in zip(c2.split(), m2.split(), strict=True) if a != b}
        assert (
            len(d1) == 1 and len(d2) == 1
        )  # all occurrences of the word (both "red" or both "cat")
        (a, b), (x, y) = d1.pop(), d2.pop()
        assert (a, b) == (y, x) and TAGS[a] == TAGS[b]
        assert a != "sits"  # shared words are never swapped
    # captions that differ in one word only: the released code's swap just exchanges them (a
    # positive); the intended behaviour picks another swap, or falls back when none is left
    c1, c2 = "the red cat sits", "the blue cat runs"  # ADJ red ↔ blue is fine; VERB too
    negs = {swap_negative(c1, c2, word_types, _rng(s)) for s in range(20)}
    assert not negs & {concat_texts([c1, c2]), concat_texts([c2, c1])}
    c1, c2 = "the red cat", "the blue cat"  # the only swap is degenerate
    released = swap_negative(c1, c2, word_types, _rng(0), allow_degenerate=True)
    assert released in (concat_texts([c1, c2]), concat_texts([c2, c1]))
    with pytest.warns(SwapFallbackWarning):
        swap_negative(c1, c2, word_types, _rng(0))


def test_swap_fallback_warns_or_raises_when_strict():
    with pytest.warns(SwapFallbackWarning, match="swapping two random tokens"):
        neg = swap_negative("the red cat", "the red cat", word_types, _rng(0))
    assert neg.count(".") == 2
    with pytest.raises(ValueError, match="no swappable same-type word pair"):
        swap_negative("the red cat", "the red cat", word_types, _rng(0), strict=True)
    assert swap_within("the red cat and the blue dog", word_types, _rng(1)) in (
        "the blue cat and the red dog", "the red dog and the blue cat",
    )  # fmt: skip
    with pytest.raises(ValueError, match="no swappable same-type word pair"):
        swap_within("the red cat", word_types, _rng(0), strict=True)


def _naive(img, pos, neg, s, w=(0.5, 0.5, 1.0)):
    img, pos, neg = (
        F.normalize(img, dim=-1),
        [F.normalize(p, dim=-1) for p in pos],
        F.normalize(neg, dim=-1),
    )
    b = len(img)
    cont = sneg = 0.0
    for p in pos:
        sim = s * img @ p.T
        i2t = -np.mean([float(sim[k, k] - torch.logsumexp(sim[k], 0)) for k in range(b)])
        t2i = -np.mean([float(sim[k, k] - torch.logsumexp(sim[:, k], 0)) for k in range(b)])
        negs = s * (img * neg).sum(-1)
        sn = -np.mean([float(sim[k, k] - torch.logaddexp(sim[k, k], negs[k])) for k in range(b)])
        cont += (i2t + t2i) / 2 / len(pos)
        sneg += sn / len(pos)
    uni = float(((pos[0] - pos[1]) ** 2).sum(-1).mean())
    return w[0] * cont + w[1] * sneg + w[2] * uni


def test_clic_loss_matches_a_naive_loop_and_reduces_to_clip():
    g = torch.Generator().manual_seed(0)
    img = torch.randn(9, 6, generator=g, dtype=torch.float64)
    pos = [torch.randn(9, 6, generator=g, dtype=torch.float64) for _ in range(3)]
    neg = torch.randn(9, 6, generator=g, dtype=torch.float64)
    out = clic_loss(img, pos, neg, 5.0)
    assert float(out["total"]) == pytest.approx(_naive(img, pos, neg, 5.0), abs=1e-10)
    out = clic_loss(img, pos, neg, 5.0, cont=1.0, sneg=0.2, uni=0.0)
    assert float(out["total"]) == pytest.approx(
        _naive(img, pos, neg, 5.0, (1.0, 0.2, 0.0)), abs=1e-10
    )
    one = clic_loss(img, pos[:1], None, 5.0, cont=1.0)
    assert float(one["total"]) == pytest.approx(float(clip_loss(img, pos[0], 5.0)), abs=1e-12)
    assert float(clic_loss(img, [pos[0], pos[0].clone()], neg, 5.0)["uni"]) == 0.0
    # NegCLIP: the negatives join the image→text softmax
    txt = pos[0]
    ni, nt, nn_ = F.normalize(img, dim=-1), F.normalize(txt, dim=-1), F.normalize(neg, dim=-1)
    i2t = F.cross_entropy(5 * ni @ torch.cat([nt, nn_]).T, torch.arange(9))
    t2i = F.cross_entropy(5 * nt @ ni.T, torch.arange(9))
    assert float(negclip_loss(img, txt, neg, 5.0)) == pytest.approx(
        float((i2t + t2i) / 2), abs=1e-12
    )


def test_alternation_pattern_and_cosine_schedule_match_the_official_rules():
    assert alternation_pattern(1) == [True, False]
    assert alternation_pattern(2) == [False, True, True]
    assert alternation_pattern(3.5) == [False, True, True, True]
    assert alternation_pattern(0.5) == [True, False, False]
    assert alternation_pattern(0.25) == [True, False, False, False, False]
    sched = cosine_schedule(1e-3, 1e-5, 50, 10, 1e-6)
    assert len(sched) == 50 and sched[0] == pytest.approx(1e-6) and sched[9] == pytest.approx(1e-3)
    i = np.arange(40)
    np.testing.assert_allclose(
        sched[10:], 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + np.cos(np.pi * i / 40))
    )


def _toy(n=48, seed=0):
    pairs = make_shape_pairs(n, seed)
    tok = WordTokenizer(shape_vocabulary(), context_length=16)
    ds = ConcatPairDataset(ShapeCaptionDataset(pairs), tok, additional_positives=2, seed=seed,
                           word_types=shape_word_types, layout="side_by_side", mean=None, std=None)  # fmt: skip
    return pairs, tok, ds


def _fit(method="clic", seed=0, steps=6, freeze=True, init_scale=None, **kw):
    _pairs, tok, ds = _toy()
    torch.manual_seed(seed)
    model = TinyCLIP(len(tok), tok.context_length)
    if init_scale is not None:
        with torch.no_grad():
            model.logit_scale.fill_(float(np.log(init_scale)))
    before = {k: v.clone() for k, v in model.visual.state_dict().items()}
    cfg = CLICConfig(lr=3e-3, steps=steps, batch_size=8, clip_batch_size=12, method=method, seed=seed,
                     freeze_vision=freeze, **kw)  # fmt: skip
    with _no_fallback_warning():
        hist = CLICTrainer(model, cfg, tok).fit(ds)
    return model, before, hist


@contextlib.contextmanager
def _no_fallback_warning():
    """The toy's 7-word vocabulary triggers the official random-token fallback now and then."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SwapFallbackWarning)
        yield


def test_trainer_freezes_vision_clamps_the_logit_scale_and_alternates():
    model, before, hist = _fit(steps=8, init_scale=300.0)
    assert all(torch.equal(v, model.visual.state_dict()[k]) for k, v in before.items())
    assert all(p.grad is None for p in model.visual.parameters())
    assert hist["kind"] == ["clic", "clip"] * 4
    # started at 300: clamped to ln 100 after the first step (AdamW moves it by ~lr per step)
    assert hist["max_logit_scale"] <= 100.0 + 1e-4
    assert float(model.logit_scale.detach()) <= np.log(100.0) + 1e-6
    assert float(model.logit_scale.detach()) >= np.log(100.0) - 8 * 3e-3 - 1e-6
    groups = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.ndim >= 2 and "bias" not in names[id(p)] for p in groups[0]["params"])
    assert any(names[id(p)] == "logit_scale" for p in groups[1]["params"])
    assert not any(names[id(p)].startswith("visual.") for g in groups for p in g["params"])
    unfrozen, before, _ = _fit(method="clip", steps=2, freeze=False)
    assert not all(torch.equal(v, unfrozen.visual.state_dict()[k]) for k, v in before.items())


def test_trainer_same_seed_same_result_for_every_method():
    for method in ("clic", "clip", "negclip"):
        a, _, ha = _fit(method, seed=0, steps=4)
        b, _, hb = _fit(method, seed=0, steps=4)
        assert ha["loss"] == hb["loss"]
        assert all(
            torch.equal(x, y)
            for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
        )


def test_tiny_clip_reads_single_images_and_concatenated_pairs():
    _pairs, tok, ds = _toy()
    model = TinyCLIP(len(tok), tok.context_length)
    with _no_fallback_warning():
        batch = collate_pairs([ds[i] for i in range(4)])
    assert batch["image"].shape == (4, 3, 32, 64) and batch["positives"].shape == (4, 4, 16)
    assert model.encode_image(batch["image"]).shape == (4, 64)
    assert model.encode_image(batch["single_image"]).shape == (4, 64)
    emb = model.encode_text(tok(["red circle and blue square", "red circle and blue square."]))
    assert torch.allclose(emb.norm(dim=-1), torch.ones(2))
    with pytest.raises(ValueError, match="at least 2 samples"), _no_fallback_warning():
        collate_pairs([ds[0]])


def test_shape_generator_is_seeded_and_consistent():
    a, b = make_shape_pairs(50, 3), make_shape_pairs(50, 3)
    assert np.array_equal(a.images, b.images) and a.captions == b.captions
    assert not np.array_equal(a.images, make_shape_pairs(50, 4).images)
    for i in range(50):
        (c0, s0), (c1, s1) = a.objects[i]
        assert c0 != c1 and s0 != s1
        assert set(canonical_caption(a.captions[i])) == {f"{c0} {s0}", f"{c1} {s1}"}
        assert canonical_caption(a.swapped[i]) != canonical_caption(a.captions[i])
        sw = a.swapped[i].split()
        assert sorted(sw[::3]) == sorted([c0, c1]) and sw[1::3] == a.captions[i].split()[1::3]
        unused = set(COLOURS) - {c0, c1}
        assert a.replaced[i].split()[0] in unused
        assert all(
            canonical_caption(e) == canonical_caption(a.captions[i]) for e in a.extra_captions[i]
        )
    # the left object is drawn in the left half with its colour
    img, (colour, _) = a.images[0], a.objects[0][0]
    left = img[:, :16].reshape(-1, 3)
    assert (np.abs(left.astype(int) - COLOURS[colour]).sum(1) == 0).sum() >= 20
    three = make_shape_pairs(10, 0, size=48, objects=3, exclude=(("red", "circle"),))
    assert three.images.shape == (10, 48, 48, 3)
    assert all(("red", "circle") not in objs and len(objs) == 3 for objs in three.objects)
    assert shape_word_types("a red circle.") == [
        ("a", "DET"),
        ("red", "ADJ"),
        ("circle", "NOUN"),
        (".", "PUNCT"),
    ]


def test_compositional_eval_on_an_oracle_model():
    pairs = make_shape_pairs(30, 1)
    phrases = sorted({p for c in pairs.captions for p in canonical_caption(c)})
    ordered = {}

    class Oracle(torch.nn.Module):
        """Image i embeds its left/right objects; a caption embeds its first/second object: the true
        caption matches only up to order, a colour swap changes both slots."""

        def encode_image(self, images):
            idx = images[:, 0, 0, 0].long()
            return torch.stack([ordered[int(i)] for i in idx])

        def encode_text(self, tokens):
            return tokens.float()

    def enc(caption):
        objs = caption.split(" and ")
        v = torch.zeros(len(phrases))
        for o in objs:
            if o in phrases:
                v[phrases.index(o)] = 1.0
        return F.normalize(v + 1e-3, dim=0)

    for i in range(30):
        ordered[i] = enc(pairs.captions[i])
    images = torch.zeros(30, 3, 2, 2)
    images[:, 0, 0, 0] = torch.arange(30).float()
    res = compositional_eval(Oracle(), images, pairs.captions, pairs.swapped, pairs.replaced,
                             lambda texts: torch.stack([enc(t) for t in texts]))  # fmt: skip
    assert res["swap_att"] == 1.0 and res["replace_att"] == 1.0 and res["R@1"] == 1.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="fewer than 2 images of an orientation"):
        ConcatPairDataset(_base(n_wide=4, n_high=1), _tok, word_types=word_types)
    with pytest.raises(ValueError, match="has no extra captions"):
        ConcatPairDataset(_base(extras=0), _tok, additional_positives=2, word_types=word_types)
    ConcatPairDataset(_base(extras=0), _tok, additional_positives=0, word_types=word_types)
    x = torch.randn(1, 4)
    with pytest.raises(ValueError, match="batch size must be >= 2"):
        clic_loss(x, [x], x, 1.0)
    with pytest.raises(ValueError, match="batch size must be >= 2"):
        clip_loss(x, x, 1.0)
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        CLICConfig(batch_size=1)
    y = torch.randn(3, 4)
    for kw in ({"cont": -0.1}, {"sneg": -1.0}, {"uni": -2.0}):
        with pytest.raises(ValueError, match=f"{next(iter(kw))} must be a finite number >= 0"):
            clic_loss(y, [y, y], y, 1.0, **kw)
        with pytest.raises(ValueError, match=f"{next(iter(kw))} must be a finite number >= 0"):
            CLICConfig(**kw)
    for f in (0, -1.0):
        with pytest.raises(ValueError, match="hard_negative_freq must be > 0"):
            alternation_pattern(f)
        with pytest.raises(ValueError, match="hard_negative_freq must be > 0"):
            CLICConfig(hard_negative_freq=f)
    bad = [
        (np.full((8, 8, 3), 1.5, dtype=np.float32), ["a red cat"]),
        (np.zeros((8, 8, 3), np.float32), ["a cat"]),
    ]
    ds = ConcatPairDataset(bad, _tok, additional_positives=0, word_types=word_types)
    with pytest.raises(ValueError, match=r"float outside \[0, 1\]"):
        ds[1]
    with pytest.raises(ValueError, match="layout must be one of"):
        ConcatPairDataset(_base(), _tok, layout="grid")
    with pytest.raises(ValueError, match="method='clic' needs a dataset with a negative_fn"):
        pairs, tok, _ = _toy()
        plain = ConcatPairDataset(
            ShapeCaptionDataset(pairs), tok, additional_positives=0, layout="side_by_side"
        )
        CLICTrainer(TinyCLIP(len(tok), 16), CLICConfig(steps=1, batch_size=4), tok).fit(plain)


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    """Quick mode is a smoke run: every check holds; the two paper claims (R@1 non-inferiority,
    and swap-att non-inferiority vs CLIP-FT, expected xfail: the tiny CLIP never binds colours to
    objects) are computed at one seed and judged in full mode."""
    from eff_vision.reproduce import clic

    result = clic.run("quick", seed=0)
    assert result.error is None and result.passed
    verdicts = {c.text: c.verdict("quick") for c in result.claims}
    assert "FAIL" not in verdicts.values(), verdicts
    checks = [c for c in result.claims if c.kind == "check"]
    assert all(c.verdict("quick") == "pass" for c in checks)
    paper = {c.text: c for c in result.claims if c.kind == "paper"}
    assert len(paper) == 2 and all(c.modes == ("full",) for c in paper.values())
    swap = paper["CLIC swap-att − CLIP-FT swap-att (non-inferiority)"]
    assert swap.expected == "xfail" and swap.headline and swap.reason and swap.paper
    assert [r["method"] for r in result.table] == ["pretrained", "CLIP-FT", "NegCLIP", "CLIC"]
