"""Message packing (splitrack/guest/nic_path.py): consecutive small sends of a rack
socket go to the nComponent together, and nothing a TCP peer can see changes:
every byte arrives, in order, and held bytes leave even while the program
computes, or before a native program's poll. TCP_NODELAY and SPLITRACK_PACKING=0
(`--no-packing`) send each send on its own."""

import hashlib
import socket
import subprocess
import textwrap

import pytest

from fit_rpc import Op
from helpers import SPLITRACK
from netprogs import network_rack, on_rack, run_on_rack
from splitrack.params import SOCKET_SEND_BUFFER_BYTES

NIC = "127.0.0.11"
OUTSIDE = "127.0.0.2"   # a host of the outside world: not the rack's, not 127.0.0.1

# argv: NIC COUNT SIZE NODELAY (0; 1: on the socket; 2: on the listener) THEN (close or
# sleep). Prints "port pid"; sends COUNT messages of SIZE bytes (message i is byte i % 251
# repeated) to the first client.
SENDER = textwrap.dedent("""
    import os, socket, sys, time
    ip, count, size, nodelay, then = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    s = socket.socket()
    if nodelay == 2:   # set on the listener: the accepted socket inherits it, as on Linux
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((ip, 0))
    s.listen()
    print(s.getsockname()[1], os.getpid(), flush=True)
    c, _ = s.accept()
    assert c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == (nodelay == 2)
    if nodelay == 1:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(count):
        c.sendall(bytes([i % 251]) * size)
    if then == "sleep":   # no socket call again: the flusher must send what is held
        time.sleep(120)
    c.close()
""")


@pytest.fixture(scope="module")
def pack():
    with network_rack("pack") as rack_env:
        yield rack_env


def _expected(count: int, size: int) -> bytes:
    return b"".join(bytes([i % 251]) * size for i in range(count))


def _receive(port: int, n: int) -> bytes:
    out = bytearray()
    with socket.create_connection((NIC, port), timeout=30) as sock:
        while len(out) < n:
            chunk = sock.recv(1 << 20)
            assert chunk, f"EOF after {len(out)} of {n} bytes"
            out += chunk
    return bytes(out)


def _sends_seen_by_n0(rack, process: str = "") -> int:
    """N_SEND(_DMA) messages n0 got from `process` and from the ended processes of p0
    (whose counters n0 folds into "p0.*"): take one before a program and one after."""
    with rack.endpoint() as ep:
        links = ep.call_args("n0", Op.STATS)[0]["links"]
    return sum(links.get(peer, {}).get(op, {}).get("rx_msgs", 0)
               for peer in {process, "p0.*"} for op in ("N_SEND", "N_SEND_DMA"))


@pytest.mark.parametrize("mode", ["dma", "ddio"])
@pytest.mark.parametrize("nodelay", [0, 1, 2])
def test_small_sends_are_packed_unless_nodelay_and_every_byte_arrives(pack, mode, nodelay):
    rack, env = pack
    count, size = 3000, 100
    before = _sends_seen_by_n0(rack)
    with on_rack(env, SENDER, NIC, str(count), str(size), str(nodelay), "close", mode=mode,
                 name="pack") as (proc, (port, pid)):
        got = _receive(port, count * size)
        assert proc.wait(timeout=30) == 0
    assert hashlib.sha256(got).digest() == hashlib.sha256(_expected(count, size)).digest()
    messages = _sends_seen_by_n0(rack, f"p0.{pid}") - before
    if nodelay:
        assert messages >= count     # no waiting: every send is its own message (or two,
        # where a full window split it)
    else:
        assert messages < count // 4, messages


@pytest.mark.parametrize("how", ["--no-packing", "SPLITRACK_PACKING=0"])
def test_no_packing_sends_each_send_on_its_own(pack, how):
    rack, env = pack
    count, size = 500, 100
    flags, run_env = ((how,), env) if how.startswith("--") else \
        ((), dict(env, SPLITRACK_PACKING="0"))
    before = _sends_seen_by_n0(rack)
    with on_rack(run_env, SENDER, NIC, str(count), str(size), "0", "close", mode="dma",
                 name="pack", flags=flags) as (proc, (port, pid)):
        got = _receive(port, count * size)
        assert proc.wait(timeout=30) == 0
    assert got == _expected(count, size)
    assert _sends_seen_by_n0(rack, f"p0.{pid}") - before >= count


@pytest.mark.parametrize("mode", ["dma", "ddio"])
def test_held_bytes_leave_while_the_program_does_something_else(pack, mode):
    rack, env = pack
    count, size = 50, 10
    with on_rack(env, SENDER, NIC, str(count), str(size), "0", "sleep", mode=mode,
                 name="pack") as (proc, (port, _)):
        assert _receive(port, count * size) == _expected(count, size)
        assert proc.poll() is None   # still asleep: the bytes did not wait for the exit


# argv: NIC. Prints "port pid"; to the first client, send()s and sendall()s a mix of
# sizes (a byte to past a batch's worth; stage, line and ring boundaries in between) as
# every kind of buffer, one straight after another so that packing holds most of them;
# prints the counts send() returned.
MIXED = textwrap.dedent("""
    import array, os, socket, sys
    s = socket.socket()
    s.bind((sys.argv[1], 0))
    s.listen()
    print(s.getsockname()[1], os.getpid(), flush=True)
    c, _ = s.accept()
    bufs, counts = [], []
    for i, size in enumerate(SIZES * 3):   # (made first: the sends come in a burst)
        data = bytes((i + k) % 251 for k in range(size))
        bufs.append((data, bytearray(data), memoryview(data), memoryview(bytearray(data)),
                     array.array("B", data))[i % 5] if size % 4 else
                    memoryview(bytearray(data)).cast("i"))   # (len(): size / 4)
    c.sendall(bytes(WARM))   # the send ring's lines once round: cached (a miss is
    for i, buf in enumerate(bufs):   # the general way's)
        if i % 2:
            c.sendall(buf)
        else:
            counts.append(c.send(buf))
    print(counts, flush=True)
    try:
        c.send(memoryview(bytearray(8))[::2])   # not contiguous: what Linux says
    except BufferError as exc:
        print("BufferError", exc, flush=True)
    c.close()
""")
MIXED_SIZES = [1, 100, 4000, 95, 4096, 4097, 1, 8191, 9000, 70000, 300000, 12, 4096]


@pytest.mark.parametrize("mode", ["dma", "ddio"])
def test_held_sends_of_every_size_and_buffer_kind_arrive_in_order(pack, mode):
    """A send that packing holds is one native call (sp_hold) when it fits: into the
    stage, or into the ring's lines; the rest go the general way. Mixed, every byte
    arrives in order, and send() counts bytes, whatever the buffer's item size; in
    DMA too, where the held bytes are what the lines flushed to the mComponent are."""
    rack, env = pack
    sizes, warm = MIXED_SIZES * 3, SOCKET_SEND_BUFFER_BYTES + (64 << 10)
    expected = bytes(warm) + b"".join(bytes((i + k) % 251 for k in range(size))
                                      for i, size in enumerate(sizes))
    code = MIXED.replace("SIZES", repr(MIXED_SIZES)).replace("WARM", str(warm))
    with on_rack(env, code, NIC, mode=mode, name="pack") as (proc, (port, _)):
        got = _receive(port, len(expected))
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert hashlib.sha256(got).digest() == hashlib.sha256(expected).digest()
    counts, refused = out.splitlines()
    assert counts == repr(sizes[::2])
    assert refused == "BufferError memoryview: underlying buffer is not C-contiguous"


def test_run_help_documents_no_packing():
    out = subprocess.run([SPLITRACK, "run", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "--no-packing" in out


@pytest.mark.parametrize("mode", ["ddio", "dma"])
@pytest.mark.parametrize("how", ["--pieces", "--polled-pieces"])
def test_sends_held_back_leave_before_a_c_program_polls(pack, built, mode, how):
    """A C client sends 20 small pieces at once, then poll()s for their echo: all
    2,000 bytes come back, none left behind. Packing holds all but the first back,
    whether the client polled before (--polled-pieces: its runtime is polled) or not
    (its first poll makes it so): n0 gets the 20 in a few N_SENDs."""
    rack, env = pack
    before = _sends_seen_by_n0(rack)
    with subprocess.Popen([built["echo_server"], OUTSIDE, "0", "block", "1"],
                          stdout=subprocess.PIPE, text=True) as outside:
        port = outside.stdout.readline().split()[1]
        got = run_on_rack(env, [built["echo_client"], OUTSIDE, port, how, "20", "100"],
                          name="pack", mode=mode)
        assert (got.returncode, got.stdout) == (0, "pieces ok\n"), got.stderr
        outside.wait(timeout=30)
    assert _sends_seen_by_n0(rack) - before < 10
