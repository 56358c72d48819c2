"""eff-shared: the core of eff (CLI, reproduction harness, reports, seeding, federated runtime).

The torch helpers live in :mod:`eff_shared.torch` and the Flower bridge in
:mod:`eff_shared.federated.flower`; neither is imported here, so the core stays torch- and flwr-free.
"""

from importlib.metadata import version as _version

__version__ = _version("eff-shared")

from eff_shared.errors import EffError, ReproductionError
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim

__all__ = [
    "Claim",
    "EffError",
    "Mode",
    "ReproductionError",
    "Result",
    "claim_seeds",
    "derive_seed",
    "make_rng",
    "paper_claim",
    "seed_everything",
]


def __getattr__(name: str):
    # The seeding helpers need numpy; importing it lazily keeps `eff --help` fast.
    if name in ("derive_seed", "make_rng", "seed_everything"):
        from eff_shared import seeding

        return getattr(seeding, name)
    raise AttributeError(f"module 'eff_shared' has no attribute {name!r}")
