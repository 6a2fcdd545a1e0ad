"""``hpcio locate DATASET INDEX``: the file and bytes of one sample, and its source."""

from __future__ import annotations

import argparse
import sys

HELP = "where sample INDEX of a dataset lies (file, byte range) and which source line, row or tar member it came from"

DESCRIPTION = """\
Print where sample INDEX of DATASET lies: the shard file and the byte range of the
sample in it (MDS: its record in the shard's offset table; JINX: its line; WebDataset:
its tar members' headers and data; MessagePack: its object; JSON Lines: its line).
Formats that store samples in compressed chunks (Zarr, HDF5) or by column (Parquet) say
what is known instead of a byte range.

For a dataset `hpcio convert` wrote, also print the source the sample came from, read
from the lineage record DATASET/.hpcio/lineage.json (in a Zarr store, the attributes
of the group DATASET/.hpcio): the source file and the 1-based
line (JSON Lines, counted as a text editor counts, blank lines included), the 0-based
row (Parquet) or object (MessagePack) within the file, or the tar members.

INDEX counts as hpcio.open(DATASET)[INDEX] does; a negative INDEX counts from the end.
"""

EPILOG = """\
exit status: 0 when the sample was found (with or without a lineage record), 1 for an
unreadable dataset, 2 for bad arguments, an INDEX out of range included.
"""

#: Exit code of a usage error: bad arguments, or an index outside the dataset.
USAGE = 2


def add_arguments(parser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("dataset", help="dataset directory or file")
    parser.add_argument("index", type=int, help="sample index (negative: from the end)")
    parser.add_argument("--format", default=None, help="format name of DATASET (default: sniffed)")
    parser.add_argument("--json", action="store_true", help="print the location as JSON")


def _range(place) -> str:
    if place.start is None:
        return "-"
    return f"{place.start}-{place.stop} ({place.stop - place.start} bytes)"


def rows(location) -> list[tuple[str, str]]:
    """The lines of the plain report, as (label, value) pairs."""
    here = location.place
    out = [("dataset", f"{location.dataset} ({location.format})"), ("sample", str(location.index)),
           ("file", here.file or "-"), ("bytes", _range(here)), ("where", here.note)]
    if here.members:
        out.append(("members", ", ".join(here.members)))
    if location.source is None:
        out.append(("source", f"unknown: {location.note}"))
        return out
    out += [("plan shard", str(location.shard)), ("source", f"{location.source} ({location.source_format})"),
            ("source sample", str(location.source_sample))]
    there = location.source_place
    if there is None:
        out.append(("source note", location.note))
        return out
    if there.file != location.source:
        out.append(("source file", there.file or "-"))
    for label, value in (("line", there.line), ("row", there.row)):
        if value is not None:
            out.append((label, str(value)))
    if there.members:
        out.append(("members", ", ".join(there.members)))
    out += [("source bytes", _range(there)), ("source where", there.note)]
    return out


def run(args) -> int:
    from ..errors import IndexOutOfRangeError
    from ..lineage import locate
    from .inspect import print_json

    try:
        location = locate(args.dataset, args.index, format=args.format)
    except IndexOutOfRangeError as exc:
        print(f"hpcio: error: {exc}", file=sys.stderr)
        return USAGE
    if args.json:
        print_json(location.to_json())
        return 0
    table = rows(location)
    width = max(len(label) for label, _ in table)
    for label, value in table:
        print(f"{label:<{width}}  {value}")
    return 0
