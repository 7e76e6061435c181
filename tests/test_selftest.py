"""`splitrack selftest`, and the fuzzer it carries run against a rack of our own."""

import json
import random
import subprocess

from helpers import SPLITRACK, running_rack, small_spec
from splitrack.selftest import fuzz


def test_selftest_checks_a_throwaway_rack_with_faults_and_fuzzing(run_root, tmp_path):
    out = tmp_path / "st.json"
    proc = subprocess.run([SPLITRACK, "selftest", "--fuzz", "200", "--faults", "--json",
                           str(out)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = json.loads(out.read_text())["checks"]
    names = [c["name"] for c in checks]
    assert all(c["ok"] for c in checks) and len(proc.stdout.splitlines()) == len(checks) + 1
    for cid in ("global", "p0", "p1", "m0", "n0", "s0"):
        assert f"fault {cid}" in names and f"fuzz {cid}" in names and f"health {cid}" in names
    assert {"up", "tcp ddio", "tcp dma", "files", "program on p0"} <= set(names)
    assert proc.stdout.splitlines()[-1] == f"{len(checks)} of {len(checks)} checks passed"
    assert not list((tmp_path).glob("splitrack-selftest-*"))   # its scratch went with it


def test_malformed_frames_leave_every_monitor_serving_and_no_traceback(run_root, tmp_path):
    rng = random.Random(7)
    with running_rack(lambda s: small_spec(s, name="fuzzed")) as rack:
        for cid in rack.components:
            ok, detail = fuzz(rack, cid, 1500, rng)
            assert ok, f"{cid}: {detail}"
        for cid, rec in rack.components.items():
            with open(rec["log"]) as f:
                assert "Traceback" not in f.read(), f"{cid} logged a traceback"
