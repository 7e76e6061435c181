"""Regions: memory an endpoint owns and lets chosen peers map, for one-sided
READ and WRITE as RDMA does (an mComponent's arena for dDMA, a pComponent's
extCache for dDDIO).

Interface (through Endpoint):
    mm = ep.region(name, size, grant)     the owner: `size` bytes peers may map if
                                          grant(peer, pid) says so (pid: kernel-vouched)
    mm = ep.map_region(peer, name)        a peer: REGION_MAP, then the mapping;
                                          PermissionError if not granted
After that the peer reads and writes the mapping directly: no message per
access. What an address means inside a region (a frame of the arena, a line of
the extCache) is the owner's to tell, by messages, so it keeps its own tables
(a page table stays the mComponent's). The mapping is the transport's: shm
passes the region's memfd over the peer's rendezvous socket, to that peer only;
zmq lets a peer of the same host open it by /proc path.

REGION_MAP (0x0002): args {name} -> {key, size, ...transport's}; EPERM if the
grant refuses (counted `region_refused`), ENOENT if there is no such region.
"""

import errno
import os
from collections.abc import Callable
from typing import Any

from fit_rpc import codec
from fit_rpc.ops import Op


class Regions:
    def __init__(self, ep: Any):
        self._ep = ep
        self._own: dict[str, tuple[int, Any, Any, int, Callable]] = {}   # name -> (key,
        #                                                    mm, handle, size, grant)

    def create(self, name: str, size: int, grant: Callable[[str, int | None], bool]) -> Any:
        try:
            mm, handle = self._ep.transport.new_region(name, size)
        except OSError as exc:   # e.g. more than the host can map
            raise OSError(exc.errno, f"region {name!r} of {size} bytes: "
                                     f"{exc.strerror or exc}") from None
        self._own[name] = (len(self._own) + 1, mm, handle, size, grant)
        return mm

    def serve(self, msg: Any) -> bytes:
        """REGION_MAP, on the owner's side."""
        args, _ = msg.args()
        entry = self._own.get(codec.need(args, "name", str))
        if entry is None:
            raise OSError(errno.ENOENT, f"no region {args['name']!r} here")
        key, _, handle, size, grant = entry
        if not grant(msg.src, msg.pid):
            self._ep.counters.error("region_refused")
            raise PermissionError(errno.EPERM, f"region {args['name']!r} is not granted to "
                                  f"{msg.src}")
        extra = self._ep.transport.grant_region(msg.route, handle)
        return codec.encode({"key": key, "size": size, **extra})

    def map(self, peer: str, name: str, timeout: float | None) -> Any:
        # serve=False: the owner answers without calling back, and a mapping is made in
        # the middle of whatever needs it (an nComponent's dDMA copy), which a nested
        # handler must not re-enter
        answer, _ = codec.decode(self._ep.call(peer, Op.REGION_MAP, codec.encode({"name": name}),
                                               timeout, serve=False))
        return self._ep.transport.map_region(peer, answer, codec.need(answer, "size", int))

    def close(self) -> None:
        for _, mm, handle, _, _ in self._own.values():
            try:
                mm.close()
            except BufferError:   # a view of it still lives: unmapped at exit
                pass
            os.close(handle)
        self._own.clear()
