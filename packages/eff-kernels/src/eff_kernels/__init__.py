"""eff-kernels: Low-bit attention and quantization kernels (SageAttention INT8/FP8/NVFP4 with SageBwd, LRQK, ParetoQ) as PyTorch references and Triton kernels."""

__all__: list[str] = []
