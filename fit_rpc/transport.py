"""The one interface between a FIT endpoint and the interconnect under it.

A transport moves opaque frames; it knows nothing of ops or handlers (that is
endpoint.py), and of headers only what a native step of its own reads and
writes (shm: native/fitserve.h; Arrival.head and answer() below). Two
implement it: shm (shm_transport.py: rings in shared memory, one host, the
default) and zmq (zmq_transport.py: ipc on one host, for comparison; tcp
across hosts). `make()` picks one by the address's scheme.
Nothing above fit_rpc touches a transport but through Endpoint and Channel.
See docs/protocol.md, "Transports".

Contract:
    address          where peers reach this endpoint's inbox (None: it has none
                     and can only call)
    send(peer, address, frame, timeout_s, head=b"")
                     queue one frame (head, then frame) for `peer`'s inbox;
                     PeerUnreachable if none could be queued within timeout_s (no
                     connection; a full ring that stays full). Never drops.
    reply(route, frame, head=b"")
                     one frame (head, then frame) back to the sender of an
                     Arrival; never blocks long (a sender that reads no more
                     has its reply dropped, and counted `reply_dropped`)
    recv_inbound(timeout_s) -> Arrival | None
                     the next request or one-way frame, waiting up to timeout_s
                     (0: only what is there; None: forever). Arrival.head is
                     (kind, op, seq) if the transport read the header itself and
                     found a well-formed, untraced request or one-way message
                     (the endpoint need not parse it again, nor count it: the
                     transport counts it once answer() or done() releases it),
                     else None
    answer(arrival, op, seq, frame) -> bool
                     reply() and done() in one step where the transport can
                     (shm: native/fitserve.h): a reply with err 0, untraced, its
                     header written by the transport, to an arrival with a head,
                     and counted by the transport. False: not done (no room now;
                     the default), so the caller goes on with reply() and done()
    done(arrival)    the endpoint has finished with the arrival's frames (shm:
                     the handler read the frame in place; its slot is freed now)
    recv_reply(peer, timeout_s, serve) -> frame | None
                     the next frame on the link to `peer` (a copy, the caller's
                     to keep). None: nothing within timeout_s, or (serve) a
                     request waits in the inbox, which the caller serves first
    call(peer, op, seq, frame, timeout_s, serve, meanwhile=None)
                     -> memoryview | bytes | bool
                     send() of an untraced REQUEST (op, seq; its header
                     written by the transport) then recv_reply(), in one step
                     where the transport can (shm: native/fitserve.h), on a
                     link that is up. A memoryview: the reply's payload (a
                     copy, the caller's), the transport having read the header:
                     a well-formed reply to seq, err 0, untraced, and the
                     call counted by the transport (counted()). bytes: the
                     first frame back, anything else (the caller parses it).
                     True: sent, nothing back yet (the caller goes on with
                     recv_reply); False: nothing sent (the caller sends). The
                     default is False. meanwhile(): run once the request is
                     out, before the wait (the caller's work that need not
                     come before the peer's); never run if nothing was sent
    call_native(peer, seq, step, timeout_s, serve) -> int | bytes | None
                     a call made in one native call by `step`, for a caller
                     whose request and reply live in C (an extCache line's
                     miss: native/xcmiss.h): step(caller, tx, seq, timeout_ns)
                     gets the link's fs_caller and ring (native/fitserve.h)
                     and returns a STEP_ code, or a ring's -errno (-EBADMSG:
                     the link breaks, PeerUnreachable). The STEP_ code is
                     returned, but STEP_READ, what came back and was not
                     taken: that frame (bytes). None: no link up (nothing
                     sent); the default. STEP_DONE: the step counted the call
                     where the transport's counted() finds it
    post(peer, op, frame, timeout_s) -> bool
                     send() of an untraced ONEWAY message on a link that is
                     up, its header written and the message counted by the
                     transport (shm: native/fitserve.h, fs_post); False:
                     nothing sent (the caller sends); the default
    counted() -> [(peer, op, tx_msgs, tx_bytes, rx_msgs, rx_bytes)]
                     what the transport counted itself since the last
                     counted() (the calls call() and call_native() made in
                     full, post()'s messages, the arrivals with a head and
                     answer()'s replies: shm, in C); the endpoint's counters
                     take them when reported. The default: nothing
    fileno(), arm(), disarm(), pending()
                     readiness, for a loop that also waits on other fds (epoll,
                     select, asyncio): call arm(); if True nothing waits, so sleep
                     until fileno() is readable; then disarm() and take what
                     waits with recv_inbound(0) until None. arm() False: do not
                     sleep, take what waits. pending(): whether anything waits.
                     With a fabric model ([fabric], fabric.py) a record is not
                     there until its delivery time: fileno() is then a Waker
                     (the doorbell's eventfd and a timerfd that arm() sets to
                     the next record's due time), so it turns readable when a
                     record is due, not when it was written.
    forget(peer)     drop the link to `peer` and whatever is queued on it
    channel(peer, linger_s, sender) -> a channel end (below)
    new_region(name, size) -> (mmap, handle)
                     memory this endpoint owns and may grant to peers
    grant_region(route, handle) -> dict
                     give the sender of an Arrival access to a region; what the
                     dict holds goes into the reply, for map_region
    map_region(peer, answer, size) -> mmap
                     the region `peer` granted us (answer: its reply)
    inbox_rings(), out_ring(peer), link_closed, serve_natively(native),
    inbox_bell()     shm only, for a native data plane that reads the inbound
                     rings and writes a peer's ring itself, or is the inbox's
                     wait, and says where it waits on the inbox's bell word
                     (shm_transport.py); Endpoint.rings() is None on a
                     transport without them
    count            a callable the endpoint sets: count(name) bumps an error counter
    peer_gone        a callable the endpoint sets: peer_gone(id) when a peer's
                     last link closed (its process ended)
    add_counts       a callable the endpoint sets: add_counts(rows) takes what a
                     link that closes counted last (rows as counted() gives them),
                     before peer_gone
    close()          release everything; unusable afterwards

Identity: Arrival.pid is the sender's pid as the kernel vouched for it when
its link was made (shm: SO_PEERCRED), and Arrival.peer an id checked against
it (identity.py). zmq knows no pids (None): its ids are what senders say.

A channel end (Endpoint.channel): one-way frames in order between two objects.
    address; connect(peer_end_address); send(frame, timeout_s, head=b"");
    post(op, frame, timeout_s, head=b"") where the transport can (shm): send() of an
    untraced one-way message whose header the transport writes, and which it
    counts, itself;
    recv(timeout_s) -> bytes | (op, memoryview) | None (the latter: the transport
    read the header itself and found a well-formed, untraced one-way message, as
    shm does: native/fitserve.h, and counted it); counted() -> [(op, tx_msgs,
    tx_bytes, rx_msgs, rx_bytes)] since the last counted(), where it has post
    (what post and recv counted); fileno(), arm(), disarm(); pending(): whether a frame
    waits (a recv(0) then takes it, shm unless a fabric model holds it back);
    close()
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple

Frame = bytes | bytearray | memoryview

# call_native's steps say (native/xcmiss.h's codes map onto these):
STEP_DONE = 0     # the request made and its plain reply taken, in C
STEP_UNSENT = 1   # nothing sent: the link's ring had no room
STEP_SENT = 2     # the request is out; the wait ended otherwise, nothing read
STEP_READ = 3     # the request is out; what came back is not the plain reply (read)
STEP_STOPPED = 4  # nothing sent: the step stopped before the call, for a reason of its own


class Arrival(NamedTuple):
    peer: str          # the sender's component id
    route: Any         # opaque: where reply() sends the answer
    frames: list       # normally one frame; more is a malformed message
    pid: int | None    # the sender's pid, vouched for by the kernel (None: unknown)
    link: Any          # the transport's connection it came on (None: no such thing)
    head: tuple[int, int, int] | None = None   # (kind, op, seq), if the transport read it


class Transport(ABC):
    address: str | None

    @abstractmethod
    def send(self, peer: str, address: str, frame: Frame, timeout_s: float,
             head: bytes = b"") -> None: ...

    @abstractmethod
    def reply(self, route: Any, frame: Frame, head: bytes = b"") -> None: ...

    @abstractmethod
    def recv_inbound(self, timeout_s: float | None) -> Arrival | None: ...

    def answer(self, arrival: Arrival, op: int, seq: int, frame: Frame) -> bool:
        return False

    @abstractmethod
    def done(self, arrival: Arrival) -> None: ...

    @abstractmethod
    def recv_reply(self, peer: str, timeout_s: float, serve: bool) -> Frame | None: ...

    def call(self, peer: str, op: int, seq: int, frame: Frame, timeout_s: float, serve: bool,
             meanwhile: Callable[[], None] | None = None) -> memoryview | bytes | bool:
        return False

    def call_native(self, peer: str, seq: int, step: Callable[[Any, Any, int, int], int],
                    timeout_s: float, serve: bool) -> int | bytes | None:
        return None

    def post(self, peer: str, op: int, frame: Frame, timeout_s: float) -> bool:
        return False

    def counted(self) -> list[tuple[str, int, int, int, int, int]]:
        return []

    @abstractmethod
    def fileno(self) -> int: ...

    @abstractmethod
    def arm(self) -> bool: ...

    @abstractmethod
    def disarm(self) -> None: ...

    @abstractmethod
    def pending(self) -> bool: ...

    @abstractmethod
    def forget(self, peer: str) -> None: ...

    @abstractmethod
    def channel(self, peer: str, linger_s: float, sender: Any = None) -> Any: ...

    @abstractmethod
    def new_region(self, name: str, size: int) -> tuple[Any, Any]: ...

    @abstractmethod
    def grant_region(self, route: Any, handle: Any) -> dict[str, Any]: ...

    @abstractmethod
    def map_region(self, peer: str, answer: dict[str, Any], size: int) -> Any: ...

    @abstractmethod
    def close(self) -> None: ...


CURVE_ENV = "SPLITRACK_CURVE"   # the rack's CURVE key file (tcp), for processes it starts


def make(local_id: str, bind: str | None, scheme: str | None, poll_us: int,
         keys: str | None = None) -> Transport:
    """The transport for an address scheme: shm:// is shared memory, ipc:// and
    tcp:// are ZeroMQ (`keys`: the rack's CURVE key file, for tcp). (The module is
    imported only when its scheme is used.)"""
    scheme = scheme or (bind.split("://", 1)[0] if bind else "shm")
    if scheme == "shm":
        from fit_rpc.shm_transport import ShmTransport

        return ShmTransport(local_id, bind, poll_us)
    if scheme in ("ipc", "tcp"):
        from fit_rpc.zmq_transport import ZmqTransport

        return ZmqTransport(local_id, bind, keys)
    raise ValueError(f"no FIT transport for scheme {scheme!r} (have: shm, ipc, tcp)")
