"""The federated runtime shared by eff-llm (FedSVD, YOCO) and eff-vision (FedPhoenix).

Framework-free: partitioners, the client/aggregator protocol, FedAvg and a deterministic
in-process runner. The Flower bridge lives in :mod:`eff_shared.federated.flower` (extra ``flower``).
"""

from eff_shared.federated.partition import dirichlet_partition, iid_partition
from eff_shared.federated.runner import (
    Aggregator,
    ClientUpdate,
    CommRecord,
    FedAvg,
    InProcessRunner,
    RoundRecord,
    RunResult,
    copy_state,
    state_nbytes,
    weighted_mean,
)

__all__ = [
    "Aggregator",
    "ClientUpdate",
    "CommRecord",
    "FedAvg",
    "InProcessRunner",
    "RoundRecord",
    "RunResult",
    "copy_state",
    "dirichlet_partition",
    "iid_partition",
    "state_nbytes",
    "weighted_mean",
]
