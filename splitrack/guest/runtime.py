"""The network runtime of an emulated process: what its bsdSocketStubs share.

One per process (`runtime()`), made on first use from the environment the
pMonitor gives a launched program (SPLITRACK_PCOMPONENT, SPLITRACK_GLOBAL,
SPLITRACK_RUN_DIR, SPLITRACK_MODE, SPLITRACK_LOOPBACK, SPLITRACK_SHORTCUTS,
SPLITRACK_PACKING):

- `vm`: the process's VirtualMemory (splitrack.guest.vm), whose FIT endpoint
  ("pN.PID") carries every call a stub makes; `vm.lock` serialises them, so
  stubs may be used from several threads.
- an inbox (shm://RUN_DIR/pN.PID.fit, on the rack's transport) for the pushes
  of skeletons (STUB_*, 0x07xx), each handed to the stub it names. Stubs are
  named by an id the runtime gives them before their skeleton exists, so a
  push can never arrive for a stub not yet known. Who reads it, and the FIT
  shortcuts' channels: inbox_reader.py (inline; polled, by a native
  program's own poll, select and epoll waits, once it makes one on a rack
  socket; or one inbox thread once the program selects on a socket's
  fileno()). `exact`: the stubs' descriptors' readiness is kept exact (polled
  or threaded).
- buffers: each stub's receive and send rings live in rack memory, in regions
  (vm.alloc) of SOCKET_SLOTS_PER_REGION slots that the runtime allocates and
  reuses.
- the flusher (message packing): flusher.py.
- routing: `nic()` (GNM_ALLOCATE, once: the NIC of this process's unbound
  sockets) and `owner(ip)` (GNM_OWNER, cached: the nComponent of a NIC).
At exit every open stub closes, so data sent just before exit still leaves.
"""

import atexit
import errno
import itertools
import os
import random
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from fit_rpc import GLOBAL_ID, Endpoint, Message, Op, codec
from fit_rpc.channel import Channel
from fit_rpc.identity import address_pid, kind_of
from fit_rpc.netpath import SK
from fit_rpc.params import FIT_POLL_US
from splitrack.guest import forked, handles, preloaded, shortcuts
from splitrack.guest.flusher import Flusher
from splitrack.guest.inbox_reader import InboxReading
from splitrack.guest.vm import VirtualMemory, own
from splitrack.params import (
    PEER_CHECK_S,
    SOCKET_BUFFER_BYTES,
    SOCKET_SEND_BUFFER_BYTES,
    SOCKET_SLOTS_PER_REGION,
)

_STUB_ID = SK   # every push starts with the stub's id
_PUSHES = (Op.STUB_DATA, Op.STUB_DATA_DMA, Op.STUB_ACCEPT, Op.STUB_SENT, Op.STUB_CLOSED,
           Op.STUB_CONNECTED, Op.STUB_SC_CONNECT, Op.STUB_DGRAM_ERROR)
_SLOT_BYTES = SOCKET_BUFFER_BYTES + SOCKET_SEND_BUFFER_BYTES   # one socket's two rings


class Runtime(InboxReading, Flusher):
    def __init__(self, vm: VirtualMemory, run_dir: str, mode: str, loopback: str,
                 shortcuts: bool = True, packing: bool = True, poll_us: int = FIT_POLL_US):
        self.vm = vm
        self.lock = vm.lock
        self.id = vm.ep.id
        self.pcomponent = vm.pcomponent
        self.run_dir = run_dir
        self.mode = mode
        self.shortcuts = shortcuts        # pipe/FIT shortcuts to listeners of the rack
        self.loopback = loopback          # the rack's 127.0.0.1, an alias an nComponent serves
        self.packing = packing            # message packing of small sends (nic_path.py)
        self._init_flusher()
        self.stubs: dict[int, Any] = {}   # stub id -> stub
        self._ids = itertools.count(1)
        self._owners: dict[str, str] = {}
        self._rack_ips: dict[str, bool] = {loopback: True}
        self._ports = random.Random(os.getpid())
        self._nic: tuple[str, str] | None = None
        self._pidfds: dict[str, int] = {}   # nComponent -> a pidfd of its process (readable: dead)
        self._next_check = 0.0              # when waiters next look at them (check_components)
        self._checking = threading.Lock()   # one thread looks at a time
        self._slots: list[int] = []       # free buffer slots (address of the receive ring)
        self._homes: dict[int, str] = {}  # slot -> the mComponent that holds it
        scheme = vm.ep.address_of_global().split("://", 1)[0]
        bind = f"shm://{run_dir}/{self.id}.fit" if scheme == "shm" else \
            f"ipc://{run_dir}/{self.id}.sock"
        self.inbox = Endpoint(self.id, bind, poll_us=poll_us)
        self.inbox.vouch = self._vouch
        self.spin_s = poll_us / 1e6
        for op in _PUSHES:
            self.inbox.on(op, self._push)
        self._stop = False
        self.threaded = False   # an inbox thread reads the inbox
        self.exact = False      # fileno()s' readiness is exact (threaded, or polled)
        self.forked = False   # this is a fork()ed child's copy (_after_fork_in_child)
        self._init_inbox_reading()
        atexit.register(self.close)

    # ---- calls (any thread) ---------------------------------------------------------------
    def call(self, peer: str, op: int, args: dict[str, Any], timeout: float | None = None
             ) -> dict[str, Any]:
        if handles.DROPPED:   # handles the collector took: counted here, not in __del__
            handles.reap(self)
        with self.lock:
            return self.vm.ep.call_args(peer, op, args, timeout=timeout)[0]

    def call_raw(self, peer: str, op: int, payload: bytes,
                 meanwhile: Callable[[], None] | None = None) -> memoryview:
        """meanwhile(): run once the request is out, while the peer works (Endpoint.call)."""
        if handles.DROPPED:
            handles.reap(self)
        with self.lock:
            return self.vm.ep.call(peer, op, payload, meanwhile=meanwhile)

    def call_overlapped(self, peer: str, op: int, payload: bytes,
                        meanwhile: Callable[[], None]) -> memoryview:
        """call_raw, with meanwhile() run while the peer works, once the request is out --
        when no other thread can hand a push to a stub meanwhile (none reads the
        inbox: this one holds it for the call). Else meanwhile() runs before. A
        call that fails before its request is out may not have run it."""
        if not self._inbox_lock.acquire(blocking=False):
            meanwhile()
            return self.call_raw(peer, op, payload)
        try:
            return self.call_raw(peer, op, payload, meanwhile)
        finally:
            self._inbox_lock.release()

    def send(self, peer: str, op: int, payload: bytes, timeout: float | None = None) -> None:
        with self.lock:
            self.vm.ep.send(peer, op, payload, timeout)

    # ---- stubs --------------------------------------------------------------------------------
    def register(self, stub: Any) -> int:
        if self.forked:
            raise OSError(errno.EOPNOTSUPP, FORKED)
        sid = next(self._ids)
        self.stubs[sid] = stub
        return sid

    def unregister(self, sid: int) -> None:
        self.stubs.pop(sid, None)

    def buffers(self, mode: str) -> dict[str, Any]:
        """A free slot: the receive ring (SOCKET_BUFFER_BYTES), then the send ring
        (SOCKET_SEND_BUFFER_BYTES)."""
        with self.lock:
            if not self._slots:
                size = _SLOT_BYTES
                start = self.vm.alloc(size * SOCKET_SLOTS_PER_REGION)
                self._slots.extend(start + i * size for i in range(SOCKET_SLOTS_PER_REGION))
                for i in range(SOCKET_SLOTS_PER_REGION):
                    self._homes[start + i * size] = self.vm.home_of(start)
                    # the skeleton writes a receive ring's lines itself (dDDIO): one that
                    # leaves the extCache is fetched back from home, not zero-filled
                    self.vm.written_elsewhere(start + i * size, SOCKET_BUFFER_BYTES, cached=True)
            rbuf = self._slots.pop()
        return {"mode": mode, "home": self._homes[rbuf], "window": SOCKET_BUFFER_BYTES,
                "rbuf": [rbuf, SOCKET_BUFFER_BYTES],
                "tbuf": [rbuf + SOCKET_BUFFER_BYTES, SOCKET_SEND_BUFFER_BYTES]}

    def free_buffers(self, buffers: dict[str, Any]) -> None:
        rbuf = buffers["rbuf"][0]
        with self.lock:
            # Nothing stale for the next stub to receive: a dirty line left in the
            # receive ring could be written back over what a dDMA put there. The send
            # ring stays cached: every byte of it is written before it is sent.
            self.vm.invalidate(rbuf, SOCKET_BUFFER_BYTES)
            self._slots.append(rbuf)

    # ---- routing --------------------------------------------------------------------------------
    def nic(self) -> tuple[str, str]:
        """(ip, nComponent) of the NIC GNM allocated to this process."""
        if self._nic is None:
            reply = self.call(GLOBAL_ID, Op.GNM_ALLOCATE, {"process": self.id})
            self._nic = (reply["ip"], reply["id"])
            self._owners[reply["ip"]] = reply["id"]
        return self._nic

    def owner(self, ip: str) -> str:
        """The nComponent that owns NIC `ip`; EADDRNOTAVAIL if no rack NIC."""
        if ip == self.loopback:
            return self.nic()[1]
        n = self._owners.get(ip)
        if n is None:
            n = self._owners[ip] = self.call(GLOBAL_ID, Op.GNM_OWNER, {"ip": ip})["id"]
        return n

    def is_rack_ip(self, ip: str) -> bool:
        """Is `ip` a NIC of the rack, or its loopback (GNM_IS_RACK_IP, cached)?"""
        rack = self._rack_ips.get(ip)
        if rack is None:
            rack = self._rack_ips[ip] = bool(
                self.call(GLOBAL_ID, Op.GNM_IS_RACK_IP, {"ip": ip})["rack"])
        return rack

    def channel(self, peer: str, linger_s: float) -> Channel:
        """A FIT channel to an object of process `peer` (a FIT shortcut's stub). It
        receives beside the inbox and sends as the calls do: on two I/O threads, as
        those have (with one for both, round trips here were slower and less steady)."""
        return self.inbox.channel(peer, linger_s, self.vm.ep)

    def add_peer(self, process: str, inbox: str) -> None:
        with self.lock:
            self.vm.ep.add_peer(process, inbox)

    def ephemeral_port(self) -> int:
        """A port for a shortcut connection's local address (Linux's ephemeral range)."""
        return self._ports.randrange(32768, 61000)

    # ---- who reads the inbox ----------------------------------------------------------------
    def go_threaded(self) -> None:
        """From now on one thread reads the inbox (a program selects on fileno())."""
        with _runtime_lock:
            if self.threaded:
                return
            self.threaded = True
            went_exact, self.exact = not self.exact, True
            threading.Thread(target=self._serve, name="splitrack-stub-inbox", daemon=True).start()
        self._sync_stubs(went_exact)

    def go_polled(self) -> None:
        """From now on a native program's waits read the inbox too (poll_begin): it
        polls, selects or uses epoll on a rack socket."""
        with _runtime_lock:
            if self.exact:
                return
            self.exact = True
        self._sync_stubs(True)

    def _sync_stubs(self, went_exact: bool) -> None:
        for stub in list(self.stubs.values()):   # fileno() rings from now on (went_exact);
            stub._face.sync_bell(went_exact)     # sends are held back or not (threaded)

    def _vouch(self, peer: str, pid: int | None) -> bool:
        """Who may push to this process's stubs: an nComponent (global says which pid
        it is), or another process of the rack (a shortcut; its pid was checked at
        the rendezvous)."""
        if pid is None or kind_of(peer) in ("process", "client"):
            return True
        if kind_of(peer) != "n":
            return False
        try:
            with self.lock:
                return address_pid(self.vm.ep.resolve(peer)) == pid
        except OSError:
            return False

    def _push(self, msg: Message) -> None:
        stub = self.stubs.get(_STUB_ID.unpack_from(msg.payload)[0])
        if stub is not None:
            stub._face.pushed(msg.op, msg.payload)
        elif msg.op == Op.STUB_SC_CONNECT:   # a listener closed meanwhile: say so
            shortcuts.refuse(self, codec.decode(msg.payload[4:])[0])
        # any other push for a stub closed meanwhile is dropped

    def check_components(self) -> None:
        """The sockets of an nComponent that died fail at once, as those of a NIC that
        went down: ECONNRESET if connected (the connection's state died with it), else
        ENETDOWN; new sockets ask GNM again. Waiters call this every PEER_CHECK_S."""
        self._next_check = time.monotonic() + PEER_CHECK_S
        if not self._checking.acquire(blocking=False):
            return   # another thread is at it
        try:
            for n in {s._face.ncomponent for s in list(self.stubs.values()) if s._face.ncomponent}:
                if self._alive(n):
                    continue
                for stub in list(self.stubs.values()):
                    if stub._face.ncomponent == n:
                        stub._face.component_gone()
                self._owners = {ip: o for ip, o in self._owners.items() if o != n}
                if self._nic is not None and self._nic[1] == n:
                    self._nic = None
                fd = self._pidfds.pop(n, None)
                if fd is not None:
                    os.close(fd)
        finally:
            self._checking.release()

    def _alive(self, n: str) -> bool:
        fd = self._pidfds.get(n)
        if fd is None:
            try:
                with self.lock:   # known: the stub talked to it
                    pid = address_pid(self.vm.ep.resolve(n))
            except OSError:
                return True   # global cannot say now: assume the best
            if pid is None:
                return True   # zmq: addresses name no process (its timeouts tell)
            try:
                fd = self._pidfds[n] = preloaded.rack_fd(os.pidfd_open(pid))
            except ProcessLookupError:
                return False
        poller = select.poll()   # (select() cannot take a descriptor past 1023)
        poller.register(fd, select.POLLIN)
        return not poller.poll(0)

    def _tick(self) -> bool:
        """The inbox thread's: FIT-shortcut peers and nComponents that died are seen
        without a waiter."""
        self.check_components()
        for stub in list(self.stubs.values()):
            check = getattr(stub._face.path, "check_peer", None)
            if check is not None:
                check()
        return self._stop

    def close(self) -> None:
        """At exit: every open stub closes, even one a makefile() still holds; then
        the inbox (its rendezvous socket goes from the run directory). In a fork()ed
        child, nothing: the sockets, the inbox and its links are the parent's."""
        if self.forked:
            return
        for stub in list(self.stubs.values()):
            try:
                stub._face.close_connection()   # (whatever handles of it are open)
            except OSError:
                pass
        self._stop = True
        if self._inbox_lock.acquire(timeout=1.0):   # nobody reads it any more
            self.inbox.close()


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()
_parent_mode = ""   # a fork()ed child's parent's runtime was "threaded", or "polled"
FORKED = "splitrack: a descriptor a fork()ed child inherited is its parent's socket"


def _after_fork_in_child() -> None:
    """A fork()ed child: the runtime (its inbox, links, stubs) is its parent's. So that
    nothing the child does, nor its exit, reaches its parent's skeletons or rings, the
    stubs' state here is closed (its locks new: another thread of the parent may have
    held one at the fork) and the child's handles make their calls at the parent
    (forked.py). The sockets the child makes are its own: runtime() makes it a runtime
    of its own (its own inbox, links and socket buffers: vm.own), threaded or polled
    if its parent's was (a native program's poll() told the parent's, and tells
    none again).
    A child that exec()s starts afresh."""
    global _runtime, _runtime_lock, _parent_mode
    _runtime_lock = threading.Lock()   # (a parent's thread may have held it at the fork)
    if _runtime is None:
        return
    _runtime.forked = True
    for stub in list(_runtime.stubs.values()):   # (each shared state: every handle of it)
        stub._face.after_fork()
    forked.after_fork_in_child()
    _parent_mode = "threaded" if _runtime.threaded else "polled" if _runtime.exact else ""
    _runtime = None


os.register_at_fork(before=lambda: forked.before_fork(_runtime),
                    after_in_parent=lambda: forked.after_fork_in_parent(_runtime),
                    after_in_child=_after_fork_in_child)


def runtime() -> Runtime:
    """This process's runtime (RuntimeError outside `splitrack run`)."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            return _runtime
        env = os.environ
        if "SPLITRACK_RUN_DIR" not in env:
            raise RuntimeError("rack sockets need the rack runtime: start this program "
                               "with `splitrack run -- ...`")
        rt = _runtime = Runtime(own(), env["SPLITRACK_RUN_DIR"],
                                env.get("SPLITRACK_MODE", "ddio"),
                                env.get("SPLITRACK_LOOPBACK", "127.0.0.10"),
                                env.get("SPLITRACK_SHORTCUTS", "1") != "0",
                                env.get("SPLITRACK_PACKING", "1") != "0",
                                int(env.get("SPLITRACK_POLL_US", FIT_POLL_US)))
    if _parent_mode == "threaded":
        rt.go_threaded()
    elif _parent_mode == "polled":
        rt.go_polled()
    return rt


def current() -> Runtime | None:
    """This process's runtime, if it has made one."""
    return _runtime


__all__ = ["Runtime", "current", "runtime"]

