"""``hpcio join``: several datasets into one, in order."""

from __future__ import annotations

import argparse
import sys

from .convert import add_output_arguments, output_options, run_guarded

HELP = "join datasets into one sharded dataset, keeping their order"

DESCRIPTION = """\
Join SRC datasets into DST: the samples of the sources one after the other (shard 0
holds the beginning of the first source), cut into byte-balanced shards.  The output
format defaults to the first source's.  Runs on one or many MPI ranks like
`hpcio convert`, with the same shard, fault and resume options.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("paths", nargs="+", metavar="SRC... DST", help="sources, then the output directory")
    add_output_arguments(parser, to_required=False)


def run(args) -> int:
    from hpcio.convert.driver import run_conversion
    from hpcio.sources import expand_sources

    if len(args.paths) < 2:
        print("hpcio: error: give at least one source and the output directory", file=sys.stderr)
        return 2
    *sources, dst = args.paths

    def work():
        to = args.to or expand_sources(sources[:1], args.from_format)[0].format
        return [run_conversion(sources, dst, to, output_options(args, order="source"))]

    return run_guarded(work, args)
