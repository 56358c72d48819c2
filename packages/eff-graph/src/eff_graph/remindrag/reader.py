"""``ScriptedReader``: the deterministic local scorer that stands in for the LLM in tests and in the
reproduction. It replies in the same text format a real LLM must use (```` ```cot-ans ```` blocks), so
ReMindRAG parses its replies exactly as a real model's.

Its "reading" is literal. It knows each question's relation chain (start entity, relation phrases) and
resolves the chain by regex over the texts of the collected chunks: hop i is resolved when some chunk
contains ``"<entity_i> <relation_i> <X>"``. Per task:

* ``judge`` — "yes" iff the chain resolves; ``answer`` — the resolved final entity, else "unknown";
* ``next_node`` — (1) the neighbour that *is* the deepest resolved entity, or, standing on it, the
  neighbour whose relation contains the needed phrase (exploration toward the answer); (2) otherwise the
  neighbour with the highest edge weight ``w = α·h_u·h_v + (1 − α)·q̂·e`` (the embedding similarity the
  prompt shows and the official ``find_next_node_prompt`` tells the LLM to weigh; first of equals). Its
  only dependence on the wording is through the memory term ``q̂·e``, so without memory (naive
  traversal) a reworded question is traversed exactly as the original from the same seeds; (3) with no
  neighbour left
  (exploitation): return to the deepest resolved entity if it has unexplored edges, else to the anchor
  of the chunk that named it, else read an unread chunk of a visited anchor, else return to the latest
  visited node with unexplored edges;
* ``memorize`` — the chunks that resolved hops and the traversed edges of the resolved chain;
* ``summarize`` — the chunk text itself; ``need_rag`` — "yes".

It bills one call and ``len(prompt.split())`` prompt tokens (whitespace tokens over all messages).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from eff_graph.remindrag.llm import Completion, whitespace_tokens

__all__ = ["ScriptedReader", "resolve_chain"]


def resolve_chain(
    start: str, relations: tuple[str, ...], summaries: dict[str, str]
) -> tuple[list[str], list[str]]:
    """``(entities, chunk ids)`` of the longest resolved prefix of the chain (chunks in given order)."""
    chain, used = [start], []
    for rel in relations:
        pattern = re.compile(rf"\b{re.escape(chain[-1])} {re.escape(rel)} (\w+)")
        for cid, text in summaries.items():
            m = pattern.search(text)
            if m:
                chain.append(m.group(1))
                used.append(cid)
                break
        else:
            break
    return chain, used


def _block(text: str, reasoning: str) -> str:
    return f"{reasoning}\n```cot-ans\n{text}\n```"


class ScriptedReader:
    """Deterministic stand-in for the LLM (module docstring). ``questions``: objects with ``text``,
    ``start`` and ``relations`` (e.g. :class:`eff_graph.data.Question`)."""

    def __init__(self, questions: Iterable[Any]) -> None:
        self.chains: dict[str, tuple[str, tuple[str, ...]]] = {}
        for q in questions:
            if not all(hasattr(q, a) for a in ("text", "start", "relations")):
                raise TypeError("questions must have text, start and relations attributes")
            self.chains[q.text] = (q.start, tuple(q.relations))

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        task: str | None = None,
        context: dict[str, Any] | None = None,
        **kw: Any,
    ) -> Completion:
        if task is None or context is None:
            raise ValueError(
                "ScriptedReader needs task= and context= (it reads no free-form prompt)"
            )
        text = self._reply(task, context)
        return Completion(text, whitespace_tokens(messages), len(text.split()))

    def _chain(self, context: dict[str, Any]) -> tuple[str, tuple[str, ...], list[str], list[str]]:
        question = context["question"]
        if question not in self.chains:
            raise ValueError(f"ScriptedReader does not know the question {question!r}")
        start, relations = self.chains[question]
        entities, used = resolve_chain(start, relations, context["summaries"])
        return start, relations, entities, used

    def _reply(self, task: str, context: dict[str, Any]) -> str:
        if task == "need_rag":
            return _block("yes", "The question asks about facts in the documents.")
        if task == "summarize":
            return context["chunk_text"]
        _, relations, chain, used = self._chain(context)
        done = len(chain) == len(relations) + 1
        if task == "judge":
            return _block("yes" if done else "no", f"Resolved chain: {' -> '.join(chain)}.")
        if task == "answer":
            return _block(
                chain[-1] if done else "unknown", f"Resolved chain: {' -> '.join(chain)}."
            )
        if task == "memorize":
            pairs = {(a, b, r) for a, b, r in zip(chain, chain[1:], relations, strict=False)}
            edges = [
                p["id"]
                for p in context["path"]
                if p["kind"] == "relation"
                and (
                    (p["frm"], p["to"], p["doc"]) in pairs or (p["to"], p["frm"], p["doc"]) in pairs
                )
            ]
            return _block(json.dumps({"edges": edges, "chunks": used}), "Useful evidence.")
        if task == "next_node":
            return _block(self._next(context, chain, relations, used), "Choosing the next node.")
        raise ValueError(f"ScriptedReader has no reply for task {task!r}")

    @staticmethod
    def _next(
        context: dict[str, Any], chain: list[str], relations: tuple[str, ...], used: list[str]
    ) -> str:
        deepest = chain[-1]
        need = relations[len(chain) - 1] if len(chain) <= len(relations) else None
        current, cands = context["current"], context["candidates"]
        for c in cands:
            if c["to"] == deepest:
                return f"entity:{c['to']}"
        if current == deepest and need is not None:
            for c in cands:
                if need in c["relation"]:
                    return f"entity:{c['to']}"
        if cands:
            best = max(cands, key=lambda c: c["weight"])  # edge weight w; first of equals
            return f"entity:{best['to']}"
        out = context["out_degree"]
        if out.get(deepest, 0) > 0 and current != deepest:
            return f"entity:{deepest}"
        if used:  # the deepest entity was read in this chunk: go back to the chunk's anchor
            anchor = f"anchor-{used[-1]}"
            if out.get(anchor, 0) > 0 and current != anchor:
                return f"entity:{anchor}"
        if context["unread_anchor_chunks"]:
            return f"chunk:{context['unread_anchor_chunks'][0]}"
        for node in reversed([*context["entities"], *context["history"]]):
            if node and out.get(node, 0) > 0:
                return f"entity:{node}"
        return f"entity:{context['entities'][0]}"
