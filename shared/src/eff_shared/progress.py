"""Progress bars that stay quiet when output is not a terminal (CI logs, pipes, tests)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["is_interactive", "make_progress", "track"]

T = TypeVar("T")


def is_interactive() -> bool:
    """True when stderr is a terminal and ``EFF_QUIET`` is not set."""
    if os.environ.get("EFF_QUIET"):
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
        transient=False,
    )


def track(iterable: Iterable[T], description: str = "", total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar when interactive, silently otherwise."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with make_progress() as progress:
        task = progress.add_task(description, total=total)
        for item in iterable:
            yield item
            progress.advance(task)
