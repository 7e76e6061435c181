"""FIT operation codes; the table with payloads is docs/protocol.md.

The high byte names the component kind that serves the op: 0x00 any endpoint,
0x01 any monitor, 0x02 global (GPM/GMM/GSM/GNM), 0x03 pComponent,
0x04 mComponent, 0x05 sComponent, 0x06 nComponent, 0x07 bsdSocketStub.
"""

from enum import IntEnum


class Op(IntEnum):
    # every endpoint
    ECHO = 0x0001
    REGION_READ = 0x0002   # reserved: one-sided read (dDMA)
    REGION_WRITE = 0x0003  # reserved: one-sided write (dDMA)
    # every monitor
    HEALTH = 0x0101
    STATS = 0x0102
    PING_PEER = 0x0103
    # global: component registry, GPM, GMM, GSM, GNM
    REGISTER = 0x0201
    RESOLVE = 0x0202
    LIST = 0x0203
    LOAD_REPORT = 0x0204
    UNREGISTER = 0x0205
    GPM_PLACE = 0x0211
    GMM_PLACE = 0x0221
    GSM_LOOKUP = 0x0231
    GNM_OWNER = 0x0241
    GNM_IS_RACK_IP = 0x0242
    # pComponent: its processes
    P_ATTACH = 0x0301
    P_PROCESSES = 0x0302
    # mComponent: address spaces, misses and write-backs
    M_ALLOC = 0x0401
    M_FREE = 0x0402
    M_MISS = 0x0403
    M_WRITEBACK = 0x0404
    M_RELEASE = 0x0405
    # sComponent file service
    S_OPEN = 0x0501
    S_READ = 0x0502
    S_WRITE = 0x0503
    S_STAT = 0x0504
    S_TRUNCATE = 0x0505
    S_UNLINK = 0x0506
    S_MKDIR = 0x0507
    S_RMDIR = 0x0508
    S_LISTDIR = 0x0509
    S_RENAME = 0x050A


_NAMES = {int(op): op.name for op in Op}


def op_name(op: int) -> str:
    """A counter-friendly name for any op number, known or not."""
    return _NAMES.get(op) or f"op_{op:#06x}"
