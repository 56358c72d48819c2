"""Small-scale reproductions of the eff-llm papers' claims (one module per method)."""
