"""``hpcio convert`` (also ``hpcio-convert``): any readable dataset into training shards."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ByteSizeError, OptionError
from ..units import format_bytes, parse_bytes
from ._parser import new_parser

HELP = "convert datasets into shards (MDS, JINX, WebDataset, Zarr, HDF5), on one or many MPI ranks"

DESCRIPTION = """\
Convert SRC datasets (JSONL, Parquet, MessagePack, tar shards, MDS, JINX, ...) into the
sharded dataset DST in the format given by --to.

Run it as is on one core, or under an MPI launcher to share the work:
  mpiexec -n 8 python -m mpi4py -m hpcio.cli.main convert raw/*.jsonl shards/ --to mds
  srun hpcio-convert raw/ shards/ --to jinx --ngpus 32 --nworkers 8
Every rank writes whole shards; the output is byte-identical at any rank count, and DST
appears only once complete (it is built in a hidden .DST.hpcio-partial beside it).

Shards: their number is a multiple of ngpus x nworkers (or --shards-multiple-of) and
their mean size at most --shard-size (default 256MB), or exactly --num-shards.  Samples
are spread over shards by a seeded permutation (--seed), so every shard is a random
sample of the whole input, and shards hold equal bytes within a few percent.

Faults: without --skip-bad the first sample that cannot be read, mapped or written stops
the run and names its file, sample index and byte offset.  With --skip-bad such samples
are left out and listed in DST.bad-samples.jsonl.  After a crash or kill, rerun the
same command with --resume: only missing or damaged shards are written again.
SIGTERM (a time limit) or SIGUSR1 (srun --signal=USR1@60) stops the run at the next
round boundary with exit code 75; --resume on a fresh start simply starts, and on a
finished, verified DST exits 0 without writing: one command line serves every resubmission.

Progress goes to stderr on rank 0: a bar on a terminal, a plain line every
$HPCIO_PROGRESS_INTERVAL seconds (default 30) otherwise.

MDS across ranks: each rank writes the records it made into every shard's file at their
place, and only their lengths cross between ranks, while the mean run a rank writes into
a shard is at least $HPCIO_CONVERT_PLACED_RUN_BYTES (default 1048576; 0: always).
Smaller runs (thousands of ranks), shards compressed whole and hashed shards send their
records to the rank writing the shard.
"""

def byte_size(text: str) -> int:
    """:func:`hpcio.units.parse_bytes` as an argparse ``type``, so a bad size is reported
    as a usage error with the parser's own message.

    >>> byte_size("256MB"), byte_size("1GiB"), byte_size("4096")
    (256000000, 1073741824, 4096)
    """
    try:
        return parse_bytes(text)
    except ByteSizeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _option(text: str):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


# Reader options that may be given several times, their values gathered into a list.
_REPEATABLE = ("ref_root",)


def reader_options(pairs) -> dict:
    """``-I KEY=VALUE`` pairs as options: the last value of a key wins, but the values
    of a repeatable key (``-I ref_root=A -I ref_root=B``) are all kept, in order."""
    out: dict = {}
    for key, value in pairs:
        if key in _REPEATABLE:
            out.setdefault(key, []).append(value)
        else:
            out[key] = value
    return out


def add_output_arguments(parser: argparse.ArgumentParser, *, to_required: bool = True) -> None:
    """The options every command that writes shards shares (convert, split, join)."""
    out = parser.add_argument_group("output")
    out.add_argument("--to", required=to_required, metavar="FORMAT",
                     help="output format: mds, jinx, webdataset, zarr, hdf5, parquet")
    out.add_argument("--from", dest="from_format", metavar="FORMAT",
                     help="read every source as FORMAT instead of detecting it")
    out.add_argument("--compression", help="output compression, e.g. sample::zstd (MDS), zst (JINX)")
    out.add_argument("--read-option", "-I", dest="reader_options", action="append", type=_option, default=[],
                     metavar="KEY=VALUE", help="source reader option (VALUE parsed as JSON when it can be), e.g. "
                          "base64_fields=images, ref_fields=image, ref_root=DIR (given again: another "
                          "directory references may name), decode_data_urls=false; repeatable")
    out.add_argument("--option", "-O", dest="writer_options", action="append", type=_option, default=[],
                     metavar="KEY=VALUE", help="extra writer option (VALUE parsed as JSON when it can be); repeatable")
    shards = parser.add_argument_group("shards")
    size = shards.add_mutually_exclusive_group()
    size.add_argument("--shard-size", type=byte_size, metavar="BYTES",
                      help="target bytes per shard (default 256MB; suffixes kB MB GB KiB MiB GiB)")
    size.add_argument("--num-shards", type=int, metavar="N", help="exact number of shards")
    shards.add_argument("--ngpus", type=int, default=1, metavar="G", help="GPUs (ranks) that will read the data")
    shards.add_argument("--nworkers", type=int, default=1, metavar="W", help="data loader workers per GPU")
    shards.add_argument("--shards-multiple-of", type=int, metavar="K",
                        help="make the shard count a multiple of K (instead of G x W)")
    shards.add_argument("--seed", type=int, default=0, help="seed of the sample-to-shard assignment (default 0)")
    samples = parser.add_argument_group("samples")
    samples.add_argument("--fields", metavar="A,B,...", type=lambda s: [f for f in s.split(",") if f],
                         help="keep only these fields")
    samples.add_argument("--map", metavar="MODULE:FUNCTION",
                         help="apply FUNCTION(sample) -> sample (or None to drop it) before writing")
    samples.add_argument("--filter", metavar="MODULE:FUNCTION",
                         help="keep only samples for which FUNCTION(sample) is true")
    run = parser.add_argument_group("run")
    run.add_argument("--skip-bad", action="store_true",
                     help="leave out samples that fail and list them in DST.bad-samples.jsonl")
    run.add_argument("--resume", action="store_true", help="finish an interrupted run of the same command")
    run.add_argument("--round-size", dest="round_bytes", type=byte_size, metavar="BYTES",
                     help="memory each rank holds samples in at a time (default 512MiB, or "
                          "$HPCIO_CONVERT_ROUND_BYTES), estimated as their stored bytes plus about 220 "
                          "bytes a sample and 72 a field for the Python objects; a round holds at least "
                          "one shard per rank; in a seeded conversion of several rounds the sources are "
                          "read once, ahead of the rounds, into a file per round")
    run.add_argument("--no-progress", action="store_true", help="no progress display")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("paths", nargs="+", metavar="SRC... DST",
                        help="source files or directories, then the output directory")
    add_output_arguments(parser)
    subset = parser.add_argument_group("subset")
    subset.add_argument("--skip", type=int, default=0, metavar="N", help="leave out the first N samples")
    subset.add_argument("--take", type=int, metavar="N", help="convert at most N samples (after --skip)")
    subset.add_argument("--order", choices=["seeded", "source"], default="seeded",
                        help="seeded: spread samples over shards (default); source: keep the input order")


def output_options(args, **extra):
    """The :class:`hpcio.convert.ConvertOptions` of the shared options, and ``extra``
    (those of one command), for :func:`hpcio.convert.driver.run_conversion`."""
    from hpcio.convert.spec import ConvertOptions

    return ConvertOptions(
        from_format=args.from_format,
        compression=args.compression,
        shard_size=args.shard_size,
        num_shards=args.num_shards,
        ngpus=args.ngpus,
        nworkers=args.nworkers,
        shards_multiple_of=args.shards_multiple_of,
        fields=args.fields,
        map=args.map,
        filter=args.filter,
        skip_bad=args.skip_bad,
        resume=args.resume,
        seed=args.seed,
        round_bytes=args.round_bytes,
        writer_options=dict(args.writer_options),
        reader_options=reader_options(args.reader_options),
        progress=not args.no_progress,
        **extra,
    )


def print_summary(summary: dict, as_json: bool, stream=None) -> None:
    stream = sys.stdout if stream is None else stream
    if as_json:
        print(json.dumps(summary, sort_keys=True), file=stream)
        return
    if summary.get("already_complete"):
        print(f"{summary['output']} is already complete ({summary['num_shards']} shards, verified): "
              "nothing to do", file=stream)
        return
    rate = summary["samples_written"] / max(summary["seconds"], 1e-9)
    print(
        f"wrote {summary['output']} ({summary['format']}): {summary['num_shards']} shards, "
        f"{summary['samples_written']} samples, {summary['bytes_written'] / 1e6:.1f} MB "
        f"in {summary['seconds']:.1f}s on {summary['ranks']} rank(s) ({rate:.0f} samples/s); "
        f"shard bytes within {100 * summary['imbalance']:.1f}% of the mean",
        file=stream,
    )
    from hpcio.convert.driver import PhaseClock

    spans = []
    for name, seconds in (summary.get("phases") or {}).items():
        lo, hi = min(seconds), max(seconds)
        if hi >= PhaseClock.SHOWN:
            spans.append(f"{name} {hi:.3f}" if hi - lo < PhaseClock.SHOWN else f"{name} {lo:.3f}-{hi:.3f}")
    if spans:
        print("seconds per phase" + (" (fastest-slowest rank)" if summary["ranks"] > 1 else "") + ": "
              + ", ".join(spans), file=stream)
    if summary.get("peak_rss_bytes"):
        print(f"peak resident memory (largest rank): {format_bytes(max(summary['peak_rss_bytes']))}", file=stream)
    if summary.get("shards_kept"):
        print(f"resumed: kept {summary['shards_kept']} complete shards, wrote {summary['shards_written']}", file=stream)
    if summary.get("filtered"):
        print(f"filtered out: {summary['filtered']} samples", file=stream)
    if summary.get("bad_samples"):
        print(f"skipped {summary['bad_samples']} bad samples, listed in {summary['report']}", file=stream)


def run_guarded(fn, args) -> int:
    """Run ``fn()``; print hpcio errors (on rank 0 only) and return the exit code."""
    from hpcio.convert.jobstate import ConversionInterrupted, stop_on_signals
    from hpcio.distributed.launcher import launcher_world_size
    from hpcio.errors import HpcioError

    try:
        with _job_tuning(), stop_on_signals():
            summaries = fn()
    except ConversionInterrupted as exc:
        if _rank() == 0:
            print(f"hpcio: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        from hpcio.convert.driver import RESUME_HINT

        if _rank() == 0:
            print(f"hpcio: interrupted (Ctrl-C); {RESUME_HINT}", file=sys.stderr)
        return 130
    except (HpcioError, ValueError, ImportError) as exc:
        if _rank() == 0 or launcher_world_size() == 1:
            print(f"hpcio: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, OptionError) else 1
    if _rank() == 0:
        for summary in summaries:
            print_summary(summary, args.json)
    return 0


def _job_tuning():
    """A conversion job owns its process, so it runs with every :func:`hpcio.tune` switch
    on, unless ``HPCIO_TUNE`` says which (``HPCIO_TUNE=none``: none)."""
    import contextlib
    import os

    from hpcio.tuning import ENVIRONMENT_VARIABLE, fully_tuned

    return contextlib.nullcontext() if ENVIRONMENT_VARIABLE in os.environ else fully_tuned()


def _rank() -> int:
    """This process's rank in an MPI the job started (0 without one); never starts MPI,
    and never refuses a world, since a refusal may be the error being reported."""
    from hpcio.distributed.comm import running_comm

    world = running_comm()
    return 0 if world is None else world.rank


def run(args) -> int:
    from hpcio.convert.driver import run_conversion

    if len(args.paths) < 2:
        print("hpcio: error: give at least one source and the output directory", file=sys.stderr)
        return 2
    *sources, dst = args.paths
    options = output_options(args, skip=args.skip, take=args.take, order=args.order)
    return run_guarded(lambda: [run_conversion(sources, dst, args.to, options)], args)


def main(argv=None) -> int:
    """``python -m hpcio.cli.convert`` (same as ``hpcio convert``)."""
    parser = new_parser(prog="hpcio-convert")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
