"""One rank of a job: run its program on a pComponent of the slice, keep its status.

    python -m splitrack.manager.rank RUN_DIR pN SLICE EXIT_FILE -- PROGRAM [ARGS...]

The rack manager starts one of these per process of a job, in a session of its
own (a terminal's Ctrl-C to `splitrack serve` does not reach it, and it outlives
a serve that stops), with stdin /dev/null, stdout and stderr the job's output
files, and the rank's environment (jobs.Job.rank_env). It launches the program
through the pMonitor of pN as `splitrack run` does (splitrack/launch.py,
run_program with slice=SLICE), forwards SIGINT, SIGTERM and SIGHUP to it, and
when it ends writes EXIT_FILE atomically: {"exit": status, "end_s": unix time}
-- what a manager, this one or a restarted one, reads. Its own exit status is
the program's.
"""

import json
import os
import sys
import time

from splitrack.launch import EXIT_CANNOT_RUN, LaunchError, run_program


def main(argv: list[str]) -> int:
    run_dir, pcomponent, slice_name, exit_path, dashes, *command = argv
    assert dashes == "--" and command, "usage: RUN_DIR pN SLICE EXIT_FILE -- PROGRAM [ARGS]"
    try:
        status = run_program(run_dir, pcomponent, command, slice=slice_name)
    except LaunchError as exc:
        print(f"splitrack: rank {os.environ.get('SPLITRACK_RANK')}: {exc}", file=sys.stderr)
        status = EXIT_CANNOT_RUN
    tmp = f"{exit_path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"exit": status, "end_s": time.time()}, f)
    os.replace(tmp, exit_path)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
