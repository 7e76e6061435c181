"""A program's files on the rack's sComponents, from inside `splitrack run`.

    size(path) -> int                        S_STAT
    read(path, offset, length) -> bytes      S_READ (fewer bytes at the end of the file)
    chunks(path, chunk=1 MiB) -> iterator    the whole file, in order, `chunk` bytes a time

LegoOS style: storage is a component of its own. GSM (GSM_LOOKUP, cached)
names the sComponent that holds a path; every request then goes to it over
the process's FIT endpoint (the one its memory uses, splitrack.vm). Paths
are relative to that sComponent's root; errors are the errno Linux gives
(FileNotFoundError, PermissionError for a path outside the root, ...).
"""

from collections.abc import Iterator
from typing import Any

from fit_rpc import GLOBAL_ID, Op
from splitrack.params import FIT_MAX_PAYLOAD_BYTES
from splitrack.vm import _this

CHUNK_BYTES = 1 << 20
MAX_READ_BYTES = FIT_MAX_PAYLOAD_BYTES // 2   # one S_READ reply stays well inside FIT's limit

_homes: dict[str, str] = {}   # path -> sComponent


def _call(path: str, op: int, args: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    vm = _this()
    with vm.lock:
        home = _homes.get(path)
        if home is None:
            home = _homes[path] = vm.ep.call_args(GLOBAL_ID, Op.GSM_LOOKUP,
                                                  {"path": path})[0]["id"]
        return vm.ep.call_args(home, op, {"path": path, **args})


def size(path: str) -> int:
    return _call(path, Op.S_STAT, {})[0]["size"]


def read(path: str, offset: int, length: int) -> bytes:
    if length > MAX_READ_BYTES:
        raise ValueError(f"read at most {MAX_READ_BYTES} bytes at once (chunks() reads more)")
    return bytes(_call(path, Op.S_READ, {"offset": offset, "length": length})[1])


def chunks(path: str, chunk: int = CHUNK_BYTES) -> Iterator[bytes]:
    chunk = min(chunk, MAX_READ_BYTES)
    offset, end = 0, size(path)
    while offset < end:
        data = read(path, offset, min(chunk, end - offset))
        if not data:
            return   # truncated meanwhile
        offset += len(data)
        yield data


__all__ = ["size", "read", "chunks"]
