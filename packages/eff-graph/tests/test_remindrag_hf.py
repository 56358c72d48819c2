"""HFReader: ReMindRAG's LLM client on a local transformers causal LM (extra ``eff-graph[hf]``)."""

import json
import sys

import pytest

from eff_graph.remindrag import HFReader


def test_without_the_extra_raises_an_import_error_with_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install 'eff-graph\[hf\]'"):
        HFReader(object(), object())


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("transformers")
    from eff_graph.remindrag import byte_level_tokenizer

    return byte_level_tokenizer()


def tiny_llama(tok, bias=None):
    import torch
    from torch import nn
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, pad_token_id=0, bos_token_id=1,
        eos_token_id=2,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    if bias is not None:  # every position: the same next-token distribution softmax(bias)
        head = nn.Linear(32, len(tok), bias=True)
        with torch.no_grad():
            head.weight.zero_()
            head.bias.zero_()
            for char, value in bias.items():
                head.bias[tok(char, add_special_tokens=False)["input_ids"][0]] = value
        model.lm_head = head
    return model


MSG = [{"role": "user", "content": "Is the sky blue? Answer in a ```cot-ans``` block."}]


def test_byte_level_tokenizer_round_trips_any_text(tok):
    text = "Hub is near Quill — ünïcode\n```cot-ans\nyes\n```"
    ids = tok(text)["input_ids"]
    assert len(tok) == 259 and ids[0] == tok.bos_token_id
    assert len(ids) == len(text.encode("utf-8")) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_score_equals_one_unpadded_forward_per_option(tok):
    import torch

    model = tiny_llama(tok)  # random weights: the distribution depends on the context
    reader = HFReader(model, tok, length_normalize=False)
    prompt = tok("Where is Hub? ```cot-ans\n")["input_ids"]
    options = ["entity:Quill", "no", "chunk:c12"]
    got = reader.score(prompt, options)
    for option, value in zip(options, got, strict=True):
        o = tok(option, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = model(torch.tensor([prompt + o])).logits[0].log_softmax(-1)
        ref = sum(logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(o))
        assert value == pytest.approx(ref, abs=1e-4)
    mean = HFReader(model, tok).score(prompt, options)
    assert mean == pytest.approx([g / len(o.encode()) for g, o in zip(got, options, strict=True)])


def test_choose_mode_replies_in_the_format_remindrag_parses(tok):
    from eff_graph.remindrag import parse_cot_ans

    reader = HFReader(tiny_llama(tok, {"\n": 12.0, "y": 5.0, "Q": 9.0}), tok, max_new_tokens=8)
    judge = reader.complete(MSG, task="judge", context={})
    assert judge.text == "```cot-ans\nyes\n```" and judge.completion_tokens == 3
    assert judge.prompt_tokens == len(reader.render(MSG).encode()) + 1
    ctx = {
        "current": "Hub",
        "candidates": [{"to": "anchor-c1"}, {"to": "Quill"}],
        "entities": ["Hub", "Pond"],
        "out_degree": {"Hub": 2, "Pond": 1},
        "unread_anchor_chunks": ["c9"],
    }
    nxt = reader.complete(MSG, task="next_node", context=ctx)
    assert parse_cot_ans(nxt.text) == "entity:Quill"
    mem = reader.complete(
        MSG, task="memorize",
        context={"path": [{"kind": "relation", "id": "Hub|near|Quill"}], "chunks": ["c1"]},
    )  # fmt: skip
    assert json.loads(parse_cot_ans(mem.text)) == {"edges": ["Hub|near|Quill"], "chunks": ["c1"]}
    answer = reader.complete(MSG, task="answer", context={})
    assert answer.text == "```cot-ans\n\n```" and parse_cot_ans(answer.text) == ""
    free = HFReader(reader.model, tok, mode="generate", max_new_tokens=5).complete(MSG)
    assert free.text == "\n" * 5 and free.completion_tokens == 5


def test_generate_mode_with_an_untuned_model_fails_loudly_in_remindrag(tok):
    from eff_graph.remindrag import HashingEmbedder, KnowledgeGraph, LLMProtocolError, ReMindRAG

    kg = KnowledgeGraph()
    kg.add_chunk("c1", "Hub is near Quill.")
    kg.add_relation("Hub", "near", "Quill", "c1")
    reader = HFReader(tiny_llama(tok, {"Q": 9.0}), tok, mode="generate", max_new_tokens=4)
    rag = ReMindRAG(kg, reader, HashingEmbedder(256))
    with pytest.raises(LLMProtocolError, match="judge: no usable reply after 3 attempts"):
        rag.query("Where is Hub?")
    assert rag.meter.calls == 3


def test_from_pretrained_loads_a_local_directory(tok, tmp_path):
    tiny_llama(tok).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    reader = HFReader.from_pretrained(str(tmp_path), mode="generate", max_new_tokens=3)
    out = reader.complete(MSG)
    assert out.completion_tokens <= 3 and out.prompt_tokens == len(reader.render(MSG).encode()) + 1


def test_bad_arguments_raise(tok):
    model = tiny_llama(tok)
    with pytest.raises(ValueError, match="mode"):
        HFReader(model, tok, mode="sample")
    with pytest.raises(ValueError, match="max_new_tokens"):
        HFReader(model, tok, max_new_tokens=0)
    with pytest.raises(TypeError, match="causal LM"):
        HFReader(object(), tok)
    with pytest.raises(TypeError, match="messages"):
        HFReader(model, tok).complete([])
