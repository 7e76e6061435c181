"""The README's two commands are the ones CI and users run; keep them true."""

import os

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def test_ci_runs_exactly_the_readme_test_command():
    readme = _read("README.md")
    ci_lines = [line for line in _read(".ci/run").splitlines()
                if line and not line.startswith("#")]
    command = ci_lines[-1]
    assert command == 'pip install ".[test]" && pytest'
    assert f"\n    {command}\n" in readme


def test_readme_main_command_names_a_real_verb():
    from splitrack.cli import build_parser

    assert "\n    pip install . && splitrack bench tcp --quick\n" in _read("README.md")
    args = build_parser().parse_args(["bench", "tcp", "--quick"])
    assert args.kind == "tcp" and args.quick
