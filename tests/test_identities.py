"""Identity attacks on the shm rack: a program run on p1 (`splitrack run`) that lies
about its FIT id to reach another process's memory. Each lie must fail with EPERM
(PermissionError) and bump a counter of the component lied to, and the victim's
memory must stay as it was:
- a claim naming another process's pid (p0.VICTIM): refused at the rendezvous;
- a component's id (n9: none such; n0, p0, global: real ids, not its pid): refused
  on the link's first message (the monitor's vouch);
- its own id, vouched for, naming another process's pid in M_MISS, M_FETCH or
  M_WRITEBACK (m0's data plane, which answers them in C, must leave them to
  Python's rules: EPERM; a write-back of another pComponent's process dropped);
- p0.OWN_PID, the right pid but the wrong pComponent: p0 does not vouch for it
  (P_VOUCH), and will not let it attach (P_ATTACH: it descends from p1's pMonitor),
  nor a child of the program that outlived it;
- while an honest program on p1 allocates, writes, flushes and reads as usual.
The victim is this test process, attached to p0 (VirtualMemory.attach).
"""

import textwrap

import pytest

from fit_rpc import Op
from helpers import running_rack, small_spec
from netprogs import environ, run_on_rack
from splitrack.guest.vm import VirtualMemory

EPERM = "PermissionError 1"

# What every attacker starts with: the rack's directory, endpoints posing as
# another (an honest one finds the way: RESOLVE), and a way to try things and
# print how they ended.
PRELUDE = textwrap.dedent("""
    import os, sys
    from fit_rpc import Endpoint, Op
    from fit_rpc.netpath import DMA_MAP
    from fit_rpc.pages import MISS, pack_writeback
    G = os.environ["SPLITRACK_GLOBAL"]
    VICTIM, ADDR, LINE = (int(a) for a in sys.argv[1:4])
    VPAGE = ADDR // LINE

    def posing_as(claim):   # told the way by an honest endpoint
        ep = Endpoint(claim, None, directory=G)
        with Endpoint(f"cli.{os.getpid()}.1", None, directory=G) as guide:
            for cid in ("p0", "m0"):
                ep.add_peer(cid, guide.resolve(cid))
        return ep

    def attempt(name, fn):
        try:
            fn()
            print(name, "ok", flush=True)
        except OSError as exc:
            print(name, type(exc).__name__, exc.errno, flush=True)
""")

ANOTHER_PID = PRELUDE + textwrap.dedent("""
    ep = posing_as(f"p0.{VICTIM}")
    attempt("alloc", lambda: ep.call_args("m0", Op.M_ALLOC,
                                          {"pid": VICTIM, "start": ADDR << 1, "length": LINE}))
    attempt("miss", lambda: ep.call("m0", Op.M_MISS, MISS.pack(VICTIM, VPAGE, 0, 0)))
    attempt("free", lambda: ep.call_args("m0", Op.M_FREE, {"pid": VICTIM, "start": ADDR}))
    attempt("release", lambda: ep.call_args("m0", Op.M_RELEASE, {"pid": VICTIM}))
    attempt("attach", lambda: ep.call_args("p0", Op.P_ATTACH, {"pid": VICTIM}))
""")

COMPONENT_IDS = PRELUDE + textwrap.dedent("""
    for claim in ("n9", "n0", "p0", "global"):
        ep = posing_as(claim)
        attempt(claim + ".dma_read", lambda: ep.call("m0", Op.M_DMA_MAP,
                                                     DMA_MAP.pack(VICTIM, ADDR, 16, 0)))
        attempt(claim + ".dma_write", lambda: ep.call("m0", Op.M_DMA_MAP,
                                                      DMA_MAP.pack(VICTIM, ADDR, 16, 1)))
        attempt(claim + ".writeback", lambda: ep.call(
            "m0", Op.M_WRITEBACK, pack_writeback(VICTIM, [VPAGE], [b"\\xee" * LINE])))
        attempt(claim + ".arena", lambda: ep.map_region("m0", "arena"))
        attempt(claim + ".release", lambda: ep.call_args("m0", Op.M_RELEASE, {"pid": VICTIM}))
        ep.close()
""")

WRONG_PCOMPONENT = PRELUDE + textwrap.dedent("""
    me = os.getpid()
    ep = posing_as(f"p0.{me}")
    print("pid", me, flush=True)
    attempt("writeback", lambda: ep.call(
        "m0", Op.M_WRITEBACK, pack_writeback(VICTIM, [VPAGE], [b"\\xee" * LINE])))
    attempt("miss_victim", lambda: ep.call(
        "m0", Op.M_MISS, MISS.pack(me, 0, VICTIM, VPAGE) + b"\\xee" * LINE))
""")

# Itself, vouched for, asking m0 for the victim's line: its link's first message is
# Python's (the vouch), the rest meet m0's data plane (native/mplane.h) first.
OWN_ID_OTHER_PID = PRELUDE + textwrap.dedent("""
    from fit_rpc.pages import FETCH
    ep = posing_as(f"p1.{os.getpid()}")
    for i in range(3):
        attempt(f"miss{i}", lambda: ep.call("m0", Op.M_MISS, MISS.pack(VICTIM, VPAGE, 0, 0)))
        attempt(f"fetch{i}", lambda: ep.call("m0", Op.M_FETCH, FETCH.pack(VICTIM, VPAGE, 2)))
        attempt(f"writeback{i}", lambda: ep.call(   # (another pComponent's victim: dropped)
            "m0", Op.M_WRITEBACK, pack_writeback(VICTIM, [VPAGE], [b"\\xee" * LINE])))
""")

ATTACH_ELSEWHERE = PRELUDE + textwrap.dedent("""
    me = os.getpid()
    ep = posing_as(f"p0.{me}")
    print("pid", me, flush=True)
    attempt("attach", lambda: ep.call_args("p0", Op.P_ATTACH, {"pid": me}))
    attempt("extcache", lambda: ep.map_region("p0", "extcache"))
""")

# The same, from a child of the program that outlives it (reparented when the program
# ends, so the pMonitor of p1 is no longer among its ancestors).
ORPHAN = PRELUDE + textwrap.dedent("""
    import time
    program = os.getpid()
    if os.fork():
        os._exit(0)   # the program ends; its child lives on
    while os.getppid() == program:
        time.sleep(0.01)
    me = os.getpid()
    ep = posing_as(f"p0.{me}")
    print("pid", me, flush=True)
    attempt("attach", lambda: ep.call_args("p0", Op.P_ATTACH, {"pid": me}))
    attempt("writeback", lambda: ep.call(
        "m0", Op.M_WRITEBACK, pack_writeback(VICTIM, [VPAGE], [b"\\xee" * LINE])))
""")

HONEST = textwrap.dedent("""
    import os
    from splitrack.guest import vm
    size = 64 * 4096
    addr = vm.alloc(size)
    data = os.urandom(size)
    vm.write(addr, data)
    print("flushed", vm.flush(addr, size), flush=True)
    vm.invalidate(addr, size)
    assert vm.read(addr, size) == data, "stale bytes"
    vm.free(addr)
    print("ok", flush=True)
""")


@pytest.fixture(scope="module")
def ids_rack():
    with running_rack(lambda storage: small_spec(storage, name="ids")) as rack:
        yield rack, environ(rack)


@pytest.fixture(scope="module")
def victim(ids_rack):
    """This process as a process of p0, with a known pattern written back to m0."""
    rack, _ = ids_rack
    vm = VirtualMemory.attach(rack, "p0")
    size = 4 * vm.line
    addr = vm.alloc(size)
    pattern = bytes(range(256)) * (size // 256)
    vm.write(addr, pattern)
    assert vm.flush(addr, size) == 4
    yield vm, addr, pattern
    vm.close()


def intact(victim) -> bool:
    """Whether the victim's bytes at m0 are still its own (read back past the cache)."""
    vm, addr, pattern = victim
    vm.invalidate(addr, len(pattern))
    return vm.read(addr, len(pattern)) == pattern


def stats(rack, cid: str) -> dict:
    with rack.endpoint() as ep:
        return ep.call_args(cid, Op.STATS)[0]


def attack(ids_rack, victim, program: str) -> dict[str, str]:
    """Run `program` on p1 against the victim; its lines: {name: outcome}."""
    rack, env = ids_rack
    vm, addr, _ = victim
    proc = run_on_rack(env, program, str(vm.pid), str(addr), str(vm.line), on="p1", name="ids")
    assert proc.returncode == 0, proc.stderr
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines())


def test_a_claim_of_another_processs_pid_is_refused_at_the_rendezvous(ids_rack, victim):
    rack, _ = ids_rack
    before = {c: stats(rack, c)["errors"].get("forged", 0) for c in ("m0", "p0")}
    results = attack(ids_rack, victim, ANOTHER_PID)
    assert results == {op: EPERM for op in ("alloc", "miss", "free", "release", "attach")}
    assert stats(rack, "m0")["errors"]["forged"] >= before["m0"] + 4
    assert stats(rack, "p0")["errors"]["forged"] >= before["p0"] + 1
    assert intact(victim)


def test_a_component_id_that_is_not_its_own_is_refused(ids_rack, victim):
    rack, _ = ids_rack
    before = stats(rack, "m0")
    results = attack(ids_rack, victim, COMPONENT_IDS)
    ops = ("dma_read", "dma_write", "writeback", "arena", "release")
    claims = ("n9", "n0", "p0", "global")
    assert results == {f"{claim}.{op}": EPERM for claim in claims for op in ops}
    after = stats(rack, "m0")
    assert after["errors"]["forged"] >= before["errors"].get("forged", 0) + 20
    assert after["memory"]["dma_read_bytes"] == before["memory"]["dma_read_bytes"]
    assert after["memory"]["dma_write_bytes"] == before["memory"]["dma_write_bytes"]
    assert intact(victim)


def test_its_own_id_naming_another_processs_pages_is_refused(ids_rack, victim):
    rack, _ = ids_rack
    before = stats(rack, "m0")["memory"]["victims_dropped"]
    results = attack(ids_rack, victim, OWN_ID_OTHER_PID)
    assert results == {f"{op}{i}": EPERM if op != "writeback" else "ok"
                       for i in range(3) for op in ("miss", "fetch", "writeback")}
    assert stats(rack, "m0")["memory"]["victims_dropped"] == before + 3
    assert intact(victim)


def test_the_right_pid_under_the_wrong_pcomponent_is_not_vouched_for(ids_rack, victim):
    rack, _ = ids_rack
    before_m0, before_p0 = stats(rack, "m0"), stats(rack, "p0")
    results = attack(ids_rack, victim, WRONG_PCOMPONENT)
    assert results.pop("pid").isdigit()
    assert results == {"writeback": EPERM, "miss_victim": EPERM}
    after_m0, after_p0 = stats(rack, "m0"), stats(rack, "p0")
    assert after_m0["errors"]["forged"] >= before_m0["errors"].get("forged", 0) + 2
    vouches = after_p0["links"]["m0"]["P_VOUCH"]["rx_msgs"]   # m0 asked p0, p0 said no
    assert vouches > before_p0["links"].get("m0", {}).get("P_VOUCH", {}).get("rx_msgs", 0)
    assert after_m0["memory"]["victims"] == before_m0["memory"]["victims"]
    assert after_m0["memory"]["writebacks"] == before_m0["memory"]["writebacks"]
    assert intact(victim)


def test_a_process_of_p1_cannot_attach_to_p0(ids_rack, victim):
    rack, _ = ids_rack
    before = stats(rack, "p0")["errors"]
    results = attack(ids_rack, victim, ATTACH_ELSEWHERE)
    pid = int(results.pop("pid"))
    assert results == {"attach": EPERM, "extcache": EPERM}
    after = stats(rack, "p0")
    assert after["errors"]["forged"] >= before.get("forged", 0) + 1
    assert after["errors"]["region_refused"] >= before.get("region_refused", 0) + 1
    assert str(pid) not in after["extcache"]["processes"]
    with rack.endpoint() as ep:
        assert pid not in ep.call_args("p0", Op.P_PROCESSES)[0]["processes"]
    assert intact(victim)


def test_the_honest_path_still_works(ids_rack, victim):
    rack, env = ids_rack
    before = {c: stats(rack, c)["errors"].get("forged", 0) for c in ("m0", "p1")}
    proc = run_on_rack(env, HONEST, on="p1", name="ids")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["flushed", "64", "ok"]
    assert {c: stats(rack, c)["errors"].get("forged", 0) for c in ("m0", "p1")} == before
    assert intact(victim)


def test_an_orphaned_child_of_a_p1_program_cannot_attach_to_p0(ids_rack, victim):
    """A program's child that outlives it is reparented to p1's pMonitor (a child
    subreaper), not to init: it still descends from p1's pMonitor, so it does not
    become a process of p0 (and cannot write back p0's victims)."""
    rack, _ = ids_rack
    vm, _, _ = victim
    addr = vm.alloc(vm.line)   # a region of its own: the rest of the module is spared
    pattern = b"\x5a" * vm.line
    vm.write(addr, pattern)
    vm.flush(addr, vm.line)
    results = attack(ids_rack, (vm, addr, pattern), ORPHAN)
    pid = int(results.pop("pid"))
    assert results == {"attach": EPERM, "writeback": EPERM}
    with rack.endpoint() as ep:
        assert pid not in ep.call_args("p0", Op.P_PROCESSES)[0]["processes"]
    assert intact((vm, addr, pattern))
