"""Small-scale reproductions of eff-games' papers (registered under ``eff.reproductions``)."""
