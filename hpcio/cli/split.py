"""``hpcio split``: one dataset into parts (train/validation/test, or N equal parts)."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from ..errors import OptionError
from .convert import add_output_arguments, output_options, reader_options, run_guarded

HELP = "split datasets into parts (e.g. train/val/test) by a seeded random assignment"

DESCRIPTION = """\
Split the samples of SRC into parts written as OUTDIR/<name>: --parts N equal parts
(named part-0000, ...) or --fractions 0.9,0.05,0.05 with --names train,val,test.  Each
sample goes to exactly one part, chosen by a permutation seeded with --split-seed; each
part is then written like `hpcio convert` (same shard, fault and resume options; on one
or many MPI ranks).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("paths", nargs="+", metavar="SRC... OUTDIR", help="sources, then the output directory")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--parts", type=int, metavar="N", help="N parts of equal sample counts")
    how.add_argument("--fractions", metavar="F,F,...", help="fractions of the samples per part (sum <= 1)")
    parser.add_argument("--names", metavar="A,B,...", help="part names (default part-0000, part-0001, ...)")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the split (default 0)")
    add_output_arguments(parser, to_required=False)


def split_selections(n: int, *, parts: int | None = None, fractions=None, seed: int = 0) -> list[np.ndarray]:
    """Global sample ids of each part: a seeded permutation cut by counts.

    >>> [len(p) for p in split_selections(10, fractions=[0.7, 0.2, 0.1])]
    [7, 2, 1]
    >>> sorted(np.concatenate(split_selections(10, parts=3)).tolist()) == list(range(10))
    True
    """
    if parts is not None:
        if parts < 1:
            raise OptionError(f"--parts must be at least 1, got {parts}")
        counts = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    else:
        if any(f < 0 for f in fractions) or sum(fractions) > 1 + 1e-9:
            raise OptionError(f"--fractions must be non-negative and sum to at most 1, got {fractions}")
        counts = [int(np.floor(f * n + 1e-9)) for f in fractions]
    perm = np.random.default_rng(seed).permutation(n)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [np.sort(perm[bounds[i] : bounds[i + 1]]) for i in range(len(counts))]


def run(args) -> int:
    import dataclasses

    from hpcio.convert.driver import run_conversion
    from hpcio.registry import get_format
    from hpcio.sources import expand_sources, open_reader
    from hpcio.sources.inputs import check_source_options

    if len(args.paths) < 2:
        print("hpcio: error: give at least one source and the output directory", file=sys.stderr)
        return 2
    *sources, outdir = args.paths

    def work():
        fractions = None if args.fractions is None else [float(f) for f in args.fractions.split(",")]
        split_selections(0, parts=args.parts, fractions=fractions)  # refuses bad --parts, --fractions
        check_source_options(reader_options(args.reader_options), args.from_format)
        listed = expand_sources(sources, args.from_format)
        n = 0
        for src in listed:
            with open_reader(src, reader_options(args.reader_options)) as reader:
                n += len(reader)
        selections = split_selections(n, parts=args.parts, fractions=fractions, seed=args.split_seed)
        names = (args.names.split(",") if args.names else [f"part-{i:04d}" for i in range(len(selections))])
        if len(names) != len(selections):
            raise OptionError(f"--names gives {len(names)} names for {len(selections)} parts")
        to = args.to or listed[0].format
        options = output_options(args)
        options.check_against(get_format(to))  # before any part is written
        os.makedirs(outdir, exist_ok=True)
        return [run_conversion(sources, os.path.join(outdir, name), to, dataclasses.replace(options, selection=sel))
                for name, sel in zip(names, selections)]

    return run_guarded(work, args)
