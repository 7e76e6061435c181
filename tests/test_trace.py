"""`splitrack trace` (splitrack/trace.py, fit_rpc/tracing.py) on a real rack.

A program on p0 connects to a plain echo server outside the rack (127.0.0.5),
sends once and receives once; it is traced in DMA and in DDIO mode, and the
trace must show Fig. 5: the events, their causes and their steps. Also: --ops
and --first, the Mermaid text, the picture, and that nothing is left behind --
neither by a trace nor by a run that is not traced.
"""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import SPLITRACK
from netprogs import SCRATCH, echo_server, network_rack, run_on_rack
from splitrack import sequence
from splitrack.trace import KEYS

PING = textwrap.dedent("""
    import socket, sys
    with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as s:
        s.sendall(b"ping")
        assert s.recv(100) == b"ping"
    print("ok", flush=True)
""")


@pytest.fixture(scope="module")
def net():
    with network_rack("trace") as (rack, env), echo_server() as listener:
        yield rack, env, listener.getsockname()[1]


def trace(net, tmp_path, mode: str, *flags: str) -> tuple[subprocess.CompletedProcess, list]:
    rack, env, port = net
    out = os.path.join(tmp_path, f"{mode}{len(flags)}.json")
    proc = subprocess.run([SPLITRACK, "trace", "--name", "trace", "--on", "p0", "--mode", mode,
                           "--json", out, *flags, "--", sys.executable, "-c", PING,
                           "127.0.0.5", str(port)],
                          env=env, cwd=SCRATCH, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok\n"), proc.stdout   # the program's output, then the list
    with open(out) as f:
        return proc, json.load(f)["events"]


def trace_files(rack) -> list[str]:
    return glob.glob(os.path.join(rack.run.path, "trace", "*"))


def chain(events: list[dict], e: dict) -> list[dict]:
    """e and its causes, back to the event that began it all."""
    out = [e]
    while out[-1]["cause"] is not None:
        out.append(events[out[-1]["cause"] - 1])
    return out


def of(events: list[dict], op: str, src: str | None = None, kind: str | None = None
       ) -> list[dict]:
    return [e for e in events if e["op"] == op and (src is None or e["src"] == src)
            and (kind is None or e["kind"] == kind)]


def test_a_run_that_is_not_traced_writes_no_trace_files(net):
    rack, env, port = net
    proc = run_on_rack(env, PING, "127.0.0.5", str(port), name="trace", mode="dma")
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    assert not os.path.exists(os.path.join(rack.run.path, "trace"))


@pytest.mark.parametrize("mode", ["dma", "ddio"])
def test_the_trace_json_has_the_documented_keys_and_nothing_is_left(net, tmp_path, mode):
    proc, events = trace(net, tmp_path, mode)
    assert events and all(set(KEYS) <= set(e) for e in events)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["t_us"] == 0.0
    for e in events:
        assert e["cause"] is None or e["cause"] < e["seq"], e   # causal order
        assert e["step"] is None or 1 <= e["step"] <= 5, e
        assert e["t_us"] >= events[e["cause"] - 1]["t_us"] if e["cause"] else True
    header, titles = proc.stdout.splitlines()[1:3]
    assert header.startswith(f"trace: {len(events)} events") and "step" in titles
    assert trace_files(net[0]) == []


def test_a_dma_send_flushes_announces_and_is_pulled_by_dma(net, tmp_path):
    _, events = trace(net, tmp_path, "dma")
    send = of(events, "sendall()", src="app")[0]
    assert send["step"] == 1 and send["operation"] == "send" and send["bytes"] == 4
    for op, src, step in (("M_WRITEBACK", None, 2), ("N_SEND_DMA", None, 3),
                          ("M_DMA_MAP", "n0", 4), ("DMA_READ", "n0", 4),
                          ("KERNEL_SEND", "n0", 5)):
        found = [e for e in of(events, op, src) if e["operation"] == "send"]
        assert found, f"no {op} in the send"
        e = found[0]
        assert e["step"] == step, e
        assert chain(events, e)[-1] is send, f"{op} does not lead back to the send"
        assert e["kind"] != "request" or of(events, op, kind="reply"), f"{op} unanswered"
    mapped = [e for e in of(events, "M_DMA_MAP", "n0") if e["operation"] == "send"][0]
    assert mapped["dst"] == "m0" and mapped["link"] == "n-m"
    assert [e["op"] for e in chain(events, mapped)][1] == "N_SEND_DMA"
    done = of(events, "M_DMA_DONE", "n0")   # the rings' mappings, released at close
    assert len(done) == 2 and all(chain(events, e)[-1]["op"] == "close()" for e in done)


def test_a_dma_recv_is_written_to_the_mcomponent_and_missed_by_the_stub(net, tmp_path):
    _, events = trace(net, tmp_path, "dma")
    arrival = of(events, "KERNEL_RECV")[0]
    assert (arrival["src"], arrival["dst"], arrival["step"]) == ("net", "n0", 1)
    assert arrival["cause"] is None and arrival["operation"] == "recv"
    for op, step in (("DMA_WRITE", 2), ("STUB_DATA_DMA", 3)):
        e = of(events, op)[0]
        assert e["step"] == step and chain(events, e)[-1] is arrival, e
    call = of(events, "recv()", src="app")[0]
    assert call["step"] == 4 and call["bytes"] == 4
    misses = [e for e in events if e["op"] in ("M_MISS", "M_FETCH") and e["src"].startswith("p0.")
              and e["operation"] == "recv"]
    assert misses and all(e["step"] == 4 and chain(events, e)[-1] is call for e in misses)


def test_a_ddio_send_and_recv_touch_no_mcomponent(net, tmp_path):
    _, events = trace(net, tmp_path, "ddio")
    assert not [e for e in events if e["op"].startswith(("M_DMA", "DMA_"))]
    assert not of(events, "N_SEND_DMA") and not of(events, "STUB_DATA_DMA")
    send = of(events, "sendall()", src="app")[0]
    steps = {}
    for op, step in (("N_SEND", 3), ("DDIO_READ", 4), ("KERNEL_SEND", 5)):
        e = [e for e in of(events, op) if e["operation"] == "send"][0]
        assert e["step"] == step and chain(events, e)[-1] is send, e
        steps[op] = e
    assert steps["DDIO_READ"]["dst"] == "p0"   # the pComponent's extCache lines
    arrival = of(events, "KERNEL_RECV")[0]
    for op, step in (("DDIO_WRITE", 2), ("STUB_DATA", 3)):
        e = of(events, op)[0]
        assert e["step"] == step and chain(events, e)[-1] is arrival, e
    assert of(events, "recv()", src="app")[0]["step"] == 4


@pytest.mark.parametrize("mode, send_steps", [("dma", {1, 2, 3, 4, 5}), ("ddio", {1, 3, 4, 5})])
def test_sends_and_recvs_are_numbered_as_fig_5(net, tmp_path, mode, send_steps):
    proc, events = trace(net, tmp_path, mode, "--ops", "send,recv")
    assert {e["operation"] for e in events} == {"send", "recv"}
    steps = {op: {e["step"] for e in events if e["operation"] == op} - {None}
             for op in ("send", "recv")}
    assert steps == {"send": send_steps, "recv": {1, 2, 3, 4}}
    assert "  3  DMA: the stub tells the skeleton" in proc.stdout if mode == "dma" else \
        "  3  DDIO: the stub tells the skeleton" in proc.stdout


def test_ops_and_first_keep_what_they_name(net, tmp_path):
    _, everything = trace(net, tmp_path, "ddio")
    _, sends = trace(net, tmp_path, "ddio", "--ops", "send")
    assert sends and {e["operation"] for e in sends} == {"send"}
    assert sends[0]["op"] == "sendall()" and sends[0]["cause"] is None
    assert len(sends) == len([e for e in everything if e["operation"] == "send"])
    _, first = trace(net, tmp_path, "ddio", "--first", "2")
    starts = [e for e in first if e["opstart"] == e["seq"]]
    assert [e["op"] for e in starts] == ["socket()", "connect()"]
    assert all(e["opstart"] in (starts[0]["seq"], starts[1]["seq"]) for e in first)
    assert of(first, "N_CONNECT") and not of(first, "N_SEND")


def test_mermaid_and_plot_draw_the_sequence(net, tmp_path):
    md, png = os.path.join(tmp_path, "t.md"), os.path.join(tmp_path, "t.png")
    proc, events = trace(net, tmp_path, "dma", "--mermaid", md, "--plot", png)
    assert f"wrote {md}" in proc.stderr and f"wrote {png}" in proc.stderr
    with open(md) as f:
        text = f.read()
    assert text.startswith("sequenceDiagram\n")
    assert text.count("->>") == len(events) and "N_SEND_DMA" in text
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    fig = sequence.figure(events)
    arrows = [t for t in fig.axes[0].texts if getattr(t, "arrow_patch", None) is not None]
    assert len(arrows) == len(events)
    lanes = {t.get_text() for t in fig.axes[0].texts if t.get_text() in ("app", "n0", "net")}
    assert lanes == {"app", "n0", "net"}
