"""The flusher of an emulated process: held sends leave at most PACK_DELAY_S later.

`Flusher` is the part of the runtime (runtime.py) that message packing
(nic_path.py) relies on; its state is the runtime's. The flusher is a
thread, started the first time a stub holds sends back, that sends a batch
still held PACK_DELAY_S after its first byte, so that held bytes leave even
while the program computes. What tells it is the watch (native/stubpath.c,
sp_watch), a native thread that needs no interpreter lock: it sleeps until
the first held batch is due and rings the flusher only if that batch is
still held. A program that keeps sending sends its batches itself, so then
the watch wakes only itself and the flusher not at all (a Python thread that
woke to look every PACK_DELAY_S took the interpreter from a sending program:
30 % of its send() time). The flusher takes a stub's lock only to send, and
waits for it only once the batch is twice PACK_DELAY_S old (the watch rings
again meanwhile). A native program's waits (polled: inbox_reader.py) send
what is held themselves first (`announce_holders`), as a Python program's
waits on a socket do (nic_path.py).
"""

import os
import threading
import time
from typing import Any

from native import stubpath
from splitrack.guest import preloaded
from splitrack.params import PACK_DELAY_S


class Flusher:
    """The runtime's flusher: hold() and unhold() for the data paths."""

    def _init_flusher(self) -> None:
        self._holders: list[Any] = []     # data paths the watch watches, for the flusher
        self._watch: Any = None           # the watch (stubpath.sp_watch), once one holds
        self._flush_efd = -1              # ... which rings this when a batch is due
        self._flusher_start = threading.Lock()

    def hold(self, path: Any) -> None:
        """`path` (a NicPath, its stub's lock held) started holding a new batch back."""
        if self._watch is None:
            with self._flusher_start:   # one watch and one flusher, whichever thread holds first
                if self._watch is None:
                    self._start_flusher()
        if not path.c.watched:
            self._holders.append(path)
        stubpath.lib.sp_watch_add(self._watch, path.c)

    def unhold(self, path: Any) -> None:
        """`path` goes (its socket closed): the watch forgets it."""
        if self._watch is not None and path.c.watched:
            stubpath.lib.sp_watch_remove(self._watch, path.c)
            self._holders.remove(path)

    def announce_holders(self) -> None:
        """What every data path holds goes now: a native program's wait (poll_begin)
        may be for the answer to it. A path whose stub another thread is in a call on
        is left to that call, or to the flusher."""
        for path in list(self._holders):
            if path.held:
                lock = path.stub.lock
                if lock.acquire(blocking=False):
                    try:
                        path.announce_held()
                    finally:
                        lock.release()

    def _start_flusher(self) -> None:
        self._flush_efd = os.eventfd(0, os.EFD_CLOEXEC)
        watch = stubpath.lib.sp_watch_start(self._flush_efd)
        if watch == stubpath.ffi.NULL:
            code = stubpath.ffi.errno
            os.close(self._flush_efd)
            raise OSError(code, "the packing watch's thread")
        threading.Thread(target=self._flush_held, daemon=True,
                         name="splitrack-stub-flusher").start()
        self._watch = watch

    def _flush_held(self) -> None:
        """The flusher: what the watch says is due goes to its skeleton."""
        preloaded.signals_to_the_program()
        clock = time.monotonic
        while True:
            os.read(self._flush_efd, 8)   # (no interpreter lock while it waits)
            for path in list(self._holders):
                age = clock() - path.held_since   # a plain read: no lock to look
                if not path.held or age < PACK_DELAY_S:
                    continue   # sent by the program meanwhile, or a younger batch
                lock = path.stub.lock   # the program may be in a call on that socket:
                if not lock.acquire(blocking=age >= 2 * PACK_DELAY_S):   # the watch rings
                    continue                                             # again
                try:
                    path.announce_held()
                finally:
                    lock.release()
