"""The intra-rack shortcuts (the paper's Section III): rack TCP that skips the nComponent.

When a stub connects to an address of the rack (a NIC, or the rack loopback),
it asks the nComponent that owns the address who listens there (N_LOOKUP). If
a stub of the rack does, the two talk directly:
- same pComponent: a **pipe** between the two processes, made through a
  rendezvous path in the run directory and unlinked at once (pipe_path.py);
- different pComponents: a **FIT** channel of the two stubs' own
  (fit_path.py).
`Shortcuts` is the part of BsdSocketStub (stub.py) that makes them; its state
is the stub's. The connector sends STUB_SC_CONNECT to the listener's process;
the listener's stub makes the accepted stub at once (its accept queue holds
it, as a kernel's backlog holds a handshaken connection) and answers
STUB_CONNECTED. No answer before the connector's deadline (the listener's
process is not reading its inbox), nobody listening, or `shortcuts = false`
(`splitrack run --no-shortcuts`): the ordinary path, which gives ECONNREFUSED
as Linux would. The listener takes a request only in the first half of the
connector's wait, and its answer names the request (`until`), so an answer
that still comes late is dropped, never taken for the ordinary connect's.
Neither program can tell, but by speed: addresses are those a real connection
would show (the connector's port is an ephemeral one of its own).
"""

import _socket
import errno
import os
import socket
import time
from typing import Any

from fit_rpc import Op, codec
from fit_rpc.netpath import SK
from splitrack.guest.fit_path import PEER_CLOSED, FitPath
from splitrack.guest.pipe_path import PipePath
from splitrack.params import SHORTCUT_CONNECT_WAIT_S

_std = _socket.socket  # the kernel's socket type (C), whatever socket.socket is made later

__all__ = ["PEER_CLOSED", "Shortcuts", "refuse"]


class Shortcuts:
    """BsdSocketStub's shortcut connect (the connector's side) and accept (the
    listener's)."""

    __slots__ = ()   # (its state is the stub's)

    def _shortcut_connect(self, ip: str, port: int) -> bool:
        """Connect to ip:port by a shortcut; False if the ordinary path must do it."""
        rt = self._rt
        if not rt.shortcuts or self._n is not None or not rt.is_rack_ip(ip):
            return False
        try:
            listener = rt.call(rt.owner(ip), Op.N_LOOKUP, {"ip": ip, "port": port})
        except OSError:
            return False   # nobody listens: the kernel will say so on the ordinary path
        same = listener["process"].split(".")[0] == rt.pcomponent
        src = rt.loopback if ip == rt.loopback else rt.nic()[0]
        local = (src, rt.ephemeral_port())
        wait = SHORTCUT_CONNECT_WAIT_S if not self._timeout else \
            min(self._timeout, SHORTCUT_CONNECT_WAIT_S)   # (non-blocking: the listener's answer
        #                                                   is waited for, then EINPROGRESS)
        # The listener drops a request older than `until`, and the connector waits twice
        # as long: an answer to a request the listener took has time to come, so no
        # listener keeps a connection its connector gave up on (its program would accept
        # one whose peer is already gone).
        args = {"kind": "pipe" if same else "fit", "peer": list(local), "local": [ip, port],
                "process": rt.id, "stub": self._id, "inbox": rt.inbox.address,
                "until": time.time() + wait / 2}
        rendezvous = _rendezvous(rt, self._id) if same else None
        if rendezvous:
            args["path"] = rendezvous.getsockname()
        else:   # the listener's first bytes may come before the answer is read
            try:
                self._path = FitPath(self, listener["process"])
            except OSError:
                return False   # no channel (no room for one): the ordinary path
            args["channel"] = self._path.channel.address
        rt.add_peer(listener["process"], listener["inbox"])
        self._connected = None
        self._attempt = args["until"]   # the answer names it; a late one is dropped
        try:
            rt.send(listener["process"], Op.STUB_SC_CONNECT,
                    SK.pack(listener["stub"]) + codec.encode(args))
            rt.wait(lambda: self._connected is not None, time.monotonic() + wait,
                    self._park_connect)
            answer = self._connected or {"errno": errno.ETIMEDOUT}
            if "errno" in answer:
                with self._lock:
                    if self._path is not None:
                        self._path.release()
                    self._path = None
                return False   # the listener went away or did not answer: the ordinary path
            if rendezvous:
                rendezvous.settimeout(wait)
                fd, _ = rendezvous._accept()   # queued before the listener answered
                self._path = PipePath(self, fd)
            else:
                self._path.connected(answer["sk"], answer["channel"])
        finally:
            self._attempt = None
            if rendezvous:
                os.unlink(rendezvous.getsockname())
                rendezvous.close()
        self._local = self._to_program(local)
        self._peer = self._to_program((ip, port))
        return True

    def _shortcut_accept(self, args: dict[str, Any]) -> None:
        """STUB_SC_CONNECT for this listening stub (its lock held): make the accepted
        stub, queue it, answer the connector."""
        rt = self._rt
        if time.time() > args["until"]:
            return   # the connector gave up and took the ordinary path: no ghost connection
        rt.add_peer(args["process"], args["inbox"])
        answer: dict[str, Any]
        conn = None
        try:
            if not self._listening or self._dead or self._shut_rd:
                raise OSError(errno.ECONNREFUSED, "not listening")
            conn = self._accepted()
            if args["kind"] == "pipe":
                sock = _std(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                try:
                    sock.connect(args["path"])
                except OSError:
                    sock.close()
                    raise
                conn._path = PipePath(conn, sock.detach())
            else:
                conn._path = FitPath(conn, args["process"], args["stub"], args["channel"])
            conn._local = conn._to_program(args["local"])
            conn._peer = conn._to_program(args["peer"])
            conn._mode = args["kind"]
            self._enqueue_accept({"stub": conn})
            answer = {"sk": conn._id, "local": args["local"]}
            if args["kind"] == "fit":
                answer["channel"] = conn._path.channel.address
        except OSError as exc:
            if conn is not None:
                conn.close()
            answer = {"errno": exc.errno or errno.ECONNREFUSED}
        refuse(rt, args, answer)


def refuse(rt: Any, request: dict[str, Any], answer: dict[str, Any] | None = None) -> None:
    """Answer a connector's STUB_SC_CONNECT `request` (ECONNREFUSED unless `answer`
    says otherwise), naming its attempt (`until`): an answer that comes after the
    connector gave up is not taken for the answer to its next connect."""
    answer = {**(answer or {"errno": errno.ECONNREFUSED}), "until": request.get("until")}
    try:
        rt.send(request["process"], Op.STUB_CONNECTED,
                SK.pack(request["stub"]) + codec.encode(answer), timeout=0.5)
    except OSError:
        pass   # the connector is gone


def _rendezvous(rt: Any, sid: int) -> socket.socket:
    """A listening Unix socket the listener's process connects to, once."""
    path = os.path.join(rt.run_dir, f"{rt.id}.{sid}.pipe")
    if os.path.exists(path):
        os.unlink(path)
    sock = _std(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(path)
        sock.listen(1)
    except OSError:
        sock.close()
        raise
    return sock
