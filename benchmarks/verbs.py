"""`splitrack bench VERB`: each benchmark's command line, and the dispatch to it.

    fit, extcache, tcp, wordcount   measure (benchmarks/<verb>.py: main(args))
    native                          unmodified native programs on the rack (native.py)
    slices, placement               the rack manager: a stream of jobs in slices, and
                                    Scylla's pack/spread trade-off (slices.py, placement.py)
    hot                             the hot paths that need no rack (hot.py)
    compare OLD.json NEW.json       what changed between two runs (compare.py)

Every verb takes only the options it uses, so a bad one is refused by argparse
in one line (exit 2) before any work starts. The options every measuring verb
shares (--json, --csv, --samples, --reps or --duration, --busy) mean the same
everywhere; report.finish writes them.
"""

import argparse
import importlib
import re
import signal
from typing import Any

from splitrack import argtypes
from splitrack.params import MEMORY_MODES
from splitrack.spec import SpecError, parse_bandwidth, parse_time_ns

TCP_MODES = ("linux", "ddio", "dma", "pipe", "fit")
WORDCOUNT_MODES = ("linux", "ddio", "dma")


def add_parser(sub: Any) -> None:
    bench = sub.add_parser(
        "bench", help="benchmarks with their baselines measured in the same run",
        description="Benchmarks. Each measures its baselines in the same run and prints p50, "
                    "p90, p99, p99.9, min and max with the spread over repetitions, then a "
                    "verdict per target (met, NOT met, or unresolved when the spread "
                    "straddles it). docs/benchmarks.md says what each measures, "
                    "docs/evaluation.md how to read them against the paper.")
    verbs = bench.add_subparsers(dest="kind", required=True, metavar="VERB")

    def measuring(name: str, help_: str, rounds: str | None, reps: str,
                  rack: bool = True) -> argparse.ArgumentParser:
        """A measuring verb's parser; `rounds` and `reps` say their defaults
        (tests/test_bench_args.py checks them against the benchmarks')."""
        p = verbs.add_parser(name, help=help_, description=help_,
                             allow_abbrev=False)   # --size is not short for --sizes
        if rack:
            p.add_argument("--spec", metavar="FILE", type=argtypes.spec_file,
                           help="rack spec (default: the embedded default)")
        p.add_argument("--json", metavar="FILE", type=argtypes.out_file,
                       help="also write the report as JSON here (with the machine and the "
                            "settings)")
        p.add_argument("--csv", metavar="FILE", type=argtypes.out_file,
                       help="also write every statistic as CSV here (one row a series)")
        p.add_argument("--samples", metavar="FILE", type=argtypes.samples_file,
                       help="also write the raw samples here: CSV (series, size, rep, value), "
                            "or numpy .npz if FILE ends in .npz")
        if rounds:
            p.add_argument("--rounds", type=argtypes.count, default=None, help=rounds)
        group = p.add_mutually_exclusive_group()
        group.add_argument("--reps", type=argtypes.count, default=None,
                           help=f"repetitions, what is compared interleaved ({reps})")
        group.add_argument("--duration", type=argtypes.seconds, default=None, metavar="S",
                           help="instead of a fixed --reps: repeat until S seconds have "
                                "passed (at least 3 repetitions)")
        if rack:
            p.add_argument("--busy", type=argtypes.count, nargs="?", const=1, default=0,
                           metavar="N",
                           help="keep N cores busy (N spinning processes; N is 1 if not "
                                "given) for the whole run: on a VM whose idle cores halt, "
                                "wake-ups then cost a context switch, not an IPI; run once "
                                "with and once without to see both; as many as the machine "
                                "has cores: a loaded machine, every process sharing its core")
        p.set_defaults(func=cmd_bench, busy=0)
        return p

    def figures(p: argparse.ArgumentParser, quick: str, modes: tuple[str, ...],
                default: str) -> None:
        p.add_argument("--plot", metavar="F.png", type=argtypes.out_file,
                       help="draw the figures into this PNG and write the summary table next "
                            "to it (F.md)")
        p.add_argument("--quick", action="store_true", help=quick)
        p.add_argument("--modes", type=argtypes.choices(modes), default=None,
                       help=f"comma-separated modes (default: {default})")

    p = measuring("fit", "FIT RTT over shm and zmq vs the interconnect floors (Linux TCP "
                         "loopback, AF_UNIX, shared memory + eventfd, shared memory spinning, "
                         "raw pyzmq)", "round trips per repetition (default: 5000)",
                  "default: 5")
    p.add_argument("--fabric-latency", type=latencies, default=None, metavar="LIST",
                   help="also a shm rack with each [fabric] latency, e.g. 10,20,50us (a "
                        "number without a unit takes the last one's): its RTT's increase "
                        "against 2L")
    p.add_argument("--fabric-bandwidth", type=bandwidth, default=None, metavar="BW",
                   help="also a shm rack with this [fabric] bandwidth, e.g. 1Gbps: 1 MiB "
                        "ECHOs' throughput against it")
    measuring("extcache", "extCache hits, misses, zero-fills and evictions vs the same floors",
              "misses, zero-fills and evictions per repetition (default: 2000)",
              "default: 5")
    p = measuring("tcp", "the paper's TCP micro-benchmarks (echo RTT, throughput, connect, "
                         "nComponent CPU, NIC scaling; DDIO, DMA, pipe and FIT shortcuts) vs "
                         "Linux TCP loopback, raw pyzmq, raw os.pipe (and an AF_UNIX pair) and "
                         "the relay and connect floors",
                  "round trips per repetition (default: 1000; --quick: 300)",
                  "default: 5")
    figures(p, "a reduced sweep, about a minute", TCP_MODES, ",".join(TCP_MODES))
    p.add_argument("--sizes", type=argtypes.sizes,
                   help="comma-separated message sizes in bytes "
                        "(default: 128,256,512,1024,2048,4096; --quick: 128,4096)")
    p.add_argument("--fabric-latency", type=latencies, default=None, metavar="LIST",
                   help="then sweep the interconnect model: a rack with each [fabric] "
                        "latency, e.g. 0,1,2,5,10,20,50us (a number without a unit takes the "
                        "last one's); DDIO, DMA, pipe and fit RTT and throughput at each, "
                        "Linux as the level; --plot adds F-fabric.png")
    p = measuring("native", "unmodified native programs on the rack: sockperf's echo RTT against "
                            "bench tcp's DDIO echo and against Linux, iperf3's throughput "
                            "against Linux (needs sockperf and iperf3)",
                  "bench tcp's DDIO echo round trips per repetition (default: 1000)",
                  "default: 5")
    p.add_argument("--sizes", type=argtypes.sizes,
                   help="comma-separated message sizes in bytes (default: 128,4096)")
    p.add_argument("--seconds", type=argtypes.seconds, default=None,
                   help="each sockperf and iperf3 run's length, in whole seconds "
                        "(rounded up; default: 1)")
    p = measuring("wordcount", "the paper's macro benchmark: word count on the rack vs Linux",
                  None, "default: 3")
    figures(p, "8 MB of input", WORDCOUNT_MODES, ",".join(WORDCOUNT_MODES))
    p.add_argument("--size", type=argtypes.size, default=None, metavar="BYTES",
                   help="input size, e.g. 64MB or 1.5GB (default: 64MB; --quick: 8MB)")
    p.add_argument("--seed", type=argtypes.seed, default=None,
                   help="the input generator's seed (default: 1)")
    p.add_argument("--memory", choices=MEMORY_MODES, default=MEMORY_MODES[0],
                   help="where the rack mapper's memory lives (splitrack run --memory; "
                        "default: %(default)s)")
    p.add_argument("--extcache", type=argtypes.sizes_list, default=None, metavar="LIST",
                   help="then a sweep: the rack modes again with each of these extCache "
                        "sizes on every pComponent, e.g. 4MiB,8MiB,16MiB,64MiB; --plot adds "
                        "F-extcache.png (time against extCache size)")

    p = measuring("rackmem", "splitrack run --memory rack: a resident loop against --memory "
                             "host, and a heap page's miss against a vm line's",
                  "passes of the resident loop per run (default: 100)", "default: 5")
    p.add_argument("--extcache", type=argtypes.size, default=None, metavar="SIZE",
                   help="each pComponent's extCache (default: 16MiB)")

    measuring("hot", "the hot paths that need no rack (FIT header, args codec, extCache "
                     "hits), timed in this process", "samples per repetition, each the mean "
                     "of 1000 calls (default: 200)", "default: 5", rack=False)

    p = verbs.add_parser(
        "slices", allow_abbrev=False,
        help="a stream of jobs, each in a slice of its own, through the rack manager",
        description="A stream of jobs larger than the pool, each creating a slice, running "
                    "one job in it and deleting it, from concurrent clients of `splitrack "
                    "serve`: each job's FlowOS-RM steps, timed (its Figs. 4 and 5 with --plot)")
    p.add_argument("--spec", metavar="FILE", type=argtypes.spec_file,
                   help="rack spec (default: the embedded shared rack, splitrack/slices_rack.toml)")
    p.add_argument("--jobs", type=argtypes.count, default=None,
                   help="jobs in the stream (default: 12)")
    p.add_argument("--json", metavar="FILE", type=argtypes.out_file,
                   help="also write the report as JSON here (with the machine and the settings)")
    p.add_argument("--plot", metavar="F.png", type=argtypes.out_file,
                   help="draw FlowOS-RM's Figs. 4 and 5 into this PNG, and a table per job "
                        "next to it (F.md)")
    p.set_defaults(func=cmd_bench, busy=0)

    p = measuring("placement", "Scylla's placement trade-off: a ring of processes passing "
                               "messages (network) and computing (cpu), each job packed onto "
                               "few pComponents and spread over many", None, "default: 3",
                  rack=False)
    p.add_argument("--spec", metavar="FILE", type=argtypes.spec_file,
                   help="rack spec (default: the embedded shared rack, splitrack/slices_rack.toml)")
    p.add_argument("--procs", type=ring_size, default=None,
                   help="processes of each job (default: 4)")
    p.add_argument("--quick", action="store_true",
                   help="a tenth of the work: 50 laps, 300000 iterations")

    p = verbs.add_parser("compare", help="compare two --json reports of the same benchmark",
                         description="A table of what changed between two runs of one "
                                     "benchmark (their --json files), with a verdict per row "
                                     "that the spreads justify.")
    p.add_argument("old", type=argtypes.in_file, metavar="OLD.json")
    p.add_argument("new", type=argtypes.in_file, metavar="NEW.json")
    p.add_argument("--fail-above", type=argtypes.percent, default=None, metavar="PCT",
                   help="exit 1 if any row got worse by more than PCT percent (for CI)")
    p.set_defaults(func=cmd_bench)


def ring_size(text: str) -> int:
    """--procs: a ring needs two processes at least."""
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 2 (a ring "
                                         "needs two processes)")
    return int(text)


_BARE = re.compile(r"\s*\d+(?:\.\d+)?\s*")


def latencies(text: str) -> tuple[int, ...]:
    """'0,1,2,5us' -> (0, 1000, 2000, 5000): interconnect latencies in ns, each once,
    in order; an item without a unit takes the last item's."""
    items = [item.strip() for item in text.split(",")]
    unit = re.sub(r"^[\d.\s]*", "", items[-1])
    try:
        out = tuple(parse_time_ns(item + unit if _BARE.fullmatch(item) and item != "0" else item,
                                  "--fabric-latency") for item in items)
    except SpecError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of times (e.g. "
                                         "'0,1,2,5,10us', '500ns,1ms')") from None
    if len(set(out)) < len(out):
        raise argparse.ArgumentTypeError(f"{text!r} names a latency twice")
    if max(out) > 10**9:
        raise argparse.ArgumentTypeError(f"{text!r}: a latency is more than 1s")
    return tuple(sorted(out))


def bandwidth(text: str) -> int:
    """'1Gbps' -> 125000000: an interconnect bandwidth in bytes a second."""
    try:
        return parse_bandwidth(text, "--fabric-bandwidth")
    except SpecError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a bandwidth of at least 1Mbps "
                                         "(e.g. '1Gbps', '10Gbit/s', '5GB/s')") from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_bench(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _interrupt)   # stopped: its racks, servers, files go too
    from benchmarks.machine import busy_cores

    with busy_cores(args.busy if args.kind != "compare" else 0):
        return importlib.import_module(f"benchmarks.{args.kind}").main(args)
