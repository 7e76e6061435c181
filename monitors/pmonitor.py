"""The pMonitor: the processor component pN.

Owns the pComponent's extCache and launches and reaps emulated processes; those
services come with the memory work (issue 3). Today it starts, registers its
extCache geometry with GPM, answers HEALTH/STATS/PING_PEER, and stops cleanly.
"""

from typing import Any

from monitors.core import Monitor


class PMonitor(Monitor):
    kind = "p"

    def resources(self) -> dict[str, Any]:
        return {"extcache": self.config["extcache"], "ways": self.config["ways"]}
