"""FIT's shared-memory rings and doorbells (native/fitring.c), through their binding.

Both sides of a segment are mapped here (as the two processes of a link map
it), except where a real second process is the point: a doorbell across
processes, and a producer that dies in the middle of a message."""

import collections
import errno
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import take
from native.fitring import TIMEOUT, Bell, RingBroken, Segment, WaitSet, check_sealed, lib

CAP = 64 * 1024


def pair(cap: int = CAP, latency_ns: int = 0, bytes_per_s: int = 0):
    """(producer ring, consumer ring, consumer's bell) of ring 0 of a fresh segment;
    with latency_ns or bytes_per_s, its rings carry that interconnect model."""
    seg, fd = Segment.create(cap)
    if latency_ns or bytes_per_s:
        seg.set_model(latency_ns, bytes_per_s)
    other = Segment.open(fd)
    os.close(fd)
    bell = Bell()
    word = Bell.peer_word(bell.page_fd)
    producer = seg.ring(0, word.ptr, bell.efd, word)
    consumer = other.ring(0, None, bell.efd)
    return producer, consumer, bell


def test_messages_arrive_whole_and_in_order():
    tx, rx, _ = pair()
    assert rx.peek() is None
    assert tx.send(b"head", b"payload")
    assert tx.send(b"", b"")
    assert take(rx) == b"headpayload"
    assert take(rx) == b""
    assert take(rx) is None


def test_a_ring_in_ping_pong_stays_in_its_first_pages():
    """An empty ring starts over at 0 once past FR_EARLY_WRAP, so that messages sent
    one at a time reuse the same warm pages -- also with the producer believing the
    consumer's tail as it read it last (it reads it afresh past that point)."""
    tx, rx, bell = pair(cap=1 << 20)
    ws = WaitSet(bell.word, bell.efd)
    ws.rings = [rx]
    message = b"m" * 4096
    ends = set()
    for _ in range(1000):   # 4 MiB through a 1 MiB ring
        assert tx.send(b"", message)
        assert ws.take() == 0
        ends.add(ws.msg.at)
        rx.consume()
    assert max(ends) < lib.FR_EARLY_WRAP + 2 * len(message)


def test_a_full_ring_pushes_back_and_loses_nothing():
    tx, rx, _ = pair()
    sent = 0
    while tx.send(struct.pack("<I", sent), b"x" * 1000):
        sent += 1
    assert 50 < sent < CAP // 1000 + 1
    for i in range(sent):
        assert take(rx)[:4] == struct.pack("<I", i)
    assert take(rx) is None
    assert tx.send(b"room again")


def test_the_largest_message_is_half_a_ring():
    tx, rx, _ = pair()
    assert tx.max_payload == CAP // 2 - 8
    with pytest.raises(OSError) as info:
        tx.send(b"x" * (tx.max_payload + 1))
    assert info.value.errno == errno.EMSGSIZE
    for _ in range(5):   # at every offset, after a skip record, the largest fits
        assert tx.send(b"y" * tx.max_payload)
        assert take(rx) == b"y" * tx.max_payload
        assert tx.send(b"z" * 100)
        assert take(rx) == b"z" * 100


def test_reserve_and_commit_write_in_place():
    tx, rx, _ = pair()
    room = tx.reserve(100)
    room[:5] = b"hello"
    tx.commit(5)
    assert take(rx) == b"hello"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9000), st.booleans()), min_size=1, max_size=200))
def test_model(ops):
    """Random sends and reads against a deque: nothing lost, nothing reordered,
    nothing invented, and a send fails only when the ring is full."""
    tx, rx, _ = pair(16 * 1024)
    model: collections.deque[bytes] = collections.deque()
    for i, (size, read) in enumerate(ops):
        size = min(size, tx.max_payload)
        data = bytes([i % 251]) * size
        if tx.send(data):
            model.append(data)
        else:
            assert model, "a send into an empty ring failed"
        if read and model:
            assert take(rx) == model.popleft()
    while model:
        assert take(rx) == model.popleft()
    assert take(rx) is None


def test_garbage_from_the_peer_breaks_the_ring_not_the_reader():
    seg, fd = Segment.create(CAP)
    theirs = Segment.open(fd)
    os.close(fd)
    rx = theirs.ring(0, None, -1)
    tx = seg.ring(0, None, -1)
    assert tx.send(b"fine")
    assert take(rx) == b"fine"
    assert tx.send(b"next")
    data = 4096 + 8 + 8   # the second record's length field, in ring 0's data
    seg.view[data:data + 4] = struct.pack("<I", 0x7FFFFFFF)
    with pytest.raises(RingBroken):
        rx.peek()
    head = 64 + 2 * 64 + 0   # fr_segment: magic..pad (16), bell[2][16] (128), ctl[0].head
    seg.view[16 + 128:16 + 128 + 8] = struct.pack("<Q", 1 << 40)
    with pytest.raises(RingBroken):
        rx.peek()
    assert head  # (offsets spelled out above, for the reader)


def test_a_segment_that_could_shrink_is_refused():
    fd = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    os.ftruncate(fd, 8192)
    try:
        with pytest.raises(OSError) as info:
            check_sealed(fd)
        assert info.value.errno == errno.EPERM
        with pytest.raises(OSError):
            Segment.open(fd)
    finally:
        os.close(fd)


def test_a_bell_page_cannot_be_written_by_its_peers():
    import mmap

    bell = Bell()
    with pytest.raises(PermissionError):
        mmap.mmap(bell.page_fd, 4096)   # writable: refused by the seal
    ro = Bell.peer_word(bell.page_fd)
    bell.word[0] = 1
    assert ro.ptr[0] == 1


def test_waiting_times_out_and_wakes_on_a_message_across_processes():
    tx, rx, bell = pair()
    ws = WaitSet(bell.word, bell.efd)
    ws.rings = [rx]
    t0 = time.monotonic()
    assert ws.wait(0, 0.05) == TIMEOUT
    assert time.monotonic() - t0 >= 0.045
    pid = os.fork()
    if pid == 0:   # the producer: sleeps, then sends; the consumer sleeps on its bell
        time.sleep(0.1)
        tx.send(b"wake up")
        os._exit(0)
    try:
        assert ws.wait(0, 5.0) == 0
        assert take(rx) == b"wake up"
    finally:
        os.waitpid(pid, 0)


def test_no_wake_up_is_lost():
    """The consumer sleeps between messages (no spinning) while the producer sends as
    fast as it can: every message arrives, none waits for a timeout."""
    tx, rx, bell = pair()
    ws = WaitSet(bell.word, bell.efd)
    ws.rings = [rx]
    n = 20000
    pid = os.fork()
    if pid == 0:
        for i in range(n):
            while not tx.send(struct.pack("<I", i)):
                time.sleep(0)
        os._exit(0)
    try:
        got = 0
        t0 = time.monotonic()
        while got < n:
            if ws.wait(0, 2.0) == TIMEOUT:
                pytest.fail(f"lost a wake-up after {got} of {n} messages")
            while (data := take(rx)) is not None:
                assert data == struct.pack("<I", got)
                got += 1
        assert time.monotonic() - t0 < 60
    finally:
        os.waitpid(pid, 0)


def test_a_producer_that_dies_mid_message_publishes_nothing():
    tx, rx, _ = pair()
    assert tx.send(b"whole")
    pid = os.fork()
    if pid == 0:
        room = tx.reserve(1000)
        room[:500] = b"h" * 500   # half-written, never committed
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    assert take(rx) == b"whole"
    assert take(rx) is None


SLICES = """
import os, sys
from native.fitring import lib
os.sched_setaffinity(0, {int(sys.argv[1])})   # one CPU, shared with a spinner that never yields
lost = 0
while lost < lib.FR_LOST_SLICES:   # each yield hands the spinner a slice
    lost += lib.fr_spin_yield(0) == 0
before = open("/proc/self/status").read()
answers = {lib.fr_spin_yield(0) for _ in range(50)}   # (a few us: well inside the pause)
after = open("/proc/self/status").read()
switches = lambda s: int(s.split("nonvoluntary_ctxt_switches:")[1].split()[0])
print(sorted(answers), switches(after) - switches(before))
"""


def test_a_waiter_that_keeps_losing_slices_stops_yielding(tmp_path):
    """fitring.h, fr_spin_yield: after FR_LOST_SLICES yields that each handed a spinning
    task its time slice, the thread's waits sleep at once (no yield) for a while, where
    each wait used to lose one more slice (4 ms a FIT round trip with both cores busy)."""
    cpu = min(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c",
                                f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        time.sleep(0.2)   # (on its CPU)
        # cwd: `python -c` imports from its working directory first, and the checkout's
        # native/ holds no built C when splitrack is installed with `pip install .`
        proc = subprocess.run([sys.executable, "-c", SLICES, str(cpu)], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
    finally:
        spinner.kill()
        spinner.wait()
    assert proc.returncode == 0, proc.stderr
    answers, switched = proc.stdout.split("]")
    assert answers == "[0"                # 50 waits, none of them spinning on
    assert int(switched) <= 1             # nor yielding (a tick may preempt it once)


PEER_BEHIND = """
import os, sys
from native.fitring import lib
cpu, peer = int(sys.argv[1]), int(sys.argv[2])
os.sched_setaffinity(0, {cpu})
switches = lambda: int(open("/proc/self/status").read()
                      .split("nonvoluntary_ctxt_switches:")[1].split()[0])
lib.fr_waiting_for(peer)
before = switches()
long = lib.fr_spin_yield(lib.FR_PEER_AFTER_NS)   # a long spin: where is the peer?
yielded = switches() - before   # (0: it answered without giving the CPU away)
short = lib.fr_spin_yield(0)   # a short one is not looked at: it yields
lib.fr_waiting_for(0)
print(long, yielded, short)
"""


@pytest.mark.parametrize("where", ["same", "elsewhere"])
def test_a_long_spin_stops_when_its_peer_waits_for_its_cpu(tmp_path, where):
    """fitring.h, fr_spin_yield: a spin past FR_PEER_AFTER_NS sleeps if the process it
    waits for (fr_waiting_for) is runnable on this very CPU -- a yield does not give
    it the CPU -- and spins on if that process runs elsewhere."""
    cpus = sorted(os.sched_getaffinity(0))
    if where == "elsewhere" and len(cpus) < 2:
        pytest.skip("one CPU: no elsewhere")
    mine, its = cpus[0], cpus[0] if where == "same" else cpus[1]
    peer = subprocess.Popen([sys.executable, "-c",
                             f"import os; os.sched_setaffinity(0, {{{its}}})\nwhile True: pass"])
    try:
        time.sleep(0.2)   # (on its CPU, runnable whenever it is not running)
        proc = subprocess.run([sys.executable, "-c", PEER_BEHIND, str(mine), str(peer.pid)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        peer.kill()
        peer.wait()
    assert proc.returncode == 0, proc.stderr
    long, yielded, short = proc.stdout.split()
    if where == "same":   # sleep, not a yield (which would hand the peer a slice)
        assert (long, yielded) == ("0", "0")
    else:
        assert (long, short) == ("1", "1")


CONSUMER_HERE = """
import os, sys
from native.fitring import Bell, Segment, lib
cpu = int(sys.argv[1])
os.sched_setaffinity(0, {cpu})
seg, fd = Segment.create(4096)
bell = Bell()
word = Bell.peer_word(bell.page_fd)
producer = seg.ring(0, word.ptr, bell.efd, word)
lib.fr_published_cpu(bell.word)   # the consumer began a wait here (as fr_wait does)
published = bell.word[lib.FR_BELL_CPU]

def after_commit(where, asleep=0, peer=os.getppid()):
    bell.word[lib.FR_BELL_CPU] = where + 1
    bell.word[0] = asleep
    producer.send(b"request")
    lib.fr_waiting_for(peer)
    first, second = lib.fr_spin_yield(0), lib.fr_spin_yield(0)
    lib.fr_waiting_for(0)
    bell.word[0] = 0
    return f"{first}{second}"

here = {after_commit(cpu) for _ in range(5)}   # (a yield that ran another task of
print(published - 1 == cpu, "01" in here and here <= {"01", "11"},   # this CPU spins on)
      after_commit(cpu + 1), after_commit(cpu, 1), after_commit(cpu, peer=0))
"""


def test_a_call_sleeps_when_its_answerer_waits_behind_it(tmp_path):
    """fitring.h, where the consumer waits: a waiter says on which CPU it began its
    wait (FR_BELL_CPU), and a call whose request found its consumer awake and last
    waiting on the caller's own CPU stops its spin after a yield that handed nobody
    the CPU, once -- not for another CPU, nor a consumer asleep (rung instead), nor
    a wait that answers no call."""
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.run([sys.executable, "-c", CONSUMER_HERE, str(cpu)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "11", "11", "11"]


def test_a_spin_on_a_descriptor_says_when_it_is_readable():
    """fr_spin_readable (a pipe shortcut's wait): 0 when nothing came within its spin,
    1 once a byte waits, and 1 once the other end hung up (the read says EOF)."""
    a, b = socket.socketpair()
    with a, b:
        assert lib.fr_spin_readable(a.fileno(), 50_000) == 0
        b.send(b"x")
        assert lib.fr_spin_readable(a.fileno(), 50_000) == 1
        assert a.recv(1) == b"x"
        b.close()
        assert lib.fr_spin_readable(a.fileno(), 50_000) == 1
        assert a.recv(1) == b""


def test_the_peer_look_leaves_no_descriptor_behind_a_thread():
    """fr_spin_yield's look at the peer opens its /proc file for that look only: a
    program whose short threads each wait for a reply, or a monitor whose threads
    wait for many peers, keeps no descriptor of theirs."""

    def waiter():
        lib.fr_waiting_for(os.getppid())   # (any live process will do)
        lib.fr_spin_yield(lib.FR_PEER_AFTER_NS)
        lib.fr_waiting_for(0)

    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        t = threading.Thread(target=waiter)
        t.start()
        t.join()
    assert len(os.listdir("/proc/self/fd")) == before
