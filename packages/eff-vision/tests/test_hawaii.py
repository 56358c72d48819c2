import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from eff_vision.hawaii import (
    HawaiiConfig,
    HawaiiDistiller,
    TeacherAdapter,
    TeacherSpecificLoRALinear,
    TinyViT,
    balance_loss,
    get_hawaii_model,
    merge_and_unload,
    token_importance,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


class _TokenStudent(nn.Module):
    """Tokens in, tokens out: one frozen Linear named fc1 (2×2 token grid, no prefix)."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim)
        with torch.no_grad():
            self.fc1.weight.copy_(torch.eye(dim))
            self.fc1.bias.zero_()

    def forward(self, x):
        return self.fc1(x)


class _MaskedTeacher(nn.Module):
    """Tokens → (x @ M) on the tokens of one type (feature 0 > 0 for type A), ~0 elsewhere."""

    def __init__(self, dim, out, type_a: bool, seed):
        super().__init__()
        self.m = nn.Parameter(torch.randn(dim, out, generator=_gen(seed)))
        self.type_a = type_a

    def forward(self, x):
        is_a = (x[..., :1] > 0).float()
        mask = is_a if self.type_a else 1 - is_a
        return 3.0 * (x @ self.m) * mask + 1e-3 * (x @ self.m)


def _typed_tokens(n=256, seed=0):
    """[n, 4 tokens, 4 features]: each token is type A (feature 0 = +1) or B (feature 0 = −1)."""
    g = _gen(seed)
    kind = torch.randint(0, 2, (n, 4, 1), generator=g).float() * 2 - 1
    return torch.cat([kind, 0.5 * torch.randn(n, 4, 3, generator=g)], -1)


def test_router_selects_the_teacher_specific_adapter_in_a_constructed_case():
    """Teacher 0 carries the knowledge of type-A tokens, teacher 1 of type-B tokens (token
    importance: teacher norm). After distillation the router must send A tokens to expert 0 and
    B tokens to expert 1."""
    torch.manual_seed(0)
    teachers = {"a": _MaskedTeacher(4, 6, True, 1), "b": _MaskedTeacher(4, 6, False, 2)}
    cfg = HawaiiConfig(r=2, lora_alpha=2, lora_dropout=0.0, target_modules=("fc1",), num_teachers=2,
                       num_general_experts=0, top_k=2, token_weighting="teacher_norm", balance_weight=0.0)  # fmt: skip
    dist = HawaiiDistiller(_TokenStudent(), teachers, cfg)
    x = _typed_tokens()
    dist.fit(x, epochs=25, lr=2e-2, batch_size=64, seed=0)
    layer = dist.student.lora_layers()[0]
    with torch.no_grad():
        probs = layer.teacher_router(x).softmax(-1)
    route = probs.argmax(-1)
    is_a = x[..., 0] > 0
    assert float((route[is_a] == 0).float().mean()) >= 0.9
    assert float((route[~is_a] == 1).float().mean()) >= 0.9
    stats = dist.student.router_stats(x)
    assert stats["entropy"] < math.log(2) - 0.1


def test_fine_pass_trains_only_its_teacher_expert_and_coarse_pass_only_routers_and_general():
    torch.manual_seed(0)
    base = nn.Linear(5, 3)
    layer = TeacherSpecificLoRALinear(
        base, num_teachers=3, num_general=2, r=2, lora_alpha=4, top_k=3
    )
    nn.init.normal_(layer.lora_B, std=0.1)
    x = torch.randn(7, 5, generator=_gen(1))
    layer.mode = ("teacher", 1)
    layer(x).pow(2).sum().backward()
    ga, gb = layer.lora_A.grad, layer.lora_B.grad
    assert all(float(ga[e].abs().sum()) == 0 for e in (0, 2, 3, 4)) and float(ga[1].abs().sum()) > 0
    assert all(float(gb[e].abs().sum()) == 0 for e in (0, 2, 3, 4)) and float(gb[1].abs().sum()) > 0
    assert layer.teacher_router.weight.grad is None and base.weight.grad is None
    layer.zero_grad()
    layer.mode = "coarse"
    layer(x).pow(2).sum().backward()
    ga, gb = layer.lora_A.grad, layer.lora_B.grad
    assert (
        float(ga[:3].abs().sum()) == 0 and float(gb[:3].abs().sum()) == 0
    )  # teacher experts detached
    assert float(gb[3:].abs().sum()) > 0 and float(layer.teacher_router.weight.grad.abs().sum()) > 0
    assert float(layer.general_router.weight.grad.abs().sum()) > 0


def test_router_mode_matches_a_naive_mixture_and_per_sample_routes_match_single_routes():
    torch.manual_seed(0)
    layer = TeacherSpecificLoRALinear(
        nn.Linear(4, 3), num_teachers=3, num_general=2, r=2, lora_alpha=2, top_k=2
    )
    nn.init.normal_(layer.lora_B, std=0.5)
    x = torch.randn(2, 5, 4, generator=_gen(2))
    with torch.no_grad():
        y = layer(x)
        p = layer.teacher_router(x).softmax(-1)
        keep = torch.zeros_like(p).scatter_(-1, p.topk(2, -1).indices, 1.0)
        q = layer.general_router(x).softmax(-1)  # 2 general experts, top_k 2: dense
        ref = layer.base(x)
        for e in range(5):
            delta = layer.scaling * x @ layer.lora_A[e].T @ layer.lora_B[e].T
            gate = (p * keep)[..., e] if e < 3 else q[..., e - 3]
            ref = ref + gate[..., None] * delta
        torch.testing.assert_close(y, ref)
        layer.mode = ("teacher", torch.tensor([2, 0]))
        both = layer(x)
        for i, t in enumerate((2, 0)):
            layer.mode = ("teacher", t)
            torch.testing.assert_close(both[i], layer(x[i : i + 1])[0])


def test_zero_lora_b_equals_the_original_student_and_merge_is_exact():
    torch.manual_seed(0)
    vit = TinyViT(depth=2)
    x = torch.rand(3, 1, 8, 8, generator=_gen(3))
    with torch.no_grad():
        ref = vit(x)
    model = get_hawaii_model(copy.deepcopy(vit), HawaiiConfig(r=2, num_teachers=3, top_k=2)).eval()
    assert model.layer_names == [
        "blocks.0.mlp.fc1",
        "blocks.0.mlp.fc2",
        "blocks.1.mlp.fc1",
        "blocks.1.mlp.fc2",
    ]
    with torch.no_grad():
        for mode in ("router", "coarse", ("teacher", 2)):
            with model.route(mode):
                assert torch.equal(model(x), ref)
        for layer in model.lora_layers():
            nn.init.normal_(layer.lora_B, std=0.2)
        m64 = copy.deepcopy(model).double()
        with m64.route(("teacher", 1)):
            wrapped = m64(x.double())
        merged = merge_and_unload(copy.deepcopy(m64), route=1)
        assert not any(isinstance(m, TeacherSpecificLoRALinear) for m in merged.modules())
        assert float((merged(x.double()) - wrapped).abs().max()) <= 1e-10
        with model.route(("teacher", 1)):
            w32 = model(x)
        assert float((merge_and_unload(copy.deepcopy(model), route=1)(x) - w32).abs().max()) <= 1e-4
    with pytest.raises(ValueError, match="token-dependent router"):
        merge_and_unload(copy.deepcopy(model))
    lite = get_hawaii_model(copy.deepcopy(vit), HawaiiConfig(r=2, num_teachers=3, variant="lite"))
    lite = lite.double().eval()
    for layer in lite.lora_layers():
        nn.init.normal_(layer.lora_B, std=0.2)
    with torch.no_grad():
        wrapped = lite(x.double())
        assert (
            float((merge_and_unload(copy.deepcopy(lite))(x.double()) - wrapped).abs().max())
            <= 1e-10
        )


def test_works_on_torchvision_style_sequential_mlps():
    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))  # names "0", "2"
    model = get_hawaii_model(student, HawaiiConfig(r=2, target_modules=("0", "2"), num_teachers=2))
    assert model.layer_names == ["0", "2"]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "router" in n for n in trainable)


def test_balance_loss_is_one_for_a_uniform_router_and_e_when_collapsed():
    assert float(balance_loss(torch.full((10, 4), 0.25))) == pytest.approx(1.0)
    collapsed = F.one_hot(torch.zeros(10, dtype=torch.long), 4).float()
    assert float(balance_loss(collapsed)) == pytest.approx(4.0)
    g = _gen(5)
    for scale in (0.5, 2.0):
        probs = (scale * torch.randn(300, 4, generator=g) + torch.randn(4, generator=g)).softmax(-1)
        assert float(balance_loss(probs)) >= 1.0


def test_token_importance_cls_attention_and_teacher_norm():
    tok = torch.randn(2, 9, 5, generator=_gen(6))
    cls = torch.randn(2, 5, generator=_gen(7))
    w = token_importance(tok, "cls_attention", cls)
    z, q = F.layer_norm(tok, (5,)), F.layer_norm(cls, (5,))
    ref = 9 * torch.softmax(torch.einsum("bc,bnc->bn", q, z) / math.sqrt(5), -1)
    torch.testing.assert_close(w, ref)
    mean_q = token_importance(tok, "cls_attention")  # no CLS: the mean token is the query
    ref = 9 * torch.softmax(torch.einsum("bc,bnc->bn", z.mean(1), z) / math.sqrt(5), -1)
    torch.testing.assert_close(mean_q, ref)
    norm = token_importance(tok, "teacher_norm")
    torch.testing.assert_close(norm.mean(-1), torch.ones(2))
    torch.testing.assert_close(norm / norm[:, :1], tok.norm(dim=-1) / tok.norm(dim=-1)[:, :1])
    assert torch.equal(token_importance(tok, None), torch.ones(2, 9))


def test_teacher_adapter_resamples_the_grid():
    ad = TeacherAdapter(6, 3, 16, (2, 2), linear=True)
    tok = torch.randn(2, 16, 6, generator=_gen(8))
    z = F.layer_norm(tok, (6,)).transpose(1, 2).reshape(2, 6, 4, 4)
    ref = ad.net(F.avg_pool2d(z, 2).flatten(2).transpose(1, 2))
    torch.testing.assert_close(ad(tok), ref)
    with pytest.raises(ValueError, match="not a square grid"):
        TeacherAdapter(6, 3, 10, 4)


def _teachers_and_student():
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU())  # 8×8 map → 4×4 student grid
    return {"conv": conv, "conv2": copy.deepcopy(conv)}, TinyViT(depth=1)


def test_teachers_never_receive_gradients_and_same_seed_same_result():
    x = torch.rand(40, 1, 8, 8, generator=_gen(9))
    results = []
    for seed in (0, 0, 1):
        teachers, student = _teachers_and_student()
        before = {n: copy.deepcopy(m.state_dict()) for n, m in teachers.items()}
        torch.manual_seed(seed)
        dist = HawaiiDistiller(student, teachers, HawaiiConfig(r=2, num_teachers=2, top_k=2))
        hist = dist.fit(x, epochs=2, lr=1e-2, batch_size=16, seed=seed, stats_every=1)
        for n, m in teachers.items():
            assert all(torch.equal(v, m.state_dict()[k]) for k, v in before[n].items())
            assert all(p.grad is None and not p.requires_grad for p in m.parameters())
        assert dist.adapters["conv"].grid_in == (4, 4)  # resampled teacher grid = student grid
        losses = dist.loss(x[:8])
        assert set(losses) >= {"fine", "coarse", "balance", "total", "fine/conv"}
        results.append(
            (hist["total"], torch.cat([p.detach().flatten() for p in dist.trainable_parameters()]))
        )
    assert results[0][0] == results[1][0] and torch.equal(results[0][1], results[1][1])
    assert not torch.equal(results[0][1], results[2][1])
    assert hist["router"][0][0] == 0 and len(hist["router"]) == 3


def test_bad_inputs():
    teachers, student = _teachers_and_student()
    cfg = HawaiiConfig(r=2, num_teachers=2)
    with pytest.raises(ValueError, match="teachers must not be empty"):
        HawaiiDistiller(student, {}, cfg)
    with pytest.raises(ValueError, match=r"duplicate teacher names: \['conv'\]"):
        HawaiiDistiller(student, [("conv", teachers["conv"]), ("conv", teachers["conv2"])], cfg)
    with pytest.raises(ValueError, match=r"num_teachers \(3\) must equal len\(teachers\) \(2\)"):
        HawaiiDistiller(student, teachers, HawaiiConfig(num_teachers=3))
    with pytest.raises(ValueError, match=r"match no nn.Linear.*blocks.0.mlp.fc1"):
        get_hawaii_model(TinyViT(depth=1), HawaiiConfig(target_modules=("q_proj",)))
    with pytest.raises(
        ValueError, match=r"top_k \(5\) must be <= the number of teacher experts \(4\)"
    ):
        HawaiiConfig(top_k=5)
    flat = {"flat": nn.Sequential(nn.Flatten(), nn.Linear(64, 5)), "conv": teachers["conv"]}
    dist = HawaiiDistiller(TinyViT(depth=1), flat, cfg)
    with pytest.raises(ValueError, match="cannot be resampled to the student grid"):
        dist.build(torch.rand(2, 1, 8, 8))

    class _Tokens(nn.Module):
        def forward(self, x):
            return torch.zeros(len(x), 10, 3)  # 10 tokens: no square grid

    dist = HawaiiDistiller(TinyViT(depth=1), {"t": _Tokens(), "conv": teachers["conv"]}, cfg)
    with pytest.raises(ValueError, match="not a square grid, so it cannot be resampled"):
        dist.build(torch.rand(2, 1, 8, 8))
    for kw, msg in (({"r": 0}, "r must be"), ({"lora_dropout": 1.0}, "lora_dropout must be < 1"),
                    ({"token_weighting": "entropy"}, "token_weighting must be one of"),
                    ({"router": "sinkhorn"}, "router must be one of"), ({"target_modules": ()}, "target_modules")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            HawaiiConfig(**kw)


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    """Quick mode (3 epochs, 4 toy teachers, one seed) is a smoke run: every check holds; the
    learning claims are judged in full mode (their margins are within a few test images and flip
    with the CPU's float kernels at quick scale)."""
    from eff_vision.reproduce import hawaii

    result = hawaii.run("quick", seed=0)
    assert result.error is None and result.passed
    verdicts = {c.text: c.verdict("quick") for c in result.claims}
    assert "FAIL" not in verdicts.values(), verdicts
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 6 and all(c.verdict("quick") == "pass" for c in checks)
    paper = [c for c in result.claims if c.kind == "paper"]
    assert len(paper) == 2 and all(c.modes == ("full",) for c in paper)
    assert sum(c.headline for c in paper) == 1 and all(c.paper for c in paper)
    # the single-teacher, router and no-token-weights runs are made in full mode
    assert not any("routes to expert" in c.text or "single-teacher" in c.text for c in paper)


def test_full_mode_expected_verdicts_from_the_two_machines():
    """The main section's paper claims, judged on the per-seed numbers of the two full runs
    (seeds 0-4, two machines): the best-single-teacher headline is an xfail (held in the first run,
    a tie on the second), the others reproduce on both."""
    from eff_vision.reproduce import hawaii

    seeds = [0, 1, 2, 3, 4]
    cfg = hawaii.HawaiiReproConfig()  # singles, router runs and no-token-weights: all on

    def judged(vs_lite, vs_single):
        per = {
            s: {"vs_lite": a, "vs_single": b, "entropy": -0.12, "share": 0.25, "no_weights": -0.002}
            for s, a, b in zip(seeds, vs_lite, vs_single, strict=True)
        }
        return {c.text.split(" (")[0]: c for c in hawaii.main_claims(per, seeds, cfg)}

    here = judged(
        [0.01852, -0.00253, 0.01684, 0.00505, 0.01852],
        [-0.00842, -7.450580596923828e-09, -0.01347, 0.01263, 0.01094],
    )
    first = judged(
        [0.03704, -0.00673, 0.02441, 0.02694, 0.01178],
        [0.00421, 0.00253, -0.00842, 0.02778, 0.01263],
    )
    single = "hawaii − best single-teacher distillation"
    lite = "hawaii − lite"
    assert len(here) == 5 and here[single].headline and here[lite].headline
    assert here[single].expected == "xfail" and here[single].verdict("full") == "xfail"
    assert first[single].verdict("full") == "reproduced (unexpected)"
    assert "first full run" in here[single].reason and "Intel Xeon" in here[single].reason
    assert here[lite].verdict("full") == first[lite].verdict("full") == "pass"
    expected = {t: c.expected for t, c in here.items()}
    assert list(expected.values()).count("xfail") == 2  # best single + routing share
    # quick mode judges none of them
    assert all(c.verdict("quick") == "not judged" for c in here.values())


def test_teacher_set_is_a_public_setting_of_the_reproduction():
    """Issue #26: another teacher set (autoencoder, rotation, random) runs every variant with one
    expert per teacher, in the given order."""
    from eff_vision.reproduce import hawaii

    small = dict(pretrain_epochs=1, epochs=1, probe_iters=5, router_runs=False, singles=False)
    cfg = hawaii.HawaiiReproConfig(teachers=hawaii.OTHER_TEACHERS, **small)
    assert cfg.hawaii_config().num_teachers == 3 and cfg.hawaii_config().top_k == 3
    out = hawaii.experiment(cfg, seed=0)
    assert list(out["teachers"]) == ["ae", "rot", "random"]
    row = next(r for r in out["rows"] if r["variant"] == "hawaii")
    assert len(row["route shares"]) == 3
    assert {r["variant"] for r in out["rows"]} == {
        "AE student (no distillation)",
        "lite (shared LoRA, linear adapters)",
        "hawaii",
        "hawaii without token weights",
    }
    # the section's numbers are the experiment's, per seed
    other = hawaii.other_teacher_set([0], epochs=1, pretrain_epochs=1, probe_iters=5)[0]
    by = {r["variant"]: r["mean probe accuracy"] for r in other["rows"]}
    assert other["vs_lite"] == by["hawaii"] - by["lite (shared LoRA, linear adapters)"]
    assert other["no_weights"] == by["hawaii without token weights"] - by["hawaii"]
    assert by == {r["variant"]: r["mean probe accuracy"] for r in out["rows"]}
    for bad, err in (
        (("ae", "ae"), ValueError),
        (("sup", "edge"), ValueError),
        (["ae"], TypeError),
    ):
        with pytest.raises(err, match="teachers"):
            hawaii.HawaiiReproConfig(teachers=bad)
