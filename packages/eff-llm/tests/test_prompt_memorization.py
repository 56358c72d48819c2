import math

import pytest
import torch

from eff_llm.prompt_memorization import (
    SoftPromptClassifier,
    fit_prompt,
    make_memorization_dataset,
    make_random_backbone,
    memorization_sweep,
    min_prompt_length,
)


def test_logits_are_the_tied_lm_head_scores_of_the_label_tokens():
    """GPT2 ties lm_head to the token embedding, so the classifier's logits must equal the LM's
    next-token logits at the label ids for the sequence [P; E(x)]."""
    backbone = make_random_backbone("gpt2")
    clf = SoftPromptClassifier(backbone, 3, [0, 1, 2, 3], seed=1)
    x, _ = make_memorization_dataset(5, seed=0)
    with torch.no_grad():
        embeds = torch.cat(
            [clf.prompt.expand(5, -1, -1), backbone.get_input_embeddings()(x)], dim=1
        )
        lm = backbone(inputs_embeds=embeds).logits[:, -1, :4]
        torch.testing.assert_close(clf(x), lm, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_only_the_prompt_trains_and_the_backbone_is_untouched(arch):
    backbone = make_random_backbone(arch)
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    clf = SoftPromptClassifier(backbone, 4, range(4))
    assert [n for n, p in clf.named_parameters() if p.requires_grad] == ["prompt"]
    x, y = make_memorization_dataset(8, seed=1)
    res = fit_prompt(clf, x, y, max_steps=5)
    assert res.steps <= 5 and 0.0 <= res.accuracy <= 1.0
    assert all(torch.equal(before[k], v) for k, v in backbone.state_dict().items())


def test_fit_stops_at_the_first_step_with_full_accuracy():
    backbone = make_random_backbone("gpt2", initializer_range=0.2)
    x, y = make_memorization_dataset(8, seed=2)
    clf = SoftPromptClassifier(backbone, 8, range(4))
    res = fit_prompt(clf, x, y)
    assert res.memorized and res.accuracy == 1.0 and res.steps < 300
    with torch.no_grad():
        assert bool((clf(x).argmax(-1) == y).all())  # the returned prompt memorizes


def test_min_prompt_length_returns_the_first_memorizing_length():
    backbone = make_random_backbone("gpt2", initializer_range=0.2)
    x, y = make_memorization_dataset(8, seed=2)
    history: list[dict] = []
    m = min_prompt_length(backbone, x, y, (1, 2, 4, 8), history=history)
    assert m is not None and [h["m"] for h in history] == [g for g in (1, 2, 4, 8) if g <= m]
    assert history[-1]["memorized"] and not any(h["memorized"] for h in history[:-1])


def test_datasets_are_seeded_and_structured():
    a = make_memorization_dataset(32, seed=5)
    b = make_memorization_dataset(32, seed=5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    x, y = a
    assert int(x.min()) >= 4 and int(x.max()) < 32 and set(y.tolist()) <= {0, 1, 2, 3}
    _, y1 = make_memorization_dataset(64, structure="low_rank", rank=1, seed=5)
    assert (
        len(set(y1.tolist())) <= 2
    )  # argmax of a rank-1 score: at most two classes (the confound)
    _, y4 = make_memorization_dataset(64, structure="low_rank", rank=4, seed=5)
    assert len(set(y4.tolist())) > 2


def test_prompt_init_is_seeded_and_vocab_init_copies_embeddings():
    backbone = make_random_backbone("gpt2")
    p1 = SoftPromptClassifier(backbone, 4, range(4), seed=3).prompt
    p2 = SoftPromptClassifier(backbone, 4, range(4), seed=3).prompt
    assert torch.equal(p1, p2)
    vocab = SoftPromptClassifier(backbone, 4, range(4), prompt_init="vocab", seed=3).prompt
    emb = backbone.get_input_embeddings().weight[4:]
    assert all(any(torch.equal(row, e) for e in emb) for row in vocab)


def test_sweep_rows():
    rows = memorization_sweep([8], (4, 8), ("random",), (0.2,), (2,), max_steps=150)
    assert len(rows) == 1 and rows[0]["n"] == 8
    assert rows[0]["m_star"] in (4, 8, None)
    assert set(rows[0]["accuracy_per_m"]) <= {4, 8}


def test_bad_inputs_raise():
    backbone = make_random_backbone("gpt2")
    x, y = make_memorization_dataset(8)
    with pytest.raises(ValueError, match="num_virtual_tokens"):
        SoftPromptClassifier(backbone, 0, range(4))
    clf = SoftPromptClassifier(backbone, 2, range(4))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
        fit_prompt(clf, x, y + 4)
    with pytest.raises(ValueError, match="overlap the label token ids"):
        clf(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds the backbone's max_position_embeddings 64"):
        SoftPromptClassifier(backbone, 62, range(4))(x)
    with pytest.raises(TypeError, match="integer tensor"):
        clf(x.float())
    with pytest.raises(ValueError, match="rank must be an integer in \\[1, 4\\]"):
        make_memorization_dataset(8, structure="low_rank", rank=5)
    with pytest.raises(ValueError, match="rank must be an int"):
        make_memorization_dataset(8, structure="low_rank", rank=0)
    with pytest.raises(ValueError, match="n must be a finite number > 0"):
        make_memorization_dataset(0)
    with pytest.raises(ValueError, match="grid must not be empty"):
        min_prompt_length(backbone, x, y, ())
    with pytest.raises(ValueError, match="strictly increasing"):
        min_prompt_length(backbone, x, y, (2, 2, 4))
    with pytest.raises(ValueError, match="arch must be one of"):
        make_random_backbone("bert")  # type: ignore[arg-type]
    trainable = make_random_backbone("gpt2")
    trainable.requires_grad_(True)
    with pytest.warns(UserWarning, match="freezes it"):
        SoftPromptClassifier(trainable, 2, range(4))
    assert not any(p.requires_grad for p in trainable.parameters())


def test_growth_is_judged_over_data_seeds_with_its_spread():
    """A non-monotone seed (m* = 2, 1, 4) is one of the seeds, not the verdict."""
    from eff_llm.reproduce.prompt_memorization import growth_claims

    growth = {2: [2, 1, 4], 3: [1, 4, 8], 4: [1, 2, 8]}
    claims, rows, notes = growth_claims((8, 16, 32), growth)
    first, drops, ratio = claims
    assert first.values == (2.0, 1.0, 1.0) and first.measured == 1.0 and first.passed
    assert drops.values == (1.0, 0.0, 0.0) and drops.measured == 0.0 and drops.passed
    assert drops.k_on_side == 2 and drops.spread == (0.0, 1.0)
    assert "{" not in drops.text  # the text is stable: the per-seed m* are in the table
    assert ratio.values == (2.0, 8.0, 8.0) and ratio.measured == 8.0 and ratio.headline
    assert [r["m*"] for r in rows] == [1, 2, 8]  # medians per n
    assert rows[1]["setting"] == "n=16, m* per data seed {2: 1, 3: 4, 4: 2}; min–max 1–4"
    assert notes == [
        "A2: m*(n) decreases over n=[8, 16, 32] at data seeds [2] of [2, 3, 4] (2: [2, 1, 4]); "
        "the growth claims are judged on the median over the data seeds"
    ]
    # two non-monotone seeds of three: the median says so
    claims, _, _ = growth_claims((8, 16, 32), {2: [2, 1, 4], 3: [4, 2, 8], 4: [1, 2, 8]})
    assert not claims[1].passed and claims[1].measured == 1.0
    # an m* above the grid is unknown, never a pass
    claims, rows, notes = growth_claims((8, 16, 32), {5: [2, 4, None], 6: [2, 4, None]})
    assert math.isnan(claims[1].measured) and not claims[1].passed and not claims[2].passed
    assert rows[2]["m*"] == math.inf and rows[2]["setting"].endswith("min–max n/a")
    assert "no prompt length of the grid memorized some n at data seeds [5, 6]" in notes[1]


@pytest.mark.slow
def test_quick_reproduction_claims():
    from eff_llm.reproduce.prompt_memorization import run

    result = run("quick", seed=0)
    assert len(result.claims) == 6  # A1 x2, A2 x3 (data seeds 2-4), A3 (data seeds 1-3)
    assert all(c.kind == "paper" for c in result.claims)
    assert all(c.passed for c in result.claims), [c for c in result.claims if not c.passed]
    assert result.passed and set(result.verdicts()) == {"pass"}
    a2 = [c for c in result.claims if c.text.startswith("A2")]
    assert len(a2) == 3 and all(c.seeds == (2, 3, 4) for c in a2) and a2[-1].headline
    spread = [r for r in result.table if r["experiment"] == "A2 over seeds"]
    assert [r["setting"].split(",")[0] for r in spread] == ["n=8", "n=16", "n=32"]
    a3 = result.claims[-1]
    assert a3.statistic == "mean" and a3.seeds == (1, 2, 3) and len(a3.values) == 3


def test_cli_runs_a_small_sweep_and_rejects_bad_values():
    from typer.testing import CliRunner

    from eff_llm.cli import app

    args = [
        "prompt-memorization",
        "--n",
        "8",
        "--grid",
        "2 4",
        "--init-range",
        "0.2",
        "--structure",
        "random",
        "--seeds",
        "2",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "m_star" in res.output
    bad = CliRunner().invoke(app, [*args[:-2], "--seeds", "x"])
    assert bad.exit_code != 0 and "expected integers" in bad.output


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_random_backbone_ffn_width_and_kv_heads_are_parameters(arch):
    default = make_random_backbone(arch, hidden_size=16, num_heads=4, seed=3)
    explicit = make_random_backbone(arch, hidden_size=16, num_heads=4, seed=3, intermediate_size=64)
    for p, q in zip(default.parameters(), explicit.parameters(), strict=True):
        assert torch.equal(p, q)  # the default is 4·hidden, bit for bit
    narrow = make_random_backbone(arch, hidden_size=16, num_heads=4, intermediate_size=24)
    widths = {m.weight.shape for n, m in narrow.named_modules() if n.endswith(("up_proj", "c_fc"))}
    assert widths in ({(24, 16)}, {(16, 24)})  # nn.Linear (out, in) or GPT-2's Conv1D (in, out)
    with pytest.raises(ValueError, match="intermediate_size"):
        make_random_backbone(arch, hidden_size=16, intermediate_size=0)
    if arch != "gpt2":
        gqa = make_random_backbone(arch, hidden_size=16, num_heads=4, num_key_value_heads=2)
        assert gqa.config.num_key_value_heads == 2
        assert gqa.model.layers[0].self_attn.k_proj.weight.shape == (8, 16)
        with pytest.raises(ValueError, match="num_key_value_heads=3 must divide num_heads=4"):
            make_random_backbone(arch, hidden_size=16, num_heads=4, num_key_value_heads=3)
    else:
        with pytest.raises(ValueError, match="num_key_value_heads is for arch"):
            make_random_backbone(arch, hidden_size=16, num_heads=4, num_key_value_heads=2)
