"""`splitrack bench tcp`'s report: its JSON, with the targets judged, and its table.

    build_report(series, cpu, scaling, load, modes, s) -> report     (s: the settings)
        series: tcp.py's {"rtt/", "base/", "connect/", "tx/", "rx/"}; the report
        with "targets" (_targets: each of docs/benchmarks.md's, stats.target)
    print_table(report)     the table `splitrack bench tcp` prints (report.finish
                            prints the targets after it)

JSON (--json FILE): {"bench": "tcp", "results": [{"mode", "size", "rtt_p50_us",
"rtt_p99_us", "throughput_MBps", "msgs_per_s", "rx_throughput_MBps"}],
"baselines": {"raw_zmq_p50_us", "raw_pipe_p50_us", "linux_tcp_p50_us",
"raw_zmq_p50_us_by_size", "raw_pipe_p50_us_by_size", "relay_floor_p50_us_by_size",
"relay_floor_tx_MBps_by_size", "raw_unix_p50_us_by_size" (with the pipe mode)},
"ddio_over_relay_floor": {size: ratio}, "connect": {"linux_p50_us", "rack_p50_us",
"floor_p50_us", "ratio", "floor_ratio", "rack_over_floor", ...},
"ncomponent_cpu": {"tx_core_s_per_GB", "rx_core_s_per_GB", "size", "tx_bytes",
"rx_bytes"}, "nic_scaling": [{"nics", "throughput_MBps", ...}], "load": {"programs",
"one_MBps", "all_MBps", "ratio", "linux_one_MBps", "linux_all_MBps", "linux_ratio"},
"packing": [{"mode", "size", "on_MBps", "off_MBps"}], "targets", "stats", "machine",
"settings"} (report.py, stats.py).
"""

from typing import Any

from benchmarks.limits import (
    CONNECT_OVER_LINUX,
    DDIO_RTT_OVER_LINUX,
    DDIO_RTT_UP_TO,
    NCOMPONENT_CORE_S_PER_GB,
    SHORTCUT_RTT,
    TX_AT,
    TX_OVER_LINUX,
)
from benchmarks.report import print_stats
from benchmarks.stats import Series, point, ratio_of, target
from benchmarks.verbs import TCP_MODES

MODES = TCP_MODES   # the order of tables and plots


def build_report(series: dict[str, Series], cpu: dict | None, scaling: list[dict[str, Any]],
            load: dict[str, Any], modes: tuple[str, ...], s: dict[str, Any]) -> dict[str, Any]:
    rtt, base, connect, tx, rx = (series[k] for k in ("rtt/", "base/", "connect/", "tx/", "rx/"))
    sizes = s["sizes"]
    results = []
    for mode, size in rtt.reps:
        got, mbps = rtt.summary(mode, size), tx.summary(mode, size)["p50"]
        results.append({"mode": mode, "size": size, "rtt_p50_us": round(got["p50"], 2),
                        "rtt_p99_us": round(got["p99"], 2), "throughput_MBps": round(mbps, 2),
                        "msgs_per_s": round(mbps * 1e6 / size),
                        "rx_throughput_MBps": round(rx.summary(mode, size)["p50"], 2)})

    def p50(what: Series, name: str, z: int) -> float:
        return round(what.summary(name, z)["p50"], 2)

    c = {who: connect.summary(who, 0) for who in ("linux", "rack", "floor")}
    report: dict[str, Any] = {
        "bench": "tcp", "results": results,
        "baselines": {"raw_zmq_p50_us": p50(base, "raw_zmq", sizes[0]),
                      "raw_pipe_p50_us": p50(base, "raw_pipe", sizes[0]),
                      "linux_tcp_p50_us": p50(rtt, "linux", sizes[0]),
                      **{f"{name}_p50_us_by_size": {str(z): p50(base, name, z) for z in sizes}
                         for name in ("raw_zmq", "raw_pipe", "relay_floor")},
                      "relay_floor_tx_MBps_by_size": {str(z): p50(tx, "relay_floor", z)
                                                      for z in sizes},
                      **({"raw_unix_p50_us_by_size": {str(z): p50(base, "raw_unix", z)
                                                      for z in sizes}}
                         if "pipe" in modes else {})},
        "ddio_over_relay_floor": {str(z): round(rtt.summary("ddio", z)["p50"]
                                                / base.summary("relay_floor", z)["p50"], 3)
                                  for z in sizes if "ddio" in modes},
        "connect": {"linux_p50_us": round(c["linux"]["p50"], 2),
                    "rack_p50_us": round(c["rack"]["p50"], 2),
                    "floor_p50_us": round(c["floor"]["p50"], 2),
                    "linux_p99_us": round(c["linux"]["p99"], 2),
                    "rack_p99_us": round(c["rack"]["p99"], 2)},
        "ncomponent_cpu": cpu, "nic_scaling": scaling, "load": load,
        "packing": [{"mode": m, "size": z, "on_MBps": p50(tx, m, z),
                     "off_MBps": p50(tx, m + "-unpacked", z)}
                    for m in ("ddio", "dma") if m in modes for z in sizes],
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.items()},
    }
    report["targets"] = _targets(report, series, modes)
    return report


def _targets(report: dict[str, Any], series: dict[str, Series],
             modes: tuple[str, ...]) -> list[dict]:
    """Each target of docs/benchmarks.md with what this run measured, its range
    over paired repetitions, and the floor it meets on this machine if any."""
    rtt, base, connect, tx = (series[k] for k in ("rtt/", "base/", "connect/", "tx/"))
    sizes = report["settings"]["sizes"]
    out = []
    if "ddio" in modes:
        for z in (z for z in sizes if z <= DDIO_RTT_UP_TO):
            relay = ratio_of(base.reps["relay_floor", z], rtt.reps["linux", z])["value"]
            out.append(target(f"DDIO RTT / Linux at {z} B", rtt.ratio(("ddio", z), ("linux", z)),
                              DDIO_RTT_OVER_LINUX,
                              floor={"name": "relay floor / Linux", "value": relay}))
        if "dma" in modes:
            p50 = {(m, z): rtt.summary(m, z)["p50"] for m in ("linux", "ddio", "dma")
                   for z in sizes}
            out.append(target("sizes with RTT p50 in the paper's order, Linux < DDIO < DMA",
                              point(sum(p50["linux", z] < p50["ddio", z] < p50["dma", z]
                                        for z in sizes)), len(sizes), at_most=False))
    for z in sizes:
        if "fit" in modes:
            out.append(target(f"fit shortcut RTT / Linux at {z} B",
                              rtt.ratio(("fit", z), ("linux", z)), SHORTCUT_RTT))
        if "pipe" in modes:
            pair = ratio_of(base.reps["raw_unix", z], base.reps["raw_pipe", z])["value"]
            out.append(target(f"pipe shortcut RTT / raw os.pipe at {z} B",
                              ratio_of(rtt.reps["pipe", z], base.reps["raw_pipe", z]),
                              SHORTCUT_RTT,
                              floor={"name": "raw AF_UNIX pair / raw os.pipe", "value": pair}))
    c = report["connect"]
    ratio = connect.ratio(("rack", 0), ("linux", 0))
    floor = connect.ratio(("floor", 0), ("linux", 0))
    c.update(ratio=ratio["value"], floor_ratio=floor["value"],
             rack_over_floor=connect.ratio(("rack", 0), ("floor", 0))["value"])
    out.append(target("rack connect / Linux connect", ratio, CONNECT_OVER_LINUX,
                      floor={"name": "connect floor / Linux", "value": floor["value"]}))
    if TX_AT in sizes:
        floor_tx = tx.ratio(("relay_floor", TX_AT), ("linux", TX_AT))["value"]
        for m, limit in TX_OVER_LINUX.items():
            if m in modes:
                out.append(target(f"{m.upper()} throughput / Linux at {TX_AT} B",
                                  tx.ratio((m, TX_AT), ("linux", TX_AT)), limit, at_most=False,
                                  floor={"name": "relay floor tx / Linux", "value": floor_tx}))
    if report["ncomponent_cpu"]:
        for d in ("tx", "rx"):
            out.append(target(f"nComponent CPU {d}, core-s per GB",
                              point(report["ncomponent_cpu"][f"{d}_core_s_per_GB"]),
                              NCOMPONENT_CORE_S_PER_GB))
    return out


def print_table(report: dict[str, Any]) -> None:
    st = report["settings"]
    stats = report["stats"]
    print(f"TCP through the rack vs Linux ({st['reps']} repetitions, interleaved; "
          f"{st['rounds']} round trips each)")
    print("echo round trip, µs (rtt/: per mode; base/: raw pyzmq, raw os.pipe, a raw AF_UNIX "
          "stream pair and the relay floor, no splitrack code):")
    order = [*(f"rtt/{m}" for m in MODES), "base/raw_zmq", "base/relay_floor", "base/raw_pipe",
             "base/raw_unix"]
    print_stats(sorted((r for r in stats if r["series"] in order),
                       key=lambda r: (r["size"], order.index(r["series"]))), "series", 18)
    print("one-way throughput, the median [lowest..highest repetition] of each "
          f"{st['seconds']} s run. tx MB/s: the program under test sends (the rack's server "
          "on the rack); msgs/s: its send() calls of `size` bytes a second; rx MB/s: it "
          "receives")
    tput = {(r["series"], r["size"]): r for r in stats if r["unit"] == "MB/s"}

    def mbps(key: tuple[str, int]) -> str:
        r = tput[key]
        return f"{r['p50']:.1f} [{r['p50_low']:.1f}..{r['p50_high']:.1f}]"
    print(f"{'mode':<7}{'size':>6}  {'tx MB/s':>24} {'msgs/s':>9}  {'rx MB/s':>24}")
    for r in sorted(report["results"], key=lambda r: (r["size"], MODES.index(r["mode"]))):
        m, z = r["mode"], r["size"]
        print(f"{m:<7}{z:>6}  {mbps(('tx/' + m, z)):>24} {r['msgs_per_s']:>9.0f}  "
              f"{mbps(('rx/' + m, z)):>24}")
    if report["ddio_over_relay_floor"]:
        print("DDIO RTT / relay floor (what the emulator's code adds): " + ", ".join(
            f"{v:.2f} ({z} B)" for z, v in report["ddio_over_relay_floor"].items()))
    floor_tx = report["baselines"]["relay_floor_tx_MBps_by_size"]
    linux_tx = {str(r["size"]): r["throughput_MBps"] for r in report["results"]
                if r["mode"] == "linux"}
    print("relay floor tx MB/s (no splitrack code): " + ", ".join(
        f"{v:.1f} = {v / linux_tx[z]:.2f} x Linux ({z} B)" for z, v in floor_tx.items()))
    print("connect(), µs (rack: a program on p0; linux: a plain process; floor: the connect "
          "floor, no splitrack code):")
    print_stats([r for r in stats if r["series"].startswith("connect/")], "series", 18)
    c = report["connect"]
    print(f"connect() p50: rack {c['rack_p50_us']:.1f}us, Linux {c['linux_p50_us']:.1f}us, "
          f"connect floor {c['floor_p50_us']:.1f}us = {c['floor_ratio']:.2f} x Linux; "
          f"rack / floor {c['rack_over_floor']:.2f}")
    for p in report["packing"]:
        print(f"packing, {p['mode']} at {p['size']} B: {p['on_MBps']:.1f} MB/s on, "
              f"{p['off_MBps']:.1f} MB/s off")
    if report["ncomponent_cpu"]:
        cpu = report["ncomponent_cpu"]
        print(f"nComponent CPU (DDIO, {cpu['size']} B sends): {cpu['tx_core_s_per_GB']:.2f} "
              f"core-s/GB tx, {cpu['rx_core_s_per_GB']:.2f} rx (measured once)")
    for row in report["nic_scaling"]:
        print(f"{row['nics']} NIC(s), {row['clients']} clients: {row['throughput_MBps']:.1f} MB/s"
              " (measured once)")
    load = report["load"]
    print(f"{load['programs']} DDIO programs streaming at once: {load['all_MBps']:.1f} MB/s in "
          f"all, one alone {load['one_MBps']:.1f} MB/s ({load['ratio']:.2f} x); as plain "
          f"Linux processes {load['linux_all_MBps']:.1f} and {load['linux_one_MBps']:.1f} MB/s "
          f"({load['linux_ratio']:.2f} x) (measured once)")
