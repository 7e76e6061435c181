"""Run a program as an emulated process on a pComponent (`splitrack run`).

Interface:
    run_program(run_dir, "p0", ["python", "prog.py"], mode=None, shortcuts=True,
                packing=True, env=None, slice=None) -> status

The client side of the pMonitor's launch socket (RUN_DIR/pN.spawn, see
monitors/pmonitor.py): it sends argv, environment and working directory as one
length-prefixed JSON message with this process's stdin, stdout and stderr
attached (SCM_RIGHTS), so the program reads and writes the caller's terminal
or pipes although the pMonitor is its parent. It reads back the PID, forwards
SIGINT, SIGTERM and SIGHUP to it, and returns its exit status, shell style:
128+N for a program killed by signal N, 127 if it cannot be started (also
when the pComponent refuses it: one granted to a slice runs only programs
launched with `slice` set to that slice's name, monitors/slices.py).
"""

import json
import os
import signal
import socket
import sys
from collections.abc import Sequence

EXIT_CANNOT_RUN = 127
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class LaunchError(RuntimeError):
    """The program could not be started, or its pMonitor vanished while it ran."""


def run_program(run_dir: str, pcomponent: str, argv: Sequence[str],
                mode: str | None = None, shortcuts: bool = True, packing: bool = True,
                env: dict[str, str] | None = None, slice: str | None = None) -> int:
    """`mode` ("dma" | "ddio") overrides the rack's socket data path for the program;
    shortcuts=False turns the rack's intra-rack shortcuts off for it, packing=False
    its message packing (splitrack/guest/nic_path.py); `env` is added to the environment
    it gets (this process's); `slice` names the slice it runs in (None: free)."""
    path = os.path.join(run_dir, f"{pcomponent}.spawn")
    request = json.dumps({"argv": list(argv), "env": {**os.environ, **(env or {})},
                          "cwd": os.getcwd(),
                          "mode": mode, "shortcuts": shortcuts,
                          "packing": packing, "slice": slice}).encode()
    message = len(request).to_bytes(4, "little") + request
    # Signals are caught from before the launch, so none is lost in the window
    # between the program's start and the moment its PID is known here.
    program = _Program()
    previous = {sig: signal.signal(sig, program.signal) for sig in _FORWARDED}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(path)
            except OSError as exc:
                raise LaunchError(f"cannot reach {pcomponent}'s launcher at {path}: "
                                  f"{exc.strerror}") from None
            try:
                sent = socket.send_fds(sock, [message], [0, 1, 2])
                sock.sendall(message[sent:])
            except BrokenPipeError:
                pass  # the launcher refused the request early; its reply says why
            replies = sock.makefile("rb")
            started = _reply(replies, pcomponent)
            if "error" in started:
                print(f"splitrack: cannot run {argv[0]!r}: {started['error']}", file=sys.stderr)
                return EXIT_CANNOT_RUN
            program.started(started["pid"])
            status = _reply(replies, pcomponent)["exit"]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status if status >= 0 else 128 - status


class _Program:
    """Forwards signals to the program; holds them until its PID is known."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []

    def signal(self, signum: int, frame: object) -> None:
        if self.pid is None:
            self.pending.append(signum)
        else:
            _forward(self.pid, signum)

    def started(self, pid: int) -> None:
        self.pid = pid
        for signum in self.pending:
            _forward(pid, signum)
        self.pending.clear()


def _reply(replies, pcomponent: str) -> dict:
    line = replies.readline()
    if not line:
        raise LaunchError(f"{pcomponent} stopped while the program ran")
    return json.loads(line)


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
