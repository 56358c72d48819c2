"""eff-graph: Graph learning methods on torch_geometric: ImGDA (class-imbalanced graph domain adaptation) and REMINDRAG (knowledge-graph RAG with memory replay).

Modules: :mod:`eff_graph.imgda` (ImGDA, NeurIPS 2025), :mod:`eff_graph.da` (graph domain-adaptation
baselines: source-only, class-balanced, DANN and UDAGCN GCNs), :mod:`eff_graph.remindrag` (ReMindRAG,
NeurIPS 2025, with its LLM and embedder interfaces), :mod:`eff_graph.data` (generated graphs and the
multi-hop QA world), :mod:`eff_graph.metrics`. The names below are imported lazily, so that
``import eff_graph`` and the ReMindRAG code stay free of the torch_geometric import cost.
"""

from __future__ import annotations

from importlib.metadata import version as _version

__version__ = _version("eff-graph")

import importlib
from typing import Any

_EXPORTS = {
    "ImGDA": "eff_graph.imgda",
    "ImGDAConfig": "eff_graph.imgda",
    "DualBranchEncoder": "eff_graph.imgda",
    "SourceOnlyGCN": "eff_graph.da",
    "ClassBalancedGCN": "eff_graph.da",
    "DANNGCN": "eff_graph.da",
    "UDAGCN": "eff_graph.da",
    "csbm_domain_pair": "eff_graph.data",
    "make_long_tailed": "eff_graph.data",
    "multihop_world": "eff_graph.data",
    "macro_f1": "eff_graph.metrics",
    "accuracy": "eff_graph.metrics",
    "per_class_recall": "eff_graph.metrics",
    "ReMindRAG": "eff_graph.remindrag",
    "NaiveKGTraversal": "eff_graph.remindrag",
    "KnowledgeGraph": "eff_graph.remindrag",
    "HashingEmbedder": "eff_graph.remindrag",
    "MiniLMEmbedder": "eff_graph.remindrag",
    "OpenAICompatibleClient": "eff_graph.remindrag",
    "ScriptedReader": "eff_graph.remindrag",
    "UsageMeter": "eff_graph.remindrag",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'eff_graph' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
