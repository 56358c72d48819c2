"""ReMindRAG's knowledge graph store (networkx + numpy; saved as JSON + npz, no chromadb).

Layout (official ``database/chromaDB.py``): **entities**; one **anchor** entity ``anchor-<chunk_id>``
per chunk holding the chunk title (its embedding is the chunk text's, as upstream); **chunks**.
**Relation** edges are undirected entity–entity edges (an extracted triple, document = the relation
text) plus entity–anchor edges for every entity mentioned in a chunk; one **connection** edge links
each anchor to its chunk. Every relation and connection edge stores a **memory vector** ``e ∈ R^d``
(``edge_memory``; zeros until something is memorised). Edge ids are unique: ``s|rel|o`` for a triple
(upstream's ``"{s}_{o}"`` collides when two relations link the same ordered pair),
``e|mentioned in|anchor-c`` and ``anchor-c|chunk|c``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from eff_graph.remindrag.embed import Embedder, check_embeddings
from eff_shared.errors import check_type

__all__ = ["EdgeView", "KnowledgeGraph"]

FORMAT_VERSION = 1
ANCHOR = "anchor-"


@dataclass(frozen=True)
class EdgeView:
    """An edge seen from ``frm``: ``kind`` is ``"relation"`` or ``"connection"`` (``to`` is then a
    chunk id)."""

    id: str
    kind: str
    frm: str
    to: str
    doc: str


def _check_name(kind: str, name: Any, *, anchor_ok: bool = False) -> str:
    check_type(kind, name, str)
    name = name.strip()
    if not name:
        raise ValueError(f"{kind} must be a non-empty string")
    bad = [c for c in (":", "|", "\n") if c in name]
    if bad:
        raise ValueError(
            f"{kind} {name!r} must not contain {bad[0]!r} (reserved in ids and prompts)"
        )
    if not anchor_ok and name.startswith(ANCHOR):
        raise ValueError(f"{kind} {name!r} must not start with {ANCHOR!r} (reserved for anchors)")
    return name


class KnowledgeGraph:
    """Entities, anchors and chunks with relation/connection edges and per-edge memory vectors.

    With an ``embedder``, :meth:`add_entity` merges a new entity into an existing one whose embedding
    cosine exceeds ``synonym_threshold`` (0.7, as upstream); without one, names are kept as given.
    Node embeddings are computed in batch by :meth:`embed` (``ReMindRAG`` calls it).
    """

    def __init__(self, embedder: Embedder | None = None, synonym_threshold: float = 0.7) -> None:
        check_type("synonym_threshold", synonym_threshold, (int, float))
        if not -1 <= synonym_threshold <= 1:
            raise ValueError(f"synonym_threshold must lie in [-1, 1], got {synonym_threshold!r}")
        self.embedder = embedder
        self.synonym_threshold = float(synonym_threshold)
        self.graph = nx.MultiGraph()  # entity and anchor nodes, relation edges keyed by edge id
        self.chunks: dict[str, dict[str, Any]] = {}  # chunk id -> {"text", "title", "tokens"}
        self.connections: dict[str, EdgeView] = {}  # anchor -> its connection edge
        self.edges: dict[str, EdgeView] = {}  # edge id -> edge as added (frm = subject)
        self.edge_memory: dict[str, np.ndarray] = {}
        self.node_embedding: dict[str, np.ndarray] = {}  # entities and anchors
        self.chunk_embedding: dict[str, np.ndarray] = {}
        self.dim: int | None = None
        self._matrix: tuple[list[str], np.ndarray] | None = None

    # ---------------------------------------------------------------- building
    def add_chunk(self, chunk_id: str, text: str, title: str | None = None) -> None:
        """A chunk, its anchor entity ``anchor-<chunk_id>`` (document: ``title``) and their connection."""
        chunk_id = _check_name("chunk_id", chunk_id)
        check_type("text", text, str)
        if not text.strip():
            raise ValueError(f"chunk {chunk_id!r} has an empty text")
        if chunk_id in self.chunks:
            raise ValueError(f"chunk {chunk_id!r} already exists")
        title = text.strip()[:80] if title is None else title
        check_type("title", title, str)
        self.chunks[chunk_id] = {"text": text, "title": title, "tokens": len(text.split())}
        anchor = ANCHOR + chunk_id
        self.graph.add_node(anchor, kind="anchor", doc=title, chunk=chunk_id)
        edge = EdgeView(f"{anchor}|chunk|{chunk_id}", "connection", anchor, chunk_id, title)
        self.connections[anchor] = edge
        self.edges[edge.id] = edge
        self._matrix = None

    def add_entity(self, name: str, chunk_id: str | None = None) -> str:
        """Add (or find) an entity and return its id; with ``chunk_id``, link it to that chunk's anchor.

        With an embedder set, a new name whose embedding has cosine > ``synonym_threshold`` with an
        existing entity is merged into it (the existing id is returned)."""
        name = _check_name("entity name", name)
        if chunk_id is not None and chunk_id not in self.chunks:
            raise ValueError(f"unknown chunk_id {chunk_id!r}; add the chunk first")
        if name not in self.graph:
            merged = self._synonym(name)
            if merged is not None:
                name = merged
            else:
                self.graph.add_node(name, kind="entity", doc=name)
                self._matrix = None
        if chunk_id is not None:
            anchor = ANCHOR + chunk_id
            self._add_edge(name, "mentioned in", anchor, f"{name} is mentioned in chunk {chunk_id}")
        return name

    def add_relation(self, s: str, rel: str, o: str, chunk_id: str) -> str:
        """Relation ``s —rel→ o`` found in ``chunk_id`` (both entities are linked to the chunk's
        anchor); returns the unique edge id ``s|rel|o``."""
        rel = _check_name("relation", rel, anchor_ok=True)
        if chunk_id not in self.chunks:
            raise ValueError(f"unknown chunk_id {chunk_id!r}; add the chunk first")
        s_id, o_id = self.add_entity(s, chunk_id), self.add_entity(o, chunk_id)
        if s_id == o_id:
            raise ValueError(f"relation {s!r} {rel!r} {o!r} links an entity to itself")
        return self._add_edge(s_id, rel, o_id, rel)

    def _add_edge(self, u: str, rel: str, v: str, doc: str) -> str:
        edge_id = f"{u}|{rel}|{v}"
        if edge_id not in self.edges:
            self.graph.add_edge(u, v, key=edge_id)
            self.edges[edge_id] = EdgeView(edge_id, "relation", u, v, doc)
        return edge_id

    def _synonym(self, name: str) -> str | None:
        if self.embedder is None or not any(
            d["kind"] == "entity" for _, d in self.graph.nodes(data=True)
        ):
            return None
        names = [n for n, d in self.graph.nodes(data=True) if d["kind"] == "entity"]
        self.embed(self.embedder)
        vec = check_embeddings(
            self.embedder.encode([name]), 1, self.dim, type(self.embedder).__name__
        )
        mat = np.stack([self.node_embedding[n] for n in names])
        sims = mat @ vec[0]
        best = int(np.argmax(sims))
        return names[best] if sims[best] > self.synonym_threshold else None

    # ---------------------------------------------------------------- queries
    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    def kind(self, node: str) -> str:
        return self.graph.nodes[node]["kind"]

    def entity_nodes(self) -> list[str]:
        """Entities and anchors, in insertion order (the seed candidates)."""
        return list(self.graph.nodes)

    def relations(self, node: str) -> list[EdgeView]:
        """Relation edges at ``node`` (either direction), seen from ``node``, in insertion order."""
        out = []
        for _, other, key in self.graph.edges(node, keys=True):
            e = self.edges[key]
            out.append(EdgeView(key, "relation", node, other, e.doc))
        return out

    def connection(self, node: str) -> EdgeView | None:
        """The connection edge of an anchor (``None`` for other entities)."""
        return self.connections.get(node)

    def memory(self, edge_id: str) -> np.ndarray:
        if self.dim is None:
            raise RuntimeError("the graph has no embeddings yet; call embed(embedder) first")
        mem = self.edge_memory.get(edge_id)
        if mem is None:
            if edge_id not in self.edges:
                raise KeyError(f"unknown edge id {edge_id!r}")
            mem = self.edge_memory[edge_id] = np.zeros(self.dim)
        return mem

    def set_memory(self, edge_id: str, vector: np.ndarray) -> None:
        if edge_id not in self.edges:
            raise KeyError(f"unknown edge id {edge_id!r}")
        self.edge_memory[edge_id] = np.asarray(vector, dtype=np.float64)

    def embed(self, embedder: Embedder) -> None:
        """Embed every node and chunk that has no embedding yet, in one batch; fixes ``dim``."""
        todo_nodes = [n for n in self.graph.nodes if n not in self.node_embedding]
        todo_chunks = [c for c in self.chunks if c not in self.chunk_embedding]
        texts = [self._node_text(n) for n in todo_nodes] + [
            self.chunks[c]["text"] for c in todo_chunks
        ]
        if not texts:
            return
        vecs = check_embeddings(
            embedder.encode(texts), len(texts), self.dim, type(embedder).__name__
        )
        self.dim = vecs.shape[1]
        for n, v in zip(todo_nodes, vecs[: len(todo_nodes)], strict=True):
            self.node_embedding[n] = v
        for c, v in zip(todo_chunks, vecs[len(todo_nodes) :], strict=True):
            self.chunk_embedding[c] = v
        self._matrix = None

    def _node_text(self, node: str) -> str:
        data = self.graph.nodes[node]
        return self.chunks[data["chunk"]]["text"] if data["kind"] == "anchor" else node

    def node_matrix(self) -> tuple[list[str], np.ndarray]:
        """(ids, embeddings) of all entities and anchors, cached until the graph changes."""
        if self._matrix is None:
            ids = self.entity_nodes()
            self._matrix = (ids, np.stack([self.node_embedding[n] for n in ids]))
        return self._matrix

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> Path:
        """Write ``graph.json`` (nodes, chunks, edges, settings) and ``arrays.npz`` (node and chunk
        embeddings, edge memories) into the directory ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        nodes = [{"id": n, **d} for n, d in self.graph.nodes(data=True)]
        edges = [vars(e) for e in self.edges.values()]
        meta = {
            "format": FORMAT_VERSION,
            "dim": self.dim,
            "synonym_threshold": self.synonym_threshold,
            "nodes": nodes,
            "chunks": [{"id": c, **d} for c, d in self.chunks.items()],
            "edges": edges,
            "embedded_nodes": [n for n in self.graph.nodes if n in self.node_embedding],
            "embedded_chunks": [c for c in self.chunks if c in self.chunk_embedding],
            "memories": list(self.edge_memory),
        }
        (path / "graph.json").write_text(json.dumps(meta, indent=1))
        d = self.dim or 0
        np.savez(
            path / "arrays.npz",
            node_embedding=_stack([self.node_embedding[n] for n in meta["embedded_nodes"]], d),
            chunk_embedding=_stack([self.chunk_embedding[c] for c in meta["embedded_chunks"]], d),
            edge_memory=_stack([self.edge_memory[e] for e in meta["memories"]], d),
        )
        return path

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | None = None) -> KnowledgeGraph:
        """Read a graph written by :meth:`save` (memories and embeddings included)."""
        path = Path(path)
        meta = json.loads((path / "graph.json").read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported knowledge-graph format {meta.get('format')!r} in {path}")
        kg = cls(embedder, meta["synonym_threshold"])
        for c in meta["chunks"]:
            kg.chunks[c["id"]] = {"text": c["text"], "title": c["title"], "tokens": c["tokens"]}
        for n in meta["nodes"]:
            kg.graph.add_node(n["id"], **{k: v for k, v in n.items() if k != "id"})
        for e in meta["edges"]:
            edge = EdgeView(e["id"], e["kind"], e["frm"], e["to"], e["doc"])
            kg.edges[edge.id] = edge
            if edge.kind == "connection":
                kg.connections[edge.frm] = edge
            else:
                kg.graph.add_edge(edge.frm, edge.to, key=edge.id)
        kg.dim = meta["dim"]
        with np.load(path / "arrays.npz") as arrays:
            for n, v in zip(meta["embedded_nodes"], arrays["node_embedding"], strict=True):
                kg.node_embedding[n] = v.copy()
            for c, v in zip(meta["embedded_chunks"], arrays["chunk_embedding"], strict=True):
                kg.chunk_embedding[c] = v.copy()
            for e, v in zip(meta["memories"], arrays["edge_memory"], strict=True):
                kg.edge_memory[e] = v.copy()
        return kg


def _stack(vectors: list[np.ndarray], dim: int) -> np.ndarray:
    return np.stack(vectors) if vectors else np.zeros((0, dim))
