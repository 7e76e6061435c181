"""A FIT call's common case in one native call (native/fitcall.c, fitserve.c's fs_call),
through its binding (WaitSet.call) and through the Endpoint that uses it: the request
goes out with its header written, the reply comes back read and its header checked,
and every other case is handed back untouched -- nothing sent when the ring is full,
the request sent when another ring or the time ends the wait, a reply too large left
in its ring, a reply that is not the plain one for this call marked so. Both ends of
a link are mapped here; a real rack answers the Endpoint's calls."""

import errno
import os
import signal
import struct
import threading
import time

import pytest

import fit_rpc.shm_transport  # noqa: F401  (states the header's constants to the C side)
from fit_rpc import Endpoint, Op
from fit_rpc.header import HEADER_SIZE, REPLY, REQUEST, pack, parse
from fit_rpc.params import FIT_CALL_COPY_BYTES
from helpers import fit_link, running_rack, small_spec, take
from native.fitring import SENT, UNSENT, Bell, Counts, RingBroken, WaitSet, ffi, landing

CAP = 64 * 1024


def link():
    """The caller's ends of one link (tx: its requests; back: the replies to it), the
    callee's ends (rx, reply) and the caller's bell."""
    ends = fit_link(CAP)
    return ends.out, ends.back, ends.rx, ends.reply, ends.caller


def waitset(bell: Bell, *rings, cap: int = 1024, counts: Counts | None = None):
    """A wait set of the rings, set up for calls (counted in `counts`); and the view
    of its landing."""
    ws = WaitSet(bell.word, bell.efd)
    ws.rings = list(rings)
    view, out = landing(cap)
    ws.calls(out, cap, [], 0.0, ffi.NULL if counts is None else counts.handle)
    return ws, view


def test_a_call_made_in_full_is_counted_in_c_and_one_handed_back_is_not():
    """fs_call counts a call whose reply came plain (its request, whether it sent it
    or fs_request did, and its reply, headers included: fitserve.h's fs_counts);
    what it hands back for Python to parse, Python counts."""
    tx, back, rx, reply, bell = link()
    counts = Counts()
    ws, _ = waitset(bell, back, counts=counts)
    assert reply.send(pack(REPLY, 5, 42, 6), b"answer")
    assert ws.call(tx, 5, 42, b"question", 1.0) > 0 and ws.plain
    assert tx.request(5, 43, b"q2")
    assert reply.send(pack(REPLY, 5, 43, 1), b"!")
    assert ws.call(None, 5, 43, b"q2", 1.0) > 0 and ws.plain
    assert reply.send(pack(REPLY, 5, 44, 2, err=errno.ENOENT), b"no")
    assert ws.call(tx, 5, 44, b"q3", 1.0) > 0 and not ws.plain
    assert ws.call(tx, 6, 45, b"q4", 0.01) == SENT
    assert counts.taken() == [(5, 2, 2 * HEADER_SIZE + 8 + 2, 2, 2 * HEADER_SIZE + 6 + 1)]
    assert counts.taken() == []


def test_the_reply_waiting_is_read_checked_and_the_request_is_out():
    tx, back, rx, reply, bell = link()
    assert reply.send(pack(REPLY, 5, 42, 6), b"answer")   # (there: a callee faster than us)
    ws, view = waitset(bell, back)
    n = ws.call(tx, 5, 42, b"question", 1.0)
    assert bytes(view[:n]) == pack(REPLY, 5, 42, 6) + b"answer"
    assert ws.plain   # the reply to seq 42, well-formed, err 0
    assert take(rx) == pack(REQUEST, 5, 42, 8) + b"question"   # its header written in C
    assert back.peek() is None   # consumed


@pytest.mark.parametrize("what, frame", [
    ("another call's reply", pack(REPLY, 5, 41, 2) + b"ok"),
    ("an error", pack(REPLY, 5, 42, 2, err=errno.ENOENT) + b"no"),
    ("a traced reply", pack(REPLY, 5, 42, 2, trace=9, event=1) + b"ok"),
    ("a request", pack(REQUEST, 5, 42, 2) + b"ok"),
    ("a lying length", pack(REPLY, 5, 42, 9) + b"ok"),
    ("garbage", b"not a FIT frame at all, nor its header"),
])
def test_anything_but_the_plain_reply_is_read_and_handed_back(what, frame):
    tx, back, rx, reply, bell = link()
    assert reply.send(b"", frame)
    ws, view = waitset(bell, back)
    n = ws.call(tx, 5, 42, b"q", 1.0)
    assert bytes(view[:n]) == frame, what
    assert not ws.plain, what


def test_a_request_sent_before_is_only_waited_for():
    tx, back, rx, reply, bell = link()
    assert tx.send(b"HEAD", b"question")   # the caller sent it, then did its own work
    assert reply.send(pack(REPLY, 1, 3, 6), b"answer")
    ws, view = waitset(bell, back)
    n = ws.call(None, 1, 3, b"", 1.0)
    assert bytes(view[HEADER_SIZE:n]) == b"answer" and ws.plain
    assert take(rx) == b"HEADquestion"   # sent once: nothing more went out
    assert rx.peek() is None


def test_a_full_ring_sends_nothing():
    tx, back, rx, _, bell = link()
    while tx.send(b"", b"x" * 1000):
        pass
    ws, _ = waitset(bell, back)
    assert ws.call(tx, 1, 1, b"y" * 1000, 0.05) == UNSENT
    last = None
    while (got := take(rx)) is not None:
        last = got
    assert last == b"x" * 1000   # nothing of the call's in the ring


def test_a_request_in_another_ring_ends_the_wait_with_the_call_sent():
    tx, back, rx, _, bell = link()
    other_tx, _, other_rx, _, _ = link()
    ws, _ = waitset(bell, back, other_rx)
    assert other_tx.send(b"", b"serve me")
    assert ws.call(tx, 1, 1, b"q", 1.0) == SENT
    assert parse(take(rx))[4] == b"q"
    assert take(other_rx) == b"serve me"


def test_a_reply_larger_than_the_landing_stays_in_its_ring():
    tx, back, rx, reply, bell = link()
    assert reply.send(b"", b"z" * 2000)
    ws, _ = waitset(bell, back)
    assert ws.call(tx, 1, 1, b"q", 1.0) == SENT
    assert take(back) == b"z" * 2000


def test_no_reply_in_time_is_the_call_sent():
    tx, back, rx, _, bell = link()
    ws, _ = waitset(bell, back)
    assert ws.call(tx, 1, 1, b"q", 0.02) == SENT
    assert parse(take(rx))[4] == b"q"


def test_a_broken_ring_back_raises():
    tx, back, rx, reply, bell = link()
    assert reply.send(b"", b"fine")
    data = 4096 + CAP   # ring 1's data: its first record's length and mark
    reply.seg.view[data:data + 8] = struct.pack("<II", 7, 0)   # no mark: garbage
    ws, _ = waitset(bell, back)
    with pytest.raises(RingBroken):
        ws.call(tx, 1, 1, b"q", 1.0)


@pytest.fixture(scope="module")
def rack():
    with running_rack(lambda storage: small_spec(storage, name="fcall")) as r:
        yield r


def test_an_endpoints_calls_take_the_native_step_and_answer_as_before(rack):
    with rack.endpoint() as ep:
        assert bytes(ep.call("m0", Op.ECHO, b"first")) == b"first"   # (the link is up)
        seen = []
        real = ep.transport.call

        def watched(*args):   # the transport's own call, watched
            got = real(*args)
            seen.append(got)
            return got
        ep.transport.call = watched
        most = FIT_CALL_COPY_BYTES - HEADER_SIZE   # a reply frame is its header and payload
        for size in (0, 1, 100, most, most + 1, 100_000):
            payload = os.urandom(size)
            assert bytes(ep.call("m0", Op.ECHO, payload)) == payload
        assert len(seen) == 6                                       # every call went
        assert all(isinstance(got, memoryview) for got in seen[:4])  # through it, read at
        assert all(got is True for got in seen[4:])                  # once (its header
        #                                         read too) up to the landing's size, in place past
        with pytest.raises(OSError) as caught:
            ep.call("m0", 0x7FFF, b"")   # an op it has not: the error, as before
        assert caught.value.errno == errno.ENOSYS
        links = ep.counters.snapshot()["links"]["m0"]
        assert links["ECHO"]["tx_msgs"] == links["ECHO"]["rx_msgs"] == 7   # all counted


def test_a_call_a_signal_handler_makes_inside_a_call_leaves_the_outer_reply_alone(tmp_path):
    """The signal lands while the outer call waits in the native step (EINTR: the
    request is out); the handler's call is nested in it, so it takes Python's path, and
    the outer call's reply, if it reads it, is kept for the outer call."""
    server = Endpoint("m9", f"shm://{tmp_path}/m9.fit")
    server.on(0x7001, lambda msg: (time.sleep(0.05), bytes(msg.payload))[1])   # answers late
    stop = threading.Event()

    def serve():
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        while not stop.is_set():
            server.serve(0.05)
    serving = threading.Thread(target=serve, daemon=True)
    serving.start()
    nested: list[bytes] = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: nested.append(
        bytes(client.call("m9", Op.ECHO, b"nested", timeout=2))))
    try:
        with Endpoint(f"cli.{os.getpid()}", None) as client:
            client.add_peer("m9", server.address)
            assert bytes(client.call("m9", Op.ECHO, b"warm")) == b"warm"   # the link is up
            main = threading.get_ident()
            threading.Timer(0.01, signal.pthread_kill, (main, signal.SIGUSR1)).start()
            assert bytes(client.call("m9", 0x7001, b"outer", timeout=2)) == b"outer"
            assert nested == [b"nested"]
            assert client.counters.snapshot()["errors"].get("stale_reply", 0) == 0
    finally:
        signal.signal(signal.SIGUSR1, previous)
        stop.set()
        serving.join()
        server.close()


def test_meanwhile_runs_once_after_the_request_is_out_on_both_paths(rack):
    """Endpoint.call(meanwhile=): the caller's work runs while the peer answers -- once,
    with the request already out (its reply comes while meanwhile waits for it) -- on
    the native step and on the general path (a payload with header room takes that
    one), and not at all when nothing was sent."""
    from fit_rpc.errors import UnknownDestination

    with rack.endpoint() as ep:
        assert bytes(ep.call("m0", Op.ECHO, b"up")) == b"up"
        back = ep.transport.out["m0"].rx   # (the ring its replies come back on)
        for room in (False, True):
            ran = []

            def meanwhile(ran=ran):   # the request is out: m0's answer arrives meanwhile
                deadline = time.monotonic() + 5.0
                while not back.pending() and time.monotonic() < deadline:
                    time.sleep(0.001)
                ran.append(back.pending())
            payload = bytearray(HEADER_SIZE) + b"x" * 100 if room else b"x" * 100
            assert bytes(ep.call("m0", Op.ECHO, payload, room=room, meanwhile=meanwhile)) \
                == b"x" * 100
            assert ran == [True], room
        never = []
        with pytest.raises(UnknownDestination):
            ep.call("m9", Op.ECHO, b"", timeout=2.0, meanwhile=lambda: never.append(1))
        assert never == []
