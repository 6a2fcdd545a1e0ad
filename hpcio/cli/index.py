"""``hpcio index PATH``: write the compact index (``index.hpcio``) of an MDS dataset."""

from __future__ import annotations

HELP = "write the compact index (index.hpcio) beside an MDS dataset's index.json"


def add_arguments(parser) -> None:
    parser.add_argument("path", help="MDS dataset directory (or its index.json)")
    parser.add_argument("--no-check", action="store_true",
                        help="trust index.json's counts and sizes instead of checking every shard file once")


def run(args) -> int:
    from ..errors import FormatSniffError
    from ..formats import mds

    if not mds.sniff(args.path):
        raise FormatSniffError("not an MDS dataset (no index.json naming format 'mds')", path=args.path)
    path = mds.write_compact_index(args.path, check_files=not args.no_check)
    print(f"wrote {path}")
    return 0
