"""The nComponent's byte ring (native/nring) through its binding: wrap-around
against a bytearray model, and recv/send on real kernel sockets (a Unix
socketpair and a loopback TCP pair): wrap, EOF, EAGAIN, a gone peer, a full ring."""

import errno
import hashlib
import mmap
import random
import select
import socket

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from native.nring import NRing

OFF, CAP, GUARD = 5, 13, 0xAA  # a small odd ring inside a guarded arena


def arena(size: int) -> mmap.mmap:
    mm = mmap.mmap(-1, size)
    mm.write(bytes([GUARD]) * size)
    return mm


ops = st.one_of(st.tuples(st.just("put"), st.binary(max_size=2 * CAP)),
                *(st.tuples(st.just(op), st.integers(0, 2 * CAP))
                  for op in ("get", "get_into", "peek", "drop")))


@seed(20240611)
@settings(derandomize=True, database=None, max_examples=300, deadline=None)
@given(st.lists(ops, max_size=60))
def test_wraparound_matches_a_bytearray_model(steps):
    mem = arena(OFF + CAP + OFF)
    ring, model = NRing(mem, OFF, CAP), bytearray()
    for op, arg in steps:
        if op == "put":
            took = ring.put(arg)
            assert took == min(len(arg), CAP - len(model))
            model += arg[:took]
        elif op == "peek":
            assert ring.peek(arg) == model[:arg]
        elif op == "get":
            assert ring.get(arg) == model[:arg]
            del model[:arg]
        elif op == "get_into":
            buf = bytearray(arg)
            assert ring.get_into(memoryview(buf)) == min(arg, len(model))
            assert buf[:len(model)] == model[:arg]
            del model[:arg]
        else:
            n = min(arg, len(model))
            ring.drop(n)
            del model[:n]
        assert (ring.used, ring.space) == (len(model), CAP - len(model))
    assert mem[:OFF] == mem[OFF + CAP:] == bytes([GUARD]) * OFF  # nothing written outside


def test_buffer_kinds_and_misuse():
    mem = arena(64)
    with pytest.raises(ValueError):
        NRing(mem, 60, 8)
    with pytest.raises(BufferError):  # the arena must be writable
        NRing(b"read-only", 0, 4)
    ring = NRing(mem, 0, 8)
    assert ring.put(bytearray(b"a")) + ring.put(memoryview(b"bc")) == 3
    with pytest.raises(ValueError):
        ring.drop(4)
    ring.reset()
    assert (ring.used, ring.get(8)) == (0, b"")


@pytest.fixture(params=["unix", "tcp"])
def pair(request):
    """Two connected stream sockets: (the peer, the nMonitor's end)."""
    if request.param == "unix":
        a, b = socket.socketpair()
    else:
        with socket.create_server(("127.0.0.1", 0)) as srv:
            a = socket.create_connection(srv.getsockname())
            b, _ = srv.accept()
    a.settimeout(5)
    yield a, b
    a.close()
    b.close()


def readable(s: socket.socket) -> None:
    assert select.select([s], [], [], 5)[0], "nothing arrived in 5 s"


def test_recv_and_send_across_the_wrap_point(pair):
    peer, mine = pair
    rng, cap = random.Random(7), 1000
    ring = NRing(arena(cap + 24), 24, cap)
    sent, back, pos, wraps = hashlib.sha256(), hashlib.sha256(), 0, 0
    for _ in range(300):
        piece = rng.randbytes(rng.randint(1, cap))
        peer.sendall(piece)
        sent.update(piece)
        wraps += pos % cap + len(piece) > cap
        while ring.used < len(piece):  # in in random bites, then all of it out
            readable(mine)
            ring.recv(mine.fileno(), max=rng.randint(1, cap))
        assert ring.send(mine.fileno()) == len(piece) and ring.used == 0
        back.update(peer.recv(len(piece), socket.MSG_WAITALL))
        pos += len(piece)
    assert wraps > 50 and sent.digest() == back.digest()


def test_eof_reads_as_zero(pair):
    peer, mine = pair
    ring = NRing(arena(64), 0, 64)
    peer.sendall(b"last words")
    peer.close()
    readable(mine)
    assert ring.recv(mine.fileno()) == 10
    readable(mine)
    assert ring.recv(mine.fileno()) == 0 and ring.get(64) == b"last words"


def test_nothing_waiting_raises_blocking_io_error(pair):
    _, mine = pair
    ring = NRing(arena(64), 0, 64)
    with pytest.raises(BlockingIOError) as e:
        ring.recv(mine.fileno())
    assert e.value.errno == errno.EAGAIN
    assert ring.send(mine.fileno()) == 0  # an empty ring sends nothing, raises nothing


def test_send_to_a_peer_that_closed_raises_epipe_or_econnreset(pair):
    peer, mine = pair
    ring = NRing(arena(64), 0, 64)
    peer.close()
    with pytest.raises(OSError) as e:
        for _ in range(100):  # TCP: the first send draws the RST, a later one fails
            ring.put(b"hello")
            ring.send(mine.fileno())
    assert e.value.errno in (errno.EPIPE, errno.ECONNRESET)


def test_full_ring_recv_raises_enobufs(pair):
    peer, mine = pair
    ring = NRing(arena(16), 0, 16)
    peer.sendall(b"x" * 20)
    readable(mine)
    assert ring.recv(mine.fileno()) == 16
    with pytest.raises(OSError) as e:
        ring.recv(mine.fileno())
    assert e.value.errno == errno.ENOBUFS
