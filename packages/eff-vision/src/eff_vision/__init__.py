"""eff-vision: Efficient vision methods: compression and restoration (Pan-LUT, MoRIC, LASQ, tensor compression, filter fingerprinting), adaptation (RobIA, LCoTTA, SVIP, RankMatch, FedPhoenix) and representations (HAWAII, ComBo, CLIC)."""

__all__: list[str] = []
