"""Progress for long loops, one way for every package.

On a terminal a rich bar on stderr; off a terminal (CI logs, pipes) one plain line on stderr at
most every ``every_s`` seconds (``name: 40/100 (40 %), 12 s elapsed, ~18 s left``), so a long run
is never silent; nothing at all under ``quiet=True`` or with ``EFF_QUIET`` set (``--quiet`` on
the CLIs sets it).

    from eff_shared.progress import track
    for step in track(range(steps), "LRC distillation"):
        ...

or, when the loop is not a plain iteration, ``with progress_task("search", total=n) as tick:``
and ``tick()`` (or ``tick(k)``) after each unit of work.

Only the outermost task reports: a loop that runs inside another tracked loop (the local
training of each client inside a federation's rounds, say) is silent, so there is one bar or one
stream of lines per command, and :func:`silenced` lets a caller with its own report (the
``eff reproduce`` harness) silence everything it runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = [
    "is_interactive",
    "is_quiet",
    "make_progress",
    "progress_task",
    "set_quiet",
    "silenced",
    "track",
]

T = TypeVar("T")
QUIET_ENV = "EFF_QUIET"
EVERY_ENV = "EFF_PROGRESS_EVERY_S"  # seconds between plain lines off a terminal (default 10)
DEFAULT_EVERY_S = 10.0
_depth = 0  # open progress tasks (and silenced blocks) in this process: only the outermost reports


def _noop(n: int = 1) -> None:
    return None


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """No progress output from anything run inside this block (it counts as an outer task)."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


def is_quiet() -> bool:
    """True when ``EFF_QUIET`` is set (``--quiet``): no progress output at all."""
    return bool(os.environ.get(QUIET_ENV))


def set_quiet(quiet: bool = True) -> None:
    """Silence (or restore) progress output for this process and the workers it starts."""
    if quiet:
        os.environ[QUIET_ENV] = "1"
    else:
        os.environ.pop(QUIET_ENV, None)


def is_interactive() -> bool:
    """True when stderr is a terminal and progress is not silenced."""
    if is_quiet():
        return False
    return sys.stderr.isatty()


def make_progress() -> Progress:
    """A rich ``Progress`` on stderr, disabled when not interactive."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not is_interactive(),
        transient=True,
    )


class _LineReporter:
    """Plain periodic lines for logs: the first after ``every_s``, then every ``every_s``."""

    def __init__(self, description: str, total: int | None, every_s: float) -> None:
        self.description, self.total, self.every_s = description or "progress", total, every_s
        self.done = 0
        self.start = self.last = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            print(self.line(now), file=sys.stderr, flush=True)

    def line(self, now: float) -> str:
        elapsed = now - self.start
        if self.total:
            frac = self.done / self.total
            left = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
            return (
                f"{self.description}: {self.done}/{self.total} ({100 * frac:.0f} %), "
                f"{elapsed:.0f} s elapsed, ~{left:.0f} s left"
            )
        return f"{self.description}: {self.done} done, {elapsed:.0f} s elapsed"


@contextlib.contextmanager
def progress_task(
    description: str = "",
    total: int | None = None,
    *,
    quiet: bool | None = None,
    every_s: float | None = None,
) -> Iterator[Callable[..., None]]:
    """A progress task; yields ``tick(n=1)`` to call after each unit of work.

    ``quiet=None`` follows ``EFF_QUIET``; on a terminal a rich bar, otherwise a line every
    ``every_s`` seconds (``None``: ``EFF_PROGRESS_EVERY_S``, else 10).
    """
    global _depth
    if every_s is None:
        raw = os.environ.get(EVERY_ENV) or DEFAULT_EVERY_S
        try:
            every_s = float(raw)
        except ValueError:
            raise ValueError(f"{EVERY_ENV} must be a number of seconds > 0, got {raw!r}") from None
    if not every_s > 0:
        raise ValueError(f"every_s must be > 0, got {every_s!r}")
    nested = _depth > 0
    _depth += 1
    try:
        if nested or (quiet if quiet is not None else is_quiet()):
            yield _noop
        elif sys.stderr.isatty():
            with make_progress() as progress:
                task = progress.add_task(description, total=total)
                yield lambda n=1: progress.advance(task, n)
        else:
            yield _LineReporter(description, total, every_s).advance
    finally:
        _depth -= 1


def track(
    iterable: Iterable[T],
    description: str = "",
    total: int | None = None,
    *,
    quiet: bool | None = None,
    every_s: float | None = None,
) -> Iterator[T]:
    """Iterate with progress: a bar on a terminal, periodic lines otherwise, nothing when quiet."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with progress_task(description, total, quiet=quiet, every_s=every_s) as tick:
        for item in iterable:
            yield item
            tick()
