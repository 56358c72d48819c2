"""eff-shared: the core of eff (CLI, reproduction harness, reports, seeding, federated runtime).

The torch helpers live in :mod:`eff_shared.torch` and the Flower bridge in
:mod:`eff_shared.federated.flower`; neither is imported here, so the core stays torch- and flwr-free.
"""

from eff_shared.errors import EffError, ReproductionError
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim
from eff_shared.seeding import derive_seed, make_rng, seed_everything

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
