"""FIT endpoint tests against real monitor processes of a running rack."""

import array
import contextlib
import errno
import os
import signal
import struct
import threading
import time

import pytest
import zmq

from fit_rpc import (
    FitError,
    FitTimeout,
    MessageTooLarge,
    Op,
    UnknownDestination,
    UnknownOp,
    codec,
    header,
)
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES
from fit_rpc.shm_transport import ShmTransport
from helpers import alive, running_rack, small_spec, wait_until
from splitrack import Rack


class RawLink:
    """A bare shm transport (no Endpoint around it): frames go as they are, past
    every check FIT makes, to send a monitor anything at all."""

    def __init__(self, rack, peer: str):
        self.peer, self.address = peer, rack.components[peer]["address"]
        self.t = ShmTransport(f"cli.{os.getpid()}.99", None)

    def send(self, frame: bytes) -> None:
        self.t.send(self.peer, self.address, frame, 5.0)

    def recv(self, timeout: float = 5.0) -> bytes | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            frame = self.t.recv_reply(self.peer, left, serve=False)
            if frame is not None:
                return frame
        return None


@contextlib.contextmanager
def raw_link(rack, peer):
    link = RawLink(rack, peer)
    try:
        yield link
    finally:
        link.t.close()


@contextlib.contextmanager
def raw_dealer(address):
    """A plain pyzmq DEALER, outside FIT, to send a ZeroMQ monitor anything at all."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(address)
    try:
        yield sock
    finally:
        sock.close(0)
        ctx.term()


def test_round_trip_echo_all_components(rack, client):
    for cid in ("global", "p0", "p1", "m0", "n0", "s0"):
        payload = os.urandom(4096)
        assert bytes(client.call(cid, Op.ECHO, payload)) == payload


def test_round_trip_sizes_up_to_the_limit(client):
    for size in (0, 1, 128, 4096, 65536, FIT_MAX_PAYLOAD_BYTES):
        payload = os.urandom(size)
        assert bytes(client.call("m0", Op.ECHO, payload)) == payload


def test_reply_payload_is_a_memoryview(client):
    reply = client.call("p0", Op.ECHO, b"abc")
    assert isinstance(reply, memoryview)


def test_oversized_request_is_refused_before_sending(client):
    before = client.counters.snapshot()["links"].get("m0", {}).get("ECHO", {}).get("tx_msgs", 0)
    with pytest.raises(MessageTooLarge) as info:
        client.call("m0", Op.ECHO, b"\0" * (FIT_MAX_PAYLOAD_BYTES + 1))
    assert info.value.errno == errno.EMSGSIZE
    after = client.counters.snapshot()["links"].get("m0", {}).get("ECHO", {}).get("tx_msgs", 0)
    assert after == before


def test_unknown_op_gets_error_reply_and_counter(client):
    with pytest.raises(UnknownOp) as info:
        client.call("p0", 0x0FFF)
    assert info.value.errno == errno.ENOSYS
    stats, _ = client.call_args("p0", Op.STATS)
    assert stats["errors"]["unknown_op"] >= 1
    assert bytes(client.call("p0", Op.ECHO, b"still serving")) == b"still serving"


def test_unknown_destination(client):
    with pytest.raises(UnknownDestination) as info:
        client.call("p9", Op.ECHO, b"x")
    assert info.value.errno == errno.ENXIO


def test_one_way_send_is_delivered(rack, client):
    # UNREGISTER sent one-way (as a closing client does); its effect is visible in LIST.
    ep = rack.endpoint(serve=True)

    def listed():
        return {c["id"] for c in client.call_args("global", Op.LIST)[0]["components"]}

    assert ep.id in listed()
    ep.send("global", Op.UNREGISTER, codec.encode({"id": ep.id}))
    wait_until(lambda: ep.id not in listed())   # another link than LIST's: no ordering
    ep.close()


def test_push_both_directions(rack):
    """A component calls a client back while the client is itself waiting in a
    call to that component: the client serves the callback and nothing deadlocks."""
    ep = rack.endpoint(serve=True)
    args, data = ep.call_args("p0", Op.PING_PEER,
                              {"target": ep.id, "size": 64, "count": 20, "warmup": 0})
    samples = array.array("d", bytes(data))
    assert len(samples) == 20 and all(s > 0 for s in samples)
    link = ep.counters.snapshot()["links"]["p0"]
    assert link["ECHO"]["rx_msgs"] == 20          # pushed to us by p0
    assert link["ECHO"]["tx_msgs"] == 20          # our replies
    assert link["PING_PEER"]["tx_msgs"] == 1      # our call to p0
    with rack.endpoint() as other:
        def listed():
            return {c["id"] for c in other.call_args("global", Op.LIST)[0]["components"]}

        assert ep.id in listed()
        ep.close()                                # a closed client leaves the directory
        wait_until(lambda: ep.id not in listed())
        with pytest.raises(PermissionError):
            other.call_args("global", Op.UNREGISTER, {"id": "p0"})


def test_a_call_that_serves_nothing_serves_nothing_while_it_looks_its_peer_up(rack):
    """serve=False covers the directory look-up a first call makes: a caller holding
    what a handler takes (the nComponent, an extCache set) must not run it nested."""
    a, b = rack.endpoint(serve=True), rack.endpoint(serve=True)
    ran = []
    a.on(Op.ECHO, lambda msg: ran.append(bytes(msg.payload)) or b"")
    b.on(Op.ECHO, lambda msg: bytes(msg.payload))
    b.send(a.id, Op.ECHO, b"waiting")   # a request in a's inbox, not served yet
    wait_until(a.pending)
    def answer_one():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not b.serve(1):
            pass   # (serve() returns False when woken for a new link, too)

    server = threading.Thread(target=answer_one)
    server.start()
    try:   # a knows b only by its id: the call asks global first
        assert bytes(a.call(b.id, Op.ECHO, b"hello", serve=False)) == b"hello"
    finally:
        server.join()
    assert ran == []
    assert a.serve(1) and ran == [b"waiting"]
    a.close()
    b.close()


def test_serve_pushed_takes_its_own_push_and_serves_the_rest(rack):
    """serve_pushed (a stub's blocking recv of its STUB_DATA): a plain one-way op of
    (word, value) is taken with no handler run, and counted; a push of another word
    or op, or another layout, is served as serve() serves it; nothing: -1."""
    a, b = rack.endpoint(serve=True), rack.endpoint(serve=True)
    served = []
    a.on(Op.STUB_DATA, lambda msg: served.append(bytes(msg.payload)))
    try:
        mine, other = struct.pack("<II", 7, 99), struct.pack("<II", 8, 5)
        def pushed() -> int:   # (-1 also when woken for a new link: look again)
            deadline = time.monotonic() + 5
            while (got := a.serve_pushed(Op.STUB_DATA, 7, 1)) < 0:
                assert time.monotonic() < deadline
            return got

        b.send(a.id, Op.STUB_DATA, mine)
        assert pushed() == 99 and served == []
        for payload in (other, mine + b"x"):
            b.send(a.id, Op.STUB_DATA, payload)
            assert pushed() == 0 and served[-1] == payload
        b.send(a.id, Op.STUB_SENT, mine)   # another op, the same words: served (no
        assert pushed() == 0 and len(served) == 2   # handler here: ENOSYS, counted)
        assert a.serve_pushed(Op.STUB_DATA, 7, 0.05) == -1
        link = a.counters.snapshot()["links"][b.id]
        assert link["STUB_DATA"]["rx_msgs"] == 3
    finally:
        a.close()
        b.close()


def test_monitor_to_monitor_calls_are_counted_per_link(client):
    client.call_args("p1", Op.PING_PEER, {"target": "m0", "size": 100, "count": 5})
    stats, _ = client.call_args("p1", Op.STATS)
    echo = stats["links"]["m0"]["ECHO"]
    assert echo["tx_msgs"] >= 5 and echo["tx_bytes"] >= 5 * (100 + header.HEADER_SIZE)
    m0, _ = client.call_args("m0", Op.STATS)
    assert m0["links"]["p1"]["ECHO"]["rx_msgs"] >= 5


def test_bad_ping_arguments_are_einval(client):
    with pytest.raises(OSError) as info:
        client.call_args("p0", Op.PING_PEER, {"target": "m0", "size": "big", "count": 1})
    assert info.value.errno == errno.EINVAL


@pytest.mark.parametrize("frame, why", [
    (b"\x01\x02", "shorter than the header"),
    (b"\0" * 16, "bad magic"),
    (header.pack(header.REQUEST, Op.ECHO, 9, 100) + b"short", "length mismatch"),
    (header.pack(header.REQUEST, Op.PING_PEER, 9, 7) + b"\x03\0\0\0{{{", "args not JSON"),
])
def test_malformed_frames_get_ebadmsg_and_monitor_keeps_serving(rack, client, frame, why):
    with raw_link(rack, "m0") as raw:
        before = client.call_args("m0", Op.STATS)[0]["errors"].get("malformed", 0)
        raw.send(frame)
        kind, op, err, seq, payload = header.parse(raw.recv())
        assert (kind, err) == (header.REPLY, errno.EBADMSG), why
        after = client.call_args("m0", Op.STATS)[0]["errors"].get("malformed", 0)
        assert after == before + 1
        assert bytes(client.call("m0", Op.ECHO, b"ok")) == b"ok"


@pytest.mark.parametrize("op", [Op.N_SEND, Op.N_SEND_DMA, Op.N_CREDIT, Op.N_SHUTDOWN,
                                Op.N_CLOSE])
@pytest.mark.parametrize("size", [0, 1, 3])
def test_short_socket_ops_get_ebadmsg_not_a_traceback(rack, client, op, size):
    """The nComponent's fixed-layout payloads (struct): one too short is malformed,
    as docs/protocol.md says, not a handler bug (EIO and a traceback in its log)."""
    with raw_link(rack, "n0") as raw:
        before = client.call_args("n0", Op.STATS)[0]["errors"].get("malformed", 0)
        raw.send(header.pack(header.REQUEST, op, 5, size) + b"\x01" * size)
        kind, _, err, seq, _ = header.parse(raw.recv())
        assert (kind, err, seq) == (header.REPLY, errno.EBADMSG, 5)
        assert client.call_args("n0", Op.STATS)[0]["errors"]["malformed"] == before + 1
    with open(rack.components["n0"]["log"]) as f:
        assert "Traceback" not in f.read()


def test_a_message_of_two_frames_is_malformed_on_zeromq():
    """On shm a message is one ring record by construction; ZeroMQ can deliver two
    frames, which the endpoint refuses."""
    with running_rack(lambda s: small_spec(s, name="zmqraw", transport="zmq")) as rack, \
            raw_dealer(rack.components["m0"]["address"]) as sock:
        sock.send_multipart([header.pack(header.REQUEST, Op.ECHO, 9, 0), b"extra"])
        kind, op, err, seq, payload = header.parse(sock.recv())
        assert (kind, err) == (header.REPLY, errno.EBADMSG)


def test_reply_sent_to_an_inbox_is_counted_not_answered(rack, client):
    with raw_link(rack, "m0") as raw:
        def malformed():
            return client.call_args("m0", Op.STATS)[0]["errors"].get("malformed", 0)

        before = malformed()
        raw.send(header.pack(header.REPLY, Op.ECHO, 9, 0))
        wait_until(lambda: malformed() == before + 1)  # another link: no ordering
        assert bytes(client.call("m0", Op.ECHO, b"ok")) == b"ok"
        assert raw.recv(0.2) is None  # a reply is never answered (no reply loops)


def test_oversized_frame_from_a_raw_sender_gets_emsgsize(rack, client):
    with raw_link(rack, "n0") as raw:
        n = FIT_MAX_PAYLOAD_BYTES + 1
        raw.send(header.pack(header.REQUEST, Op.ECHO, 77, n) + b"\0" * n)
        kind, op, err, seq, _ = header.parse(raw.recv())
        assert (err, seq) == (errno.EMSGSIZE, 77)
        assert client.call_args("n0", Op.STATS)[0]["errors"]["too_large"] >= 1
        assert bytes(client.call("n0", Op.ECHO, b"ok")) == b"ok"


def test_stopped_monitor_gives_timeout_not_hang(run_root, tmp_path):
    """SIGSTOP a monitor: calls to it time out within their timeout."""
    with Rack(small_spec(str(tmp_path / "s"))) as rack:
        ep = rack.endpoint()
        assert bytes(ep.call("m0", Op.ECHO, b"x")) == b"x"
        pid = rack.components["m0"]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(FitTimeout) as info:
                ep.call("m0", Op.ECHO, b"x", timeout=0.5)
            assert time.monotonic() - t0 < 5  # returned; the limit only guards a hang
            assert info.value.errno == errno.ETIMEDOUT
        finally:
            os.kill(pid, signal.SIGCONT)
        # the link was reset: the late reply is not mistaken for the next call's
        assert bytes(ep.call("m0", Op.ECHO, b"y")) == b"y"


def test_killed_monitor_gives_clear_error_and_rack_still_stops(run_root, tmp_path):
    with Rack(small_spec(str(tmp_path / "s"))) as rack:
        ep = rack.endpoint()
        assert bytes(ep.call("m0", Op.ECHO, b"x")) == b"x"
        pid = rack.components["m0"]["pid"]
        os.kill(pid, signal.SIGKILL)
        rack._children["m0"].wait()
        with pytest.raises(FitError) as info:
            ep.call("m0", Op.ECHO, b"x", timeout=0.5)
        assert info.value.errno in (errno.ETIMEDOUT, errno.EHOSTUNREACH)
        states = {r["id"]: r["state"] for r in rack.status()}
        assert states["m0"] == "dead" and states["p0"] == "ok"
        os.kill(rack.components["global"]["pid"], signal.SIGKILL)  # the directory, too
        rack._children["global"].wait()
        states = {r["id"]: r["state"] for r in rack.status()}
        assert states == {"global": "dead", "m0": "dead", "p0": "ok", "p1": "ok", "n0": "ok",
                          "s0": "ok"}
        pids = [c["pid"] for c in rack.components.values()]
    for pid in pids:
        assert not alive(pid)
