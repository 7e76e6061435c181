"""The word-count reducer: a plain process outside the rack that adds up the pairs.

    python -m benchmarks.wordcount_reducer IP OUT.json
        binds (IP, 0), prints "IP PORT", takes one mapper's connection, adds up its
        "word count" lines until EOF, then writes {"end": time.monotonic() at EOF,
        "pairs": n, "counts": {word: count}} to OUT.json

A malformed line (not "word count") fails the run: it exits 1 and says so.
"""

import json
import socket
import sys
import time


def reduce_pairs(conn: socket.socket) -> tuple[dict[str, int], int]:
    counts: dict[bytes, int] = {}
    pairs = 0
    rest = b""
    while True:
        data = conn.recv(1 << 20)
        if not data:
            break
        data = rest + data
        cut = data.rfind(b"\n") + 1
        fields, rest = data[:cut].split(), data[cut:]
        if len(fields) % 2:
            raise ValueError("a line is not 'word count'")
        it = iter(fields)
        for word, n in zip(it, it, strict=True):
            counts[word] = counts.get(word, 0) + int(n)
        pairs += len(fields) // 2
    if rest.strip():
        raise ValueError(f"the mapper's last line is cut short: {rest[:40]!r}")
    return {w.decode(): c for w, c in counts.items()}, pairs


def main(ip: str, out: str) -> None:
    listener = socket.create_server((ip, 0))
    print(ip, listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    with conn:
        counts, pairs = reduce_pairs(conn)
    end = time.monotonic()
    with open(out, "w") as f:
        json.dump({"end": end, "pairs": pairs, "counts": counts}, f)


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2])
    except ValueError as exc:
        raise SystemExit(f"wordcount_reducer: {exc}") from None
