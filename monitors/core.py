"""The monitor core: what every component process (global, pN, mN, nN, sN) does.

Life of a monitor (started by the launcher as `python -m monitors --id ID ...`):
  1. bind its FIT inbox (ipc://RUN_DIR/ID.sock, or tcp) and install its handlers;
  2. register with the global process (REGISTER: id, kind, address, pid, resources);
  3. print one line `READY <address>` on stdout, then stdout goes to /dev/null;
  4. serve requests until SIGTERM, SIGINT or SIGHUP, then clean up and exit 0.

Every monitor answers HEALTH, STATS and PING_PEER (docs/protocol.md, 0x01xx);
a subclass adds its component's ops in setup() and its resources in
resources(). Monitors never import each other: what one needs from another is
a FIT call through `self.ep`.

Logs go to stderr, each line tagged with the component id.
"""

import array
import errno
import logging
import os
import signal
import sys
import time
from typing import Any, ClassVar

from fit_rpc import GLOBAL_ID, Endpoint, Message, Op, codec
from splitrack.params import MONITOR_IDLE_CHECK_S

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
        self.log = logging.getLogger(cid)
        self.ep = Endpoint(cid, bind, directory=global_address)
        self.ep.on(Op.HEALTH, self._health)
        self.ep.on(Op.STATS, self._stats)
        self.ep.on(Op.PING_PEER, self._ping_peer)

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

    def register(self) -> None:
        self.ep.call_args(GLOBAL_ID, Op.REGISTER, {
            "id": self.id, "kind": self.kind, "address": self.ep.address,
            "pid": os.getpid(), "resources": self.resources(),
        })

    # ---- lifecycle ---------------------------------------------------------------
    def run(self) -> int:
        def stop(signum: int, frame: object) -> None:
            # pyzmq may swallow this exception if the signal lands inside a
            # blocking receive; the flag is then seen at the next tick.
            self.stopping = True
            raise Stop()

        for signum in _STOP_SIGNALS:  # SIGHUP too: a closed terminal must not leak the rack
            signal.signal(signum, stop)
        try:
            self.setup()
            self.register()
            _announce_ready(self.ep.address)
            self.log.info("serving at %s", self.ep.address)
            self.serve()
        except Stop:
            pass
        finally:
            self.log.info("stopping")
            for signum in _STOP_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
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


def _announce_ready(address: str) -> None:
    """Tell the launcher we serve; afterwards stdout must not be written (its
    reader may be gone, as after `splitrack up --detach`)."""
    sys.stdout.write(f"READY {address}\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
