"""Progress of a long benchmark run, on stderr.

    with progress("bench tcp", steps) as advance:
        ...; advance("repetition 1")

On a terminal, a progress bar (rich) that goes away at the end. With no
terminal (a CI log, a pipe), one line a phase instead, so a long run is never
silent: `bench tcp: 3/12 repetition 1 (14 s)`. `steps` may be None when the
number is not known in advance (`--duration`).
"""

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


@contextlib.contextmanager
def progress(label: str, steps: int | None) -> Iterator[Callable[..., None]]:
    if not sys.stderr.isatty():
        yield _lines(label, steps)
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    with bar:
        task = bar.add_task(label, total=steps)

        def advance(what: str = "") -> None:
            bar.update(task, advance=1, description=f"{label} {what}".strip())
        yield advance


def _lines(label: str, steps: int | None) -> Callable[..., None]:
    start, done = time.monotonic(), 0

    def advance(what: str = "") -> None:
        nonlocal done
        done += 1
        of = f"{done}/{steps}" if steps else f"{done}"
        print(f"{label}: {of} {what} ({time.monotonic() - start:.0f} s)".replace("  ", " "),
              file=sys.stderr, flush=True)
    return advance
