"""FIT operation codes; the table with payloads is docs/protocol.md.

The high byte names the component kind that serves the op: 0x00 any endpoint,
0x01 any monitor, 0x02 global (GPM/GMM/GSM/GNM), 0x03 pComponent,
0x04 mComponent, 0x05 sComponent, 0x06 nComponent, 0x07 bsdSocketStub.
"""

from enum import IntEnum


class Op(IntEnum):
    # every endpoint
    ECHO = 0x0001
    REGION_MAP = 0x0002    # map a peer's region, for one-sided reads and writes (regions.py)
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
    RESTART = 0x0206           # start a monitor of the spec again, in place of a dead one
    GPM_PLACE = 0x0211
    GMM_PLACE = 0x0221
    GSM_LOOKUP = 0x0231
    GNM_OWNER = 0x0241
    GNM_IS_RACK_IP = 0x0242
    GNM_ALLOCATE = 0x0243      # which NIC a process's unbound sockets use
    SLICE_GRANT = 0x0251       # grant free components to a named slice
    SLICE_RELEASE = 0x0252     # free a slice's components
    SLICE_LIST = 0x0253        # the slices and every component's slice
    SLICE_TABLE = 0x0254       # global -> each monitor: every component's slice
    # pComponent: its processes
    P_ATTACH = 0x0301
    P_PROCESSES = 0x0302
    P_VOUCH = 0x0303           # is pid a process of this pComponent? (identities)
    # mComponent: address spaces, misses and write-backs
    M_ALLOC = 0x0401
    M_FREE = 0x0402
    M_MISS = 0x0403
    M_WRITEBACK = 0x0404
    M_RELEASE = 0x0405
    M_DMA_MAP = 0x0406         # dDMA: where a process's bytes are in the arena (region), pinned
    M_DMA_DONE = 0x0407        # dDMA: one-way, the nComponent is done with a mapping
    M_FETCH = 0x0408           # read-ahead: several consecutive lines of a process's pages
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
    # nComponent: the Proxy and its bsdSocketSkeletons (stub -> skeleton)
    N_BIND = 0x0601            # create a skeleton with a kernel socket bound on a NIC
    N_CONNECT = 0x0602         # connect a skeleton's kernel socket (creates one if needed);
                               # the reply, or STUB_CONNECTED if the handshake is pending
    N_LISTEN = 0x0603
    N_START = 0x0604           # one-way: an accepted skeleton gets its stub's receive buffer
    N_SEND = 0x0605            # one-way: DDIO send, the bytes wait in the stub's extCache lines
    N_SEND_DMA = 0x0606        # one-way: DMA send, the bytes wait in the mComponent
    N_CREDIT = 0x0607          # one-way: the stub consumed received bytes (window reopens)
    N_SHUTDOWN = 0x0608        # one-way
    N_CLOSE = 0x0609           # one-way
    N_SOCKOPT = 0x060A         # setsockopt/getsockopt on the kernel socket
    N_RELEASE = 0x060B         # from a pMonitor: a process ended
    N_LOOKUP = 0x060C          # who listens on ip:port (the intra-rack shortcut asks)
    N_DGRAM_CONNECT = 0x060D   # a datagram skeleton's kernel socket connects (a default peer)
    # bsdSocketStub (skeleton -> stub; all one-way)
    STUB_DATA = 0x0701         # DDIO: received bytes for the stub's receive buffer
    STUB_DATA_DMA = 0x0702     # DMA: received bytes are in the mComponent
    STUB_ACCEPT = 0x0703       # a listener's new connection
    STUB_SENT = 0x0704         # send credit back: the kernel took these bytes
    STUB_CLOSED = 0x0705       # EOF (errno 0) or an error on the connection
    STUB_CONNECTED = 0x0706    # a pending N_CONNECT (or STUB_SC_CONNECT) done: {sk, local}|{errno}
    STUB_DGRAM_ERROR = 0x070A  # a datagram socket's error (a send's, an ICMP's): reported once
    # bsdSocketStub <-> bsdSocketStub: the intra-rack shortcuts (all one-way)
    STUB_SC_CONNECT = 0x0707   # to a listener's process: a shortcut connection, pipe or FIT
    STUB_SC_DATA = 0x0708      # FIT shortcut: bytes for the peer stub
    STUB_SC_CREDIT = 0x0709    # FIT shortcut: the peer consumed n bytes (window reopens)


_NAMES = {int(op): op.name for op in Op}


def op_name(op: int) -> str:
    """A counter-friendly name for any op number, known or not."""
    return _NAMES.get(op) or f"op_{op:#06x}"
