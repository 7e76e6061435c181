"""The command line's value checks: argparse `type=` functions.

Each takes the text as typed and returns the value, or raises
argparse.ArgumentTypeError with a message that names what is wrong, so a bad
command line is refused in one line (exit 2) before anything starts.

    rack_name("default")        a rack name (spec.check_name)
    count("5") -> 5             a whole number >= 1 (--rounds, --reps)
    seed("7") -> 7              a whole number >= 0
    seconds("2.5") -> 2.5       a positive number of seconds (--duration)
    percent("5") -> 5.0         a number >= 0 (--fail-above)
    sizes("128,4096") -> (128, 4096)   comma-separated message sizes in bytes
    size("64MB") -> 64000000    one size with a unit (spec.parse_size)
    out_file("r.json")          a file the run may write at its end
    samples_file("s.npz")       the same, named .csv or .npz
    in_file("old.json")         a file that exists and can be read now
    spec_file("rack.toml")      a rack spec that loads (spec.load_spec)
    choices(("a", "b"))         a checker of comma-separated names from a list

A list (sizes, choices) names each item once.
"""

import argparse
import os
from collections.abc import Callable

from splitrack.params import BENCH_SIZE_MAX_BYTES
from splitrack.spec import SpecError, check_name, load_spec, parse_size


def rack_name(text: str) -> str:
    try:
        return check_name(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return value


def _once(items: tuple, text: str) -> tuple:
    twice = sorted({str(i) for i in items if items.count(i) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{', '.join(twice)} given twice in {text!r}")
    return items


def _number(text: str, what: str, ok: Callable[[float], bool]) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not ok(value):   # nan fails every test
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def seconds(text: str) -> float:
    return _number(text, "a number of seconds > 0", lambda v: 0 < v < float("inf"))


def percent(text: str) -> float:
    return _number(text, "a percentage >= 0", lambda v: 0 <= v < float("inf"))


def sizes(text: str) -> tuple[int, ...]:
    for z in text.split(","):
        if not z.strip().isdigit() or not 1 <= int(z) <= BENCH_SIZE_MAX_BYTES:
            raise argparse.ArgumentTypeError(
                f"{z!r} is not a size in bytes from 1 to {BENCH_SIZE_MAX_BYTES}")
    return _once(tuple(int(z) for z in text.split(",")), text)


def size(text: str) -> int:
    try:
        return parse_size(text)
    except SpecError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (bytes, or e.g. '64MB', '1.5GB')") from None


def sizes_list(text: str) -> list[int]:
    """Comma-separated sizes with units (extCache sizes: whole MiB, at least 1 MiB)."""
    out = [size(z.strip()) for z in text.split(",")]
    for z, n in zip(text.split(","), out, strict=True):
        if n < 1 << 20 or n % (1 << 20):
            raise argparse.ArgumentTypeError(f"{z.strip()!r} is not a whole number of MiB")
    return list(_once(tuple(out), text))


def out_file(text: str) -> str:
    where = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(where):
        raise argparse.ArgumentTypeError(f"{where}: no such directory")
    if not os.access(where, os.W_OK | os.X_OK) or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text}: cannot write there")
    return text


def samples_file(text: str) -> str:
    if not text.endswith((".csv", ".npz")):
        raise argparse.ArgumentTypeError(f"{text}: name it .csv (text) or .npz (numpy)")
    return out_file(text)


def in_file(text: str) -> str:
    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text}: no such file, or not readable")
    return text


def spec_file(text: str) -> str:
    try:
        load_spec(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def choices(allowed: tuple[str, ...], what: str = "mode") -> Callable[[str], tuple[str, ...]]:
    def check(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(","))
        bad = [n for n in names if n not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {', '.join(bad)} (have {', '.join(allowed)})")
        return _once(names, text)
    return check
