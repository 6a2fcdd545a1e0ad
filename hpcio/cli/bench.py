"""``hpcio bench``: hpcio against its peers on the same data, in one run."""

from __future__ import annotations

HELP = "compare hpcio with streaming, mldataforge, webdataset, pyarrow and HF datasets"


def add_arguments(parser):
    parser.description = (
        "Generate the demo profiles (or reuse them), write them in every format, measure "
        "the machine's physical limits, then run iterate, iterate-meta, shuffle, sort and "
        "batch for hpcio and each peer in fresh processes (median of --repeats runs). "
        "Writes results.md/.csv/.json and PNG plots to --out. Peers that need Python 3.12 "
        "(mldataforge, HF datasets) run from the interop environment "
        "(tools/interop-env.sh; HPCIO_INTEROP_PYTHON)."
    )
    parser.add_argument("--out", default="bench-output", help="report directory (default: %(default)s)")
    parser.add_argument("--data", default=None, help="dataset cache directory (default: OUT/data); reused between runs")
    parser.add_argument("--profile", action="append", choices=["text", "vlm"],
                        help="profile(s) to run (default: both)")
    parser.add_argument("--text-samples", type=int, default=20000, help="samples in the text profile (default: %(default)s)")
    parser.add_argument("--vlm-samples", type=int, default=2000, help="samples in the vlm profile (default: %(default)s)")
    parser.add_argument("--op", action="append", choices=["iterate", "iterate-meta", "shuffle", "sort", "batch"],
                        help="operation(s) to run (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh-process runs per measurement; the median is kept (default: %(default)s)")
    parser.add_argument("--only", action="append", help="run only systems whose label contains this word (repeatable)")
    parser.add_argument("--no-interop", action="store_true", help="skip the peers that need the Python 3.12 interop environment")


def run(args) -> int:
    from ..bench import OPERATIONS, run_bench

    result = run_bench(
        out_dir=args.out,
        data_dir=args.data,
        profiles=tuple(args.profile or ("text", "vlm")),
        sizes={"text": args.text_samples, "vlm": args.vlm_samples},
        ops=tuple(args.op or OPERATIONS),
        repeats=args.repeats,
        include_interop=not args.no_interop,
        only=args.only,
    )
    print(result["markdown"].split("## Physical limits")[0])
    print(f"reports written to {args.out}/ (results.md, results.csv, results.json, " 
          f"{len(result['plots'])} plots)")
    return 0
