"""`splitrack run --memory rack`: a Python program's heap in rack pages, faulted in
by its pager thread through the pComponent's extCache, on real racks.

p0's extCache here is 2 MiB (512 lines): the programs below use several times
that, so their pages are evicted, written back and missed back all the time.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from fit_rpc import Op
from helpers import SPLITRACK, running_rack, small_spec, wait_until

SCRATCH = "/tmp"   # (not the checkout: its packages lack the built extensions)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 and open(
    "/proc/sys/vm/unprivileged_userfaultfd").read().strip() != "1",
    reason="userfaultfd for kernel faults needs root or vm.unprivileged_userfaultfd=1")


def _spec(storage, name="rmem", **rack):
    spec = small_spec(storage, name=name, **rack)
    spec["pcomponent"][0].update(extcache="2MiB", ways=8)
    spec["mcomponent"] = [{"id": "m0", "memory": "256MiB"}]
    return spec


@pytest.fixture(scope="module")
def rack_env():
    with running_rack(_spec) as rack:
        yield rack, dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)


def run(env, name, code, *args, timeout=120):
    return subprocess.run([SPLITRACK, "run", "--name", name, "--on", "p0", "--memory", "rack",
                           *args, "--", sys.executable, "-c", textwrap.dedent(code)],
                          env=env, cwd=SCRATCH, capture_output=True, text=True,
                          timeout=timeout)


def m0(rack):
    with rack.endpoint() as ep:
        return ep.call_args("m0", Op.STATS)[0]["memory"]


def p0_processes(rack):
    with rack.endpoint() as ep:
        return ep.call_args("p0", Op.P_PROCESSES)[0]["processes"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The C programs of tests/c these tests run, built with the machine's C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on this machine"
    out, programs = tmp_path_factory.mktemp("c"), {}
    for name in ("rackheap", "echo_server", "echo_client"):
        programs[name] = str(out / name)
        subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", programs[name],
                        os.path.join(os.path.dirname(__file__), "c", f"{name}.c")], check=True)
    return programs


STATS = "print(json.dumps({'pager': rackmem.stats(), 'xc': vm.counters()}))"


def test_heap_lives_in_rack_pages_and_survives_eviction(rack_env):
    rack, env = rack_env
    proc = run(env, "rmem", """
        import hashlib, json
        from splitrack.guest import rackmem, vm
        assert rackmem.installed()
        blobs = [hashlib.sha256(str(i).encode()).digest() * 128 for i in range(3000)]  # 12 MB
        table = {i: str(i) * 10 for i in range(50_000)}
        for _ in range(2):
            assert all(b == hashlib.sha256(str(i).encode()).digest() * 128
                       for i, b in enumerate(blobs))
            assert all(table[i] == str(i) * 10 for i in range(50_000))
        """ + STATS)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    pager, xc = got["pager"], got["xc"]
    assert pager["evictions"] > 1000 and pager["writebacks"] > 1000 and pager["misses"] > 1000
    assert pager["resident"] <= 512   # never more pages mapped than the extCache has lines
    assert pager["write_faults"] > 0 and pager["reserved"] >= pager["in_use"] > 12_000_000
    # the process's extCache counters are the pager's misses and evictions too
    assert xc["evictions"] >= pager["evictions"] and xc["zerofills"] >= pager["zero_fills"]
    assert xc["fetches"] >= pager["misses"]


def test_faults_the_kernel_takes_for_the_program_are_served(rack_env, tmp_path):
    rack, env = rack_env
    data = os.urandom(6 << 20)
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(data)
    proc = run(env, "rmem", f"""
        import json
        from splitrack.guest import rackmem, vm
        buf = bytearray({len(data)})            # fresh pages, none mapped yet
        with open({str(src)!r}, "rb") as f:     # the kernel writes them (copy_to_user)
            assert f.readinto(buf) == len(buf)
        churn = [bytes([i % 256]) * 4096 for i in range(2000)]   # evicts buf's pages
        with open({str(dst)!r}, "wb") as f:     # the kernel reads them (copy_from_user)
            f.write(buf)
        """ + STATS)
    assert proc.returncode == 0, proc.stderr
    assert dst.read_bytes() == data
    assert json.loads(proc.stdout)["pager"]["misses"] > 500


def test_a_heap_its_home_cannot_hold_is_a_memory_error(rack_env):
    rack, env = rack_env
    proc = run(env, "rmem", """
        try:
            big = bytearray(1 << 30)   # m0 has 256 MiB
        except MemoryError:
            print("MemoryError")
        print(sum(len(str(i)) for i in range(100_000)))   # and the program goes on
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["MemoryError", "488890"]


def test_fork_is_refused_and_subprocess_works(rack_env):
    rack, env = rack_env
    proc = run(env, "rmem", """
        import errno, os, subprocess
        for fork in (os.fork, os.forkpty):
            try:
                fork()
            except OSError as exc:
                print("refused", exc.errno == errno.EOPNOTSUPP)
        print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused", "True", "refused", "True", "child"]


def test_nothing_is_left_behind_after_exit_or_kill(rack_env, built):
    rack, env = rack_env
    wait_until(lambda: not p0_processes(rack) and m0(rack)["processes"] == 0)
    frames = m0(rack)["frames_used"]
    done = run(env, "rmem", "blobs = [bytes([i % 256]) * 4096 for i in range(3000)]")
    native = subprocess.run([SPLITRACK, "run", "--name", "rmem", "--on", "p0", "--memory",
                             "rack", "--", built["rackheap"], "12"], env=env, cwd=SCRATCH,
                            capture_output=True, timeout=120)
    assert native.returncode == 0, native.stderr
    killed = run(env, "rmem", """
        import os
        blobs = [bytes([i % 256]) * 4096 for i in range(3000)]
        os.kill(os.getpid(), 9)   # with dirty pages, write-backs at m0, pinned lines
        """)
    assert done.returncode == 0 and killed.returncode == 128 + 9, done.stderr + killed.stderr
    wait_until(lambda: not p0_processes(rack) and m0(rack)["processes"] == 0)
    assert m0(rack)["frames_used"] == frames
    with rack.endpoint() as ep:
        assert ep.call_args("p0", Op.STATS)[0]["extcache"]["processes"] == {}


def p0_extcache(rack):
    with rack.endpoint() as ep:
        return ep.call_args("p0", Op.STATS)[0]["extcache"]["total"]


@pytest.mark.parametrize("memory", ["rack", "host"])
def test_a_native_programs_malloc_and_mmap_are_rack_pages(rack_env, built, memory):
    rack, env = rack_env
    before = p0_extcache(rack)
    proc = subprocess.run([SPLITRACK, "run", "--name", "rmem", "--on", "p0", "--memory", memory,
                           "--", built["rackheap"], "12"], env=env, cwd=SCRATCH,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split("\n")
    blocks, in_rack = (int(word) for word in lines[0].split()[1::2])
    assert lines[1:4] == ["huge: ENOMEM ENOMEM ENOMEM intact", "protected: ok",
                          "realloc 0: NULL"], proc.stdout   # as glibc's
    if memory == "host":
        assert in_rack == 0 and lines[4] == "fork: made a child"
        return
    # every block in the rack heap, 12 MiB through a 2 MiB extCache with the bytes right
    assert blocks > 200 and in_rack == blocks, proc.stdout
    # its lines fetched from m0 and evicted, in p0's totals once its pMonitor saw it end
    wait_until(lambda: p0_extcache(rack)["fetches"] - before["fetches"] > 2000)
    assert p0_extcache(rack)["evictions"] - before["evictions"] > 2000
    assert lines[4:6] == ["fork: EOPNOTSUPP", "ok"] and "fork() of a program with --memory " \
        "rack" in proc.stderr


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_native_programs_with_rack_memory_talk_through_the_rack(rack_env, built, mode):
    rack, env = rack_env
    command = [SPLITRACK, "run", "--name", "rmem", "--on", "p0", "--memory", "rack", "--mode",
               mode, "--"]
    server = subprocess.Popen([*command, built["echo_server"], "127.0.0.11", "0", "epoll", "1"],
                              env=env, cwd=SCRATCH, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().split()[1]
        client = subprocess.run([*command, built["echo_client"], "127.0.0.11", port, "4000000",
                                 "65536"], env=env, cwd=SCRATCH, capture_output=True, text=True,
                                timeout=120)
        assert client.returncode == 0, client.stdout + client.stderr
        assert client.stdout.split()[:2] == ["ok", "4000000"]
        assert server.wait(timeout=60) == 0, server.stderr.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_what_c_code_mallocs_in_a_python_program_is_rack_memory(rack_env):
    rack, env = rack_env
    proc = run(env, "rmem", """
        import ctypes, mmap
        import numpy
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        array = numpy.arange(3_000_000, dtype=numpy.int64)   # 24 MB: numpy's malloc
        anonymous = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE)
        anonymous[:5] = b"hello"
        from splitrack.guest import rackmem   # (glibc's own heap may lie in [lo, hi) too)
        lo = rackmem.lib.rm_base()
        hi = lo + rackmem.lib.rm_reserve()
        where = [libc.malloc(100), array.ctypes.data,
                 ctypes.addressof(ctypes.c_char.from_buffer(anonymous))]
        print(all(lo <= a < hi for a in where), int(array.sum()) == 2_999_999 * 1_500_000,
              anonymous[:5] == b"hello")
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]


def test_pager_that_loses_its_home_ends_the_program_saying_why():
    with running_rack(lambda s: _spec(s, name="rmdead")) as rack:
        env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
        child = subprocess.Popen(
            [SPLITRACK, "run", "--name", "rmdead", "--on", "p0", "--memory", "rack", "--",
             sys.executable, "-c", textwrap.dedent("""
                import sys, time
                blobs = [bytes([i % 256]) * 4096 for i in range(3000)]
                print("ready", flush=True)
                while True:   # pages in and out of the 2 MiB extCache, through m0
                    assert all(b[0] == i % 256 for i, b in enumerate(blobs))
             """)], env=env, cwd=SCRATCH, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        try:
            assert child.stdout.readline() == "ready\n"
            os.kill(rack.components["m0"]["pid"], signal.SIGKILL)
            out, err = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == 71, err
        assert "splitrack: rack memory: mComponent 0" in err


def test_rack_memory_refuses_the_zmq_transport():
    with running_rack(lambda s: _spec(s, name="rmzmq", transport="zmq")) as rack:
        env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
        proc = run(env, "rmzmq", "print('ran')")
        assert proc.returncode == 127 and proc.stdout == ""
        assert "--memory rack: rack memory needs the shm transport" in proc.stderr
        native = subprocess.run([SPLITRACK, "run", "--name", "rmzmq", "--memory", "rack", "--",
                                 "sh", "-c", "echo ran"], env=env, cwd=SCRATCH,
                                capture_output=True, text=True, timeout=60)
        assert native.returncode == 127 and native.stdout == ""
        assert native.stderr.count("--memory rack: rack memory needs the shm transport") == 1


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_sockets_and_a_paging_heap_share_the_extcache_to_the_end(rack_env, mode):
    """The socket buffers' lines (unpinned) always find a way in sets full of the
    heap's pinned lines; a thread that still runs while the interpreter ends still
    has its faults served (the pager's endpoint and the extCache outlive it)."""
    rack, env = rack_env
    proc = run(env, "rmem", """
        import socket, threading
        srv = socket.socket()
        srv.bind(("127.0.0.11", 0))
        srv.listen()
        got = []
        def serve():
            conn, _ = srv.accept()
            while data := conn.recv(65536):
                got.append(len(data))
        threading.Thread(target=serve, daemon=True).start()
        sock = socket.create_connection(srv.getsockname())
        blobs = []
        for i in range(3000):
            blobs.append(bytes([i % 256]) * 4096)
            sock.sendall(b"x" * 100)
        for _ in range(2):
            assert all(b[0] == i % 256 for i, b in enumerate(blobs))
            sock.sendall(b"y" * 100_000)
        print("ok")
        """, "--mode", mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n" and "rack memory" not in proc.stderr


def test_vm_regions_and_a_paging_heap_together(rack_env):
    """splitrack.guest.vm's misses in a process whose heap is paging: its lines are
    filled in C (rm_xc_fill), never with a set locked across Python that faults;
    its copies to and from heap buffers go through a bounce buffer."""
    rack, env = rack_env
    proc = run(env, "rmem", """
        import random
        from splitrack.guest import vm
        rng = random.Random(5)
        size = 4 << 20   # twice p0's extCache
        addr = vm.alloc(size)
        model = bytearray(size)
        blobs = [bytes([i % 256]) * 4096 for i in range(2000)]
        for i in range(400):
            off = rng.randrange(size - 20_000)
            data = rng.randbytes(rng.randrange(1, 20_000))
            vm.write(addr + off, data)
            model[off:off + len(data)] = data
            if i % 40 == 0:
                assert all(b[0] == j % 256 for j, b in enumerate(blobs))
                vm.flush(addr, size)
            if i % 10 == 0:
                off = rng.randrange(size - 20_000)
                assert vm.read(addr + off, 20_000) == model[off:off + 20_000]
        assert vm.read(addr, size) == model
        print("ok", vm.counters()["evictions"] > 1000)
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok True\n"


def test_an_exec_image_gets_a_heap_of_its_own(rack_env):
    """exec() keeps the pid: the new image's heap goes where the home has no region
    of the old one's, and the old heap's lines leave the extCache as plain lines."""
    rack, env = rack_env
    proc = run(env, "rmem", """
        import os, sys
        blobs = [bytes([i % 256]) * 4096 for i in range(3000)]
        os.execv(sys.executable, [sys.executable, "-c",
                 "from splitrack.guest import rackmem\\n"
                 "blobs = [bytes([i % 7]) * 4096 for i in range(3000)]\\n"
                 "assert all(b[0] == i % 7 for i, b in enumerate(blobs))\\n"
                 "print(rackmem.installed(), rackmem.stats()['evictions'] > 0)"])
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True True\n"
