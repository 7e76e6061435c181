"""The monitor core: what every component process (global, pN, mN, nN, sN) does.

Life of a monitor (started by the launcher as `python -m monitors --id ID ...`):
  1. bind its FIT inbox (shm://RUN_DIR/ID.fit; or ZeroMQ ipc/tcp) and install its handlers;
  2. register with the global process (REGISTER: id, kind, address, pid, resources);
  3. print one line `READY <address>` on stdout, then stdout goes to /dev/null;
  4. serve requests until SIGTERM, SIGINT or SIGHUP, then clean up and exit 0.

Every monitor answers HEALTH, STATS and PING_PEER (docs/protocol.md, 0x01xx);
a subclass adds its component's ops in setup() and its resources in
resources(). Monitors never import each other: what one needs from another is
a FIT call through `self.ep`.

Identities (fit_rpc/identity.py): on the first message of each link the
endpoint asks `vouch(peer, pid)`, pid being what the kernel said at the
rendezvous. A monitor believes a component id if `global` registered that
pid for it, an emulated process pN.PID if pN says PID is its process
(P_VOUCH, asked once per link), and a client (cli.PID.N) on the kernel's word
alone. Every rule that authorizes on msg.src thus rests on the kernel.

Slices (monitors/slices.py): every monitor keeps the table of which component
is granted to which slice (`self.slices`): it asks global for it (SLICE_LIST)
once registered, and global pushes it (SLICE_TABLE) at every grant and
release. `check_slice(who)` refuses a process the use of this component unless
both are of one slice (or both free): EPERM, counted as `slice`. A process's
slice is its pComponent's, and its id pN.PID rests on the kernel (above); a
client whose process descends from a pMonitor is taken for a process of that
pComponent (`as_process`), so a program cannot leave its slice by opening an
endpoint as a client.

Logs go to stderr, each line tagged with the component id.
"""

import array
import contextlib
import errno
import json
import logging
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

import psutil

from fit_rpc import GLOBAL_ID, Endpoint, Message, Op, codec
from fit_rpc.codec import need
from fit_rpc.identity import address_pid, claimed_pid, kind_of, process_of
from fit_rpc.ops import op_name
from monitors.slices import Table, allowed, describe, slice_of
from splitrack.params import MONITOR_IDLE_CHECK_S
from splitrack.rundir import RunDir

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stop(BaseException):
    """Raised by the SIGTERM/SIGINT/SIGHUP handler to leave the serve loop."""


class Monitor:
    kind: ClassVar[str] = ""

    def __init__(self, cid: str, config: dict[str, Any], rack: dict[str, Any],
                 bind: str, global_address: str | None):
        self.id = cid
        self.config = config          # this component's entry of the rack spec
        self.rack = rack              # the [rack] section
        self.global_address = global_address
        self.started = time.monotonic()
        self.stopping = False
        self._global_lost = False     # a LOAD_REPORT failed: said once in the log
        self.log = logging.getLogger(cid)
        _more_fds()
        self.ep = Endpoint(cid, bind, directory=global_address, poll_us=rack["poll_us"])
        self.ep.find_directory = RunDir.at(os.getcwd()).global_address   # (run dir = cwd)
        self.ep.vouch = self.vouch
        self.ep.on(Op.HEALTH, self._health)
        self.ep.on(Op.STATS, self._stats)
        self.ep.on(Op.PING_PEER, self._ping_peer)
        self.slices: Table = {}       # component id -> its slice (None: free)
        self._boards: dict[str, str | None] = {}   # client -> the pComponent it runs under
        self.ep.on(Op.SLICE_TABLE, self._slice_table)
        self.ep.on_peer_gone.append(lambda peer: self._boards.pop(peer, None))

    def _logged(self, op: int, handler: Callable[[Message], Any]) -> Callable[[Message], Any]:
        name, log = op_name(op), self.log

        def logged(msg: Message) -> Any:
            log.debug("%s from %s, %d B", name, msg.src, len(msg.payload))
            return handler(msg)
        return logged

    # ---- for subclasses --------------------------------------------------------
    def setup(self) -> None:
        """Install this component's handlers; called before registration."""

    def resources(self) -> dict[str, Any]:
        """What this component offers, as registered with the global managers."""
        return {}

    def extra_stats(self) -> dict[str, Any]:
        """Component-specific counters to add to STATS."""
        return {}

    def tick(self) -> None:
        """Periodic work, run every MONITOR_IDLE_CHECK_S whether idle or busy."""

    def vouch(self, peer: str, pid: int | None) -> bool | None:
        """Whether a link's peer is the `peer` it claims (its first message)."""
        if pid is None:   # zmq: nothing vouches for anyone
            return True
        kind = kind_of(peer)
        if kind == "client":   # its pid was checked at the rendezvous: that is all it claims
            self._boards[peer] = self._board_of(pid)
            return True
        if kind == "process":
            return self.vouch_process(peer, pid)
        if kind == "unknown":
            return False
        try:
            address = self.ep.resolve(peer)
            if address_pid(address) != pid:   # known from before it was restarted?
                address = self.ep.refresh(peer) or address
        except OSError:
            return False   # no such component
        return address_pid(address) == pid

    def vouch_process(self, peer: str, pid: int) -> bool:
        """Is pN.PID a process of pN? pN says (P_VOUCH)."""
        pcomponent, _ = process_of(peer)   # type: ignore[misc]
        try:
            answer, _ = self.ep.call_args(pcomponent, Op.P_VOUCH, {"pid": pid})
        except OSError as exc:
            self.log.warning("cannot vouch for %s: %s", peer, exc)
            return False
        return bool(answer.get("member"))

    def report_load(self, load: dict[str, Any], timeout: float | None = None) -> bool:
        """LOAD_REPORT to global; False if it could not go (global is down: this
        component serves on with what it knows, and the caller reports again later)."""
        try:
            self.ep.send(GLOBAL_ID, Op.LOAD_REPORT, codec.encode({"id": self.id, "load": load}),
                         timeout=timeout)
        except OSError as exc:
            if not self._global_lost:
                self.log.warning("global is unreachable, serving on without it: %s", exc)
            self._global_lost = True
            return False
        if self._global_lost:
            self.log.info("global is reachable again")
        self._global_lost = False
        return True

    def register(self) -> None:
        self.ep.call_args(GLOBAL_ID, Op.REGISTER, {
            "id": self.id, "kind": self.kind, "address": self.ep.address,
            "pid": os.getpid(), "resources": self.resources(),
        })
        answer, _ = self.ep.call_args(GLOBAL_ID, Op.SLICE_LIST)
        self.slices = {c["id"]: c["slice"] for c in answer["components"]}
        self.slices_changed()

    # ---- slices ------------------------------------------------------------------
    def slices_changed(self) -> None:
        """The slice table is new (a kind's monitor may cache what it allows)."""

    def as_process(self, who: str) -> str:
        """The id a sender is confined as: a client whose process runs under a pMonitor
        (a rack program that opened an endpoint of its own) is a process of that
        pComponent, pN.PID; anyone else is who it is."""
        board = self._boards.get(who)
        return who if board is None else f"{board}.{claimed_pid(who)}"

    def slice_of_sender(self, who: str) -> str | None:
        """The slice whose components alone `who` may use (None: free ones, or any, for
        a component or a client outside the pComponents)."""
        return slice_of(self.slices, self.as_process(who))

    def check_slice(self, who: str, err: int = errno.EPERM, component: str | None = None
                    ) -> None:
        """Refuse `who`, a process of another slice than this component's (or than
        `component`'s), with `err`."""
        who, component = self.as_process(who), component or self.id
        if allowed(self.slices, who, component):
            return
        self.ep.counters.error("slice")
        raise OSError(err, f"{who} of {describe(slice_of(self.slices, who))} may not use "
                           f"{component} of {describe(self.slices.get(component))}")

    def pmonitors(self) -> dict[int, str]:
        """pid -> id of every pMonitor of the rack's spec this monitor can resolve."""
        try:
            with open("spec.json") as f:   # monitors run in the run directory
                ids = [c["id"] for c in json.load(f)["components"] if c["kind"] == "p"]
        except FileNotFoundError:
            return {}
        found = {}
        for p in ids:
            with contextlib.suppress(OSError):
                found[address_pid(self.ep.resolve(p))] = p
        return found

    def _board_of(self, pid: int) -> str | None:
        """The pComponent whose pMonitor `pid` descends from, if any (the pMonitor is
        a child subreaper: every descendant of its programs stays below it)."""
        try:
            ancestors = psutil.Process(pid).parents()
        except psutil.Error:
            return None
        boards = self.pmonitors()
        return next((boards[a.pid] for a in ancestors if a.pid in boards), None)

    def _slice_table(self, msg: Message) -> bytes:
        if msg.src != GLOBAL_ID:
            raise OSError(errno.EPERM, f"{msg.src} may not set the slice table")
        args, _ = msg.args()
        table = need(args, "components", dict)
        self.slices = {cid: s if isinstance(s, str) else None for cid, s in table.items()}
        self.slices_changed()
        return codec.encode()

    # ---- lifecycle ---------------------------------------------------------------
    def run(self) -> int:
        def stop(signum: int, frame: object) -> None:
            # a wait in C may swallow this exception (the signal lands in
            # another thread, or inside pyzmq); the flag is then seen at the next tick.
            self.stopping = True
            raise Stop()

        for signum in _STOP_SIGNALS:  # SIGHUP too: a closed terminal must not leak the rack
            signal.signal(signum, stop)
        started = False
        try:
            self.log.debug("pid %d, spec %s, rack %s", os.getpid(), self.config, self.rack)
            self.setup()
            if self.log.isEnabledFor(logging.DEBUG):   # -v: a line a request served
                self.ep.wrap_handlers(self._logged)
            started = True
            self.log.debug("registering with global as %s (%s)", self.id, self.resources())
            self.register()
            _announce_ready(self.ep.address)
            self.log.info("serving at %s", self.ep.address)
            self.serve()
        except Stop:
            pass
        except Exception as exc:
            # the cause in one line, first: what `splitrack up` shows (the traceback follows)
            self.log.error("%s", str(exc) or type(exc).__name__)
            raise
        finally:
            self.log.info("stopping")
            for signum in _STOP_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            if started:
                self.close()
            else:   # a half-made setup: free what there is, the cause is logged above
                with contextlib.suppress(Exception):
                    self.close()
        return 0

    def serve(self) -> None:
        """The serve loop; the nMonitor's also polls kernel sockets."""
        self.ep.serve_forever(tick=self._tick, every_s=MONITOR_IDLE_CHECK_S)

    def _tick(self) -> bool:
        self.tick()
        return self.stopping

    def close(self) -> None:
        self.ep.close()

    # ---- ops every monitor serves ------------------------------------------------
    def _health(self, msg: Message) -> bytes:
        return codec.encode({
            "id": self.id, "kind": self.kind, "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started, 3), "state": "ok",
        })

    def _stats(self, msg: Message) -> bytes:
        snapshot = {"id": self.id, "kind": self.kind, **self.ep.counters.snapshot()}
        snapshot.update(self.extra_stats())
        return codec.encode(snapshot)

    def _ping_peer(self, msg: Message) -> bytes:
        args, _ = msg.args()
        target = codec.need(args, "target", str)
        size = codec.need(args, "size", int)
        count = codec.need(args, "count", int)
        warmup = args.get("warmup", 0)
        if not 0 < count <= 200_000 or not 0 <= size <= 1 << 20 or not isinstance(warmup, int):
            raise OSError(errno.EINVAL, "need 0 < count <= 200000, 0 <= size <= 1 MiB")
        payload = b"\0" * size
        call, clock = self.ep.call, time.perf_counter_ns
        for _ in range(warmup):
            call(target, Op.ECHO, payload)
        samples = array.array("d", bytes(8 * count))
        for i in range(count):
            t0 = clock()
            call(target, Op.ECHO, payload)
            samples[i] = (clock() - t0) / 1000.0
        return codec.encode({}, samples.tobytes())


def _more_fds() -> None:
    """Every link a monitor serves holds a few descriptors: use all we may."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _announce_ready(address: str) -> None:
    """Tell the launcher we serve; afterwards stdout must not be written (its
    reader may be gone, as after `splitrack up --detach`)."""
    sys.stdout.write(f"READY {address}\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
