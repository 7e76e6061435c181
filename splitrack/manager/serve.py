"""`splitrack serve`: the rack manager's REST API over a running rack, on uvloop.

    serve(Rack.attach("default"), "127.0.0.1", 8765)   # returns on SIGTERM or SIGINT

It attaches to a rack that is up (it starts none), takes the manager's lock in
the rack's run directory (one serve per rack: record.py), recovers
(recover.py), listens, prints one line on stdout,

    serving rack 'default' at http://127.0.0.1:8765 (GET /openapi.json describes the API)

and serves until SIGTERM or SIGINT, or until the rack goes down. Then it stops
listening, saves its record and returns. The jobs it launched run on (their
runners are in sessions of their own): a restarted serve finds them by PID
and collects their exit statuses; DELETE ?force=true, or `splitrack down`,
stops them.
"""

import asyncio
import signal

import uvloop
from aiohttp import web

from splitrack.manager.manager import Manager
from splitrack.manager.record import Record
from splitrack.manager.service import make_app
from splitrack.rack import Rack


def serve(rack: Rack, host: str, port: int) -> None:
    """Raises OSError if the port cannot be had or another serve has the rack,
    RackError if the rack does not answer."""
    uvloop.run(_serve(rack, host, port))


async def _serve(rack: Rack, host: str, port: int) -> None:
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with Record(rack.run.path).locked():
        manager = Manager(rack)
        runner = web.AppRunner(make_app(manager), access_log=None)
        try:
            await manager.start()
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
            bound_host, bound_port = runner.addresses[0][:2]
            if ":" in bound_host:   # IPv6
                bound_host = f"[{bound_host}]"
            print(f"serving rack {rack.name!r} at http://{bound_host}:{bound_port} "
                  "(GET /openapi.json describes the API)", flush=True)
            waits = [asyncio.ensure_future(e.wait()) for e in (stop, manager.rack_gone)]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
        finally:
            await runner.cleanup()
            await manager.close()
