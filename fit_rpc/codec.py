"""The "args" payload layout: u32 n, n bytes of a JSON object, then raw data.

Interface:
    encode(args=None, data=b"") -> bytes
    handler(fn)      adapts fn(args, data) -> dict | (dict, data) into an Endpoint handler
    decode(payload) -> (args: dict, data: memoryview)   # data is a view, no copy

decode raises MalformedMessage (EBADMSG) if the payload is not this layout or
the JSON is not an object. Handlers check the fields they need with `need`,
which raises OSError(EINVAL) naming the field.
"""

import errno
import json
import struct
from collections.abc import Callable
from typing import Any

from fit_rpc.errors import MalformedMessage

_LEN = struct.Struct("<I")
_EMPTY = _LEN.pack(0)


def encode(args: dict[str, Any] | None = None, data: bytes | memoryview = b"") -> bytes:
    if not args:
        return _EMPTY + data if data else _EMPTY
    text = json.dumps(args, separators=(",", ":")).encode()
    return b"".join((_LEN.pack(len(text)), text, data))


def decode(payload: bytes | memoryview) -> tuple[dict[str, Any], memoryview]:
    view = memoryview(payload)
    if len(view) < _LEN.size:
        raise MalformedMessage("args payload shorter than its length field")
    (n,) = _LEN.unpack_from(view)
    if n > len(view) - _LEN.size:
        raise MalformedMessage(f"args length {n} exceeds the payload")
    if n == 0:
        return {}, view[_LEN.size:]
    try:
        args = json.loads(bytes(view[_LEN.size:_LEN.size + n]))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedMessage(f"args are not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise MalformedMessage("args are not a JSON object")
    return args, view[_LEN.size + n:]


def need(args: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """args[name], checked to be of `kind`; EINVAL naming the field otherwise."""
    value = args.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise OSError(errno.EINVAL, f"argument {name!r} missing or not {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def handler(fn: Callable[[dict[str, Any], memoryview], Any]) -> Callable[[Any], bytes]:
    """Adapt fn(args, data) -> dict | (dict, data) | None into an Endpoint handler
    that speaks the "args" layout on both sides."""

    def handle(msg: Any) -> bytes:
        result = fn(*decode(msg.payload))
        if isinstance(result, tuple):
            return encode(*result)
        return encode(result)

    handle.__name__ = getattr(fn, "__name__", "handler")
    handle.__doc__ = fn.__doc__
    return handle
