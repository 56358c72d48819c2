import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

from eff_llm._lm_train import TrainConfig, causal_lm_loss, train_lm
from eff_llm._models import tiny_llama
from eff_llm.nemotron_flash import (
    CASE1,
    CASE2,
    DELTANET_MODULES,
    HYBRID_CASE1,
    HYBRID_CASE2,
    HybridArch,
    HybridSLM,
    HybridSLMConfig,
    LatencyLUT,
    SearchSpace,
    StageSpec,
    WeightNormProjector,
    aging_evolution,
    apply_weight_norm_,
    depth_width_law,
    fit_depth_width_law,
    hybrid_param_count,
    random_search,
    weight_norm_targets,
)
from eff_shared.torch import count_parameters


def _norm_error(model: nn.Module, case1=CASE1, case2=CASE2) -> float:
    err = 0.0
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(mod, nn.Linear) and leaf in case1:
            err = max(err, float((mod.weight.detach().norm(dim=1) - 1).abs().max()))
        elif isinstance(mod, nn.Linear) and leaf in case2:
            err = max(err, float((mod.weight.detach().norm(dim=0) - 1).abs().max()))
    return err


def test_weight_norm_rows_and_columns_and_nothing_else():
    model = tiny_llama(vocab_size=64, hidden_size=32, intermediate_size=48, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    names = apply_weight_norm_(model)
    assert len(names) == 2 * 7
    assert _norm_error(model) <= 1e-6
    q = model.model.layers[0].self_attn.q_proj.weight
    o = model.model.layers[0].self_attn.o_proj.weight
    # Case-1: rows are the normalised originals; Case-2: columns.
    q0 = before["model.layers.0.self_attn.q_proj.weight"]
    o0 = before["model.layers.0.self_attn.o_proj.weight"]
    torch.testing.assert_close(q, q0 / q0.norm(dim=1, keepdim=True))
    torch.testing.assert_close(o, o0 / o0.norm(dim=0, keepdim=True))
    after = model.state_dict()
    for k in after:
        if k not in names:
            assert torch.equal(after[k], before[k]), k
    emb_names = apply_weight_norm_(model, include_embeddings=True)
    assert "input_embeddings.weight" in emb_names and "output_embeddings.weight" in emb_names
    torch.testing.assert_close(
        model.model.embed_tokens.weight.norm(dim=1), torch.ones(64), atol=1e-6, rtol=0
    )


def test_projector_keeps_norms_after_every_optimizer_step():
    model = tiny_llama(vocab_size=64, hidden_size=32, intermediate_size=48, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.0)
    proj = WeightNormProjector(model)
    proj.attach(opt)
    assert _norm_error(model) <= 1e-5
    gen = torch.Generator().manual_seed(0)
    for step in range(8):
        x = torch.randint(0, 64, (4, 10), generator=gen)
        loss = causal_lm_loss(model(input_ids=x).logits, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert _norm_error(model) <= 1e-5, step
    assert proj.calls == 8


def test_projector_as_a_post_step_of_the_accelerate_loop():
    model = tiny_llama(vocab_size=64, hidden_size=32, intermediate_size=48, seed=2)
    errors = []
    proj = WeightNormProjector(model)
    stream = torch.randint(0, 64, (1000,), generator=torch.Generator().manual_seed(1))
    cfg = TrainConfig(steps=5, batch_size=4, seq_len=10, lr=1e-2, schedule="cosine", seed=0)
    train_lm(
        model,
        lambda m, x: causal_lm_loss(m(input_ids=x).logits, x),
        stream,
        cfg,
        post_step=[proj, lambda: errors.append(_norm_error(model))],
    )
    assert len(errors) == 5 and max(errors) <= 1e-5


def test_zero_norm_row_is_clamped_and_warned_never_nan():
    model = tiny_llama(vocab_size=64, hidden_size=32, intermediate_size=48, seed=0)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[3].zero_()
    with pytest.warns(RuntimeWarning, match="zero-norm rows"):
        apply_weight_norm_(model)
    w = model.model.layers[0].mlp.up_proj.weight.detach()
    assert torch.isfinite(w).all() and float(w[3].abs().sum()) == 0.0


def test_weight_norm_bad_targets():
    model = HybridSLM(HybridSLMConfig(operators="m2 f", hidden_size=32, ffn_size=32, vocab_size=32))
    # the default split on a model without attention: the MLP only, q/k/v/o reported as skipped
    targets = weight_norm_targets(model)
    assert targets.case1 == ("layers.1.mixer.gate_proj", "layers.1.mixer.up_proj")
    assert targets.case2 == ("layers.1.mixer.down_proj",)
    assert targets.skipped == ("q_proj", "k_proj", "v_proj", "o_proj")
    with pytest.raises(ValueError, match=r"missing.*'q_proj'"):
        apply_weight_norm_(model, strict=True)
    names = apply_weight_norm_(
        model, case1=("gate_proj", "up_proj", "in_proj"), case2=HYBRID_CASE2[1:], strict=True
    )
    assert any("in_proj" in n for n in names) and any("out_proj" in n for n in names)
    with pytest.raises(ValueError, match="disjoint"):
        apply_weight_norm_(model, case1=("up_proj",), case2=("up_proj",))
    # a name outside the library's cases that matches nothing is a misspelling: raise, naming it
    with pytest.raises(ValueError, match=r"'up_prj'.*misspelt"):
        apply_weight_norm_(model, case1=("gate_proj", "up_prj"), case2=())
    with pytest.raises(ValueError, match="no weight-norm target matches"):
        apply_weight_norm_(model, case1=("q_proj",), case2=("o_proj",))
    with pytest.raises(TypeError, match="exclude_modules"):
        apply_weight_norm_(model, exclude_modules=(3,))
    with pytest.raises(TypeError, match="strict"):
        apply_weight_norm_(model, strict=1)


def _qwen3_next():
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    cfg = Qwen3NextConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        intermediate_size=48,
        num_experts=0,
        mlp_only_layers=[0, 1],
        pad_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen3NextForCausalLM(cfg)


def _nemotron_h():
    from transformers import NemotronHConfig, NemotronHForCausalLM

    cfg = NemotronHConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=4,
        layers_block_type=["mamba", "mlp", "attention", "mlp"],
        mamba_num_heads=4,
        mamba_head_dim=16,
        ssm_state_size=8,
        n_groups=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=48,
        pad_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return NemotronHForCausalLM(cfg)


def _train_steps(model, proj, steps=3):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    proj.attach(opt)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randint(0, 40, (2, 8), generator=gen)
        loss = causal_lm_loss(model(input_ids=x).logits, x)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_hybrid_cases_apply_to_nemotron_h_as_they_are():
    # HYBRID_CASE1 holds gate_proj and the DeltaNet names, which NemotronH lacks: they are skipped
    # (it raised before), and the Mamba2 in/out projections are normalised with attention and MLP.
    model = _nemotron_h()
    proj = WeightNormProjector(model, HYBRID_CASE1, HYBRID_CASE2)
    t = proj.targets
    assert set(t.skipped) == {"gate_proj", "in_proj_qkvz", "in_proj_ba"} and not t.excluded
    leaves1 = sorted(n.rsplit(".", 1)[-1] for n in t.case1)
    leaves2 = sorted(n.rsplit(".", 1)[-1] for n in t.case2)
    assert leaves1 == ["in_proj", "k_proj", "q_proj", "up_proj", "up_proj", "v_proj"]
    assert leaves2 == ["down_proj", "down_proj", "o_proj", "out_proj"]
    _train_steps(model, proj)
    assert _norm_error(model, HYBRID_CASE1, HYBRID_CASE2) <= 1e-5
    assert proj.calls == 3


def test_hybrid_cases_leave_the_gated_deltanet_of_qwen3_next_alone():
    # Normalising transformers' Gated DeltaNet projections cost ~0.6 nats of val CE on a tiny
    # Qwen3-Next hybrid; the hybrid cases used to normalise them (and raised on "in_proj").
    model = _qwen3_next()
    gdn = model.model.layers[0].linear_attn
    before = {k: v.clone() for k, v in gdn.state_dict().items()}
    proj = WeightNormProjector(model, HYBRID_CASE1, HYBRID_CASE2)
    assert proj.targets.excluded == tuple(
        f"model.layers.0.linear_attn.{n}" for n in ("in_proj_qkvz", "in_proj_ba", "out_proj")
    )
    assert proj.targets.skipped == ("in_proj",)
    assert not any("linear_attn" in n for n in proj.names)
    attn = model.model.layers[1].self_attn
    torch.testing.assert_close(attn.q_proj.weight.norm(dim=1), torch.ones(64))
    torch.testing.assert_close(attn.o_proj.weight.norm(dim=0), torch.ones(32))
    for k, v in gdn.state_dict().items():
        assert torch.equal(v, before[k]), k
    # the paper's rule on every operator: exclude nothing
    names = apply_weight_norm_(model, HYBRID_CASE1, HYBRID_CASE2, exclude_modules=())
    assert {n for n in names if "linear_attn" in n} == {
        f"model.layers.0.linear_attn.{n}.weight" for n in ("in_proj_qkvz", "in_proj_ba", "out_proj")
    }
    torch.testing.assert_close(gdn.in_proj_qkvz.weight.norm(dim=1), torch.ones(64))
    torch.testing.assert_close(gdn.out_proj.weight.norm(dim=0), torch.ones(16))
    # strict: a name found only inside an excluded module is reported as such
    with pytest.raises(ValueError, match="only inside exclude_modules"):
        apply_weight_norm_(model, ("q_proj", "in_proj_qkvz"), ("o_proj",), strict=True)


def test_hybrid_slm_mamba2_out_proj_normalised_deltanet_out_proj_left_alone():
    model = _hybrid("d f m2 f a f")
    d_out = model.layers[0].mixer.out_proj.weight.clone()
    proj = WeightNormProjector(model, HYBRID_CASE1, HYBRID_CASE2)
    assert "layers.2.mixer.out_proj" in proj.targets.case2
    assert "layers.2.mixer.in_proj" in proj.targets.case1
    assert "layers.0.mixer.out_proj" in proj.targets.excluded
    assert torch.equal(model.layers[0].mixer.out_proj.weight, d_out)
    torch.testing.assert_close(
        model.layers[2].mixer.out_proj.weight.norm(dim=0), torch.ones(64), atol=1e-6, rtol=0
    )
    # exclude by class works as by class name
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer

    t = weight_norm_targets(
        model, HYBRID_CASE1, HYBRID_CASE2, exclude_modules=(NemotronHMamba2Mixer, *DELTANET_MODULES)
    )
    assert not any(".mixer.in_proj" in n or "out_proj" in n for n in t.case1 + t.case2)


def _hybrid(ops, meta=0, **kw):
    cfg = HybridSLMConfig(
        operators=ops,
        hidden_size=32,
        ffn_size=48,
        num_heads=4,
        window=3,
        vocab_size=40,
        meta_tokens=meta,
        mamba_head_dim=16,
        deltanet_head_dim=8,
        **kw,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HybridSLM(cfg)


@pytest.mark.parametrize(
    ("ops", "meta"),
    [("d f m2 f a f m2 f", 0), ("a f swa f", 0), ("m2 f d f", 2), ("swa a", 3)],
)
def test_hybrid_trains_and_cached_generate_equals_uncached_greedy(ops, meta):
    model = _hybrid(ops, meta)
    x = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    model.train()
    out = model(input_ids=x, labels=x)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    with torch.no_grad():
        gen = model.generate(x[:1, :5], max_new_tokens=6, do_sample=False)
        ids = x[:1, :5]
        for _ in range(6):
            nxt = model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
    assert torch.equal(gen, ids)


@pytest.mark.parametrize(
    "kw",
    [
        {"operators": "d f m2 f a f m2 f"},
        {"operators": "a swa f", "tie_word_embeddings": False, "num_kv_heads": 2},
        {"operators": "m2 d f", "meta_tokens": 5, "mamba_expand": 1},
    ],
)
def test_hybrid_parameter_count_matches_the_closed_form(kw):
    cfg = HybridSLMConfig(hidden_size=32, ffn_size=48, num_heads=4, window=4, vocab_size=40, **kw)
    assert count_parameters(HybridSLM(cfg)) == hybrid_param_count(cfg)


def test_sliding_window_limits_the_receptive_field():
    model = _hybrid("swa f").eval()  # window 3: position t sees t-2..t
    x = torch.randint(0, 40, (1, 8), generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[0, 0] = (x[0, 0] + 1) % 40
    with torch.no_grad():
        a, b = model(input_ids=x).logits, model(input_ids=y).logits
    assert float((a[0, 3:] - b[0, 3:]).abs().max()) == 0.0
    assert float((a[0, :3] - b[0, :3]).abs().max()) > 0.0


def test_hybrid_config_round_trip_and_save_load(tmp_path):
    model = _hybrid("d f a f", meta=2).eval()
    model.save_pretrained(tmp_path)
    loaded = HybridSLM.from_pretrained(tmp_path).eval()
    assert loaded.config.operators == ["d", "f", "a", "f"] and loaded.config.meta_tokens == 2
    x = torch.randint(0, 40, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(input_ids=x).logits, loaded(input_ids=x).logits)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"operators": "a x f"}, "unknown operator"),
        ({"operators": ""}, "at least one operator"),
        ({"operators": "swa f"}, "window must be set"),
        ({"operators": "a f", "num_kv_heads": 3}, "num_kv_heads"),
        ({"operators": "a f", "hidden_size": 30}, "num_heads"),
        ({"operators": "a f", "meta_tokens": -1}, "meta_tokens"),
    ],
)
def test_bad_hybrid_configs(kw, match):
    with pytest.raises(ValueError, match=match):
        HybridSLMConfig(**kw)


def _lut(space: SearchSpace) -> LatencyLUT:
    cost = {"d": 6 / 64, "a": 8 / 64, "m2": 7 / 64, "f": 5 / 64}
    return LatencyLUT(
        table={(o, h): c * (h / 1024) ** 2 for o, c in cost.items() for h in space.hidden_sizes},
        overhead={h: 0.5 * h / 1024 for h in space.hidden_sizes},
    )


def test_lut_prediction_sums_operators_and_interpolates():
    lut = LatencyLUT(
        table={("a", 64): 1.0, ("a", 128): 3.0, ("f", 64): 0.5, ("f", 128): 0.5},
        overhead={64: 0.2, 128: 0.4},
    )
    assert lut.predict(HybridArch(("a", "f", "a"), 64)) == pytest.approx(0.2 + 2.5)
    assert lut.predict(HybridArch(("a",), 96)) == pytest.approx(0.3 + 2.0)
    with pytest.raises(ValueError, match="outside"):
        lut.predict(HybridArch(("a",), 256))
    with pytest.raises(ValueError, match="not in the LUT"):
        lut.predict(HybridArch(("m2",), 64))


def test_lut_measure_has_every_entry():
    lut = LatencyLUT.measure(
        ops=("a", "m2"), hidden_sizes=(32,), seq_len=8, decode_tokens=2, repeats=1
    )
    assert set(lut.table) == {("a", 32), ("m2", 32)} and set(lut.overhead) == {32}
    assert all(v >= 0 and math.isfinite(v) for v in [*lut.table.values(), *lut.overhead.values()])


def _objective(arch: HybridArch) -> float:
    o = arch.operators
    mixers = max(1, sum(x != "f" for x in o))
    return (
        30 * len(o) ** -0.5
        + 12 * 1024 / arch.hidden_size
        + 0.4 * (o.count("a") - 2) ** 2
        + (o.count("f") / mixers - 1) ** 2
    )


def test_aging_evolution_is_feasible_reproducible_and_only_trains_feasible():
    space = SearchSpace(max_blocks=3)
    lut = _lut(space)
    calls = []

    def fitness(arch):
        calls.append(lut.predict(arch))
        return _objective(arch)

    res = aging_evolution(space, fitness, lut, 3.0, cycles=5, seed=7)
    again = aging_evolution(space, _objective, lut, 3.0, cycles=5, seed=7)
    other = aging_evolution(space, _objective, lut, 3.0, cycles=5, seed=8)
    assert res.evaluations == 16 + 5 * 10 == len(res.history)
    assert max(calls) <= 3.0
    assert res.latency_ms <= 3.0 and lut.predict(res.arch) == pytest.approx(res.latency_ms)
    assert (res.stages, res.arch, res.fitness) == (again.stages, again.arch, again.fitness)
    assert res.history != other.history
    # hidden size = the largest one meeting the budget
    bigger = [h for h in space.hidden_sizes if h > res.arch.hidden_size]
    assert all(lut.predict(HybridArch(res.arch.operators, h)) > 3.0 for h in bigger)
    assert res.fitness == min(f for f, _, _ in res.history)
    rs = random_search(space, _objective, lut, 3.0, evaluations=66, seed=7)
    assert rs.evaluations == 66 and rs.latency_ms <= 3.0


def test_exhaustive_enumeration_matches_brute_force_on_a_small_space():
    from eff_llm.reproduce.nemotron_flash import (
        SyntheticObjective,
        exhaustive_fitness,
        synthetic_lut,
    )

    space = SearchSpace(
        operators=("d", "a"),
        max_blocks=2,
        ffn_choices=(0, 2),
        ratios=((0, 1), (1, 3)),
        max_operators=14,
    )
    obj = SyntheticObjective()
    lut = synthetic_lut(space)
    brute = []
    for stages in itertools.product(space.stage_options(), repeat=3):
        arch, _ = space.realise(stages, lut, 2.0)
        if arch is not None:
            brute.append(obj(arch))
    fast = exhaustive_fitness(space, obj, 2.0)
    np.testing.assert_allclose(np.sort(brute), fast)


def test_search_space_structure_and_bad_inputs():
    space = SearchSpace()
    assert len(space.stage_options()) == (3 + 6 * 3) * 3 * 4
    spec = StageSpec.from_block("d f a f a f a f", blocks=2)
    assert spec == StageSpec("d", "a", (1, 3), 1, 2)
    assert StageSpec.from_block("m2 f f") == StageSpec("m2", "m2", (0, 1), 2, 1)
    big = space.stages_from_blocks([("d f f a f f a f f a f f", 2)] * 3, trim=True)
    assert len(space.operators_of(big)) == 30
    with pytest.raises(ValueError, match="too many operators"):
        space.stages_from_blocks([("d f f a f f a f f a f f", 2)] * 3)
    with pytest.raises(ValueError, match="at most 2 mixer types"):
        StageSpec.from_block("d a m2")
    with pytest.raises(ValueError, match=r"FFN count .*\{0, 1, 2\}"):
        StageSpec.from_block("d f f f a f f f")
    with pytest.raises(ValueError, match="FFN count"):
        StageSpec.from_block("d f a")
    with pytest.raises(ValueError, match="ratio"):
        StageSpec.from_block("d a a a a")
    with pytest.raises(ValueError, match="unknown operator"):
        StageSpec.from_block("d q")
    with pytest.raises(ValueError, match=r"\{0, 1, 2\}"):
        SearchSpace(ffn_choices=(0, 3))
    lut = _lut(space)
    with pytest.raises(ValueError, match="latency_budget"):
        aging_evolution(space, _objective, lut, 0.0)
    with pytest.raises(ValueError, match="no architecture meets the budget"):
        aging_evolution(space, _objective, lut, 0.1)
    with pytest.raises(ValueError, match="sample"):
        aging_evolution(space, _objective, lut, 3.0, population=4, sample=5)


def test_depth_width_law_fit():
    true = (2.0, 6.0, 0.6, 4.0, 0.8)
    d, w = np.meshgrid([2, 4, 8, 16, 32, 64], [1, 2, 4, 8, 16, 32], indexing="ij")
    y = depth_width_law(true, d.ravel(), w.ravel())
    fit = fit_depth_width_law(d.ravel(), w.ravel(), y)
    np.testing.assert_allclose(fit, true, rtol=1e-3)
    with pytest.raises(ValueError, match=">= 5"):
        fit_depth_width_law([1, 2], [1, 2], [3.0, 2.0])
    with pytest.raises(ValueError, match="> 0"):
        fit_depth_width_law([0, 1, 2, 3, 4], [1] * 5, [1.0] * 5)


@pytest.mark.slow
def test_quick_reproduction_claims():
    """Every check passes; the search rank claims are judged (the search is the same in both
    modes): AE's median rank within the best 0.5 % reproduces, the paired ≥ 8/10 is an xfail
    (7/10 on our synthetic objective); the weight-norm claims are full mode only (quick trains
    60 steps on one seed)."""
    from eff_llm.reproduce.nemotron_flash import run

    result = run("quick", 0)
    verdicts = {c.text: c.verdict("quick") for c in result.claims}
    assert result.passed and "FAIL" not in verdicts.values(), verdicts
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 7 and all(c.passed for c in checks)
    paper = {c.text.split(" (")[0].split(",")[0]: c for c in result.claims if c.kind == "paper"}
    assert len(paper) == 3 and len(result.claims) == 12
    paired = paper[
        "search: AE's best feasible architecture ranks better than random search's at equal evaluations"
    ]
    assert paired.headline and paired.n_seeds == 10 and paired.verdict("quick") == "xfail"
    rank = next(c for t, c in paper.items() if t.startswith("search: AE's rank"))
    assert rank.verdict("quick") == "pass" and rank.measured <= 0.005
    wn = [c for c in result.claims if c.text.startswith("val CE: weight norm")]
    assert len(wn) == 3 and all(c.verdict("quick") == "not judged" for c in wn)
    hybrid = next(c for c in wn if "Qwen3-Next" in c.text)
    assert hybrid.expected == "xfail" and hybrid.modes == ("full",)
    assert result.metrics["weight_norm_hybrid"][0]["weight norm (wd 0)"]["excluded"] == 3


@pytest.mark.parametrize(
    ("family", "normalised", "excluded", "model_cls"),
    [
        # Qwen3-Next: GDN layer 0 (its 3 projections left alone) + attention layer 1, 2 MLPs
        ("qwen3_next", 4 + 6, 3, "Qwen3NextForCausalLM"),
        # NemotronH: Mamba2 (in/out) + MLP, attention + MLP (up/down; no gate)
        ("nemotron_h", 2 + 2 + 4 + 2, 0, "NemotronHForCausalLM"),
        ("hybrid_slm", 4 + 6, 3, "HybridSLM"),
    ],
)
def test_weight_norm_experiment_with_a_non_llama_family(family, normalised, excluded, model_cls):
    from eff_llm.reproduce.nemotron_flash import (
        NemotronFlashReproConfig,
        weight_norm_experiment,
        weight_norm_model,
    )

    cfg = NemotronFlashReproConfig(
        family=family, hidden=32, num_heads=4, ffn_size=48, steps=3, batch_size=4, seq_len=16,
        val_batches=1,
    )  # fmt: skip
    assert type(weight_norm_model(cfg, 50, 0)).__name__ == model_cls
    out = weight_norm_experiment(cfg, 0)
    base, wn = out["baseline (wd 0.1)"], out["weight norm (wd 0)"]
    assert wn["normalised"] == normalised and wn["excluded"] == excluded
    assert wn["steps_checked"] == 3 and wn["max_norm_error_per_step"] <= 1e-5
    assert math.isfinite(base["ce"]) and math.isfinite(wn["ce"]) and base["ce"] != wn["ce"]
    if excluded:  # the paper's rule on every operator: the DeltaNet projections too
        cfg_all = NemotronFlashReproConfig(**{**cfg.__dict__, "wnorm_exclude_modules": ()})
        wn_all = weight_norm_experiment(cfg_all, 0)["weight norm (wd 0)"]
        assert wn_all["normalised"] == normalised + excluded and wn_all["excluded"] == 0


@pytest.mark.parametrize(
    ("kw", "err", "match"),
    [
        ({"family": "gpt2"}, ValueError, "family"),
        ({"family": "hybrid_slm", "hybrid_operators": "d x"}, ValueError, "unknown operator"),
        ({"wnorm_case1": ["q_proj"]}, TypeError, "wnorm_case1"),
        ({"wnorm_exclude_modules": (1,)}, TypeError, "wnorm_exclude_modules"),
    ],
)
def test_weight_norm_experiment_config_bad_input(kw, err, match):
    from eff_llm.reproduce.nemotron_flash import NemotronFlashReproConfig

    with pytest.raises(err, match=match):
        NemotronFlashReproConfig(**kw)
