"""The one interface between a FIT endpoint and the interconnect under it.

A transport moves opaque frames; it knows nothing of headers, ops or handlers
(that is `endpoint.py`). Callers of `Endpoint` never see a transport, so a new
one (RDMA verbs: one RC queue pair per peer, a ring of registered receive
buffers as the inbox, two-sided SEND/RECV for these frames) slots in here
without touching them. See docs/protocol.md, "Transports".

Contract:
    address          where peers reach this endpoint's inbox (None: no inbox,
                     the endpoint can only call)
    send(peer, address, frame, timeout_s)
                     queue one frame for `peer`'s inbox; raise PeerUnreachable
                     if no connection is up within timeout_s; never blocks longer
    reply(route, frame)
                     send one frame back to the sender of an inbound frame;
                     never blocks (a vanished sender's reply is dropped)
    recv_inbound(timeout_s) -> Arrival | None
                     the next request/one-way frame from the inbox, waiting up
                     to timeout_s (0: only what is there; None: forever)
    recv_reply(peer, timeout_s) -> list | None
                     the next frames on the link to `peer`, waiting at most
                     min(timeout_s, a short slice): None means "nothing yet", so
                     the caller can serve its inbox between slices
    forget(peer)     drop the link to `peer` and anything queued on it
    close()          release everything; the transport is unusable afterwards
"""

from abc import ABC, abstractmethod
from typing import NamedTuple

Frame = bytes | memoryview


class Arrival(NamedTuple):
    peer: str       # the component id of the sender
    route: bytes    # opaque handle for reply()
    frames: list    # normally one frame; more is a malformed message


class Transport(ABC):
    address: str | None

    @abstractmethod
    def send(self, peer: str, address: str, frame: Frame, timeout_s: float) -> None: ...

    @abstractmethod
    def reply(self, route: bytes, frame: Frame) -> None: ...

    @abstractmethod
    def recv_inbound(self, timeout_s: float | None) -> Arrival | None: ...

    @abstractmethod
    def recv_reply(self, peer: str, timeout_s: float) -> list | None: ...

    @abstractmethod
    def forget(self, peer: str) -> None: ...

    @abstractmethod
    def close(self) -> None: ...
