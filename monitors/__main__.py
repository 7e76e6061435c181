"""Entry point of every monitor process: `python -m monitors --run-dir D --id ID`.

The launcher (splitrack/rack.py) starts one of these per component. The rack
config is read from D/spec.json (written by the launcher); the component's kind
is its id's letter (global, pN, mN, nN, sN). See monitors/core.py for the life
of a monitor. It logs to stderr at $SPLITRACK_LOG_LEVEL (default INFO; the
launcher passes DEBUG for `splitrack up -v`).
"""

import argparse
import ctypes
import json
import logging
import os
import signal
import sys

from monitors.core import Monitor
from monitors.gmonitor import GlobalMonitor
from monitors.mmonitor import MMonitor
from monitors.nmonitor import NMonitor
from monitors.pmonitor import PMonitor
from monitors.smonitor import SMonitor
from splitrack.logs import LOG_LEVEL_ENV

MONITORS: dict[str, type[Monitor]] = {
    "global": GlobalMonitor, "p": PMonitor, "m": MMonitor, "n": NMonitor, "s": SMonitor,
}
_PR_SET_PDEATHSIG = 1


def inbox_address(run_dir: str, cid: str, rack: dict) -> str:
    """Where a component binds its FIT inbox: its rendezvous (shm), or a ZeroMQ socket."""
    if rack["transport"] == "shm":
        return f"shm://{os.path.join(run_dir, cid)}.fit"
    if rack["endpoints"] == "tcp":
        return "tcp://127.0.0.1:0"
    return f"ipc://{os.path.join(run_dir, cid)}.sock"


def _log_level() -> int:
    """$SPLITRACK_LOG_LEVEL (the launcher sets DEBUG for `-v`), else INFO."""
    level = logging.getLevelName(os.environ.get(LOG_LEVEL_ENV, "INFO").upper())
    return level if isinstance(level, int) else logging.INFO


def _die_with_parent(parent_pid: int) -> None:
    """SIGTERM us when the launcher dies, so a killed test or shell leaks nothing."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitors",
                                     description="Run one splitrack component monitor.")
    parser.add_argument("--run-dir", required=True, help="the rack's run directory")
    parser.add_argument("--id", required=True, help="component id: global, p0, m0, n0, s0, ...")
    parser.add_argument("--global", dest="global_address", help="inbox address of `global`")
    parser.add_argument("--die-with-parent", type=int, metavar="PID",
                        help="exit when the launcher with this PID dies")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=_log_level(),
                        format=f"%(asctime)s {args.id} %(levelname)s %(message)s")
    if args.die_with_parent:
        _die_with_parent(args.die_with_parent)
    with open(os.path.join(args.run_dir, "spec.json")) as f:
        spec = json.load(f)
    config = next((c for c in spec["components"] if c["id"] == args.id), None)
    if config is None:
        parser.error(f"no component {args.id!r} in {args.run_dir}/spec.json")
    kind = config["kind"]
    if kind != "global" and not args.global_address:
        parser.error("--global is required for every component but global")
    bind = inbox_address(args.run_dir, args.id, spec["rack"])
    monitor = MONITORS[kind](args.id, config, spec["rack"], bind, args.global_address)
    return monitor.run()


if __name__ == "__main__":
    sys.exit(main())
