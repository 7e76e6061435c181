"""Start the default rack, show its processes, and time FIT round trips p0 -> m0.

Run: python examples/hello_rack.py
"""

import statistics

import splitrack
from fit_rpc import Op

with splitrack.Rack() as rack:                       # global, p0, p1, m0, n0, s0
    for row in rack.status():
        print(f"{row['id']:<7} pid {row['pid']:<8} {row['state']:<4} {row['address']}")
    ep = rack.endpoint()
    _, data = ep.call_args("p0", Op.PING_PEER, {"target": "m0", "size": 128, "count": 200})
    rtts = memoryview(data).cast("d")                # microseconds, measured inside p0
    print(f"FIT p0 -> m0, 128 B: median RTT {statistics.median(rtts):.1f} us")
