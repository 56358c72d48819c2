"""eff-games: A vectorised extensive-form game engine with RTCFR+ (last-iterate convergence) and the CFR family; numpy/scipy with compiled numba kernels, no torch.

RTCFR+ is from Meng et al., "Efficient Last-Iterate Convergence in Solving Extensive-Form Games"
(NeurIPS 2025). Games are built once into flattened sequence-form arrays (:mod:`eff_games.efg`);
solvers use OpenSpiel's vocabulary. Exploitability = NashConv/2, OpenSpiel's convention.
"""

from importlib.metadata import version as _version

__version__ = _version("eff-games")

from eff_games.cfr import (
    CFRPlusSolver,
    CFRSolver,
    DCFRConfig,
    DCFRSolver,
    MMDConfig,
    MMDSolver,
    PCFRPlusSolver,
)
from eff_games.efg import EFG, Treeplex, build_efg
from eff_games.games import from_openspiel, load_game
from eff_games.metrics import best_response_values, exploitability, nash_conv
from eff_games.policy import TabularPolicy, uniform_policy
from eff_games.rtcfr import RTCFRConfig, RTCFRPlus
from eff_games.solve import ALGORITHMS, SolveResult, compare, solve

__all__: list[str] = [
    "ALGORITHMS",
    "EFG",
    "CFRPlusSolver",
    "CFRSolver",
    "DCFRConfig",
    "DCFRSolver",
    "MMDConfig",
    "MMDSolver",
    "PCFRPlusSolver",
    "RTCFRConfig",
    "RTCFRPlus",
    "SolveResult",
    "TabularPolicy",
    "Treeplex",
    "best_response_values",
    "build_efg",
    "compare",
    "exploitability",
    "from_openspiel",
    "load_game",
    "nash_conv",
    "solve",
    "uniform_policy",
]
