"""The CPU-heavy work of a job's process: pure-Python arithmetic, no sockets, no rack memory.

    work(iterations) -> int      a 31-bit linear congruential generator stepped `iterations`
                                 times; the result is returned (and printed) so that the loop
                                 is never optimised away. About 10 M iterations a second
                                 on one core of CPython.

    python -m benchmarks.placement_cpu ITERATIONS
                                 one process of a job (`splitrack job submit`): computes and
                                 prints one JSON line {"rank", "seconds", "checksum"}, its
                                 rank from SPLITRACK_RANK (0 when unset)

`bench placement` calls work() between two laps of its ring (placement_ring.py,
workload cpu); `bench slices` runs this program as the job of a slice that has
no nComponent (it needs none).
"""

import json
import os
import sys
import time

SEED = 1


def work(iterations: int) -> int:
    x = SEED
    for _ in range(iterations):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m benchmarks.placement_cpu ITERATIONS", file=sys.stderr)
        return 2
    start = time.monotonic()
    checksum = work(int(argv[0]))
    print(json.dumps({"rank": int(os.environ.get("SPLITRACK_RANK", "0")),
                      "seconds": round(time.monotonic() - start, 6), "checksum": checksum}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
