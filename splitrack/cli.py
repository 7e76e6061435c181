"""The `splitrack` command: each verb is a few lines over the Python API (rack.py).

    splitrack up [--spec F] [--name N] [--detach] [-v]
                                                     start a rack
    splitrack status [--name N] [--json]             components, PIDs, endpoints, health
    splitrack stats [--name N] [--json]              per-component and per-link FIT counters
    splitrack down [--name N] [--keep-logs [DIR]]    stop exactly the rack's processes
    splitrack restart [--name N] ID                  start a dead monitor again
    splitrack selftest [--fuzz N] [--faults] [-v]    check a throwaway rack, a line a check
    splitrack run [--on pN] [-v] -- PROGRAM [ARGS...]
                                                     run a program as a process on the rack
    splitrack trace [--json F] [--plot F] [--mermaid F] [--ops OPS] [--first N]
                    [run options] -- PROGRAM [ARGS...]
                                                     run it, and list the FIT messages its
                                                     socket calls caused (splitrack/trace.py)
    splitrack cp LOCAL sN:PATH | sN:PATH LOCAL       copy a file to or from an sComponent
    splitrack logs [--name N] [-f] [ID]              the monitors' logs, or ID's
    splitrack top [--name N] [--interval S] [--once] [--json]
                                                     live rates per link and component
    splitrack serve [--name N] [--host H] [--port P] the rack manager's REST API
    splitrack slice create|list|show|delete ...      slices, via serve
    splitrack job submit|show|list ...               jobs in slices, via serve
                                                     (splitrack/manager/verbs.py)
    splitrack --version                              splitrack X.Y.Z
    splitrack bench fit|extcache|tcp|native|wordcount|slices|placement|hot|compare ...
                                                     benchmarks, baselines in the same run
                                                     (benchmarks/verbs.py)

This module is the command line: the parser (build_parser: every verb's options
and --help) and main (logging, and errors to exit statuses). What up, status,
stats, down, restart, run, cp, logs and selftest do is rack_verbs.py; the other
verbs bring their own parsers (top.py, trace.py, manager/verbs.py,
benchmarks/verbs.py).

Results go to stdout, diagnostics to stderr. Errors are one line and exit 1;
a command line that does not parse is one line too, and exits 2. -v: this
command, and the monitors of a rack it starts, log at DEBUG.
"""

import argparse
import logging
import os
import sys

import splitrack
from benchmarks import verbs
from splitrack import argtypes, top, trace
from splitrack.logs import LOG_LEVEL_ENV
from splitrack.manager import verbs as manager_verbs
from splitrack.params import MEMORY_MODES
from splitrack.rack import RackError
from splitrack.rack_verbs import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    cmd_cp,
    cmd_down,
    cmd_logs,
    cmd_restart,
    cmd_run,
    cmd_selftest,
    cmd_stats,
    cmd_status,
    cmd_up,
)
from splitrack.rundir import RunRootError
from splitrack.spec import SpecError


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (the verb's --help has the usage)."""

    def error(self, message: str) -> None:   # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def rack_args(p: argparse.ArgumentParser, spec_help: str) -> None:
    p.add_argument("--spec", metavar="FILE", help=spec_help)
    p.add_argument("--name", type=argtypes.rack_name,
                   help="rack name (default: the spec's, else 'default')")


def verbose_arg(p: argparse.ArgumentParser, monitors: str) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help=f"log at DEBUG: this command on stderr, and {monitors}")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of `splitrack run`, which `splitrack trace` takes too (cmd_run reads
    them): the rack, where and how the program runs, -v, and -- PROGRAM [ARGS...]."""
    rack_args(p, "TOML rack spec (default: the embedded default rack)")
    p.add_argument("--on", metavar="pN", help="the pComponent to run on (default: GPM picks)")
    p.add_argument("--mode", choices=["dma", "ddio"],
                   help="the program's socket data path (default: the spec's rack.mode)")
    p.add_argument("--no-shortcuts", action="store_true",
                   help="its connections to listeners on the rack take the nComponent too "
                        "(default: the spec's rack.shortcuts: a pipe on the same pComponent, "
                        "FIT between pComponents)")
    p.add_argument("--memory", choices=MEMORY_MODES, default=MEMORY_MODES[0],
                   help="where the program's memory lives: 'rack' puts its heap (a Python "
                        "program's objects, any program's malloc and anonymous mmap) in rack "
                        "pages, homed at an mComponent and faulted in through its "
                        "pComponent's extCache (needs userfaultfd: root here; fork() is "
                        "refused); 'host' leaves it "
                        "in host memory, only splitrack.guest.vm and socket buffers in the "
                        "rack (default: %(default)s; docs/memory.md)")
    p.add_argument("--no-packing", action="store_true",
                   help="send every small send() on its own (default: consecutive small "
                        "sends of a socket without TCP_NODELAY are packed into one message "
                        "to the nComponent; SPLITRACK_PACKING=0 does the same)")
    verbose_arg(p, "the monitors of a rack it starts in their logs, which it keeps when it "
                   "stops that rack, and says where")
    p.add_argument("command_argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]",
                   help="the program and its arguments, after --")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="splitrack",
        description="Run an emulated split-kernel rack (LegoOS with network components).",
        epilog="With no --spec, the embedded default rack: global, p0, p1, m0, n0 "
               "(NICs 127.0.0.11, 127.0.0.12), s0. Run directories live under "
               "$SPLITRACK_RUN_ROOT (default /tmp/splitrack-UID).")
    parser.add_argument("--version", action="version",
                        version=f"splitrack {splitrack.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("up", help="start a rack; runs until Ctrl-C unless --detach")
    rack_args(p, "TOML rack spec (default: the embedded default rack)")
    p.add_argument("--detach", action="store_true",
                   help="leave the rack running in the background and return")
    verbose_arg(p, "the rack's monitors in their logs (`splitrack logs`); without --detach, "
                   "the logs are kept when the rack stops, and where is said")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("status", help="show every component: PID, endpoint, health",
                       description="Exit status: 0 all healthy, 1 not up, 2 some component "
                                   "dead or unreachable.")
    rack_args(p, "take the rack name from this spec")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("stats", help="per-component and per-link FIT counters, extCache and "
                                     "memory counters")
    rack_args(p, "take the rack name from this spec")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("down", help="stop a rack (exactly the processes it started)",
                       description="Stop exactly the rack's processes and remove its run "
                                   "directory, logs included unless --keep-logs.")
    rack_args(p, "take the rack name from this spec")
    p.add_argument("--keep-logs", nargs="?", const="", metavar="DIR",
                   help="first copy the monitors' logs to DIR (new, or an empty directory; "
                        "default: $SPLITRACK_RUN_ROOT/logs.kept/NAME-YYYYmmdd-HHMMSS) and "
                        "say where")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("restart", help="start a dead monitor again in the running rack",
                       description="Start the dead monitor ID (global, pN, mN, nN, sN) "
                                   "again, as a rebooted board: what it held (connections, "
                                   "memory, programs) is gone, new work goes to it. A "
                                   "restarted global takes the live components from the run "
                                   "directory's record.")
    rack_args(p, "take the rack name from this spec")
    p.add_argument("id", help="the component to restart, e.g. n0 or global")
    p.set_defaults(func=cmd_restart)

    p = sub.add_parser("run", help="run a program as a process on the rack",
                       description="Run PROGRAM as an emulated process on a pComponent "
                                   "(GPM picks one unless --on). Uses the rack named by "
                                   "--name or --spec, else 'default', else the one rack "
                                   "that is up; if it is not up, starts it for the command "
                                   "and stops it afterwards. "
                                   "Exit status: the program's (128+N if killed by signal "
                                   "N, 127 if it cannot be started). A Python program's "
                                   "socket module is the rack's: its TCP sockets are "
                                   "bsdSocketStubs whose kernel sockets live on an "
                                   "nComponent's NIC.")
    add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("cp", help="copy a file to or from an sComponent of a running rack",
                       description="Copy a local file to sN:PATH, or sN:PATH to a local "
                                   "file. PATH is relative to the sComponent's root and "
                                   "cannot leave it; it must be on the sComponent GSM names "
                                   "for it (where a program's splitrack.guest.files looks). A "
                                   "target that is a directory gets the source's name; an "
                                   "existing file is replaced. Uses the rack --name or "
                                   "--spec names, else 'default', else the one that is up.")
    rack_args(p, "take the rack name from this spec")
    p.add_argument("src", metavar="SRC", help="a local file, or sN:PATH")
    p.add_argument("dst", metavar="DST", help="sN:PATH, or a local file or directory")
    p.set_defaults(func=cmd_cp, usage_error=p.error)

    p = sub.add_parser("logs", help="print the monitors' logs (all, or one component's)",
                       description="Print the log of every monitor of the rack, merged in "
                                   "time order (each line names its component), or only "
                                   "ID's. With -f, go on printing lines as they are "
                                   "written, until Ctrl-C. Uses the rack --name or --spec "
                                   "names, else 'default', else the one that is up. The "
                                   "logs are RUN_DIR/logs/ID.log; `down` removes them "
                                   "unless --keep-logs.")
    rack_args(p, "take the rack name from this spec")
    p.add_argument("id", nargs="?", metavar="ID",
                   help="one component: global, p0, m0, n0, s0, ... (default: all)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines as they come, until Ctrl-C")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("selftest", help="bring up a throwaway rack and check that it works",
                       description="Start the embedded default rack under a name of its own, "
                                   "check it (every monitor answers, FIT round trips from "
                                   "each pComponent, a program on each, TCP through n0 in "
                                   "DDIO and DMA, the sComponent), print one line a check, "
                                   "stop it. Exit status 1 if any check failed.")
    p.add_argument("--fuzz", type=argtypes.count, default=0, metavar="N",
                   help="also send N malformed frames (seeded) to every monitor over the "
                        "rack's transport; each must still answer")
    p.add_argument("--faults", action="store_true",
                   help="also kill -9 each monitor in turn: its calls must fail within 2 s, "
                        "the others serve on, and restart brings it back")
    p.add_argument("--seed", type=int, default=1, help="the fuzzer's seed (default: 1)")
    verbose_arg(p, "the monitors of its rack in their logs, which it keeps when it stops "
                   "the rack, and says where")
    p.add_argument("--json", metavar="FILE", type=argtypes.out_file,
                   help="also write {\"checks\": [{name, ok, detail}]} here")
    p.set_defaults(func=cmd_selftest)

    top.add_parser(sub)
    trace.add_parser(sub)
    manager_verbs.add_parser(sub)
    verbs.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="splitrack: %(message)s")
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "verbose", False):   # ours, and every rack this command starts
            logging.getLogger("splitrack").setLevel(logging.DEBUG)   # (selftest's too): DEBUG
            os.environ[LOG_LEVEL_ENV] = "DEBUG"
        code = args.func(args)
        sys.stdout.flush()   # here, where a reader that left is caught below
        return code
    except (RackError, SpecError, RunRootError) as exc:
        print(f"splitrack: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # what was started has been stopped on the way out
        print("splitrack: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:   # stdout's reader left (`splitrack status | head -2`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no error at exit
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
