"""Test-wide settings for every package of the workspace.

The machines are small and shared: BLAS and torch run single-threaded in tests (measured: an
unpinned 150x150 QR ran 60x slower under load); parallelism comes from ``pytest -n 2`` instead.
"""

import importlib.util
import os

import pytest

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("EFF_QUIET", "1")


def pytest_configure(config):
    config.pluginmanager.register(_XdistGroupSuffix(), "eff-xdist-group-suffix")
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    # Two Ray-backed Flower simulations started at once on one machine interfere (the second
    # one's results came out wrong under load): keep every `flower` test on one xdist worker
    # (ci.py runs pytest with `--dist loadgroup`).
    for item in items:
        if item.get_closest_marker("flower") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))


class _XdistGroupSuffix:
    """``--dist loadgroup`` under pytest 9: xdist (3.8) marks a test's group by appending
    ``@group`` to ``item._nodeid``, which pytest 9 no longer reads (the id lives in ``item._id``),
    so every group was silently spread over the workers (the Ray simulations ran side by side, the
    LLM pipeline's module fixture was built on both workers). After xdist's hook, give the item
    the id xdist meant; a no-op where xdist's own suffix took effect."""

    @staticmethod
    def _groups(item):
        return sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}
        )  # fmt: skip

    @pytest.hookimpl(trylast=True)  # after xdist's own (ineffective) suffix
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):
            return
        from _pytest.nodeid import NodeId

        for item in items:
            groups = self._groups(item)
            if groups and "@" not in item.nodeid and hasattr(item, "_id"):
                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")
