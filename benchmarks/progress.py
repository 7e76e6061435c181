"""A progress bar for long benchmark runs (rich), on stderr and only on a terminal.

    with progress("bench tcp", steps) as advance:
        ...; advance()
"""

import contextlib
import sys
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


@contextlib.contextmanager
def progress(label: str, steps: int) -> Iterator[Callable[[], None]]:
    bar = Progress(TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True,
                   disable=not sys.stderr.isatty())
    with bar:
        task = bar.add_task(label, total=steps)
        yield lambda: bar.advance(task)
