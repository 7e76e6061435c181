"""The machine condition a benchmark runs in: `splitrack bench --busy`.

A virtual machine whose idle cores halt makes a wake-up across cores cost tens
of µs (an IPI, a VM exit), and every ratio to an idle baseline moves with it.
With one core kept busy nothing halts there, and a wake-up that lands on the
busy core is a plain context switch. Both conditions are real for users, so a
benchmark can be run in either:

    with busy_core(True):      a plain process spins for the duration (a Python
        ...                    `while True: pass`), stopped by PID on every way out
    describe(busy) -> {"busy_core", "cpus"}   what the JSON records
"""

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def busy_core(on: bool) -> Iterator[None]:
    if not on:
        yield
        return
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           stdin=subprocess.DEVNULL, cwd="/")
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def describe(busy: bool) -> dict[str, Any]:
    return {"busy_core": busy, "cpus": os.cpu_count()}
