"""FIT errors: codes on the wire, typed exceptions in the caller.

On the wire an error is a Linux errno in the header's `err` field plus a UTF-8
message (docs/protocol.md, "Errors"). `from_code` is the one place that turns a
code back into an exception:

- FIT-level failures raise a `FitError` subclass. All are `OSError`s, so
  `except OSError` catches everything a call can raise.
- Service-level failures (a file that does not exist, a bad argument, no
  memory) raise the builtin `OSError` for the errno, e.g. `FileNotFoundError`
  for ENOENT, exactly as the same failure on a local Linux call would.

A handler signals a service error by raising `OSError(errno, message)`.
"""

import errno as _errno


class FitError(OSError):
    """A FIT-level failure: the message did not get the service it asked for."""

    ERRNO = _errno.EIO

    def __init__(self, message: str):
        super().__init__(self.ERRNO, message)


class MalformedMessage(FitError):
    """The frame is not a FIT message (short, bad magic, bad length, extra frames).

    Raised by the receiver's parser and, in the caller, when the peer answers EBADMSG.
    """

    ERRNO = _errno.EBADMSG


class UnknownOp(FitError):
    """The peer has no handler for this op (it is not that component's op)."""

    ERRNO = _errno.ENOSYS


class MessageTooLarge(FitError):
    """The payload exceeds FIT's 2 MiB limit. Raised before anything is sent."""

    ERRNO = _errno.EMSGSIZE


class UnknownDestination(FitError):
    """No component with that id is registered in the rack."""

    ERRNO = _errno.ENXIO


class FitTimeout(FitError, TimeoutError):
    """No reply within the caller's timeout: the peer is slow, stuck or dead.

    Never travels on the wire. The link is reset, so a late reply is dropped.
    """

    ERRNO = _errno.ETIMEDOUT


class PeerUnreachable(FitError):
    """No connection to the peer could be made within the caller's timeout
    (its process is not running, or its inbox address is wrong). Nothing was sent."""

    ERRNO = _errno.EHOSTUNREACH


class PeerMoved(PeerUnreachable):
    """The address we knew for the peer is now another process's: the one we knew is
    gone, and a restarted one may serve under a new address (ask the directory)."""


_BY_CODE: dict[int, type[FitError]] = {
    cls.ERRNO: cls
    for cls in (MalformedMessage, UnknownOp, MessageTooLarge, UnknownDestination)
}


def from_code(code: int, message: str) -> OSError:
    """The exception a caller raises for an error reply with errno `code`."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    return OSError(code, message)  # OSError picks the builtin subclass for the errno
