"""The ``eff`` command.

``eff list`` and ``eff reproduce`` run the registered reproductions; every domain package plugs
its own ``eff <domain> ...`` commands in through the entry-point group ``eff.commands`` (a
``typer.Typer`` per domain, usually built with :func:`domain_app`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import Annotated, Any

import click
import typer
import typer.main
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from eff_shared import report
from eff_shared.errors import ReproductionError
from eff_shared.progress import is_quiet, make_progress, set_quiet
from eff_shared.reproduce import Result, available, resolve_names, run_many

__all__ = [
    "COMMANDS_GROUP",
    "app",
    "build_app",
    "csv_option",
    "domain_app",
    "main",
    "print_package_info",
]

COMMANDS_GROUP = "eff.commands"


def _console(stderr: bool = False) -> Console:
    # Outside a terminal rich would wrap tables at 80 columns; CI logs read better wide.
    width = None if (sys.stderr if stderr else sys.stdout).isatty() else 160
    return Console(stderr=stderr, width=width)


def _domain_entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name)}


class _LazyGroup(TyperGroup):
    """The ``eff`` group: a domain's commands are imported only when that domain is invoked.

    ``eff --help`` and ``eff list`` read the entry points' metadata (name, distribution summary)
    and import no domain package, so they start fast and never import torch.
    """

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = super().list_commands(ctx)
        return own + [n for n in _domain_entry_points() if n not in own]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        own = super().get_command(ctx, cmd_name)
        if own is not None:
            return own
        ep = _domain_entry_points().get(cmd_name)
        if ep is None:
            return None
        if self._listing:  # help text from the distribution's metadata, nothing imported
            summary = _summary(ep.dist.name) if ep.dist else cmd_name
            return click.Group(cmd_name, help=summary)
        try:
            sub = ep.load()
        except Exception as exc:  # one broken plugin must not take the whole CLI down
            print(
                f"eff: could not load commands of {ep.name!r} ({ep.value}): {exc}", file=sys.stderr
            )
            return None
        command = typer.main.get_command(sub)
        command.name = cmd_name
        return command

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        """Usage errors of every ``eff`` command, the domains' included, are one line on stderr
        naming the flag (``error: Invalid value for '--seed': ...``) and exit status 2."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as exc:
            message = " ".join(exc.format_message().split())
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            print(f"error: {message}{hint}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            print("aborted", file=sys.stderr)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="eff",
    help="Efficient-ML methods from NeurIPS 2025 papers: reproductions and per-domain tools.",
    no_args_is_help=True,
    add_completion=False,
    cls=_LazyGroup,
)


@app.callback()
def _root(
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="No progress output (bars or periodic lines)."),
    ] = False,
) -> None:
    """Efficient-ML methods from NeurIPS 2025 papers: reproductions and per-domain tools."""
    if quiet:
        set_quiet(True)


@app.command("list")
def list_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """List the registered reproductions and the package that provides each."""
    registry = available()
    rows = [(name, ep.dist.name if ep.dist else "?", ep.value) for name, ep in registry.items()]
    if as_json:
        print(
            json.dumps([{"name": n, "package": p, "entry_point": v} for n, p, v in rows], indent=2)
        )
        return
    table = Table(title=f"{len(rows)} registered reproductions")
    for col in ("name", "package", "entry point"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    _console().print(table)


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run torch single-threaded (or with ``n`` threads) when a torch package is installed.

    The reproductions are small: on a many-core or loaded machine torch's default (one thread per
    core) made them several times slower, and one thread keeps their numbers machine-independent.
    """
    if n <= 0 or importlib.util.find_spec("torch") is None:
        yield
        return
    # imported here: the CLI stays importable in the torch-free eff-shared install
    from eff_shared.torch import threads

    with threads(n):
        yield


def _check_writable(path: Path, flag: str, *, is_dir: bool) -> None:
    """Fail before any reproduction runs when ``path`` cannot be written (a long run's results
    would otherwise be lost at the end)."""
    folder = path if is_dir else path.parent
    if not is_dir and path.is_dir():
        raise typer.BadParameter(f"{path} is a directory, expected a file path", param_hint=flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise typer.BadParameter(
            f"cannot write to {folder}: {exc.strerror or exc}", param_hint=flag
        ) from exc


def _done_line(result: Result, index: int, total: int) -> str:
    c = result.counts()
    if result.error is not None:
        state = "ERROR"
    else:
        state = "ok" if result.passed else "FAIL"
        state += (
            f" · checks {c['checks_passed']}/{c['checks_passed'] + c['checks_failed']}"
            f" · paper {c['paper_reproduced']} reproduced, {c['paper_xfail']} xfail"
        )
        if c["paper_unexpected"]:
            state += f", {c['paper_unexpected']} unexpected"
        if c["paper_regressions"]:
            state += f", {c['paper_regressions']} regressions"
    width = len(str(total))
    return f"[{index:>{width}}/{total}] {result.name:<28} {state} · {result.elapsed_s:.1f} s"


@app.command("reproduce")
def reproduce_cmd(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Reproductions to run (names, or a domain such as 'games'); default: all."
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Full mode (longer, closer to the paper).")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Master seed.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the results as JSON here.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write results.json, report.md, ledger.md and plots into this folder."
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Worker processes (each single-threaded); default: the number of CPUs.",
        ),
    ] = None,
    threads: Annotated[
        int,
        typer.Option(
            "--threads",
            min=0,
            help="torch/BLAS threads per reproduction (0: the libraries' default).",
        ),
    ] = 1,
) -> None:
    """Run reproductions and print the claims table.

    Exit status 1 when a check fails or a paper claim expected to reproduce does not; a paper
    claim marked xfail (not reproduced at this scale) never changes it.
    """
    try:
        selected = resolve_names(names)
    except ReproductionError as exc:
        raise typer.BadParameter(str(exc), param_hint="NAMES") from exc
    if not selected:
        _console(stderr=True).print("no reproductions are registered")
        raise typer.Exit(1)
    if json_path is not None:
        _check_writable(json_path, "--json", is_dir=False)
    if out is not None:
        _check_writable(out, "--out", is_dir=True)
    mode = "full" if full else "quick"
    jobs = jobs or os.cpu_count() or 1
    console = _console()
    lines = not sys.stdout.isatty() and not is_quiet()  # one line per finished reproduction
    started = time.perf_counter()
    with make_progress() as progress:
        task = progress.add_task(f"reproduce ({mode}, {jobs} jobs)", total=len(selected))
        finished = 0

        def on_start(name: str) -> None:
            if jobs == 1:
                progress.update(task, description=f"{name} ({mode})")

        def on_done(result: Result) -> None:
            nonlocal finished
            finished += 1
            progress.advance(task)
            if lines:
                print(_done_line(result, finished, len(selected)), flush=True)

        with (
            _torch_threads(threads if jobs == 1 else 0),
            _heartbeat(lines, lambda: f"reproduce: {finished}/{len(selected)} finished", started),
        ):
            results = run_many(selected, mode, seed, on_start, on_done, jobs=jobs, threads=threads)
    elapsed = time.perf_counter() - started
    report.print_results(results, console)
    for r in results:
        if r.error:
            _console(stderr=True).print(f"[red]{r.name} raised:[/red]\n{r.error}")
    if json_path is not None:
        report.write_json(results, json_path)
    if out is not None:
        written = report.write_report(results, out)
        if any(r.series for r in results) and not report.plots_available():
            _console(stderr=True).print(report.PLOTS_SKIPPED)
        console.print(f"report written to {written['markdown']}, ledger to {written['ledger']}")
    failed = [r.name for r in results if not r.passed]
    if failed:
        console.print(
            f"[bold red]{len(failed)} of {len(results)} reproductions failed:[/] {', '.join(failed)}"
        )
    console.print(
        f"{len(results)} reproductions ({mode}) in {elapsed:.0f} s · {report.summary_line(results)}",
        style="bold red" if failed else "bold green",
    )
    if failed:
        raise typer.Exit(1)


def _requirement_name(req: str) -> str:
    for sep in "[<>=!~;( ":
        req = req.split(sep, 1)[0]
    return req.strip()


def _installed_version(name: str) -> str:
    try:
        return distribution(name).version
    except PackageNotFoundError:
        return "not installed"


@contextlib.contextmanager
def _heartbeat(enabled: bool, status: Callable[[], str], started: float) -> Iterator[None]:
    """Off a terminal, a line on stderr every minute (``EFF_PROGRESS_EVERY_S`` if set) while a long
    run has nothing else to say: a full reproduction can run for many minutes between results."""
    import threading

    from eff_shared.progress import EVERY_ENV

    if not enabled:
        yield
        return
    every = float(os.environ.get(EVERY_ENV) or 60.0)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            elapsed = time.perf_counter() - started
            print(f"{status()}, {elapsed:.0f} s elapsed", file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def print_package_info(
    dist_name: str, *, torch_report: bool = False, console: Console | None = None
) -> None:
    """Print a package's description (its distribution summary), version, registered reproductions
    and the versions of its direct dependencies; with ``torch_report`` also the torch build and the
    device eff would choose. Packages with their own ``info`` command call this first."""
    console = console or _console()
    dist = distribution(dist_name)
    console.print(f"[bold]{dist_name}[/bold] {dist.version}")
    console.print(dist.metadata["Summary"] or "")
    repros = [n for n, ep in available().items() if ep.dist and ep.dist.name == dist_name]
    console.print(f"reproductions: {', '.join(repros) if repros else '(none yet)'}")
    table = Table(title="dependencies")
    table.add_column("package")
    table.add_column("installed")
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        name = _requirement_name(req)
        table.add_row(name, _installed_version(name))
    console.print(table)
    if torch_report:
        _print_torch(console)


def csv_option(
    text: str | list[str],
    kind: Callable[[str], Any] = str,
    *,
    option: str,
    allowed: Any = None,
) -> list[Any]:
    """A comma-separated command-line option as a list (:func:`eff_shared.report.parse_csv`); a bad
    or missing value is a usage error naming ``option`` (exit status 2), as every domain CLI reports it."""
    try:
        return report.parse_csv(text, kind, name=option, allowed=allowed)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def domain_app(dist_name: str, *, torch_report: bool = False, info: bool = True) -> typer.Typer:
    """A ``typer.Typer`` for ``eff <domain>``; packages add their own commands to it.

    With ``info=True`` it has an ``info`` command that calls :func:`print_package_info`; a package
    whose ``info`` takes options (``eff games info --game ...``) passes ``info=False`` and defines
    its own, calling :func:`print_package_info` first.
    """
    sub = typer.Typer(no_args_is_help=True, add_completion=False, help=_summary(dist_name))

    if info:

        @sub.command("info")
        def info_cmd() -> None:
            """What the package contains and the versions it runs with."""
            print_package_info(dist_name, torch_report=torch_report)

    # A Typer with one command collapses into it; the callback keeps `eff <domain> info` a subcommand.
    @sub.callback()
    def _group() -> None:
        pass

    return sub


def _summary(dist_name: str) -> str:
    try:
        return distribution(dist_name).metadata["Summary"] or dist_name
    except PackageNotFoundError:
        return dist_name


def _print_torch(console: Console) -> None:
    import torch

    from eff_shared.torch import choose_device

    device = choose_device("auto")
    console.print(
        f"torch {torch.__version__} (CUDA build {torch.version.cuda or 'none'}); "
        f"CUDA available: {torch.cuda.is_available()}; default device: {device}"
    )


def build_app() -> typer.Typer:
    """The ``eff`` app; each installed domain's commands load when that domain is invoked."""
    return app


def main() -> None:
    app()
