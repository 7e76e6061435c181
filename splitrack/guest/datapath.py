"""The data-path interface: how a connected bsdSocketStub's bytes travel.

A stub (stub.py) holds the socket API and the connection's state; its bytes
take one of three paths, each a class that implements `DataPath`:

    NicPath   nic_path.py    through a bsdSocketSkeleton on an nComponent: DDIO
                             (the extCache lines) or DMA (the mComponent)
    PipePath  pipe_path.py   a shortcut to a stub of the same pComponent: a pipe
    FitPath   fit_path.py    a shortcut to a stub of another pComponent: a FIT
                             channel of the two stubs' own

The stub calls a path's methods with its lock held, but for the waits (which
take the lock themselves when they must). A path holds the stub's face
(face.py: `stub._face`: wake, wake_senders, drained, set_eof, set_error,
enqueue_accept, take_over, readable, can_send, park_readable, park_writable,
option, runtime, lock, dead), never the stub itself.

NicPath alone also has announce_held(), pump() and sync_packing() (message
packing, and the inbox a program that only sends must still read), which the
stub calls only on a connection through an nComponent; FitPath alone has
check_peer() (a peer whose process died), which the runtime calls.
"""

from typing import Any, Protocol


class DataPath(Protocol):
    name: str          # "ddio" | "dma" | "pipe" | "fit": what the path is (stats, traces)
    pump_due: bool     # the stub should read the process's inbox once it lets go its lock
    packs: bool        # sends may be held back (a NicPath, packing on): the stub then
                       # tries a send as one call on its C state `c` (sending.py)

    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        """Up to `want` received bytes: bytes, or (view) the count read into view;
        None if none is buffered now (at EOF too: the stub decides what that means)."""

    def take_next(self, want: int, view: memoryview | None, deadline: float | None
                  ) -> Any:
        """A blocking recv's fast lane, called unlocked while the stub has no error,
        EOF or shutdown: the next bytes straight to the caller (bytes, or the count
        read into view), or None for the general way (take(), then a wait). FitPath:
        the next channel message, copied from the ring; PipePath: the wait for the
        pipe, then take(); NicPath: the inbox's next message served, then take()."""

    def put(self, chunk: memoryview) -> int:
        """Send what the window takes of `chunk` now, without blocking: the count."""

    def pushed(self, op: int, payload: memoryview) -> None:
        """A push for this connection's data (STUB_DATA, STUB_SENT, a channel's credit)."""

    def pending(self) -> int:
        """The received bytes buffered now, that a take() would find (FIONREAD)."""

    def can_send(self) -> bool:
        """Whether a put() would take something now."""

    def roomy(self) -> bool:
        """Whether fileno() says writable: a third of the window free (a stream's
        POLLOUT, as Linux's TCP: stub.py's _writable)."""

    def wait_readable(self, deadline: float | None) -> bool:
        """Until the stub is readable (True) or the deadline passes (False); the stub's
        lock is not held."""

    def wait_writable(self, deadline: float | None) -> bool:
        """Until the stub can send (True) or the deadline passes (False); unlocked."""

    def shutdown(self, how: int) -> None:
        """SHUT_WR / SHUT_RDWR on a shortcut: the peer reads EOF (a NicPath's
        skeleton is told by the stub itself, N_SHUTDOWN)."""

    def release(self) -> None:
        """The connection closed: the path's buffers, channel or pipe go."""
