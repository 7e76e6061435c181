"""benchmarks: measurements with their baselines taken in the same run.

    fit.py       `splitrack bench fit`: FIT request/reply RTT between two monitor
                 processes vs raw pyzmq DEALER/ROUTER between two plain processes
    raw_zmq.py   the raw pyzmq baseline (server process and client)

Benchmarks are not tests: they print tables and machine-readable JSON and never
assert on wall-clock time.
"""
