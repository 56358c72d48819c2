"""Small-scale reproductions of the eff-graph papers' claims (``graph.imgda``, ``graph.remindrag``)."""
