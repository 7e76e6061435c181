"""Signals in native programs on the rack (native/preload_signal.c), as on Linux: a
handler installed without SA_RESTART ends a blocking accept(), recv() or send() with
EINTR (a send that sent part returns that count; recv through n0 and on a FIT
shortcut); with SA_RESTART the call goes on waiting; and Ctrl-C ends a program that
does not handle it, with SIGINT's status. The probe is tests/c/signal_probe.c."""

import signal
import socket
import time

import pytest

from netprogs import on_rack, run_on_rack

NIC = "127.0.0.11"
OUTSIDE = "127.0.0.2"   # a host of the outside world: not the rack's, not 127.0.0.1
RACK = "native-signals"   # the name of this module's rack (conftest.py: net)


def test_a_signal_handler_without_sa_restart_ends_a_blocking_rack_call_with_eintr(net, built):
    """A C program's SIGALRM handler installed without SA_RESTART (by sigaction, or
    System V's signal(), what strict ISO C's is) comes while accept(), recv() and a
    send() that found no room wait on rack sockets (recv through n0, and on a FIT
    shortcut): each returns EINTR, as on Linux, rather than the stub's wait going on
    (the interposer wraps the program's handlers: native/preload_signal.c); a send of
    more than fits returns the part that went."""
    rack, env = net
    probe = built["signal_probe"]
    for how in ("plain", "sysv"):   # sigaction without SA_RESTART; System V's signal()
        got = run_on_rack(env, [probe, NIC, "0", "accept", how], name=RACK, timeout=30)
        assert got.stdout.splitlines()[1:] == ["alarm", "accept EINTR alarms 1"], (got.stdout,
                                                                          got.stderr)
    with socket.create_server((OUTSIDE, 0)) as quiet:   # takes the connection, says nothing
        got = run_on_rack(env, [probe, OUTSIDE, str(quiet.getsockname()[1]), "recv", "plain"],
                          name=RACK, timeout=30)
    assert got.stdout.splitlines()[1:] == ["alarm", "recv EINTR alarms 1"], (got.stdout, got.stderr)
    with socket.create_server((OUTSIDE, 0)) as deaf:   # takes the connection, reads nothing
        got = run_on_rack(env, [probe, OUTSIDE, str(deaf.getsockname()[1]), "send", "plain"],
                          name=RACK, timeout=30)
    assert got.stdout.splitlines()[1:] == ["alarm", "send EINTR alarms 1"], (got.stdout,
                                                                             got.stderr)
    with socket.create_server((OUTSIDE, 0)) as deaf:   # a send that went in part: its count
        got = run_on_rack(env, [probe, OUTSIDE, str(deaf.getsockname()[1]), "bigsend",
                                "plain"], name=RACK, timeout=30)
    assert got.stdout.splitlines()[1:] == ["alarm", "bigsend returned part alarms 1"], (
        got.stdout, got.stderr)
    with on_rack(env, SILENT, NIC, name=RACK) as (_, (port,)):   # p0: a FIT shortcut
        got = run_on_rack(env, [probe, NIC, str(port), "recv", "plain"], on="p1", name=RACK,
                          timeout=30)
    assert got.stdout.splitlines()[1:] == ["alarm", "recv EINTR alarms 1"], (got.stdout, got.stderr)


SILENT = """
import socket, sys, time
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["restart", "signal"])
def test_sa_restart_keeps_a_rack_call_waiting_and_sigint_ends_the_program(net, built, how):
    """With SA_RESTART (sigaction's, beside another signal's handler without it; or
    signal()'s, BSD's) the alarm's handler runs and accept() goes on waiting, as on
    Linux; then SIGINT, which the program does not handle, ends it: status 130 through
    `splitrack run` (the interpreter the interposer starts leaves SIGINT as it was,
    though Python's signal module takes it on its first import)."""
    rack, env = net
    with on_rack(env, [built["signal_probe"], NIC, "0", "accept", how],
                 name=RACK) as (probe, (port,)):
        assert probe.stdout.readline() == "alarm\n"   # its handler ran (the probe's
        #                                              watchdog ends it if it never does)
        time.sleep(0.5)   # what accept() does then: EINTR would end the probe at once
        assert probe.poll() is None, probe.stdout.read()
        probe.send_signal(signal.SIGINT)   # forwarded to the program by `splitrack run`
        assert probe.wait(timeout=30) == 128 + signal.SIGINT, probe.stderr.read()
        assert probe.stdout.read() == ""
