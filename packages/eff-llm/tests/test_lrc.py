import pytest
import torch
from torch import nn
from torch.nn import functional as F

from eff_llm._lm_train import TrainConfig, train_lm
from eff_llm._models import tiny_llama, tiny_qwen2
from eff_llm.corpus import docstring_lm_data, lm_windows, train_bpe, validation_windows
from eff_llm.lrc import LowRankClone, LowRankCloneConfig, clone_loss, lrc_trainable_count
from eff_shared.torch import count_parameters


def _teacher(kind="llama", **kw):
    make = tiny_llama if kind == "llama" else tiny_qwen2
    return make(vocab_size=64, hidden_size=32, num_heads=4, intermediate_size=48, seed=1, **kw)


def _trained(model: LowRankClone, steps=3, seed=0) -> LowRankClone:
    stream = torch.randint(0, 64, (2000,), generator=torch.Generator().manual_seed(seed))
    cfg = TrainConfig(steps=steps, batch_size=4, seq_len=12, lr=1e-2, seed=seed)
    train_lm(model, lambda m, x: m(x).loss, stream, cfg)
    return model


def _ids(n=3, t=11, seed=5):
    return torch.randint(0, 64, (n, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("tie", [True, False])
def test_exported_student_has_identical_logits(kind, tie):
    model = _trained(
        LowRankClone(_teacher(kind), LowRankCloneConfig(16, tie_embedding_projection=tie))
    )
    student = model.to_student()
    assert type(student).__name__ == ("LlamaForCausalLM" if kind == "llama" else "Qwen2ForCausalLM")
    assert student.config.hidden_size == 16 and student.config.head_dim == 8
    x = _ids()
    with torch.no_grad():
        diff = (student(input_ids=x).logits - model.student_logits(x)).abs().max()
    assert float(diff) <= 1e-6
    # A plain transformers model: generate works and parameters are ordinary tensors.
    out = student.generate(x[:1, :4], max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 7)
    assert count_parameters(student) == sum(p.numel() for p in student.parameters())


def test_student_weights_are_projections_of_teacher_weights():
    teacher = _teacher("qwen2")
    model = _trained(LowRankClone(teacher, LowRankCloneConfig(16)))
    sd = model.student_state_dict()
    layer, p = teacher.model.layers[1], model.projections
    torch.testing.assert_close(
        sd["model.layers.1.self_attn.q_proj.weight"], layer.self_attn.q_proj.weight @ p["l1_q"]
    )
    torch.testing.assert_close(
        sd["model.layers.1.self_attn.q_proj.bias"], layer.self_attn.q_proj.bias
    )
    torch.testing.assert_close(
        sd["model.layers.1.self_attn.o_proj.weight"], p["l1_o"].T @ layer.self_attn.o_proj.weight
    )
    torch.testing.assert_close(
        sd["model.layers.1.mlp.down_proj.weight"], p["l1_down"].T @ layer.mlp.down_proj.weight
    )
    torch.testing.assert_close(
        sd["model.embed_tokens.weight"], teacher.model.embed_tokens.weight @ p["embed"]
    )
    torch.testing.assert_close(sd["lm_head.weight"], teacher.lm_head.weight @ p["embed"])
    assert sd["model.norm.weight"] is model.norms["final"]


@pytest.mark.parametrize(
    ("mode", "tie", "kind"),
    [("weight", True, "llama"), ("in_out", True, "llama"), ("weight", False, "qwen2")],
)
def test_trainable_count_matches_the_closed_form(mode, tie, kind):
    model = LowRankClone(
        _teacher(kind), LowRankCloneConfig(16, ffn_mode=mode, tie_embedding_projection=tie)
    )
    expected = lrc_trainable_count(2, 32, 16, mode, tie)
    assert count_parameters(model, trainable_only=True) == expected
    assert (
        expected
        == (7 if mode == "weight" else 6) * 2 * 32 * 16 + (1 if tie else 2) * 32 * 16 + 5 * 16
    )
    assert all(not p.requires_grad for p in model.teacher.parameters())


def _acts(model: nn.Module) -> tuple[dict, list]:
    store, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        for block, names in (("self_attn", "qkvo"), ("mlp", ("gate", "up", "down"))):
            for n in names:
                mod = getattr(getattr(layer, block), f"{n}_proj")

                def fn(_m, args, out, key=f"{i}.{n}"):
                    store[key] = out
                    store[key + "_in"] = args[0]

                handles.append(mod.register_forward_hook(fn))
    return store, handles


@pytest.mark.parametrize(
    ("attn_space", "ffn_space", "mode"),
    [
        ("student", "student", "weight"),
        ("teacher", "teacher", "weight"),
        ("student", "teacher", "in_out"),
    ],
)
def test_clone_losses_match_a_direct_computation(attn_space, ffn_space, mode):
    cfg = LowRankCloneConfig(
        16, attn_out_space=attn_space, ffn_out_space=ffn_space, ffn_mode=mode, kl_temperature=2.0
    )
    model = _trained(LowRankClone(_teacher(), cfg))
    x = _ids()
    with torch.no_grad():
        out = model(x)
    teacher, student = model.teacher, model.to_student()
    (t, th), (s, sh) = _acts(teacher), _acts(student)
    with torch.no_grad():
        t_logits, s_logits = teacher(input_ids=x).logits, student(input_ids=x).logits
    for h in th + sh:
        h.remove()
    p = model.projections
    expected: dict[str, float] = {}

    def add(term, a, b):
        expected[term] = expected.get(term, 0.0) + float(F.mse_loss(a, b).detach())

    for i, layer in enumerate(teacher.model.layers):
        for n in "qkv":
            add(n, s[f"{i}.{n}"], t[f"{i}.{n}"])
        if mode == "weight":
            add("gate", s[f"{i}.gate"], t[f"{i}.gate"])
            add("up", s[f"{i}.up"], t[f"{i}.up"])
        else:
            add("ffn_in", s[f"{i}.gate_in"] @ p[f"l{i}_mlp_in"].T, t[f"{i}.gate_in"])
        if attn_space == "student":
            add("attn_out", s[f"{i}.o"], t[f"{i}.o"] @ p[f"l{i}_o"])
        else:
            add("attn_out", s[f"{i}.o_in"] @ layer.self_attn.o_proj.weight.T, t[f"{i}.o"])
        down_key = f"l{i}_down" if mode == "weight" else f"l{i}_mlp_out"
        if ffn_space == "student":
            add("ffn_out", s[f"{i}.down"], t[f"{i}.down"] @ p[down_key])
        else:
            add("ffn_out", s[f"{i}.down_in"] @ layer.mlp.down_proj.weight.T, t[f"{i}.down"])
    got = {k: float(v) for k, v in out.clone_losses.items()}
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-9)
    # KL(teacher ‖ student), batchmean over (batch, seq, vocab): summed over positions / batch.
    ls, lt = F.log_softmax(s_logits / 2.0, -1), F.log_softmax(t_logits / 2.0, -1)
    kl = float((lt.exp() * (lt - ls)).sum() / x.shape[0])
    assert float(out.kl_loss) == pytest.approx(kl, rel=1e-5)
    lm = float(F.cross_entropy(s_logits[:, :-1].reshape(-1, 64), x[:, 1:].reshape(-1)))
    assert float(out.lm_loss) == pytest.approx(lm, rel=1e-5)
    total = lm + kl + 0.2 * sum(expected.values())
    assert float(out.loss) == pytest.approx(total, rel=1e-5)


def test_token_kl_reduction_is_the_per_position_mean():
    model = LowRankClone(
        _teacher(), LowRankCloneConfig(16, kl_temperature=1.0, kl_reduction="token")
    )
    other = LowRankClone(_teacher(), LowRankCloneConfig(16, kl_temperature=1.0))
    x = _ids(t=9)
    with torch.no_grad():
        a, b = model(x).kl_loss, other(x).kl_loss
    assert float(a) == pytest.approx(float(b) / 9, rel=1e-5)


def test_clone_loss_sums_layers_per_term_and_checks_keys():
    a = {"0.q": torch.ones(2, 3), "1.q": torch.zeros(2, 3), "0.up": torch.ones(4)}
    b = {"0.q": torch.zeros(2, 3), "1.q": torch.ones(2, 3), "0.up": torch.ones(4)}
    out = clone_loss(a, b)
    assert float(out["q"]) == 2.0 and float(out["up"]) == 0.0
    with pytest.raises(ValueError, match="same keys"):
        clone_loss(a, {"0.q": torch.ones(2, 3)})


def test_only_projections_and_norms_get_gradients_and_training_is_seeded():
    model = LowRankClone(_teacher(), LowRankCloneConfig(16))
    model(_ids()).loss.backward()
    assert all(p.grad is None for p in model.teacher.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.projections.values())
    runs = [_trained(LowRankClone(_teacher(), LowRankCloneConfig(16), seed=3)) for _ in range(2)]
    for (k, a), b in zip(runs[0].state_dict().items(), runs[1].state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    other = _trained(LowRankClone(_teacher(), LowRankCloneConfig(16), seed=4))
    assert not torch.equal(other.projections["embed"], runs[0].projections["embed"])


def test_clone_terms_lower_the_clone_loss():
    """Mechanism: training with α > 0 reduces L_clone more than training with α = 0."""
    finals = {}
    for alpha in (0.0, 1.0):
        model = _trained(
            LowRankClone(_teacher(), LowRankCloneConfig(16, clone_weight=alpha)), steps=15
        )
        with torch.no_grad():
            finals[alpha] = float(sum(model(_ids(seed=9)).clone_losses.values()))
    assert finals[1.0] < finals[0.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"student_hidden_size": 0}, "student_hidden_size"),
        ({"student_hidden_size": -4}, "student_hidden_size"),
        ({"student_hidden_size": 16, "clone_weight": -0.1}, "clone_weight"),
        ({"student_hidden_size": 16, "kl_temperature": 0.0}, "kl_temperature"),
        ({"student_hidden_size": 16, "attn_out_space": "both"}, "attn_out_space"),
        ({"student_hidden_size": 16, "ffn_mode": "lora"}, "ffn_mode"),
        ({"student_hidden_size": 16, "kl_reduction": "sum"}, "kl_reduction"),
    ],
)
def test_bad_config_raises_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LowRankCloneConfig(**kwargs)


def test_bad_teachers_raise_the_named_errors():
    with pytest.raises(ValueError, match="smaller than the teacher's hidden size 32"):
        LowRankClone(_teacher(), LowRankCloneConfig(32))
    with pytest.raises(ValueError, match="smaller than the teacher's hidden size 32"):
        LowRankClone(_teacher(), LowRankCloneConfig(64))
    with pytest.raises(ValueError, match="divisible by num_attention_heads"):
        LowRankClone(_teacher(), LowRankCloneConfig(18))
    gelu = _teacher()
    gelu.config.hidden_act = "gelu"
    with pytest.raises(ValueError, match="SwiGLU"):
        LowRankClone(gelu, LowRankCloneConfig(16))
    layernorm = _teacher()
    layernorm.model.layers[0].input_layernorm = nn.LayerNorm(32)
    with pytest.raises(ValueError, match="RMSNorm"):
        LowRankClone(layernorm, LowRankCloneConfig(16))
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=64))
    with pytest.raises(NotImplementedError, match=r"\['llama', 'qwen2'\]"):
        LowRankClone(gpt2, LowRankCloneConfig(16))
    quantized = _teacher()
    quantized.model.layers[0].mlp.register_parameter(
        "qweight", nn.Parameter(torch.zeros(4, dtype=torch.int8), requires_grad=False)
    )
    with pytest.raises(TypeError, match="floating-point"):
        LowRankClone(quantized, LowRankCloneConfig(16))
    flagged = _teacher()
    flagged.is_quantized = True
    with pytest.raises(TypeError, match="dequantize"):
        LowRankClone(flagged, LowRankCloneConfig(16))
    with pytest.raises(TypeError, match="teacher"):
        LowRankClone(nn.Linear(2, 2), LowRankCloneConfig(16))


def test_corpus_tokenizer_is_deterministic_and_split_by_position():
    data = docstring_lm_data(1200)
    assert data.vocab_size == 1200 and len(data.sha256) == 64
    assert len(data.val) > 0.05 * len(data.train)
    texts = ["alpha beta gamma delta " * 5, "return the value of x " * 5]
    a, b = train_bpe(texts, 300), train_bpe(texts, 300)
    assert a.get_vocab() == b.get_vocab()
    assert a.decode(a.encode("beta value").ids) == "beta value"
    w1 = lm_windows(data.train, 4, 16, torch.Generator().manual_seed(2))
    w2 = lm_windows(data.train, 4, 16, torch.Generator().manual_seed(2))
    assert torch.equal(w1, w2) and w1.shape == (4, 16)
    val = validation_windows(data.val, 64, 10)
    assert torch.equal(val[1], data.val[64:128])
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe(texts, 100)
    with pytest.raises(ValueError, match="seq_len"):
        lm_windows(data.val[:10], 2, 10, torch.Generator())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"steps": 0}, "steps"), ({"lr": -1.0}, "lr"), ({"schedule": "step"}, "schedule")],
)
def test_train_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


def test_tiny_qwen2_ties_its_embeddings_on_request():
    untied, tied = tiny_qwen2(seed=0), tiny_qwen2(seed=0, tie_word_embeddings=True)
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    assert tied.lm_head.weight is tied.model.embed_tokens.weight and tied.config.tie_word_embeddings
    assert tied.model.layers[0].self_attn.q_proj.bias is not None  # still Qwen2 (q/k/v biases)
    assert count_parameters(untied) - count_parameters(tied) == 64 * 32
    with pytest.raises(TypeError, match="tie_word_embeddings"):
        tiny_qwen2(tie_word_embeddings=1)


@pytest.mark.parametrize(
    ("family", "tied", "kv", "student_cls"),
    [("qwen2", True, 2, "Qwen2ForCausalLM"), ("qwen2", False, None, "Qwen2ForCausalLM"),
     ("llama", False, 2, "LlamaForCausalLM")],
)  # fmt: skip
def test_lrc_experiment_with_another_teacher_family(family, tied, kv, student_cls):
    from eff_llm.reproduce.lrc import LRCReproConfig, experiment, tiny_teacher, train_teacher

    cfg = LRCReproConfig(
        teacher_hidden=32, num_heads=4, ffn_size=48, teacher_steps=3, teacher_batch=4,
        student_hidden=16, steps=3, batch_size=4, seq_len=16, val_batches=1,
        teacher_family=family, teacher_tied=tied, teacher_kv_heads=kv,
    )  # fmt: skip
    teacher = train_teacher(cfg, 0)
    attn = teacher.model.layers[0].self_attn
    assert (attn.q_proj.bias is not None) == (family == "qwen2")
    assert attn.k_proj.out_features == (kv or 4) * 8
    assert (teacher.lm_head.weight is teacher.model.embed_tokens.weight) == tied
    out = experiment(cfg, 0, ("scratch",))
    assert out["checks"]["merged_type"] == student_cls and out["checks"]["max_logit_diff"] <= 1e-4
    assert out["checks"]["trainable"] == out["checks"]["trainable_closed_form"]
    scratch = tiny_teacher(family, 1200, 16, 2, 4, 8, 48, 0, tied=tied, kv_heads=kv)
    assert type(scratch).__name__ == student_cls
    rows = out["rows"]
    assert rows["scratch (same architecture)"]["params"] == count_parameters(scratch)
    assert rows["LRC"]["params"] == rows["scratch (same architecture)"]["params"]


@pytest.mark.parametrize(
    ("kw", "err", "match"),
    [
        ({"teacher_family": "gpt2"}, ValueError, "teacher_family must be one of"),
        ({"teacher_tied": "yes"}, TypeError, "teacher_tied"),
        ({"teacher_kv_heads": 3}, ValueError, "teacher_kv_heads=3 must divide"),
        ({"kl_reduction": "sum"}, ValueError, "kl_reduction"),
    ],
)
def test_lrc_repro_config_bad_input(kw, err, match):
    from eff_llm.reproduce.lrc import LRCReproConfig

    with pytest.raises(err, match=match):
        LRCReproConfig(**kw)


@pytest.mark.slow
def test_quick_reproduction_claims():
    """Quick mode runs the checks only (exact merged logits, trainable count) on a short run; the
    two paper claims (LRC vs scratch, vs α = 0) are judged in full mode only (median of 5 seeds)."""
    from eff_llm.reproduce.lrc import run

    result = run("quick", 0)
    verdicts = [c.verdict("quick") for c in result.claims]
    assert result.passed and "FAIL" not in verdicts
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 2 and all(c.passed for c in checks)
    paper = [c for c in result.claims if c.kind == "paper"]
    assert len(paper) == 4 and all(c.verdict("quick") == "not judged" for c in paper)
    assert paper[0].headline and "scratch" in paper[0].text
    qwen = [c for c in paper if "Qwen2 teacher" in c.text]
    assert [c.expected for c in qwen] == ["reproduces", "xfail"] and not any(
        c.headline for c in qwen
    )
    assert len(result.claims) == 6
