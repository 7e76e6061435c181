"""The nMonitor: the network component nN.

At setup it registers its NICs (IPv4 addresses) with GNM. The Proxy,
bsdSocketSkeletons, routing, dDMA and dDDIO come with the network work
(issue 4). Today it starts, registers, answers HEALTH/STATS/PING_PEER, and
stops cleanly.
"""

from typing import Any

from monitors.core import Monitor


class NMonitor(Monitor):
    kind = "n"

    def resources(self) -> dict[str, Any]:
        return {"nics": list(self.config["nics"])}
