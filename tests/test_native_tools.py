"""Real tools on the rack (native/preload.c): iperf3, sockperf, curl, nc, wrk and
redis-server run unmodified with `splitrack run`, their TCP and UDP through n0 (its
counters say so), when installed. .ci/run installs them from Debian's packages; a test skips,
saying why, only where its tool is absent."""

import functools
import http.server
import json
import shlex
import shutil
import socket
import threading
import time

import pytest

from netprogs import n0_network, on_rack, run, run_on_rack

NIC = "127.0.0.11"
OUTSIDE = "127.0.0.2"   # a host of the outside world: not the rack's, not 127.0.0.1


RACK = "tools"   # the name of this module's rack (conftest.py: net)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (.ci/run installs it from Debian's packages)")
    return path


def test_iperf3_server_on_the_rack(net):
    """iperf3 -s on p0 (its TCP through n0: n0 accepts its control and data
    connections), a client outside: a second of bytes."""
    iperf3 = tool("iperf3")
    rack, env = net
    before = n0_network(rack)["accepted"]
    port = _free_port()
    with on_rack(env, ["sh", "-c", f'echo listening {port}; exec {iperf3} -s -1 -B {NIC} '
                                   f'-p {port}'], name=RACK) as (server, _):
        got = _retry(lambda: run([iperf3, "-c", NIC, "-p", str(port), "-t", "1", "-J"]),
                     ok=lambda g: g.returncode == 0 and '"error"' not in g.stdout)   # (-J: 0)
        report = json.loads(got.stdout)
        assert report["end"]["sum_received"]["bytes"] > 1_000_000, report.get("error")
        server.wait(timeout=30)
        assert "error" not in server.stdout.read().lower()
    assert n0_network(rack)["accepted"] - before >= 2


def test_sockperf_ping_pong_tcp_and_udp_on_the_rack(net):
    """sockperf's server on p0, its client on p1, no shortcut: through n0 both ways (n0
    accepts the TCP connection and carries the UDP datagrams)."""
    sockperf = tool("sockperf")
    rack, env = net
    before = n0_network(rack)
    for proto in ("--tcp", None):
        port = _free_port()
        server = ["sh", "-c", f"echo listening {port}; exec {sockperf} server -i {NIC} "
                              f"-p {port} {proto or ''}"]
        with on_rack(env, server, name=RACK):
            client = [sockperf, "ping-pong", "-i", NIC, "-p", str(port), "-t", "1",
                      "-m", "128", *([proto] if proto else [])]
            got = _retry(lambda c=client: run_on_rack(env, c, on="p1", name=RACK,
                                                      flags=("--no-shortcuts",)),
                         ok=lambda g: "percentile 50.000" in g.stdout)   # (refused: exit 0)
            assert got.returncode == 0 and "percentile 50.000" in got.stdout, got.stdout[-500:]
    after = n0_network(rack)
    assert after["accepted"] - before["accepted"] >= 1
    assert after["datagrams_in"] - before["datagrams_in"] >= 1000


def test_curl_on_the_rack_fetches_from_outside(net, tmp_path):
    curl = tool("curl")
    _, env = net
    (tmp_path / "page.txt").write_text("through the rack\n")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(tmp_path))
    seen = []

    class Server(http.server.ThreadingHTTPServer):
        def verify_request(self, request, client_address):
            seen.append(client_address[0])
            return True

    with Server((OUTSIDE, 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        got = run_on_rack(env, [curl, "-sS", f"http://{OUTSIDE}:{httpd.server_port}/page.txt"],
                          name=RACK)
        httpd.shutdown()
    assert got.returncode == 0 and got.stdout == "through the rack\n", got.stderr
    assert seen and all(ip in ("127.0.0.11", "127.0.0.12") for ip in seen)   # a NIC of n0


def test_wrk_on_the_rack_loads_a_server_outside(net, tmp_path):
    """wrk on p0 (two threads of epoll event loops, four connections; its loop's table
    has room for the descriptors Linux would give it, no more) against a web server
    outside: every connection made, requests answered, from n0's NICs."""
    wrk = tool("wrk")
    _, env = net
    (tmp_path / "index.html").write_text("rack\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass   # (a line a request)

    handler = functools.partial(Quiet, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer((OUTSIDE, 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        got = run_on_rack(env, [wrk, "-t2", "-c4", "-d1s", f"http://{OUTSIDE}:"
                                f"{httpd.server_port}/"], name=RACK, timeout=60)
        httpd.shutdown()
    assert got.returncode == 0, got.stdout + got.stderr
    assert "Socket errors: connect 0," in got.stdout or "Socket errors" not in got.stdout, (
        got.stdout)   # (a slow machine's read timeouts are wrk's to count, not this test's)
    assert int(got.stdout.split(" requests in ")[0].split()[-1]) > 0, got.stdout


def test_nc_on_the_rack_serves_and_sends(net):
    """nc -l on p0, nc on p1 (no shortcut): the line crosses n0, which accepts it."""
    nc = tool("nc")
    rack, env = net
    before = n0_network(rack)["accepted"]
    port = _free_port()
    listener = ["sh", "-c", f"echo listening {port}; exec {nc} -l {NIC} {port}"]
    with on_rack(env, listener, name=RACK) as (server, _):
        got = _retry(lambda: run_on_rack(
            env, ["sh", "-c", f"echo hello rack | {nc} -N {NIC} {port}"], on="p1",
            name=RACK, flags=("--no-shortcuts",)))
        assert got.returncode == 0, got.stderr
        assert server.wait(timeout=30) == 0
        assert server.stdout.read() == "hello rack\n"
    assert n0_network(rack)["accepted"] - before >= 1


def test_redis_server_on_the_rack_serves_redis_benchmark(net):
    """redis-server on p0 (an epoll event loop, and jemalloc for its malloc: the
    interposer leaves a program's allocator alone unless --memory rack), redis-cli
    and redis-benchmark outside: what was SET comes back, and 2,000 requests of 10
    clients at once are all answered."""
    server, cli, bench = tool("redis-server"), tool("redis-cli"), tool("redis-benchmark")
    rack, env = net
    before = n0_network(rack)["accepted"]
    port = _free_port()
    argv = [server, "--bind", NIC, "--port", str(port), "--save", "", "--appendonly", "no"]
    with on_rack(env, ["sh", "-c", f"echo listening {port}; exec {shlex.join(argv)}"],
                 name=RACK) as (program, _):
        said = _retry(lambda: run([cli, "-h", NIC, "-p", str(port), "set", "rack", "lego"]),
                      ok=lambda g: g.stdout.strip() == "OK")
        assert said.stdout.strip() == "OK", (said.stdout, said.stderr, program.poll())
        assert run([cli, "-h", NIC, "-p", str(port), "get", "rack"]).stdout == "lego\n"
        got = run([bench, "-h", NIC, "-p", str(port), "-q", "-n", "2000", "-c", "10",
                   "-t", "set,get", "--csv"], timeout=120)
        assert got.returncode == 0 and got.stdout.count('"') >= 4, (got.stdout, got.stderr)
        assert program.poll() is None   # still serving
    assert n0_network(rack)["accepted"] - before >= 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((NIC, 0))
        return s.getsockname()[1]


def _retry(fn, tries: int = 20, ok=lambda got: got.returncode == 0):
    """A tool's client, until its server (started just before) listens."""
    for _ in range(tries):
        got = fn()
        if ok(got):
            return got
        time.sleep(0.25)
    return got

