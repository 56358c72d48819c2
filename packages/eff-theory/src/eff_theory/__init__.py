"""eff-theory: Numerical-science methods as a numpy/scipy library: heavy-tailed RNNs, label-noise GD, quantized streaming PCA, SpAM selection, LoRA-ML, polynomial-network identifiability; no torch."""

__all__: list[str] = []
