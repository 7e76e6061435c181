"""The word-count mapper: reads its input, sends each <word, count> pair as it is made.

    python -m benchmarks.wordcount_mapper rack PATH IP PORT   PATH on the sComponent
                                                              (splitrack.guest.files; run it
                                                              with `splitrack run`)
    python -m benchmarks.wordcount_mapper file PATH IP PORT   a local file (the Linux
                                                              baseline, a plain process)

It reads the input in 1 MiB chunks (a word cut by a chunk's end goes on with
the next), counts each chunk's words, and sends every <word, count> pair of
the chunk as one line "word count\\n", one send() each, as soon as it is
produced, to the reducer at IP:PORT; then it closes. Prints one JSON line:
{"start": time.monotonic() at its start, "words": n, "pairs": n}, and "pager": its
pager's counts if its memory is the rack's (splitrack run --memory rack).
"""

import itertools
import json
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator

CHUNK_BYTES = 1 << 20


def _chunks(source: str, path: str) -> Iterator[bytes]:
    if source == "rack":
        from splitrack.guest import files
        yield from files.chunks(path, CHUNK_BYTES)
        return
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            yield chunk


def map_words(source: str, path: str, ip: str, port: int) -> dict[str, float]:
    start = time.monotonic()
    words = pairs = 0
    carry = b""
    with socket.create_connection((ip, port)) as sock:
        send = sock.sendall
        for chunk in itertools.chain(_chunks(source, path), [None]):   # one chunk at a time
            if chunk is None:
                body, carry = carry, b""
            else:
                data = carry + chunk
                cut = max(data.rfind(b" "), data.rfind(b"\n")) + 1
                body, carry = data[:cut], data[cut:]
            counts = Counter(body.split())
            words += counts.total()
            pairs += len(counts)
            for word, n in counts.items():
                send(b"%s %d\n" % (word, n))
    result = {"start": start, "words": words, "pairs": pairs}
    if source == "rack":
        from splitrack.guest import rackmem
        if rackmem.installed():   # splitrack run --memory rack
            result["pager"] = rackmem.stats()
    return result


if __name__ == "__main__":
    source, path, ip, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if source not in ("rack", "file"):
        raise SystemExit(f"wordcount_mapper: the source is rack or file, not {source!r}")
    print(json.dumps(map_words(source, path, ip, port)), flush=True)
