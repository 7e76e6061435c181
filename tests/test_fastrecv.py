"""A native program's recv without the interpreter (native/fastrecv.h), on a private
extCache segment (no rack needed): what fr_recv takes itself, and every case it leaves
to the bsdSocketStub (-1). On a rack: tests/test_native.py's streams."""
import mmap
import os
import threading

import pytest

from native import stubpath
from native.extcache import ExtCache

LINE, PID, FD = 4096, 4242, 1000
RING = 4 * LINE                 # the receive ring: 4 lines, from vpage 16
RSTART, TSTART = 16 * LINE, 32 * LINE
ffi, lib = stubpath.ffi, stubpath.lib


@pytest.fixture
def path():
    """A connection's C state over a 16-line extCache whose receive ring is all cached and
    holds RING known bytes; in fastrecv's table under FD, fast on; rtail: none yet."""
    fd = os.memfd_create("xc", os.MFD_CLOEXEC)
    size = ExtCache.segment_size(16 * LINE, LINE, 4)
    os.ftruncate(fd, size)
    xc = ExtCache.create(mmap.mmap(fd, size), 16 * LINE, LINE, 4)
    slot = xc.slot_acquire(PID)
    data = bytes((i * 7 + i // 251) % 256 for i in range(RING))
    for k in range(RING // LINE):
        assert xc.miss_begin(slot, PID, RSTART // LINE + k) is not None
        xc.miss_end(slot, PID, RSTART // LINE + k, 0, data[k * LINE:(k + 1) * LINE])
    c, stage = stubpath.new_path(xc, slot, PID, (RSTART, RING), (TSTART, 2 * LINE),
                                 1 << 18, 0.001, 0.001)
    lib.fr_taken()   # (another test's)
    assert lib.fr_on(FD, c) == 0
    lib.sp_fast(c, 1)
    yield c, xc, data
    lib.fr_off(FD)
    del stage
    xc.close()
    os.close(fd)


def recv(want, fd=FD):
    buf = ffi.new("char[]", max(want, 1))
    got = lib.fr_recv(fd, buf, want)
    return got, ffi.buffer(buf, max(got, 0))[:]


def test_it_takes_only_when_more_than_asked_for_waits(path):
    c, _, data = path
    assert recv(100) == (-1, b"")          # nothing there
    c.rtail = 100
    assert recv(100) == (-1, b"")          # all of it: the stub's (it hushes the socket)
    c.rtail = 1000
    assert recv(100) == (100, data[:100])
    assert (c.rhead, c.unacked) == (100, 100)
    assert recv(0) == (-1, b"")
    assert recv(899) == (899, data[100:999])
    assert recv(1) == (-1, b"")            # the last byte: the stub's
    assert lib.fr_taken() == 999 and lib.fr_taken() == 0   # (a wait then gives credit)


def test_a_take_across_the_ring_wrap_and_the_stream_offsets(path):
    c, _, data = path
    c.rhead = c.rtail = RING - 10          # (as if RING - 10 bytes were read already)
    c.rtail += 30
    got, out = recv(20)
    assert (got, out) == (20, data[RING - 10:] + data[:10])
    assert c.rhead == RING + 10


def test_what_it_leaves_to_the_stub(path):
    c, xc, data = path
    c.rtail = 3000
    lib.sp_fast(c, 0)                       # released, or broken: the stub says so
    assert recv(10) == (-1, b"")
    lib.sp_fast(c, 1)
    assert recv(10, fd=FD + 1) == (-1, b"")   # a descriptor not in the table
    c.unacked = RING // 2                   # half the ring unacked: the stub gives it back
    assert recv(10) == (-1, b"")
    assert lib.sp_credit_due(c, RING) == 0 and c.unacked == RING // 2
    assert lib.sp_credit_due(c, 1024) == RING // 2 and c.unacked == RING // 2  # (a send
    lib.sp_credited(c, RING // 2)                                  # that failed: no change)
    assert c.unacked == 0
    assert recv(10) == (10, data[:10])
    lib.fr_off(FD)
    assert recv(10) == (-1, b"")
    assert lib.fr_on(-1, c) == -1 and lib.fr_on(1 << 20, c) == -1


def test_a_line_not_cached_leaves_it_all_to_the_stub_which_faults_it(path):
    c, xc, data = path
    xc.invalidate(PID, RSTART // LINE + 1, 1)   # the ring's second line
    c.rtail = 3 * LINE
    assert recv(LINE + 100)[0] == -1      # all or none (MSG_WAITALL, SO_RCVLOWAT hold)
    assert (c.rhead, c.unacked, c.miss) == (0, 0, 0)   # (the stub's fields: untouched)
    assert recv(100) == (100, data[:100])              # the lines before it: C's
    buf = ffi.new("char[]", LINE)
    assert lib.sp_take(c, buf, LINE, 0, 0) == LINE - 100   # the stub's stops at it,
    assert c.miss == RSTART + LINE and c.faulting == 1     # and faults it in: until it
    assert recv(10) == (-1, b"")                           # clears faulting, C waits,
    c.faulting = 0                                         # so its bytes stay one stretch
    assert recv(10)[0] == -1 and c.rhead == LINE           # (still not cached: the stub's)


def test_the_stubs_take_and_recvs_in_c_never_read_a_byte_twice(path):
    """Two threads read one stream: one in C (fr_recv), one as the stub (sp_take); every
    byte is read once, and the stub's takes never see a miss (a take the other cut
    short is not one)."""
    c, _, data = path
    total, got, credited = 200 * RING, {}, [0]
    lock = threading.Lock()

    errors, stop = [], threading.Event()   # (a failed reader stops all: none outlives c)

    def feed_and_read(take):
        buf = ffi.new("char[]", 777)
        try:
            while c.rhead < total and not stop.is_set():
                k = take(buf)
                if k > 0:
                    with lock:
                        got[take] = got.get(take, 0) + k
        except BaseException as exc:   # (a thread's failure is the test's)
            errors.append(exc)
            stop.set()

    def in_c(buf):
        return lib.fr_recv(FD, buf, 777)

    def as_stub(buf):
        k = lib.sp_take(c, buf, 777, 0, 0)
        assert c.miss == 0 and not c.faulting   # (every line cached: no miss)
        return k

    def producer():
        while c.rtail < total and not stop.is_set():   # the skeleton's pushes: a line's
                                                        # worth at a time, once
            if c.rtail - c.rhead <= RING - LINE:   # there is room (the window)
                c.rtail += LINE
            due = lib.sp_credit_due(c, LINE)   # (N_CREDIT: C may read on)
            lib.sp_credited(c, due)
            credited[0] += due
    threads = [threading.Thread(target=f, daemon=True) for f in (producer,)] + \
        [threading.Thread(target=feed_and_read, args=(t,), daemon=True)
         for t in (in_c, as_stub)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(60)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert sum(got.values()) == total == c.rhead == credited[0] + c.unacked
    assert len(got) == 2, "both read some"  # (else this proves nothing)
