"""What the `splitrack` command's own verbs do: up, status, stats, down, restart,
run, cp, logs and selftest, each a few lines over the Python API (rack.py).

Interface (cli.py's parser points each verb at its cmd_*):
    cmd_VERB(args) -> exit status      args: the verb's parsed command line
    cmd_run(args, env, finished)       also `splitrack trace`'s run (trace.py)
    running_rack(args)                 the rack a verb on a running rack uses (top.py too)
    EXIT_*                             the command's exit statuses (main's too)

A verb prints its results on stdout and raises RackError (or SpecError) for an
error, which main (cli.py) prints as one line, exit 1. A rack a verb starts for
itself (run; up without --detach) is stopped before the verb returns, whatever happens.
"""

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

from fit_rpc import Op
from splitrack import logs, transfer
from splitrack.launch import LaunchError, run_program
from splitrack.params import UP_POLL_INTERVAL_S
from splitrack.rack import Rack, RackAlreadyUp, RackError
from splitrack.rundir import RunDir
from splitrack.spec import load_spec

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


def running_rack(args: argparse.Namespace) -> tuple[str, Rack | None]:
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
    name, rack = running_rack(args)
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
    name, rack = running_rack(args)
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
    name, rack = running_rack(args)
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

