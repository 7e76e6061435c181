"""The FIT message header: 24 bytes, little-endian, in front of every payload.

Interface:
    pack(kind, op, seq, length, err=0, trace=0, event=0) -> bytes   the header bytes
    parse(frame) -> (kind, op, err, seq, payload)    payload is a memoryview
                                                     into frame (no copy)
    parse_traced(frame) -> (kind, op, err, seq, trace, event, payload)
                                                     the same, with the trace fields
parse() raises MalformedMessage for anything that is not a well-formed
message; it never trusts `length`. `trace` and `event` are 0 unless the
message is traced (`splitrack trace`, fit_rpc/tracing.py): then `trace` names
the trace and `event` is the sender's number for this message. The layout is
specified in docs/protocol.md.
"""

import struct

from fit_rpc.errors import MalformedMessage, MessageTooLarge
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES

HEADER = struct.Struct("<HBBHHIIII")  # magic, version, kind, op, err, seq, length, trace, event
HEADER_SIZE = HEADER.size
MAGIC = 0x5446  # b"FT"
VERSION = 2

REQUEST = 1
REPLY = 2
ONEWAY = 3
_KINDS = (REQUEST, REPLY, ONEWAY)

_pack = HEADER.pack
_unpack_from = HEADER.unpack_from


def pack(kind: int, op: int, seq: int, length: int, err: int = 0, trace: int = 0,
         event: int = 0) -> bytes:
    return _pack(MAGIC, VERSION, kind, op, err, seq, length, trace, event)


def parse(frame: bytes | memoryview) -> tuple[int, int, int, int, memoryview]:
    kind, op, err, seq, _, _, payload = parse_traced(frame)
    return kind, op, err, seq, payload


def parse_traced(frame: bytes | memoryview
                 ) -> tuple[int, int, int, int, int, int, memoryview]:
    if len(frame) < HEADER_SIZE:
        raise MalformedMessage(f"frame of {len(frame)} bytes is shorter than the header")
    magic, version, kind, op, err, seq, length, trace, event = _unpack_from(frame)
    if magic != MAGIC or version != VERSION:
        raise MalformedMessage(f"bad magic/version {magic:#06x}/{version}")
    if kind not in _KINDS:
        raise MalformedMessage(f"bad kind {kind}")
    if length != len(frame) - HEADER_SIZE:
        raise MalformedMessage(f"length field {length} != payload of {len(frame) - HEADER_SIZE}")
    if length > FIT_MAX_PAYLOAD_BYTES:
        raise MessageTooLarge(f"payload of {length} bytes exceeds {FIT_MAX_PAYLOAD_BYTES}")
    return kind, op, err, seq, trace, event, memoryview(frame)[HEADER_SIZE:]
