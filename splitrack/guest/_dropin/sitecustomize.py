"""Run by Python at start-up in every program `splitrack run` starts (this
directory is first on its PYTHONPATH): the program's sockets become the rack's
(splitrack/guest/rsocket.py). A program that cannot load them stops here with exit
status 127 rather than run silently on the host's network; so does one that asked
for rack memory (--memory rack) and cannot have it."""

import os
import sys


def _refuse(why: str) -> None:
    sys.stderr.write(f"splitrack: {why}\n")
    sys.stderr.flush()
    os._exit(127)   # (SystemExit here is a fatal error of site: status 1)


if os.environ.get("SPLITRACK_RUN_DIR"):
    try:  # ssl before install(): ssl.SSLSocket must stay a subclass of the kernel's socket
        import ssl  # noqa: F401
    except ImportError:
        pass
    try:
        from splitrack.guest import rsocket
    except Exception as exc:  # e.g. a Python without splitrack installed
        _refuse(f"cannot load the rack's socket module in {sys.executable}: {exc}")
    if os.environ.get("SPLITRACK_MEMORY") == "rack":   # before the program's first object
        from splitrack.guest import rackmem
        try:
            rackmem.install()
        except OSError as exc:
            _refuse(f"--memory rack: {exc.strerror or exc}")
    rsocket.install()
