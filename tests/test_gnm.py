"""GNM's NIC allocation (gnm/allocation.py), alone and through FIT (GNM_ALLOCATE)."""

import errno

import pytest

from fit_rpc import Op, codec
from gnm import NicAllocator, NicRegistry, split_process_id
from helpers import small_spec, wait_until
from splitrack import Rack


def _registry(**components: list[str]) -> NicRegistry:
    nics = NicRegistry()
    for cid, ips in components.items():
        nics.register(cid, ips)
    return nics


def _two_ncomponents() -> NicRegistry:
    return _registry(n0=["127.0.0.11", "127.0.0.12"], n1=["127.0.0.21"])


def _errno(fn, *args) -> int:
    with pytest.raises(OSError) as info:
        fn(*args)
    return info.value.errno


def test_round_robin_in_registration_order_and_sticky():
    alloc = NicAllocator("round-robin", _two_ncomponents())
    got = [alloc.allocate(f"p{i % 2}.{100 + i}") for i in range(4)]
    assert got == ["127.0.0.11", "127.0.0.12", "127.0.0.21", "127.0.0.11"]
    assert [alloc.allocate(f"p{i % 2}.{100 + i}") for i in range(4)] == got
    assert alloc.allocate("p1.999") == "127.0.0.12"  # repeats did not move the cursor


def test_least_loaded_follows_reports_then_bytes_then_address():
    alloc = NicAllocator("least-loaded", _registry(n0=["127.0.0.12", "127.0.0.11"]))
    # no report yet: an allocation counts as a socket, so a burst spreads
    assert [alloc.allocate(f"p0.{pid}") for pid in (1, 2)] == ["127.0.0.11", "127.0.0.12"]
    alloc.report("n0", {"127.0.0.11": {"sockets": 5, "bytes": 0}})  # .12 is idle
    assert alloc.allocate("p0.3") == "127.0.0.12"
    alloc.report("n0", {"127.0.0.11": {"sockets": 1, "bytes": 900},
                        "127.0.0.12": {"sockets": 1, "bytes": 100}})
    assert alloc.allocate("p0.4") == "127.0.0.12"
    alloc.report("n0", {"127.0.0.11": {"sockets": 2, "bytes": 7},
                        "127.0.0.12": {"sockets": 2, "bytes": 7}})
    assert alloc.allocate("p0.5") == "127.0.0.11"
    assert alloc.allocate("p0.1") == "127.0.0.11"  # sticky, whatever the load
    assert alloc.loads() == {"127.0.0.12": {"sockets": 2, "bytes": 7, "pending": 0},
                             "127.0.0.11": {"sockets": 2, "bytes": 7, "pending": 1}}


def test_explicit_uses_each_pcomponents_nic():
    alloc = NicAllocator("explicit", _two_ncomponents(),
                         {"p0": "127.0.0.21", "p1": "127.0.0.12"})
    assert [alloc.allocate(p) for p in ("p0.1", "p1.2", "p0.3")] == \
        ["127.0.0.21", "127.0.0.12", "127.0.0.21"]
    assert _errno(alloc.allocate, "p2.1") == errno.EADDRNOTAVAIL  # no NIC configured


def test_a_configured_nic_pins_its_pcomponent_under_any_policy():
    alloc = NicAllocator("round-robin", _two_ncomponents(), {"p1": "127.0.0.21"})
    got = [alloc.allocate(p) for p in ("p0.1", "p1.2", "p0.3", "p1.4")]
    assert got == ["127.0.0.11", "127.0.0.21", "127.0.0.12", "127.0.0.21"]
    unregistered = NicAllocator("round-robin", _two_ncomponents(), {"p0": "127.0.0.99"})
    assert _errno(unregistered.allocate, "p0.1") == errno.EADDRNOTAVAIL


def test_sticky_map_is_bounded_least_recent_first():
    alloc = NicAllocator("round-robin", _two_ncomponents(), sticky_max=2)
    first = alloc.allocate("p0.1")
    alloc.allocate("p0.2")
    assert alloc.allocate("p0.1") == first  # p0.1 is now the most recent
    alloc.allocate("p0.3")                  # drops p0.2
    assert alloc.allocate("p0.1") == first
    assert alloc.allocate("p0.2") == "127.0.0.11"  # forgotten: a fresh round-robin choice


def test_a_nic_that_left_is_not_kept():
    nics = _registry(n0=["127.0.0.11"])
    alloc = NicAllocator("round-robin", nics)
    assert alloc.allocate("p0.1") == "127.0.0.11"
    nics.register("n0", ["127.0.0.13"])  # the nMonitor restarted with another NIC
    assert alloc.allocate("p0.1") == "127.0.0.13"


def test_errors():
    assert _errno(NicAllocator("round-robin", NicRegistry()).allocate, "p0.1") == \
        errno.EADDRNOTAVAIL
    alloc = NicAllocator("least-loaded", _two_ncomponents())
    for bad in ("p0", "p0.", "p0.0", "p0.-1", "m0.12", "p0.12.3", "p00000.1", 12, None):
        assert _errno(alloc.allocate, bad) == errno.EINVAL, bad
    for report in ({"127.0.0.21": {"sockets": 1, "bytes": 0}},    # n1's NIC
                   {"127.0.0.11": {"sockets": -1, "bytes": 0}},
                   {"127.0.0.11": {"sockets": True, "bytes": 0}},
                   {"127.0.0.11": {"sockets": 1}}, {"127.0.0.11": 3}, {"x": {}}, []):
        assert _errno(alloc.report, "n0", report) == errno.EINVAL, report
    assert _errno(NicAllocator, "random", NicRegistry()) == errno.EINVAL
    assert split_process_id("p12.345") == ("p12", 345)


def test_gnm_allocate_through_fit(client):
    first, _ = client.call_args("global", Op.GNM_ALLOCATE, {"process": "p0.4242"})
    second, _ = client.call_args("global", Op.GNM_ALLOCATE, {"process": "p1.4243"})
    assert {first["ip"], second["ip"]} == {"127.0.0.11", "127.0.0.12"}
    assert first["id"] == second["id"] == "n0"
    again, _ = client.call_args("global", Op.GNM_ALLOCATE, {"process": "p0.4242"})
    assert again == first
    for bad in ({"process": "nope"}, {}):
        with pytest.raises(OSError) as info:
            client.call_args("global", Op.GNM_ALLOCATE, bad)
        assert info.value.errno == errno.EINVAL
    stats, _ = client.call_args("global", Op.STATS)
    assert stats["nic_policy"] == "round-robin"
    assert set(stats["nic_loads"]) == {"127.0.0.11", "127.0.0.12"}


def test_spec_policy_pinned_nics_and_load_reports_reach_gnm(run_root, tmp_path):
    """n0's load reports steer least-loaded. The test plays n0: on ZeroMQ, which takes
    an endpoint's word for who it is (on shm only n0 itself may: test_global.py)."""
    spec = small_spec(str(tmp_path), nic_policy="least-loaded", transport="zmq")
    spec["pcomponent"][1]["nic"] = "127.0.0.11"
    with Rack(spec) as rack:
        ep = rack.endpoint()

        def n0_load() -> dict:
            listing, _ = ep.call_args("global", Op.LIST)
            return next(c for c in listing["components"] if c["id"] == "n0")["load"]

        # n0's own first report (at its first tick) would overwrite the test's; it
        # reports again only when its load changes, which nothing here makes it do
        wait_until(lambda: "nics" in n0_load())
        report = {"nics": {"127.0.0.11": {"sockets": 0, "bytes": 0},
                           "127.0.0.12": {"sockets": 4, "bytes": 0}}}
        ep.send("global", Op.LOAD_REPORT, codec.encode({"id": "n0", "load": report}))
        assert ep.call_args("global", Op.GNM_ALLOCATE, {"process": "p0.7"})[0]["ip"] == \
            "127.0.0.11"
        report["nics"]["127.0.0.11"]["sockets"] = 9
        ep.send("global", Op.LOAD_REPORT, codec.encode({"id": "n0", "load": report}))
        assert ep.call_args("global", Op.GNM_ALLOCATE, {"process": "p0.8"})[0]["ip"] == \
            "127.0.0.12"
        assert ep.call_args("global", Op.GNM_ALLOCATE, {"process": "p1.9"})[0]["ip"] == \
            "127.0.0.11"  # p1's configured NIC, whatever the load
        assert n0_load()["nics"]["127.0.0.11"]["sockets"] == 9
