"""The mMonitor: the memory component mN.

Holds per-process address spaces (vRegions, page tables, a preallocated
physical arena) and serves extCache misses and write-backs; those services come
with the memory work (issue 3). Today it starts, registers its memory size with
GMM, answers HEALTH/STATS/PING_PEER, and stops cleanly.
"""

from typing import Any

from monitors.core import Monitor


class MMonitor(Monitor):
    kind = "m"

    def resources(self) -> dict[str, Any]:
        return {"memory": self.config["memory"]}
