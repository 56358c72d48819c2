"""Every Python block of every README runs, as a user would paste it.

Run: ``uv run pytest integration_tests/test_readme_blocks.py``. The blocks use public names only
(no ``eff_*._private`` module) and define everything they use, so a user can paste them.

Each ```python block is run on its own in a fresh interpreter, in an empty temporary folder, with
one BLAS/torch thread. A block that cannot run here (it needs a GPU, say) is marked on the line
before its fence with ``<!-- readme-test: skip REASON -->`` and shows up as skipped with that
reason; nothing else is skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = [
    ROOT / "README.md",
    ROOT / "shared" / "README.md",
    *sorted(ROOT.glob("packages/*/README.md")),
]
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s+(.+?)\s*-->")


def blocks() -> list:
    params = []
    for readme in READMES:
        lines = readme.read_text().splitlines()
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```python":
                start = i + 1
                end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
                code = "\n".join(lines[start:end]) + "\n"
                prev = lines[i - 1] if i else ""
                skip = SKIP.search(prev)
                rel = readme.relative_to(ROOT)
                marks = [pytest.mark.skip(reason=f"{rel}: {skip.group(1)}")] if skip else []
                params.append(pytest.param(code, id=f"{rel}:{start}", marks=marks))
                i = end
            i += 1
    return params


@pytest.mark.slow
@pytest.mark.parametrize("code", blocks())
def test_readme_python_block_runs(code, tmp_path):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "EFF_QUIET": "1",
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"block failed:\n{code}\n--- stderr ---\n{proc.stderr[-3000:]}"


def test_readme_blocks_import_no_private_module():
    private = re.compile(r"^\s*(?:from|import)\s+eff_\w+(?:\.\w+)*\._\w+", re.M)
    for p in blocks():
        (code,) = p.values
        assert not private.search(code), (
            f"{p.id} imports a private module: {private.search(code)[0]}"
        )


def test_readmes_have_python_blocks_and_every_skip_gives_a_reason():
    params = blocks()
    assert len(params) >= 20
    for readme in READMES:
        for line in readme.read_text().splitlines():
            if "readme-test:" in line:
                assert SKIP.search(line), f"{readme.name}: malformed marker {line!r}"
