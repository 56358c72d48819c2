"""What the eff-theory modules share at run time: the ``RngLike`` type of their seed and generator
arguments, and BLAS pinned to a number of threads (through threadpoolctl: eff-theory is torch-free,
so ``eff_shared.torch.threads`` does not apply). The argument checks are ``eff_shared.errors``'."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["RngLike", "blas_threads"]

RngLike = int | np.random.Generator | None


def blas_threads(n: int = 1) -> Any:
    """``with blas_threads(1): ...``: numpy's BLAS (and OpenMP) at ``n`` threads inside the block,
    restored after. On small shared machines threads slow these loops down, and one thread keeps
    the numbers independent of the machine."""
    from threadpoolctl import threadpool_limits  # lazily: the CLI's start-up imports this module

    return threadpool_limits(n)
