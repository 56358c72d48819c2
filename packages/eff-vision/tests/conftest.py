"""eff-vision test settings and cached fixtures.

Threads: the root ``conftest.py`` pins BLAS (threadpoolctl) and torch to one thread; this file pins
torch again at import so the package's tests stay single-threaded even when run on their own (CI
runs them with ``-c <root pyproject>``, which loads the root conftest as well).

Expensive objects (a trained digits CNN, a trained Pan-LUT, encoded MoRIC streams) are built once per
session and shared; tests must not mutate them (copy first).
"""

from __future__ import annotations

import pytest
import torch
from threadpoolctl import threadpool_limits

torch.set_num_threads(1)
threadpool_limits(1)


@pytest.fixture(scope="session")
def digits_cnn():
    """The tensor-compression reproduction's digits CNN (12 epochs, seed 0) and its data."""
    from eff_vision.reproduce.tensor_compress import TensorCompressReproConfig, train_digits_cnn

    return train_digits_cnn(TensorCompressReproConfig(epochs=12), 0)
