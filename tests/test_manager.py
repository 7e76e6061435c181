"""The rack manager (splitrack/manager/): `splitrack serve`'s REST API over a real rack.

One rack for the module (p0-p3, m0, m1, n0 with two NICs, s0) and one `splitrack
serve` subprocess on a free port (--port 0: it says which), stopped by PID at the
end; the restart test replaces it. Every slice a test makes, it deletes.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import pytest

from helpers import SPLITRACK, running_rack, wait_gone, wait_until
from splitrack.params import HTTP_BODY_MAX_BYTES

WAIT = {"wait": 30}


def _spec(storage: str) -> dict:
    return {
        "rack": {"name": "mgr"},
        "pcomponent": [{"id": f"p{i}", "extcache": "1MiB", "ways": 4} for i in range(4)],
        "mcomponent": [{"id": "m0", "memory": "16MiB"}, {"id": "m1", "memory": "16MiB"}],
        "ncomponent": [{"id": "n0", "nics": ["127.0.0.31", "127.0.0.32"]}],
        "scomponent": [{"id": "s0", "root": storage}],
    }


class Serve:
    """A `splitrack serve` process of the rack; start() again after stop() or kill()."""

    def __init__(self, rack):
        self.rack, self.proc, self.url = rack, None, ""
        self.log = tempfile.NamedTemporaryFile(prefix="serve-", suffix=".log")

    def start(self) -> None:
        env = {**os.environ, "SPLITRACK_RUN_ROOT": self.rack.run.root}
        self.proc = subprocess.Popen(
            [SPLITRACK, "serve", "--name", self.rack.name, "--port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, text=True,
            env=env)
        line = self.proc.stdout.readline()
        assert line.startswith("serving rack 'mgr' at http://127.0.0.1:"), self.stderr()
        self.url = re.search(r"http://\S+", line).group()

    def stderr(self) -> str:
        with open(self.log.name) as f:
            return f.read()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def close(self) -> None:
        if self.proc is not None:
            self.stop()
            self.proc.stdout.close()
        self.log.close()


def http(serve: Serve, method: str, path: str, body=None, raw: bytes | None = None,
         query: dict | None = None) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of one request; errors are answers too."""
    url = serve.url + path + ("?" + "&".join(f"{k}={v}" for k, v in query.items())
                              if query else "")
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, dict(reply.headers), json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


@pytest.fixture(scope="module")
def rack():
    with running_rack(_spec, prefix="smg-") as r:
        yield r


@pytest.fixture(scope="module")
def serve(rack):
    s = Serve(rack)
    try:
        s.start()
        yield s
    finally:
        s.close()


def create(serve: Serve, name: str, p: int, m: int = 0, n: int = 0) -> tuple[int, dict]:
    status, _, view = http(serve, "POST", "/slices", {"name": name, "p": p, "m": m, "n": n})
    return status, view


def submit(serve: Serve, name: str, code: str, **job) -> dict:
    status, _, view = http(serve, "POST", f"/slices/{name}/jobs",
                           {"argv": [sys.executable, "-c", code], **job})
    assert status == 202, view
    return view


def ended(serve: Serve, job: dict) -> dict:
    status, _, view = http(serve, "GET", f"/jobs/{job['id']}", query=WAIT)
    assert status == 200 and view["state"] in ("exited", "stopped"), view
    return view


def delete(serve: Serve, name: str, force: bool = False) -> dict:
    status, _, view = http(serve, "DELETE", f"/slices/{name}",
                           query={"force": "true"} if force else None)
    assert status == 200 and view["state"] == "deleted", view
    return view


def names(steps: list[dict]) -> list[str]:
    assert all(s["start_s"] <= s["end_s"] for s in steps), steps
    return [s["name"] for s in steps]


def test_openapi_names_every_path(serve):
    status, headers, doc = http(serve, "GET", "/openapi.json")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == {"/slices", "/slices/{name}", "/slices/{name}/jobs", "/jobs",
                                 "/jobs/{id}", "/rack", "/openapi.json"}
    assert set(doc["paths"]["/slices/{name}"]) >= {"get", "delete"}


def test_create_list_show_delete(serve):
    status, view = create(serve, "one", p=1, m=1, n=1)
    assert status == 201, view
    assert view["state"] == "ready" and view["request"] == {"p": 1, "m": 1, "n": 1}
    assert view["components"] == ["p0", "m0", "n0"]
    assert view["nics"] == ["127.0.0.31", "127.0.0.32"]
    assert names(view["steps"]) == ["attach-device", "launch-machine"]
    assert os.path.isdir(os.path.join(serve.rack.run.root, "storage", "slices", "one"))
    _, _, listed = http(serve, "GET", "/slices")
    assert [s["name"] for s in listed["slices"]] == ["one"]
    _, _, shown = http(serve, "GET", "/slices/one")
    assert shown == view
    _, _, rack = http(serve, "GET", "/rack")
    taken = {c["id"]: c["slice"] for c in rack["components"]}
    assert taken["p0"] == taken["m0"] == taken["n0"] == "one"
    assert taken["p1"] is None and taken["s0"] is None
    gone = delete(serve, "one")
    assert names(gone["steps"]) == ["attach-device", "launch-machine", "detach-device",
                                    "destroy-machine"]
    _, _, rack = http(serve, "GET", "/rack")
    assert all(c["slice"] is None for c in rack["components"])
    assert http(serve, "GET", "/slices")[2] == {"slices": []}
    assert http(serve, "GET", "/slices/one")[2]["state"] == "deleted"
    assert [s["name"] for s in http(serve, "GET", "/slices", query={"all": "true"})[2][
        "slices"]] == ["one"]


def test_queued_slices_start_in_fifo_order(serve):
    assert create(serve, "big", p=3)[0] == 201
    status, first = create(serve, "first", p=2)
    assert status == 202 and first["state"] == "queued" and first["steps"] == []
    status, second = create(serve, "second", p=1)   # one pComponent is free: FIFO waits
    assert status == 202 and second["state"] == "queued"
    delete(serve, "big")
    _, _, first = http(serve, "GET", "/slices/first", query=WAIT)
    _, _, second = http(serve, "GET", "/slices/second", query=WAIT)
    assert first["state"] == second["state"] == "ready"
    assert first["components"] == ["p0", "p1"] and second["components"] == ["p2"]
    assert first["steps"][0]["end_s"] <= second["steps"][0]["start_s"]
    delete(serve, "first")
    delete(serve, "second")


def test_job_pack_and_spread(serve):
    assert create(serve, "pool", p=2, m=1)[0] == 201
    code = ("import os, sys; e = os.environ; "   # (one write a line: the ranks share the file)
            "os.write(1, f\"rank {e['SPLITRACK_RANK']} of {e['SPLITRACK_PROCS']} in "
            "{e['SPLITRACK_SLICE']} on {e['SPLITRACK_PCOMPONENT']} {e['SPLITRACK_PLACED']}\\n\""
            ".encode()); sys.exit(3 if e['SPLITRACK_RANK'] == '1' else 0)")
    packed = ended(serve, submit(serve, "pool", code, procs=2, placement="pack"))
    spread = ended(serve, submit(serve, "pool", code, procs=2, placement="spread"))
    assert packed["placed"] == ["p0", "p0"] and sorted(spread["placed"]) == ["p0", "p1"]
    for job in (packed, spread):
        assert job["state"] == "exited" and job["exits"] == [0, 3] and job["exit"] == 3
        assert names(job["steps"]) == ["prepare-task", "launch-task"]
        with open(job["stdout"]) as f:
            lines = sorted(f.read().splitlines())
        placed = ",".join(job["placed"])
        assert lines == [f"rank {i} of 2 in pool on {job['placed'][i]} {placed}"
                         for i in range(2)]
    shown = http(serve, "GET", "/slices/pool")[2]
    assert shown["jobs"] == [packed["id"], spread["id"]]
    ids = [j["id"] for j in http(serve, "GET", "/jobs")[2]["jobs"]]
    assert packed["id"] in ids and spread["id"] in ids
    delete(serve, "pool")


def test_bad_requests_name_the_problem(serve):
    cases = [
        (dict(raw=b"{"), 400, "no JSON"),
        (dict(body=["wc"]), 400, "expected an object"),
        (dict(body={"name": "wc", "p": 1, "q": 2}), 400, "unknown field 'q'"),
        (dict(body={"name": "wc", "p": "2"}), 400, "body.p: expected an integer"),
        (dict(body={"name": "wc", "p": True}), 400, "body.p: expected an integer"),
        (dict(body={"name": "Wc", "p": 1}), 400, "body.name"),
        (dict(body={"p": 1}), 400, "missing field 'name'"),
        (dict(body={"name": "wc", "p": 9}), 400, "only 4 pComponents, 9 asked"),
        (dict(body={"name": "wc", "p": 1, "n": 2}), 400, "only 1 nComponents, 2 asked"),
    ]
    for kwargs, code, words in cases:
        status, _, answer = http(serve, "POST", "/slices", **kwargs)
        assert status == code and words in answer["error"], (kwargs, answer)
    assert http(serve, "GET", "/slices/nope")[0:3:2] == (404, {"error": "no slice 'nope'"})
    assert http(serve, "GET", "/jobs/j999")[0] == 404
    status, _, answer = http(serve, "POST", "/slices/nope/jobs", {"argv": ["true"]})
    assert status == 404 and "no slice 'nope'" in answer["error"]
    status, _, answer = http(serve, "GET", "/nowhere")
    assert status == 404 and "no such path /nowhere" in answer["error"]
    status, headers, answer = http(serve, "PUT", "/slices", {})
    assert status == 405 and set(headers["Allow"].split(",")) >= {"GET", "POST"}
    assert "takes" in answer["error"] and "not PUT" in answer["error"]
    status, _, answer = http(serve, "GET", "/slices", query={"colour": "red"})
    assert status == 400 and "unknown query parameter 'colour'" in answer["error"]
    big = b'{"name": "wc", "p": 1, "pad": "' + b"x" * HTTP_BODY_MAX_BYTES + b'"}'
    status, _, answer = http(serve, "POST", "/slices", raw=big)
    assert status == 413 and answer["error"], answer   # refused whole, not read
    assert http(serve, "GET", "/slices/wc")[0] == 404


def test_delete_with_a_running_job(serve):
    assert create(serve, "busy", p=1)[0] == 201
    assert create(serve, "busy", p=1) == (409, {"error": "slice 'busy' exists (ready)"})
    job = submit(serve, "busy", "import time; print('started', flush=True); time.sleep(60)")
    bad = http(serve, "POST", "/slices/busy/jobs", {"argv": ["x"], "placement": "wide"})
    assert bad[0] == 400 and "'wide' is not one of pack, spread, auto" in bad[2]["error"]
    wait_until(lambda: _output(job) == "started\n", timeout=20)
    status, _, answer = http(serve, "DELETE", "/slices/busy")
    assert status == 409 and f"running jobs ({job['id']})" in answer["error"]
    assert "?force=true" in answer["error"]
    assert http(serve, "DELETE", "/slices/busy", query={"force": "maybe"})[0] == 400
    delete(serve, "busy", force=True)
    job = http(serve, "GET", f"/jobs/{job['id']}")[2]
    assert job["state"] == "stopped" and job["exits"] == [128 + signal.SIGTERM]
    assert job["exit"] == 128 + signal.SIGTERM


def _output(job: dict) -> str:
    """The job's stdout so far ("" before prepare-task made it)."""
    try:
        with open(job["stdout"]) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def test_restarted_serve_recovers_slices_and_jobs(serve):
    assert create(serve, "kept", p=1, m=1)[0] == 201
    job = submit(serve, "kept", "import time; print('started', flush=True); time.sleep(60)")
    short = submit(serve, "kept", "import time; time.sleep(1)")
    wait_until(lambda: _output(job) == "started\n", timeout=20)
    assert create(serve, "later", p=4)[0] == 202
    runners = [r for r in _record(serve)["jobs"] if r["id"] == job["id"]][0]["runners"]
    serve.stop(signal.SIGKILL)
    serve.start()
    listed = {s["name"]: s for s in http(serve, "GET", "/slices")[2]["slices"]}
    assert listed["kept"]["state"] == "ready" and listed["kept"]["components"] == ["p0", "m0"]
    assert listed["later"]["state"] == "queued"
    assert http(serve, "GET", f"/jobs/{job['id']}")[2]["state"] == "running"
    assert ended(serve, short)["exit"] == 0     # it ended while no serve watched, or after
    delete(serve, "kept", force=True)
    assert wait_gone([r["pid"] for r in runners]) == []
    assert ended(serve, job)["exits"] == [128 + signal.SIGTERM]
    later = http(serve, "GET", "/slices/later", query=WAIT)[2]
    assert later["state"] == "ready" and len(later["components"]) == 4
    delete(serve, "later")


def _record(serve: Serve) -> dict:
    with open(os.path.join(serve.rack.run.path, "manager.json")) as f:
        return json.load(f)


def test_cli_verbs(serve):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([SPLITRACK, *args, "--url", serve.url], capture_output=True,
                              text=True, timeout=60)

    made = cli("slice", "create", "--name", "wc", "--p", "2", "--m", "1")
    assert made.returncode == 0 and "slice wc: ready" in made.stdout, made.stderr
    assert "components  p0 p1 m0" in made.stdout
    run = subprocess.run([SPLITRACK, "job", "submit", "--slice", "wc", "--procs", "2",
                          "--placement", "pack", "--wait", "--url", serve.url, "--",
                          sys.executable, "-c", "raise SystemExit(5)"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 5 and "exited, exit 5" in run.stdout, run.stderr
    listed = cli("slice", "list", "--json")
    assert [s["name"] for s in json.loads(listed.stdout)["slices"]] == ["wc"]
    assert "wc" in cli("slice", "list").stdout
    assert "launch-machine" in cli("slice", "show", "wc").stdout
    refused = cli("slice", "create", "--name", "huge", "--p", "5")
    assert refused.returncode == 1
    assert refused.stderr == ("splitrack: error: the rack has only 4 pComponents, 5 asked "
                              "(HTTP 400)\n")
    assert "deleted" in cli("slice", "delete", "wc").stdout


def test_serve_stops_on_sigterm(serve, rack):
    assert serve.stop(signal.SIGTERM) == 0
    assert not os.path.exists(os.path.join(rack.run.path, "manager.json.tmp"))
    unreachable = subprocess.run([SPLITRACK, "slice", "list", "--url", serve.url],
                                 capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 1 and "is `splitrack serve` running?" in \
        unreachable.stderr
