"""fileno() of a bsdSocketStub: a real descriptor whose readiness is exact.

`Bell` is the part of BsdSocketStub (stub.py) that keeps it so; its state is
the stub's. The descriptor is one end of a socketpair (`_fd`, the connection's
own; every handle's is a dup of it: handles.py), `_bell` the other end:

- readable exactly while data, EOF, an error or a connection waits: `_rung` is
  the state, and once the runtime's readiness is exact (a program selects, so
  fileno() was asked for, or a native program polled a rack socket) a byte
  written from `_bell` mirrors it (`wake`, `_hush`); before, nobody outside
  selects on it, and the two syscalls are saved;
- writable while a send would not block and (a stream) a third of its window
  is free, as Linux's TCP says (`_writable`): while it is not, the other
  direction (`_fd` to `_bell`) is kept full -- `_fd`'s SO_SNDBUF is the
  kernel's least, so one write fills it -- and drained when the window
  opens again, the socket breaks, shuts down or closes (`wake_senders`,
  `_sync_writable`).

A pipe shortcut's fileno() is the pipe's end, exact by itself (`_bell` None).
"""

import _socket
import os

_CLOG = bytes(65536)   # more than the pair's other direction holds: a write fills it, and
                      # a Unix stream's non-blocking write then takes what fits, a recv
                      # all there is (one syscall each way, not two: _sync_writable)


class Bell:
    """BsdSocketStub's fileno() and the readiness behind it."""

    __slots__ = ()   # (its state is the stub's)

    def fileno(self) -> int:
        if self._dead or self._gone:
            return -1   # as a closed socket's
        if not self._rt.exact:
            self._rt.go_threaded()
        return _socket.socket.fileno(self)   # this handle's descriptor (handles.py)

    def _ring(self) -> None:
        if not self._rung and self._bell is not None:   # a pipe's fileno rings by itself
            self._rung = True
            if self._rt.exact:
                self._bell.send(b"!")

    def _hush(self) -> None:
        if self._rung and self._bell is not None:
            self._rung = False
            if self._rt.exact:
                try:
                    os.read(self._fd, 16)
                except BlockingIOError:
                    pass   # rung before readiness went exact: no byte was written

    def _sync_bell(self, went_exact: bool) -> None:
        """The runtime's mode changed: readiness went exact (`went_exact`: the bell's
        byte mirrors `_rung` from now on), or an inbox thread started; whether the
        path holds sends back follows (nic_path.py, packing)."""
        with self._lock:
            if went_exact:
                if self._rung and not self._dead and self._bell is not None:
                    self._bell.send(b"!")
                self._sync_writable()
            sync = getattr(self._path, "sync_packing", None)
            if sync is not None:
                sync()

    def _wake_senders(self) -> None:
        """(lock held) What a sender waits for changed: waiters wake, and fileno()'s
        writability follows."""
        self._cond.notify_all()
        if self._rt.exact:
            self._sync_writable()

    def _sync_writable(self) -> None:
        if self._bell is None:   # a pipe's fileno is writable by itself
            return
        shut = self._path is not None and not self._writable()
        if shut == self._clogged:
            return
        self._clogged = shut
        try:
            if shut:
                while os.write(self._fd, _CLOG) == len(_CLOG):
                    pass
            else:
                while len(self._bell.recv(len(_CLOG))) == len(_CLOG):
                    pass
        except BlockingIOError:
            pass
