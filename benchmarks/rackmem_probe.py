"""The program `splitrack bench rackmem` runs on the rack, once with --memory rack and
once with --memory host (python -m benchmarks.rackmem_probe CACHE_BYTES ROUNDS):

- resident: seconds for ROUNDS passes over memory that stays resident -- a sha256
  of a bytearray of a 16th of the extCache, and a Python sum over a list of ints
  about as large: an eighth of the extCache, so that no set overflows (its
  pages' faults during the passes, with --memory rack, come back too: 0);
- heap_miss_us: with --memory rack, one first touch each of pages that were
  written, then evicted by the extCache (a buffer twice its size touched after
  them): each a fault the pager serves with an M_MISS to the home;
- vm_miss_us: one vm.read_into of a 4 KiB line written back and not cached (as
  bench extcache's read_miss), each.
Prints one JSON line: {"memory", "resident_s", "resident_faults", "heap_miss_us": [...],
"vm_miss_us": [...]}.
"""

import hashlib
import json
import sys
import time

PAGE = 4096
MISSES = 2000   # timed misses of each kind at most


def resident(cache: int, rounds: int) -> float:
    buf = bytearray(b"x" * (cache // 16))
    ints = list(range(cache // 16 // 40))     # a list slot and an int: about 40 bytes
    hashlib.sha256(buf).digest()
    sum(ints)
    start = time.perf_counter()
    for _ in range(rounds):
        hashlib.sha256(buf).digest()
        sum(ints)
    return time.perf_counter() - start


def heap_misses(cache: int) -> list[float]:
    victims = bytearray(2 * cache)
    for at in range(0, len(victims), PAGE):
        victims[at] = 1                       # written: a miss later asks the home
    flood = bytearray(2 * cache)
    for at in range(0, len(flood), PAGE):
        flood[at] = 1                         # evicts them from the extCache
    out = []
    clock = time.perf_counter_ns
    for at in range(0, min(len(victims), MISSES * PAGE), PAGE):
        t = clock()
        victims[at]
        out.append((clock() - t) / 1e3)
    return out


def vm_misses(cache: int) -> list[float]:
    from splitrack.guest import vm
    n = min(MISSES, 2 * cache // PAGE)
    addr = vm.alloc(n * PAGE)
    for i in range(n):
        vm.write(addr + i * PAGE, b"v" * PAGE)
    vm.flush(addr, n * PAGE)
    vm.invalidate(addr, n * PAGE)             # written back, not cached: each read misses
    buf = bytearray(PAGE)
    out = []
    clock = time.perf_counter_ns
    for i in range(n):
        t = clock()
        vm.read_into(addr + i * PAGE, buf)
        out.append((clock() - t) / 1e3)
    vm.free(addr)
    return out


def main() -> None:
    from splitrack.guest import rackmem
    cache, rounds = int(sys.argv[1]), int(sys.argv[2])
    rack = rackmem.installed()
    before = rackmem.stats()["faults"]
    passes = resident(cache, rounds)
    result = {"memory": "rack" if rack else "host", "resident_s": passes,
              "resident_faults": rackmem.stats()["faults"] - before,
              "heap_miss_us": heap_misses(cache) if rack else [],
              "vm_miss_us": vm_misses(cache)}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
