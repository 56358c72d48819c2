"""eff-kernels: Low-bit attention and quantization kernels (SageAttention INT8/FP8/NVFP4 with SageBwd, LRQK, ParetoQ) as PyTorch references and Triton kernels.

- :mod:`eff_kernels.attention` — ``sage_attention`` (drop-in for ``F.scaled_dot_product_attention``),
  ``sage_attention3`` (NVFP4), SageBwd autograd, ``patch_sdpa``, ``register_transformers``;
- :mod:`eff_kernels.lrqk` — LRQK low-rank Q/K selection with a hit/miss KV store, ``enable_lrqk``;
- :mod:`eff_kernels.paretoq` — ParetoQ 1/1.58/2/3/4-bit QAT: ``quantize_``, ``convert_``;
- :mod:`eff_kernels.quant` — INT8 / FP8 / NVFP4 / MXFP4 primitives.
"""

from importlib.metadata import version as _version

__version__ = _version("eff-kernels")

from eff_kernels.attention import patch_sdpa, register_transformers, sage_attention, sage_attention3
from eff_kernels.lrqk import LRQKConfig, enable_lrqk
from eff_kernels.paretoq import (
    PackedConv2d,
    PackedLinear,
    ParetoQConfig,
    QATConv2d,
    QATLinear,
    convert_,
    quantize_,
)

__all__ = [
    "LRQKConfig",
    "PackedConv2d",
    "PackedLinear",
    "ParetoQConfig",
    "QATConv2d",
    "QATLinear",
    "convert_",
    "enable_lrqk",
    "patch_sdpa",
    "quantize_",
    "register_transformers",
    "sage_attention",
    "sage_attention3",
]
