"""The nMonitor's ops on bsdSocketSkeletons: N_BIND to N_RELEASE (0x06xx).

`SkeletonOps` is the part of the NMonitor (nmonitor.py) that handles what a
stub asks of its skeleton (the list: nmonitor.py's docstring and
docs/protocol.md; N_CONNECT is connector.py's); its state is the nMonitor's.
It is the trust boundary of the nComponent's sockets; its checks, which
connector.py uses too:
- own(msg, sk): the skeleton msg names, if msg's sender owns it: EPERM for
  another process's, EBADF for none (N_CLOSE of either does nothing); a traced
  message becomes the skeleton's context;
- check_inbox(msg, args): the inbox pushes go to is the sender's own (EPERM,
  counted `forged`);
- the slices: N_BIND (EADDRNOTAVAIL) and N_LOOKUP (EPERM) only from a process
  of this nComponent's slice, and a skeleton's rings only at an mComponent of
  it (start, skeleton_lifecycle.py).
N_RELEASE comes from a pMonitor (msg.src: its pComponent), about a process of
its own.
"""

import errno
import socket
import struct
from typing import Any

from fit_rpc import Message, codec, tracing
from fit_rpc.codec import need
from fit_rpc.identity import address_pid
from fit_rpc.netpath import CLOSE_UNREAD, SK, SK_ERR, SK_N
from monitors.dgram_skeleton import DgramSkeleton
from monitors.skeleton import Skeleton


def _abortive(skel: Any, on: bool) -> None:
    """SO_LINGER on with 0 s, or off, on the skeleton's kernel sockets: its close resets
    the connection, or not (Skeleton.close). (Never lingering for a time: the kernel's
    close would block this loop.)"""
    skel.abortive = on
    for s in skel.socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", int(on), 0))


class SkeletonOps:
    """The NMonitor's handlers of the stubs' requests, and their checks."""

    # ---- ops: creating skeletons -----------------------------------------------------------
    def n_bind(self, msg: Message) -> bytes:
        args, _ = msg.args()
        self.check_slice(msg.src, errno.EADDRNOTAVAIL)   # a NIC of another slice: not ours
        self.check_inbox(msg, args)
        dgram = args.get("type", "stream") == "dgram"
        socks, port = self.proxy.bound(need(args, "ip", str), need(args, "port", int),
                                       args.get("opts", []), bool(args.get("loopback")),
                                       socket.SOCK_DGRAM if dgram else socket.SOCK_STREAM)
        skel = self.new(msg.src, socks, kind=DgramSkeleton if dgram else Skeleton)
        skel.stub = need(args, "stub", int)
        skel.inbox = need(args, "inbox", str)
        return codec.encode({"sk": skel.sk, "port": port})

    def n_dgram_connect(self, msg: Message) -> bytes:
        """A datagram socket's default peer (UDP connect(): no handshake)."""
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        if not isinstance(skel, DgramSkeleton):
            raise OSError(errno.EOPNOTSUPP, f"socket {skel.sk} is no datagram socket")
        ip, port = need(args, "dst", list)
        if type(ip) is not str or type(port) is not int:
            raise OSError(errno.EINVAL, "dst is [ip, port]")
        return codec.encode({"local": list(skel.connect_to(ip, port))})

    def n_listen(self, msg: Message) -> bytes:
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        skel.backlog = max(1, min(need(args, "backlog", int), socket.SOMAXCONN))
        for s in skel.socks:
            s.listen(skel.backlog)
        skel.listening = True
        self.watch(skel)
        return codec.encode()

    def n_start(self, msg: Message) -> None:
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        if skel.parent is not None:
            skel.parent.waiting.discard(skel.sk)
            self.watch(skel.parent)
        skel.stub = need(args, "stub", int)
        try:
            self.start(skel, need(args, "buffers", dict))
        except OSError as exc:
            self.fail_new(skel, exc.errno or errno.EIO)

    # ---- ops: the data path ----------------------------------------------------------------
    def n_send(self, msg: Message) -> None:
        """N_SEND (dDDIO) or N_SEND_DMA: the stub's next n bytes wait in its send ring."""
        sk, n = SK_N.unpack_from(msg.payload)
        skel = self.own(msg, sk)
        if skel.path is not None and skel.path.send_op == msg.op and not skel.broken:
            skel.path.load(skel, n)

    def n_credit(self, msg: Message) -> None:
        sk, n = SK_N.unpack_from(msg.payload)
        self.own(msg, sk).credit(n)

    def n_shutdown(self, msg: Message) -> bytes:
        sk, how = SK_ERR.unpack_from(msg.payload)
        self.own(msg, sk).shutdown(how)
        return b""

    def n_close(self, msg: Message) -> bytes:
        (sk,) = SK.unpack_from(msg.payload)
        skel = self.skels.get(sk)
        if skel is not None and skel.owner == msg.src:
            skel.trace = tracing.current.ctx or skel.trace
            if msg.payload[SK.size:] == CLOSE_UNREAD:   # bytes the program never read:
                _abortive(skel, True)                   # Linux's close resets
            skel.close()
        return b""

    def n_sockopt(self, msg: Message) -> bytes:
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        level, opt = need(args, "level", int), need(args, "opt", int)
        if "linger" in args:   # SO_LINGER, on with 0 s: close resets (Skeleton.close)
            linger = need(args, "linger", list)
            if len(linger) != 2 or not all(type(v) is int for v in linger):
                raise OSError(errno.EINVAL, "linger is [l_onoff, l_linger]")
            _abortive(skel, linger[0] != 0 and linger[1] == 0)
            return codec.encode()
        if "value" in args:
            for s in skel.socks:
                self.proxy.apply(s, level, opt, need(args, "value", int))
            return codec.encode()
        buflen = args.get("buflen", 0)
        if type(buflen) is not int or not 0 <= buflen <= 1024:
            raise OSError(errno.EINVAL, "buflen is 0-1024")
        if buflen:   # a struct or a string (TCP_INFO, TCP_CONGESTION): its bytes, in hex
            return codec.encode({"raw": self.proxy.query(skel.sock, level, opt, buflen).hex()})
        return codec.encode({"value": self.proxy.query(skel.sock, level, opt)})

    def n_lookup(self, msg: Message) -> bytes:
        self.check_slice(msg.src)   # the stub takes the ordinary path, through its own NIC
        args, _ = msg.args()
        where = (need(args, "ip", str), need(args, "port", int))
        for skel in self.skels.values():
            if skel.listening and not skel.dead and not skel.gone and any(
                    s.getsockname() == where for s in skel.socks):
                same = skel.owner.split(".")[0] == msg.src.split(".")[0]
                self.counts["shortcuts_pipe" if same else "shortcuts_fit"] += 1
                return codec.encode({"process": skel.owner, "stub": skel.stub,
                                     "inbox": skel.inbox})
        raise OSError(errno.ECONNREFUSED, f"nobody listens on {where[0]}:{where[1]}")

    def n_release(self, msg: Message) -> None:
        args, _ = msg.args()
        owner = f"{msg.src}.{need(args, 'pid', int)}"   # only its own pMonitor may
        self._gone(owner)   # no more pushes; tick() closes what is left
        for skel in [s for s in self.skels.values() if s.owner == owner]:
            self._orphaned(skel)

    # ---- the ops' checks: whose inbox, whose skeleton ---------------------------------
    def check_inbox(self, msg: Message, args: dict[str, Any]) -> str:
        """The stub's process's inbox, where pushes go: its own, or EPERM."""
        inbox = need(args, "inbox", str)
        if msg.pid is not None and address_pid(inbox) != msg.pid:
            self.ep.counters.error("forged")
            raise OSError(errno.EPERM, f"{inbox} is not the inbox of {msg.src}")
        self.ep.add_peer(msg.src, inbox)
        return inbox

    def own(self, msg: Message, sk: int) -> Skeleton:
        skel = self.skels.get(sk)
        if skel is None:
            raise OSError(errno.EBADF, f"no socket {sk} on {self.id}")
        if skel.owner != msg.src:
            raise OSError(errno.EPERM, f"socket {sk} belongs to {skel.owner}, not {msg.src}")
        ctx = tracing.current.ctx
        if ctx is not None:   # traced: this message is the skeleton's context now
            skel.trace = ctx
            self.refresh(skel)   # (the data plane traces nothing: it is this file's now)
        return skel
