#!/usr/bin/env python
"""What CI runs (``uv run tools/ci.py``).

1. The workspace environment (``.venv``, every package and extra) is synced from the lock.
2. Static check: every package imports only what its pyproject declares.
3. For every package: an isolated environment ``.venvs/<pkg>`` holding only that package and
   its dependencies from the lock (``uv sync --package <pkg> --frozen``) plus the test tools of the
   ``dev`` group at their locked versions; the package's tests run there with ``pytest -n 2``.
   A package that lists extras under ``[tool.eff.ci] test-extras`` (e.g. eff-games' ``openspiel``,
   eff-theory's ``torch``) has its tests run again in ``.venvs/<pkg>+<extra>`` with them installed
   (only the paths under ``[tool.eff.ci.extra-tests]`` when the package lists them).
4. ``eff-shared``, ``eff-games`` and ``eff-theory`` environments must not contain torch.
5. ``integration_tests/`` in the full workspace environment (CLI end to end, Flower simulation).
6. ``ruff check`` and ``ruff format --check``.
7. With ``--wheels`` (what ``.ci/run`` uses), step 3 runs from the built wheels instead of the
   workspace: ``tools/release.py`` builds the 8 wheels and sdists, checks their metadata, and for
   every package makes a fresh venv outside the workspace with its wheel alone (torch-free where
   step 4 says), runs its tests there, then adds its test extras and runs the tests that exercise
   them — the same runs as step 3, against what ``pip install`` would give a user.

Options: ``--package NAME`` (repeatable) to run only those packages (integration tests and lint
still run unless ``--no-integration`` / ``--no-lint``), ``--skip-slow`` to deselect ``slow`` tests.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import time
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "eff-shared": ROOT / "shared",
    **{p.name: p for p in sorted((ROOT / "packages").iterdir()) if (p / "pyproject.toml").exists()},
}
TORCH_FREE = ("eff-shared", "eff-games", "eff-theory")
# Distributions that provide an import name under a different name, or that come with Python.
IMPORT_ALIASES = {
    "cv2": "opencv-python-headless",
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "PIL": "pillow",
}


def log(msg: str) -> None:
    print(f"\n=== {msg}", flush=True)


def sh(cmd: list[str], env: dict[str, str] | None = None, check: bool = True) -> int:
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise SystemExit(f"ci: command failed with exit status {proc.returncode}: {' '.join(cmd)}")
    return proc.returncode


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def req_name(req: str) -> str:
    return norm(re.split(r"[\[<>=!~;( ]", req, maxsplit=1)[0])


def declared(pyproject: Path) -> set[str]:
    meta = tomllib.loads(pyproject.read_text())["project"]
    names = {req_name(r) for r in meta.get("dependencies", [])}
    for reqs in meta.get("optional-dependencies", {}).values():
        names |= {req_name(r) for r in reqs}
    return names | {norm(meta["name"])}


def imported_modules(src: Path) -> dict[str, set[str]]:
    """Top-level names of absolute imports, mapped to the files that import them."""
    found: dict[str, set[str]] = {}
    for file in src.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                found.setdefault(n.split(".")[0], set()).add(str(file.relative_to(ROOT)))
    return found


def check_declared_imports() -> None:
    log("static check: every package imports only what it declares")
    dist_of = packages_distributions()
    problems = []
    for pkg, path in PACKAGES.items():
        allowed = declared(path / "pyproject.toml")
        for mod, files in sorted(imported_modules(path / "src").items()):
            if mod in sys.stdlib_module_names or mod == "__future__":
                continue
            dists = {norm(d) for d in dist_of.get(mod, [])} or {norm(IMPORT_ALIASES.get(mod, mod))}
            if not dists & allowed:
                problems.append(
                    f"{pkg}: imports {mod!r} (from {', '.join(sorted(dists))}) in "
                    f"{', '.join(sorted(files))} but does not declare it"
                )
    if problems:
        raise SystemExit("ci: undeclared imports:\n  " + "\n  ".join(problems))
    print(f"ok: {len(PACKAGES)} packages")


def test_tools_requirements() -> Path:
    out = ROOT / ".venvs" / "test-tools.txt"
    out.parent.mkdir(exist_ok=True)
    text = subprocess.run(
        ["uv", "export", "--frozen", "--only-group", "dev", "--no-hashes", "--no-emit-project"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out.write_text(text)
    return out


def pytest_args(skip_slow: bool) -> list[str]:
    args = [
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        "-n",
        "2",
        "--dist",
        "loadgroup",  # tests marked xdist_group share a worker (the Flower simulations)
        "-p",
        "no:cacheprovider",
        "--durations=15",  # where CI's time goes, in every log
    ]
    if skip_slow:
        args += ["-m", "not slow"]
    return args


def _ci_table(pkg: str) -> dict:
    data = tomllib.loads((PACKAGES[pkg] / "pyproject.toml").read_text())
    return data.get("tool", {}).get("eff", {}).get("ci", {})


def test_extras(pkg: str) -> list[str]:
    """Extras under which the package's tests run a second time (``[tool.eff.ci] test-extras``)."""
    return list(_ci_table(pkg).get("test-extras", []))


def extra_test_paths(pkg: str, extras: list[str]) -> list[Path]:
    """The tests to re-run with ``extras`` installed: ``[tool.eff.ci.extra-tests] <extra> = [paths]``
    (relative to the package) when given — the tests that exercise the extra — else all of them."""
    table = _ci_table(pkg).get("extra-tests", {})
    paths = [PACKAGES[pkg] / p for e in extras for p in table.get(e, [])]
    for path in paths:
        if not path.exists():
            raise SystemExit(f"ci: {pkg}: [tool.eff.ci.extra-tests] names a missing path {path}")
    return paths or [PACKAGES[pkg] / "tests"]


def run_package(pkg: str, tools: Path, skip_slow: bool, extras: list[str] | None = None) -> None:
    name = pkg + (f"[{','.join(extras)}]" if extras else "")
    env_dir = ROOT / ".venvs" / (pkg + ("+" + "+".join(extras) if extras else ""))
    log(f"{name}: isolated environment {env_dir.relative_to(ROOT)}")
    t0 = time.perf_counter()
    extra_args = [a for e in extras or [] for a in ("--extra", e)]
    sh(
        ["uv", "sync", "--package", pkg, "--frozen", "--no-default-groups", *extra_args],
        env={"UV_PROJECT_ENVIRONMENT": str(env_dir)},
    )
    python = str(env_dir / "bin" / "python")
    sh(["uv", "pip", "install", "--quiet", "--python", python, "-r", str(tools)])
    if pkg in TORCH_FREE and not extras:
        log(f"{pkg}: must not contain torch")
        if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
            raise SystemExit(f"ci: torch is importable in the {pkg} environment")
        print(f"ok: 'import torch' fails in .venvs/{pkg}")
    tests = extra_test_paths(pkg, extras) if extras else [PACKAGES[pkg] / "tests"]
    sh([python, "-m", "pytest", *map(str, tests), *pytest_args(skip_slow)])
    print(f"{name}: done in {time.perf_counter() - t0:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--package", action="append", choices=sorted(PACKAGES), help="only this package"
    )
    parser.add_argument("--skip-slow", action="store_true", help="deselect tests marked slow")
    parser.add_argument("--no-integration", action="store_true", help="skip integration_tests/")
    parser.add_argument("--no-lint", action="store_true", help="skip ruff")
    parser.add_argument(
        "--wheels",
        action="store_true",
        help="run each package's tests from its built wheel installed alone in a fresh venv "
        "outside the workspace (tools/release.py) instead of a workspace-built environment",
    )
    args = parser.parse_args()
    t0 = time.perf_counter()

    log("workspace environment (.venv): every package and extra, from the lock")
    sh(["uv", "sync", "--frozen", "--all-packages", "--all-extras"])
    check_declared_imports()
    if not args.wheels:
        tools = test_tools_requirements()
        for pkg in args.package or list(PACKAGES):
            run_package(pkg, tools, args.skip_slow)
            if test_extras(pkg):
                run_package(pkg, tools, args.skip_slow, test_extras(pkg))
    else:
        # the wheel venvs are the isolated per-package environments: one set of runs, not two
        log("wheels: every package built, installed alone from dist/ and tested there")
        sh(
            [
                sys.executable,
                str(ROOT / "tools" / "release.py"),
                *(["--skip-slow"] if args.skip_slow else []),
                *[a for p in args.package or [] for a in ("--package", p)],
            ]
        )
    if not args.no_integration:
        log("integration tests in the workspace environment")
        sh(
            [
                str(ROOT / ".venv" / "bin" / "python"),
                "-m",
                "pytest",
                str(ROOT / "integration_tests"),
                *pytest_args(args.skip_slow),
            ],
            env={"EFF_TEST_FLOWER": "1"},
        )
    if not args.no_lint:
        log("ruff")
        sh(["uv", "run", "--frozen", "ruff", "check", "."])
        sh(["uv", "run", "--frozen", "ruff", "format", "--check", "."])
    log(f"ci passed in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
