"""benchmarks: measurements with their baselines taken in the same run.

    fit.py          `splitrack bench fit`: FIT request/reply RTT between two monitor
                    processes, over shm and over zmq, vs the interconnect floors
    extcache.py     `splitrack bench extcache`: extCache hits, misses, zero-fills and
                    evictions from a process on p0 vs the floors
    tcp.py          `splitrack bench tcp`: the paper's TCP micro-benchmarks vs Linux
                    (its report and targets: tcp_report.py)
    wordcount.py    `splitrack bench wordcount`: the paper's macro benchmark vs Linux
    floors.py       the interconnect floors: Linux TCP, AF_UNIX, FIT's rings asleep and
                    spinning, raw pyzmq, between plain processes
    shm_peer.py     a plain child at the other end of FIT's rings (the shm floors, the
                    relay floor's far end, the connect floor)
    relay_floor.py  the rack's socket layout with no splitrack code (bench tcp)
    raw_zmq.py      the raw pyzmq baseline (server process and client)
    hot.py          `splitrack bench hot`: the hot paths that need no rack
    compare.py      `splitrack bench compare`: what changed between two reports
    verbs.py        each `splitrack bench` verb's command line
    stats.py        the statistics of every series, ratios with their spread, verdicts
    limits.py       the targets (splitrack's own)
    paper.py        the paper's own figures, drawn as reference marks (not targets)
    report.py       what every benchmark does with its report: write it, print it
    plots.py        the figures (PNG) and their markdown tables
    progress.py     a progress bar, or a line a phase with no terminal
    machine.py      `--busy`: one core kept busy meanwhile; the machine in the JSON

Benchmarks are not tests: they print tables and machine-readable JSON and never
assert on wall-clock time.
"""
