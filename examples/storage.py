"""Write, read and list a file on the sComponent s0, through FIT.

The sComponent is stateless (LegoOS style): every request names its path,
relative to s0's root directory; nothing outside that root is reachable.
Run: python examples/storage.py
"""

import splitrack
from fit_rpc import Op

with splitrack.Rack() as rack:
    ep = rack.endpoint()
    ep.call_args("s0", Op.S_OPEN, {"path": "hello.txt", "create": True, "truncate": True})
    ep.call_args("s0", Op.S_WRITE, {"path": "hello.txt", "offset": 0}, b"hello, split kernel\n")
    _, data = ep.call_args("s0", Op.S_READ, {"path": "hello.txt", "offset": 0, "length": 100})
    print(bytes(data).decode(), end="")
    print(ep.call_args("s0", Op.S_LISTDIR, {"path": ""})[0]["entries"])
    try:
        ep.call_args("s0", Op.S_READ, {"path": "../../etc/passwd", "offset": 0, "length": 10})
    except PermissionError as exc:
        print("refused:", exc)
