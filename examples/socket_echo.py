"""An ordinary TCP echo server: nothing in it knows about the rack. Run it on one:

    splitrack run --on p0 -- python examples/socket_echo.py 127.0.0.11 7000
    python -c "import socket; s = socket.create_connection(('127.0.0.11', 7000)); \\
               s.sendall(b'hi'); print(s.recv(2))"

On the rack its `socket` module is the rack's: the listening socket is a
bsdSocketStub in this process, the kernel socket a bsdSocketSkeleton's on the
nComponent that owns 127.0.0.11, and every byte goes through p0's extCache
(DDIO) or through the mComponent too (`--mode dma`). `splitrack stats` then
shows the p-n (and, with DMA, n-m) messages. Port 0 picks a free port.
"""

import socket
import sys

ip, port = sys.argv[1], int(sys.argv[2])
with socket.create_server((ip, port)) as server:
    print(f"echoing on {server.getsockname()[0]}:{server.getsockname()[1]} "
          f"with a {type(server).__name__}", flush=True)
    while True:
        conn, peer = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)
