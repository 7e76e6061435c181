"""`splitrack selftest`: bring up a throwaway rack and check that it works, one line
a check (as Mininet's `mn --test pingall` does for a network).

Interface:
    checks = selftest(fuzz_frames=0, faults=False, seed=1) -> [Check(name, ok, detail)]
    fuzz(rack, "m0", 1000, random.Random(1)) -> (ok, detail)   # on a rack of yours

Checks, in order; each runs on what the earlier ones left:
- `up`: the embedded default rack starts (its own name and storage root);
- `health ID`: every monitor answers HEALTH;
- `ping pN->ID`: each pComponent's FIT round trip to every other monitor;
- `program on pN`: a program runs there and writes and reads rack memory;
- `tcp MODE`: a program echoes 1 MiB through n0 with a plain server outside the
  rack, DDIO and DMA, checksummed;
- `files`: a program's sComponent call comes back (ENOENT for a missing file);
- `fuzz ID` (--fuzz N): N malformed frames, seeded, over the rack's own
  transport, past every check FIT makes; then the monitor must still answer;
- `fault ID` (--faults): kill -9 of each monitor, global too, one at a time: its
  calls fail within FAULT_DEADLINE_S, every other monitor answers, `restart`
  brings it back, and it answers again.
The rack is stopped on every way out.
"""

import array
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from fit_rpc import Op, header
from fit_rpc.transport import make as make_transport
from splitrack.rack import Rack
from splitrack.spec import load_spec

FAULT_DEADLINE_S = 2.0       # a dead monitor's calls fail within this
_ECHO_BYTES = 1 << 20
_FUZZ_IDS = itertools.count(90000)   # the fuzzer's client ids (cli.PID.N), past the Rack's


@dataclass
class Check:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def selftest(fuzz_frames: int = 0, faults: bool = False, seed: int = 1,
             report: Any = None, keep_logs: str | None = None) -> list[Check]:
    """Run the checks; report(check) is called as each ends (to print it);
    keep_logs: a directory that gets the monitors' logs when the rack stops."""
    checks: list[Check] = []

    def record(name: str, ok: bool, detail: str) -> bool:
        checks.append(Check(name, ok, detail))
        if report is not None:
            report(checks[-1])
        return ok

    with tempfile.TemporaryDirectory(prefix="splitrack-selftest-") as scratch:
        spec = load_spec(None, name=f"selftest-{os.getpid()}")
        for comp in spec.components:
            if comp["kind"] == "s":
                comp["root"] = os.path.join(scratch, "storage")
        started = time.monotonic()
        try:
            rack = Rack(spec).start()
        except Exception as exc:   # the rack is the subject: whatever stops it is the finding
            record("up", False, str(exc))
            return checks
        try:
            record("up", True, f"{len(rack.components)} monitors in "
                               f"{time.monotonic() - started:.2f} s")
            _run_checks(rack, scratch, record, fuzz_frames, faults, seed)
        finally:
            rack.stop(keep_logs=keep_logs)
    return checks


def _run_checks(rack: Rack, scratch: str, record: Any, fuzz_frames: int, faults: bool,
                seed: int) -> None:
    ids = list(rack.components)
    pcomps = [cid for cid in ids if rack.components[cid]["kind"] == "p"]
    with rack.endpoint() as ep:
        for cid in ids:
            record(f"health {cid}", *_health(ep, cid))
        for p in pcomps:
            for cid in ids:
                if cid != p:
                    record(f"ping {p}->{cid}", *_attempt(lambda p=p, cid=cid: _ping(ep, p, cid)))
    for p in pcomps:
        record(f"program on {p}", *_program(rack, scratch, p, _VM_PROGRAM, "rack memory ok"))
    for mode in ("ddio", "dma"):
        record(f"tcp {mode}", *_echo(rack, scratch, mode))
    record("files", *_program(rack, scratch, pcomps[0], _FILES_PROGRAM, "ENOENT"))
    if fuzz_frames:
        rng = random.Random(seed)
        for cid in ids:
            record(f"fuzz {cid}", *fuzz(rack, cid, fuzz_frames, rng))
    if faults:
        for cid in ids:
            record(f"fault {cid}", *_fault(rack, cid))


def _attempt(fn: Any) -> tuple[bool, str]:
    try:
        return True, fn()
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _health(ep: Any, cid: str) -> tuple[bool, str]:
    try:
        health, _ = ep.call_args(cid, Op.HEALTH, timeout=1.0)
    except OSError as exc:
        return False, f"no answer: {exc}"
    return health.get("state") == "ok", f"{health.get('state')}, pid {health.get('pid')}"


def _ping(ep: Any, p: str, cid: str) -> str:
    _, data = ep.call_args(p, Op.PING_PEER, {"target": cid, "size": 128, "count": 20})
    samples = sorted(array.array("d", bytes(data)))   # µs, one per round trip
    return f"20 round trips of 128 B, p50 {samples[len(samples) // 2]:.1f} us"


_VM_PROGRAM = """
from splitrack.guest import vm
a = vm.alloc(1 << 16)
vm.write(a, bytes(range(256)) * 256)
assert bytes(vm.read(a, 1 << 16)) == bytes(range(256)) * 256
print("rack memory ok")
"""

_FILES_PROGRAM = """
from splitrack.guest import files
try:
    files.size("selftest-no-such-file")
except FileNotFoundError:
    print("ENOENT")
"""

_ECHO_PROGRAM = """
import hashlib, os, socket, sys
data = os.urandom(int(sys.argv[2]))
s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
s.sendall(data)
s.shutdown(socket.SHUT_WR)
got = bytearray()
while chunk := s.recv(1 << 16):
    got += chunk
print("echoed" if hashlib.sha256(got).digest() == hashlib.sha256(data).digest() else "CORRUPT")
"""


def _program(rack: Rack, scratch: str, p: str, code: str, expect: str,
             *args: str, mode: str | None = None) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "splitrack.cli", "run", "--name", rack.name, "--on", p]
    if mode:
        cmd += ["--mode", mode]
    try:
        proc = subprocess.run([*cmd, "--", sys.executable, "-c", code, *args], cwd=scratch,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "no end within 60 s"
    out = proc.stdout.strip()
    if proc.returncode == 0 and out == expect:
        return True, out
    last = (proc.stderr.strip().splitlines() or ["(no error output)"])[-1]
    return False, f"exit {proc.returncode}: {out or last}"


def _echo(rack: Rack, scratch: str, mode: str) -> tuple[bool, str]:
    """A plain echo server outside the rack; the program on p0 sends and checks."""
    with socket.create_server(("127.0.0.5", 0)) as server:
        server.settimeout(60)
        thread = threading.Thread(target=_echo_once, args=(server,), daemon=True)
        thread.start()
        ok, detail = _program(rack, scratch, "p0", _ECHO_PROGRAM, "echoed",
                              str(server.getsockname()[1]), str(_ECHO_BYTES), mode=mode)
        thread.join(10)
    return ok, f"{_ECHO_BYTES} B, sha256 equal" if ok else detail


def _echo_once(server: socket.socket) -> None:
    try:
        conn, _ = server.accept()
    except OSError:
        return
    with conn:
        while chunk := conn.recv(1 << 16):
            conn.sendall(chunk)


def fuzz(rack: Rack, cid: str, n: int, rng: random.Random) -> tuple[bool, str]:
    """n malformed frames straight onto the transport, then HEALTH."""
    address = rack.components[cid]["address"]
    me = f"cli.{os.getpid()}.{next(_FUZZ_IDS)}"
    transport = make_transport(me, None, address.split("://")[0], 0, rack.curve_keys())
    ops = [int(op) for op in Op]
    sent = 0
    try:
        for _ in range(n):
            transport.send(cid, address, _bad_frame(rng, ops), 5.0)
            sent += 1
            while transport.recv_reply(cid, 0.0, serve=False) is not None:
                pass   # answers (EBADMSG, ...) are not the point: staying up is
    except OSError as exc:
        return False, f"after {sent} frames: {exc}"
    finally:
        transport.close()
    with rack.endpoint() as ep:
        ok, health = _health(ep, cid)
    return ok, f"{n} frames, then {health}"


def _bad_frame(rng: random.Random, ops: list[int]) -> bytes:
    """One of: random bytes, a header alone that promises more, a real op with a
    random or short payload, a bad magic or kind."""
    kind = rng.randrange(4)
    body = rng.randbytes(rng.randrange(0, 64))
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 48))
    if kind == 1:
        return header.pack(header.REQUEST, rng.choice(ops), rng.randrange(1, 1 << 30),
                           len(body) + rng.randrange(1, 100)) + body
    if kind == 2:
        return header.pack(rng.choice((header.REQUEST, header.ONEWAY)), rng.choice(ops),
                           rng.randrange(1, 1 << 30), len(body)) + body
    frame = bytearray(header.pack(header.REQUEST, rng.choice(ops), 1, len(body)) + body)
    frame[rng.randrange(0, 4)] ^= 0xFF   # magic, version or kind
    return bytes(frame)


def _fault(rack: Rack, cid: str) -> tuple[bool, str]:
    """kill -9 cid: its calls fail fast, the others serve on; restart it."""
    pid = rack.components[cid]["pid"]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    with rack.endpoint() as ep:
        try:
            ep.call_args(cid, Op.HEALTH, timeout=FAULT_DEADLINE_S + 1)
            return False, "it still answered after kill -9"
        except OSError as exc:
            took = time.monotonic() - killed
            if took > FAULT_DEADLINE_S:
                return False, f"its call failed only after {took:.2f} s ({exc})"
            failed = f"its call failed in {took * 1000:.0f} ms (errno {exc.errno})"
        down = [other for other in rack.components
                if other != cid and not _health(ep, other)[0]]
    if down:
        return False, f"{failed}, but {', '.join(down)} stopped answering too"
    try:
        rack.restart(cid)
    except Exception as exc:   # a restart that fails is the finding
        return False, f"{failed}; restart: {exc}"
    with rack.endpoint() as ep:
        ok, health = _health(ep, cid)
    return ok, f"{failed}; the others answered; restarted: {health}"


__all__ = ["Check", "fuzz", "selftest"]
