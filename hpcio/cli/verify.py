"""``hpcio verify PATH``: decode every sample and compare stored checksums; exit 1 if
anything is bad."""

from __future__ import annotations

import sys

from .inspect import NO_CAPABILITY, add_arguments as _add_common_arguments, dataset_hook, print_json

HELP = "decode every sample and compare stored checksums; exit 1 if anything is bad"


def add_arguments(parser) -> None:
    _add_common_arguments(parser)
    parser.add_argument("--max-errors", type=int, default=1000,
                        help="problems listed at most (checking goes on; default 1000)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="also unpickle pickled values (runs code from the data: trusted data only)")


def run(args) -> int:
    verify = dataset_hook(args, "verify")
    if verify is None:
        return NO_CAPABILITY
    report = verify(args.path, allow_pickle=args.allow_pickle, max_errors=args.max_errors)
    if args.json:
        print_json(report)
    else:
        for err in report["errors"]:
            print(f"BAD  {err['error']}", file=sys.stderr)
        status = "OK" if report["ok"] else f"FAILED ({len(report['errors'])} problems listed)"
        print(f"{status}: {report['samples']} samples in {report['shards']} shards, "
              f"{report['checked']} records decoded, {report['hashes_checked']} hashes checked")
    return 0 if report["ok"] else 1
