"""Seam: eff-graph's ReMindRAG with a Hugging Face causal LM as its LLM (``HFReader``, extra
``eff-graph[hf]``), offline: a tiny ``LlamaForCausalLM`` built from a config and the byte-level
tokenizer of ``eff_graph.remindrag.byte_level_tokenizer`` (nothing from the hub).

A random tiny model makes arbitrary choices, so the traversal is pinned by *forcing* the model: its
``lm_head`` is replaced by a zero-weight Linear whose bias favours a few bytes. Every position then
has the same next-byte distribution, and ``HFReader``'s scoring (mean log-probability per token)
picks the option whose bytes carry the most bias:

* ``n`` +3 → ``no`` beats ``yes``: the judge never finds the evidence sufficient, so the traversal
  runs to ``max_jumps`` = 2, and ``memorize`` marks nothing useful;
* ``Q`` +10 (model "Q") or ``X`` +10 (model "X") → from ``Hub`` the reader walks to ``Quill`` or to
  ``Xeme``; from ``Quill`` the neighbour ``Pond`` (one ``n``: 6/11 bias per byte) beats the anchors
  (``entity:anchor-c1``: 6/16); ``Xeme``'s only new neighbour is its anchor;
* a newline +12 is the greedy argmax everywhere, so the answer (cut at the first newline) is empty.

If the reader ignored the model's logits, scored the wrong tokens, or ReMindRAG misparsed its
replies, the two models would not walk the two known paths.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from eff_graph.remindrag import (
    HashingEmbedder,
    HFReader,
    KnowledgeGraph,
    NaiveKGTraversal,
    ReMindRAG,
    byte_level_tokenizer,
)

QUESTION = "Where is Hub?"


def tiny_llama(tok, bias: dict[str, float] | None = None) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    if bias is not None:
        head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=True)
        with torch.no_grad():
            head.weight.zero_()
            head.bias.zero_()
            for char, value in bias.items():
                (token,) = tok(char, add_special_tokens=False)["input_ids"]
                head.bias[token] = value
        model.lm_head = head
    return model


def hub_graph() -> KnowledgeGraph:
    kg = KnowledgeGraph()
    for cid, (s, o) in {
        "c1": ("Hub", "Quill"),
        "c2": ("Hub", "Xeme"),
        "c3": ("Quill", "Pond"),
    }.items():
        kg.add_chunk(cid, f"{s} is near {o}.")
        kg.add_relation(s, "near", o, cid)
    return kg


class Recorder:
    """Passes calls through to the reader and keeps what ReMindRAG sent and got back."""

    def __init__(self, reader: HFReader) -> None:
        self.reader, self.calls = reader, []

    def complete(self, messages, **kw):
        out = self.reader.complete(messages, **kw)
        self.calls.append((kw.get("task"), messages, out))
        return out


FORCED = {"\n": 12.0, "n": 3.0}
EXPECTED_PATH = {
    "Q": ["Hub|near|Quill", "Quill|near|Pond"],
    "X": ["Hub|near|Xeme", "Xeme|mentioned in|anchor-c2"],
}
TASKS = ["judge", "next_node", "judge", "next_node", "judge", "memorize", "answer"]


@pytest.mark.parametrize("letter", ["Q", "X"])
def test_forced_model_walks_a_known_path_and_calls_are_counted(letter):
    tok = byte_level_tokenizer()
    rec = Recorder(HFReader(tiny_llama(tok, {**FORCED, letter: 10.0}), tok, max_new_tokens=16))
    rag = ReMindRAG(hub_graph(), rec, HashingEmbedder(4096), seeds=1, max_jumps=2)
    r = rag.query(QUESTION)
    print(letter, r.seeds, [p["id"] for p in r.path], r.llm_calls, r.prompt_tokens)

    assert r.seeds == ["Hub"]
    assert [p["id"] for p in r.path] == EXPECTED_PATH[letter]
    assert r.jumps == 2 and not r.sufficient and r.answer == ""
    assert r.enhanced == [] and r.punished == EXPECTED_PATH[letter]  # memorize: nothing useful
    # ReMindRAG's accounting (RAGResult and its UsageMeter) = the calls the reader really served.
    assert [task for task, _, _ in rec.calls] == TASKS
    assert r.llm_calls == rag.meter.calls == len(TASKS)
    # Prompt tokens are the reader's tokenizer count: one token per UTF-8 byte plus <s>.
    rendered = [rec.reader.render(messages) for _, messages, _ in rec.calls]
    assert r.prompt_tokens == sum(len(p.encode("utf-8")) + 1 for p in rendered)
    assert r.completion_tokens == sum(out.completion_tokens for _, _, out in rec.calls)
    # The next_node replies name the forced neighbour, in ReMindRAG's reply format.
    first_hop = EXPECTED_PATH[letter][0].split("|")[-1]
    assert rec.calls[1][2].text == f"```cot-ans\nentity:{first_hop}\n```"

    again = rag.query(QUESTION)  # nothing was memorised: the same walk, counted per query
    assert [p["id"] for p in again.path] == EXPECTED_PATH[letter]
    assert again.llm_calls == len(TASKS) and rag.meter.calls == 2 * len(TASKS)
    naive = NaiveKGTraversal(hub_graph(), rec.reader, HashingEmbedder(4096), seeds=1, max_jumps=2)
    n = naive.query(QUESTION)
    assert [p["id"] for p in n.path] == EXPECTED_PATH[letter] and n.llm_calls == len(TASKS) - 1


def test_untrained_model_runs_end_to_end():
    tok = byte_level_tokenizer()
    rag = ReMindRAG(
        hub_graph(), HFReader(tiny_llama(tok), tok, max_new_tokens=8), HashingEmbedder(4096),
        seeds=1, max_jumps=2,
    )  # fmt: skip
    r = rag.query(QUESTION)
    assert r.llm_calls == rag.meter.calls >= 2 and r.prompt_tokens > 0
    assert isinstance(r.answer, str)
