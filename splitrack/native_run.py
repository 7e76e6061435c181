"""What a native program needs so that its sockets are the rack's (`splitrack run`).

The pMonitor starts every program with the interposer preloaded
(native/preload.c: LD_PRELOAD); a native program's TCP and UDP sockets are
then bsdSocketStubs, served by an interpreter the interposer starts inside it
(splitrack/guest/interposer.py). A Python program ignores it: its own
interpreter runs the drop-in module (splitrack/guest/rsocket.py).

    preload_env(env) -> dict     what to add to a program's environment
    refuse_static(argv, env, cwd)  ValueError for a program the interposer cannot
                                   enter (a statically linked binary): its sockets
                                   would be the host's, silently
"""

import os
import shutil
import site
import struct
import sys
import sysconfig
from importlib.util import find_spec

_PT_INTERP = 3   # an ELF program header: the program asks for a dynamic loader
# Asked once, at import: sysconfig fills its table on first use without a lock
# (Python 3.11), so two of the pMonitor's launch threads asking at once could see it
# half filled, LIBDIR None, and start a native program without its interpreter.
_LIBDIR, _LDLIBRARY = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")


def preload_env(env: dict[str, str]) -> dict[str, str]:
    """LD_PRELOAD first of the program's, and the interpreter the interposer starts:
    this one (its shared library, its home, where splitrack is installed). With
    SPLITRACK_MEMORY=rack (--memory rack) the interposer's malloc and mmap too
    (native/preload_memory.c); else the program's allocator stays its own."""
    names = ["native._preload", "native._guest"]
    if env.get("SPLITRACK_MEMORY") == "rack":
        names.append("native._preload_memory")
    specs = [find_spec(name) for name in names]
    if not all(spec is not None and spec.origin for spec in specs):
        raise ValueError("splitrack's native interposer is not built: reinstall splitrack "
                         "with pip")
    preload, guest, *memory = (spec.origin for spec in specs)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {
        "LD_PRELOAD": os.pathsep.join(p for p in (*memory, preload, env.get("LD_PRELOAD")) if p),
        "SPLITRACK_LIBPYTHON": _libpython(_LIBDIR, _LDLIBRARY),
        "SPLITRACK_PYTHONHOME": sys.base_prefix,
        "SPLITRACK_GUEST_SITE": os.pathsep.join([here, *site.getsitepackages()]),
        "SPLITRACK_GUEST_LIB": guest,
    }


def _libpython(libdir: str | None, library: str | None) -> str:
    """The interpreter's shared library, or a line that says there is none (which the
    interposer prints if a native program then makes a socket, and stops it)."""
    if libdir and library and ".so" in library:
        path = os.path.join(libdir, library)
        if os.path.exists(path):
            return path
    return (f"{sys.executable} has no shared library (a Python built without "
            "--enable-shared), so native programs cannot have rack sockets")


def refuse_static(argv: list[str], env: dict[str, str], cwd: str | None) -> None:
    """A statically linked program: ValueError, with the reason (nothing to interpose)."""
    if not argv:
        return
    path = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    if path is None:
        return   # not found: the launch itself says so
    if cwd and not os.path.isabs(path):
        path = os.path.join(cwd, path)
    if _static_elf(path):
        raise ValueError(f"{argv[0]} is a statically linked program: the rack cannot "
                         "interpose its sockets (LD_PRELOAD), so they would be the host's; "
                         "run a dynamically linked build")


def _static_elf(path: str) -> bool:
    """A 64-bit little-endian ELF program that asks for no dynamic loader (PT_INTERP)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return False   # a script, or not an ELF this machine runs
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    kinds = {struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum)
             if (i + 1) * phentsize <= len(table)}
    return _PT_INTERP not in kinds
