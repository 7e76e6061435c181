"""Every example in examples/ runs, on its own default rack, and says what it should."""

import os
import socket
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def run_example(name, run_root, tmp_path):
    env = dict(os.environ, SPLITRACK_RUN_ROOT=run_root, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_example_has_a_test():
    assert sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py")) == \
        ["hello_rack.py", "socket_echo.py", "storage.py", "vm_hello.py"]


def test_hello_rack(run_root, tmp_path):
    out = run_example("hello_rack.py", run_root, tmp_path)
    for cid in ("global", "p0", "p1", "m0", "n0", "s0"):
        assert f"\n{cid:<7} pid" in "\n" + out
    assert "median RTT" in out


def test_storage(run_root, tmp_path):
    out = run_example("storage.py", run_root, tmp_path)
    assert out.startswith("hello, split kernel\n['hello.txt']\nrefused:")
    stored = tmp_path / "data" / "splitrack" / "default" / "rack-storage" / "hello.txt"
    assert stored.read_text() == "hello, split kernel\n"


def test_vm_hello_on_the_rack(run_root, tmp_path):
    env = dict(os.environ, SPLITRACK_RUN_ROOT=run_root, XDG_DATA_HOME=str(tmp_path / "data"))
    splitrack = os.path.join(os.path.dirname(sys.executable), "splitrack")
    proc = subprocess.run([splitrack, "run", "--on", "p0", "--", sys.executable,
                           os.path.join(EXAMPLES, "vm_hello.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "flushed lines: 1"
    assert lines[1] == "hello from the split kernel"
    counts = eval(lines[2])  # a dict literal printed by the example
    assert counts["zerofills"] == 1 and counts["fetches"] == 1 and counts["flushes"] == 1


def test_socket_echo_on_the_rack(run_root, tmp_path):
    env = dict(os.environ, SPLITRACK_RUN_ROOT=run_root, XDG_DATA_HOME=str(tmp_path / "data"))
    splitrack = os.path.join(os.path.dirname(sys.executable), "splitrack")
    up = subprocess.run([splitrack, "up", "--detach"], env=env, capture_output=True, timeout=60)
    assert up.returncode == 0, up.stderr
    server = subprocess.Popen([splitrack, "run", "--on", "p0", "--", sys.executable,
                               os.path.join(EXAMPLES, "socket_echo.py"), "127.0.0.11", "0"],
                              env=env, stdout=subprocess.PIPE, text=True, cwd="/tmp")
    try:
        line = server.stdout.readline()
        assert line.startswith("echoing on 127.0.0.11:") and "BsdSocketStub" in line, line
        port = int(line.split(":")[1].split()[0])
        with socket.create_connection(("127.0.0.11", port), timeout=30) as sock:
            sock.sendall(b"split kernel")
            assert sock.recv(100) == b"split kernel"
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()
        subprocess.run([splitrack, "down"], env=env, capture_output=True, timeout=60)


@pytest.mark.parametrize("name", ["hello_rack.py", "socket_echo.py", "storage.py",
                                  "vm_hello.py"])
def test_examples_have_docstrings(name):
    with open(os.path.join(EXAMPLES, name)) as f:
        assert f.read().startswith('"""')
