"""``hpcio demo``: generate the demo datasets, or run the whole tour on them."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HELP = "generate deterministic demo data, or run the demo tour (write, read, shuffle, sort, split)"


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..demo import DEFAULT_COUNTS, PROFILES, TOUR_FORMATS

    sub = parser.add_subparsers(dest="demo_command", metavar="ACTION", required=True)
    profiles = ", ".join(f"{k}: {v}" for k, v in PROFILES.items())

    gen = sub.add_parser(
        "generate",
        help="write demo samples as JSON Lines (bytes fields as base64 data: URLs)",
        description="Write demo samples as JSON Lines; bytes fields (the vlm images) "
        "are base64 data: URLs (data:image/jpeg;base64,...), which hpcio convert decodes to bytes "
        "by default. A .zst or .gz suffix compresses the file. "
        f"Profiles: {profiles}.",
    )
    gen.add_argument("out", metavar="OUT", help="output file (.jsonl, .jsonl.zst, .jsonl.gz)")
    gen.add_argument("--profile", choices=sorted(PROFILES), default="vlm", help="default: vlm")
    gen.add_argument("-n", type=_count, default=100, help="number of samples (default: 100)")
    gen.add_argument("--seed", type=_count, default=0, help="dataset seed (default: 0)")
    gen.add_argument("--start", type=_count, default=0, help="index of the first sample (default: 0)")
    gen.add_argument("--no-progress", action="store_true",
                     help="no progress display (default: a bar on a terminal, a line every 30 s in a log)")

    tour = sub.add_parser(
        "run",
        help="generate demo data, write it in every available format, read it back "
        "(iterate, shuffle, sort, split) and print a table",
        description="Generate demo data, write it as shards in every format available "
        "in this build, open them with hpcio.open, iterate, shuffle(seed=42), sort and "
        "split them, check every sample byte for byte and print samples/s.",
    )
    tour.add_argument(
        "--out",
        help="keep the data in this directory (default: a temporary one, removed after)",
    )
    tour.add_argument("--profile", choices=sorted(PROFILES), default="vlm", help="default: vlm")
    tour.add_argument(
        "-n",
        type=_count,
        help="number of samples (default: "
        + ", ".join(f"{k} {v}" for k, v in DEFAULT_COUNTS.items())
        + ")",
    )
    tour.add_argument("--seed", type=_count, default=0, help="dataset seed (default: 0)")
    tour.add_argument(
        "--formats",
        default=",".join(TOUR_FORMATS),
        help=f"comma-separated formats to try (default: {','.join(TOUR_FORMATS)})",
    )
    tour.add_argument("--no-progress", action="store_true",
                      help="no progress display while generating the samples")


def _generate(args: argparse.Namespace) -> int:
    from ..demo import write_jsonl

    t0 = time.perf_counter()
    size = write_jsonl(args.out, args.profile, args.n, seed=args.seed, start=args.start,
                       progress=not args.no_progress)
    dt = time.perf_counter() - t0
    print(
        f"wrote {args.n} {args.profile} samples ({size / 1e6:.1f} MB of JSON) to {args.out} "
        f"in {dt:.2f} s ({args.n / max(dt, 1e-9):,.0f} samples/s)",
        file=sys.stderr,
    )
    return 0


def _tour(args: argparse.Namespace) -> int:
    from ..demo import format_report, tour

    formats = [f.strip() for f in args.formats.split(",") if f.strip()]

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.out:
        report = tour(args.out, args.profile, args.n, args.seed, formats, log=log,
                      progress=not args.no_progress)
    else:
        with tempfile.TemporaryDirectory(prefix="hpcio-demo-") as tmp:
            report = tour(os.path.join(tmp, "demo"), args.profile, args.n, args.seed,
                          formats, log=log, progress=not args.no_progress)
    print(format_report(report))
    if not report.ok:
        print(
            "hpcio demo run: no format completed the tour"
            if not any(r.status == "ok" for r in report.formats)
            else "hpcio demo run: some formats failed (see above)",
            file=sys.stderr,
        )
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    if args.demo_command == "generate":
        return _generate(args)
    return _tour(args)
