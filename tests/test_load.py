"""Many rack programs at once on two cores: they all finish, and every byte arrives.

Eight programs on the rack stream to plain receivers outside it at the same time,
DDIO and DMA mixed, while every FIT waiter spins as rack.poll_us says: spinning
backs off when the CPU is contended, so nobody starves (no timing is asserted:
`splitrack bench tcp` measures speed)."""

import contextlib
import hashlib
import socket
import textwrap
import threading

import pytest

from netprogs import network_rack, on_rack

PROGRAMS = 8
MIB = 1 << 20

# Connects to the receiver, sends `size` bytes of a pattern of its own, closes.
STREAMER = textwrap.dedent("""
    import socket, sys
    port, size, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    print(port, flush=True)
    chunk = bytes((seed + i) % 251 for i in range(4096))
    with socket.create_connection(("127.0.0.5", port)) as s:
        for _ in range(size // len(chunk)):
            s.sendall(chunk)
""")


@pytest.fixture(scope="module")
def load():
    with network_rack("load") as (rack, env):
        yield rack, env


def _expected(size: int, seed: int) -> str:
    chunk = bytes((seed + i) % 251 for i in range(4096))
    return hashlib.sha256(chunk * (size // len(chunk))).hexdigest()


def test_eight_programs_stream_at_once_and_every_byte_arrives(load):
    rack, env = load
    size = 4 * MIB
    listener = socket.create_server(("127.0.0.5", 0), backlog=PROGRAMS)
    port = listener.getsockname()[1]
    digests: dict[int, str] = {}

    def receive() -> None:
        conn, _ = listener.accept()
        with conn:
            h, got, seed = hashlib.sha256(), 0, -1
            while data := conn.recv(MIB):
                if seed < 0:
                    seed = data[0]   # the pattern's first byte is the program's seed
                h.update(data)
                got += len(data)
            digests[seed] = h.hexdigest() if got == size else f"{got} bytes"

    threads = [threading.Thread(target=receive, daemon=True) for _ in range(PROGRAMS)]
    for t in threads:
        t.start()
    try:
        with contextlib.ExitStack() as programs:   # each stopped on every way out
            started = [programs.enter_context(on_rack(
                env, STREAMER, str(port), str(size), str(seed), name="load",
                on=f"p{seed % 2}", mode="dma" if seed % 4 == 3 else "ddio"))
                for seed in range(1, PROGRAMS + 1)]
            for proc, _ in started:
                assert proc.wait(timeout=120) == 0, proc.stderr.read()
        for t in threads:
            t.join(timeout=60)
    finally:
        listener.close()
    assert digests == {seed: _expected(size, seed) for seed in range(1, PROGRAMS + 1)}
