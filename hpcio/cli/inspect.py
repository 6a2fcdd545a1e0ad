"""``hpcio inspect PATH``: what a dataset holds (samples, shards, fields, sizes)."""

from __future__ import annotations

import json
import sys

HELP = "summarise a dataset: samples, shards, fields, stored bytes"

#: Exit code of a command asked for a capability the dataset's format does not offer.
NO_CAPABILITY = 2


def add_arguments(parser) -> None:
    parser.add_argument("path", help="dataset directory or file")
    parser.add_argument("--format", default=None, help="format name (default: sniffed)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def dataset_hook(args, hook: str):
    """The ``hook`` of the format of ``args.path`` (``--format`` or sniffed), or None
    after saying on stderr that the format has none."""
    from ..errors import CapabilityError
    from ..registry import format_hook, get_format, sniff_format

    module = get_format(args.format) if args.format else sniff_format(args.path)
    try:
        return format_hook(module, hook)
    except CapabilityError:
        print(f"hpcio: format {module.NAME!r} has no {hook}", file=sys.stderr)
        return None


def print_json(report) -> None:
    print(json.dumps(report, indent=2, sort_keys=True, default=str))


def run(args) -> int:
    from ..formats.reports import InspectReport
    from ..units import format_bytes

    inspect = dataset_hook(args, "inspect")
    if inspect is None:
        return NO_CAPABILITY
    report = inspect(args.path)
    if args.json:
        print_json(report)
        return 0
    fields = ", ".join(f"{k}: {v}" if v else k for k, v in report["fields"].items())
    rows = [("format", report["format"]), ("path", report["path"]),
            ("samples", report["samples"]), ("shards", report["shards"]),
            ("stored bytes", format_bytes(report["stored_bytes"])), ("fields", fields or "-")]
    # then the details, and any key a format adds beside the schema's
    extra = {k: v for k, v in report.items() if k not in InspectReport.__annotations__}
    rows += [(k, json.dumps(v, default=str) if isinstance(v, (dict, list)) else v)
             for k, v in {**report["details"], **extra}.items()]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
