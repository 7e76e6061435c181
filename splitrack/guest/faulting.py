"""The VM's miss path: a line faulted into the extCache, from zeros or from its home.

`Faulting` is the part of VirtualMemory (vm.py) that brings a line in when
the C copy of an access stops at one that is not cached; its state is the
VirtualMemory's (regions, the pages ever installed, the extCache, the
endpoint), and it runs with `vm.lock` held:

    _fault(addr, want)      the line holding addr (EFAULT if no region has it),
                            with the next lines of the `want` bytes if they were
                            written back before and are not cached: one M_FETCH
    _miss(home, vpage)      a page never written: zeros, here (no M_MISS);
                            else one M_MISS to its home, in one native call
                            (line_miss.py) or, in a rack-memory heap, `fill` (C)
    _fetch(home, vpage, n)  n lines in one M_FETCH, installed one by one
    _install(home, vpage, line)   a line put in its set, the set's dirty victim
                            written back first (M_WRITEBACK)

A set stays locked from miss_begin to miss_end (extcache.h); whatever raises
in between aborts the transaction (miss_abort), so no set is left locked.
"""

import bisect
import errno
from typing import Any

from fit_rpc import Op
from fit_rpc.pages import FETCH, pack_writeback
from splitrack.guest.line_miss import DONE


class Faulting:
    """VirtualMemory's miss path."""

    __slots__ = ()   # (its state is the VirtualMemory's)

    def _fault(self, addr: int, want: int = 1) -> None:
        """Bring the line holding `addr` into the extCache (EFAULT if unmapped); with
        it, as one M_FETCH, the next lines of the `want` bytes from `addr` if they
        were written back before (a sequential read does not miss line by line)."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0 or self._regions[self._starts[i]][0] <= addr:
            raise OSError(errno.EFAULT, f"address {addr:#x} is outside this process's regions")
        end, home = self._regions[self._starts[i]]
        vpage = addr // self.line
        last = min(-(-(addr + want) // self.line), end // self.line, vpage + self._ahead)
        n = 1 if vpage in self._touched else 0
        probe, xc = self._probe, self.xc
        while vpage + n < last and vpage + n in self._touched and \
                not xc.read_into(-1, self.pid, (vpage + n) * self.line, probe) and \
                not xc.victim_holds(self.pid, vpage + n):
            n += 1   # written back before, and not cached: fetched with the first
        if n > 1 and not xc.victim_holds(self.pid, vpage):
            self._fetch(home, vpage, n)
        else:
            self._miss(home, vpage)

    def _miss(self, home: int, vpage: int) -> None:
        if vpage not in self._touched:   # never written anywhere: zeros, here
            self._install(home, vpage, None)
            self._touched.add(vpage)
            return
        if self.fill is not None:
            self.fill(vpage, home, None, True)
            return
        miss, peer = self._line_miss, self.m_ids[home]
        miss.begin(vpage, home)   # the set locked, the M_MISS made (a dirty victim of the
        try:                      # same home piggybacked: LegoOS), the line installed, in C
            got = self.ep.call_native(peer, Op.M_MISS, miss, serve=False)
            if miss.rc == DONE:   # (the common case, told at once)
                return
            if miss.rc is None:   # no native link to the home (yet): begun here, sent below
                miss.prepare()
            if not miss.locked():
                miss.check()
                return            # installed; or cached after all
            if got is False:      # nothing sent: a dirty victim bound elsewhere goes first
                victim = miss.victim()
                if victim is not None:
                    self._writeback(victim[1], victim[0], [victim[2]], [miss.victim_line()])
                got = self.ep.call(peer, Op.M_MISS, miss.request(), serve=False)
            self.xc.miss_end(self.slot, self.pid, vpage, home, got)
        except BaseException:
            if miss.locked():
                self.xc.miss_abort(self.pid, vpage)
            raise

    def _fetch(self, home: int, vpage: int, n: int) -> None:
        """n lines from vpage, written back before and not cached, fetched in one
        message and then installed one by one (n is at most a quarter of the
        extCache's lines, `_ahead`). No set is locked during the fetch: only this
        process installs its lines, and it holds vm.lock, so they stay uncached
        and what the home holds for them cannot change meanwhile (no eviction can
        write one back). Nor is one in the victim cache (_fault asked): its home's
        copy may be older, or a flush of it on its way; and a line can only go
        there from a way. An install finds it there anyway (miss_begin: None)."""
        lines = self.ep.call(self.m_ids[home], Op.M_FETCH, FETCH.pack(self.pid, vpage, n))
        for j in range(n - 1, -1, -1):   # the line wanted now last: no install evicts it
            self._install(home, vpage + j, lines[j * self.line:(j + 1) * self.line])

    def _install(self, home: int, vpage: int, line: Any) -> None:
        """Put `line` (None: zeros) into the extCache as vpage's, its set's victim
        written back first; nothing if vpage is cached after all."""
        if self.fill is not None:
            self.fill(vpage, home, line, False)
            return
        victim = self.xc.miss_begin(self.slot, self.pid, vpage)
        if victim is None:
            return
        vpid, vhome, vvpage = victim
        try:
            if vpid:
                self._writeback(vhome, vpid, [vvpage], [self.xc.victim_buf])
            self.xc.miss_end(self.slot, self.pid, vpage, home, line)
        except BaseException:
            self.xc.miss_abort(self.pid, vpage)
            raise

    def _writeback(self, home: int, pid: int, vpages: list[int], lines: list[Any]) -> None:
        self.ep.call(self.m_ids[home], Op.M_WRITEBACK, pack_writeback(pid, vpages, lines))
