"""The benchmarks' targets (docs/benchmarks.md says why each has its form).

Each benchmark judges its targets with these (stats.target), and the plots
draw them; change a target here and both follow. They are splitrack's own
limits: the paper reports figures, not margins (its figures: paper.py;
docs/fidelity.md).
"""

FIT_RTT_OVER_LINUX = {128: 1.0, 4096: 1.3}   # bench fit: FIT shm p50 / Linux TCP p50, by size
MISS_OVER_FLOOR = 1.5      # bench extcache: read_miss p50 / (shm_eventfd p50 + a 4 KiB copy)
READ_HIT_US = 1.0          # bench extcache: read_hit p50 of a whole line, µs
RACK_UP_S = 2.0            # bench fit: starting the shm rack, seconds
FABRIC_BAND = (0.9, 1.1)   # bench fit --fabric-*: the model's RTT increase / 2L and its
                           # bandwidth / the set one, within 10 %
FABRIC_FROM_US = 10        # ... judged for latencies from this on (µs)
DDIO_RTT_OVER_LINUX = 3.0  # bench tcp: DDIO RTT p50 / Linux p50 ...
DDIO_RTT_UP_TO = 2048      # ... at sizes up to this
SHORTCUT_RTT = 1.5         # fit shortcut / Linux, pipe shortcut / raw os.pipe (RTT p50)
CONNECT_OVER_LINUX = 4.0   # rack connect p50 / Linux connect p50
TX_AT = 4096               # throughput / Linux at this size, at least:
TX_OVER_LINUX = {"ddio": 0.8, "dma": 0.35}
NCOMPONENT_CORE_S_PER_GB = 4.0   # nComponent CPU each way
WORDCOUNT_OVER_LINUX = 1.2       # bench wordcount: DDIO time / Linux time
RESIDENT_OVER_HOST = 1.05        # bench rackmem: a resident loop, --memory rack / host
RACK_MISS_OVER_VM_MISS = 1.5     # bench rackmem: a heap page's miss / vm's read miss, p50
RACK_MEMORY_OVER_HOST = 1.3      # bench wordcount --memory rack: DDIO time / DDIO's with
#                                  --memory host (an extCache larger than the working set)
