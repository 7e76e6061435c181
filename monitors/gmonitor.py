"""The global process: GPM, GMM, GSM and GNM, one FIT endpoint with id `global`.

It is the rack's directory: every monitor registers here at start (REGISTER)
and any endpoint resolves a component id to its inbox address here (RESOLVE).
Placement policies live in registry.py (GPM, GMM, GSM) and gnm/ (GNM); this
file only maps ops (docs/protocol.md, 0x02xx) onto them.
"""

import errno
import json
import os
from typing import Any

from fit_rpc import GLOBAL_ID, Op
from fit_rpc.codec import handler, need
from gnm import NicAllocator, NicRegistry
from monitors.core import Monitor
from monitors.registry import Component, Registry

_KINDS = ("p", "m", "n", "s")


class GlobalMonitor(Monitor):
    kind = "global"

    def setup(self) -> None:
        self.registry = Registry()
        self.nics = NicRegistry()
        self.allocator = NicAllocator(self.rack["nic_policy"], self.nics, self._configured_nics())
        for op, fn in (
            (Op.REGISTER, self.register_component), (Op.RESOLVE, self.resolve),
            (Op.LIST, self.list_components), (Op.LOAD_REPORT, self.load_report),
            (Op.UNREGISTER, self.unregister_client),
            (Op.GPM_PLACE, self.gpm_place), (Op.GMM_PLACE, self.gmm_place),
            (Op.GSM_LOOKUP, self.gsm_lookup), (Op.GNM_OWNER, self.gnm_owner),
            (Op.GNM_IS_RACK_IP, self.gnm_is_rack_ip), (Op.GNM_ALLOCATE, self.gnm_allocate),
        ):
            self.ep.on(op, handler(fn))

    def register(self) -> None:
        self.registry.add(Component(GLOBAL_ID, "global", self.ep.address, os.getpid()))

    def extra_stats(self) -> dict[str, Any]:
        return {"registered": sorted(self.registry.components), "nics": self.nics.by_component(),
                "nic_policy": self.allocator.policy, "nic_loads": self.allocator.loads()}

    def _configured_nics(self) -> dict[str, str]:
        """Each pComponent's NIC from the spec ([[pcomponent]] nic), if it has one."""
        with open(os.path.join(os.getcwd(), "spec.json")) as f:  # monitors run in the run dir
            spec = json.load(f)
        return {c["id"]: c["nic"] for c in spec["components"] if c["kind"] == "p" and c.get("nic")}

    def register_component(self, args: dict[str, Any], data: memoryview) -> None:
        cid, kind = need(args, "id", str), need(args, "kind", str)
        if kind == "client":  # an endpoint outside the components that wants to be called
            known = self.registry.components.get(cid)
            if known is not None and known.kind != "client":
                raise OSError(errno.EEXIST, f"{cid!r} is a component id")
        elif kind not in _KINDS or not cid.startswith(kind):
            raise OSError(errno.EINVAL, f"bad component id/kind {cid!r}/{kind!r}")
        resources = need(args, "resources", dict)
        if kind == "m" and (not isinstance(resources.get("memory"), int)
                            or resources["memory"] <= 0):
            raise OSError(errno.EINVAL, f"{cid}: resources.memory must be a positive int")
        if kind == "n":
            self.nics.register(cid, need(resources, "nics", list))
        self.registry.add(Component(cid, kind, need(args, "address", str),
                                    need(args, "pid", int), resources))
        self.log.info("registered %s at %s", cid, args["address"])

    def unregister_client(self, args: dict[str, Any], data: memoryview) -> None:
        """Clients leave the directory when they close; components never do."""
        component = self.registry.get(need(args, "id", str))
        if component.kind != "client":
            raise OSError(errno.EPERM, f"{component.id} is a component, not a client")
        del self.registry.components[component.id]

    def resolve(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"address": self.registry.get(need(args, "id", str)).address}

    def list_components(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"components": [c.as_dict() for c in self.registry.components.values()]}

    def load_report(self, args: dict[str, Any], data: memoryview) -> None:
        component = self.registry.get(need(args, "id", str))
        load = need(args, "load", dict)
        if component.kind == "n" and "nics" in load:  # validated before anything is stored
            self.allocator.report(component.id, load["nics"])
        component.load.update(load)

    def gpm_place(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"id": self.registry.place_process()}

    def gmm_place(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"id": self.registry.place_memory(need(args, "size", int))}

    def gsm_lookup(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"id": self.registry.storage_for(need(args, "path", str))}

    def gnm_owner(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"id": self.nics.owner(need(args, "ip", str))}

    def gnm_is_rack_ip(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        return {"rack": self.nics.is_rack_ip(need(args, "ip", str))}

    def gnm_allocate(self, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        ip = self.allocator.allocate(need(args, "process", str))
        return {"ip": ip, "id": self.nics.owner(ip)}


__all__ = ["GlobalMonitor"]
