"""Who reads an emulated process's inbox, and its FIT shortcuts' channels.

`InboxReading` is the part of the runtime (runtime.py) that hands the
skeletons' pushes to the stubs waiting for them; its state is the runtime's.
Who reads the inbox (`wait`):
  inline (the start): a thread that waits on a socket reads it itself, if no
    other thread does (the leader); the others park in short slices. No
    thread hop: a cross-thread wake-up costs ~40 us a round trip here.
  polled (once a native program polls, selects or uses epoll on a rack
    socket: the interposer's waits, native/preload_wait.c): as inline, and
    the program's waits read it too (`poll_begin`, `poll_end`): a wait sends
    what the sockets hold back, hands out what waits, sleeps on the inbox
    beside the program's descriptors, and hands out what came. The stubs
    ring their descriptors.
  threaded (once a program asks for a socket's fileno(), to select on it):
    one inbox thread reads it, and rings the stubs' descriptors.
The channels of FIT shortcuts (fit_path.FitPath) are read likewise: inline
by a thread waiting on that socket, polled by a wait too, threaded by the
inbox thread, which watches every channel `watch()` gave it beside the
inbox: it spins on all of them for rack.poll_us, then arms each and sleeps
in poll() on their readiness fds (the transport contract,
fit_rpc/transport.py).
"""

import select
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from fit_rpc import Op
from native.fitring import spin_yield
from splitrack.guest import handles, preloaded
from splitrack.params import PEER_CHECK_S, STUB_FOLLOWER_SLICE_S, STUB_LEADER_SLICE_S

_STUB_DATA = int(Op.STUB_DATA)
_INBOX_BATCH = 64   # a drain (the inbox thread's, a polled wait's) serves at most this many


class InboxReading:
    """The runtime's inbox readers: wait() and pump() inline, the inbox thread
    threaded."""

    def _init_inbox_reading(self) -> None:
        self._inbox_lock = threading.Lock()   # held by whoever reads the inbox
        self._watched: set[Any] = set()       # FIT shortcut paths, for the inbox thread or
                                              # a polled wait
        self._rewatch = False                 # _watched changed since the inbox thread looked
        self._held: list[Any] = []            # polled: the channels a wait reads (`reading` held)
        self._armed: list[Any] = []           # polled: the sources a wait sleeps on
        self._next_tick = 0.0                 # polled: when a wait next looks at peers (_tick)
        self._polling = 0                     # polled: the thread whose wait holds them

    def wait(self, ready: Callable[[], bool], deadline: float | None,
             park: Callable[[float | None], object]) -> bool:
        """Until ready() (True) or the deadline (False). Inline, the waiter reads the
        inbox if nobody else does; otherwise park(timeout) waits for a wake-up."""
        if handles.DROPPED:
            handles.reap(self)
        self._left_a_wait()
        while not ready():
            now = time.monotonic()
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                return False
            if now >= self._next_check:
                self.check_components()
                continue
            if not self.threaded and self._inbox_lock.acquire(blocking=False):
                try:
                    if not ready():
                        self.inbox.serve(_slice(left, STUB_LEADER_SLICE_S))
                finally:
                    self._inbox_lock.release()
            else:
                park(left if self.threaded else _slice(left, STUB_FOLLOWER_SLICE_S))
        return True

    def next_data(self, stub: int, deadline: float | None) -> int:
        """A blocking recv's fast lane (nic_path.py: take_next): the inbox's next message
        handed out by this thread, waiting for it a slice at most -- taken here, with no
        handler, if it is stub `stub`'s STUB_DATA (Endpoint.serve_pushed): the bytes it
        announces; 0: another message was handed out; -1: none came, or not now (another
        thread reads the inbox, or the inbox thread does, or anything the general wait
        does first is due: a check of the components, a dropped handle, a polled wait
        left behind)."""
        now = time.monotonic()
        if (handles.DROPPED or self._polling or self.threaded or now >= self._next_check
                or not self._inbox_lock.acquire(False)):
            return -1
        try:
            most = STUB_LEADER_SLICE_S   # (_slice's, in line)
            if deadline is not None and deadline - now < most:
                most = deadline - now
                if most <= 0:
                    return -1
            return self.inbox.serve_pushed(_STUB_DATA, stub, most)
        finally:
            self._inbox_lock.release()

    def pump(self) -> None:
        """Hand out what waits in the inbox now, if no other thread reads it."""
        self._left_a_wait()
        if not self.threaded and self._inbox_lock.acquire(blocking=False):
            try:
                while self.inbox.serve(0):
                    pass
            finally:
                self._inbox_lock.release()

    def watch(self, path: Any) -> None:
        """The inbox thread (threaded) or a polled wait reads this FitPath's channel too
        (while no waiter on the socket does)."""
        self._watched.add(path)
        self._rewatch = True

    def unwatch(self, path: Any) -> None:
        self._watched.discard(path)
        self._rewatch = True

    # ---- polled: a native program's waits read them (native/preload_wait.c) -------------
    def poll_begin(self, arm: bool) -> tuple[list[int] | None, float]:
        """What the program's sockets hold back (message packing) is sent, and what
        waits in the inbox and the watched channels is handed out. With `arm`,
        this thread then holds them, armed, until poll_end(): their descriptors are
        returned, for its wait to sleep on beside the program's, at most the seconds
        returned (peers are looked at between). None: another thread reads them (a
        waiter, or the inbox thread; or the runtime closed), so sleep a slice at most."""
        if self._holders:   # (the wait may be for the answer to them: flusher.py)
            self.announce_holders()
        self._left_a_wait()
        if self.threaded or self._stop or not self._inbox_lock.acquire(blocking=False):
            return None, STUB_FOLLOWER_SLICE_S
        kept = False   # (what is held is let go again unless the wait is to sleep on it)
        self._polling = threading.get_ident()
        try:
            self._held = [path for path in self._watched
                          if not path.released and path.reading.acquire(blocking=False)]
            now = time.monotonic()
            if now >= self._next_tick:
                self._next_tick = now + PEER_CHECK_S
                self._tick()
            fds: list[int] = []
            if not arm or self._drain(self._held):   # something came: a socket may be
                kept = arm                           # ready now: look, do not sleep
                return fds, 0.0
            sources = [self.inbox, *(path.channel for path in self._held)]
            for source in sources:
                if not source.arm():   # something came meanwhile: no sleep
                    kept = True
                    return fds, 0.0
                self._armed.append(source)
            fds = [source.fileno() for source in sources]
            kept = True
            return fds, max(0.0, self._next_tick - now)
        finally:
            if not kept:
                self._let_go()

    def wait_sources(self) -> int:
        """How many descriptors poll_begin may return, at most."""
        return 1 + len(self._watched)

    def poll_end(self) -> bool:
        """The wait is over: disarm, hand out what came, let go. Anything?"""
        try:
            self._disarm()
            return self._drain(self._held)
        finally:
            self._let_go()

    def _disarm(self) -> None:
        armed, self._armed = self._armed, []
        for source in armed:
            source.disarm()

    def _let_go(self) -> None:
        try:
            self._disarm()
        finally:
            held, self._held = self._held, []
            for path in held:
                path.let_go()
            self._polling = 0
            self._inbox_lock.release()

    def _left_a_wait(self) -> None:
        """A polled wait this thread began and never ended -- a signal handler
        siglongjmp()ed out of it (native/preload_wait.c) -- still holds the inbox and
        the channels: let them go, so that this and every later wait reads them."""
        if self._polling and self._polling == threading.get_ident():
            self._let_go()

    # ---- threaded: the inbox thread ---------------------------------------------------------
    def _serve(self) -> None:
        """The inbox thread: the inbox, and the watched channels."""
        preloaded.signals_to_the_program()
        with self._inbox_lock:   # a leader finishes its slice first
            paths: dict[int, Any] = {}   # a channel's readiness fd -> its path (`reading` held)
            poller = select.poll()
            poller.register(self.inbox.fileno(), select.POLLIN)
            clock = time.monotonic
            next_tick = clock() + PEER_CHECK_S
            idle_since: float | None = None
            while True:
                busy = self._sync(poller, paths) if self._rewatch else False
                wait = STUB_FOLLOWER_SLICE_S if busy else max(0.0, next_tick - clock())
                if not paths:   # the inbox alone: its own wait spins, then sleeps
                    self.inbox.serve(wait)
                elif self._drain(paths.values()):
                    idle_since = None
                else:
                    now = clock()
                    idle_since = idle_since or now
                    if now - idle_since >= self.spin_s or not spin_yield(now - idle_since):
                        self._sleep(poller, paths, wait)
                        idle_since = None
                if clock() >= next_tick:
                    if self._tick():
                        return
                    next_tick = clock() + PEER_CHECK_S

    def _drain(self, paths: Iterable[Any]) -> bool:
        """What waits in the inbox (a batch) and in these channels; any?"""
        served = 0
        while served < _INBOX_BATCH and self.inbox.serve(0):
            served += 1
        return any([path.drain() for path in paths]) or served > 0

    def _sleep(self, poller: select.poll, paths: dict[int, Any], wait: float) -> None:
        """Arm the inbox and every channel, sleep until one is rung, disarm them all."""
        sources = [self.inbox, *(path.channel for path in paths.values())]
        armed = []
        for source in sources:
            if not source.arm():
                break
            armed.append(source)
        else:
            poller.poll(wait * 1000)
        for source in armed:
            source.disarm()

    def _sync(self, poller: select.poll, paths: dict[int, Any]) -> bool:
        """The poller watches what watch() asked for; True if a waiting thread still
        reads a channel (try again soon)."""
        self._rewatch = False
        wanted = set(self._watched)
        for fd, path in list(paths.items()):
            if path not in wanted:
                poller.unregister(fd)
                del paths[fd]
                path.let_go()
        busy = False
        for path in wanted.difference(paths.values()):
            if path.released:
                continue
            if path.reading.acquire(blocking=False):
                fd = path.channel.fileno()
                poller.register(fd, select.POLLIN)
                paths[fd] = path
            else:
                busy = True
        self._rewatch = self._rewatch or busy
        return busy


def _slice(left: float | None, most: float) -> float:
    return most if left is None else min(left, most)
