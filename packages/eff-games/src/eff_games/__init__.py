"""eff-games: A vectorised extensive-form game engine with RTCFR+ (last-iterate convergence) and the CFR family; numpy/scipy only, no torch."""

__all__: list[str] = []
