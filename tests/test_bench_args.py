"""Every option of every `splitrack bench` verb, given a bad value, is refused by
argparse in one line with exit 2, before any work starts (no rack, no file)."""

import importlib
import os

import pytest

from splitrack.cli import main

MEASURING = ("fit", "extcache", "tcp", "wordcount", "hot", "rackmem")
NO_DIR = "/no/such/dir/out"

CASES = [(verb, [flag, NO_DIR + ext], "no such directory")
         for verb in MEASURING
         for flag, ext in (("--json", ".json"), ("--csv", ".csv"), ("--samples", ".csv"))]
CASES += [(verb, args, says) for verb in MEASURING for args, says in (
    (["--reps", "0"], "argument --reps: '0' is not a whole number >= 1"),
    (["--reps", "many"], "argument --reps: 'many' is not a whole number >= 1"),
    (["--duration", "0"], "argument --duration: '0' is not a number of seconds > 0"),
    (["--duration", "nan"], "argument --duration: 'nan' is not a number of seconds > 0"),
    (["--reps", "2", "--duration", "3"], "not allowed with argument --reps"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
)]
CASES += [(verb, ["--rounds", "-5"], "argument --rounds: '-5' is not a whole number >= 1")
          for verb in ("fit", "extcache", "tcp", "hot")]
CASES += [(verb, ["--spec", "/no/such/rack.toml"], "/no/such/rack.toml: cannot read")
          for verb in ("fit", "extcache", "tcp", "wordcount")]
CASES += [
    ("tcp", ["--modes", "ddio,carrier-pigeon"], "unknown mode(s) carrier-pigeon"),
    ("tcp", ["--sizes", "128,0"], "argument --sizes: '0' is not a size in bytes"),
    ("tcp", ["--sizes", "128,128"], "argument --sizes: 128 given twice in '128,128'"),
    ("tcp", ["--modes", "ddio,ddio"], "argument --modes: ddio given twice"),
    ("tcp", ["--samples", "/tmp/s.npy"], "argument --samples: /tmp/s.npy: name it .csv"),
    ("wordcount", ["--seed", "-1"], "argument --seed: '-1' is not a whole number >= 0"),
    ("tcp", ["--plot", NO_DIR + ".png"], "no such directory"),
    ("tcp", ["--size", "3MB"], "unrecognized arguments: --size 3MB"),
    ("wordcount", ["--modes", "fit"], "unknown mode(s) fit (have linux, ddio, dma)"),
    ("wordcount", ["--size", "lots"], "argument --size: 'lots' is not a size"),
    ("wordcount", ["--seed", "x"], "argument --seed: 'x' is not a whole number >= 0"),
    ("wordcount", ["--plot", NO_DIR + ".png"], "no such directory"),
    ("wordcount", ["--rounds", "5"], "unrecognized arguments: --rounds 5"),
    ("wordcount", ["--memory", "disk"], "argument --memory: invalid choice: 'disk'"),
    ("wordcount", ["--extcache", "4MiB,5KiB"], "'5KiB' is not a whole number of MiB"),
    ("wordcount", ["--extcache", "4MiB,4MiB"], "given twice"),
    ("rackmem", ["--extcache", "much"], "argument --extcache: 'much' is not a size"),
    ("fit", ["--plot", "f.png"], "unrecognized arguments: --plot f.png"),
    ("hot", ["--busy"], "unrecognized arguments: --busy"),
    ("fit", ["--busy", "0"], "argument --busy: '0' is not a whole number >= 1"),
    ("tcp", ["--busy", "two"], "argument --busy: 'two' is not a whole number >= 1"),
    ("compare", ["/no/such/old.json", "/no/such/new.json"], "/no/such/old.json: no such file"),
    ("compare", [__file__, __file__, "--fail-above", "-1"],
     "argument --fail-above: '-1' is not a percentage >= 0"),
    ("compare", [__file__], "the following arguments are required: NEW.json"),
]


@pytest.mark.parametrize("verb, args, says", CASES,
                         ids=[f"{v} {' '.join(a)}" for v, a, _ in CASES])
def test_a_bad_value_is_one_line_and_exit_2(run_root, capsys, verb, args, says):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", verb, *args])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert len(err.splitlines()) == 1 and says in err, err
    assert not os.listdir(run_root)   # refused before anything started


@pytest.mark.parametrize("verb, rounds, reps", [
    ("fit", "BENCH_FIT_ROUNDS", "BENCH_FIT_REPS"), ("extcache", "MISS_ROUNDS", "REPS"),
    ("tcp", None, None), ("wordcount", None, "REPS"), ("hot", "ROUNDS", "REPS"),
    ("native", "ROUNDS", "REPS"), ("rackmem", "ROUNDS", "REPS")])
def test_help_says_the_defaults_the_benchmarks_use(capsys, verb, rounds, reps):
    module = importlib.import_module(f"benchmarks.{verb}")
    if verb == "tcp":
        rounds, reps = module.FULL["rounds"], module.FULL["reps"]
    else:
        rounds = rounds and getattr(module, rounds)
        reps = getattr(module, reps)
    with pytest.raises(SystemExit):
        main(["bench", verb, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default: {reps})" in text
    if rounds:
        assert f"(default: {rounds}" in text


def test_bench_without_a_verb_says_which_there_are(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench"])
    assert exit_.value.code == 2
    assert "VERB" in capsys.readouterr().err
