"""A rack's monitor logs: `splitrack logs` and `splitrack down --keep-logs`.

Each monitor's stderr is RUN_DIR/logs/ID.log (the launcher opens it; a monitor
that global restarts appends to the same file), and each line it logs starts
`YYYY-MM-DD HH:MM:SS,mmm ID LEVEL` (monitors/__main__.py). Monitors log at
$SPLITRACK_LOG_LEVEL (LOG_LEVEL_ENV), INFO unless the launcher was asked for
DEBUG (Rack(verbose=True), `-v`); the level is recorded in state.json so that
`splitrack restart global` starts it at the same one.

    files(run) -> {id: path}          the rack's logs: the recorded components'
                                      first, in the rack's order, then any other
    ends(paths) -> {path: (inode, size)}   where each ends now
    merged(ends) -> iterator[str]     every line up to those ends, in time order;
                                      a line without a time (a traceback) stays
                                      after the line it follows in its own file
    follow(find, write, ends)         from those ends on, every line written to
                                      the files find() names, as it comes, until
                                      interrupted (KeyboardInterrupt); a file that
                                      is replaced or cut is read from its start
    kept_dir(run) -> dest             where to keep them by default:
                                      RUN_ROOT/logs.kept/NAME-YYYYmmdd-HHMMSS
                                      (logs.kept cannot be a rack's name)
    check_dest(dest)                  OSError unless dest is new or an empty directory
    keep(run, dest) -> dest           a copy of every log in dest (made 0700)
"""

import contextlib
import heapq
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator

from splitrack.params import LOGS_FOLLOW_POLL_S
from splitrack.rundir import RunDir

LOG_LEVEL_ENV = "SPLITRACK_LOG_LEVEL"   # the monitors' level: DEBUG, INFO (default), ...;
#                                         a monitor that global restarts inherits global's
KEPT_DIR = "logs.kept"   # under the run root; not a rack name (no "." in one)
_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


def files(run: RunDir) -> dict[str, str]:
    try:
        names = sorted(n[:-4] for n in os.listdir(run.log_dir) if n.endswith(".log"))
    except OSError:
        return {}
    recorded = [c["id"] for c in (run.read_state() or {}).get("components", [])]
    ordered = [cid for cid in recorded if cid in names] + [n for n in names if n not in recorded]
    return {cid: run.log_path(cid) for cid in ordered}


def ends(paths: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Where each file ends now: {path: (inode, size)}, for merged() and follow()."""
    out = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            out[path] = (st.st_ino, st.st_size)
    return out


def merged(upto: dict[str, tuple[int, int]]) -> Iterator[str]:
    def records(path: str, size: int) -> Iterator[tuple[str, list[str]]]:
        try:
            with open(path, "rb") as f:
                text = f.read(size).decode(errors="replace")
        except FileNotFoundError:
            return
        stamp, lines = "", []
        for line in text.splitlines():
            if _STAMP.match(line):
                if lines:
                    yield stamp, lines
                stamp, lines = line[:23], []
            lines.append(line + "\n")
        if lines:
            yield stamp, lines

    streams = [records(path, size) for path, (_, size) in upto.items()]
    for _, lines in heapq.merge(*streams, key=lambda r: r[0]):
        yield from lines


def follow(find: Callable[[], Iterable[str]], write: Callable[[str], None],
           start: dict[str, tuple[int, int]], poll_s: float = LOGS_FOLLOW_POLL_S) -> None:
    at = dict(start)   # path -> (inode, offset read up to)
    partial: dict[str, bytes] = {}
    while True:
        for path in find():
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    inode, offset = at.get(path, (st.st_ino, 0))
                    if inode != st.st_ino or st.st_size < offset:   # replaced or cut
                        offset, partial[path] = 0, b""
                    f.seek(offset)
                    data = partial.get(path, b"") + f.read()
                    at[path] = (st.st_ino, f.tell())
            except FileNotFoundError:
                continue
            done, _, partial[path] = data.rpartition(b"\n")
            if done:
                write((done + b"\n").decode(errors="replace"))
        time.sleep(poll_s)


def kept_dir(run: RunDir) -> str:
    """A new directory name for run's logs: RUN_ROOT/logs.kept/NAME-YYYYmmdd-HHMMSS[-N]."""
    base = os.path.join(run.root, KEPT_DIR, f"{run.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    dest, n = base, 1
    while os.path.lexists(dest):
        n += 1
        dest = f"{base}-{n}"
    return dest


def check_dest(dest: str) -> None:
    """OSError unless keep() may put logs in dest: a new or empty directory."""
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise NotADirectoryError(f"{dest} is not a directory")
    if os.path.isdir(dest) and os.listdir(dest):
        raise FileExistsError(f"{dest} is not empty")


def keep(run: RunDir, dest: str) -> str:
    check_dest(dest)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), mode=0o700, exist_ok=True)
    os.makedirs(dest, mode=0o700, exist_ok=True)   # (makedirs gives the mode to the last)
    for path in files(run).values():
        with contextlib.suppress(FileNotFoundError):
            shutil.copy2(path, dest)
    return dest
