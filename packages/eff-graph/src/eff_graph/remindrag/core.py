"""ReMindRAG: LLM-guided knowledge-graph traversal with memory replay in edge embeddings.

Paper: "ReMindRAG: Low-Cost LLM-Guided Knowledge Graph Traversal for Efficient RAG", NeurIPS 2025,
arXiv 2510.13193. Official code ``kilgrims/ReMindRAG`` (``generator/pathfinder.py``,
``database/chromaDB.py``, ``utils/math_functions.py``) read for reference; this is our own
implementation. The paper's equation numbers were not available to us; formulas are written out and
named after the official functions.

Edge weight for a query with unit embedding ``q̂`` (``get_entity_edges``)::

    w(u, v) = α·(h_u·h_v) + (1 − α)·(q̂·e_uv)          α = 0.1, h unit node embeddings

Query (``PathFinder.get_query_ans``):

1. seeds: the ``seeds`` (2) entities/anchors most similar to ``q̂``;
2. **memory replay** (``quick_query``): a DFS from each seed along every edge with ``w > θ``
   (``strong_threshold`` = 0.55) — no LLM call; an anchor seed brings its chunk;
3. a query-focused summary (1 call) for every collected chunk of ≥ ``chunk_summary_threshold``
   whitespace tokens; 4. ``judge`` (1 call, reply in a ```` ```cot-ans ```` block);
5. while not sufficient and ``jumps < max_jumps``: an unread chunk of the current node is read
   directly; otherwise ``next_node`` (1 call, ≤ 3 attempts) picks a new neighbour (**exploration**) or
   a visited node with unexplored edges (**exploitation**); then summary if needed and ``judge``.
   The prompt lists the current node's neighbours with their edge weights ``w`` (the official
   ``find_next_node_prompt`` asks the LLM to weigh "the edge weights of the nodes connected to the
   current node"), not a question–node similarity, which the official prompt does not show;
6. ``answer`` (1 call); unless ``force_do_rag``, a ``need_rag`` call comes first.

**Memorisation** (only when ``jumps > 0``): 1 call returns the useful edges and chunks; a DFS from the
seeds over the traversed path marks the edges on paths to useful chunks/edges as *confirmed*, every
other traversed edge as *punished*:

* enhance: ``e ← e + q̂·f(‖e‖)``, ``f(x) = (2/π)·cos(πx/2)`` (``edge_weight_coefficient``): the norm
  goes 0 → 2/π → ≈0.98 → 1 and never exceeds 1 (``f(x) ≤ 1 − x``);
* punish (intended): with ``s = q̂·e > 0``: ``e ← e − max(|f(s)|, s)·s·q̂``, so ``q̂·e`` drops to
  ``s·(1 − max(|f(s)|, s))``.

Code vs paper/spec (intended by default, release behind a flag):

* ``punish=True`` implements the intended punishment. The release computes the *scalar* ``s`` and
  tests ``(s·q̂ >= 0).all()``, true only when ``s == 0`` for embeddings of mixed sign, so punished edges
  never change (``punish=False``; with non-negative embeddings such as hashing counts the release
  check passes and it subtracts the scalar ``max(|f(s)|, s)·s`` from every coordinate instead).
* ``confirm="all"`` confirms every traversed edge on a path to a useful chunk/edge (as the method is
  described); the release's DFS confirms only the *first* useful outgoing edge of each node
  (``if not ans``), punishing later branches that also led to useful chunks (``confirm="first"``).
* Unique edge ids (``s|rel|o``); the graph lives in networkx + npz/json, not chromadb.
* An edge confirmed from both seeds is enhanced once per query (the release may enhance it twice).
* A guard stops a traversal after ``3·max_jumps + 3`` steps: returning to visited nodes costs no jump,
  so an LLM that keeps returning would loop forever in the release.
* Chunk size is measured in whitespace tokens (the release uses the LLM tokenizer).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from eff_graph.remindrag.embed import Embedder, check_embeddings
from eff_graph.remindrag.kg import ANCHOR, EdgeView, KnowledgeGraph
from eff_graph.remindrag.llm import LLMClient, LLMProtocolError, UsageMeter
from eff_shared.errors import check_choice, check_positive, check_type

__all__ = [
    "NaiveKGTraversal",
    "RAGResult",
    "ReMindRAG",
    "edge_weight",
    "enhance_memory",
    "memory_coefficient",
    "parse_cot_ans",
    "punish_memory",
]

MAX_ATTEMPTS = 3
_COT = re.compile(r"```cot-ans(.*?)```", re.DOTALL)


# ------------------------------------------------------------------------------------ maths
def memory_coefficient(norm: float) -> float:
    """``f(x) = (2/π)·cos(πx/2)`` (official ``edge_weight_coefficient``)."""
    return (2 / math.pi) * math.cos(math.pi * norm / 2)


def enhance_memory(e: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Confirmed edge: ``e + q̂·f(‖e‖)``."""
    return e + q * memory_coefficient(float(np.linalg.norm(e)))


def punish_memory(e: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Punished edge (intended rule): remove part of the query-direction component when ``s = q̂·e > 0``."""
    s = float(q @ e)
    if s <= 0:
        return e
    return e - max(abs(memory_coefficient(s)), s) * s * q


def edge_weight(
    h_u: np.ndarray, h_v: np.ndarray, q: np.ndarray, e: np.ndarray, alpha: float
) -> float:
    """``w = α·(h_u·h_v) + (1 − α)·(q̂·e)``."""
    return float(alpha * (h_u @ h_v) + (1 - alpha) * (q @ e))


def parse_cot_ans(text: str) -> str:
    """The content of the last ```` ```cot-ans ... ``` ```` block; ``ValueError`` if there is none."""
    matches = _COT.findall(text or "")
    if not matches:
        raise ValueError("no ```cot-ans``` block in the reply")
    return matches[-1].strip()


def _yes_no(text: str) -> bool:
    word = re.sub(r"[^a-z]", "", parse_cot_ans(text).lower())
    if word.startswith("yes"):
        return True
    if word.startswith("no"):
        return False
    raise ValueError("the ```cot-ans``` block must contain yes or no")


# ------------------------------------------------------------------------------------ results
@dataclass
class PathEdge:
    kind: str  # "relation" | "connection"
    id: str
    frm: str
    to: str
    doc: str

    def render(self) -> str:
        if self.kind == "connection":
            return f"from entity:{self.frm} to chunk:{self.to}"
        return (
            f"from entity:{self.frm} to entity:{self.to} with relation: {self.doc} [edge {self.id}]"
        )


@dataclass
class RAGResult:
    """Outcome and cost of one query. ``path``: traversed edges (dicts); ``replayed_edges``: edges
    collected by memory replay (no LLM); ``llm_calls``/``prompt_tokens``/``completion_tokens``: this
    query's usage (retries included); ``enhanced``/``punished``: ids of the edges whose memory was
    confirmed/punished (punished ids are listed even with ``punish=False``, which leaves them
    unchanged); ``seconds_excl_llm``: wall time spent outside the client."""

    answer: str
    chunks: list[str]
    path: list[dict[str, str]]
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    jumps: int
    replayed_edges: int
    seeds: list[str] = field(default_factory=list)
    explorations: int = 0
    exploitations: int = 0
    enhanced: list[str] = field(default_factory=list)
    punished: list[str] = field(default_factory=list)
    sufficient: bool = False
    seconds_excl_llm: float = 0.0


class _Retry(ValueError):
    """A reply that cannot be used; ``hint`` is sent back to the LLM."""


# ------------------------------------------------------------------------------------ prompts
def _fmt_chunks(summaries: dict[str, str]) -> str:
    return "\n".join(f"chunk:{c}: {s}" for c, s in summaries.items()) or "(none)"


def _fmt_edges(path: list[PathEdge]) -> str:
    return "\n".join(e.render() for e in path) or "(none)"


PROMPTS = {
    "need_rag": (
        "Decide whether answering needs a search of the document database.\n"
        "Question: {question}\nReply with your reasoning, then yes or no in a ```cot-ans``` block."
    ),
    "summarize": (
        "Summarise the new chunk for the question, using only its text.\nQuestion: {question}\n"
        "Entities visited: {entities}\nKnown chunks:\n{chunks}\nNew chunk {chunk_id}: {chunk_text}\n"
        "Output only the summary."
    ),
    "judge": (
        "You search a knowledge graph to answer a question. Decide whether the information collected "
        "so far is sufficient.\nQuestion: {question}\nEntities: {entities}\nEdges:\n{edges}\n"
        "Chunks:\n{chunks}\nReason step by step, then answer yes or no in a ```cot-ans``` block."
    ),
    "next_node": (
        "You search a knowledge graph to answer a question. Entities link to anchors "
        "(anchor-<id>), anchors link to chunks.\nQuestion: {question}\nCurrent node: {current}\n"
        "Visited entities: {entities}\nRead chunks: {chunk_ids}\nEdges traversed:\n{edges}\n"
        "Chunks:\n{chunks}\nNeighbours of the current node (new entities):\n{candidates}\n"
        "Anchors and their chunks: {anchors}\nVisit history: {history}\n"
        "Choose the next node: a neighbour (explore) or a visited node that still has unexplored "
        "edges (return to it). Reason, then give entity:<id> or chunk:<id> in a ```cot-ans``` block."
    ),
    "memorize": (
        "A knowledge-graph search has finished. Which edges and chunks were useful for the "
        "question?\nQuestion: {question}\nEdges traversed:\n{edges}\nChunks:\n{chunks}\n"
        'Reason, then give JSON {{"edges": [edge ids], "chunks": [chunk ids]}} in a ```cot-ans``` '
        "block."
    ),
    "answer": (
        "Answer the question from the retrieved knowledge only.\nQuestion: {question}\n"
        "Edges:\n{edges}\nChunks:\n{chunks}\nReason, then give the answer in a ```cot-ans``` block."
    ),
}


# ------------------------------------------------------------------------------------ method
class _State:
    """Traversal state of one query (``PathFinder``'s lists)."""

    def __init__(self, question: str, q: np.ndarray, seeds: list[str]) -> None:
        self.question, self.q, self.seeds = question, q, seeds
        self.entities: list[str] = list(seeds)
        self.chunks: list[str] = []
        self.summaries: dict[str, str] = {}
        self.path: list[PathEdge] = []
        self.history: list[str] = []

    def add_path(self, edge: EdgeView) -> None:
        if all(p.id != edge.id for p in self.path):
            self.path.append(PathEdge(edge.kind, edge.id, edge.frm, edge.to, edge.doc))


class ReMindRAG:
    """LLM-guided KG traversal with memory replay (module docstring; paper and code cited there).

    ``query(question)`` → :class:`RAGResult`. The graph's edge memories are updated in place when
    ``memorize`` is on; ``kg.save``/``KnowledgeGraph.load`` persist them.
    """

    def __init__(
        self,
        kg: KnowledgeGraph,
        llm: LLMClient,
        embedder: Embedder,
        *,
        alpha: float = 0.1,
        strong_threshold: float = 0.55,
        max_jumps: int = 10,
        seeds: int = 2,
        chunk_summary_threshold: int = 350,
        memorize: bool = True,
        punish: bool = True,
        force_do_rag: bool = True,
        confirm: Literal["all", "first"] = "all",
    ) -> None:
        check_type("kg", kg, KnowledgeGraph)
        if not hasattr(llm, "complete"):
            raise TypeError(f"llm must have a complete() method, got {type(llm).__name__}")
        if not hasattr(embedder, "encode"):
            raise TypeError(f"embedder must have an encode() method, got {type(embedder).__name__}")
        check_type("alpha", alpha, (int, float))
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
        check_type("strong_threshold", strong_threshold, (int, float))
        if not strong_threshold < 1:
            raise ValueError(
                f"strong_threshold must be < 1 (edge weights never exceed 1, so nothing would replay), "
                f"got {strong_threshold!r}"
            )
        check_positive("max_jumps", max_jumps, strict=False, integer=True)
        check_positive("seeds", seeds, integer=True)
        check_positive(
            "chunk_summary_threshold", chunk_summary_threshold, strict=False, integer=True
        )
        for name, flag in (
            ("memorize", memorize),
            ("punish", punish),
            ("force_do_rag", force_do_rag),
        ):
            check_type(name, flag, bool)
        check_choice("confirm", confirm, ("all", "first"))
        self.kg, self.embedder = kg, embedder
        self.meter = llm if isinstance(llm, UsageMeter) else UsageMeter(llm)
        self.alpha, self.strong_threshold = float(alpha), float(strong_threshold)
        self.max_jumps, self.n_seeds = max_jumps, seeds
        self.chunk_summary_threshold = chunk_summary_threshold
        self.memorize, self.punish, self.force_do_rag = memorize, punish, force_do_rag
        self.confirm = confirm
        self._llm_seconds = 0.0
        if len(kg):
            kg.embed(embedder)

    # ------------------------------------------------------------------ helpers
    def _embed_query(self, text: str) -> np.ndarray:
        vec = check_embeddings(
            self.embedder.encode([text]), 1, self.kg.dim, type(self.embedder).__name__
        )[0]
        return vec / np.linalg.norm(vec)

    def _h(self, node: str) -> np.ndarray:
        return self.kg.node_embedding[node]

    def weight(self, edge: EdgeView, q: np.ndarray) -> float:
        """``w(u, v)`` of an edge for query ``q`` (connection: anchor and chunk embeddings)."""
        h_v = self.kg.chunk_embedding[edge.to] if edge.kind == "connection" else self._h(edge.to)
        return edge_weight(self._h(edge.frm), h_v, q, self.kg.memory(edge.id), self.alpha)

    def _ask(self, task: str, state: _State, parse: Callable[[str], Any], **fmt: Any) -> Any:
        """One LLM step: render the prompt, call, parse; on an unusable reply send the reason back
        and retry (``MAX_ATTEMPTS`` calls in all), then raise :class:`LLMProtocolError`."""
        context = self._context(task, state, **fmt)
        prompt = PROMPTS[task].format(**self._render(state), **fmt)
        messages = [{"role": "user", "content": prompt}]
        last = ""
        for _ in range(MAX_ATTEMPTS):
            t0 = time.perf_counter()
            reply = self.meter.complete(messages, task=task, context=context)
            self._llm_seconds += time.perf_counter() - t0
            last = reply.text
            try:
                return parse(reply.text)
            except ValueError as exc:
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"That reply cannot be used: {exc}. Try again."},
                ]
        raise LLMProtocolError(
            f"{task}: no usable reply after {MAX_ATTEMPTS} attempts; last reply: {last[:300]!r}"
        )

    def _render(self, state: _State) -> dict[str, str]:
        return {
            "question": state.question,
            "entities": ", ".join(state.entities),
            "chunk_ids": ", ".join(state.chunks) or "(none)",
            "edges": _fmt_edges(state.path),
            "chunks": _fmt_chunks(state.summaries),
            "history": " -> ".join(h or "(chunk)" for h in state.history) or "(start)",
        }

    def _context(self, task: str, state: _State, **fmt: Any) -> dict[str, Any]:
        return {
            "task": task,
            "question": state.question,
            "entities": list(state.entities),
            "chunks": list(state.chunks),
            "summaries": dict(state.summaries),
            "path": [vars(p).copy() for p in state.path],
            "history": list(state.history),
            **fmt.pop("_context", {}),
        }

    def _out_degree(self, node: str, state: _State) -> int:
        n = sum(r.to not in state.entities for r in self.kg.relations(node))
        conn = self.kg.connection(node)
        return n + int(conn is not None and conn.to not in state.chunks)

    def _replay(self, q: np.ndarray, start: str) -> tuple[list[str], list[str], list[EdgeView]]:
        """``quick_query``: DFS from ``start`` along edges with ``w > θ`` (order as the recursive
        release: a node's connection first, then its relations, descending into each)."""
        entities, chunks, edges = [start], [], []

        def visit(node: str) -> Any:
            conn = self.kg.connection(node)
            if conn is not None and self.weight(conn, q) > self.strong_threshold:
                chunks.append(conn.to)
                edges.append(conn)
            for rel in self.kg.relations(node):
                if rel.to in entities:
                    continue
                if self.weight(rel, q) > self.strong_threshold:
                    entities.append(rel.to)
                    edges.append(rel)
                    yield rel.to

        stack = [visit(start)]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
            else:
                stack.append(visit(nxt))
        return entities, chunks, edges

    def _summary(self, cid: str, state: _State) -> str:
        chunk = self.kg.chunks[cid]
        if chunk["tokens"] < self.chunk_summary_threshold:
            return chunk["text"]

        def parse(text: str) -> str:
            if not text.strip():
                raise ValueError("the summary is empty")
            return text.strip()

        return self._ask(
            "summarize", state, parse, chunk_id=cid, chunk_text=chunk["text"],
            _context={"chunk_id": cid, "chunk_text": chunk["text"]},
        )  # fmt: skip

    def _read_chunk(self, cid: str, state: _State) -> None:
        state.chunks.append(cid)
        state.summaries[cid] = self._summary(cid, state)

    # ------------------------------------------------------------------ next node
    def _candidates(self, node: str, state: _State) -> list[EdgeView]:
        return [r for r in self.kg.relations(node) if r.to not in state.entities] if node else []

    def _next_node(self, current: str, cands: list[EdgeView], state: _State) -> tuple[str, str]:
        unread = [
            self.kg.graph.nodes[e]["chunk"]
            for e in state.entities
            if e.startswith(ANCHOR) and self.kg.graph.nodes[e]["chunk"] not in state.chunks
        ]
        out_degree = {e: self._out_degree(e, state) for e in state.entities}
        weights = {c.id: self.weight(c, state.q) for c in cands}
        cand_lines = "\n".join(
            f"entity:{c.to} via '{c.doc}' (edge weight {weights[c.id]:.3f})" for c in cands
        )
        anchors = [e for e in state.entities if e.startswith(ANCHOR)] + [
            c.to for c in cands if c.to.startswith(ANCHOR)
        ]
        anchor_lines = "; ".join(
            f"{a} -> chunk:{self.kg.graph.nodes[a]['chunk']} ({self.kg.graph.nodes[a]['doc']})"
            for a in anchors
        )
        by_target = {c.to: c for c in cands}

        def parse(text: str) -> tuple[str, str]:
            ans = parse_cot_ans(text).strip().strip("`'\" .")
            kind, sep, node = ans.partition(":")
            kind, node = kind.strip().lower(), node.strip()
            if not sep or kind not in ("entity", "chunk") or not node:
                raise ValueError(f"expected entity:<id> or chunk:<id>, got {ans!r}")
            if kind == "chunk":
                if node in state.chunks:
                    raise ValueError(f"chunk:{node} has been read already; select another node")
                if node not in unread:
                    raise ValueError(f"chunk:{node} is not reachable from a visited anchor")
                return "chunk", node
            if node in by_target or node in state.entities:
                return "entity", node
            raise ValueError(
                f"unknown node entity:{node}; choose a listed neighbour or visited node"
            )

        return self._ask(
            "next_node", state, parse, current=current or "(a chunk)",
            candidates=cand_lines or "(none)", anchors=anchor_lines or "(none)",
            _context={
                "current": current,
                "candidates": [
                    {
                        "to": c.to,
                        "id": c.id,
                        "relation": c.doc,
                        "weight": weights[c.id],
                    }
                    for c in cands
                ],
                "out_degree": out_degree,
                "unread_anchor_chunks": unread,
            },
        )  # fmt: skip

    # ------------------------------------------------------------------ query
    def query(self, question: str) -> RAGResult:
        """Answer ``question`` (module docstring, steps 1–6, then memorisation)."""
        check_type("question", question, str)
        if not question.strip():
            raise ValueError("question must be a non-empty string")
        if len(self.kg) == 0:
            raise RuntimeError("no data loaded")
        t_start = time.perf_counter()
        self._llm_seconds = 0.0
        calls0, prompt0, completion0 = self.meter.snapshot()
        self.kg.embed(self.embedder)
        q = self._embed_query(question)
        ids, mat = self.kg.node_matrix()
        order = np.argsort(-(mat @ q), kind="stable")[: self.n_seeds]
        seeds = [ids[i] for i in order]
        state = _State(question, q, seeds)
        result = RAGResult("", [], [], 0, 0, 0, 0, 0, seeds=seeds)

        if not self.force_do_rag and not self._ask("need_rag", state, _yes_no):
            answer = self._ask("answer", state, parse_cot_ans)
            return self._finish(result, state, answer, t_start, calls0, prompt0, completion0)

        for seed in seeds:  # memory replay
            entities, chunks, edges = self._replay(q, seed)
            for e in edges:
                if (e.kind == "relation" and e.to in state.entities) or (
                    e.kind == "connection" and e.to in state.chunks
                ):
                    continue
                state.add_path(e)
                result.replayed_edges += 1
            state.entities += [e for e in entities if e not in state.entities]
            state.chunks += [c for c in chunks if c not in state.chunks]
        for seed in seeds:  # an anchor seed brings its chunk
            conn = self.kg.connection(seed)
            if conn is not None and conn.to not in state.chunks:
                state.chunks.append(conn.to)
                state.add_path(conn)
        for cid in state.chunks:
            state.summaries[cid] = self._summary(cid, state)

        enough = self._ask("judge", state, _yes_no)
        current = state.entities[0]
        state.history.append(current)
        jumps = steps = 0
        while not enough:
            steps += 1
            if steps > 3 * self.max_jumps + 3:
                break
            cands = self._candidates(current, state)
            conn = self.kg.connection(current) if current else None
            if conn is not None and conn.to not in state.chunks:
                kind, node = "chunk", conn.to
                state.add_path(conn)
            elif sum(self._out_degree(e, state) for e in state.entities) == 0:
                break
            else:
                kind, node = self._next_node(current, cands, state)
                if kind == "chunk":
                    state.add_path(self.kg.connection(ANCHOR + node))  # type: ignore[arg-type]
                elif node not in state.entities:
                    state.add_path(next(c for c in cands if c.to == node))
            state.history.append(current)
            if kind == "chunk":
                jumps += 1
                result.explorations += 1
                current = ""
                self._read_chunk(node, state)
            else:
                if node in state.entities:
                    result.exploitations += 1
                else:
                    jumps += 1
                    result.explorations += 1
                    state.entities.append(node)
                current = node
            enough = self._ask("judge", state, _yes_no)
            if jumps >= self.max_jumps:
                break
        result.jumps, result.sufficient = jumps, enough

        if self.memorize and jumps > 0:
            useful = self._ask("memorize", state, _parse_useful)
            confirmed = self._confirmed(state, useful)
            for pe in confirmed:
                self.kg.set_memory(pe.id, enhance_memory(self.kg.memory(pe.id), q))
            punished = [pe for pe in state.path if pe.id not in {c.id for c in confirmed}]
            if self.punish:
                for pe in punished:
                    self.kg.set_memory(pe.id, punish_memory(self.kg.memory(pe.id), q))
            result.enhanced = [pe.id for pe in confirmed]
            result.punished = [pe.id for pe in punished]

        answer = self._ask("answer", state, parse_cot_ans)
        return self._finish(result, state, answer, t_start, calls0, prompt0, completion0)

    def _finish(
        self,
        result: RAGResult,
        state: _State,
        answer: str,
        t_start: float,
        c0: int,
        p0: int,
        k0: int,
    ) -> RAGResult:
        calls, prompt, completion = self.meter.snapshot()
        result.answer = answer
        result.chunks = list(state.chunks)
        result.path = [vars(p).copy() for p in state.path]
        result.llm_calls, result.prompt_tokens = calls - c0, prompt - p0
        result.completion_tokens = completion - k0
        result.seconds_excl_llm = time.perf_counter() - t_start - self._llm_seconds
        return result

    def _confirmed(self, state: _State, useful: dict[str, list[str]]) -> list[PathEdge]:
        """DFS from each seed over the traversed path (``get_update_dfs``): an edge is confirmed when it
        is useful itself or leads to a useful chunk/edge; ``confirm="first"`` keeps only the first such
        edge out of every node (release)."""
        edges, chunks = set(useful["edges"]), set(useful["chunks"])
        confirmed: dict[str, PathEdge] = {}
        for seed in state.seeds:
            viewed: set[str] = set()
            found: list[PathEdge] = []
            if self._confirm_dfs(seed, frozenset(), state.path, edges, chunks, viewed, found):
                for pe in found:
                    confirmed.setdefault(pe.id, pe)
        return list(confirmed.values())

    def _confirm_dfs(
        self,
        node: str,
        stack: frozenset[str],
        path: list[PathEdge],
        edges: set[str],
        chunks: set[str],
        viewed: set[str],
        found: list[PathEdge],
    ) -> bool:
        if node in viewed or node in stack:
            return False
        ans = False
        for pe in path:
            if pe.frm != node or pe.to in viewed:
                continue
            if pe.kind == "relation":
                sub = self._confirm_dfs(pe.to, stack | {node}, path, edges, chunks, viewed, found)
                hit = pe.id in edges or sub
            else:
                hit = pe.to in chunks
            if hit and not (ans and self.confirm == "first"):
                found.append(pe)
                ans = True
        viewed.add(node)
        return ans


def _parse_useful(text: str) -> dict[str, list[str]]:
    body = parse_cot_ans(text)
    body = re.sub(r"^json\s*", "", body.strip())
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the ```cot-ans``` block is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not {"edges", "chunks"} <= set(data):
        raise ValueError('expected a JSON object with keys "edges" and "chunks"')
    return {k: [str(v) for v in data[k]] for k in ("edges", "chunks")}


class NaiveKGTraversal(ReMindRAG):
    """The same LLM-guided traversal without memory (``memorize=False``): the baseline."""

    def __init__(self, kg: KnowledgeGraph, llm: LLMClient, embedder: Embedder, **kw: Any) -> None:
        if kw.pop("memorize", False):
            raise ValueError("NaiveKGTraversal never memorises; use ReMindRAG(memorize=True)")
        super().__init__(kg, llm, embedder, memorize=False, **kw)
