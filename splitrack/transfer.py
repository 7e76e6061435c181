"""Copy files between this host and a rack's sComponents (`splitrack cp`).

    remote("s0:dir/f") -> ("s0", "dir/f")    an sComponent path; None for a local one
    upload(ep, sid, local, path) -> (path, n)      local file -> sid:path, n bytes
    download(ep, sid, path, local) -> (local, n)   sid:path -> local file

`ep` is a FIT endpoint of the rack (Rack.endpoint()). A remote path is relative
to the sComponent's root, which the sMonitor enforces (a path outside it is
refused with EACCES); it must be the sComponent GSM names for it, since that
is where a program's `splitrack.guest.files` looks. A target that is a directory
(or a remote "" / "dir/") gets the source's file name, as cp does. The bytes
go in S_WRITE / S_READ messages of at most files.MAX_*_BYTES (FIT's payload
limit). Every failure is a RackError of one line that names the side at fault;
an upload truncates and rewrites the whole target, a download writes the local
file only once the remote one was found.
"""

import os
import posixpath
import re
from typing import Any

from fit_rpc import GLOBAL_ID, Op
from splitrack.guest.files import MAX_READ_BYTES, MAX_WRITE_BYTES, write_pieces
from splitrack.rack import RackError

_REMOTE = re.compile(r"(s\d+):(.*)", re.S)


def remote(text: str) -> tuple[str, str] | None:
    """(sid, path) for "sN:PATH"; None for a local path (./s0:x is local)."""
    match = _REMOTE.fullmatch(text)
    return (match[1], match[2]) if match else None


def upload(ep: Any, sid: str, local: str, path: str) -> tuple[str, int]:
    try:
        src = open(local, "rb")
    except OSError as exc:
        raise RackError(f"{local}: {exc.strerror}") from None
    with src:
        path, kind = _target(ep, sid, path)
        if kind == "dir":
            path, kind = _target(ep, sid, posixpath.join(path, os.path.basename(local)))
        _call(ep, sid, path, Op.S_OPEN, {"create": True, "truncate": True})
        done = 0
        while chunk := _local(local, src.read, MAX_WRITE_BYTES):
            try:
                done += write_pieces(lambda at, piece: _call(
                    ep, sid, path, Op.S_WRITE, {"offset": at}, piece)[0], chunk, done,
                    f"{sid}:{path}")
            except OSError as exc:
                raise RackError(str(exc.strerror)) from None
    return path, done


def download(ep: Any, sid: str, path: str, local: str) -> tuple[str, int]:
    path, kind = _target(ep, sid, path)
    if kind != "file":
        raise RackError(f"{sid}:{path}: " + {None: "no such file",
                                             "dir": "is a directory"}.get(kind, "not a file"))
    if os.path.isdir(local):
        local = os.path.join(local, posixpath.basename(path))
    try:
        dst = open(local, "wb")
    except OSError as exc:
        raise RackError(f"{local}: {exc.strerror}") from None
    with dst:
        done = 0
        while True:
            _, data = _call(ep, sid, path, Op.S_READ, {"offset": done, "length": MAX_READ_BYTES})
            if not data:
                return local, done
            _local(local, dst.write, data)
            done += len(data)


def _target(ep: Any, sid: str, path: str) -> tuple[str, str | None]:
    """The path as a program names it ("" the root, no "./"), and what is there:
    "file", "dir", "other", or None (nothing yet). A path the sComponent refuses
    (outside its root), or that GSM places on another sComponent, is a RackError."""
    dir_hint = path.endswith("/")
    path = posixpath.normpath(path) if path else ""
    path = "" if path == "." else path
    try:
        kind = ep.call_args(sid, Op.S_STAT, {"path": path})[0]["type"]
    except FileNotFoundError:
        kind = None
    except OSError as exc:
        raise RackError(f"{sid}:{path}: {_why(exc, sid)}") from None
    if path:
        home = _call(ep, GLOBAL_ID, path, Op.GSM_LOOKUP, {})[0]["id"]
        if home != sid:
            raise RackError(f"{sid}:{path}: GSM places {path!r} on {home}, where a program's "
                            f"splitrack.guest.files looks for it; copy to {home}:{path}")
    if dir_hint and kind != "dir":
        raise RackError(f"{sid}:{path}/: " + ("no such directory" if kind is None
                                              else "not a directory"))
    return path, kind


def _call(ep: Any, cid: str, path: str, op: int, args: dict[str, Any],
          data: Any = b"") -> tuple[dict[str, Any], Any]:
    try:
        return ep.call_args(cid, op, {"path": path, **args}, data)
    except OSError as exc:
        where = f"{cid}:{path}" if cid != GLOBAL_ID else path
        raise RackError(f"{where}: {_why(exc, cid)}") from None


def _why(exc: OSError, cid: str) -> str:
    """The error's words, without the "cid: " the endpoint put in front."""
    text = exc.strerror or str(exc)
    return text.removeprefix(f"{cid}: ")


def _local(local: str, fn: Any, arg: Any) -> Any:
    try:
        return fn(arg)
    except OSError as exc:
        raise RackError(f"{local}: {exc.strerror}") from None
