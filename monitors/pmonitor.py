"""The pMonitor: the processor component pN.

It owns the pComponent's extCache, a shared-memory segment (native/extcache.c)
that every emulated process of pN maps, and it runs those processes. The
segment is a FIT region (fit_rpc/regions.py) named "extcache", granted to the
processes pN tracks and to the nComponents (dDDIO reads and writes its lines):

- launch: `splitrack run` hands it argv, environment, working directory and
  its stdin/stdout/stderr over a Unix socket (RUN_DIR/pN.spawn; file
  descriptors cannot cross ZeroMQ). The pMonitor starts the program as its own
  child with the rack runtime's environment (SPLITRACK_PCOMPONENT,
  SPLITRACK_GLOBAL, SPLITRACK_RUN_DIR, SPLITRACK_MODE, SPLITRACK_POLL_US, SPLITRACK_LOOPBACK,
  SPLITRACK_SHORTCUTS, SPLITRACK_PACKING, the drop-in socket module on
  PYTHONPATH, and the native interposer preloaded: splitrack/native_run.py,
  which also refuses a statically linked program), answers its PID, and, when it
  ends, its exit status (monitors/launching.py: the launch socket, a mixin of
  the PMonitor). One thread per launched program does only that. A
  program dies with its pMonitor (PR_SET_PDEATHSIG, SIGKILL): a pComponent that
  fails takes its processes with it, as a board does. With `cpus` in its spec
  entry, the pMonitor pins its programs to those host CPUs (sched_setaffinity).
- slices (monitors/slices.py): a pComponent granted to a slice launches only
  a request that names that slice ("slice": NAME, as the rack manager's job
  submit does), and a request naming a slice only on a pComponent of it; the
  refusal says why. There only its own programs' descendants may attach.
- track: a process announces itself with P_ATTACH when it first uses rack
  memory (a launched one, or any local process that attaches explicitly; not
  one that descends from another pComponent's pMonitor; the pMonitor is a
  child subreaper, so a program's orphaned children stay its descendants, and
  it reaps them). P_VOUCH tells other components whether a pid is one of pN's
  processes (identities). Every
  MONITOR_IDLE_CHECK_S the pMonitor looks for tracked processes that ended
  (exit or crash) and releases all they held: first their sockets at every
  nComponent (N_RELEASE, a call: the skeletons take what the process sent
  out of its memory), then their extCache lines (dropped, not written back),
  their counter slot, and their pages at every mComponent (M_RELEASE); and
  the process's rendezvous socket, if it left one. A process that exec()ed
  is released the same way (but its slot) when the new image first attaches:
  P_ATTACH's `image` token is not the one its pid last attached with. Each
  attach gets a 1 TiB of addresses of its own (`space`).
- the victim cache's flusher (spec `victim` > 0; LegoOS: a thread): every
  VICTIM_FLUSH_S the serve loop takes the extCache's DIRTY victim entries and
  writes them to their homes, M_WRITEBACK on behalf of each entry's process
  (an mComponent takes a pComponent's victims from its pMonitor, vouched for
  as pN), then marks them CLEAN; an entry whose process or region is gone
  is dropped.
Ops: P_ATTACH, P_PROCESSES, P_VOUCH (docs/protocol.md, 0x03xx). Counters: STATS
carries the extCache's hits, misses, evictions, write-backs, zero-fills and
victim-cache hits, stores and flushes, per process and in total.
"""

import ctypes
import errno
import json
import os
import subprocess
import threading
import time
from typing import Any

import psutil

from fit_rpc import Message, Op, codec
from fit_rpc.codec import need
from fit_rpc.identity import address_pid, kind_of, process_of
from fit_rpc.pages import pack_writeback
from fit_rpc.params import FIT_CALL_TIMEOUT_S
from monitors.core import Monitor
from monitors.launching import Launching
from native.extcache import FLUSH_FAILED, FLUSH_GONE, FLUSH_WRITTEN, ExtCache
from native.extcache import lib as xc_lib
from splitrack.params import MONITOR_IDLE_CHECK_S, VICTIM_FLUSH_S
from splitrack.rundir import identify

RELEASE_TIMEOUT_S = 0.5   # a component that cannot take a release in this is stopping
_PR_SET_CHILD_SUBREAPER = 36
_prctl = ctypes.CDLL(None, use_errno=True).prctl


class PMonitor(Launching, Monitor):
    kind = "p"

    def setup(self) -> None:
        self.run_dir = os.getcwd()  # the launcher starts monitors in the run directory
        # Orphans of our programs become our children, not init's: they stay our
        # descendants (no other pComponent can take them: P_ATTACH) and we reap them.
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        self._launching = threading.Lock()   # a launched child is in `children` under it
        victims = self.config.get("victim", 0)
        size = ExtCache.segment_size(self.config["extcache"], self.rack["line"],
                                     self.config["ways"], victims)
        self.xc = ExtCache.create(self.ep.region("extcache", size, self._may_map),
                                  self.config["extcache"], self.rack["line"],
                                  self.config["ways"], self.config["eviction"], victims)
        self._next_tick = 0.0   # (serve: tick()'s turn, with a victim cache)
        self.m_ids = self._ids("m")
        self.n_ids = self._ids("n")
        self.tracked: dict[int, float] = {}      # pid -> create time
        self.spaces: dict[int, int] = {}         # pid -> its attaches' last address space
        self.images: dict[int, Any] = {}         # pid -> its program image's token
        self.children: dict[int, subprocess.Popen] = {}
        self.released = 0
        self._reported = 0    # the process count GPM last heard
        self._gone: set[str] = set()  # components that did not take a release (when stopping)
        self._pmonitors: set[int] | None = None   # the other pComponents' pids
        self.cpus = self.config.get("cpus")   # host CPUs its programs run on (None: any)
        self.ep.on(Op.P_ATTACH, self.p_attach)
        self.ep.on(Op.P_PROCESSES, self.p_processes)
        self.ep.on(Op.P_VOUCH, self.p_vouch)
        self._spawn_sock = self._start_spawn_server()

    def resources(self) -> dict[str, Any]:
        return {"extcache": self.config["extcache"], "ways": self.config["ways"]}

    def extra_stats(self) -> dict[str, Any]:
        per_process = {str(pid): self.xc.counters(pid) for pid in self.tracked}
        return {"extcache": {"total": self.xc.counters(), "processes": per_process,
                             "line": self.xc.line_size, "ways": self.xc.ways,
                             "sets": self.xc.nsets, "victim": self.xc.victims,
                             "victim_entries": self.xc.victim_entries(),
                             "released_processes": self.released}}

    def serve(self) -> None:
        """The serve loop; with a victim cache, it runs the flusher every
        VICTIM_FLUSH_S, and the rest of tick() every MONITOR_IDLE_CHECK_S as always."""
        if not self.xc.victims:
            return super().serve()
        self.ep.serve_forever(tick=self._flush_tick, every_s=VICTIM_FLUSH_S)

    def _flush_tick(self) -> bool:
        self.xc.victim_flush(self._write_victims)
        now = time.monotonic()
        if now < self._next_tick:
            return self.stopping
        self._next_tick = now + MONITOR_IDLE_CHECK_S
        return self._tick()

    def _write_victims(self, home: int, pid: int, vpages: list[int], lines: list[Any]) -> int:
        """Dirty victim entries of process pid to their home, one M_WRITEBACK; what
        becomes of the entries (native/extcache.py: victim_flush)."""
        try:
            self.ep.call(self.m_ids[home], Op.M_WRITEBACK, pack_writeback(pid, vpages, lines),
                         timeout=RELEASE_TIMEOUT_S if self.stopping else FIT_CALL_TIMEOUT_S)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ESRCH, errno.EFAULT):
                return FLUSH_GONE   # its process ended, or freed the region
            self.log.warning("victim cache: %d pages of process %d not written to %s: %s",
                             len(vpages), pid, self.m_ids[home], exc)
            return FLUSH_FAILED     # dirty still, served from here; written later
        return FLUSH_WRITTEN

    def tick(self) -> None:
        self._reap_orphans()
        for pid, created in list(self.tracked.items()):
            if identify(pid, created) is None:
                self.release(pid)
        if len(self.tracked) != self._reported and not self.stopping and \
                self.report_load({"processes": len(self.tracked)}, RELEASE_TIMEOUT_S):
            self._reported = len(self.tracked)

    def close(self) -> None:
        self._spawn_sock.close()
        for proc in list(self.children.values()):
            proc.terminate()
        for proc in list(self.children.values()):
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.tick()
        self.xc.close()
        super().close()

    # ---- identities ------------------------------------------------------------------
    def vouch_process(self, peer: str, pid: int) -> bool:
        """Our own processes are ours to judge (P_ATTACH); another pComponent's
        process has no business here."""
        return process_of(peer)[0] == self.id   # type: ignore[index]

    def _may_map(self, peer: str, pid: int | None) -> bool:
        """Who may map the extCache: our tracked processes, and the nComponents."""
        if kind_of(peer) == "n":
            return True
        owner = process_of(peer)
        return owner is not None and owner[0] == self.id and (pid is None or pid in self.tracked)

    def _ours(self, pid: int) -> bool:
        """Does pid descend from this pMonitor (a program it launched, or theirs)?"""
        try:
            return any(a.pid == os.getpid() for a in psutil.Process(pid).parents())
        except psutil.Error:
            return False

    def _other_pmonitor(self, pid: int) -> bool:
        """Does pid descend from another pComponent's pMonitor?"""
        if self._pmonitors is None:
            self._pmonitors = set()
            for p in self._ids("p"):
                if p != self.id:
                    try:
                        self._pmonitors.add(address_pid(self.ep.resolve(p)) or -1)
                    except OSError:
                        self._pmonitors = None   # not all up yet: look again next time
                        return False
        try:
            return any(a.pid in self._pmonitors for a in psutil.Process(pid).parents())
        except psutil.Error:
            return False

    # ---- ops -----------------------------------------------------------------------
    def p_attach(self, msg: Message) -> bytes:
        args, _ = msg.args()
        pid = need(args, "pid", int)
        if msg.src != f"{self.id}.{pid}" or (msg.pid is not None and msg.pid != pid):
            raise OSError(errno.EPERM, f"{msg.src} may not attach process {pid}")
        if pid not in self.tracked and msg.pid is not None and self._other_pmonitor(pid):
            self.ep.counters.error("forged")
            raise OSError(errno.EPERM, f"process {pid} runs on another pComponent")
        if pid not in self.tracked and self.slices.get(self.id) and not self._ours(pid):
            self.ep.counters.error("slice")
            raise OSError(errno.EPERM, f"{self.id} is granted to slice "
                          f"{self.slices[self.id]}: only its programs may attach")
        try:
            self.tracked[pid] = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            raise OSError(errno.ESRCH, f"no process {pid}") from None
        image = args.get("image")
        if self.images.get(pid, image) != image:   # it exec()ed: what the old image held
            self._release_image(pid)                  # goes, as at an exit
        self.images[pid] = image
        space = self.spaces.get(pid, 0) + 1   # addresses no earlier attach of the pid used
        #                                       (1 TiB each), below the rack heaps
        if space << 40 >= xc_lib.XC_HEAP_LO:
            raise OSError(errno.ENOMEM, f"process {pid} attached {space - 1} times: "
                                        "no address space left")
        self.spaces[pid] = space
        return codec.encode({"extcache": "extcache", "line": self.xc.line_size,
                             "m_ids": self.m_ids, "space": space})

    def p_processes(self, msg: Message) -> bytes:
        return codec.encode({"processes": sorted(self.tracked)})

    def p_vouch(self, msg: Message) -> bytes:
        args, _ = msg.args()
        return codec.encode({"member": need(args, "pid", int) in self.tracked})

    # ---- process exit ---------------------------------------------------------------
    def release(self, pid: int) -> None:
        """Everything an ended process held: sockets, extCache lines, counters, pages.
        Its sockets go first, and are waited for: their skeletons take what it sent
        out of its memory before its lines are dropped and its pages freed."""
        self.tracked.pop(pid, None)
        self.spaces.pop(pid, None)
        self.images.pop(pid, None)
        dropped = self._release_image(pid, slot=True)
        rendezvous = os.path.join(self.run_dir, f"{self.id}.{pid}.fit")
        if os.path.exists(rendezvous):   # its process was killed before it could remove it
            os.unlink(rendezvous)
        self.released += 1
        self.log.info("process %d ended: dropped %d extCache lines, released its pages "
                      "and sockets",
                      pid, dropped)

    def _release_image(self, pid: int, slot: bool = False) -> int:
        """What a program image held -- its sockets, extCache lines, pages -- at its
        exit (slot: and its counter slot), or when it exec()ed another (pages released
        with a call then: the new image's own come after). Returns the lines dropped."""
        for n in self.n_ids:
            self._release_at(n, Op.N_RELEASE, pid)
        dropped = self.xc.drop_pid(pid)
        if slot:
            self.xc.slot_release(pid)
        else:
            self.log.info("process %d exec()ed: its old image's sockets, %d extCache lines "
                          "and pages released", pid, dropped)
        for m in self.m_ids:
            self._release_at(m, Op.M_RELEASE, pid, wait=not slot)
        return dropped

    def _release_at(self, c: str, op: int, pid: int, wait: bool = False) -> None:
        if self.stopping and c in self._gone:
            return  # stopping with the rack: do not wait on it once per process
        try:
            if op == Op.N_RELEASE or wait:   # a call: done when the skeletons have the bytes
                self.ep.call(c, op, codec.encode({"pid": pid}), timeout=RELEASE_TIMEOUT_S
                             if self.stopping else FIT_CALL_TIMEOUT_S)
            else:
                self.ep.send(c, op, codec.encode({"pid": pid}), timeout=RELEASE_TIMEOUT_S)
        except OSError as exc:  # that component is gone (the rack is stopping?)
            self.log.warning("could not release process %d at %s: %s", pid, c, exc)
            self._gone.add(c)

    def _reap_orphans(self) -> None:
        """Reap the ended orphans we adopted (one system call when there are none;
        our own launched children are their launch threads' to reap: they want the
        exit status, and reap it at once)."""
        with self._launching:
            while True:
                try:
                    ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    return   # no children at all
                if ended is None or ended.si_pid in self.children:
                    return   # none ended, or ours: its thread reaps it (the rest next tick)
                try:
                    os.waitpid(ended.si_pid, 0)
                except ChildProcessError:
                    return

    def _ids(self, kind: str) -> list[str]:
        """The ids of the rack's components of one kind (from the run directory's spec)."""
        with open(os.path.join(self.run_dir, "spec.json")) as f:
            spec = json.load(f)
        return [c["id"] for c in spec["components"] if c["kind"] == kind]
