"""GPM, GMM, GSM and GNM in the global process, through FIT."""

import errno

import pytest

from fit_rpc import Op, UnknownDestination
from helpers import small_spec
from monitors.registry import Component, Registry
from splitrack import Rack
from splitrack.params import GMM_RECHOOSE


def test_every_component_registered_with_its_resources(rack, client):
    listing, _ = client.call_args("global", Op.LIST)
    comps = {c["id"]: c for c in listing["components"]}
    assert {"global", "p0", "p1", "m0", "n0", "s0"} <= set(comps)
    assert comps["m0"]["resources"]["memory"] == 64 << 20
    assert comps["n0"]["resources"]["nics"] == ["127.0.0.11", "127.0.0.12"]
    assert comps["p0"]["resources"] == {"extcache": 4 << 20, "ways": 8}
    for cid, comp in comps.items():
        if cid in rack.components:
            assert comp["pid"] == rack.components[cid]["pid"]
            assert comp["address"] == rack.components[cid]["address"]


def test_resolve(rack, client):
    args, _ = client.call_args("global", Op.RESOLVE, {"id": "s0"})
    assert args["address"] == rack.components["s0"]["address"]
    with pytest.raises(UnknownDestination):
        client.call_args("global", Op.RESOLVE, {"id": "s7"})


def test_gnm_owner_and_rack_ip(client):
    assert client.call_args("global", Op.GNM_OWNER, {"ip": "127.0.0.12"})[0] == {"id": "n0"}
    with pytest.raises(OSError) as info:
        client.call_args("global", Op.GNM_OWNER, {"ip": "127.0.0.99"})
    assert info.value.errno == errno.EADDRNOTAVAIL
    assert client.call_args("global", Op.GNM_IS_RACK_IP, {"ip": "127.0.0.11"})[0]["rack"]
    assert not client.call_args("global", Op.GNM_IS_RACK_IP, {"ip": "10.1.2.3"})[0]["rack"]
    with pytest.raises(OSError) as info:
        client.call_args("global", Op.GNM_IS_RACK_IP, {"ip": "not-an-ip"})
    assert info.value.errno == errno.EINVAL


def test_only_a_component_registers_itself(client):
    """A client that registers an nComponent (and with it a NIC) is refused: the kernel
    says who is registering (docs/protocol.md, "Identities"), and GNM keeps n0's NIC.
    (GNM's own refusal of a NIC owned twice: test_gnm.py.)"""
    before = client.call_args("global", Op.STATS)[0]["errors"].get("forged", 0)
    for cid in ("n5", "n0"):
        with pytest.raises(PermissionError):
            client.call_args("global", Op.REGISTER, {
                "id": cid, "kind": "n", "address": "shm:///nowhere#1", "pid": 1,
                "resources": {"nics": ["127.0.0.11"]}})
    assert client.call_args("global", Op.GNM_OWNER, {"ip": "127.0.0.11"})[0] == {"id": "n0"}
    assert client.call_args("global", Op.STATS)[0]["errors"]["forged"] == before + 2


def test_register_rejects_bad_input(client):
    for args in ({"id": "x0", "kind": "x", "address": "a", "pid": 1, "resources": {}},
                 {"id": "m5", "kind": "m", "address": "a", "pid": 1, "resources": {}},
                 {"id": "p5", "kind": "p"}):
        with pytest.raises(OSError) as info:
            client.call_args("global", Op.REGISTER, args)
        assert info.value.errno == errno.EINVAL


def test_gpm_gmm_gsm_placement(run_root, tmp_path):
    spec = small_spec(str(tmp_path / "s0"))
    spec["mcomponent"] = [{"id": "m0", "memory": 1000}, {"id": "m1", "memory": 4000}]
    spec["scomponent"].append({"id": "s1", "root": str(tmp_path / "s1")})
    with Rack(spec) as rack:
        ep = rack.endpoint()
        # GPM: least-loaded pComponent, ties to the lowest id, placements count as load
        placed = [ep.call_args("global", Op.GPM_PLACE)[0]["id"] for _ in range(4)]
        assert placed == ["p0", "p1", "p0", "p1"]
        # only p0 reports p0's load: a client's report is refused and changes nothing
        ep.send("global", Op.LOAD_REPORT, _args({"id": "p0", "load": {"processes": 9}}))
        assert ep.call_args("global", Op.GPM_PLACE)[0]["id"] == "p0"
        # GMM: least-loaded (used/total) mComponent with the bytes free
        gmm = [ep.call_args("global", Op.GMM_PLACE, {"size": 500})[0]["id"] for _ in range(4)]
        # ties to the lowest id; then m0 is at .5 and m1 at .125, .25, .375
        assert gmm == ["m0", "m1", "m1", "m1"]
        with pytest.raises(OSError) as info:
            ep.call_args("global", Op.GMM_PLACE, {"size": 3000})
        assert info.value.errno == errno.ENOMEM
        with pytest.raises(OSError) as info:
            ep.call_args("global", Op.GMM_PLACE, {"size": 0})
        assert info.value.errno == errno.EINVAL
        # GSM: a stable choice per top-level directory
        homes = {p: ep.call_args("global", Op.GSM_LOOKUP, {"path": p})[0]["id"]
                 for p in ("a/x", "a/y", "b", "c/d/e", "dd", "e1", "f", "g")}
        assert homes["a/x"] == homes["a/y"]
        assert set(homes.values()) == {"s0", "s1"}
        assert homes == {p: ep.call_args("global", Op.GSM_LOOKUP, {"path": p})[0]["id"]
                         for p in homes}


def test_gpm_places_by_reported_load():
    """The policy itself (pure data): a pComponent's reported processes count as load."""
    registry = Registry()
    for cid in ("p0", "p1"):
        registry.add(Component(cid, "p", f"shm:///{cid}#1", 1))
    registry.components["p0"].load["processes"] = 9
    assert [registry.place_process() for _ in range(3)] == ["p1"] * 3


def test_gmm_fewest_misses_policy():
    """LegoOS's GMM (pure data): the mComponent that served the fewest misses, kept for
    GMM_RECHOOSE requests, chosen again after them, and at once when it has no room."""
    registry = Registry(gmm_policy="fewest-misses")
    for cid in ("m0", "m1", "m2"):
        registry.add(Component(cid, "m", f"shm:///{cid}#1", 1, {"memory": 1000}))
    load = {cid: registry.components[cid].load for cid in ("m0", "m1", "m2")}
    load["m0"]["misses"], load["m1"]["misses"] = 7, 2   # m2 has reported none: 0
    placed = [registry.place_memory(10) for _ in range(GMM_RECHOOSE)]
    assert placed == ["m2"] * GMM_RECHOOSE
    load["m2"]["misses"] = 50
    assert registry.place_memory(10) == "m1"   # chosen again: m1 now serves fewest
    assert registry.place_memory(995) == "m0"  # m1 has no room for it: chosen again
    with pytest.raises(OSError) as info:
        registry.place_memory(2000)
    assert info.value.errno == errno.ENOMEM
    with pytest.raises(ValueError):
        Registry(gmm_policy="most-misses")


def _args(d):
    from fit_rpc import codec

    return codec.encode(d)
