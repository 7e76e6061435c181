"""The CLI verbs of the rack manager: `serve`, and `slice ...`, `job ...` (HTTP clients).

    splitrack serve [--name N] [--host H] [--port P]
    splitrack slice create --name NAME --p P [--m M] [--n N] [--wait]
    splitrack slice list [--all] [--json] | show NAME [--json] | delete NAME [--force]
    splitrack job submit --slice NAME [--procs N] [--placement pack|spread|auto]
                         [--hint cpu|memory|network ...] [--env K=V ...] [--wait]
                         -- PROGRAM [ARGS...]
    splitrack job show ID [--json] | list [--json]

add_parser(sub) registers them with the `splitrack` parser (cli.py). Every
`slice` and `job` verb is one call of the REST API (client.py) at --url
(default http://127.0.0.1:8765), printed as a table, or as the API's JSON with
--json. Errors: one line, exit 1. `job submit --wait` exits with the job's exit
status (1 if it has none: stopped before it ran).
"""

import argparse
import ipaddress
import json
import logging
import os
import shlex
import sys
from typing import Any

from splitrack import argtypes
from splitrack.manager.client import Client, ClientError
from splitrack.params import MANAGER_HOST, MANAGER_PORT, MANAGER_URL, WAIT_MAX_S
from splitrack.rack import Rack, RackError

EXIT_OK, EXIT_ERROR = 0, 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    _serve_parser(sub)
    _slice_parser(sub)
    _job_parser(sub)


# ---- serve --------------------------------------------------------------------------
def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="the rack manager: slices of a running rack and their "
                                     "jobs, over a REST API (docs/slices.md)",
                       description="Serve the rack manager's REST API (JSON; GET "
                                   "/openapi.json describes it) for a rack that is up: "
                                   "slices granted FIFO, jobs placed in them. Runs until "
                                   "Ctrl-C or SIGTERM, or until the rack goes down; the "
                                   "jobs it launched run on, and a restarted serve finds "
                                   "them. Uses the rack --name names, else 'default', else "
                                   "the one that is up.")
    p.add_argument("--name", type=argtypes.rack_name, help="the rack (default: 'default')")
    p.add_argument("--host", type=_address, default=MANAGER_HOST,
                   help=f"the IP address to listen on (default: {MANAGER_HOST}; the API has "
                        "no authentication: docs/slices.md)")
    p.add_argument("--port", type=_port, default=MANAGER_PORT,
                   help=f"the TCP port (default: {MANAGER_PORT}; 0: any free one, said on "
                        "stdout)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from splitrack.manager.serve import serve

    rack = _attach(args.name)
    logging.getLogger("splitrack.manager").setLevel(logging.INFO)
    if not ipaddress.ip_address(args.host).is_loopback:
        print(f"splitrack: serve on {args.host}: whoever reaches it runs programs as you",
              file=sys.stderr)
    try:
        serve(rack, args.host, args.port)
    except OSError as exc:
        raise RackError(f"serve: {exc.strerror or exc}") from None
    return EXIT_OK


def _attach(name: str | None) -> Rack:
    """The rack `name`; else the one that is up, or 'default'."""
    up = Rack.running() if name is None else []
    name = name or (up[0] if len(up) == 1 else "default")
    try:
        return Rack.attach(name)
    except RackError as exc:
        hint = f"say which with --name ({', '.join(up)} are up)" if len(up) > 1 else \
            "serve needs a running rack: `splitrack up --detach`"
        raise RackError(f"{exc}; {hint}") from None


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is no IP address") from None


def _port(text: str) -> int:
    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is no TCP port (0-65535)")
    return port


# ---- slice ... ----------------------------------------------------------------------
def _slice_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("slice", help="create, list, show and delete slices (via serve)")
    verbs = p.add_subparsers(dest="slice_verb", required=True, metavar="VERB")
    c = verbs.add_parser("create", help="create a slice; it is granted, or queued (FIFO)")
    c.add_argument("--name", required=True, help="[a-z][a-z0-9-]{0,31}")
    c.add_argument("--p", type=argtypes.count, required=True, help="pComponents")
    c.add_argument("--m", type=argtypes.seed, default=0, help="mComponents (default 0)")
    c.add_argument("--n", type=argtypes.seed, default=0,
                   help="nComponents, with all their NICs (default 0)")
    c.add_argument("--wait", action="store_true", help="if queued, wait until it is granted")
    c.set_defaults(func=cmd_slice_create)
    li = verbs.add_parser("list", help="the live slices")
    li.add_argument("--all", action="store_true", help="deleted ones too")
    li.set_defaults(func=cmd_slice_list)
    s = verbs.add_parser("show", help="one slice: components, jobs, steps")
    s.add_argument("slice_name", metavar="NAME")
    s.set_defaults(func=cmd_slice_show)
    d = verbs.add_parser("delete", help="delete a slice (detach-device, destroy-machine)")
    d.add_argument("slice_name", metavar="NAME")
    d.add_argument("--force", action="store_true",
                   help="stop its running jobs (SIGTERM, SIGKILL 2 s later)")
    d.set_defaults(func=cmd_slice_delete)
    for v in (c, li, s, d):
        _client_args(v)


def cmd_slice_create(args: argparse.Namespace) -> int:
    def run(api: Client) -> Any:
        _, view = api.call("POST", "/slices", {"name": args.name, "p": args.p, "m": args.m,
                                              "n": args.n})
        while args.wait and view["state"] == "queued":
            _, view = api.call("GET", f"/slices/{args.name}", query={"wait": WAIT_MAX_S})
        return view
    return _run(args, run, _print_slice)


def cmd_slice_list(args: argparse.Namespace) -> int:
    return _run(args, lambda api: api.call("GET", "/slices", query={"all": "true"}
                                           if args.all else None)[1], _print_slices)


def cmd_slice_show(args: argparse.Namespace) -> int:
    return _run(args, lambda api: api.call("GET", f"/slices/{args.slice_name}")[1],
                _print_slice)


def cmd_slice_delete(args: argparse.Namespace) -> int:
    query = {"force": "true"} if args.force else None
    return _run(args, lambda api: api.call("DELETE", f"/slices/{args.slice_name}",
                                           query=query)[1], _print_slice)


# ---- job ... ------------------------------------------------------------------------
def _job_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("job", help="submit and show jobs in slices (via serve)")
    verbs = p.add_subparsers(dest="job_verb", required=True, metavar="VERB")
    s = verbs.add_parser("submit", help="run a program's processes in a slice")
    s.add_argument("--slice", required=True, dest="slice_name", metavar="NAME")
    s.add_argument("--procs", type=argtypes.count, default=1,
                   help="processes (default 1); each gets SPLITRACK_RANK")
    s.add_argument("--placement", choices=["pack", "spread", "auto"], default="spread",
                   help="pack: as few pComponents as fit; spread: one a pComponent; auto: "
                        "from the hints (default: spread)")
    s.add_argument("--hint", action="append", choices=["cpu", "memory", "network"],
                   default=[], help="what the job is heavy on (for auto; repeatable)")
    s.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an environment variable for its processes (repeatable)")
    s.add_argument("--wait", action="store_true",
                   help="wait until it ended; exit with its exit status")
    s.add_argument("command_argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]")
    s.set_defaults(func=cmd_job_submit, usage_error=s.error)
    sh = verbs.add_parser("show", help="one job: state, exit status, steps")
    sh.add_argument("job_id", metavar="ID")
    sh.set_defaults(func=cmd_job_show)
    li = verbs.add_parser("list", help="every job")
    li.set_defaults(func=cmd_job_list)
    for v in (s, sh, li):
        _client_args(v)


def cmd_job_submit(args: argparse.Namespace) -> int:
    argv = args.command_argv[1:] if args.command_argv[:1] == ["--"] else args.command_argv
    if not argv:
        args.usage_error("no program given: splitrack job submit --slice NAME -- PROGRAM")
    env = dict(_key_value(item, args.usage_error) for item in args.env)
    body = {"argv": argv, "procs": args.procs, "placement": args.placement,
            "hints": {h: True for h in args.hint}, "env": env, "cwd": os.getcwd()}
    ended: dict[str, Any] = {}

    def run(api: Client) -> Any:
        _, job = api.call("POST", f"/slices/{args.slice_name}/jobs", body)
        while args.wait and job["state"] in ("queued", "running"):
            _, job = api.call("GET", f"/jobs/{job['id']}", query={"wait": WAIT_MAX_S})
        ended.update(job)
        return job
    code = _run(args, run, _print_job)
    if code != EXIT_OK or not args.wait:
        return code
    return ended["exit"] if ended["exit"] is not None else EXIT_ERROR


def cmd_job_show(args: argparse.Namespace) -> int:
    return _run(args, lambda api: api.call("GET", f"/jobs/{args.job_id}")[1], _print_job)


def cmd_job_list(args: argparse.Namespace) -> int:
    return _run(args, lambda api: api.call("GET", "/jobs")[1], _print_jobs)


def _key_value(item: str, usage_error: Any) -> tuple[str, str]:
    key, eq, value = item.partition("=")
    if not key or not eq:
        usage_error(f"--env {item!r}: KEY=VALUE expected")
    return key, value


# ---- shared -------------------------------------------------------------------------
def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=MANAGER_URL,
                   help=f"where `splitrack serve` listens (default: {MANAGER_URL})")
    p.add_argument("--json", action="store_true", help="print the API's JSON")


def _run(args: argparse.Namespace, call: Any, show: Any) -> int:
    """call(Client) -> the API's answer, printed as JSON or by show(); errors: exit 1."""
    try:
        answer = call(Client(args.url))
    except ClientError as exc:
        print(f"splitrack: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(answer, indent=1))
    else:
        show(answer)
    return EXIT_OK


def _print_slices(answer: dict[str, Any]) -> None:
    print(f"{'NAME':<16}{'STATE':<9}{'P':>3}{'M':>3}{'N':>3}  {'COMPONENTS':<28}JOBS")
    for s in answer["slices"]:
        r = s["request"]
        print(f"{s['name']:<16}{s['state']:<9}{r['p']:>3}{r['m']:>3}{r['n']:>3}  "
              f"{' '.join(s['components']) or '-':<28}{' '.join(s['jobs']) or '-'}")


def _print_slice(s: dict[str, Any]) -> None:
    r = s["request"]
    print(f"slice {s['name']}: {s['state']}" + (f" ({s['error']})" if s["error"] else ""))
    print(f"  request     p={r['p']} m={r['m']} n={r['n']}")
    print(f"  components  {' '.join(s['components']) or '-'}")
    print(f"  nics        {' '.join(s['nics']) or '-'}")
    print(f"  jobs        {' '.join(s['jobs']) or '-'}")
    _print_steps(s["steps"], s["created_s"])


def _print_jobs(answer: dict[str, Any]) -> None:
    print(f"{'ID':<8}{'SLICE':<16}{'STATE':<9}{'EXIT':>5}  {'PLACED':<24}PROGRAM")
    for j in answer["jobs"]:
        code = "-" if j["exit"] is None else str(j["exit"])
        print(f"{j['id']:<8}{j['slice']:<16}{j['state']:<9}{code:>5}  "
              f"{' '.join(j['placed']) or '-':<24}{shlex.join(j['argv'])}")


def _print_job(j: dict[str, Any]) -> None:
    code = "" if j["exit"] is None else f", exit {j['exit']}"
    print(f"job {j['id']} on slice {j['slice']}: {j['state']}{code}"
          + (f" ({j['error']})" if j["error"] else ""))
    print(f"  argv        {shlex.join(j['argv'])}")
    print(f"  procs       {j['procs']} ({j['placement']}): {' '.join(j['placed']) or '-'}")
    print(f"  exits       {' '.join(map(str, j['exits'])) or '-'}")
    print(f"  stdout      {j['stdout']}")
    print(f"  stderr      {j['stderr']}")
    _print_steps(j["steps"], j["submitted_s"])


def _print_steps(steps: list[dict[str, Any]], since: float) -> None:
    for step in steps:
        took = ("running" if step["end_s"] is None
                else f"{step['end_s'] - step['start_s']:.3f} s")
        print(f"  {step['name']:<16} at +{step['start_s'] - since:.3f} s, {took}")
