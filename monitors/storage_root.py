"""Confinement of sComponent paths to one root directory (the trust boundary).

Every path a program sends to an sComponent passes through `StorageRoot.resolve`
before any file system call, as xv6's sysfile.c checks arguments because it
does not trust user code. Rules:
- the path is relative to the root ("" is the root itself) and a str without NUL;
- absolute paths, `..` that climbs out, and symlinks whose target lies outside
  the root are refused with EACCES; nothing outside the root is ever touched;
- resolve(path, follow=False) is for calls that act on the name itself
  (unlink, rmdir, rename, mkdir): the parent must resolve inside the root and
  the root itself cannot be the target.
- StorageRoot(root, hidden="slices"): the directory root/slices is outside too
  (a free process's view: the slices' own roots are there, monitors/smonitor.py).
FIT clients cannot create symlinks (no op does), so a link under the root was
put there by the rack's operator; the check still refuses it if it leads out.
"""

import errno
import os


class StorageRoot:
    def __init__(self, root: str, hidden: str | None = None):
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:   # e.g. a file is there
            raise OSError(exc.errno, f"storage root {root}: cannot be a directory: "
                                     f"{exc.strerror}") from None
        self.root = os.path.realpath(root)
        self.hidden = os.path.join(self.root, hidden) if hidden else None

    def resolve(self, path: object, *, follow: bool = True) -> str:
        if not isinstance(path, str):
            raise OSError(errno.EINVAL, "path must be a string")
        if "\0" in path or path.startswith("/"):
            raise OSError(errno.EACCES, f"path {path!r} is outside the storage root")
        full = os.path.normpath(os.path.join(self.root, path))
        if not self._inside(full):
            raise OSError(errno.EACCES, f"path {path!r} is outside the storage root")
        if follow:
            real = os.path.realpath(full)
            if not self._inside(real):
                raise OSError(errno.EACCES, f"path {path!r} leads outside the storage root")
            return real
        if full == self.root:
            raise OSError(errno.EACCES, "the storage root itself cannot be the target")
        parent = os.path.realpath(os.path.dirname(full))
        if not self._inside(parent):
            raise OSError(errno.EACCES, f"path {path!r} leads outside the storage root")
        return os.path.join(parent, os.path.basename(full))

    def _inside(self, path: str) -> bool:
        if self.hidden and (path == self.hidden or path.startswith(self.hidden + os.sep)):
            return False
        return path == self.root or path.startswith(self.root + os.sep)
