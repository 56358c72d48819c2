"""LASQ: low-light enhancement by luminance-aware statistical quantification.

Paper: "LASQ: Unsupervised Hierarchical Learning for Illumination Enhancement" (NeurIPS 2025),
official code ``XYLGroup/LASQ`` (``models/Gamma_Diff.py``, ``models/decom.py``, ``models/unet.py``).

- :mod:`eff_vision.lasq.prior` — the training-free luminance prior (``LASQPrior``, ``partition``):
  the part the reproduction measures.
- :mod:`eff_vision.lasq.model` — the learned CTDN + conditional-DDPM student (``LASQModel``,
  ``LASQConfig``): CPU smoke scale only.
- :mod:`eff_vision.lasq.baselines` — automatic gamma, CLAHE, HE, gamma + CLAHE, MSRCR.
"""

from eff_vision.lasq.prior import LASQPrior, gamma_energy, partition

__all__ = ["LASQConfig", "LASQModel", "LASQPrior", "gamma_energy", "partition"]


def __getattr__(name: str):
    # the torch model is imported lazily so the numpy prior stays light
    if name in ("LASQConfig", "LASQModel"):
        from eff_vision.lasq import model

        return getattr(model, name)
    raise AttributeError(name)
