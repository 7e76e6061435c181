"""What every benchmark does with its report: print the table, write the JSON."""

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.machine import describe


def finish(report: dict[str, Any], args: argparse.Namespace,
           print_table: Callable[[dict[str, Any]], None]) -> int:
    report["machine"] = describe(bool(getattr(args, "busy", False)))
    print_table(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
