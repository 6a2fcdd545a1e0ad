"""``hpcio unstage DIR``: remove a staged copy (only one that ``hpcio stage`` made)."""

from __future__ import annotations

import sys

from ..errors import HpcioError
from ..staging.unstage import unstage

HELP = "remove a staged copy made by hpcio stage (refuses directories without its manifest)"


def add_arguments(parser) -> None:
    parser.add_argument("path", help="staged directory (holds .hpcio-manifest.json)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed")


def run(args) -> int:
    try:
        removed = unstage(args.path, dry_run=args.dry_run)
    except HpcioError as exc:
        print(f"hpcio: error: {exc}", file=sys.stderr)
        return 1
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(removed)} files from {args.path}")
    return 0
