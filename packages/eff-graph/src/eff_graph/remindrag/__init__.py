"""ReMindRAG (REMINDRAG in the method map): LLM-guided knowledge-graph traversal for RAG with memory
replay in edge embeddings, plus its pluggable LLM and embedder interfaces.

Paper: "ReMindRAG: Low-Cost LLM-Guided Knowledge Graph Traversal for Efficient RAG", NeurIPS 2025,
arXiv 2510.13193; code ``kilgrims/ReMindRAG``. See :mod:`eff_graph.remindrag.core` for the algorithm,
the formulas and every code-vs-paper discrepancy. This subpackage needs neither torch nor
torch_geometric (only :class:`MiniLMEmbedder`, extra ``eff-graph[embed]``, and :class:`HFReader`, a
local transformers causal LM as the LLM, extra ``eff-graph[hf]``, import torch, and only when used).
"""

from eff_graph.remindrag.core import (
    NaiveKGTraversal,
    RAGResult,
    ReMindRAG,
    edge_weight,
    enhance_memory,
    memory_coefficient,
    parse_cot_ans,
    punish_memory,
)
from eff_graph.remindrag.embed import Embedder, HashingEmbedder, MiniLMEmbedder, check_embeddings
from eff_graph.remindrag.hf import HFReader, byte_level_tokenizer
from eff_graph.remindrag.kg import EdgeView, KnowledgeGraph
from eff_graph.remindrag.llm import (
    Completion,
    LLMClient,
    LLMProtocolError,
    OpenAICompatibleClient,
    UsageMeter,
)
from eff_graph.remindrag.reader import ScriptedReader, resolve_chain

__all__ = [
    "Completion",
    "EdgeView",
    "Embedder",
    "HFReader",
    "HashingEmbedder",
    "KnowledgeGraph",
    "LLMClient",
    "LLMProtocolError",
    "MiniLMEmbedder",
    "NaiveKGTraversal",
    "OpenAICompatibleClient",
    "RAGResult",
    "ReMindRAG",
    "ScriptedReader",
    "UsageMeter",
    "build_world_kg",
    "byte_level_tokenizer",
    "check_embeddings",
    "edge_weight",
    "enhance_memory",
    "memory_coefficient",
    "parse_cot_ans",
    "punish_memory",
    "resolve_chain",
]


def build_world_kg(chunks, triples) -> KnowledgeGraph:  # type: ignore[no-untyped-def]
    """A :class:`KnowledgeGraph` from :func:`eff_graph.data.multihop_world` output: every chunk, and
    relation edges built directly from the facts (no LLM extraction, no synonym merging)."""
    kg = KnowledgeGraph()
    for c in chunks:
        kg.add_chunk(c.chunk_id, c.text, c.title)
    for t in triples:
        kg.add_relation(t.subject, t.relation, t.object, t.chunk_id)
    return kg
