"""Bad input to the shared-memory transport (fit_rpc/shm_transport.py, rendezvous.py,
native/fitring.c), sent to real monitor processes of a running rack.

Each case must give the sender an error and the monitor a counter, never a crash
or a hang, and the monitor must go on serving others (an ECHO from a normal client):
- a peer killed with a half-written message in its ring: nothing is read, the
  link is closed at its hang-up;
- a ring whose shared header or records hold garbage: `ring_broken`, that link
  dropped;
- a doorbell with nothing behind it: `doorbell_empty`, and no spinning after;
- a region that is not granted (`region_refused`, EPERM) or does not exist (ENOENT);
- a rendezvous from a process that is not the rack's: a claim naming another
  pid (`forged`), another user (EACCES at the socket, or EPERM), garbage or
  silence instead of a hello;
- a peer that dies while its caller waits: PeerUnreachable, before the timeout.
"""

import contextlib
import errno
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import psutil
import pytest

from fit_rpc import Endpoint, Op, PeerUnreachable, header, rendezvous
from fit_rpc.params import FIT_RING_BYTES
from fit_rpc.rendezvous import HELLO_TIMEOUT_S
from fit_rpc.shm_transport import ShmTransport
from helpers import wait_until
from native.fitring import Bell, Segment, sealed_memfd

RING0 = 4096                 # ring 0's data in a segment (fitring.h: FR_HEADER_BYTES)
HEAD0 = 16 + 128             # fr_segment: magic..pad, bell[2][16]; then ctl[0].head
TAIL1 = HEAD0 + 2 * 64 + 64  # ctl[1].tail: the tail of ring 1 (the replies)
FR_MARK = 0x21544946


def count(client, cid: str, name: str) -> int:
    """An error counter of a component (STATS)."""
    return client.call_args(cid, Op.STATS)[0]["errors"].get(name, 0)


def still_serves(client, cid: str = "m0") -> None:
    assert bytes(client.call(cid, Op.ECHO, b"still serving")) == b"still serving"


def mapped(pid: int, memfd_name: str) -> bool:
    """Whether process pid maps the memfd of that name (a link's segment)."""
    with open(f"/proc/{pid}/maps") as f:
        return f"/memfd:{memfd_name} " in f.read()


def hung_up(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLRDHUP)
    return any(ev & (select.POLLRDHUP | select.POLLHUP) for _, ev in poller.poll(0))


def echo_on(t: ShmTransport, peer: str) -> None:
    """One ECHO over a bare transport's link (the link is then in use)."""
    t.send(peer, "", header.pack(header.REQUEST, Op.ECHO, 7, 2) + b"hi", 5.0)
    deadline = time.monotonic() + 10
    while (reply := t.recv_reply(peer, 1.0, serve=False)) is None:
        assert time.monotonic() < deadline, "no reply"
    assert bytes(reply).endswith(b"hi")


def rendezvous_done(rack, peer: str) -> None:
    """Once a later hello is answered, the rendezvous of `peer` is done with ours: it
    takes one at a time (and watches a link's socket after answering; a link closed
    before that ends the rendezvous: test_links_broken_at_once_do_not_end_the_rendezvous)."""
    with rack.endpoint() as ep:
        still_serves(ep, peer)


@contextlib.contextmanager
def bare_link(rack, peer: str, n: int):
    """A link made by a bare ShmTransport (no Endpoint), in use: its rings are ours
    to spoil. Yields (transport, link)."""
    t = ShmTransport(f"cli.{os.getpid()}.{n}", None)
    try:
        link = t._connect(peer, rack.components[peer]["address"], 5.0)
        rendezvous_done(rack, peer)
        echo_on(t, peer)
        yield t, link
    finally:
        t.close()


def in_child(fn, timeout: float = 20.0) -> str:
    """Run fn(report) in a forked child; what it report()s comes back. The child
    never returns into pytest, and is killed if it outlives `timeout`."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            fn(lambda text: os.write(w, text.encode()))
        except BaseException as exc:
            os.write(w, f"child failed: {exc!r}".encode())
            code = 1
        os._exit(code)
    os.close(w)
    try:
        out = b""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0 and select.select([r], [], [], left)[0]:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            out += chunk
        return out.decode()
    finally:
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


# ---- a peer killed mid-message ---------------------------------------------------------

def test_a_peer_killed_mid_message_publishes_nothing(rack, client):
    m0 = rack.components["m0"]
    broken, malformed = count(client, "m0", "ring_broken"), count(client, "m0", "malformed")

    def child(report):
        t = ShmTransport(f"cli.{os.getpid()}.1", None)
        link = t._connect("m0", m0["address"], 5.0)
        room = link.tx.reserve(1000)
        room[:500] = (header.pack(header.REQUEST, Op.ECHO, 1, 984) + b"h" * 1000)[:500]
        report(f"{os.getpid()}")
        os.kill(os.getpid(), signal.SIGKILL)   # half a message, never committed

    out = in_child(child)
    assert out.isdigit(), out
    pid = int(out)
    segment = f"fit cli.{pid}.1>m0"
    wait_until(lambda: not mapped(m0["pid"], segment))   # the hang-up closed the link
    still_serves(client)
    assert count(client, "m0", "ring_broken") == broken
    assert count(client, "m0", "malformed") == malformed
    assert f"cli.{pid}.1" not in client.call_args("m0", Op.STATS)[0]["links"]


# ---- garbage in a ring -------------------------------------------------------------------

def _publish(view, head: int, record: bytes = b"") -> None:
    """Write `record` where the producer's next record goes, and `head` as published."""
    at = RING0 + struct.unpack_from("<Q", view, HEAD0)[0]
    view[at:at + len(record)] = record
    struct.pack_into("<Q", view, HEAD0, head)


def _bad_mark(view, h):
    _publish(view, h + 16, struct.pack("<II", 8, 0xBAD0BAD0) + b"x" * 8)


def _huge_record(view, h):
    _publish(view, h + 16, struct.pack("<II", 0x7FFFFFFF, FR_MARK) + b"x" * 8)


def _head_past_the_ring(view, h):
    _publish(view, h + (1 << 40))


def _head_misaligned(view, h):
    _publish(view, h + 3)


def _head_backwards(view, h):
    _publish(view, h - 8)


def _skip_past_head(view, h):
    _publish(view, h + 8, struct.pack("<II", 0xFFFFFFFF, FR_MARK))   # a skip record


@pytest.mark.parametrize("spoil", [_bad_mark, _huge_record, _head_past_the_ring,
                                   _head_misaligned, _head_backwards, _skip_past_head])
def test_garbage_in_a_request_ring_breaks_that_link_only(rack, client, spoil):
    before = count(client, "m0", "ring_broken")
    with bare_link(rack, "m0", 901) as (t, link):
        spoil(link.seg.view, struct.unpack_from("<Q", link.seg.view, HEAD0)[0])
        os.eventfd_write(link.peer_efd, 1)   # m0's doorbell: look now
        wait_until(lambda: count(client, "m0", "ring_broken") == before + 1)
        wait_until(lambda: hung_up(link.sock))   # m0 dropped the link
        segment = f"fit cli.{os.getpid()}.901>m0"
        wait_until(lambda: not mapped(rack.components["m0"]["pid"], segment))
        still_serves(client)


def test_garbage_in_the_reply_ring_breaks_that_link_only(rack, client):
    """The consumer of the replies spoils the tail m0 reads as their producer. m0
    reads that tail once the ring is full by the tail it read last (native/fitring.c,
    place()): then its reply fails, the link is dropped, and the caller hears
    PeerUnreachable. Nothing m0 wrote meanwhile went past what was consumed."""
    before = count(client, "m0", "ring_broken")
    payload = b"e" * (1 << 20)
    with bare_link(rack, "m0", 902) as (t, link):
        struct.pack_into("<Q", link.seg.view, TAIL1, 1 << 40)
        deadline = time.monotonic() + 10
        with pytest.raises(PeerUnreachable):   # (replies left unread fill the ring)
            while time.monotonic() < deadline:
                t.send("m0", "", header.pack(header.REQUEST, Op.ECHO, 8, len(payload)) +
                       payload, 5.0)
    assert count(client, "m0", "ring_broken") == before + 1
    still_serves(client)


# ---- a doorbell with nothing behind it ---------------------------------------------------

def test_an_empty_doorbell_is_counted_and_costs_no_cpu(rack, client):
    before = count(client, "m0", "doorbell_empty")
    with bare_link(rack, "m0", 903) as (_, link):
        for _ in range(100):
            os.eventfd_write(link.peer_efd, 1)
            time.sleep(0.002)   # pacing: each ring meets a sleeping m0
        wait_until(lambda: count(client, "m0", "doorbell_empty") >= before + 10)
        with contextlib.suppress(BlockingIOError):   # (not drained yet: it is full anyway)
            os.eventfd_write(link.peer_efd, 0xFFFFFFFFFFFFFFFE)   # the counter, full
        still_serves(client)
        m0 = psutil.Process(rack.components["m0"]["pid"])
        assert m0.cpu_percent(interval=1.0) < 30   # it sleeps again: no spinning
        still_serves(client)


# ---- regions -----------------------------------------------------------------------------

@pytest.mark.parametrize("owner, region", [("m0", "arena"), ("p0", "extcache")])
def test_a_region_not_granted_is_eperm_and_counted(client, owner, region):
    before = count(client, owner, "region_refused")
    with pytest.raises(PermissionError) as info:
        client.map_region(owner, region)
    assert info.value.errno == errno.EPERM
    assert count(client, owner, "region_refused") == before + 1
    still_serves(client, owner)


def test_a_region_that_does_not_exist_is_enoent(client):
    with pytest.raises(FileNotFoundError) as info:
        client.map_region("m0", "no-such-region")
    assert info.value.errno == errno.ENOENT
    still_serves(client)


# ---- rendezvous from outside the rack ------------------------------------------------------

@pytest.mark.parametrize("claim", ["p0.1", "cli.1.1", "p0.{other}", "not an id"])
def test_a_claim_of_another_pid_is_refused_at_the_rendezvous(rack, client, claim):
    claim = claim.format(other=rack.components["p0"]["pid"])
    before = count(client, "m0", "forged")
    ep = Endpoint(claim, None, directory=rack.components["global"]["address"])
    ep.add_peer("m0", rack.components["m0"]["address"])
    try:
        with pytest.raises(PermissionError) as info:
            ep.call("m0", Op.ECHO, b"x", timeout=5)
        assert info.value.errno == errno.EPERM
    finally:
        ep.close()
    assert count(client, "m0", "forged") == before + 1
    still_serves(client)


def _connect_as_nobody(path: str, address: str):
    """A child of another user (nobody) connects to the rendezvous at `path`."""
    def child(report):
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        t = ShmTransport(f"cli.{os.getpid()}.1", None)
        try:
            t.send("x", address, header.pack(header.REQUEST, Op.ECHO, 1, 0), 5.0)
            report("linked")
        except OSError as exc:
            cause = exc.__cause__ or exc.__context__
            report(f"{type(exc).__name__} {exc.errno} {getattr(cause, 'errno', None)} {exc}")
    return in_child(child)


def test_another_user_cannot_reach_a_monitor(rack, client):
    if os.getuid() != 0:
        pytest.skip("needs root to become another user")
    address = rack.components["m0"]["address"]
    out = _connect_as_nobody(address[len("shm://"):].split("#")[0], address)
    assert out.split()[0] in ("PermissionError", "PeerUnreachable"), out
    assert "Permission denied" in out or out.split()[1] == str(errno.EPERM), out
    still_serves(client)


def test_another_user_that_reaches_a_rendezvous_is_refused():
    """Past the directory's permissions (a socket anyone may connect to), the
    acceptor itself refuses a connector of another uid: EPERM, `rendezvous_refused`."""
    if os.getuid() != 0:
        pytest.skip("needs root to become another user")
    root = tempfile.mkdtemp(prefix="srs-", dir="/tmp")
    os.chmod(root, 0o755)
    ep = Endpoint(f"cli.{os.getpid()}.950", f"shm://{root}/x.fit")
    try:
        os.chmod(f"{root}/x.fit", 0o777)
        out = _connect_as_nobody(f"{root}/x.fit", ep.address)
        assert out.split()[:2] == ["PermissionError", str(errno.EPERM)], out
        assert ep.counters.snapshot()["errors"] == {"rendezvous_refused": 1}
        assert not ep.serve(0) and not ep.transport.inbound   # no link was made
    finally:
        ep.close()
        shutil.rmtree(root, ignore_errors=True)


def _fds(kind: str) -> list[int]:
    if kind == "eventfds":
        return [os.eventfd(0) for _ in range(3)]
    if kind == "two":
        return [os.eventfd(0) for _ in range(2)]
    if kind == "unsealed":
        fd = os.memfd_create("unsealed")
        os.ftruncate(fd, 1 << 20)
        return [fd, os.eventfd(0), os.eventfd(0)]
    if kind == "unformatted":   # sealed, but no FIT segment in it
        return [sealed_memfd("blank", 1 << 20), os.eventfd(0), os.eventfd(0)]
    return []


def _hello(claim: str, **more) -> bytes:
    return json.dumps({"v": 1, "kind": "link", "id": claim, **more}).encode()


ME = f"cli.{os.getpid()}.970"
@pytest.mark.parametrize("data, fds, counter", [
    pytest.param(b"\xff\xfe not json", "", "rendezvous_refused", id="not-json"),
    pytest.param(b"[1, 2, 3]", "", "rendezvous_refused", id="not-an-object"),
    pytest.param(b"", "", "rendezvous_refused", id="empty"),
    pytest.param(b'{"v": 1, "kind": "link"}', "", "forged", id="no-id"),
    pytest.param(b'{"v": 1, "kind": "link", "id": 42}', "", "forged", id="id-not-a-string"),
    pytest.param(_hello(ME), "", "rendezvous_refused", id="link-without-fds"),
    pytest.param(_hello(ME, kind="teapot"), "eventfds", "rendezvous_refused", id="bad-kind"),
    pytest.param(_hello(ME), "eventfds", "rendezvous_refused", id="fds-not-memfds"),
    pytest.param(_hello(ME), "unsealed", "rendezvous_refused", id="unsealed-segment"),
    pytest.param(_hello(ME), "unformatted", "rendezvous_refused", id="unformatted-segment"),
    pytest.param(_hello(ME, kind="channel", token="zz"), "two", "rendezvous_refused",
                 id="channel-bad-token"),
])
def test_a_bad_hello_is_answered_with_an_error_and_dropped(rack, client, data, fds, counter):
    path = rack.components["m0"]["address"][len("shm://"):].split("#")[0]
    before = count(client, "m0", counter)
    sent = _fds(fds)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.settimeout(10)
        sock.connect(path)
        socket.send_fds(sock, [data], sent)
        answer, got, _, _ = socket.recv_fds(sock, 4096, 4)
        assert not got
        assert json.loads(answer)["errno"] in (errno.EPERM, errno.EPROTO)
        assert sock.recv(1) == b""   # dropped
    finally:
        sock.close()
        for fd in sent:
            os.close(fd)
    still_serves(client)
    assert count(client, "m0", counter) == before + 1


def test_bad_hellos_leak_no_descriptors(rack, client):
    m0 = psutil.Process(rack.components["m0"]["pid"])
    path = rack.components["m0"]["address"][len("shm://"):].split("#")[0]
    still_serves(client)
    before = m0.num_fds()
    for _ in range(20):
        for data, kind in ((b"junk", "eventfds"), (_hello(ME), "unsealed"),
                           (_hello(ME), "unformatted"), (_hello("p0.1"), "eventfds")):
            sent = _fds(kind)
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
                sock.settimeout(10)
                sock.connect(path)
                socket.send_fds(sock, [data], sent)
                sock.recv(4096)
            for fd in sent:
                os.close(fd)
    still_serves(client)
    assert m0.num_fds() <= before + 2


def test_a_silent_connector_is_dropped_and_blocks_nobody(rack, client):
    path = rack.components["m0"]["address"][len("shm://"):].split("#")[0]
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as silent:
        silent.connect(path)
        for _ in range(20):   # and some that connect and leave at once
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as gone:
                gone.connect(path)
        with rack.endpoint() as newcomer:   # a new link meanwhile: not held up
            still_serves(newcomer)
        wait_until(lambda: hung_up(silent), timeout=HELLO_TIMEOUT_S + 10)
        assert silent.recv(1) == b""
    still_serves(client)


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
                _bad_mark(seg.view, 0)
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

    a = Endpoint(f"p0.{os.getpid()}", f"shm://{tmp_path}/a.fit")
    b = Endpoint(f"p1.{os.getpid()}", f"shm://{tmp_path}/b.fit")
    try:
        to_b, to_a = a.channel(b.id, 1.0), b.channel(a.id, 1.0)
        to_b.connect(to_a.address)
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
        rx = b.counters.snapshot()["links"][a.id]
        assert sum(row["rx_msgs"] for row in rx.values()) == 3   # (those Channel read)
    finally:
        a.close()
        b.close()
