"""Small-scale reproductions of the eff-rl papers' claims."""
