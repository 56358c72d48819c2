"""eff-graph: Graph learning methods on torch_geometric: ImGDA (class-imbalanced graph domain adaptation) and REMINDRAG (knowledge-graph RAG with memory replay)."""

__all__: list[str] = []
