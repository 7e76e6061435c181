"""A program's files on the rack's sComponents, from inside `splitrack run`.

    size(path) -> int                        S_STAT
    read(path, offset, length) -> bytes      S_READ (fewer bytes at the end of the file)
    chunks(path, chunk=1 MiB) -> iterator    the whole file, in order, `chunk` bytes a time
    write(path, data, offset=0) -> int       S_OPEN (create) + S_WRITE, 1 MiB a message
    truncate(path, length=0)                 S_TRUNCATE

write() is pwrite's: it creates the file if there is none (not its directory),
writes all of `data` at `offset`, and never shortens the file (truncate does).

LegoOS style: storage is a component of its own. GSM (GSM_LOOKUP, cached)
names the sComponent that holds a path; every request then goes to it over
the process's FIT endpoint (the one its memory uses, splitrack.guest.vm). Paths
are relative to that sComponent's root; errors are the errno Linux gives
(FileNotFoundError, PermissionError for a path outside the root, ...).
"""

import errno
from collections.abc import Callable, Iterator
from typing import Any

from fit_rpc import GLOBAL_ID, Op
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES
from splitrack.guest.vm import _this

CHUNK_BYTES = 1 << 20
MAX_READ_BYTES = FIT_MAX_PAYLOAD_BYTES // 2   # one S_READ reply stays well inside FIT's limit
MAX_WRITE_BYTES = FIT_MAX_PAYLOAD_BYTES // 2  # and one S_WRITE request

_homes: dict[str, str] = {}   # path -> sComponent


def _call(path: str, op: int, args: dict[str, Any],
          data: bytes = b"") -> tuple[dict[str, Any], Any]:
    vm = _this()
    with vm.lock:
        home = _homes.get(path)
        if home is None:
            home = _homes[path] = vm.ep.call_args(GLOBAL_ID, Op.GSM_LOOKUP,
                                                  {"path": path})[0]["id"]
        return vm.ep.call_args(home, op, {"path": path, **args}, data)


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


def write(path: str, data: bytes, offset: int = 0) -> int:
    """All of `data` at `offset` of `path` (created if missing); its length."""
    _call(path, Op.S_OPEN, {"create": True})
    return write_pieces(lambda at, piece: _call(path, Op.S_WRITE, {"offset": at}, piece)[0],
                        data, offset, repr(path))


def write_pieces(write_piece: Callable[[int, memoryview], dict[str, Any]], data: Any,
                 offset: int, where: str) -> int:
    """All of `data` from `offset`, MAX_WRITE_BYTES a message: write_piece(at,
    piece) sends one S_WRITE and returns its answer. Also `splitrack cp`'s."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        written = write_piece(offset + done, view[done:done + MAX_WRITE_BYTES])["written"]
        if written <= 0:
            raise OSError(errno.EIO, f"{where}: the sComponent wrote nothing at {offset + done}")
        done += written
    return done


def truncate(path: str, length: int = 0) -> None:
    _call(path, Op.S_TRUNCATE, {"length": length})


__all__ = ["size", "read", "chunks", "write", "truncate"]
