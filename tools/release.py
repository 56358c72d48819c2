#!/usr/bin/env python
"""Build every package's wheel and sdist, check them, and test each package installed alone.

    uv run tools/release.py                     # build dist/, check metadata, test all 8 wheels
    uv run tools/release.py --package eff-games # build everything, test one
    uv run tools/release.py --build-only        # dist/ and the metadata check only

1. ``dist/``: ``uv build`` of the 8 packages (``eff-shared`` and the seven domains), wheel and
   sdist each. The inter-package pins (``eff-shared>=X.Y,<X.(Y+1)``) are checked against the
   workspace versions before anything is built.
2. Metadata: ``twine check`` on every file (README rendering, required fields).
3. For each package, a fresh virtual environment outside the workspace (``--venvs``, default a
   temporary folder): its wheel and the ``eff-shared`` wheel from ``dist/`` only (installed by
   path, never looked up on an index), third-party dependencies from PyPI at the versions of
   ``uv.lock`` (``uv export`` constraints), the test tools of the ``dev`` group. The package's
   own tests are copied out of the workspace and run against the installed wheel (the log shows
   where the package was imported from), then ``eff <domain> info``; a package with test extras
   (``[tool.eff.ci] test-extras``) then gets them installed and the tests that exercise them
   (``[tool.eff.ci.extra-tests]``) run again. ``eff-games``, ``eff-theory`` and ``eff-shared``
   must install without torch. ``tools/ci.py --wheels`` (CI) runs this instead of its
   workspace-built per-package environments.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "eff-shared": ROOT / "shared",
    **{p.name: p for p in sorted((ROOT / "packages").iterdir()) if (p / "pyproject.toml").exists()},
}
TORCH_FREE = ("eff-shared", "eff-games", "eff-theory")
DIST = ROOT / "dist"


def log(msg: str) -> None:
    print(f"\n=== {msg}", flush=True)


def run(cmd: list[str], *, cwd: Path = ROOT, capture: bool = False, env: dict | None = None):
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=cwd, text=True, capture_output=capture, env=env)
    if proc.returncode != 0:
        if capture:
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
        raise SystemExit(f"release: failed ({proc.returncode}): {' '.join(cmd)}")
    return proc


def project(pkg: str) -> dict:
    return tomllib.loads((PACKAGES[pkg] / "pyproject.toml").read_text())


def version(pkg: str) -> str:
    return project(pkg)["project"]["version"]


def expected_pin(ver: str) -> str:
    major, minor = (int(x) for x in ver.split(".")[:2])
    return f">={major}.{minor},<{major}.{minor + 1}"


def check_pins() -> None:
    """Every requirement on a workspace package pins the workspace's current minor version."""
    log("inter-package pins")
    problems = []
    for pkg in PACKAGES:
        meta = project(pkg)["project"]
        reqs = list(meta.get("dependencies", []))
        for extra in meta.get("optional-dependencies", {}).values():
            reqs += extra
        for req in reqs:
            m = re.match(r"(eff-[a-z]+)(\[[a-z,]+\])?(.*)", req)
            if not m or m.group(1) not in PACKAGES:
                continue
            want = expected_pin(version(m.group(1)))
            if m.group(3).replace(" ", "") != want:
                problems.append(f"{pkg}: {req!r} should pin {m.group(1)}{want}")
    if problems:
        raise SystemExit("release: " + "\n  ".join(problems))
    print("ok")


def wheel_of(pkg: str) -> Path:
    stem = pkg.replace("-", "_")
    found = sorted(DIST.glob(f"{stem}-{version(pkg)}-*.whl"))
    if len(found) != 1:
        raise SystemExit(f"release: expected one wheel of {pkg} in dist/, found {found}")
    return found[0]


def build() -> list[Path]:
    log("build wheels and sdists into dist/")
    shutil.rmtree(DIST, ignore_errors=True)
    for pkg in PACKAGES:
        run(["uv", "build", "--package", pkg, "--out-dir", str(DIST), "--quiet"])
    files = sorted(DIST.glob("*.whl")) + sorted(DIST.glob("*.tar.gz"))
    wheels = [f for f in files if f.suffix == ".whl"]
    if len(wheels) != len(PACKAGES):
        raise SystemExit(f"release: {len(wheels)} wheels built, expected {len(PACKAGES)}")
    for f in files:
        print(f"  {f.name} ({f.stat().st_size / 1024:.0f} KiB)")
    return files


def check_metadata(files: list[Path]) -> None:
    log("metadata: twine check")
    run(["uv", "tool", "run", "--quiet", "twine", "check", "--strict", *map(str, files)])


def constraints(pkg: str, out: Path) -> tuple[Path, Path]:
    """Third-party pins of ``pkg`` (with its test extras) from uv.lock, workspace packages left out
    (a constraints file: it pins versions, installs nothing), and the ``dev`` group's test tools
    (a requirements file)."""
    extras = [a for e in test_extras(pkg) for a in ("--extra", e)]
    text = run(
        ["uv", "export", "--frozen", "--package", pkg, "--no-hashes", "--no-emit-workspace",
         "--no-default-groups", *extras],
        capture=True,
    ).stdout  # fmt: skip
    tools = run(
        ["uv", "export", "--frozen", "--only-group", "dev", "--no-hashes", "--no-emit-project"],
        capture=True,
    ).stdout
    out.write_text(text + "\n" + tools)
    dev = out.with_suffix(".dev.txt")
    dev.write_text(tools)
    return out, dev


def test_extras(pkg: str) -> list[str]:
    return list(project(pkg).get("tool", {}).get("eff", {}).get("ci", {}).get("test-extras", []))


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


def stage_tests(pkg: str, where: Path) -> Path:
    """The package's tests, the root conftest (thread pinning) and the pytest settings, copied
    out of the workspace so that only the installed wheel can be imported."""
    dest = where / "tests"
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(PACKAGES[pkg] / "tests", dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "conftest.py", where / "conftest.py")
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    opts = {k: v for k, v in opts.items() if k != "testpaths"}
    lines = ["[tool.pytest.ini_options]", *(f"{k} = {_toml_value(v)}" for k, v in opts.items())]
    (where / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return dest


def extra_test_paths(pkg: str, extras: list[str]) -> list[str]:
    """The tests (relative to the package) to re-run with ``extras`` installed:
    ``[tool.eff.ci.extra-tests] <extra> = [paths]`` when given, else all of them."""
    table = project(pkg).get("tool", {}).get("eff", {}).get("ci", {}).get("extra-tests", {})
    paths = [p for e in extras for p in table.get(e, [])]
    for path in paths:
        if not (PACKAGES[pkg] / path).exists():
            raise SystemExit(
                f"release: {pkg}: [tool.eff.ci.extra-tests] names a missing path {path}"
            )
    return paths or ["tests"]


def run_tests(python: Path, stage: Path, paths: list[str], skip_slow: bool) -> str:
    """pytest on the staged copies of ``paths``; returns pytest's last line (the counts)."""
    args = [str(python), "-m", "pytest", *paths, "-q", "-n", "2", "-p", "no:cacheprovider"]
    args += ["--dist", "loadgroup"]  # tests marked xdist_group share a worker (Flower simulations)
    if skip_slow:
        args += ["-m", "not slow"]
    print("+ " + " ".join(args), flush=True)
    proc = subprocess.run(args, cwd=stage, text=True, capture_output=True)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    print(proc.stdout[-3000:] if proc.returncode else tail, flush=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
        raise SystemExit(f"release: {' '.join(paths)} failed against the installed wheel")
    return tail


def test_package(pkg: str, venvs: Path, skip_slow: bool) -> dict:
    """Fresh venv; the package's wheel alone (plus ``eff-shared``'s), its tests; then, where the
    package lists test extras, the wheel with them and the tests that exercise them — the same
    two runs ``tools/ci.py`` makes, here against the installed wheels."""
    t0 = time.perf_counter()
    venv = venvs / pkg
    log(f"{pkg}: fresh venv {venv}")
    shutil.rmtree(venv, ignore_errors=True)
    run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)])
    python = venv / "bin" / "python"
    extras = test_extras(pkg)
    shared = [] if pkg == "eff-shared" else [f"eff-shared @ {wheel_of('eff-shared').as_uri()}"]
    cons, dev = constraints(pkg, venvs / f"{pkg}.constraints.txt")

    def install(spec: str, *more: str) -> dict[str, str]:
        reqs = [f"{spec} @ {wheel_of(pkg).as_uri()}", *shared, *more]
        run(["uv", "pip", "install", "--quiet", "--python", str(python), "-c", str(cons), *reqs])
        frozen = run(["uv", "pip", "freeze", "--python", str(python)], capture=True).stdout
        return {
            m.group(1): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9_.-]+)(?:==| @ )(\S+)", frozen, re.M)
            if m.group(1).startswith("eff") or m.group(1) in ("torch", "numpy")
        }

    # the package alone first (what `pip install eff-games` gives), then the test tools
    installed = install(pkg)
    print("installed alone:", ", ".join(f"{k} {v}" for k, v in sorted(installed.items())))
    if pkg in TORCH_FREE and "torch" in installed:
        raise SystemExit(f"release: torch was installed with {pkg}")
    install(pkg, "-r", str(dev))
    module = pkg.replace("-", "_")
    origin = run(
        [str(python), "-c", f"import {module}; print({module}.__file__, {module}.__version__)"],
        capture=True,
        cwd=venvs,
    ).stdout.strip()
    print(f"{module} imported from {origin}")
    if not origin.startswith(str(venv)):
        raise SystemExit(f"release: {module} was not imported from the venv: {origin}")
    stage = venvs / f"{pkg}-tests"
    stage_tests(pkg, stage)
    counts = {"alone": run_tests(python, stage, ["tests"], skip_slow)}
    eff = venv / "bin" / "eff"
    domain = pkg.removeprefix("eff-")
    info = [str(eff), "list"] if pkg == "eff-shared" else [str(eff), domain, "info"]
    run(info, capture=True, cwd=venvs)
    print(f"ok: `{' '.join(info[1:])}` runs")
    if extras:
        installed = install(f"{pkg}[{','.join(extras)}]", "-r", str(dev))
        print(
            f"with test extras {extras}:",
            ", ".join(f"{k} {v}" for k, v in sorted(installed.items())),
        )
        paths = extra_test_paths(pkg, extras)
        counts[f"[{','.join(extras)}]"] = run_tests(python, stage, paths, skip_slow)
    return {
        "package": pkg,
        "venv": str(venv),
        "installed": installed,
        "tests": counts,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--package", action="append", choices=sorted(PACKAGES))
    parser.add_argument("--build-only", action="store_true", help="build and check, no tests")
    parser.add_argument("--skip-slow", action="store_true", help="deselect tests marked slow")
    parser.add_argument("--no-twine", action="store_true", help="skip the twine metadata check")
    parser.add_argument("--venvs", type=Path, help="where the fresh venvs go (default: a tmp dir)")
    args = parser.parse_args(argv)
    check_pins()
    files = build()
    if not args.no_twine:
        check_metadata(files)
    if args.build_only:
        return 0
    venvs = args.venvs or Path(tempfile.mkdtemp(prefix="eff-release-"))
    if ROOT in venvs.resolve().parents or venvs.resolve() == ROOT:
        raise SystemExit("release: --venvs must lie outside the workspace")
    venvs.mkdir(parents=True, exist_ok=True)
    summary = [test_package(p, venvs, args.skip_slow) for p in (args.package or PACKAGES)]
    log("summary")
    for s in summary:
        eff_versions = ", ".join(f"{k} {v}" for k, v in sorted(s["installed"].items()))
        tests = "; ".join(f"{k}: {v}" for k, v in s["tests"].items())
        print(f"{s['package']:<12} {s['seconds']:>7.1f} s  {tests}  [{eff_versions}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
