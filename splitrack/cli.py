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

Results go to stdout, diagnostics to stderr. Errors are one line and exit 1;
a command line that does not parse is one line too, and exits 2. -v: this
command, and the monitors of a rack it starts, log at DEBUG.
"""

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from typing import Any

import splitrack
from benchmarks import verbs
from fit_rpc import Op
from splitrack import argtypes, logs, top, trace, transfer
from splitrack.launch import LaunchError, run_program
from splitrack.logs import LOG_LEVEL_ENV
from splitrack.manager import verbs as manager_verbs
from splitrack.params import MEMORY_MODES, UP_POLL_INTERVAL_S
from splitrack.rack import Rack, RackAlreadyUp, RackError
from splitrack.rundir import RunDir, RunRootError
from splitrack.spec import SpecError, load_spec

EXIT_OK, EXIT_ERROR, EXIT_DEGRADED, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_USAGE, EXIT_BROKEN_PIPE = 2, 128 + signal.SIGPIPE


def _rack_name(args: argparse.Namespace) -> str:
    if args.name:
        return args.name
    return load_spec(args.spec).name if args.spec else "default"


def cmd_up(args: argparse.Namespace) -> int:
    rack = Rack(args.spec, name=args.name, detach=args.detach)
    started = time.monotonic()
    if not args.detach:  # from here on, Ctrl-C, SIGTERM or a closed terminal stop the rack
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGHUP, _interrupt)
    _start(rack)
    try:
        print(f"rack {rack.name!r} is up in {time.monotonic() - started:.2f} s "
              f"(run dir {rack.run.path})")
        _print_status(rack.status())
        if args.detach:
            print(f"detached; `splitrack down --name {rack.name}` stops it")
            return EXIT_OK
        sys.stdout.flush()  # whoever reads our stdout sees the rack before we wait
        print("Ctrl-C stops the rack", file=sys.stderr)
        _wait_while_alive(rack)
    except KeyboardInterrupt:
        pass
    finally:
        if not args.detach:   # with -v, its DEBUG logs are what was asked for: they stay
            kept = logs.kept_dir(rack.run) if args.verbose else None
            rack.stop(keep_logs=kept)
            print(f"rack {rack.name!r} stopped" + (f"; its logs are in {kept}" if kept else ""))
    return EXIT_OK


def _start(rack: Rack) -> Rack:
    """rack.start(), with the CLI's words if it is up already (the API's name attach())."""
    try:
        return rack.start()
    except RackAlreadyUp as exc:
        raise RackError(f"rack {exc.name!r} is already up ({', '.join(exc.live)} running); "
                        f"`splitrack down --name {exc.name}` stops it") from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait_while_alive(rack: Rack) -> None:
    """Until every monitor has exited (e.g. `splitrack down` from elsewhere)."""
    alive = set(rack.alive())
    while alive:
        time.sleep(UP_POLL_INTERVAL_S)
        now = set(rack.alive())
        for cid in sorted(alive - now):
            print(f"splitrack: {cid} exited (log: {rack.components[cid]['log']})",
                  file=sys.stderr)
        alive = now


def cmd_status(args: argparse.Namespace) -> int:
    name = _rack_name(args)
    try:
        rack = Rack.attach(name)
    except RackError:
        if args.json:
            print(json.dumps({"name": name, "up": False, "components": []}))
        else:
            print(f"rack {name!r} is not up")
        return EXIT_ERROR
    rows = rack.status()
    if args.json:
        print(json.dumps({"name": name, "up": True, "run_dir": rack.run.path,
                          "components": rows}, indent=1))
    else:
        print(f"rack {name!r} (run dir {rack.run.path})")
        _print_status(rows)
    return EXIT_OK if all(r["state"] == "ok" for r in rows) else EXIT_DEGRADED


def cmd_stats(args: argparse.Namespace) -> int:
    stats = Rack.attach(_rack_name(args)).stats()
    if args.json:
        print(json.dumps(stats, indent=1))
        return EXIT_OK
    _print_stats(stats)
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    name = _rack_name(args)
    if RunDir(name).read_state() is None:
        print(f"rack {name!r} is not up; nothing to stop")
        return EXIT_OK
    rack = Rack.attach(name)
    kept = None
    if args.keep_logs is not None:   # checked before anything stops
        kept = os.path.abspath(args.keep_logs) if args.keep_logs else logs.kept_dir(rack.run)
        try:
            logs.check_dest(kept)
        except OSError as exc:
            raise RackError(f"--keep-logs: {exc}; nothing stopped") from None
    rack.stop(keep_logs=kept)
    print(f"rack {name!r} stopped ({len(rack.components)} processes); "
          + (f"its logs are in {kept}" if kept else
             "its logs went with its run directory (`down --keep-logs` keeps them)"))
    return EXIT_OK


def cmd_restart(args: argparse.Namespace) -> int:
    rec = Rack.attach(_rack_name(args)).restart(args.id)
    print(f"{args.id} restarted: pid {rec['pid']} at {rec['address']}")
    return EXIT_OK


def _running_rack(args: argparse.Namespace) -> tuple[str, Rack | None]:
    """The rack --name or --spec names, else 'default', else the one that is up
    (said on stderr); None with the name if it is not up."""
    name = _rack_name(args)
    try:
        return name, Rack.attach(name)
    except RackError:
        up = [] if args.name or args.spec else Rack.running()
        if len(up) > 1:
            raise RackError(f"rack {name!r} is not up, and {', '.join(up)} are: "
                            "say which with --name") from None
        if not up:
            return name, None
        print(f"splitrack: on rack {up[0]!r}, the one that is up", file=sys.stderr)
        return up[0], Rack.attach(up[0])


def cmd_run(args: argparse.Namespace, env: dict[str, str] | None = None,
            finished: Any = None) -> int:
    """`splitrack run` (and `trace`'s run): `env` is added to the program's
    environment; finished(rack), if given, runs once the program has ended, before
    a rack this command started stops."""
    command = args.command_argv[1:] if args.command_argv[:1] == ["--"] else args.command_argv
    if not command:
        raise RackError(f"no program given: splitrack {args.command} [--on pN] -- PROGRAM "
                        "[ARGS...]")
    if args.memory == "rack":
        env = {**(env or {}), "SPLITRACK_MEMORY": "rack"}
    name, rack = _running_rack(args)
    owned = rack is None
    if rack is None:
        rack = _start(Rack(args.spec, name=args.name))
    try:
        pcomps = [cid for cid, rec in rack.components.items() if rec["kind"] == "p"]
        if args.on and args.on not in pcomps:
            raise RackError(f"no pComponent {args.on!r} in rack {name!r} "
                            f"(it has {', '.join(pcomps)})")
        with rack.endpoint() as ep:
            on = args.on or ep.call_args("global", Op.GPM_PLACE)[0]["id"]
        status = run_program(rack.run.path, on, command, mode=args.mode,
                             shortcuts=not args.no_shortcuts, packing=not args.no_packing,
                             env=env)
        if finished is not None:
            finished(rack)
        return status
    except LaunchError as exc:
        raise RackError(str(exc)) from None
    finally:
        if owned:   # with -v, its DEBUG logs are what was asked for: they stay
            kept = logs.kept_dir(rack.run) if args.verbose else None
            rack.stop(keep_logs=kept)
            if kept:
                print(f"splitrack: the monitors' logs are in {kept}", file=sys.stderr)


def cmd_cp(args: argparse.Namespace) -> int:
    src, dst = transfer.remote(args.src), transfer.remote(args.dst)
    if (src is None) == (dst is None):
        args.usage_error("one of SRC and DST is sN:PATH on the rack, the other a local file")
    name, rack = _running_rack(args)
    if rack is None:
        raise RackError(f"rack {name!r} is not up")
    sid = (src or dst)[0]
    stores = [cid for cid, rec in rack.components.items() if rec["kind"] == "s"]
    if sid not in stores:
        raise RackError(f"no sComponent {sid!r} in rack {name!r} "
                        f"(it has {', '.join(stores) or 'none'})")
    with rack.endpoint() as ep:
        if dst is not None:
            path, n = transfer.upload(ep, sid, args.src, dst[1])
            print(f"{args.src} -> {sid}:{path} ({n} bytes)")
        else:
            local, n = transfer.download(ep, sid, src[1], args.dst)
            print(f"{sid}:{src[1]} -> {local} ({n} bytes)")
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    name, rack = _running_rack(args)
    run = rack.run if rack is not None else RunDir(name)   # a rack that died: its logs
    found = logs.files(run)
    if not found:
        raise RackError(f"rack {run.name!r} has no logs (no {run.log_dir}: it is not up; "
                        "`splitrack down --keep-logs` keeps them)")
    if args.id is not None and args.id not in found:
        raise RackError(f"no component {args.id!r} in rack {run.name!r} "
                        f"(its logs: {', '.join(found)})")

    def find() -> list[str]:
        return [run.log_path(args.id)] if args.id else list(logs.files(run).values())

    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    now = logs.ends(find())
    sys.stdout.writelines(logs.merged(now))
    if args.follow:
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):   # how -f ends: exit 0
            logs.follow(find, show, now)
    return EXIT_OK


def cmd_selftest(args: argparse.Namespace) -> int:
    from splitrack.selftest import selftest

    def show(check: Any) -> None:
        print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name:<22} {check.detail}", flush=True)

    kept = logs.kept_dir(RunDir("selftest")) if args.verbose else None
    checks = selftest(fuzz_frames=args.fuzz, faults=args.faults, seed=args.seed,
                      report=show, keep_logs=kept)
    if kept and os.path.isdir(kept):
        print(f"splitrack: the monitors' logs are in {kept}", file=sys.stderr)
    failed = [c.name for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"checks": [c.as_dict() for c in checks]}, f, indent=1)
    return EXIT_ERROR if failed else EXIT_OK


def _print_status(rows: list[dict[str, Any]]) -> None:
    print(f"{'ID':<8}{'KIND':<8}{'PID':>8}  {'STATE':<12}{'UPTIME':>9}  ENDPOINT")
    for r in rows:
        uptime = f"{r['uptime_s']:.1f}s" if r["uptime_s"] is not None else "-"
        print(f"{r['id']:<8}{r['kind']:<8}{r['pid']:>8}  {r['state']:<12}{uptime:>9}  "
              f"{r['address']}")


def _print_stats(stats: dict[str, dict[str, Any]]) -> None:
    by_kind: dict[str, list[int]] = {}
    for cid, snap in stats.items():
        print(f"{cid}:")
        if "error" in snap:
            print(f"  unreachable: {snap['error']}")
            continue
        for peer, ops in sorted(snap["links"].items()):
            for op, c in sorted(ops.items()):
                print(f"  {cid}-{peer:<14}{op:<16}tx {c['tx_msgs']:>8} msgs {c['tx_bytes']:>11} B"
                      f"   rx {c['rx_msgs']:>8} msgs {c['rx_bytes']:>11} B")
                link = "-".join(sorted((_kind(cid), _kind(peer))))
                total = by_kind.setdefault(link, [0, 0])
                total[0] += c["tx_msgs"]
                total[1] += c["tx_bytes"]
        if snap["errors"]:
            print("  errors: " + ", ".join(f"{k}={v}" for k, v in sorted(snap["errors"].items())))
        if "extcache" in snap:
            xc = snap["extcache"]
            victim = (f", victim cache {xc['victim_entries']}/{xc['victim']} entries in use"
                      if xc.get("victim") else "")
            print(f"  extCache ({xc['sets']} sets x {xc['ways']} ways x {xc['line']} B{victim}) "
                  "total: " + _counts(xc["total"]))
            for pid, counts in sorted(xc["processes"].items()):
                print(f"    process {pid}: " + _counts(counts))
        if "memory" in snap:
            print("  memory: " + _counts(snap["memory"]))
        if "network" in snap:
            net = dict(snap["network"])
            modes = net.pop("by_mode")
            print("  network: " + _counts(net) + " " + _counts({f"{m}_sockets": n
                                                                for m, n in modes.items()}))
    print("links (counted once, at the sender):")
    for link, (msgs, nbytes) in sorted(by_kind.items()):
        print(f"  {link:<16}{msgs:>10} msgs {nbytes:>13} B")


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in counts.items())


def _kind(cid: str) -> str:
    return cid if cid == "global" else "client" if cid.startswith("cli.") else cid[0]


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
