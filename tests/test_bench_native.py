"""bench native's own pieces (benchmarks/native.py), without a rack: the A/B behind "the
interposer adds nothing measurable", and the CPU accounting behind the iperf3 floor."""

import os
import shutil
import socket
import sys

import pytest


def test_bench_natives_program_without_sockets_runs_with_the_interposer_and_without():
    """The A/B behind "the interposer adds nothing measurable": each preloaded run has
    native/preload.c mapped, each plain run has not (a run that says otherwise exits 3,
    which _no_sockets raises on), and every run is timed."""
    from benchmarks.native import _no_sockets
    from splitrack.native_run import preload_env
    assert "_preload" in preload_env({})["LD_PRELOAD"]   # what the preloaded runs get
    probe = ("import os, sys; mapped = '_preload' in open('/proc/self/maps').read(); "
             "sys.exit(0 if mapped == ('_preload' in os.environ.get('LD_PRELOAD', '')) "
             "else 3)")
    ms = _no_sockets([sys.executable, "-c", probe], 3)
    assert sorted(ms) == ["plain", "preloaded"]
    assert all(len(v) == 3 and min(v) > 0 for v in ms.values())


def test_bench_natives_iperf3_run_counts_the_cpu_of_both_ends(tmp_path):
    """bench native's CPU accounting, behind its rack-server floor: over one plain iperf3
    run, the server's CPU (psutil, by PID) and the client's (its rusage) are both
    counted, in ms per MB received."""
    from benchmarks.native import _iperf3, _tool_server
    iperf3 = shutil.which("iperf3")
    if iperf3 is None:
        pytest.skip("no iperf3 on this machine (Debian: apt install iperf3)")
    with socket.create_server(("127.0.0.5", 0)) as probe:
        port = probe.getsockname()[1]
    with _tool_server([iperf3, "-s", "-B", "127.0.0.5", "-p", str(port)], [],
                      dict(os.environ), str(tmp_path)) as tool:
        mbps, used = _iperf3([iperf3], "127.0.0.5", port, 1, tool,
                             procs={"server": tool.proc.pid})
    assert mbps > 0
    assert sorted(used) == ["client", "server"]
    assert all(0 < ms_per_mb < 100 for ms_per_mb in used.values()), used
