"""Small-scale reproductions of the eff-theory papers' claims (one module per method)."""
