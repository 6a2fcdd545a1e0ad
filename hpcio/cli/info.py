"""``hpcio info``: versions, compiled kernels, codec libraries, backends and MPI."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "show the compiled kernels, codec libraries, optional backends and MPI library"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--no-mpi",
        action="store_true",
        help="do not start MPI in a child process to ask its library version",
    )


def run(args: argparse.Namespace) -> int:
    """Print the report; exit code 1 when the compiled core is broken."""
    from ..info import collect, format_text

    info = collect(mpi=not args.no_mpi)
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_text(info))
    return 1 if "error" in info["core"] else 0
