"""benchmarks/plots.py on synthetic reports (no rack): the figures' artists, not pixels."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import BarContainer, ErrorbarContainer

from benchmarks import paper, plots

MODES = {"linux": 20.0, "ddio": 60.0, "dma": 120.0, "pipe": 25.0, "fit": 22.0}   # RTT, µs
QUICK, FULL = [128, 4096], [128, 256, 512, 1024, 2048, 4096]


def row(series, size, p50, reps=5, n=1500):
    """A stats row whose spreads differ: p10..p90 is 0.8..1.3 x p50, the
    repetitions' range 0.9..1.2 x."""
    return {"series": series, "size": size, "unit": "us", "p10": 0.8 * p50, "p50": p50,
            "p90": 1.3 * p50, "p99": 2 * p50, "p99_9": 3 * p50, "min": 0.5 * p50,
            "max": 4 * p50, "iqr": 0.3 * p50, "p50_low": 0.9 * p50, "p50_high": 1.2 * p50,
            "reps": reps, "n": n}


def rtt(mode, size):
    return MODES[mode] * (1 + size / 4096)


def tx(mode, size):   # MB/s, one sample a repetition
    return 1000 / MODES[mode] * size / 128


def tcp_report(sizes):
    stats = [row("connect/" + who, 0, v, n=100) for who, v in
             (("linux", 30.0), ("rack", 300.0), ("floor", 100.0))]
    for z in sizes:
        stats += [row(f"rtt/{m}", z, rtt(m, z)) for m in MODES]
        stats += [row(f"base/{b}", z, v) for b, v in
                  (("raw_zmq", 150.0), ("relay_floor", 50.0), ("raw_pipe", 10.0))]
        stats += [row(f"{d}/{m}", z, tx(m, z), n=5) for d in ("tx", "rx") for m in MODES]
        stats += [row(f"tx/{m}-unpacked", z, tx(m, z) / 4, n=5) for m in ("ddio", "dma")]
        stats.append(row("tx/relay_floor", z, 500.0, n=5))
    results = [{"mode": m, "size": z, "rtt_p50_us": rtt(m, z), "rtt_p99_us": 2 * rtt(m, z),
                "throughput_MBps": tx(m, z), "msgs_per_s": tx(m, z) * 1e6 / z,
                "rx_throughput_MBps": tx(m, z)} for z in sizes for m in MODES]
    return {"bench": "tcp", "results": results, "stats": stats,
            "connect": {"linux_p50_us": 30.0, "rack_p50_us": 300.0, "floor_p50_us": 100.0},
            "ncomponent_cpu": {"tx_core_s_per_GB": 0.9, "rx_core_s_per_GB": 1.1},
            "nic_scaling": [{"nics": 1, "throughput_MBps": 300.0},
                            {"nics": 2, "throughput_MBps": 450.0}],
            "settings": {"sizes": sizes, "reps": 5},
            "targets": [{"name": "DDIO RTT / Linux at 128 B", "value": 3.0, "low": 2.5,
                         "high": 3.5, "limit": 3.0, "sense": "<=", "verdict": "unresolved",
                         "met": False}]}


SECONDS = {"linux": 2.0, "ddio": 2.1, "dma": 2.6}


def wordcount_report():
    size = 8_000_000
    return {"bench": "wordcount", "input_bytes": size, "words": 2_000_000, "distinct": 50_000,
            "seed": 1, "stats": [row(f"seconds/{m}", size, s, reps=3, n=3)
                                 for m, s in SECONDS.items()],
            "results": [{"mode": m, "seconds": s, "ops_per_s": 1e5 / s, "correct": True}
                        for m, s in SECONDS.items()],
            "targets": [{"name": "word count DDIO time / Linux time", "value": 1.05,
                         "low": 1.0, "high": 1.1, "limit": 1.2, "sense": "<=",
                         "verdict": "met", "met": True}]}


def errorbars(ax):
    return {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}


def bar_ends(container):
    """Each error bar's (low, high), as rows of an array (pytest.approx compares arrays)."""
    return np.array([seg[:, 1] for seg in container.lines[2][0].get_segments()])


def targets(ax):
    return {line.get_label(): line for line in ax.get_lines() if "target" in line.get_label()}


def paper_marks(ax):
    """The paper's figures drawn on a panel, by label (each starts "paper:")."""
    return {line.get_label(): line for line in ax.get_lines()
            if line.get_label().startswith("paper:")}


def bar_heights(ax):
    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    return [b.get_height() for b in bars]


def test_spread_is_p10_p90_or_the_repetitions_range_where_each_is_one_sample():
    assert plots.spread(row("rtt/ddio", 128, 100.0)) == pytest.approx((100, 20, 30))
    assert plots.spread(row("tx/ddio", 128, 100.0, n=5)) == pytest.approx((100, 10, 20))
    rounded = {**row("tx/ddio", 128, 100.0, n=5), "p50_low": 100.001}   # never below zero
    assert plots.spread(rounded)[1] == 0


@pytest.mark.parametrize("sizes", [QUICK, FULL])
def test_tcp_panels_show_p50_with_error_bars_and_the_targets(sizes):
    fig = plots.tcp_figure(tcp_report(sizes))
    lat, thr, short, nics, _, _ = fig.axes
    joined = "None" if sizes == QUICK else "-"   # no line across the gap 128..4096
    # RTT: p10-p90 of the samples; throughput: the repetitions' range
    for ax, p50, low, high in ((lat, rtt, 0.8, 1.3), (thr, tx, 0.9, 1.2)):
        bars = errorbars(ax)
        assert set(MODES) <= set(bars)
        for m in MODES:
            line = bars[m].lines[0]
            assert list(line.get_ydata()) == pytest.approx([p50(m, z) for z in sizes])
            assert line.get_linestyle() == joined
            assert bar_ends(bars[m]) == pytest.approx(np.array([(low * p50(m, z), high * p50(m, z))
                                                                for z in sizes]))
        if sizes == QUICK:
            assert all(line.get_linestyle() == "None" for line in ax.get_lines()
                       if len(line.get_xdata()) > 1 and line not in paper_marks(ax).values())
    ddio = targets(lat)["target: DDIO <= 3 x Linux"]
    near = [z for z in sizes if z <= 2048]
    assert list(ddio.get_xdata()) == near
    assert list(ddio.get_ydata()) == pytest.approx([3 * rtt("linux", z) for z in near])
    assert sizes == QUICK or ddio.get_linestyle() == "--"   # quick: one point, 128 B
    tput = targets(thr)
    assert tput["target: DDIO >= 0.8 x Linux at 4096 B"].get_ydata() == \
        pytest.approx([0.8 * tx("linux", 4096)])
    assert tput["target: DMA >= 0.35 x Linux at 4096 B"].get_ydata() == \
        pytest.approx([0.35 * tx("linux", 4096)])
    assert short.get_yscale() == "linear"
    expected = [rtt(m, 128) for m in ("linux", "pipe", "fit", "ddio", "dma")] + [150.0, 10.0]
    assert bar_heights(short) == pytest.approx(expected)
    (spread,) = errorbars(short).values()
    assert bar_ends(spread) == pytest.approx(np.array([(0.8 * v, 1.3 * v) for v in expected]))
    shortcut = targets(short)   # over the fit bar (x = 2) and the pipe bar (x = 1)
    assert list(shortcut["target: fit <= 1.5 x Linux"].get_xydata()[0]) == \
        pytest.approx([2, 1.5 * rtt("linux", 128)])
    assert list(shortcut["target: pipe <= 1.5 x raw os.pipe"].get_xydata()[0]) == \
        pytest.approx([1, 1.5 * 10.0])
    assert nics.get_yscale() == "linear" and "measured once" in nics.get_title()
    assert bar_heights(nics) == [300.0, 450.0]


@pytest.mark.parametrize("sizes", [QUICK, FULL])
def test_the_rtt_panel_draws_each_curves_p99_as_well_as_its_p50(sizes):
    lat = plots.tcp_figure(tcp_report(sizes)).axes[0]
    p99 = {line.get_gid(): line for line in lat.get_lines()
           if (line.get_gid() or "").startswith("p99/")}
    assert set(p99) == {f"p99/{m}" for m in MODES} | {"p99/raw pyzmq", "p99/relay floor"}
    for m in MODES:   # row(): p99 is 2 x p50; drawn at the p50's own x, hollow
        assert list(p99[f"p99/{m}"].get_ydata()) == pytest.approx([2 * rtt(m, z) for z in sizes])
        assert list(p99[f"p99/{m}"].get_xdata()) == \
            pytest.approx(list(errorbars(lat)[m].lines[0].get_xdata()))
        assert p99[f"p99/{m}"].get_markerfacecolor() == "none"
    assert plots.P99 in [t.get_text() for t in lat.get_legend().get_texts()]


def test_tcp_draws_the_papers_figures_apart_from_splitracks_own():
    lat, _, _, _, conn, cpu = plots.tcp_figure(tcp_report(QUICK)).axes
    (fit,) = paper_marks(lat).values()   # the paper's FIT round trip, a level across (a)
    assert list(fit.get_ydata()) == [paper.FIT_RTT_US] * 2 == [8.0, 8.0]
    assert "FIT" in fit.get_label()
    # (e): this run's connect() p50s as bars (Linux, rack, floor), the paper's 252 and
    # 255 µs as stars over the Linux and rack bars, and the target over the rack's
    assert conn.get_title().startswith("(e) connect()")
    assert bar_heights(conn) == pytest.approx([30.0, 300.0, 100.0])
    (stars,) = paper_marks(conn).values()
    assert [tuple(p) for p in stars.get_xydata()] == [(0, 252.0), (1, 255.0)]
    assert "255" in stars.get_label() and "252" in stars.get_label()
    assert list(targets(conn)["target: rack <= 4 x Linux"].get_xydata()[0]) == \
        pytest.approx([1, 4 * 30.0])
    # (f): the nMonitor's core-s/GB, the paper's 15 % / 25 % of a core at 880 Mb/s in
    # the same unit (0.15 / 0.110 GB/s, 0.25 / 0.110), and the target
    assert bar_heights(cpu) == pytest.approx([0.9, 1.1])
    (stars,) = paper_marks(cpu).values()
    assert list(stars.get_ydata()) == pytest.approx([0.15 / 0.110, 0.25 / 0.110])
    assert "15% (tx) / 25% (rx) of a core at 880 Mb/s" in stars.get_label()
    assert "(derived)" in stars.get_label()
    assert list(targets(cpu)["target: <= 4 core-s/GB each way"].get_ydata()) == [4.0, 4.0]
    for ax in (lat, conn, cpu):   # one colour, kept for the paper's marks
        for line in ax.get_lines():
            assert (line.get_color() == plots.PAPER) == line.get_label().startswith("paper:")


def test_without_the_cpu_measurement_its_panel_still_shows_the_paper_and_the_target():
    report = tcp_report(QUICK)
    report["ncomponent_cpu"] = None
    cpu = plots.tcp_figure(report).axes[5]
    assert not [c for c in cpu.containers if isinstance(c, BarContainer)]
    assert "not measured" in cpu.texts[0].get_text()
    assert paper_marks(cpu) and targets(cpu)


def check_legends_off_the_data(fig):
    FigureCanvasAgg(fig).draw()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    for legend in legends:
        box = legend.get_window_extent()
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
        assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)


def test_tcp_legends_are_outside_every_panel():
    check_legends_off_the_data(plots.tcp_figure(tcp_report(QUICK)))


def test_wordcount_bars_with_the_repetitions_range_and_the_target():
    fig = plots.wordcount_figure(wordcount_report())
    (ax,) = fig.axes
    assert ax.get_yscale() == "linear"
    assert bar_heights(ax) == pytest.approx(list(SECONDS.values()))
    (spread,) = errorbars(ax).values()
    assert bar_ends(spread) == pytest.approx(
        np.array([(0.9 * s, 1.2 * s) for s in SECONDS.values()]))
    line = targets(ax)["target: DDIO <= 1.2 x Linux"]
    assert list(line.get_ydata()) == pytest.approx([1.2 * SECONDS["linux"]] * 2)
    # the paper's Fig. 8: DDIO in Linux's time, a star over the DDIO bar (x = 1)
    (star,) = paper_marks(ax).values()
    assert [tuple(p) for p in star.get_xydata()] == [(1, SECONDS["linux"])]
    assert "Fig. 8" in star.get_label() and star.get_color() == plots.PAPER
    check_legends_off_the_data(fig)


def test_each_run_writes_the_png_and_the_summary_and_names_them(tmp_path, capsys):
    for draw, report in ((plots.tcp, tcp_report(QUICK)), (plots.wordcount, wordcount_report())):
        png, md = tmp_path / f"{report['bench']}.png", tmp_path / f"{report['bench']}.md"
        draw(report, str(png))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert capsys.readouterr().err == f"wrote {png}\nwrote {md}\n"
        assert "| target | measured [range] | limit | verdict |" in md.read_text()
    summary = (tmp_path / "tcp.md").read_text()
    assert "| RTT p90 (µs) |" in summary
    assert f"| ddio | 128 | {rtt('ddio', 128):.1f} [{0.9 * rtt('ddio', 128):.1f}.." in summary


def test_a_report_without_stats_is_refused_by_name():
    report = tcp_report(QUICK)
    del report["stats"]
    with pytest.raises(ValueError, match="report.finish"):
        plots.tcp_figure(report)
