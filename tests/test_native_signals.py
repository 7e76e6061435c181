"""Signals in native programs on the rack (native/preload_signal.c), as on Linux: a
handler installed without SA_RESTART ends a blocking accept(), recv() or send() with
EINTR (a send that sent part returns that count; through n0, and on a FIT or a pipe
shortcut), and a connect() whose handshake waits (which goes on); with SA_RESTART the
call goes on waiting, but a send that sent part returns that count; and Ctrl-C ends a
program that does not handle it, with SIGINT's status. The probe is
tests/c/signal_probe.c (each case's lines are what it prints as a Linux process)."""

import signal
import socket
import time

import pytest

from netprogs import full_queue, on_rack, run_on_rack

NIC = "127.0.0.11"
OUTSIDE = "127.0.0.2"   # a host of the outside world: not the rack's, not 127.0.0.1
RACK = "native-signals"   # the name of this module's rack (conftest.py: net)


def test_a_signal_handler_without_sa_restart_ends_a_blocking_rack_call_with_eintr(net, built):
    """A C program's SIGALRM handler installed without SA_RESTART (by sigaction, or
    System V's signal(), what strict ISO C's is) comes while accept(), recv() and a
    send() that found no room wait on rack sockets (through n0, and on a FIT or a pipe
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
    # SILENT on p0: a probe on p1 reaches it by a FIT shortcut, one on p0 by a pipe one
    with on_rack(env, SILENT, NIC, name=RACK) as (_, (port,)):
        for call, on in (("recv", "p1"), ("send", "p1"), ("recv", "p0"), ("send", "p0")):
            got = run_on_rack(env, [probe, NIC, str(port), call, "plain"], on=on, name=RACK,
                              timeout=30)
            assert got.stdout.splitlines()[1:] == ["alarm", f"{call} EINTR alarms 1"], (
                call, on, got.stdout, got.stderr)


SILENT = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
held = []
while True:   # takes each connection, and never reads or writes
    held.append(server.accept()[0])
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


@pytest.mark.parametrize("how", ["restart", "signal"])
def test_sa_restart_ends_a_send_that_went_in_part_and_a_wait_with_a_time(net, built, how):
    """A handler with SA_RESTART (sigaction's; signal()'s, BSD's) ends what Linux does
    not restart: a send of more than fits, once part of it went (it returns that part),
    and a recv with SO_RCVTIMEO (EINTR: the kernel restarts no wait that has a time).
    The stub tells the interposer so (sr_any_handler_ends)."""
    rack, env = net
    for call, said in (("bigsend", "bigsend returned part alarms 1"),
                       ("timedrecv", "timedrecv EINTR alarms 1")):
        with socket.create_server((OUTSIDE, 0)) as deaf:   # takes it, never reads or writes
            got = run_on_rack(env, [built["signal_probe"], OUTSIDE,
                                    str(deaf.getsockname()[1]), call, how],
                              name=RACK, timeout=30)
        assert got.stdout.splitlines()[1:] == ["alarm", said], (got.stdout, got.stderr)


@pytest.mark.parametrize("call, how, ended", [
    ("connect", "plain", ["alarm", "connect EINTR alarms 1"]),
    ("connect", "sysv", ["alarm", "connect EINTR alarms 1"]),
    ("sndtimeo", "plain", ["sndtimeo Operation now in progress alarms 0"]),
    ("timedconnect", "restart", ["alarm", "timedconnect EINTR alarms 1"])])
def test_a_connect_whose_handshake_waits_ends_as_linux_and_goes_on(net, built, call, how,
                                                                    ended):
    """connect() to a listener whose queue is full (its handshake waits): a handler
    without SA_RESTART ends it with EINTR (with SO_SNDTIMEO, one with SA_RESTART too),
    SO_SNDTIMEO (1 s) with EINPROGRESS, as Linux's; the handshake goes on meanwhile
    (the nComponent's), and once the listener has room a second, blocking connect()
    returns 0."""
    rack, env = net
    with full_queue(OUTSIDE) as (listener, address), \
            on_rack(env, [built["signal_probe"], *address, call, how], name=RACK) as (probe, _):
        # (a probe still waiting 20 s later ends, and these reads with it)
        assert [probe.stdout.readline().strip() for _ in ended] == ended
        listener.settimeout(10)
        listener.accept()[0].close()   # room in the queue: the handshake ends
        assert probe.stdout.readline() == "connect again returned 0\n"
        assert probe.wait(timeout=30) == 0, probe.stderr.read()
