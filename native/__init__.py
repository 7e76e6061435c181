"""native: the C parts of splitrack, built with cffi in API mode at install time.

    extcache.h / extcache.c     the pComponent's extCache (shared-memory, set-associative)
    victim.c, xcflush.c         ... its victim cache; its flush and invalidate
    extcache.py                 its Python binding: maps a segment, raises on C errors
    nring.h / nring.c           the nComponent's DRAM ring (kernel socket <-> ring)
    nring.py                    its Python binding
    ddio.h / ddio.c             dDDIO's copies: DRAM ring <-> a process's extCache lines
    ddio.py                     its Python binding
    dma.h / dma.c / dma.py      dDMA's copies: DRAM ring <-> a process's ring in an arena
    fitring.h / fitring.c       FIT's message rings and doorbells in shared memory
    fitwait.c                   ... waiting on them: spin, bell, sleep
    fitring.py                  its Python binding (ring.py: a Ring; waitset.py: a WaitSet)
    stubpath.h / stubpath.c     a bsdSocketStub's hot path: a send or a recv in one call
    stubpath.py                 its Python binding
    fastrecv.h / fastrecv.c     ... a native program's recv of bytes already there, in C
    skelpath.h / skelpath.c     the nComponent's data plane: its skeletons' hot path
    skelpath.py                 its Python binding
    rackmem.h                   a program's heap in rack memory (splitrack run --memory rack):
    pager.c                     ... its userfaultfd fault handler, through the extCache
    rackalloc.c                 ... its allocator, and CPython's hooks into it
    preload.c                   the native interposer (LD_PRELOAD): a C program's sockets
    preload_socket.c            ... its socket calls; preload_fd.c: fcntl, dup, poll, epoll
    preload_memory.c            ... its malloc and mmap for --memory rack
    guest.h                     ... the stub's calls it makes (module _guest: cffi embedding)
    build.py                    the cffi build script (setup.py: cffi_modules)
"""

import os
from importlib import import_module
from types import ModuleType


def load(module: str, what: str) -> ModuleType:
    """A built C module (native._extcache...), or an ImportError that says what to do."""
    try:
        return import_module(f"native.{module}")
    except ImportError as exc:  # e.g. `python -c` in the source checkout, which shadows it
        raise ImportError(
            f"splitrack's {what} is not built next to {os.path.dirname(__file__)}: install "
            "splitrack with pip (`pip install .`, or `pip install -e .` to develop), and do not "
            "run programs from a directory that holds a copy of its sources") from exc
