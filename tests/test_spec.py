"""Rack spec validation: every bad field gets a one-line error that names it."""

import os

import pytest

from helpers import small_spec
from splitrack import SpecError, default_spec, load_spec


def test_default_spec_is_the_documented_rack():
    spec = default_spec()
    assert spec.name == "default"
    assert spec.ids() == ["p0", "p1", "m0", "n0", "s0"]
    n0 = next(c for c in spec.components if c["id"] == "n0")
    assert n0["nics"] == ["127.0.0.11", "127.0.0.12"]
    p0 = spec.components[0]
    assert (p0["extcache"], p0["ways"]) == (64 << 20, 8)
    assert spec.components[2]["memory"] == 2 << 30
    assert (spec.transport, spec.poll_us, spec.mode, spec.shortcuts, spec.endpoints) == (
        "shm", 200, "ddio", True, "ipc")
    assert (spec.nic_policy, spec.loopback, n0["dram"], p0["nic"], spec.gmm_policy) == (
        "round-robin", "127.0.0.10", 512 << 20, None, "least-used")


def test_to_json_puts_global_first():
    comps = default_spec().to_json()["components"]
    assert comps[0] == {"id": "global", "kind": "global"}


def test_network_keys_reach_to_json(tmp_path):
    spec = small_spec(str(tmp_path), nic_policy="explicit", loopback="127.0.0.9")
    spec["pcomponent"][0]["nic"] = "127.0.0.11"
    spec["pcomponent"][1]["nic"] = "127.0.0.12"
    spec["ncomponent"][0]["dram"] = "1MiB"
    out = load_spec(spec).to_json()
    assert (out["rack"]["nic_policy"], out["rack"]["loopback"]) == ("explicit", "127.0.0.9")
    comps = {c["id"]: c for c in out["components"]}
    assert (comps["p0"]["nic"], comps["p1"]["nic"]) == ("127.0.0.11", "127.0.0.12")
    assert comps["n0"]["dram"] == 1 << 20


def test_victim_entries_are_optional_and_reach_to_json(tmp_path):
    spec = small_spec(str(tmp_path))
    spec["pcomponent"][1]["victim"] = 8   # LegoOS's PCACHE_EVICTION_VICTIM entries
    comps = {c["id"]: c for c in load_spec(spec).to_json()["components"]}
    assert (comps["p0"]["victim"], comps["p1"]["victim"]) == (0, 8)
    assert default_spec().components[0]["victim"] == 0


def test_spec_file_relative_root_is_relative_to_the_file(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('[rack]\nname = "x"\n[[pcomponent]]\nid = "p0"\nextcache = 4096\nways = 1\n'
                 '[[mcomponent]]\nid = "m0"\nmemory = "1MB"\n'
                 '[[scomponent]]\nid = "s0"\nroot = "data"\n')
    spec = load_spec(f)
    assert spec.components[-1]["root"] == str(tmp_path / "data")
    assert spec.components[1]["memory"] == 10**6


def test_split_cpus_gives_ncomponents_the_first_cpu_and_programs_the_others(tmp_path):
    host = sorted(os.sched_getaffinity(0))
    split = {c["id"]: c["cpus"] for c in load_spec(small_spec(str(tmp_path), split_cpus=True)
                                                   ).components if c["kind"] in "pn"}
    if len(host) < 2:   # one CPU: nothing to split
        assert set(map(str, split.values())) == {"None"}
    else:
        assert split == {"p0": host[1:], "p1": host[1:], "n0": host[:1]}
    off = load_spec(small_spec(str(tmp_path)))   # the default: the host's scheduler places
    assert [c.get("cpus") for c in off.components if c["kind"] in "pn"] == [None] * 3
    assert off.split_cpus is False and default_spec().split_cpus is False
    mine = small_spec(str(tmp_path), split_cpus=True)   # a spec that pins anything: as written
    mine["ncomponent"][0]["cpus"] = [host[-1]]
    comps = {c["id"]: c for c in load_spec(mine).to_json()["components"]}
    assert (comps["n0"]["cpus"], comps["p0"]["cpus"], comps["p1"]["cpus"]) == (
        [host[-1]], None, None)
    assert load_spec(mine).to_json()["rack"]["split_cpus"] is True


def _err(mutate, tmp_path) -> str:
    spec = small_spec(str(tmp_path))
    mutate(spec)
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s["ncomponent"][0]["nics"].append("127.0.0.300"),
     "ncomponent[0].nics[2]: '127.0.0.300' is not an IPv4 address"),
    (lambda s: s["ncomponent"][0]["nics"].append("127.0.0.1"),
     "ncomponent[0].nics[2]: 127.0.0.1 is the rack's own loopback"),
    (lambda s: s["ncomponent"][0]["nics"].append("8.8.8.8"),   # TEST-NET-1 below, too
     "ncomponent[0].nics[2]: 8.8.8.8 is not an address of this host"),
    (lambda s: s["ncomponent"][0]["nics"].append("192.0.2.7"),
     "ncomponent[0].nics[2]: 192.0.2.7 is not an address of this host"),
    (lambda s: s["pcomponent"][0].update(extcache="lots"), "pcomponent[0].extcache: 'lots'"),
    (lambda s: s["pcomponent"][1].update(ways=0), "pcomponent[1].ways: 0 is not a positive"),
    (lambda s: s["pcomponent"][0].update(victim=-1),
     "pcomponent[0].victim: -1 is not a number of victim-cache entries (0..64; 0: none)"),
    (lambda s: s["pcomponent"][0].update(victim="8"),
     "pcomponent[0].victim: '8' is not a number of victim-cache entries"),
    (lambda s: s["pcomponent"][1].update(victim=65), "pcomponent[1].victim: 65 is not a number"),
    (lambda s: s["pcomponent"][1].update(victim=True), "pcomponent[1].victim: True is not a num"),
    (lambda s: s["pcomponent"][1].update(id="q1"), "pcomponent[1].id: 'q1' is not p<number>"),
    (lambda s: s["pcomponent"][1].update(id="p0"), "p0: component id used twice"),
    (lambda s: s["mcomponent"][0].update(memory=-5), "mcomponent[0].memory: -5 must be positive"),
    (lambda s: s["mcomponent"][0].pop("memory"), "mcomponent[0].memory: missing"),
    (lambda s: s["mcomponent"][0].update(colour="red"), "mcomponent[0].colour: unknown key"),
    (lambda s: s.update(mcomponent=[]), "mcomponent: a rack needs at least one mcomponent"),
    (lambda s: s.update(gcomponent=[]), "gcomponent: unknown section"),
    (lambda s: s["rack"].update(mode="fast"), "rack.mode: 'fast' is not one of dma, ddio"),
    (lambda s: s["rack"].update(transport="verbs"), "rack.transport: 'verbs' is not available"),
    (lambda s: s["rack"].update(shortcuts="yes"), "rack.shortcuts: must be true or false"),
    (lambda s: s["rack"].update(split_cpus=1), "rack.split_cpus: must be true or false, not 1"),
    (lambda s: s["ncomponent"][0].update(cpus=[4096]), "ncomponent[0].cpus[0]: no CPU 4096"),
    (lambda s: s["ncomponent"][0].update(cpus=[]), "ncomponent[0].cpus: must be a non-empty"),
    (lambda s: s["rack"].update(name="Bad Name"), "rack.name: 'Bad Name' is not 1-32"),
    (lambda s: s["rack"].update(speed=1), "rack.speed: unknown key"),
    (lambda s: s["ncomponent"].append({"id": "n1", "nics": ["127.0.0.12"]}),
     "n1.nics: 127.0.0.12 is also a NIC of n0"),
    (lambda s: s["scomponent"][0].update(root=""), "scomponent[0].root: must be a non-empty"),
    (lambda s: s["rack"].update(nic_policy="random"),
     "rack.nic_policy: 'random' is not one of round-robin, least-loaded, explicit"),
    (lambda s: s["rack"].update(gmm_policy="random"),
     "rack.gmm_policy: 'random' is not one of least-used, fewest-misses"),
    (lambda s: s["rack"].update(loopback="10.0.0.1"), "rack.loopback: 10.0.0.1 is not an address"),
    (lambda s: s["rack"].update(loopback="127.0.0.1"), "rack.loopback: 127.0.0.1 is not an addr"),
    (lambda s: s["rack"].update(loopback="localhost"), "rack.loopback: 'localhost' is not an IPv4"),
    (lambda s: s["rack"].update(loopback="127.0.0.12"), "rack.loopback: 127.0.0.12 is a NIC of n0"),
    (lambda s: s["pcomponent"][0].update(nic="127.0.0.99"),
     "p0.nic: 127.0.0.99 is not a NIC of any ncomponent"),
    (lambda s: s["pcomponent"][1].update(nic=11), "pcomponent[1].nic: 11 is not an IPv4 address"),
    (lambda s: (s["rack"].update(nic_policy="explicit"),
                s["pcomponent"][0].update(nic="127.0.0.11")),
     "p1.nic: missing (rack.nic_policy is 'explicit')"),
    (lambda s: s["ncomponent"][0].update(dram="512KiB"),
     "ncomponent[0].dram: 524288 B is less than 1MiB"),
    (lambda s: s["ncomponent"][0].update(dram="big"), "ncomponent[0].dram: 'big' is not a size"),
])
def test_bad_field_is_named(tmp_path, mutate, expected):
    msg = _err(mutate, tmp_path)
    assert msg.startswith("<dict>: ")
    assert expected in msg


def test_unreadable_and_invalid_toml_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[rack\n")
    with pytest.raises(SpecError, match="bad.toml: not valid TOML"):
        load_spec(bad)


def test_sizes_accept_units(tmp_path):
    spec = small_spec(str(tmp_path))
    spec["pcomponent"][0]["extcache"] = "512KiB"
    spec["mcomponent"][0]["memory"] = "2GiB"
    loaded = load_spec(spec)
    assert loaded.components[0]["extcache"] == 512 * 1024
    assert loaded.components[2]["memory"] == 2 << 30
