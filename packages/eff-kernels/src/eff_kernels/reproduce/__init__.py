"""Small-scale reproductions of the eff-kernels papers' claims (``eff reproduce kernels``)."""

from __future__ import annotations

from eff_shared.reproduce import Claim

__all__ = ["not_reproduced"]


def not_reproduced(claims: list[Claim]) -> list[str]:
    """A note listing the claims that failed, with their measured values (empty when all hold)."""
    failed = [c for c in claims if not c.passed]
    if not failed:
        return []
    return [
        "not reproduced: "
        + "; ".join(f"{c.text} = {c.measured:.4g} (needs {c.op} {c.threshold:g})" for c in failed)
    ]
