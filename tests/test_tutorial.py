"""docs/tutorial.md cannot go stale: every ```console block in it runs, and says
what the text promises.

A console block is a shell session: lines starting with `$ ` are commands (a
trailing backslash, or a next line starting with `> `, the shell's second
prompt, continues one), every other line is a piece of text the block's
output must contain, in that order (`...` lines are only for the reader).
The blocks run in the order of the page, each as one bash script, in one
shared environment: a run root and a data directory of the test's own,
the repository as the working directory, this Python first on PATH. A block
that starts a background job stops it itself (`kill %1`); whatever is left
(its process group, and the racks in the run root) is stopped at the end by
PID. Blocks fenced as ```sh are for the reader only (long runs).
"""

import os
import re
import shutil
import signal
import subprocess
import sys

from helpers import SPLITRACK, wait_gone
from splitrack.rack import Rack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIAL = os.path.join(ROOT, "docs", "tutorial.md")
BLOCK_TIMEOUT_S = 300


def blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number, script, expected pieces) of every console block."""
    out = []
    for match in re.finditer(r"^```console\n(.*?)^```", text, re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        commands, expect, more = [], [], False
        for raw in match.group(1).splitlines():
            if more or raw.startswith("$ "):
                commands.append(raw if more else raw[2:])
                more = raw.endswith("\\")
            elif raw.startswith("> ") or raw == ">":
                commands.append(raw[2:])
            elif raw.strip() and raw.strip() != "...":
                expect.append(raw.strip())
        out.append((line, "\n".join(commands), expect))
    return out


def test_the_tutorial_has_six_exercises_each_checked():
    text = open(TUTORIAL).read()
    assert len(re.findall(r"^## Exercise \d", text, re.M)) >= 6
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        if section.startswith("Exercise"):
            assert "```console" in section, section.splitlines()[0]


def test_every_console_block_says_what_the_text_promises(tmp_path):
    env = dict(os.environ, SPLITRACK_RUN_ROOT=str(tmp_path / "run"),
               XDG_DATA_HOME=str(tmp_path / "data"), TMPDIR=str(tmp_path),
               PATH=os.pathsep.join([os.path.dirname(sys.executable),
                                     os.path.dirname(SPLITRACK), os.environ["PATH"]]))
    os.makedirs(env["SPLITRACK_RUN_ROOT"], mode=0o700)
    try:
        for line, script, expect in blocks(open(TUTORIAL).read()):
            proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
            finally:
                _stop_group(proc.pid)
            at = 0
            for piece in expect:
                found = out.find(piece, at)
                assert found >= 0, f"docs/tutorial.md:{line}: no {piece!r} in:\n{out}"
                at = found + len(piece)
    finally:
        _stop_racks(env["SPLITRACK_RUN_ROOT"])


def _stop_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return


def _stop_racks(run_root: str) -> None:
    for name in Rack.running(run_root):
        subprocess.run([SPLITRACK, "down", "--name", name], timeout=60,
                       env=dict(os.environ, SPLITRACK_RUN_ROOT=run_root),
                       capture_output=True)
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()
            and _environ_has(int(p), f"SPLITRACK_RUN_ROOT={run_root}")]
    for pid in pids:   # a program the tutorial started and did not stop
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert wait_gone(pids, timeout=10) == []
    shutil.rmtree(run_root, ignore_errors=True)


def _environ_has(pid: int, entry: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry.encode() in f.read().split(b"\0")
    except OSError:
        return False

