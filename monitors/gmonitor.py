"""The global process: GPM, GMM, GSM and GNM, one FIT endpoint with id `global`.

It is the rack's directory: every monitor registers here at start (REGISTER)
and any endpoint resolves a component id to its inbox address here (RESOLVE).
On shm it is also where identities start: a component may register only
itself, only once, only an id of the spec, and only if the kernel says the
registering process is a sibling of global (both started by the launcher) or
global's own child (RESTART: global starts a dead monitor again, which then
takes the dead one's place in the directory). A restarted global takes the
live components from the launcher's record in the run directory. The address
a component registers names its own pid (shm://PATH#PID), which is what every
other endpoint then checks a link from that id against. A client's
registration ends with its process.
Slices (monitors/slices.py): SLICE_GRANT, SLICE_RELEASE and SLICE_LIST keep
which components are granted to which job, in the run directory's
slices.json (a restarted global reloads it); every grant and release is
pushed to the monitors (SLICE_TABLE, a call each), which enforce it. GPM, GMM
and GNM place a process's things only on components of its slice (a free
process: on free ones); a client asking GPM names the slice.
Placement policies live in registry.py (GPM, GMM, GSM) and gnm/ (GNM); this
file only maps ops (docs/protocol.md, 0x02xx) onto them.
"""

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil

from fit_rpc import GLOBAL_ID, Message, Op, codec
from fit_rpc.codec import handler, need
from fit_rpc.identity import address_pid, is_component, kind_of, process_of
from gnm import NicAllocator, NicRegistry
from monitors.core import Monitor
from monitors.registry import Component, Registry, id_key
from monitors.slices import KINDS, Slices, slice_of
from splitrack.rundir import RunDir, identify, running

_KINDS = ("p", "m", "n", "s")
_RESOURCES = {"p": ("extcache", "ways"), "m": ("memory",), "n": ("nics",), "s": ("root",)}
_PUSH_TIMEOUT_S = 1.0   # a monitor that cannot take the slice table in this is not serving


class GlobalMonitor(Monitor):
    kind = "global"

    def setup(self) -> None:
        spec = self._spec()["components"]
        self.registry = Registry({c["id"]: c["cores"] for c in spec if "cores" in c},
                                 self.rack["gmm_policy"])
        self.nics = NicRegistry()
        self.allocator = NicAllocator(self.rack["nic_policy"], self.nics, self._configured_nics())
        self.spec_ids = {c["id"] for c in spec}
        self.slices_path = os.path.join(os.getcwd(), "slices.json")
        self.grants = Slices.load(self.slices_path,
                                  {k: [c["id"] for c in spec if c["kind"] == k] for k in KINDS},
                                  {c["id"]: c["nics"] for c in spec if c["kind"] == "n"})
        self.slices = self.grants.table()
        self.ep.on(Op.REGISTER, self.register_component)
        self.ep.on(Op.LOAD_REPORT, self.load_report)
        self.ep.on(Op.UNREGISTER, self.unregister_client)
        self.ep.on(Op.RESTART, handler(self.restart))
        self.restarted: list[subprocess.Popen] = []   # monitors we started: we reap them
        self._rebuild()
        self.ep.on_peer_gone.append(self._peer_gone)
        for op, fn in (
            (Op.RESOLVE, self.resolve), (Op.LIST, self.list_components),
            (Op.GSM_LOOKUP, self.gsm_lookup), (Op.GNM_OWNER, self.gnm_owner),
            (Op.GNM_IS_RACK_IP, self.gnm_is_rack_ip), (Op.SLICE_LIST, self.slice_list),
        ):
            self.ep.on(op, handler(fn))
        for op, fn in ((Op.GPM_PLACE, self.gpm_place), (Op.GMM_PLACE, self.gmm_place),
                       (Op.GNM_ALLOCATE, self.gnm_allocate), (Op.SLICE_GRANT, self.slice_grant),
                       (Op.SLICE_RELEASE, self.slice_release)):
            self.ep.on(op, _from(fn))

    def register(self) -> None:
        self.registry.add(Component(GLOBAL_ID, "global", self.ep.address, os.getpid()))

    def _rebuild(self) -> None:
        """A restarted global (the run directory has a state: the rack is up) takes
        the components that live from the launcher's record, each with what its spec
        entry offers; loads start afresh and come with the next reports."""
        state = RunDir.at(os.getcwd()).read_state()
        spec = {c["id"]: c for c in self._spec()["components"]}
        for rec in (state or {}).get("components", []):
            cid, kind = rec["id"], rec["kind"]
            if kind not in _KINDS or cid not in spec or not identify(rec["pid"],
                                                                     rec["create_time"]):
                continue
            resources = {k: spec[cid][k] for k in _RESOURCES[kind] if k in spec[cid]}
            if kind == "n":
                self.nics.register(cid, resources["nics"])
            self.registry.add(Component(cid, kind, rec["address"], rec["pid"], resources))
            self.log.info("%s is up (the run directory says): taken in", cid)

    def extra_stats(self) -> dict[str, Any]:
        return {"registered": sorted(self.registry.components), "nics": self.nics.by_component(),
                "nic_policy": self.allocator.policy, "nic_loads": self.allocator.loads(),
                "gmm_policy": self.registry.gmm_policy}

    def vouch(self, peer: str, pid: int | None) -> bool | None:
        """A component id is believed if registered with this pid; an id not yet
        registered, or whose registered process died, may only register itself
        (checked there): ask again next time."""
        if pid is None or not is_component(peer):
            return super().vouch(peer, pid)
        known = self.registry.components.get(peer)
        if known is None or (known.pid != pid and not running(known.pid)):
            return None   # not yet, or no more (a restart): REGISTER checks it
        return known.pid == pid

    def pmonitors(self) -> dict[int, str]:
        return {c.pid: c.id for c in self.registry.components.values() if c.kind == "p"}

    def vouch_process(self, peer: str, pid: int) -> bool:
        """A process asks global before it attaches to its pComponent (where is pN?):
        its pid, checked at the rendezvous, is all global needs."""
        return True

    def _spec(self) -> dict[str, Any]:
        with open(os.path.join(os.getcwd(), "spec.json")) as f:  # monitors run in the run dir
            return json.load(f)

    def _configured_nics(self) -> dict[str, str]:
        """Each pComponent's NIC from the spec ([[pcomponent]] nic), if it has one."""
        return {c["id"]: c["nic"] for c in self._spec()["components"]
                if c["kind"] == "p" and c.get("nic")}

    def register_component(self, msg: Message) -> bytes:
        args, _ = msg.args()
        cid, kind = need(args, "id", str), need(args, "kind", str)
        address, pid = need(args, "address", str), need(args, "pid", int)
        resources = need(args, "resources", dict)
        if kind == "client":  # an endpoint outside the components that wants to be called
            known = self.registry.components.get(cid)
            if known is not None and known.kind != "client":
                raise OSError(errno.EEXIST, f"{cid!r} is a component id")
        elif kind not in _KINDS or not cid.startswith(kind):
            raise OSError(errno.EINVAL, f"bad component id/kind {cid!r}/{kind!r}")
        if kind == "m" and (not isinstance(resources.get("memory"), int)
                            or resources["memory"] <= 0):
            raise OSError(errno.EINVAL, f"{cid}: resources.memory must be a positive int")
        self._check_registrant(msg, cid, kind, address, pid)
        if kind == "n":
            self.nics.register(cid, need(resources, "nics", list))
        self.registry.add(Component(cid, kind, address, pid, resources))
        self.log.info("registered %s at %s", cid, address)
        return codec.encode()

    def _check_registrant(self, msg: Message, cid: str, kind: str, address: str,
                          pid: int) -> None:
        """The kernel's word on who registers (shm; zmq vouches for nobody)."""
        if msg.pid is None:
            return
        why = None
        if msg.src != cid or msg.pid != pid:
            why = f"{msg.src} (pid {msg.pid}) may register only itself"
        elif address.startswith("shm://") and address_pid(address) != pid:
            why = f"{address} is not the address of pid {pid}"
        elif kind != "client":
            if cid not in self.spec_ids:
                why = f"{cid} is no component of this rack's spec"
            elif cid in self.registry.components and running(self.registry.components[cid].pid):
                why = f"{cid} is registered already"
            elif _parent(pid) not in (os.getppid(), os.getpid()):
                why = f"pid {pid} was not started by this rack's launcher, nor by global"
        if why is not None:
            self.ep.counters.error("forged")
            raise PermissionError(errno.EPERM, why)

    def unregister_client(self, msg: Message) -> bytes:
        """Clients leave the directory when they close (or their process ends);
        components never do."""
        args, _ = msg.args()
        component = self.registry.get(need(args, "id", str))
        if component.kind != "client":
            raise OSError(errno.EPERM, f"{component.id} is a component, not a client")
        if msg.pid is not None and component.id != msg.src:
            raise OSError(errno.EPERM, f"{msg.src} may not unregister {component.id}")
        del self.registry.components[component.id]
        return codec.encode()

    def restart(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        """RESTART {id}: start the dead monitor `id` again, as global's child; it
        registers in the dead one's place. Answers its pid at once (it registers
        when it is ready: RESOLVE names its new address then)."""
        cid = need(args, "id", str)
        if cid not in self.spec_ids or cid == GLOBAL_ID:
            raise OSError(errno.EINVAL, f"{cid!r} is no monitor of this rack's spec "
                                        "that global can start")
        known = self.registry.components.get(cid)
        if known is not None and running(known.pid):
            raise OSError(errno.EBUSY, f"{cid} is running (pid {known.pid})")
        run_dir = os.getcwd()   # monitors run in the run directory
        with open(os.path.join(run_dir, "logs", f"{cid}.log"), "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "monitors", "--run-dir", run_dir, "--id", cid,
                 "--global", self.ep.address], cwd=run_dir, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=log, process_group=0)
        self.restarted.append(proc)
        self.log.info("restarting %s: pid %d", cid, proc.pid)
        return {"pid": proc.pid}

    def tick(self) -> None:
        self.restarted = [p for p in self.restarted if p.poll() is None]   # reap the ended

    def close(self) -> None:
        for proc in self.restarted:   # the launcher stops what it started; we, ours
            proc.terminate()
        for proc in self.restarted:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
        super().close()

    def _peer_gone(self, peer: str) -> None:
        """A process or client ended (its last link closed): it leaves the directory
        and GNM forgets its NIC, so nothing grows with the programs a rack has run."""
        known = self.registry.components.get(peer)
        if known is not None and known.kind == "client":
            del self.registry.components[peer]
        self.allocator.forget(peer)

    def resolve(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"address": self.registry.get(need(args, "id", str)).address}

    def list_components(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"components": [c.as_dict() for c in self.registry.components.values()]}

    def load_report(self, msg: Message) -> None:
        args, _ = msg.args()
        component = self.registry.get(need(args, "id", str))
        if msg.pid is not None and component.id != msg.src:   # (zmq vouches for nobody)
            raise OSError(errno.EPERM, f"{msg.src} may not report the load of {component.id}")
        load = need(args, "load", dict)
        if component.kind == "n" and "nics" in load:  # validated before anything is stored
            self.allocator.report(component.id, load["nics"])
        component.load.update(load)

    def gpm_place(self, src: str, args: dict[str, Any]) -> dict[str, Any]:
        """A process places within its own slice; anyone else in the slice it names."""
        src = self.as_process(src)
        name = slice_of(self.slices, src) if kind_of(src) == "process" else args.get("slice")
        if name is not None and not isinstance(name, str):
            raise OSError(errno.EINVAL, "argument 'slice' is not a string or null")
        if name is not None:
            self.grants.get(name)   # ENOENT if there is none such
        hints = args.get("hints") or {}
        if not isinstance(hints, dict):
            raise OSError(errno.EINVAL, "argument 'hints' is not an object")
        ids = self.registry.place_processes(args.get("count", 1),
                                            args.get("placement") or "least-loaded", hints,
                                            *self._members("p", name))
        return {"id": ids[0], "ids": ids}

    def gmm_place(self, src: str, args: dict[str, Any]) -> dict[str, Any]:
        name = self.slice_of_sender(src)
        return {"id": self.registry.place_memory(need(args, "size", int),
                                                 *self._members("m", name))}

    def _members(self, kind: str, name: str | None) -> tuple[set[str], str]:
        """The components of a kind in slice `name` (None: the free ones), and where
        that is, for an error that finds none."""
        among = {c for c, s in self.slices.items() if s == name and c[0] == kind}
        where = f"in slice {name}" if name else "free" if self.grants.slices else "registered"
        return among, where

    def gsm_lookup(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"id": self.registry.storage_for(need(args, "path", str))}

    def gnm_owner(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"id": self.nics.owner(need(args, "ip", str))}

    def gnm_is_rack_ip(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"rack": self.nics.is_rack_ip(need(args, "ip", str))}

    def gnm_allocate(self, src: str, args: dict[str, Any]) -> dict[str, Any]:
        process = need(args, "process", str)
        among, _ = self._members("n", slice_of(self.slices, process))
        ip = self.allocator.allocate(process, among)
        return {"ip": ip, "id": self.nics.owner(ip)}

    # ---- slices ------------------------------------------------------------------------
    def slice_grant(self, src: str, args: dict[str, Any]) -> dict[str, Any]:
        self._may_change_slices(src)
        up = {c.id for c in self.registry.components.values() if running(c.pid)}
        granted = self.grants.grant(args.get("name"), {k: args.get(k) for k in KINDS}, up,
                                    time.time())
        self._slices_changed(f"granted slice {granted['name']}: {granted['components']}")
        return {"slice": granted}

    def slice_release(self, src: str, args: dict[str, Any]) -> dict[str, Any]:
        self._may_change_slices(src)
        released = self.grants.release(need(args, "name", str))
        self._slices_changed(f"released slice {released['name']}")
        return {"slice": released}

    def slice_list(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        components = sorted((c for c in self.registry.components.values() if c.kind in _KINDS),
                            key=lambda c: (_KINDS.index(c.kind), id_key(c.id)))
        return {"slices": list(self.grants.slices.values()),
                "components": [{"id": c.id, "kind": c.kind, "slice": self.slices.get(c.id)}
                               for c in components]}

    def _may_change_slices(self, src: str) -> None:
        if process_of(self.as_process(src)) is not None:
            raise OSError(errno.EPERM, f"{src} is a process: only clients and components "
                                       "grant and release slices")

    def _slices_changed(self, what: str) -> None:
        """Keep the slices (slices.json), then tell every monitor (SLICE_TABLE)."""
        self.grants.save(self.slices_path)
        self.slices = self.grants.table()
        self.log.info("%s", what)
        payload = codec.encode({"components": self.slices})
        for c in list(self.registry.components.values()):
            if c.kind in _KINDS and running(c.pid):
                self.ep.add_peer(c.id, c.address)   # global is the directory: it knows
                try:
                    self.ep.call(c.id, Op.SLICE_TABLE, payload, timeout=_PUSH_TIMEOUT_S)
                except OSError as exc:   # it asks for the table when it starts again
                    self.log.warning("%s did not take the slice table: %s", c.id, exc)


def _from(fn: Callable[[str, dict[str, Any]], dict[str, Any]]) -> Callable[[Message], bytes]:
    """A handler of fn(caller's id, args) -> reply args (the caller's id is vouched)."""

    def handle(msg: Message) -> bytes:
        args, _ = msg.args()
        return codec.encode(fn(msg.src, args))

    handle.__name__ = fn.__name__
    return handle


def _parent(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


__all__ = ["GlobalMonitor"]
