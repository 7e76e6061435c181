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
  silence instead of a hello.

A peer that dies while its caller waits, and broken links at the rendezvous of a
bare endpoint: test_shm_peers.py.
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
import tempfile
import time

import psutil
import pytest

from fit_rpc import Endpoint, Op, PeerUnreachable, header
from fit_rpc.rendezvous import HELLO_TIMEOUT_S
from fit_rpc.shm_transport import ShmTransport
from helpers import wait_until
from native.fitring import sealed_memfd
from rings import HEAD0, SPOILERS, TAIL1, hung_up


def count(client, cid: str, name: str) -> int:
    """An error counter of a component (STATS)."""
    return client.call_args(cid, Op.STATS)[0]["errors"].get(name, 0)


def still_serves(client, cid: str = "m0") -> None:
    assert bytes(client.call(cid, Op.ECHO, b"still serving")) == b"still serving"


def mapped(pid: int, memfd_name: str) -> bool:
    """Whether process pid maps the memfd of that name (a link's segment)."""
    with open(f"/proc/{pid}/maps") as f:
        return f"/memfd:{memfd_name} " in f.read()


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

@pytest.mark.parametrize("spoil", SPOILERS)
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
