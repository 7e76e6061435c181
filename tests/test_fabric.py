"""The interconnect model ([fabric]: splitrack/spec.py, fit_rpc/fabric.py, the
rings' due times in native/fitring.c): the spec's keys and their errors, which
links it costs, the rings' order and due times, the waits that honour them, and
a real rack with a model on which FIT, m0's misses answered in C, sockets
through n0 and the FIT shortcut still work.

No wall-clock assertion here: "a message is not taken before it is due" is a
correctness property (a lower bound, on the monotonic clock); how close to its
due time it is taken is measured by `splitrack bench fit --fabric-latency`."""

import os
import select
import socket
import subprocess
import textwrap
import threading

import pytest
from test_fitring import pair

from benchmarks.verbs import latencies
from fit_rpc import Endpoint, Op, codec
from fit_rpc.fabric import Fabric, Model, link_class
from fit_rpc.shm_transport import ShmTransport
from helpers import SPLITRACK, attached_vm, running_rack, small_spec
from native.fitring import NEVER, Segment, WaitSet, now_ns
from netprogs import ECHO_CLIENT, ECHO_SERVER, SELECTORS_ECHO, environ, on_rack, run_on_rack
from splitrack.cli import main
from splitrack.spec import SpecError, load_spec

NIC = "127.0.0.11"
MINIMAL = {"pcomponent": [{"id": "p0", "extcache": "1MiB", "ways": 4}],
           "mcomponent": [{"id": "m0", "memory": "16MiB"}]}


def fabric_of(table: dict) -> Fabric:
    return Fabric(load_spec({**MINIMAL, "fabric": table}).fabric)


# ---- the spec -------------------------------------------------------------------------
def test_units_of_time_and_bandwidth():
    fab = load_spec({**MINIMAL, "fabric": {"latency": "1.5ms", "bandwidth": "40Gbps"}}).fabric
    assert (fab["latency_ns"], fab["bytes_per_s"]) == (1_500_000, 5_000_000_000)
    for text, ns in (("0", 0), (0, 0), ("500ns", 500), ("2us", 2000), ("2µs", 2000),
                     ("0.5s", 500_000_000)):
        assert fabric_of({"latency": text}).default == Model(ns, 0)
    for text, rate in (("10Gbit/s", 1_250_000_000), ("5GB/s", 5_000_000_000),
                       ("100Mbps", 12_500_000), ("1Mbps", 125_000)):
        assert fabric_of({"bandwidth": text}).default == Model(0, rate)


def test_a_class_table_overrides_the_global_keys_for_its_class():
    fab = fabric_of({"latency": "2us", "bandwidth": "40Gbps",
                     "p-m": {"latency": "5us"}, "p-p": {"bandwidth": "1Gbps"}})
    assert fab.model("p0", "m0") == fab.model("m0", "p1.77") == Model(5000, 5_000_000_000)
    assert fab.model("p0.1", "p1.2") == Model(2000, 125_000_000)
    assert fab.model("n0", "p0") == fab.model("m0", "s0") == Model(2000, 5_000_000_000)
    only = fabric_of({"p-n": {"latency": "3us"}})
    assert only.model("p0.5", "n0") == Model(3000, 0)
    assert only.model("p0", "m0") is None   # no [fabric] keys: other classes cost nothing


def test_which_links_cross_the_fabric():
    assert [link_class(a, b) for a, b in (("p0", "m0"), ("n0", "p1.9"), ("m0", "n0"),
                                          ("p0.1", "p1.2"), ("s0", "p0"), ("m0", "s0"))] \
        == ["p-m", "p-n", "n-m", "p-p", "p-s", "m-s"]
    for a, b in (("p0", "p0.5"), ("p0.1", "p0.2"), ("global", "p0"), ("cli.1.1", "m0")):
        assert link_class(a, b) is None, (a, b)


@pytest.mark.parametrize("table, says", [
    ({"latency": "2"}, "fabric.latency: '2' is not a time (0, or e.g. '500ns', '2us', "
                       "'1.5ms')"),
    ({"latency": "2 parsecs"}, "fabric.latency: '2 parsecs' is not a time"),
    ({"latency": True}, "fabric.latency: True is not a time"),
    ({"latency": "2s"}, "fabric.latency: '2s' is more than 1s"),
    ({"bandwidth": 40}, "fabric.bandwidth: 40 is not a bandwidth (e.g. '40Gbps', "
                        "'10Gbit/s', '5GB/s')"),
    ({"bandwidth": "10kbps"}, "fabric.bandwidth: '10kbps' is less than 1Mbps"),
    ({"p-m": {"latency": "fast"}}, "fabric.p-m.latency: 'fast' is not a time"),
    ({"p-m": {"delay": "1us"}}, "fabric.p-m.delay: unknown key (expected latency, bandwidth)"),
    ({"p-m": {}}, "fabric.p-m: sets neither latency nor bandwidth"),
    ({"p-m": "1us"}, "fabric.p-m: must be a table ([fabric.p-m])"),
    ({"m-p": {"latency": "1us"}}, "fabric.m-p: unknown key (expected latency, bandwidth, or "
                                  "a link class table: p-m, p-n, n-m, p-p, p-s)"),
    ({}, "fabric: sets no latency, bandwidth or link class"),
])
def test_bad_fabric_values_name_the_key(table, says):
    with pytest.raises(SpecError) as info:
        load_spec({**MINIMAL, "fabric": table})
    assert str(info.value).startswith(f"<dict>: {says}")
    assert "\n" not in str(info.value)


def test_zmq_refuses_a_fabric():
    with pytest.raises(SpecError, match=r"^<dict>: fabric: needs rack.transport 'shm' \(the "
                                        r"zmq transport applies no interconnect model\)$"):
        load_spec({**MINIMAL, "rack": {"transport": "zmq"}, "fabric": {"latency": "1us"}})


def test_no_fabric_is_no_model_at_all(tmp_path):
    spec = load_spec(MINIMAL)
    assert spec.fabric is None and "fabric" not in spec.to_json()
    t = ShmTransport("m0", f"shm://{tmp_path}/m0.fit")
    try:
        assert t.fabric is None and t.waker is None and t.fileno() == t.bell.efd
    finally:
        t.close()


def test_a_bad_fabric_on_the_command_line_is_one_line(tmp_path, run_root):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[pcomponent]]\nid = "p0"\nextcache = "1MiB"\nways = 4\n'
                   '[[mcomponent]]\nid = "m0"\nmemory = "16MiB"\n'
                   '[fabric.p-n]\nlatency = "2 us later"\n')
    proc = subprocess.run([SPLITRACK, "up", "--spec", str(bad)], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (
        1, f"splitrack: error: {bad}: fabric.p-n.latency: '2 us later' is not a time "
           "(0, or e.g. '500ns', '2us', '1.5ms')\n")


@pytest.mark.parametrize("argv, says", [
    (["tcp", "--fabric-latency", "2"], "argument --fabric-latency: '2' is not a list of times"),
    (["tcp", "--fabric-latency", "1,1us"], "'1,1us' names a latency twice"),
    (["fit", "--fabric-latency", "5,2s"], "'5,2s': a latency is more than 1s"),
    (["fit", "--fabric-bandwidth", "fast"], "argument --fabric-bandwidth: 'fast' is not a "
                                            "bandwidth of at least 1Mbps"),
    (["tcp", "--fabric-bandwidth", "1Gbps"], "unrecognized arguments: --fabric-bandwidth"),
])
def test_bad_bench_fabric_options_are_one_line(run_root, capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not os.listdir(run_root)


def test_bench_fabric_latencies_take_the_last_unit():
    assert latencies("0,1,2,5,10,20,50us") == (0, 1000, 2000, 5000, 10_000, 20_000, 50_000)
    assert latencies("1ms,500ns") == (500, 1_000_000)


# ---- the rings ---------------------------------------------------------------------------
def model_pair(latency_ns: int, bytes_per_s: int = 0):
    """(producer, consumer, wait set, bell) of ring 0 of a fresh segment with a model
    (the bell must live as long as the wait set: its word is in the bell's page)."""
    tx, rx, bell = pair(256 * 1024, latency_ns, bytes_per_s)
    ws = WaitSet(bell.word, bell.efd)
    ws.rings = [rx]
    return tx, rx, ws, bell


def test_a_ring_without_a_model_is_as_before():
    seg, fd = Segment.create(64 * 1024)
    os.close(fd)
    ring = seg.ring(0, None, -1)
    assert not ring.modeled and ring.max_payload == 32 * 1024 - 8


@pytest.mark.parametrize("spin_s", [0.0, 0.0002])   # poll_us 0 and the default
def test_records_come_in_order_and_never_before_they_are_due(spin_s):
    latency, rate = 300_000, 50_000_000   # 300 us, 400 Mbit/s: 20 us a kilobyte
    tx, rx, ws, _bell = model_pair(latency, rate)
    assert tx.modeled and rx.modeled and tx.max_payload == 128 * 1024 - 16
    sizes = [0, 1, 1000, 8000, 50, 30_000, 7, 1000] * 3
    sent, carried = [], 0   # each send's time just before it; the link's busy time
    for i, size in enumerate(sizes):
        sent.append(now_ns())
        assert tx.send(i.to_bytes(2, "little"), b"x" * size)
        carried += (2 + size) * 10**9 // rate
    assert rx.pending()
    for i, size in enumerate(sizes):
        while (view := rx.peek()) is None:
            ws.wait(spin_s, 5.0)
        taken = now_ns()
        assert int.from_bytes(view[:2], "little") == i and len(view) == 2 + size
        assert taken >= sent[i] + latency
        rx.consume()
    # the link carried every byte at its bandwidth before the last one was due
    assert taken >= sent[0] + carried + latency
    assert ws.next_due() == NEVER and not rx.pending()


def test_a_record_not_yet_due_is_not_there():
    tx, rx, ws, _bell = model_pair(200_000_000)   # 200 ms
    t0 = now_ns()
    assert tx.send(b"later")
    view, looked = rx.peek(), now_ns()
    assert view is None or looked >= t0 + 200_000_000
    if view is None:
        assert rx.pending() and ws.ready() == -1 and ws.next_due() >= t0 + 200_000_000
        assert ws.arm() and ws.due == ws.next_due()   # armed: nothing due, a time to wake
        ws.disarm()
        assert ws.wait(0.0, None) == 0 and now_ns() >= t0 + 200_000_000
        view = rx.peek()
    assert bytes(view) == b"later"


# ---- endpoints: the C waits and an outside loop ------------------------------------------------
def test_an_outside_loop_wakes_when_a_message_is_due(tmp_path):
    """The server sleeps in epoll on fileno() with no timeout: only the waker's timer
    can wake it for a request that is published but not yet due."""
    fab = fabric_of({"latency": "5ms"})   # far past any spin
    bind = f"shm://{tmp_path}/m0.fit"
    server = Endpoint("m0", transport=ShmTransport("m0", bind, 0, fab))
    client = Endpoint("p0", transport=ShmTransport("p0", None, 0, fab))
    stop = threading.Event()

    def loop():
        poller = select.epoll()
        poller.register(server.fileno(), select.EPOLLIN)
        while not stop.is_set():
            while server.serve(0):
                pass
            if server.arm():
                poller.poll()   # no timeout
                server.disarm()
        poller.close()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        client.add_peer("m0", server.address)
        assert server.transport.waker is not None
        for i in range(10):
            t0 = now_ns()
            assert bytes(client.call("m0", Op.ECHO, b"%d" % i, timeout=20)) == b"%d" % i
            assert now_ns() >= t0 + 2 * 5_000_000   # there and back, each due after 5 ms
    finally:
        stop.set()
        client.send("m0", Op.ECHO, b"wake up")
        thread.join(timeout=30)
        client.close()
        server.close()
    assert not thread.is_alive()


# ---- a rack with a model ------------------------------------------------------------------------
LATENCY_US, SHORTCUT_US = 20, 50


@pytest.fixture(scope="module")
def fabric_rack():
    def spec(storage):
        return {**small_spec(storage, name="fab"),
                "fabric": {"latency": f"{LATENCY_US}us", "bandwidth": "10Gbps",
                           "p-p": {"latency": f"{SHORTCUT_US}us"}}}
    with running_rack(spec) as rack:
        yield rack, environ(rack)


def test_fit_works_and_a_round_trip_costs_the_model(fabric_rack):
    rack, _ = fabric_rack
    with rack.endpoint() as ep:
        assert bytes(ep.call("m0", Op.ECHO, b"hello")) == b"hello"   # a client: no model
        _, data = ep.call_args("p0", Op.PING_PEER, {"target": "m0", "size": 128, "count": 50})
    rtts = memoryview(bytes(data)).cast("d")
    assert len(rtts) == 50 and min(rtts) >= 2 * LATENCY_US   # p0 -> m0 -> p0, each way L


def test_a_miss_that_m0_answers_in_c_costs_the_model_too(fabric_rack):
    """m0's data plane (native/mplane.h) takes a request only once it is due, and its
    reply goes out with the link's model, as a Python handler's would."""
    rack, _ = fabric_rack
    with attached_vm(rack) as vm:
        line = vm.line
        addr = vm.alloc(8 * line)
        vm.write(addr, b"\x5a" * 8 * line)
        vm.flush(addr, 8 * line)
        rtts = []
        for page in range(8):
            vm.invalidate(addr, 8 * line)
            t0 = now_ns()
            assert bytes(vm.read(addr + page * line, line)) == b"\x5a" * line
            rtts.append((now_ns() - t0) / 1000)
    with rack.endpoint() as ep:
        assert ep.call_args("m0", Op.STATS)[0]["memory"]["plane_misses"] >= 8
    assert min(rtts) >= 2 * LATENCY_US   # p0.PID -> m0 -> p0.PID, each way L


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_programs_socket_echo_through_n0(fabric_rack, mode):
    _, env = fabric_rack
    with on_rack(env, ECHO_SERVER, NIC, mode=mode, name="fab") as (_, (port,)), \
            socket.create_connection((NIC, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for size in (1, 100, 4096, 70_000, 1 << 20):
            data = os.urandom(size)
            t0 = now_ns()
            sock.sendall(data)
            got = bytearray()
            while len(got) < size:
                chunk = sock.recv(size - len(got))
                assert chunk, "early EOF"
                got += chunk
            assert got == data
            assert now_ns() >= t0 + 2 * LATENCY_US * 1000   # n0 -> the program -> n0


def test_the_fit_shortcut_and_a_selecting_server(fabric_rack):
    """p1 -> p0 over a FIT shortcut (class p-p); the selectors server makes p0's
    runtime read its inbox and channels in its own thread, sleeping on their fds."""
    _, env = fabric_rack
    rtt = textwrap.dedent("""
        import socket, sys, time
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as c:
            best = None
            for _ in range(20):
                t0 = time.monotonic_ns()
                c.sendall(b"ping")
                got = b""
                while len(got) < 4:
                    got += c.recv(4 - len(got))
                best = min(best or 1 << 62, time.monotonic_ns() - t0)
            print(best // 1000, flush=True)
    """)
    for server in (ECHO_SERVER, SELECTORS_ECHO):
        with on_rack(env, server, NIC, name="fab") as (_, (port,)):
            proc = run_on_rack(env, ECHO_CLIENT, NIC, str(port), "3", on="p1", name="fab")
            assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stderr
            proc = run_on_rack(env, rtt, NIC, str(port), on="p1", name="fab")
            assert proc.returncode == 0, proc.stderr
            assert int(proc.stdout) >= 2 * SHORTCUT_US   # there and back over p-p


def test_a_client_is_off_the_fabric(fabric_rack):
    """A client (cli.*) is off the fabric: its links carry no model."""
    rack, _ = fabric_rack
    with rack.endpoint() as ep:
        codec.decode(ep.call("m0", Op.ECHO, codec.encode({"x": 1})))
        link = ep.transport.out["m0"]
        assert not link.tx.modeled and not link.rx.modeled
