import copy
import itertools

import numpy as np
import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict

from eff_llm._adapters import peft_deprecations_silenced
from eff_llm._data import arithmetic_vocab
from eff_llm._models import tiny_llama, tiny_qwen2
from eff_llm.lorasuite import (
    AttentionWeights,
    LoRASuiteConfig,
    derive_updated_model,
    embedding_transfer_matrix,
    head_alignment,
    linear_cka,
    monotone_layer_alignment,
    prepare_lft_model,
    transfer_lora,
)

MAKERS = [tiny_llama, tiny_qwen2]
VOCAB = arithmetic_vocab(64)
ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]


def _ids(seed=0, n=16):
    return torch.randint(0, 64, (n, 6), generator=torch.Generator().manual_seed(seed))


def _old_lora(model, targets, rank=4, alpha=8, seed=0):
    with peft_deprecations_silenced():
        peft_model = get_peft_model(
            copy.deepcopy(model), LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets)
        )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
    return peft_model


def test_embedding_transfer_recovers_a_rotation_with_reordered_vocabularies():
    gen = torch.Generator().manual_seed(0)
    E_old = torch.randn(50, 16, generator=gen)
    Q = torch.linalg.qr(torch.randn(16, 16, generator=gen)).Q
    perm = torch.randperm(50, generator=gen)
    E_new = torch.empty(50, 16)
    E_new[perm] = E_old @ Q  # token t sits at row perm[t] of the new model
    vocab_old = {f"tok{i}": i for i in range(50)}
    vocab_new = {f"tok{i}": int(perm[i]) for i in range(50)}
    vocab_new["only-new"] = 50
    W_x = embedding_transfer_matrix(
        E_old, torch.cat([E_new, torch.randn(1, 16)]), vocab_old, vocab_new
    )
    torch.testing.assert_close(W_x, Q, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="only 10 tokens are common"):
        embedding_transfer_matrix(E_old, E_new, {f"tok{i}": i for i in range(10)}, vocab_new)


def test_linear_cka_is_invariant_to_rotation_and_scale_and_detects_unrelated():
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(200, 8, generator=gen)
    Q = torch.linalg.qr(torch.randn(8, 8, generator=gen)).Q
    assert linear_cka(X, 3.0 * X @ Q) == pytest.approx(1.0, abs=1e-10)
    assert linear_cka(X, torch.randn(200, 8, generator=gen)) < 0.2
    with pytest.raises(ValueError, match="same n"):
        linear_cka(X, X[:10])


def test_monotone_dp_beats_greedy_and_matches_brute_force():
    S = np.array([[0.9, 0.95, 0.1], [0.1, 0.9, 0.2]])  # greedy would map both to layer 1
    assert monotone_layer_alignment(S) == [0, 1]
    rng = np.random.default_rng(0)
    for n, m in [(2, 3), (3, 5), (4, 4), (1, 3)]:
        S = rng.random((n, m))
        got = monotone_layer_alignment(S)
        best = max(
            itertools.combinations(range(m), n), key=lambda c: sum(S[i, j] for i, j in enumerate(c))
        )
        assert all(b > a for a, b in itertools.pairwise(got))
        assert sum(S[i, j] for i, j in enumerate(got)) == pytest.approx(
            sum(S[i, j] for i, j in enumerate(best))
        )
    with pytest.raises(ValueError, match="more layers"):
        monotone_layer_alignment(rng.random((3, 2)))


@pytest.mark.parametrize("maker", MAKERS)
def test_derived_model_without_insertion_computes_the_same_function(maker):
    old = maker(seed=3)
    new, truth = derive_updated_model(old, seed=4, insert_layer_at=None)
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(
            new(input_ids=ids).logits, old(input_ids=ids).logits, atol=1e-5, rtol=0
        )
    assert not torch.allclose(
        new.model.layers[0].self_attn.q_proj.weight, old.model.layers[0].self_attn.q_proj.weight
    )
    assert any(not np.array_equal(p, np.arange(len(p))) for p in truth.head_perms.values())


@pytest.mark.parametrize("maker", MAKERS)
def test_transfer_recovers_the_known_transformation(maker):
    """W_x = Q, layer map = [0, 2] (a layer inserted at 1), head maps = the true permutations."""
    old = maker(seed=0)
    new, truth = derive_updated_model(old, seed=1, insert_layer_at=1)
    adapter = get_peft_model_state_dict(_old_lora(old, "all-linear"))
    state, report = transfer_lora(
        old, new, adapter, vocab_old=VOCAB, vocab_new=VOCAB, calib_input_ids=_ids(1, 64)
    )
    torch.testing.assert_close(report.transfer_matrix, truth.rotation, atol=1e-4, rtol=0)
    assert report.layer_map == truth.layer_map == [0, 2]
    for i, perm in truth.head_perms.items():
        np.testing.assert_array_equal(report.head_maps[i], perm)
    assert {k.split(".layers.")[1].split(".")[0] for k in state} == {"0", "2"}
    assert report.lora_config.r == 4 and report.lora_config.lora_alpha == 4  # dict input: alpha = r


@pytest.mark.parametrize("maker", MAKERS)
def test_exact_head_transform_reproduces_the_adapted_function(maker):
    """Rotation + head permutation only: the exact transform gives the old model+LoRA's logits; the
    official (Gram-factor) transform does not — the spec's trap."""
    old = maker(seed=0)
    new, _ = derive_updated_model(old, seed=2, insert_layer_at=None)
    old_lora = _old_lora(old, ATTN)
    ids = _ids(2)
    with torch.no_grad():
        want = old_lora(input_ids=ids).logits
        base = old(input_ids=ids).logits
    adapter = get_peft_model_state_dict(old_lora)
    gaps = {}
    for mode in ("exact", "official"):
        state, report = transfer_lora(
            old,
            new,
            adapter,
            vocab_old=VOCAB,
            vocab_new=VOCAB,
            calib_input_ids=ids,
            config=LoRASuiteConfig(head_transform=mode),
            lora_alpha=8,
        )
        with torch.no_grad():
            got = prepare_lft_model(copy.deepcopy(new), state, report.lora_config)(
                input_ids=ids
            ).logits
        gaps[mode] = float((got - want).abs().max())
    effect = float((want - base).abs().max())
    assert effect > 0.05
    assert gaps["exact"] <= 1e-4
    assert gaps["official"] > 0.1 * effect


@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_official_head_transform_is_the_exact_one_times_the_gram_factor(scale):
    """With head weights c·(orthogonal), every Gram factor Q_a Q_aᵀ, K_a K_aᵀ, V_a V_aᵀ, O_aᵀ O_a is
    c²·I: the official transform is exact for c = 1 and shrinks each attention delta by c² otherwise
    (the reason the reproduction draws its weights at std 1/√d, not 0.02)."""
    old = tiny_llama(seed=0)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for layer in old.model.layers:
            for name in ATTN:
                w = getattr(layer.self_attn, name).weight
                w.copy_(scale * torch.linalg.qr(torch.randn(w.shape, generator=gen)).Q)
    new, _ = derive_updated_model(old, seed=6, insert_layer_at=None)
    adapter = get_peft_model_state_dict(_old_lora(old, "all-linear"))
    deltas = {}
    for mode in ("exact", "official"):
        state, _ = transfer_lora(
            old,
            new,
            adapter,
            vocab_old=VOCAB,
            vocab_new=VOCAB,
            calib_input_ids=_ids(4),
            config=LoRASuiteConfig(head_transform=mode),
        )
        deltas[mode] = {
            k[: -len(".lora_A.weight")]: state[k.replace("lora_A", "lora_B")] @ state[k]
            for k in state
            if k.endswith("lora_A.weight")
        }
    assert len(deltas["exact"]) == 14
    for key, exact in deltas["exact"].items():
        factor = scale**2 if "self_attn" in key else 1.0
        torch.testing.assert_close(deltas["official"][key], factor * exact, atol=1e-4, rtol=1e-3)


def test_official_head_transform_follows_the_spec_formula_head_by_head():
    """Spec step 4 with a new model that is not a rotation of the old one (so T ≠ Tᵀ):
    ΔQ_new[b] = (Q_a W_x Q_bᵀ)ᵀ ΔQ_old[a] W_x and ΔO_new[:, b] = W_xᵀ ΔO_old[:, a] (O_aᵀ W_x O_b),
    then the rank-r truncated SVD."""
    old = tiny_llama(seed=0)
    new, _ = derive_updated_model(old, seed=7, insert_layer_at=None)
    gen = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for layer in new.model.layers:
            for name in ("q_proj", "o_proj"):
                w = getattr(layer.self_attn, name).weight
                w.add_(0.02 * torch.randn(w.shape, generator=gen))
    adapter = get_peft_model_state_dict(_old_lora(old, ["q_proj", "o_proj"], rank=4))
    state, report = transfer_lora(
        old, new, adapter, vocab_old=VOCAB, vocab_new=VOCAB, calib_input_ids=_ids(5)
    )
    W_x, hd, pre = report.transfer_matrix, 8, "base_model.model.model.layers.0.self_attn."

    def delta(st, name):
        return st[f"{pre}{name}.lora_B.weight"] @ st[f"{pre}{name}.lora_A.weight"]

    def rank4(m):
        U, S, Vh = torch.linalg.svd(m)
        return U[:, :4] @ torch.diag(S[:4]) @ Vh[:4]

    o_attn, n_attn = old.model.layers[0].self_attn, new.model.layers[0].self_attn
    want_q, want_o = torch.zeros(32, 32), torch.zeros(32, 32)
    for a, b in enumerate(report.head_maps[0]):
        sa, sb = slice(a * hd, (a + 1) * hd), slice(int(b) * hd, (int(b) + 1) * hd)
        t_q = o_attn.q_proj.weight[sa] @ W_x @ n_attn.q_proj.weight[sb].t()
        want_q[sb] = t_q.t() @ delta(adapter, "q_proj")[sa] @ W_x
        t_o = o_attn.o_proj.weight[:, sa].t() @ W_x @ n_attn.o_proj.weight[:, sb]
        want_o[:, sb] = W_x.t() @ delta(adapter, "o_proj")[:, sa] @ t_o
    with torch.no_grad():
        torch.testing.assert_close(delta(state, "q_proj"), rank4(want_q), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(delta(state, "o_proj"), rank4(want_o), atol=1e-5, rtol=1e-4)


def test_mlp_transfer_is_exact_when_the_ffn_is_not_wider_than_the_model():
    old = tiny_llama(intermediate_size=16, seed=0)
    new, _ = derive_updated_model(old, seed=3, insert_layer_at=None)
    old_lora = _old_lora(old, "all-linear")
    ids = _ids(3)
    with torch.no_grad():
        want = old_lora(input_ids=ids).logits
    state, report = transfer_lora(
        old,
        new,
        get_peft_model_state_dict(old_lora),
        vocab_old=VOCAB,
        vocab_new=VOCAB,
        calib_input_ids=ids,
        config=LoRASuiteConfig(head_transform="exact"),
        lora_alpha=8,
    )
    with torch.no_grad():
        got = prepare_lft_model(copy.deepcopy(new), state, report.lora_config)(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def _transfer(old, new, adapter, ids, vocab_new=VOCAB, mode="exact"):
    return transfer_lora(
        old,
        new,
        adapter,
        vocab_old=VOCAB,
        vocab_new=vocab_new,
        calib_input_ids=ids,
        config=LoRASuiteConfig(head_transform=mode),
        lora_alpha=8,
    )


@pytest.mark.parametrize("maker", MAKERS)
def test_widened_model_computes_the_old_function_and_the_lora_transfers_exactly(maker):
    """d 32 → 48: W_x has orthonormal rows; the exact transfer reproduces the adapted function
    (MLP as wide as the model, so the MLP formulas are exact too)."""
    old = maker(intermediate_size=16, seed=0)
    new, truth = derive_updated_model(old, seed=2, insert_layer_at=None, hidden_size=48)
    assert new.config.hidden_size == 48 and truth.rotation.shape == (32, 48)
    torch.testing.assert_close(
        truth.rotation @ truth.rotation.t(), torch.eye(32), atol=1e-5, rtol=0
    )
    ids = _ids(3)
    old_lora = _old_lora(old, "all-linear")
    with torch.no_grad():
        torch.testing.assert_close(
            new(input_ids=ids).logits, old(input_ids=ids).logits, atol=1e-5, rtol=0
        )
        want = old_lora(input_ids=ids).logits
        effect = float((want - old(input_ids=ids).logits).abs().max())
    state, report = _transfer(old, new, get_peft_model_state_dict(old_lora), ids)
    torch.testing.assert_close(report.transfer_matrix, truth.rotation, atol=1e-4, rtol=0)
    for i, perm in truth.head_perms.items():
        np.testing.assert_array_equal(report.head_maps[i], perm)
    with torch.no_grad():
        got = prepare_lft_model(copy.deepcopy(new), state, report.lora_config)(input_ids=ids).logits
    assert effect > 0.05
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("insert", "layer_map", "inserted"),
    [((0, 2), [1, 2], (0, 3)), ([1, 1], [0, 3], (1, 2)), ((0, 1, 2), [1, 3], (0, 2, 4))],
)
def test_several_inserted_layers_are_recovered_by_transfer_lora(insert, layer_map, inserted):
    old = tiny_llama(seed=0)
    new, truth = derive_updated_model(old, seed=1, insert_layer_at=insert)
    assert truth.layer_map == layer_map and truth.inserted_layers == inserted
    assert truth.inserted_layer == inserted[0]
    assert len(new.model.layers) == 2 + len(insert)
    adapter = get_peft_model_state_dict(_old_lora(old, "all-linear"))
    state, report = _transfer(old, new, adapter, _ids(1, 64), mode="official")
    assert report.layer_map == layer_map
    assert {k.split(".layers.")[1].split(".")[0] for k in state} == {str(j) for j in layer_map}
    model = prepare_lft_model(copy.deepcopy(new), state, report.lora_config)
    for name, p in model.named_parameters():  # the inserted layers received nothing
        if "lora_" in name and any(f".layers.{j}." in name for j in inserted):
            assert not p.requires_grad and torch.count_nonzero(p) == 0


@pytest.mark.parametrize("maker", MAKERS)
def test_permuted_vocabulary_transfers_through_the_token_strings(maker):
    old = maker(seed=0)
    new, truth = derive_updated_model(old, seed=3, insert_layer_at=None, permute_vocab=True)
    perm = truth.vocab_permutation
    assert not torch.equal(perm, torch.arange(64)) and torch.equal(
        perm.sort().values, torch.arange(64)
    )
    vocab_new = truth.new_vocab(VOCAB)
    assert all(vocab_new[t] == int(perm[i]) for t, i in VOCAB.items())
    ids = _ids(4)
    old_lora = _old_lora(old, ATTN)
    with torch.no_grad():
        # the new model reads new ids and scores the new vocabulary
        torch.testing.assert_close(
            new(input_ids=perm[ids]).logits[..., perm], old(input_ids=ids).logits, atol=1e-5, rtol=0
        )
        want = old_lora(input_ids=ids).logits
    state, report = _transfer(old, new, get_peft_model_state_dict(old_lora), ids, vocab_new)
    torch.testing.assert_close(report.transfer_matrix, truth.rotation, atol=1e-4, rtol=0)
    with torch.no_grad():
        got = prepare_lft_model(copy.deepcopy(new), state, report.lora_config)(
            input_ids=perm[ids]
        ).logits[..., perm]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    # with the old vocabulary the transfer matrix is wrong (rows of other tokens are matched)
    _, wrong = _transfer(old, new, get_peft_model_state_dict(old_lora), ids)
    assert float((wrong.transfer_matrix - truth.rotation).abs().max()) > 0.1


def test_widened_inserted_permuted_update_all_at_once():
    old = tiny_qwen2(seed=5)
    new, truth = derive_updated_model(
        old, seed=6, hidden_size=40, insert_layer_at=(1, 2), permute_vocab=True
    )
    adapter = get_peft_model_state_dict(_old_lora(old, "all-linear"))
    state, report = _transfer(old, new, adapter, _ids(7, 64), truth.new_vocab(VOCAB))
    torch.testing.assert_close(report.transfer_matrix, truth.rotation, atol=1e-4, rtol=0)
    assert report.layer_map == truth.layer_map == [0, 2]
    for i, perm in truth.head_perms.items():
        np.testing.assert_array_equal(report.head_maps[i], perm)
    assert state[next(k for k in state if "q_proj.lora_A" in k)].shape == (4, 40)


def test_derive_updated_model_bad_inputs():
    old = tiny_llama(seed=0)
    with pytest.raises(ValueError, match="hidden_size must be >= the old hidden size 32"):
        derive_updated_model(old, hidden_size=16)
    with pytest.raises(ValueError, match="hidden_size"):
        derive_updated_model(old, hidden_size=0)
    with pytest.raises(ValueError, match=r"insert_layer_at must lie in \[0, 2\], got 3"):
        derive_updated_model(old, insert_layer_at=(1, 3))
    with pytest.raises(TypeError, match="insert_layer_at must be an int"):
        derive_updated_model(old, insert_layer_at=1.0)
    with pytest.raises(ValueError, match="tied"):
        derive_updated_model(tiny_llama(seed=0, tie_word_embeddings=True), hidden_size=48)
    _, truth = derive_updated_model(old, permute_vocab=True)
    with pytest.raises(ValueError, match="outside"):
        truth.new_vocab({"x": 64})


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_reads_and_writes_standard_peft_weights(tmp_path):
    old = tiny_llama(seed=0)
    new, _ = derive_updated_model(old, seed=1, insert_layer_at=1)
    old_lora = _old_lora(old, [*ATTN, "up_proj"], alpha=16)
    old_lora.save_pretrained(tmp_path / "old")
    ids = _ids(4, 32)
    from_dir, report = transfer_lora(
        old, new, tmp_path / "old", vocab_old=VOCAB, vocab_new=VOCAB, calib_input_ids=ids
    )
    from_dict, _ = transfer_lora(
        old,
        new,
        get_peft_model_state_dict(old_lora),
        vocab_old=VOCAB,
        vocab_new=VOCAB,
        calib_input_ids=ids,
        lora_alpha=16,
    )
    assert report.lora_config.lora_alpha == 16
    assert from_dir.keys() == from_dict.keys()
    assert all(torch.equal(from_dir[k], from_dict[k]) for k in from_dir)
    lft = prepare_lft_model(copy.deepcopy(new), from_dir, report.lora_config)
    with torch.no_grad():
        want = lft(input_ids=ids).logits
    lft.save_pretrained(tmp_path / "new")
    loaded = PeftModel.from_pretrained(copy.deepcopy(new), tmp_path / "new")
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, want)


def test_lft_freezes_modules_without_transferred_weights():
    old = tiny_llama(seed=0)
    new, _ = derive_updated_model(old, seed=1, insert_layer_at=1)
    state, report = transfer_lora(
        old,
        new,
        get_peft_model_state_dict(_old_lora(old, ATTN)),
        vocab_old=VOCAB,
        vocab_new=VOCAB,
        calib_input_ids=_ids(5),
    )
    model = prepare_lft_model(copy.deepcopy(new), state, report.lora_config)
    for name, p in model.named_parameters():
        if "lora_" not in name:
            assert not p.requires_grad
        elif ".layers.1." in name:  # the inserted layer received nothing
            assert not p.requires_grad and torch.count_nonzero(p) == 0
        else:
            assert p.requires_grad


def test_bad_inputs_raise():
    old = tiny_llama(seed=0)
    new, _ = derive_updated_model(old, seed=1, insert_layer_at=1)
    adapter = get_peft_model_state_dict(_old_lora(old, ATTN))
    ids = _ids(6)
    kw = dict(vocab_old=VOCAB, vocab_new=VOCAB, calib_input_ids=ids)
    with pytest.raises(ValueError, match="more layers"):
        transfer_lora(new, old, adapter, **kw)
    small_vocab = {t: i for t, i in VOCAB.items() if i < 20}
    with pytest.raises(ValueError, match="only 20 tokens are common"):
        transfer_lora(
            old, new, adapter, vocab_old=VOCAB, vocab_new=small_vocab, calib_input_ids=ids % 20
        )
    broken = {
        k: v
        for k, v in adapter.items()
        if not k.endswith("layers.0.self_attn.k_proj.lora_B.weight")
    }
    with pytest.raises(
        ValueError,
        match=r"missing LoRA factors: \['base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight'\]",
    ):
        transfer_lora(old, new, broken, **kw)
    too_big = {
        k: (torch.zeros(40, v.shape[1]) if "lora_A" in k else torch.zeros(v.shape[0], 40))
        for k, v in adapter.items()
    }
    with pytest.raises(ValueError, match="LoRA rank 40 exceeds"):
        transfer_lora(old, new, too_big, **kw)
    with pytest.raises(ValueError, match="cannot transfer"):
        transfer_lora(
            old,
            new,
            {**adapter, "base_model.model.lm_head.lora_A.weight": torch.zeros(4, 32)},
            **kw,
        )
    with pytest.raises(ValueError, match=r"must lie in \[0, 64\)"):
        transfer_lora(old, new, adapter, vocab_old=VOCAB, vocab_new=VOCAB, calib_input_ids=ids + 64)
    with pytest.raises(ValueError, match="not a token of both vocabularies"):
        transfer_lora(
            old,
            new,
            adapter,
            vocab_old=VOCAB,
            vocab_new=small_vocab | {str(i): i for i in range(32)},
            calib_input_ids=torch.full((2, 3), 40),
        )
    with pytest.raises(TypeError, match="integer torch tensor"):
        transfer_lora(
            old, new, adapter, vocab_old=VOCAB, vocab_new=VOCAB, calib_input_ids=ids.float()
        )
    from eff_llm.prompt_memorization import make_random_backbone

    gpt2 = make_random_backbone("gpt2", vocab_size=64)
    with pytest.raises(TypeError, match="not a Llama-style model"):
        transfer_lora(gpt2, new, adapter, **kw)
    fewer_heads = tiny_llama(num_heads=2, seed=0)
    with pytest.raises(ValueError, match="more attention heads"):
        transfer_lora(old, derive_updated_model(fewer_heads, seed=0)[0], adapter, **kw)
    with pytest.raises(ValueError, match="more heads"):
        w = AttentionWeights.from_module(old.model.layers[0].self_attn, 4, 4)
        v = AttentionWeights.from_module(fewer_heads.model.layers[0].self_attn, 2, 2)
        head_alignment(w, v, torch.eye(32))
    with pytest.raises(ValueError, match="head dim does not divide"):
        AttentionWeights(
            torch.zeros(30, 32), torch.zeros(30, 32), torch.zeros(30, 32), torch.zeros(32, 30), 4, 4
        )
    with pytest.raises(ValueError, match="layer_method must be one of"):
        LoRASuiteConfig(layer_method="hungarian")  # type: ignore[arg-type]


@pytest.mark.slow
def test_quick_reproduction_claims():
    from eff_llm.reproduce.lorasuite import run

    result = run("quick", seed=0)
    by_text = {c.text: c for c in result.claims}
    assert len(by_text) == 7
    assert all(c.passed for c in result.claims), [c for c in result.claims if not c.passed]
    assert result.passed and set(result.verdicts()) == {"pass"}
    paper = [c for c in result.claims if c.kind == "paper"]
    assert len(paper) == 2 and all(c.seeds == (0,) for c in paper)
    assert [c.headline for c in paper] == [False, True]
    # The exact-head variant carries the adapter over at least as well as the official one.
    rows = {r["method"]: r for r in result.table}
    exact, official = rows["LoRASuite (exact heads)"], rows["LoRASuite (official heads)"]
    assert exact["sub acc"] >= official["sub acc"] >= result.table[0]["sub acc"] + 0.10
