"""fit_rpc: the rack's interconnect, a FIT-like RPC layer (LegoOS's FIT, over shared memory).

Every cross-component interaction in splitrack is a FIT message; the wire format
is docs/protocol.md. Public face:

    Endpoint, Message     endpoint.py    calls, one-way sends, handlers (its parts:
                                         calling.py, serving.py)
    Op, op_name           ops.py         operation codes
    codec                 codec.py       the "args" payload layout
    pages                 pages.py       struct layouts of the memory path's messages
    FitError and kin      errors.py      typed errors carrying errno codes
    Channel               channel.py     one-way messages, object to object
    Transport             transport.py   the interface a transport implements:
                                         shm_transport.py (rings in shared memory, the
                                         default; its parts: shm_links.py,
                                         shm_receiving.py, shm_sending.py; its
                                         channels: shm_channel.py),
                                         zmq_transport.py (ZeroMQ)
    rendezvous, identity  rendezvous.py  where shm endpoints meet; identity.py: the ids
                                         and what the kernel vouches for them
    regions               regions.py     memory peers map, for one-sided access
    FIT_* tunables        params.py      message and ring sizes, poll_us, timeouts
"""

from fit_rpc import codec
from fit_rpc.endpoint import GLOBAL_ID, Endpoint, Message
from fit_rpc.errors import (
    FitError,
    FitTimeout,
    MalformedMessage,
    MessageTooLarge,
    PeerUnreachable,
    UnknownDestination,
    UnknownOp,
)
from fit_rpc.ops import Op, op_name
from fit_rpc.transport import Transport

__all__ = [
    "GLOBAL_ID", "Endpoint", "Message", "Op", "op_name", "codec", "Transport",
    "FitError", "FitTimeout", "MalformedMessage", "MessageTooLarge", "PeerUnreachable",
    "UnknownDestination", "UnknownOp",
]
