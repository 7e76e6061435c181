"""A served FIT message's common case in native calls (native/fitserve.c), through
its binding (WaitSet.take, Ring.answer) and through the Endpoint that uses it: a
well-formed, untraced request is found with its header read, and answered and
released in one step; anything else is handed back for Python to parse and answer
as before -- a traced message, a reply sent to an inbox, a lying length field,
garbage, a broken ring, a full ring back."""

import errno
import os
import struct
import threading

import pytest

import fit_rpc.shm_transport  # noqa: F401  (states the header's constants to the C side)
from fit_rpc import Endpoint, Op
from fit_rpc.header import HEADER, HEADER_SIZE, MAGIC, ONEWAY, REPLY, REQUEST, VERSION, pack
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES
from helpers import fit_link, take
from native.fitring import TIMEOUT, WOKEN, WaitSet

CAP = 64 * 1024


def link():
    """The callee's ends of one link (rx: requests to it; tx: its replies), the
    caller's (out, back), and a wait set of the callee's inbox."""
    ends = fit_link(CAP)
    inbox = WaitSet(ends.callee.word, ends.callee.efd)
    inbox.rings = [ends.rx]
    return ends.rx, ends.reply, ends.out, ends.back, inbox


def test_a_request_is_taken_with_its_header_read():
    rx, _, out, _, inbox = link()
    assert inbox.take() == -1
    assert out.send(pack(REQUEST, 0x1234, 77, 5), b"hello")
    assert inbox.take() == 0
    m = inbox.msg
    assert (m.plain, m.kind, m.op, m.seq, m.len) == (1, REQUEST, 0x1234, 77, HEADER_SIZE + 5)
    assert bytes(rx.view(m.at, m.len)[HEADER_SIZE:]) == b"hello"
    assert out.send(pack(ONEWAY, 9, 78, 0))   # (the first is not released yet)
    rx.consume()
    assert inbox.take() == 0 and (inbox.msg.plain, inbox.msg.kind) == (1, ONEWAY)


def test_a_request_written_in_c_is_the_request_python_would_write():
    """Ring.request (fs_request): the header and payload pack() and send() make, for
    a caller that works before it waits; a full ring takes nothing."""
    rx, _, out, _, inbox = link()
    assert out.request(0x0601, 4242, b"payload")
    assert inbox.take() == 0
    m = inbox.msg
    assert bytes(rx.view(m.at, m.len)) == pack(REQUEST, 0x0601, 4242, 7) + b"payload"
    rx.consume()
    while out.request(1, 1, b"w" * 1000):
        pass
    sent = 0
    while inbox.take() == 0:   # every request that went in is whole, none torn
        assert bytes(rx.view(inbox.msg.at, inbox.msg.len)) == pack(REQUEST, 1, 1, 1000) + \
            b"w" * 1000
        rx.consume()
        sent += 1
    assert sent > 0
    with pytest.raises(OSError) as caught:   # more than a ring can ever hold: nothing sent
        out.request(1, 2, b"x" * CAP)
    assert caught.value.errno == errno.EMSGSIZE
    assert inbox.take() == -1


def test_a_channels_posts_and_plain_receipts_are_counted_in_c_by_op():
    """fs_post counts what it wrote, fs_recv what it read plain (fitserve.h: fs_counts):
    a row per op as ops come, the ops past the table's last row but one in its last
    row (op 0); Counts.taken() gives each row's growth since it last looked, and
    nothing twice. What is not plain (here traced) is left to Python's count."""
    from native.fitring import Counts, landing, lib

    rows = lib.FS_COUNTED_OPS
    _, _, out, _, _ = link()
    reader = fit_link(CAP)   # (a second link: its rx is read with fs_recv)
    ws = WaitSet(reader.callee.word, reader.callee.efd)
    ws.rings = [reader.rx]
    _, handle = landing(4096)
    sent, received = Counts(), Counts()
    ws.calls(handle, 4096, [], 0.0, received.handle)
    ops = [0x0700 + k for k in range(rows + 1)]   # two more than the table has rows for
    for k, op in enumerate(ops):
        for _ in range(1 + k % 3):
            assert out.post(op, b"hd", b"x" * k, sent.handle)
            assert reader.out.post(op, b"", b"y" * k)
            assert ws.recv(1.0) == HEADER_SIZE + k and ws.plain
    assert reader.out.send(pack(ONEWAY, 0x0700, 0, 1, trace=3, event=1), b"z")
    assert ws.recv(1.0) == HEADER_SIZE + 1 and not ws.plain
    got = sent.taken()
    assert got[:-1] == [(op, 1 + k % 3, (1 + k % 3) * (HEADER_SIZE + 2 + k), 0, 0)
                        for k, op in enumerate(ops[:rows - 1])]
    last = [(1 + k % 3, HEADER_SIZE + 2 + k) for k in range(rows - 1, rows + 1)]
    assert got[-1] == (0, sum(m for m, _ in last), sum(m * b for m, b in last), 0, 0)
    assert [(op, tx, rx) for op, tx, _, rx, _ in received.taken()] == \
        [(op, 0, 1 + k % 3) for k, op in enumerate(ops[:rows - 1])] + \
        [(0, 0, sum(m for m, _ in last))]
    assert sent.taken() == [] and received.taken() == []
    assert out.post(ops[2], b"", b"", sent.handle)
    assert sent.taken() == [(ops[2], 1, HEADER_SIZE, 0, 0)]


def test_a_served_message_is_counted_in_c_when_it_is_released():
    """fs_answer counts the request it releases (as the nrx bytes fs_take found) and
    its reply; fs_release the one-way message it releases; nothing is counted for a
    reply that found no room (nothing released either)."""
    from native.fitring import Counts

    rx, tx, out, _, inbox = link()
    counts = Counts()
    assert out.send(pack(REQUEST, 0x0601, 7, 3), b"abc")
    assert out.send(pack(ONEWAY, 0x0602, 0, 2), b"hi")
    assert inbox.take() == 0 and inbox.msg.plain
    assert tx.answer(rx, 0x0601, 7, b"answer", counts.handle, inbox.msg.len)
    assert inbox.take() == 0 and inbox.msg.plain
    rx.release(counts.handle, inbox.msg.op, inbox.msg.len)
    assert inbox.take() == -1   # both released
    assert counts.taken() == [(0x0601, 1, HEADER_SIZE + 6, 1, HEADER_SIZE + 3),
                              (0x0602, 0, 0, 1, HEADER_SIZE + 2)]
    while tx.send(b"", b"f" * 1000):   # the ring back full: no answer, nothing counted
        pass
    assert out.send(pack(REQUEST, 0x0601, 8, 0), b"")
    assert inbox.take() == 0
    assert not tx.answer(rx, 0x0601, 8, b"x" * 2000, counts.handle, inbox.msg.len)
    assert counts.taken() == []


def test_what_is_not_the_common_case_is_left_for_python():
    rx, _, out, _, inbox = link()
    cases = [pack(REQUEST, 1, 1, 3, trace=5, event=1) + b"abc",   # traced
             pack(REPLY, 1, 2, 0),                               # a reply, to an inbox
             pack(REQUEST, 1, 3, 99) + b"abc",                   # its length field lies
             HEADER.pack(0x1111, VERSION, REQUEST, 1, 0, 4, 0, 0, 0),   # not FIT's magic
             HEADER.pack(MAGIC, VERSION + 1, REQUEST, 1, 0, 5, 0, 0, 0),
             b"short"]
    for frame in cases:
        assert out.send(b"", frame)
        assert inbox.take() == 0
        m = inbox.msg
        assert m.plain == 0 and m.at >= 0
        assert bytes(rx.view(m.at, m.len)) == frame   # (whole, for the parse that says why)
        rx.consume()


def test_a_broken_ring_is_its_errno():
    rx, _, out, _, inbox = link()
    assert out.send(b"", b"x" * 64)
    rx.seg.view[rx._data:rx._data + 16] = b"\xff" * 16   # the peer scribbles on it
    assert inbox.take() == 0
    assert inbox.msg.at == -errno.EBADMSG


def test_take_waits_for_a_message_and_without_one_says_why():
    """take(spin_s, timeout_s): the wait and the next message in one native call; an
    inbox with no rings yet (a monitor nobody has called) waits out its time too."""
    ends = fit_link(CAP)   # (kept: a wait rings the callee's bell, which must stay mapped)
    inbox = WaitSet(ends.callee.word, ends.callee.efd)
    inbox.rings = [ends.rx]
    threading.Timer(0.05, ends.out.send, (pack(REQUEST, 9, 3, 2), b"hi")).start()
    assert inbox.take(0.0, 5.0) == 0
    assert (inbox.msg.plain, inbox.msg.op, inbox.msg.seq) == (1, 9, 3)
    ends.rx.consume()
    assert inbox.take(0.0, 0.02) == TIMEOUT
    empty = WaitSet(ends.callee.word, ends.callee.efd)
    assert empty.take(0.0, 0.02) == TIMEOUT   # waited: no rings is no reason to spin
    os.eventfd_write(ends.callee.efd, 1)
    assert empty.take(0.0, 5.0) == WOKEN      # a doorbell with nothing behind it


def test_an_answer_is_a_reply_and_the_request_released():
    rx, tx, out, back, inbox = link()
    assert out.send(pack(REQUEST, 0x77, 4242, 3), b"abc")
    assert inbox.take() == 0
    assert tx.answer(rx, 0x77, 4242, b"reply!")
    assert take(back) == pack(REPLY, 0x77, 4242, 6) + b"reply!"
    assert inbox.take() == -1   # released
    assert not rx.pending()


def test_an_answer_into_a_full_ring_does_nothing():
    rx, tx, out, back, inbox = link()
    assert out.send(pack(REQUEST, 1, 1, 0))
    assert inbox.take() == 0
    while tx.send(b"", b"y" * 1000):
        pass
    assert not tx.answer(rx, 1, 1, b"z" * 100)
    assert rx.pending()   # not released: Python waits for room and answers
    while take(back) is not None:
        pass
    assert tx.answer(rx, 1, 1, b"z")
    assert not rx.pending()


def test_an_endpoint_answers_in_one_step_and_falls_back_where_it_must(tmp_path):
    """The same handlers, the same answers: ECHO, an unknown op's error, a ONEWAY, a
    reply larger than FIT allows (the error, by Python's path), a malformed request."""
    server = Endpoint("m9", f"shm://{tmp_path}/m9.fit")
    oneway: list[bytes] = []
    server.on(0x7001, lambda msg: oneway.append(bytes(msg.payload)))
    server.on(0x7002, lambda msg: b"z" * (FIT_MAX_PAYLOAD_BYTES + 1))   # EMSGSIZE, answered
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            server.serve(0.05)
    serving = threading.Thread(target=serve, daemon=True)
    serving.start()
    try:
        with Endpoint(f"cli.{os.getpid()}", None) as client:
            client.add_peer("m9", server.address)
            for i in range(50):
                assert bytes(client.call("m9", Op.ECHO, b"x%d" % i)) == b"x%d" % i
            with pytest.raises(OSError) as caught:
                client.call("m9", 0x7FFF, b"")
            assert caught.value.errno == errno.ENOSYS
            client.send("m9", 0x7001, b"one way")
            with pytest.raises(OSError) as caught:
                client.call("m9", 0x7002, b"", timeout=5)
            assert caught.value.errno == errno.EMSGSIZE
            link = client.transport.out["m9"]   # a request with a lying length field:
            assert link.tx.send(struct.pack("<HBBHHIIII", MAGIC, VERSION, REQUEST, Op.ECHO,
                                            0, 999, 50, 0, 0), b"abc")
            assert bytes(client.call("m9", Op.ECHO, b"after")) == b"after"   # still served
            stop.set()
            serving.join()   # (a reply is counted once it is out: read the counts after)
            assert oneway == [b"one way"]
            assert server.counters.snapshot()["errors"].get("malformed") == 1
            links = server.counters.snapshot()["links"][client.id]
            assert links["ECHO"]["rx_msgs"] == 51   # (the malformed one's header not trusted)
            assert links["ECHO"]["tx_msgs"] == 52   # (its error answered all the same)
    finally:
        stop.set()
        serving.join()
        server.close()


def test_a_handlers_calls_wait_on_one_set_made_once_that_leaves_its_message_out(tmp_path):
    """A handler that calls out serves meanwhile, but not the message it holds: its
    calls' wait set leaves that link's ring out, and is made once, not per call."""
    inner = Endpoint("m8", f"shm://{tmp_path}/m8.fit")
    server = Endpoint("m9", f"shm://{tmp_path}/m9.fit")
    server.add_peer("m8", inner.address)
    seen: list[tuple[int, bool]] = []

    def relay(msg):
        transport = server.transport
        for _ in range(3):
            assert bytes(server.call("m8", Op.ECHO, msg.payload)) == bytes(msg.payload)
            ws = transport._reply_set(transport.out["m8"], True)
            seen.append((id(ws), msg.route.rx in ws.rings))
        return b"relayed"
    server.on(0x7003, relay)
    stop = threading.Event()

    def serve(ep):
        while not stop.is_set():
            ep.serve(0.05)
    threads = [threading.Thread(target=serve, args=(ep,), daemon=True) for ep in (inner, server)]
    for t in threads:
        t.start()
    try:
        with Endpoint(f"cli.{os.getpid()}", None) as client:
            client.add_peer("m9", server.address)
            assert bytes(client.call("m9", 0x7003, b"x")) == b"relayed"
    finally:
        stop.set()
        for t in threads:
            t.join()
        server.close()
        inner.close()
    assert len(seen) == 3 and len({ws for ws, _ in seen}) == 1
    assert not any(held_in for _, held_in in seen)
