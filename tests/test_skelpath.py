"""The nComponent's data plane (native/skelpath.c, run by monitors/nmonitor.py): a DDIO
or DMA connection's kernel events, N_SEND (N_SEND_DMA) and N_CREDIT are handled in C,
counted as if the nMonitor's Python had handled them, and whatever is not a plain
connection's, or not its owner's, is left to the Python code that answers it as
before. Real racks, real programs, real kernel sockets."""

import os
import signal
import socket
import textwrap

import pytest

from fit_rpc import Op
from helpers import running_rack, small_spec, wait_until
from netprogs import ECHO_SERVER, environ, n0_network, network_rack, on_rack, run_on_rack

NIC = "127.0.0.11"
ROUNDS = 300

# An echo server that says its port, its pid and, once a client connected, the id of
# that connection's skeleton (what a forger would need).
TELLING_ECHO = textwrap.dedent("""
    import os, socket, sys
    s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
    print(s.getsockname()[1], os.getpid(), flush=True)
    c, _ = s.accept()
    print(c._sk, flush=True)
    while data := c.recv(1 << 16):
        c.sendall(data)
""")

# Another program of the rack, whose link n0 has vouched for (its first call), then
# sends N_SEND and N_CREDIT about a skeleton that is not its own, once n0's data plane
# reads that link, and makes a call behind them (so that n0 has read them by then).
FORGER = textwrap.dedent("""
    import sys, time
    from fit_rpc import Op
    from fit_rpc.netpath import SK_N
    from splitrack.guest.runtime import runtime
    rt = runtime()
    rt.call_raw("n0", Op.ECHO, b"hello")
    time.sleep(0.3)
    rt.send("n0", Op.N_SEND, SK_N.pack(int(sys.argv[1]), 4096))
    rt.send("n0", Op.N_CREDIT, SK_N.pack(int(sys.argv[1]), 1 << 20))
    rt.call_raw("n0", Op.ECHO, b"after")
    print("sent", flush=True)
""")


@pytest.fixture(scope="module")
def kp():
    with network_rack("kp") as rack_env:
        yield rack_env


def _echo(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    got = bytearray()
    while len(got) < len(payload):
        chunk = sock.recv(len(payload) - len(got))
        assert chunk, "EOF in the middle of an echo"
        got += chunk
    return bytes(got)


def _links(rack) -> dict:
    with rack.endpoint() as ep:
        return ep.call_args("n0", Op.STATS)[0]["links"]


@pytest.mark.parametrize("mode,send,data", [("ddio", "N_SEND", "STUB_DATA"),
                                            ("dma", "N_SEND_DMA", "STUB_DATA_DMA")])
def test_the_data_plane_carries_an_echo_and_counts_every_message(kp, mode, send, data):
    """DMA too once its rings are mapped (native/dma.h): the first echo maps them, in
    Python; the plane carries the rest."""
    rack, env = kp
    before = n0_network(rack)["plane"]
    with on_rack(env, ECHO_SERVER, NIC, mode=mode, name="kp") as (proc, (port,)), \
            socket.create_connection((NIC, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(ROUNDS):
            payload = bytes([i % 256]) * (100 + i)
            assert _echo(sock, payload) == payload
        during = n0_network(rack)["plane"]
        links = _links(rack)
    assert during["connections"] >= 1
    messages = during["messages"] - before["messages"]
    events = during["kernel_events"] - before["kernel_events"]
    assert messages >= ROUNDS and events >= ROUNDS   # each echo's N_SEND and kernel read
    assert during["handed_back"] - before["handed_back"] <= ROUNDS // 10
    # ... and the endpoint's counters have them, under the program's id, as if Python
    # had read and written them (one per echo at least, each way)
    program = next(peer for peer, ops in links.items()
                   if peer.startswith("p0.") and send in ops)
    assert links[program][send]["rx_msgs"] >= ROUNDS
    assert links[program][data]["tx_msgs"] >= ROUNDS
    assert links[program][send]["rx_bytes"] == 32 * links[program][send]["rx_msgs"]


def test_a_forged_n_send_for_another_processs_socket_changes_nothing(kp):
    rack, env = kp
    errors_before = _errors(rack)
    with on_rack(env, TELLING_ECHO, NIC, mode="ddio", name="kp") as (proc, (port, _)), \
            socket.create_connection((NIC, port), timeout=30) as sock:
        assert _echo(sock, b"before") == b"before"
        sk = proc.stdout.readline().strip()
        forged = run_on_rack(env, FORGER, sk, on="p1", name="kp")
        assert forged.stdout.strip() == "sent", forged.stderr
        # the victim's stream is as it was: no bytes of its ring were sent for the
        # forger, and its window is its own
        assert _echo(sock, b"after") == b"after"
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1)
    errors = _errors(rack)
    assert errors.get("service_error", 0) >= errors_before.get("service_error", 0) + 2


def _errors(rack) -> dict:
    with rack.endpoint() as ep:
        return ep.call_args("n0", Op.STATS)[0]["errors"]


def test_over_zeromq_the_python_path_carries_it_all():
    """zmq has no rings the plane could read: every connection stays Python's."""
    with running_rack(lambda s: small_spec(s, name="kpzmq", transport="zmq")) as rack:
        env = environ(rack)
        with on_rack(env, ECHO_SERVER, NIC, mode="ddio", name="kpzmq") as (_, (port,)), \
                socket.create_connection((NIC, port), timeout=30) as sock:
            for i in range(50):
                payload = bytes([i]) * 1000
                assert _echo(sock, payload) == payload
            plane = n0_network(rack)["plane"]
        assert plane["connections"] == 0 and plane["messages"] == 0
        assert plane["kernel_events"] == 0


# Streams 4 KiB sends with TCP_NODELAY (an N_SEND each) to whoever connects, forever.
STREAMER = textwrap.dedent("""
    import os, socket, sys
    s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
    print(s.getsockname()[1], os.getpid(), flush=True)
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        c.sendall(b"x" * 4096)
""")


def test_a_sender_killed_mid_stream_leaves_no_link_behind(kp):
    """Its link hangs up while it streams N_SENDs, which the plane reads: the link
    closes once they are read, whoever read the last of them, and the process is
    gone from n0's per-peer counters (folded into p0.*). (That the transport closes
    a link whose last messages the plane read is test_shm_transport's.)"""
    rack, env = kp
    with rack.endpoint() as ep:
        def n0_links():
            return ep.call_args("n0", Op.STATS)[0]["links"]
        with on_rack(env, STREAMER, NIC, mode="ddio", name="kp") as (proc, (port, pid)), \
                socket.create_connection((NIC, port), timeout=30) as sock:
            for _ in range(200):
                sock.recv(1 << 16)
            os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=30)
        wait_until(lambda: f"p0.{pid}" not in n0_links(), timeout=15)
