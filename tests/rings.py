"""Spoiling a FIT link's rings by hand, and watching its socket: for the tests of the
shared-memory transport's bad input (test_shm_transport.py, test_shm_peers.py).

A link's segment (native/fitring.h) is a header, then ring 0 (requests) and ring 1
(replies); each spoiler takes the segment's view and the ring's published head,
and publishes something no producer would: a record with a bad mark, one longer
than the ring, a head past the ring, misaligned or going backwards, a skip record
past the head.
"""

import select
import socket
import struct

RING0 = 4096                 # ring 0's data in a segment (fitring.h: FR_HEADER_BYTES)
HEAD0 = 16 + 128             # fr_segment: magic..pad, bell[2][16]; then ctl[0].head
TAIL1 = HEAD0 + 2 * 64 + 64  # ctl[1].tail: the tail of ring 1 (the replies)
FR_MARK = 0x21544946


def hung_up(sock: socket.socket) -> bool:
    """Whether the far end of sock has hung up (now, without waiting)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLRDHUP)
    return any(ev & (select.POLLRDHUP | select.POLLHUP) for _, ev in poller.poll(0))


def publish(view, head: int, record: bytes = b"") -> None:
    """Write `record` where the producer's next record goes, and `head` as published."""
    at = RING0 + struct.unpack_from("<Q", view, HEAD0)[0]
    view[at:at + len(record)] = record
    struct.pack_into("<Q", view, HEAD0, head)


def bad_mark(view, h):
    publish(view, h + 16, struct.pack("<II", 8, 0xBAD0BAD0) + b"x" * 8)


def huge_record(view, h):
    publish(view, h + 16, struct.pack("<II", 0x7FFFFFFF, FR_MARK) + b"x" * 8)


def head_past_the_ring(view, h):
    publish(view, h + (1 << 40))


def head_misaligned(view, h):
    publish(view, h + 3)


def head_backwards(view, h):
    publish(view, h - 8)


def skip_past_head(view, h):
    publish(view, h + 8, struct.pack("<II", 0xFFFFFFFF, FR_MARK))   # a skip record


SPOILERS = [bad_mark, huge_record, head_past_the_ring, head_misaligned, head_backwards,
            skip_past_head]
