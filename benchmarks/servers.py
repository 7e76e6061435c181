"""A benchmark's server process: started, its address read, always stopped.

    with server(cmd, env) as (ip, port): ...
    stop(proc)                          SIGTERM, then SIGKILL; reaped (any child process)

The server prints "IP PORT" as its first line (tcp_server.py, relay_floor.py).
A server run by `splitrack run` gets the SIGTERM forwarded to the program.
"""

import contextlib
import select
import subprocess
from collections.abc import Iterator

START_TIMEOUT_S = 30
LINUX_IP = "127.0.0.5"   # the "remote Linux" servers' address, outside the rack


@contextlib.contextmanager
def server(cmd: list[str], env: dict[str, str] | None) -> Iterator[tuple[str, int]]:
    proc = subprocess.Popen(cmd, env=env, cwd="/", stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        words = (proc.stdout.readline() if ready else "").split()
        if len(words) != 2 or not words[1].isdigit():
            raise RuntimeError(f"the server {' '.join(cmd[-3:])} did not start")
        yield words[0], int(words[1])
    finally:
        stop(proc)
        proc.stdout.close()


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL if it has not ended 10 s later; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
