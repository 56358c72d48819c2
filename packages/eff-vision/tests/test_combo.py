import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

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


class _CNN(nn.Module):
    """A torchvision-style CNN: conv → bn → relu → layer1 (stride 2) → pooled head (named layers)."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.layer1 = nn.Sequential(nn.Conv2d(8, 12, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        return self.fc(self.layer1(self.relu(self.bn1(self.conv1(x)))).mean((2, 3)))


class _ViT(nn.Module):
    """A timm-style ViT stub: patch embedding, a CLS prefix token (``num_prefix_tokens``) and blocks."""

    num_prefix_tokens = 1

    def __init__(self, seed=1, dim=6):
        super().__init__()
        torch.manual_seed(seed)
        self.patch_embed = nn.Conv2d(1, dim, 2, stride=2)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.blocks = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(len(t), -1, -1), t], 1)
        return self.head(self.blocks(t)[:, 0])


def _x(n=10, seed=0):
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def test_tokens_are_resampled_layernormed_and_concatenated_in_order():
    cnn, vit = _CNN(), _ViT()
    feats = MultiBackboneFeatures(
        {"cnn": cnn, "vit": vit}, {"cnn": ["relu", "layer1"], "vit": ["blocks.2"]}, grid=(4, 4)
    )
    x = _x()
    tok = feats(x)
    assert tok.shape == (10, 16, 8 + 12 + 6)
    assert feats.in_dims == {"cnn": 20, "vit": 6}
    assert feats.columns == {"cnn": slice(0, 20), "vit": slice(20, 26)}
    cnn.eval()
    with torch.no_grad():
        relu = cnn.relu(cnn.bn1(cnn.conv1(x)))  # 8×8 → area pool to 4×4
        ref_relu = F.layer_norm(F.avg_pool2d(relu, 2).flatten(2).transpose(1, 2), (8,))
        ref_l1 = F.layer_norm(cnn.layer1(relu).flatten(2).transpose(1, 2), (12,))
        t = vit.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([vit.cls_token.expand(10, -1, -1), t], 1)
        ref_vit = F.layer_norm(vit.blocks(t)[:, 1:], (6,))  # CLS dropped, 4×4 patch grid
    torch.testing.assert_close(tok[..., feats.map_columns[("cnn", "relu")]], ref_relu)
    torch.testing.assert_close(tok[..., feats.map_columns[("cnn", "layer1")]], ref_l1)
    torch.testing.assert_close(tok[..., feats.columns["vit"]], ref_vit)


def test_upsampling_is_bilinear_and_grid_none_pools_to_one_token():
    cnn = _CNN()
    up = MultiBackboneFeatures({"c": cnn}, {"c": ["layer1"]}, grid=(8, 8), normalize=None)
    x = _x(4)
    with torch.no_grad():
        l1 = cnn.layer1(cnn.relu(cnn.bn1(cnn.eval().conv1(x))))
    ref = (
        F.interpolate(l1, size=(8, 8), mode="bilinear", align_corners=False)
        .flatten(2)
        .transpose(1, 2)
    )
    torch.testing.assert_close(up(x), ref)
    pooled = MultiBackboneFeatures({"c": cnn}, {"c": ["layer1", "fc"]}, grid=None, normalize=None)
    out = pooled(x)
    assert out.shape == (4, 1, 12 + 5)
    torch.testing.assert_close(out[:, 0, :12], l1.mean((2, 3)))


def test_frozen_backbones_never_receive_gradients_and_buffers_do_not_change():
    cnn, vit = _CNN(), _ViT()
    cnn.train()  # BatchNorm in train mode would update its running statistics
    before = {n: copy.deepcopy(m.state_dict()) for n, m in (("cnn", cnn), ("vit", vit))}
    feats = MultiBackboneFeatures(
        {"cnn": cnn, "vit": vit}, {"cnn": ["layer1"], "vit": ["blocks.0"]}, grid=(4, 4)
    )
    x, y = _x(40), torch.randint(0, 3, (40,), generator=torch.Generator().manual_seed(0))
    tok = feats(x)
    assert not tok.requires_grad and feats.grad_enabled_in_backbones is False
    model = ComBo(feats.in_dims, 3)
    fit_probe(model, tok, y, epochs=3, seed=0)
    # even a loss built on top of a *grad-enabled* call cannot reach the backbones
    with torch.enable_grad():
        loss = model(feats(x)).sum()
        loss.backward()
    for name, m in (("cnn", cnn), ("vit", vit)):
        for k, v in m.state_dict().items():
            assert torch.equal(v, before[name][k]), (name, k)
        assert all(p.grad is None and not p.requires_grad for p in m.parameters())
    assert model.proj.weight.grad is not None


def test_precompute_cache_equals_recomputed(tmp_path):
    feats = MultiBackboneFeatures({"cnn": _CNN()}, {"cnn": ["relu", "layer1"]}, grid=(4, 4))
    x = _x(12)
    loader = [(x[:5], torch.arange(5)), (x[5:], torch.arange(5, 12))]
    feats.precompute(loader, tmp_path / "f.npz")
    cached = load_features(tmp_path / "f.npz")
    assert torch.equal(cached["tokens"], feats(x))
    assert torch.equal(cached["labels"], torch.arange(12))
    assert cached["in_dims"] == {"cnn": 20}


def test_importance_is_the_normalised_column_norm_and_selection_is_top_k():
    model = ComBo({"a": 4, "b": 9, "c": 1}, 2, num_tokens=3)
    with torch.no_grad():
        model.proj.weight.zero_()
        model.proj.weight[:, 0:4] = 1.0  # a: ‖W‖ = sqrt(32·4) → / sqrt(4)
        model.proj.weight[0, 4:13] = 3.0  # b: sqrt(9·9) / 3 = 3
    imp = model.backbone_importance()
    assert imp["a"] == pytest.approx(32**0.5)
    assert imp["b"] == pytest.approx(3.0)
    assert imp["c"] == 0.0
    assert select_backbones(imp, 2) == ["a", "b"]
    assert select_backbones({"x": 0.1, "y": 0.5, "z": 0.3}, 3) == ["y", "z", "x"]
    tok = torch.arange(2 * 3 * 14, dtype=torch.float32).reshape(2, 3, 14)
    sub, dims = select_columns(tok, model.in_dims, ["c", "a"])
    assert dims == {"a": 4, "c": 1}
    assert torch.equal(sub, torch.cat([tok[..., :4], tok[..., 13:]], -1))


def test_same_seed_same_probe_and_different_seed_differs():
    tok = torch.randn(50, 4, 10, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 3, (50,), generator=torch.Generator().manual_seed(1))
    outs = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        m = ComBo({"a": 10}, 3, num_tokens=4)
        hist = fit_probe(m, tok, y, epochs=4, seed=seed)
        outs.append((hist, m(tok).detach()))
    assert outs[0][0] == outs[1][0] and torch.equal(outs[0][1], outs[1][1])
    assert not torch.equal(outs[0][1], outs[2][1])


def test_linear_probe_and_combo_learn_a_separable_task():
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (200,), generator=gen)
    tok = torch.randn(200, 4, 6, generator=gen)
    tok[..., 0] += 2.0 * (2 * y[:, None].float() - 1)
    lin = LinearProbe(6, 2)
    fit_probe(lin, tok[:150], y[:150], epochs=20, lr=1e-2, seed=0)
    assert evaluate_probe(lin, tok[150:], y[150:]) >= 0.95
    torch.manual_seed(0)
    cb = ComBo({"a": 6}, 2, num_tokens=4)
    fit_probe(cb, tok[:150], y[:150], epochs=20, seed=0)
    assert evaluate_probe(cb, tok[150:], y[150:]) >= 0.95


def test_noise_decoy_is_input_independent_and_seeded():
    a, b = NoiseDecoy(3, (2, 2), seed=4), NoiseDecoy(3, (2, 2), seed=4)
    x = _x(5)
    out = a(x)
    assert torch.equal(out, b(torch.zeros_like(x)))  # same stream, whatever the input
    assert out.shape == (5, 3, 2, 2)


def test_constant_decoy_is_one_seeded_image_and_user_decoys_are_wrapped():
    a = ConstantDecoy(3, (2, 2), seed=4)
    out = a(_x(5))
    assert out.shape == (5, 3, 2, 2)
    assert torch.equal(out, a(torch.zeros(5, 1, 8, 8))) and torch.equal(out[0], out[4])
    assert torch.equal(out[0], ConstantDecoy(3, (2, 2), seed=4).image)
    assert not torch.equal(out[0], ConstantDecoy(3, (2, 2), seed=5).image)
    user = DecoyBackbone(lambda x: x.repeat(1, 2, 1, 1))  # any map-valued callable
    assert torch.equal(user(_x(2)), _x(2).repeat(1, 2, 1, 1))
    module = DecoyBackbone(nn.Conv2d(1, 4, 3, padding=1))
    feats = MultiBackboneFeatures({"d": module}, {"d": ["out"]}, grid=(4, 4))
    assert feats(_x(3)).shape == (3, 16, 4)
    assert not any(p.requires_grad for p in module.parameters())  # frozen like any backbone
    with pytest.raises(TypeError, match="fn must be callable"):
        DecoyBackbone(3)


def _tiny_combo_cfg(**kw):
    from eff_vision.reproduce.combo import ComboReproConfig

    return ComboReproConfig(ntr=60, tasks=("parity",), linear_epochs=1, combo_epochs=1, **kw)


@pytest.mark.parametrize("decoy", ["noise", "constant", "user-fn", "user-module"])
def test_reproduction_decoy_options(decoy):
    """Each decoy option reaches the extractor as the backbone "decoy", its tokens have the
    expected shape and the probes run with it; only "noise" is re-drawn during training."""
    from eff_vision.reproduce.combo import build_features, experiment, make_decoy, probe_task

    calls = []

    def user_fn(x):
        calls.append(len(x))
        return torch.ones(len(x), 6, 4, 4) * torch.arange(6.0)[:, None, None]

    value = {"user-fn": user_fn, "user-module": nn.Conv2d(1, 6, 3, stride=2, padding=1)}.get(
        decoy, decoy
    )
    cfg = _tiny_combo_cfg(decoy=value)
    kind = {"noise": NoiseDecoy, "constant": ConstantDecoy}.get(decoy, DecoyBackbone)
    assert isinstance(make_decoy(value, 0), kind)
    feats, bb = build_features(cfg, 0)
    assert isinstance(feats.backbones["decoy"], kind)
    x = bb.downstream[0][:7]
    tok = feats(x)
    n_decoy = 6 if decoy.startswith("user") else 32
    assert tok.shape == (7, 16, 4 * (16 + 32) + n_decoy)
    assert feats.in_dims["decoy"] == n_decoy
    if decoy == "user-fn":
        assert calls == [7]
    if decoy == "user-module":
        assert feats.backbones["decoy"].fn is value
    same = torch.equal(tok[..., feats.columns["decoy"]], feats(x)[..., feats.columns["decoy"]])
    assert same == (decoy != "noise")  # only the noise decoy changes at every use
    data = (
        bb.downstream[0][:40],
        bb.downstream[1][:40] % 2,
        bb.downstream[0][40:60],
        bb.downstream[1][40:60] % 2,
    )
    out, row = probe_task(cfg, feats, "parity", data, seed=0)
    assert set(out["importance_decoy"]) == {"sup", "ae", "rot", "random", "decoy"}
    assert "ComBo (all + decoy)" in row and 0.0 <= out["combo_decoy"] <= 1.0
    res = experiment(cfg, 0)
    assert res["in_dims"]["decoy"] == n_decoy and res["backbones_unchanged"]


def test_reproduction_decoy_none_and_bad_values():
    from eff_vision.reproduce.combo import build_features, make_decoy

    feats, _ = build_features(_tiny_combo_cfg(decoy=None), 0)
    assert "decoy" not in feats.backbones and make_decoy(None, 0) is None
    with pytest.raises(
        ValueError, match=r"decoy must be one of \['noise', 'constant', None\] or a callable"
    ):
        _tiny_combo_cfg(decoy="zeros")
    with pytest.raises(TypeError, match=r"decoy must be one of .* got 3"):
        _tiny_combo_cfg(decoy=3)
    with pytest.raises(ValueError, match="decoy must be one of"):
        make_decoy("uniform", 0)


def test_bad_inputs():
    cnn = _CNN()
    with pytest.raises(KeyError, match=r"available names: .*conv1.*layer1"):
        MultiBackboneFeatures({"cnn": cnn}, {"cnn": ["layer9"]})
    with pytest.raises(ValueError, match="backbones must be a non-empty"):
        MultiBackboneFeatures({}, {})
    with pytest.raises(ValueError, match="pass grid=None explicitly"):
        MultiBackboneFeatures({"cnn": cnn}, {"cnn": ["fc"]}, grid=(4, 4))(_x(2))
    vit = _ViT()
    vit.num_prefix_tokens = 0  # 17 tokens: not a square grid
    with pytest.raises(ValueError, match="not a 2-D grid; pass grid=None"):
        MultiBackboneFeatures({"vit": vit}, {"vit": ["blocks.0"]}, grid=(4, 4))(_x(2))
    feats = MultiBackboneFeatures(
        {"a": _CNN(), "b": _CNN(1)}, {"a": ["relu"], "b": ["relu"]}, grid=(4, 4)
    )
    with pytest.raises(ValueError, match="mismatched batch sizes across backbones"):
        feats({"a": _x(3), "b": _x(4)})
    with pytest.raises(ValueError, match="k must be <= the number of backbones"):
        select_backbones({"a": 1.0, "b": 2.0}, 3)
    with pytest.raises(ValueError, match="importance must not be empty"):
        select_backbones({}, 1)
    with pytest.raises(ValueError, match="normalize must be one of"):
        MultiBackboneFeatures({"cnn": cnn}, {"cnn": ["relu"]}, normalize="batchnorm")
    with pytest.raises(ValueError, match="in_dims must be a non-empty"):
        ComBo({}, 3)
    with pytest.raises(ValueError, match=r"tokens must be \[B, 16, 20\]"):
        ComBo({"a": 20}, 3)(torch.zeros(2, 15, 20))
    with pytest.raises(ValueError, match="differ in length"):
        fit_probe(LinearProbe(3, 2), torch.zeros(4, 3), torch.zeros(3, dtype=torch.long))


def test_toy_digit_backbones_are_cached_frozen_and_differ():
    from eff_vision.data.backbones import BACKBONE_KINDS, digit_probe_tasks, toy_digit_backbones

    bb = toy_digit_backbones(0)
    assert bb is toy_digit_backbones(0)
    assert list(bb.models) == list(BACKBONE_KINDS)
    assert len(bb.pool[0]) == 800 and len(bb.downstream[0]) == 997
    x = bb.downstream[0][:64]
    outs = {k: m(x) for k, m in bb.models.items()}
    for m in bb.models.values():
        assert not m.training and all(
            not p.requires_grad and p.grad is None for p in m.parameters()
        )
    for a in BACKBONE_KINDS:
        for b in BACKBONE_KINDS:
            if a < b:
                assert not torch.allclose(outs[a], outs[b])
    assert bb.train_loss["sup"][-1] < bb.train_loss["sup"][0] and bb.train_loss["random"] == []
    tasks = digit_probe_tasks(*bb.downstream, 700, seed=0)
    again = digit_probe_tasks(*bb.downstream, 700, seed=0, tasks=("rot4",))
    assert torch.equal(tasks["rot4"][0], again["rot4"][0])
    xtr, ytr, xte, _ = tasks["rot4"]
    assert len(xtr) == 700 and len(xte) == 297 and set(ytr.tolist()) == {0, 1, 2, 3}
    assert torch.equal(tasks["parity"][1], tasks["digit10"][1] % 2)
    with pytest.raises(ValueError, match="ntr must be < the pool size"):
        digit_probe_tasks(*bb.downstream, 997)


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    """Quick mode is a smoke run (NTR 300, fewer epochs): every check holds, the decoy (noise
    re-drawn at every use, lowest importance on 4/4 tasks) included; the paper claims are judged in
    full mode."""
    from eff_vision.reproduce import combo

    result = combo.run("quick", seed=0)
    assert result.error is None and result.passed
    verdicts = {c.text: c.verdict("quick") for c in result.claims}
    assert "FAIL" not in verdicts.values(), verdicts
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 8 and all(c.passed for c in checks)
    decoy = next(c for c in checks if "re-drawn at every use" in c.text)
    assert decoy.measured == 4.0
    paper = [c for c in result.claims if c.kind == "paper"]
    assert len(paper) == 3 and sum(c.headline for c in paper) == 2
    assert all(c.n_seeds == 1 and c.paper and c.modes == ("full",) for c in paper)
    assert result.table[-1]["task"] == "mean"
