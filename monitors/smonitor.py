"""The sMonitor: the storage component sN, a stateless file service.

LegoOS style: every request carries its path (relative to the sComponent's
root); the service keeps no open files between requests. Ops and payloads:
docs/protocol.md, 0x05xx. Every path goes through StorageRoot (the trust
boundary) first. Errors are the errno Linux gives for the same call, with the
client's path (never the host path) in the message.

Slices (monitors/slices.py): every slice has a root of its own, `slices/NAME/`
under this one (made when first used). A process of a slice sees that as its
root, so it reaches nothing of another's; a free process sees this root without
`slices/` (EACCES); clients (the tools, the rack manager) see all of it.
"""

import errno
import logging
import os
import stat
from collections.abc import Callable
from typing import Any

from fit_rpc import Message, Op, codec
from fit_rpc.codec import need
from fit_rpc.identity import kind_of
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES
from monitors.core import Monitor
from monitors.storage_root import StorageRoot

_MAX_READ = FIT_MAX_PAYLOAD_BYTES - 64  # room for the reply's args
SLICES_DIR = "slices"   # under the root: each slice's own root, slices/NAME/


class SMonitor(Monitor):
    kind = "s"

    def setup(self) -> None:
        self.store = StorageRoot(self.config["root"])
        self.free = StorageRoot(self.config["root"], hidden=SLICES_DIR)   # free processes'
        self.sliced: dict[str, StorageRoot] = {}    # slice name -> its root
        for op, fn in (
            (Op.S_OPEN, self.s_open), (Op.S_READ, self.s_read), (Op.S_WRITE, self.s_write),
            (Op.S_STAT, self.s_stat), (Op.S_TRUNCATE, self.s_truncate),
            (Op.S_UNLINK, self.s_unlink), (Op.S_MKDIR, self.s_mkdir),
            (Op.S_RMDIR, self.s_rmdir), (Op.S_LISTDIR, self.s_listdir),
            (Op.S_RENAME, self.s_rename),
        ):
            self.ep.on(op, self._serving(_client_errors(fn, self.log)))

    def resources(self) -> dict[str, Any]:
        return {"root": self.store.root}

    def _serving(self, fn: Callable[[StorageRoot, dict, memoryview], Any]
                 ) -> Callable[[Message], bytes]:
        """A handler that runs fn(the sender's root, args, data)."""

        def handle(msg: Message) -> bytes:
            args, data = msg.args()
            result = fn(self.root_of(msg.src), args, data)
            return codec.encode(*result) if isinstance(result, tuple) else codec.encode(result)

        handle.__name__ = fn.__name__
        return handle

    def root_of(self, who: str) -> StorageRoot:
        """The root a sender sees: its slice's, the free one, or all (not a process)."""
        who = self.as_process(who)
        if kind_of(who) != "process":
            return self.store
        name = self.slice_of_sender(who)
        if name is None:
            return self.free
        if name not in self.sliced:
            self.sliced[name] = StorageRoot(os.path.join(self.store.root, SLICES_DIR, name))
        return self.sliced[name]

    def s_open(self, root: StorageRoot, args: dict[str, Any], data: memoryview
               ) -> dict[str, Any]:
        flags = os.O_WRONLY | os.O_TRUNC if args.get("truncate") else os.O_RDONLY
        if args.get("create"):
            flags |= os.O_CREAT | (os.O_EXCL if args.get("exclusive") else 0)
        os.close(os.open(_path(root, args), flags, 0o644))
        return self.s_stat(root, args, data)

    def s_read(self, root: StorageRoot, args: dict[str, Any], data: memoryview
               ) -> tuple[dict, bytes]:
        offset, length = _nonneg(args, "offset"), _nonneg(args, "length")
        if length > _MAX_READ:
            raise OSError(errno.EINVAL, f"length {length} over the FIT limit of {_MAX_READ}")
        fd = os.open(_path(root, args), os.O_RDONLY)
        try:
            return {}, os.pread(fd, length, offset)
        finally:
            os.close(fd)

    def s_write(self, root: StorageRoot, args: dict[str, Any], data: memoryview
                ) -> dict[str, Any]:
        offset = _nonneg(args, "offset")
        fd = os.open(_path(root, args), os.O_WRONLY)
        try:
            return {"written": os.pwrite(fd, data, offset)}
        finally:
            os.close(fd)

    def s_stat(self, root: StorageRoot, args: dict[str, Any], data: memoryview
               ) -> dict[str, Any]:
        st = os.stat(_path(root, args))
        kind = ("dir" if stat.S_ISDIR(st.st_mode)
                else "file" if stat.S_ISREG(st.st_mode) else "other")
        return {"size": st.st_size, "mode": stat.S_IMODE(st.st_mode),
                "mtime_ns": st.st_mtime_ns, "type": kind}

    def s_truncate(self, root: StorageRoot, args: dict[str, Any], data: memoryview) -> None:
        os.truncate(_path(root, args), _nonneg(args, "length"))

    def s_unlink(self, root: StorageRoot, args: dict[str, Any], data: memoryview) -> None:
        os.unlink(_path(root, args, follow=False))

    def s_mkdir(self, root: StorageRoot, args: dict[str, Any], data: memoryview) -> None:
        os.mkdir(_path(root, args, follow=False))

    def s_rmdir(self, root: StorageRoot, args: dict[str, Any], data: memoryview) -> None:
        os.rmdir(_path(root, args, follow=False))

    def s_listdir(self, root: StorageRoot, args: dict[str, Any], data: memoryview
                  ) -> dict[str, Any]:
        return {"entries": sorted(os.listdir(_path(root, args)))}

    def s_rename(self, root: StorageRoot, args: dict[str, Any], data: memoryview) -> None:
        src = root.resolve(need(args, "src", str), follow=False)
        dst = root.resolve(need(args, "dst", str), follow=False)
        os.rename(src, dst)


def _path(root: StorageRoot, args: dict[str, Any], follow: bool = True) -> str:
    return root.resolve(need(args, "path", str), follow=follow)


def _nonneg(args: dict[str, Any], name: str) -> int:
    value = need(args, name, int)
    if value < 0:
        raise OSError(errno.EINVAL, f"argument {name!r} must not be negative")
    return value


def _client_errors(fn: Callable[[StorageRoot, dict, memoryview], Any],
                   log: logging.Logger) -> Callable[[StorageRoot, dict, memoryview], Any]:
    """Re-raise file system errors with the client's path, not the host's; each
    request and its failure is a DEBUG line."""

    def wrapped(root: StorageRoot, args: dict[str, Any], data: memoryview) -> Any:
        log.debug("%s %s (+%d bytes)", fn.__name__, args, len(data))
        try:
            return fn(root, args, data)
        except OSError as exc:
            log.debug("%s %s: %s", fn.__name__, args, exc)
            if exc.filename is None:
                raise
            shown = args.get("path", f"{args.get('src')} -> {args.get('dst')}")
            raise OSError(exc.errno, f"{exc.strerror}: {shown!r}") from None

    wrapped.__name__ = fn.__name__
    return wrapped
