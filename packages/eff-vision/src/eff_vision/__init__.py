"""eff-vision: Efficient vision methods: compression and restoration (Pan-LUT, MoRIC, LASQ, tensor compression, filter fingerprinting), adaptation (RobIA, LCoTTA, SVIP, RankMatch, FedPhoenix) and representations (HAWAII, ComBo, CLIC).

Modules (import them directly; this package imports nothing heavy on its own):

- ``eff_vision.panlut`` — Pan-LUT learnable look-up tables for pan-sharpening (network: reconstruction).
- ``eff_vision.moric`` — MoRIC region-based implicit codec and adaptive chain coding (our design).
- ``eff_vision.lasq`` — LASQ luminance prior for low-light enhancement (+ a smoke-scale student).
- ``eff_vision.tensor_compress`` — data-informed Tucker-2 / CPD compression of conv layers.
- ``eff_vision.fingerprint`` — fine-tuning-resistant filter-frequency fingerprints (our construction).
- ``eff_vision.robia``, ``eff_vision.lcotta`` (with the TTA baselines in ``eff_vision.tta``),
  ``eff_vision.svip``, ``eff_vision.rankmatch``, ``eff_vision.fedphoenix`` — adaptation under shift.
- ``eff_vision.data`` and ``eff_vision.metrics`` — seeded generators and metrics shared by the methods.
"""

__all__: list[str] = []
