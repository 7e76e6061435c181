"""benchmarks: measurements with their baselines taken in the same run.

    fit.py       `splitrack bench fit`: FIT request/reply RTT between two monitor
                 processes vs raw pyzmq DEALER/ROUTER between two plain processes
    extcache.py  `splitrack bench extcache`: extCache hits, misses, zero-fills and
                 evictions from a process on p0 vs raw pyzmq
    raw_zmq.py   the raw pyzmq baseline (server process and client)
    report.py    print the table, write the JSON
    test_hot_paths.py  pytest-benchmark cases for rack-less hot paths

Benchmarks are not tests: they print tables and machine-readable JSON and never
assert on wall-clock time.
"""
