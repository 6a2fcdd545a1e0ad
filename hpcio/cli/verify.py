"""``hpcio verify PATH``: check hashes and decode every record; non-zero exit on any error."""

from __future__ import annotations

import json
import sys

HELP = "check a dataset's hashes and decode every record; exit 1 if anything is bad"


def add_arguments(parser) -> None:
    parser.add_argument("path", help="dataset directory or file")
    parser.add_argument("--format", default=None, help="format name (default: sniffed)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="also unpickle pickled columns (runs code from the data: trusted data only)")


def run(args) -> int:
    from ..errors import CapabilityError
    from ..registry import get_format, sniff_format

    module = get_format(args.format) if args.format else sniff_format(args.path)
    check = getattr(module, "verify", None)
    if check is None:
        raise CapabilityError(f"format {module.NAME!r} has no verify", path=args.path)
    report = check(args.path, allow_pickle=args.allow_pickle)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        for err in report["errors"]:
            print(f"BAD  {err['error']}", file=sys.stderr)
        status = "OK" if report["ok"] else f"FAILED ({len(report['errors'])} errors)"
        print(f"{status}: {report.get('samples', 0)} samples in {report.get('shards', 0)} shards, "
              f"{report.get('checked', 0)} records decoded, "
              f"{report.get('hashes_checked', 0)} hashes checked")
    return 0 if report["ok"] else 1
