"""``hpcio inspect PATH``: what a dataset holds (samples, shards, columns, compression, sizes)."""

from __future__ import annotations

import json

HELP = "summarise a dataset: samples, shards, columns, compression, sizes"


def add_arguments(parser) -> None:
    parser.add_argument("path", help="dataset directory or file")
    parser.add_argument("--format", default=None, help="format name (default: sniffed)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from ..errors import CapabilityError
    from ..registry import get_format, sniff_format

    module = get_format(args.format) if args.format else sniff_format(args.path)
    summarise = getattr(module, "inspect", None)
    if summarise is None:
        raise CapabilityError(f"format {module.NAME!r} has no inspect", path=args.path)
    summary = summarise(args.path)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    else:
        width = max(map(len, summary))
        for key, value in summary.items():
            if isinstance(value, dict) and value:
                print(f"{key:<{width}}  " + ", ".join(f"{k}: {v}" for k, v in value.items()))
            elif isinstance(value, (list, tuple)):
                print(f"{key:<{width}}  {', '.join(map(str, value)) or '-'}")
            else:
                print(f"{key:<{width}}  {value}")
    return 0
