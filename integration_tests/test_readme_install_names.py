"""Every install line of the READMEs names a distribution of this workspace (issue 27).

A README that says ``pip install eff`` sends users to an unrelated PyPI project of that name; a
look-alike name (``eff-game``, ``eff_llms``) would do the same. So every line of ``README.md``,
``shared/README.md`` and ``packages/*/README.md`` that contains ``pip install`` or ``uv add`` is
parsed, and each distribution it installs (extras, version specifiers and quotes stripped) must be
the root's ``[project].name`` or a workspace member's, read from the pyproject files.
"""

import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = [
    ROOT / "README.md",
    ROOT / "shared" / "README.md",
    *sorted(ROOT.glob("packages/*/README.md")),
]

# Third-party tools that a README may legitimately tell a user to install (e.g. `pip install uv`
# before using the workspace). Keep this list small and explicit: every entry is a name that is
# not ours, installed on purpose.
THIRD_PARTY = {"uv"}

# Names on PyPI that belong to unrelated projects: none of our distributions may take them.
TAKEN = {"eff"}

_COMMAND = re.compile(r"\b(?:pip install|uv add)\b")
# Where an install command ends on a README line: inline code, a shell comment, a chained command.
_END = re.compile(r"`|\s#|;|&&|\|\||\|")
# pip/uv options whose value is the next token (a file, a URL, a path), not a distribution.
_OPTIONS_WITH_VALUE = {
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
    "--extra-index-url", "-f", "--find-links", "-t", "--target", "-p", "--python", "--group",
    "--optional", "--extra", "--package",
}  # fmt: skip
# A PEP 508 requirement: the name, then optional extras, a version specifier, a marker or `@ url`.
_REQUIREMENT = re.compile(
    r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*([<>=!~@;].*)?"
)


def normalize(name: str) -> str:
    """PEP 503 normalised name (``Eff_Games`` and ``eff.games`` are ``eff-games``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _project_name(pyproject: Path) -> str:
    return normalize(tomllib.loads(pyproject.read_text())["project"]["name"])


def workspace_distributions() -> set[str]:
    """The root's ``[project].name`` and every workspace member's."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    workspace = root["tool"]["uv"]["workspace"]
    excluded = {p.resolve() for pat in workspace.get("exclude", []) for p in ROOT.glob(pat)}
    members = {
        p.resolve()
        for pattern in workspace["members"]
        for p in ROOT.glob(pattern)
        if (p / "pyproject.toml").is_file()
    }
    return {normalize(root["project"]["name"])} | {
        _project_name(m / "pyproject.toml") for m in members - excluded
    }


def install_names(line: str) -> list[str]:
    """The distributions that the ``pip install`` / ``uv add`` commands on ``line`` install.

    Raises ``ValueError`` for an argument that is not a requirement (a path, a URL, prose), so that
    such a line is looked at rather than silently skipped.
    """
    names = []
    for match in _COMMAND.finditer(line):
        rest = line[match.end() :]
        end = _END.search(rest)
        tokens = shlex.split(rest[: end.start()] if end else rest)
        skip_value = False
        for token in tokens:
            if skip_value:
                skip_value = False
                continue
            if token.startswith("-"):
                skip_value = token in _OPTIONS_WITH_VALUE
                continue
            req = _REQUIREMENT.fullmatch(token)
            if req is None:
                raise ValueError(f"not a requirement: {token!r} in {line.strip()!r}")
            names.append(normalize(req.group(1)))
    return names


def install_lines() -> list[tuple[str, int, str]]:
    return [
        (str(readme.relative_to(ROOT)), number, line)
        for readme in READMES
        for number, line in enumerate(readme.read_text().splitlines(), start=1)
        if _COMMAND.search(line)
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("pip install eff-games                # numpy/scipy only", ["eff-games"]),
        ('pip install "eff-shared[flower]"     # + Flower', ["eff-shared"]),
        ("all of them (`pip install eff-all`).", ["eff-all"]),
        ("`pip install 'eff-graph[embed]'`; it loads lazily", ["eff-graph"]),
        ('pip install -U "Eff_Theory[torch]>=0.1,<1" eff.llm', ["eff-theory", "eff-llm"]),
        ("uv add eff-rl && uv add eff-vision", ["eff-rl", "eff-vision"]),
        ("pip install -r requirements.txt eff-kernels", ["eff-kernels"]),
        ("pip install eff", ["eff"]),
    ],
)
def test_install_names_parses_a_line(line, expected):
    assert install_names(line) == expected


def test_install_names_rejects_what_is_not_a_requirement():
    with pytest.raises(ValueError, match="not a requirement"):
        install_names("pip install ./shared")


def test_workspace_distributions_are_the_nine_and_none_is_taken():
    ours = workspace_distributions()
    assert ours == {
        "eff-all",
        "eff-shared",
        "eff-games",
        "eff-llm",
        "eff-kernels",
        "eff-vision",
        "eff-graph",
        "eff-rl",
        "eff-theory",
    }
    assert not ours & TAKEN, f"{sorted(ours & TAKEN)} is an unrelated project's name on PyPI"


def test_every_readme_install_line_names_our_distributions():
    ours = workspace_distributions()
    lines = install_lines()
    assert any(r == "README.md" for r, _, _ in lines), "the root README shows no install line"
    problems = []
    installed = set()
    for readme, number, line in lines:
        try:
            names = install_names(line)
        except ValueError as exc:
            problems.append(f"{readme}:{number}: {exc}")
            continue
        if not names:
            problems.append(f"{readme}:{number}: no distribution named: {line.strip()!r}")
        installed |= set(names)
        problems += [
            f"{readme}:{number}: installs {name!r}, which is not a distribution of this workspace "
            f"({', '.join(sorted(ours))}) nor an allowed tool ({', '.join(sorted(THIRD_PARTY))}): "
            f"{line.strip()!r}"
            for name in names
            if name not in ours | THIRD_PARTY
        ]
    assert not problems, "\n".join(problems)
    # The meta-package is installed under its own name somewhere (the root README).
    root_name = normalize(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"])
    assert root_name in installed
