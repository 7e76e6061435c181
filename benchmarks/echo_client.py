"""The client of `splitrack bench tcp` when it must run on the rack (pipe, fit modes).

    python -m benchmarks.echo_client IP PORT SIZE ROUNDS WARMUP
        prints one JSON line: the round-trip times in µs (after WARMUP of them)

Run with `splitrack run`, its socket is a bsdSocketStub; to a listener of the
rack, its connection takes a shortcut (pipe on the same pComponent, FIT between).
"""

import json
import sys

from benchmarks.tcp import echo_rtts

if __name__ == "__main__":
    ip, port, size, rounds, warmup = sys.argv[1], *map(int, sys.argv[2:6])
    print(json.dumps(echo_rtts(ip, port, size, rounds, warmup)), flush=True)
