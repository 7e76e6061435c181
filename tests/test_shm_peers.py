"""A FIT peer that dies, and a channel's messages read natively
(fit_rpc/shm_transport.py, rendezvous.py, native/fitserve.c): bare endpoints in
processes of their own, no rack.

- a peer that dies in its handler, is killed while its caller waits, or is dead
  before the call: PeerUnreachable, before the call's timeout;
- links whose ring is broken from the start do not end the rendezvous;
- a link that hangs up with messages a native data plane reads is closed once
  they are read;
- a channel's messages, read in one native step, arrive whole and in order.
"""

import contextlib
import errno
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from fit_rpc import Endpoint, Op, PeerUnreachable, header, rendezvous
from fit_rpc.params import FIT_RING_BYTES
from fit_rpc.shm_transport import ShmTransport
from helpers import wait_until
from native.fitring import Bell, Segment
from rings import bad_mark, hung_up

# ---- a peer that dies while its caller waits ----------------------------------------------

SERVER = textwrap.dedent("""
    import os, signal, sys, time
    from fit_rpc import Endpoint, Op
    ep = Endpoint("srv", "shm://" + sys.argv[1])
    def handle(msg):
        print("handling", flush=True)
        if sys.argv[2] == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    if sys.argv[2] != "echo":
        ep.on(Op.ECHO, handle)
    print(ep.address, flush=True)
    ep.serve_forever()
""")


@contextlib.contextmanager
def server(how: str):
    """A bare FIT endpoint "srv" in a process of its own; yields (process, address)."""
    root = tempfile.mkdtemp(prefix="srs-", dir="/tmp")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, f"{root}/x.fit", how],
                            cwd="/tmp", stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        address = proc.stdout.readline().strip() if ready else ""
        assert address.startswith("shm://"), f"server did not start: {address!r}"
        yield proc, address
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def endpoints(tmp_path):
    """Two shm endpoints of this process (p0.PID, p1.PID), closed at the end."""
    a = Endpoint(f"p0.{os.getpid()}", f"shm://{tmp_path}/a.fit")
    b = Endpoint(f"p1.{os.getpid()}", f"shm://{tmp_path}/b.fit")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def channel_pair(a, b):
    """A channel between a and b: (a's end, which sends to b; b's end)."""
    to_b, to_a = a.channel(b.id, 1.0), b.channel(a.id, 1.0)
    to_b.connect(to_a.address)
    return to_b, to_a


def call_dead(address: str, timeout: float = 5.0) -> float:
    """Call srv, which dies meanwhile: PeerUnreachable; returns the time it took."""
    with Endpoint(f"cli.{os.getpid()}.980", None) as ep:
        ep.add_peer("srv", address)
        t0 = time.monotonic()
        with pytest.raises(PeerUnreachable):
            ep.call("srv", Op.ECHO, b"x", timeout=timeout)
        return time.monotonic() - t0


def test_a_peer_that_dies_in_its_handler_is_unreachable_at_once():
    with server("die") as (proc, address):
        assert call_dead(address) < 5.0
        assert proc.wait(timeout=10) == -signal.SIGKILL


def test_a_peer_killed_while_its_caller_waits_is_unreachable_at_once():
    with server("sleep") as (proc, address):
        def kill_once_handling():
            if proc.stdout.readline().strip() == "handling":
                proc.kill()

        killer = threading.Thread(target=kill_once_handling, daemon=True)
        killer.start()
        assert call_dead(address) < 5.0
        killer.join(timeout=10)


def test_a_peer_dead_before_the_call_is_unreachable():
    with server("die") as (proc, address):
        proc.kill()
        proc.wait()
        assert call_dead(address) < 5.0


def test_links_broken_at_once_do_not_end_the_rendezvous():
    """Links whose ring is broken from the start (a hand-made segment, spoiled before
    the hello): the endpoint drops each -- the connector may hear its answer or only
    the hang-up, as the drop comes before or after it -- and must still take new ones.
    (A rendezvous that handed a link over before watching its socket lost this race
    within a few tries.)"""
    with server("echo") as (_, address):
        path = address[len("shm://"):].split("#")[0]
        for n in range(200):
            seg, fd = Segment.create(FIT_RING_BYTES, "spoiled")
            bell = Bell()
            try:
                bad_mark(seg.view, 0)
                sock, _, answer, fds = rendezvous.connect(   # OSError: nobody answers
                    path, {"v": 1, "kind": "link", "id": f"cli.{os.getpid()}.{2000 + n}"},
                    [fd, bell.efd, bell.page_fd], 2.0)
                for f in fds:
                    os.close(f)
                with sock:
                    assert answer.get("ok") or answer.get("errno") == errno.ECONNRESET, answer
                    wait_until(lambda sock=sock: hung_up(sock))   # dropped
            finally:
                os.close(fd)
                seg.close()
                bell.close()


def test_a_hung_link_whose_last_messages_a_native_plane_read_is_closed():
    """The nComponent's data plane reads N_SEND off a ring itself (inbox_rings): a
    link that hangs up with such messages left is closed once they are read, by
    whoever read them, and its peer is gone (no descriptor or mapping stays)."""
    run_dir = tempfile.mkdtemp(prefix="srm-", dir="/tmp")
    a = ShmTransport("m9", f"shm://{run_dir}/m9.fit")
    gone: list[str] = []
    a.peer_gone = gone.append
    peer = f"cli.{os.getpid()}.1"
    b = ShmTransport(peer, None)
    try:
        for _ in range(3):
            b.send("m9", a.address, header.pack(header.ONEWAY, Op.ECHO, 0, 0), 5.0)
        wait_until(lambda: len(a.inbox_rings()[1]) == 1)
        _, [(who, ring, _, _)] = a.inbox_rings()
        b.close()   # its rendezvous socket hangs up, three messages unread
        wait_until(lambda: a.inbound[0].hung)
        a.inbox_rings()   # the hang-up is taken in while the messages wait
        assert who == peer and len(a.inbound) == 1 and not gone
        for _ in range(3):   # read as the data plane reads them: not through done()
            assert ring.peek() is not None
            ring.consume()
        wait_until(lambda: not a.inbox_rings()[1] and gone == [peer])
    finally:
        b.close()
        a.close()
        shutil.rmtree(run_dir, ignore_errors=True)


# ---- a channel's messages, read in one native step ---------------------------------------

def test_a_channels_messages_are_read_natively_and_what_is_not_plain_is_parsed(tmp_path):
    """Channel.send posts a message with its header written in C (fitserve.h: fs_post),
    and ShmChannel.recv reads it into its landing with its header checked in C
    (fs_recv): a plain one-way message comes back as (op, payload); one
    that is not plain (here: an err field set) as its frame, which Channel parses;
    one larger than the landing is read in place. All arrive whole, in order, and
    are counted."""
    from fit_rpc.params import FIT_CALL_COPY_BYTES

    with endpoints(tmp_path) as (a, b):
        to_b, to_a = channel_pair(a, b)
        big = os.urandom(FIT_CALL_COPY_BYTES + 100)
        to_b.send(0x7001, b"plain", 1.0)
        to_b._link.send(header.pack(header.ONEWAY, 0x7002, 0, 3, err=5) + b"odd", 1.0)
        to_b.send(0x7003, big, 1.0)
        raw = to_a._link.recv(5.0)
        assert type(raw) is tuple and raw[0] == 0x7001 and bytes(raw[1]) == b"plain"
        assert type(to_a._link.recv(5.0)) is bytes   # (not plain: the frame, for Channel)
        got = to_a.recv(5.0)
        assert got[0] == 0x7003 and bytes(got[1]) == big
        assert to_a.recv(0) is None
        to_b.send(0x7001, b"again", 1.0)
        to_b._link.send(header.pack(header.ONEWAY, 0x7002, 0, 3, err=5) + b"odd", 1.0)
        assert [(op, bytes(p)) for op, p in (to_a.recv(5.0), to_a.recv(5.0))] == \
            [(0x7001, b"again"), (0x7002, b"odd")]
        # counted: what the link read plain (in C, even past Channel) and what Channel
        # parsed; not the frame the test read past Channel. Sent: what Channel posted.
        rx = b.counters.snapshot()["links"][a.id]
        assert sum(row["rx_msgs"] for row in rx.values()) == 4
        assert rx["op_0x7001"]["rx_msgs"] == 2 and rx["op_0x7003"]["rx_msgs"] == 1
        tx = a.counters.snapshot()["links"][b.id]
        assert {op: row["tx_msgs"] for op, row in tx.items()} == {"op_0x7001": 2, "op_0x7003": 1}
        assert tx["op_0x7001"]["tx_bytes"] == 2 * header.HEADER_SIZE + len(b"plain") + len(b"again")


def test_a_one_way_message_on_a_link_that_is_up_is_posted_and_counted_in_c(tmp_path):
    """Endpoint.send: the first message makes the link (Python writes its header and
    counts it); later ones on the link, untraced, are posted with the header written
    and the message counted in C (ShmSending.post, fitserve.h: fs_post). The peer
    reads every one whole, in order, and both ends count the same, also once the
    link is closed."""
    with endpoints(tmp_path) as (a, b):
        got = []
        b.on(0x7001, lambda m: got.append(bytes(m.payload)))
        a.add_peer(b.id, b.address)
        assert not a.transport.post(b.id, 0x7001, b"none", 1.0)   # no link yet: not sent
        for k in range(5):
            a.send(b.id, 0x7001, b"m%d" % k)
        assert a.transport.post(b.id, 0x7001, b"m5", 1.0)
        while len(got) < 6:
            assert b.serve(5.0)
        assert got == [b"m%d" % k for k in range(6)]
        a.transport.forget(b.id)   # a closed link's last counts are kept (add_counts)
        assert a.transport.counted() == []
        tx = a.counters.snapshot()["links"][b.id]["op_0x7001"]
        rx = b.counters.snapshot()["links"][a.id]["op_0x7001"]
        assert (tx["tx_msgs"], tx["tx_bytes"]) == (6, 6 * (header.HEADER_SIZE + 2))
        assert (rx["rx_msgs"], rx["rx_bytes"]) == (tx["tx_msgs"], tx["tx_bytes"])


def test_a_channels_sender_posts_in_c_and_otherwise_sends(tmp_path):
    """Channel.sender(op, timeout, head): one native call a message while the ring has
    room (ShmChannel.poster); a payload past FIT's limit, or a ring that stays full,
    goes Channel.send's way and fails as it does (MessageTooLarge, PeerUnreachable).
    What went arrives whole, in order, counted once."""
    from fit_rpc.errors import MessageTooLarge
    from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES

    with endpoints(tmp_path) as (a, b):
        to_b, to_a = channel_pair(a, b)
        send = to_b.sender(0x7001, 0.05, b"hd")
        send(b"one")
        send(memoryview(b"two"))
        row = to_b._link._counts.handle.row[0]   # (C's own count, before any report)
        assert (row.op, row.tx_msgs, row.tx_bytes) == (0x7001, 2, 2 * (header.HEADER_SIZE + 5))
        with pytest.raises(MessageTooLarge):
            send(bytes(FIT_MAX_PAYLOAD_BYTES))
        assert [(op, bytes(p)) for op, p in (to_a.recv(5.0), to_a.recv(5.0))] == \
            [(0x7001, b"hdone"), (0x7001, b"hdtwo")]
        big = 0
        with pytest.raises(PeerUnreachable):   # nobody reads: the ring fills, then stays full
            while True:
                send(b"x" * 60000)
                big += 1
        got = 0
        while (message := to_a.recv(0)) is not None:
            assert bytes(message[1]) == b"hd" + b"x" * 60000
            got += 1
        assert got == big > 0
        tx = a.counters.snapshot()["links"][b.id]["op_0x7001"]
        assert tx["tx_msgs"] == 2 + big
        rx = b.counters.snapshot()["links"][a.id]["op_0x7001"]
        assert (rx["rx_msgs"], rx["rx_bytes"]) == (tx["tx_msgs"], tx["tx_bytes"])


def test_a_channels_reader_reads_in_one_native_call_and_otherwise_as_recv(tmp_path):
    """Channel.reader(op, skip): a plain one-way message of op whose payload past its
    head fits the caller's buffer is copied there (its count), read by fs_recv_into;
    any other plain one is (op, payload); one that is not plain is parsed as recv()
    parses it, one larger than the landing read as recv() reads it, a malformed one
    counted and skipped (None); nothing within the time: None. All in order,
    counted once."""
    from fit_rpc.params import FIT_CALL_COPY_BYTES

    with endpoints(tmp_path) as (a, b):
        to_b, to_a = channel_pair(a, b)
        read = to_a.reader(0x7001, 2)   # (a 2-byte head before the bytes it copies)
        buf = bytearray(8)
        assert read(memoryview(buf), 0.01) is None
        big = os.urandom(FIT_CALL_COPY_BYTES + 100)
        to_b.send(0x7001, b"plain", 1.0, b"hd")
        to_b.send(0x7001, b"longer than eight", 1.0, b"hd")
        to_b._link.send(header.pack(header.ONEWAY, 0x7002, 0, 3, err=5) + b"odd", 1.0)
        to_b.send(0x7003, big, 1.0)
        to_b._link.send(b"not a FIT frame at all, nor its header", 1.0)
        to_b.send(0x7001, b"last", 1.0, b"hd")
        assert read(memoryview(buf), 5.0) == 5 and buf[:5] == b"plain"
        got = [read(memoryview(buf), 5.0) for _ in range(4)] + [read(None, 5.0)]
        row = to_a._link._counts.handle.row[0]   # the plain ones, read in C
        assert (row.op, row.rx_msgs) == (0x7001, 3)
        assert [None if g is None else (g[0], bytes(g[1])) for g in got] == \
            [(0x7001, b"hdlonger than eight"), (0x7002, b"odd"), (0x7003, big), None,
             (0x7001, b"hdlast")]
        assert read(None, 0) is None
        snap = b.counters.snapshot()
        rx = snap["links"][a.id]
        assert {op: row["rx_msgs"] for op, row in rx.items()} == \
            {"op_0x7001": 3, "op_0x7002": 1, "op_0x7003": 1}
        assert snap["errors"]["malformed"] == 1
