"""The FIT message header: 16 bytes, little-endian, in front of every payload.

Interface:
    pack(kind, op, seq, length, err=0) -> bytes      the 16 header bytes
    parse(frame) -> (kind, op, err, seq, payload)    payload is a memoryview
                                                     into frame (no copy)
parse() raises MalformedMessage for anything that is not a well-formed
message; it never trusts `length`. The layout is specified in docs/protocol.md.
"""

import struct

from fit_rpc.errors import MalformedMessage, MessageTooLarge
from splitrack.params import FIT_MAX_PAYLOAD_BYTES

HEADER = struct.Struct("<HBBHHII")  # magic, version, kind, op, err, seq, length
HEADER_SIZE = HEADER.size
MAGIC = 0x5446  # b"FT"
VERSION = 1

REQUEST = 1
REPLY = 2
ONEWAY = 3
_KINDS = (REQUEST, REPLY, ONEWAY)

_pack = HEADER.pack
_unpack_from = HEADER.unpack_from


def pack(kind: int, op: int, seq: int, length: int, err: int = 0) -> bytes:
    return _pack(MAGIC, VERSION, kind, op, err, seq, length)


def parse(frame: bytes | memoryview) -> tuple[int, int, int, int, memoryview]:
    if len(frame) < HEADER_SIZE:
        raise MalformedMessage(f"frame of {len(frame)} bytes is shorter than the header")
    magic, version, kind, op, err, seq, length = _unpack_from(frame)
    if magic != MAGIC or version != VERSION:
        raise MalformedMessage(f"bad magic/version {magic:#06x}/{version}")
    if kind not in _KINDS:
        raise MalformedMessage(f"bad kind {kind}")
    if length != len(frame) - HEADER_SIZE:
        raise MalformedMessage(f"length field {length} != payload of {len(frame) - HEADER_SIZE}")
    if length > FIT_MAX_PAYLOAD_BYTES:
        raise MessageTooLarge(f"payload of {length} bytes exceeds {FIT_MAX_PAYLOAD_BYTES}")
    return kind, op, err, seq, memoryview(frame)[HEADER_SIZE:]
