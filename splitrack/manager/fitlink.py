"""The manager's one FIT endpoint, owned by one worker thread.

    link = FitLink(rack)
    args = await link.call("global", Op.SLICE_LIST)    # off the event loop
    link.close()

FIT calls block (fit_rpc.Endpoint), and an Endpoint is not thread-safe: every
call goes to one worker thread, which makes the endpoint on its first call and
is the only one to touch it. The event loop awaits the answer meanwhile, so
HTTP requests are served while a call is under way; calls run one at a time,
in the order they were made. Errors are the endpoint's (OSError subclasses,
fit_rpc/errors.py).
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fit_rpc import Endpoint
from splitrack.rack import Rack


class FitLink:
    def __init__(self, rack: Rack):
        self.rack = rack
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fit")
        self._ep: Endpoint | None = None

    async def call(self, cid: str, op: int, args: dict[str, Any] | None = None,
                   timeout: float | None = None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._call, cid, op, args, timeout)

    def _call(self, cid: str, op: int, args: dict[str, Any] | None,
              timeout: float | None) -> dict[str, Any]:
        if self._ep is None:
            self._ep = self.rack.endpoint()
        return self._ep.call_args(cid, op, args, timeout=timeout)[0]

    def close(self) -> None:
        self._thread.submit(self._close).result()
        self._thread.shutdown()

    def _close(self) -> None:
        if self._ep is not None:
            self._ep.close()
            self._ep = None
