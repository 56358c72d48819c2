"""Test-wide settings for every package of the workspace.

The machines are small and shared: BLAS and torch run single-threaded in tests (measured: an
unpinned 150x150 QR ran 60x slower under load); parallelism comes from ``pytest -n 2`` instead.
"""

import importlib.util
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("EFF_QUIET", "1")


def pytest_configure(config):
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    # Two Ray-backed Flower simulations started at once on one machine interfere (the second
    # one's results came out wrong under load): keep every `flower` test on one xdist worker
    # (ci.py runs pytest with `--dist loadgroup`).
    import pytest

    for item in items:
        if item.get_closest_marker("flower") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))
