"""The network path's fixed layouts (fit_rpc/netpath.py): N_CONNECT's request and reply
round-trip, and a request that is not one is refused with the errno the nComponent
answers (EINVAL), or struct.error (the endpoint's EBADMSG) when it is too short."""

import errno
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fit_rpc.netpath import (
    CONNECT,
    pack_connect,
    pack_connected,
    unpack_connect,
    unpack_connected,
)

ARGS = {"stub": 7, "src": "127.0.0.11", "dst": ["127.0.0.5", 8080], "timeout": 2.5,
        "buffers": {"mode": "dma", "home": "m12", "window": 1 << 19,
                    "rbuf": [1 << 40, 1 << 19], "tbuf": [(1 << 40) + (1 << 19), 1 << 18]},
        "opts": [[1, 8, 65536], [6, 1, 1]], "inbox": "shm:///run/p0.fit#42"}


def test_connect_round_trips():
    assert unpack_connect(pack_connect(ARGS)) == ARGS
    bound = {**{k: v for k, v in ARGS.items() if k != "src"}, "sk": 5 << 16 | 9,
             "timeout": None, "opts": []}
    assert unpack_connect(pack_connect(bound)) == bound


@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 65535), st.booleans(),
       st.ip_addresses(v=4))
def test_connected_round_trips(sk, port, pending, ip):
    assert unpack_connected(pack_connected(sk, (str(ip), port), pending)) == {
        "sk": sk, "local": [str(ip), port], "pending": pending}


def _with(offset: int, value: bytes) -> bytes:
    payload = bytearray(pack_connect(ARGS))
    payload[offset:offset + len(value)] = value
    return bytes(payload)


@pytest.mark.parametrize("payload", [
    pack_connect(ARGS) + b"!",                       # longer than its counts say
    pack_connect(ARGS)[:-1],                         # shorter
    _with(18, b"\x05"),                              # no data path 5
    _with(CONNECT.size - 28, struct.pack("<d", float("nan"))),   # a NaN timeout
    _with(CONNECT.size - 20, b"\xff"),               # a home that is not text
])
def test_what_is_no_connect_request_is_einval(payload):
    with pytest.raises(OSError) as caught:
        unpack_connect(payload)
    assert caught.value.errno == errno.EINVAL


def test_a_request_shorter_than_its_fixed_part_is_a_struct_error():
    with pytest.raises(struct.error):
        unpack_connect(pack_connect(ARGS)[:CONNECT.size - 1])


def test_an_mcomponent_id_longer_than_the_layout_is_refused_before_sending():
    with pytest.raises(ValueError):
        pack_connect({**ARGS, "buffers": {**ARGS["buffers"], "home": "m" * 17}})


@pytest.mark.parametrize("mode", ["bogus", 0, ["ddio"]])
def test_a_data_path_that_is_none_is_refused_before_sending(mode):
    with pytest.raises(ValueError):
        pack_connect({**ARGS, "buffers": {**ARGS["buffers"], "mode": mode}})
