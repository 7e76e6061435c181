"""The machine condition a benchmark runs in: `splitrack bench --busy [N]`.

A virtual machine whose idle cores halt makes a wake-up across cores cost tens
of µs (an IPI, a VM exit), and every ratio to an idle baseline moves with it.
With one core kept busy nothing halts there, and a wake-up that lands on the
busy core is a plain context switch. Both conditions are real for users, so a
benchmark can be run in either; and with every core kept busy (`--busy 2` on
2 cores) each of the rack's processes shares its core with a task that never
yields, a machine that is simply loaded:

    with busy_cores(n):        n plain processes spin for the duration (a Python
        ...                    `while True: pass` each), stopped by PID on every
                               way out; n 0: none
    describe(n) -> {"busy_core", "busy_cores", "cpus", "cpu_model", "kernel",
                    "python", "splitrack", "git_commit", "git_dirty"}   what the JSON
                    records (busy_core: n > 0; git_*: None unless splitrack runs
                    from a git checkout)
"""

import contextlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[None]:
    hogs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                         stdin=subprocess.DEVNULL, cwd="/"))
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def describe(busy: int) -> dict[str, Any]:
    commit, dirty = _git()
    return {"busy_core": busy > 0, "busy_cores": busy, "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "kernel": platform.release(), "python": platform.python_version(),
            "splitrack": _version(), "git_commit": commit, "git_dirty": dirty}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version() -> str:
    try:
        return importlib.metadata.version("splitrack")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _git() -> tuple[str | None, bool | None]:
    """The commit of the checkout this code runs from, if it is one."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(here, ".git")):
        return None, None
    try:
        commit = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(dirty.strip())
