"""``hpcio bench``: hpcio against its peers on the same data, in one run."""

from __future__ import annotations

import argparse
import os

HELP = "compare hpcio with streaming, mldataforge, webdataset, pyarrow and HF datasets"


def add_arguments(parser):
    parser.description = (
        "Generate the demo profiles (or reuse them), write them in every format, measure "
        "the machine's physical limits, then run iterate, iterate-meta, shuffle and sort for "
        "hpcio and each peer, and hpcio's batch APIs (batch: sample dicts, columns: one array "
        "per field), in fresh processes (median of --repeats runs). "
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
    parser.add_argument("--op", action="append",
                        choices=["iterate", "iterate-meta", "shuffle", "sort", "batch", "columns",
                                 "shuffle-block", "shuffle-buffer", "dataloader"],
                        help="operation(s) to run (default: all; with --cold: iterate, shuffle, the block "
                             "and buffer shuffles shuffle-block and shuffle-buffer, and dataloader, a "
                             "shuffled epoch of hpcio.torch.DataLoader, batch 64, no workers; these three "
                             "only --cold runs)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh-process runs per measurement; the median is kept (default: %(default)s)")
    parser.add_argument("--only", action="append", help="run only systems whose label contains this word (repeatable)")
    parser.add_argument("--no-interop", action="store_true", help="skip the peers that need the Python 3.12 interop environment")
    parser.add_argument("--tuned", action="store_true",
                        help="run hpcio's readers with every process-wide switch of hpcio.tune on (HPCIO_TUNE=all), "
                             "as a program that owns its process may choose; by default they run as a user's "
                             "process does, tuned only as HPCIO_TUNE says")
    loader = parser.add_argument_group(
        "DataLoader loop", "the calculation-free I/O test: a PyTorch DataLoader over each format and storage "
        "tier (HPCIO_TIERS=name=path,..., default a temp dir and /dev/shm), compute emulated by sleeping; "
        "reports samples/s and accelerator utilisation (compute time / wall time)")
    loader.add_argument("--dataloader", action="store_true", help="run the DataLoader sweep")
    loader.add_argument("--loader-workers", type=int, action="append", help="num_workers values (default: 0 1 2)")
    loader.add_argument("--loader-batch", type=int, action="append", help="batch sizes (default: 32 256)")
    loader.add_argument("--loader-prefetch", type=int, action="append", help="prefetch_factor values (default: 2 8)")
    loader.add_argument("--loader-compute", type=float, action="append",
                        help="emulated compute seconds per sample, slept once per batch; repeat to sweep "
                             "(default: 5e-05)")
    loader.add_argument("--loader-cache", choices=["cold", "warm"], default="cold",
                        help="cold: evict each dataset's files from the page cache before every epoch "
                             "(checked with mincore), as a first epoch on a parallel filesystem; warm: "
                             "settle them in the page cache once (default: %(default)s)")
    loader.add_argument("--loader-format", action="append",
                        help="datasets to load (default: mds, mds-sample-zstd, jinx, jinx-zst-bin, parquet)")
    parser.add_argument("--staging", action="store_true",
                        help="measure staging with verification (hpcio.stage) against cp -r on the same files")
    parser.add_argument("--conversion", action="store_true",
                        help="measure writing the same samples with hpcio, streaming's MDSWriter and webdataset's ShardWriter")
    parser.add_argument("--pipeline-repeats", type=_whole(1), default=None, metavar="N",
                        help="runs of each --staging and --conversion system, taking turns; the median is kept "
                             "(default: 7)")
    parser.add_argument("--conversion-scale", type=_whole(1), default=None, metavar="K",
                        help="with --conversion, measure hpcio's 1->2 rank scaling again on K times each profile's "
                             "samples, where a job's fixed costs weigh less (1: not; default: 4)")
    packed = parser.add_argument_group(
        "packed LLM pretraining", "tokens/s of a tokenised, cached and packed hpcio pipeline through a "
        "DataLoader, beside litdata's TokensLoader reading the same tokens (text profile; needs tokenizers, "
        "and litdata for its side; both in the bench extra)")
    packed.add_argument("--packed-llm", action="store_true", help="run the packed-LLM row")
    packed.add_argument("--packed-len", type=_whole(1), default=None, metavar="TOKENS",
                        help="tokens per packed row (default: 2048)")
    packed.add_argument("--packed-rows", type=_whole(1), default=None, metavar="N",
                        help="rows per step (default: 8)")
    packed.add_argument("--packed-workers", type=_whole(0), action="append", metavar="N",
                        help="DataLoader num_workers values (default: 0 1 2)")
    _add_cold_arguments(parser)
    _add_node_cache_arguments(parser)
    group = parser.add_argument_group(
        "fresh-process open cost",
        "With --open-cost, write --vlm-samples vlm samples with each library's own writer (mosaicml-streaming's "
        "MDSWriter with pkl image lists, webdataset's ShardWriter, pyarrow, hpcio) and time, in --repeats fresh "
        "processes per system, importing the library, opening the dataset and reading its first sample, the "
        "files as the writers left them. Writes open_cost.json and open_cost.md to --out; --only picks systems.")
    group.add_argument("--open-cost", action="store_true", help="run the open-cost benchmark instead of the others")


def _add_node_cache_arguments(parser) -> None:
    from ..bench.node_cache import EPOCHS, FRACTION, ORDERS, SAMPLE_BYTES, SHARD_BYTES, SHARDS

    group = parser.add_argument_group(
        "node-local cache",
        "With --node-cache, write an MDS dataset (and its litdata copy) of --node-cache-shards shards, serve it "
        "through the emulated tier (--tier-latency-us, default 1000; --tier-bandwidth, default 200MB; no client "
        "page cache between opens, so every fetch reaches the tier) and read --node-cache-epochs epochs, cold, "
        "through a cache holding --node-cache-fraction of the dataset: hpcio.NodeCache with policy belady and "
        "lru, mosaicml-streaming's cache_limit and litdata's max_cache_size, in a global and a shard-by-shard "
        "(block) shuffle. Reports the bytes the tier served per epoch over the dataset's bytes, beside the "
        "Belady minimum of each run's shard sequence, samples/s and the time waited; writes node_cache.json "
        "and node_cache.md to --out. Runs once each, in fresh processes; --only picks systems (hpcio, "
        "belady, lru, streaming, litdata).")
    group.add_argument("--node-cache", action="store_true", help="run the node-cache benchmark instead of the others")
    group.add_argument("--node-cache-shards", type=_whole(1), default=SHARDS, metavar="N",
                       help="shards of the dataset (default: %(default)s)")
    group.add_argument("--node-cache-shard-bytes", type=_bytes, default=SHARD_BYTES, metavar="BYTES",
                       help="bytes of each shard (default: %(default)s)")
    group.add_argument("--node-cache-sample-bytes", type=_bytes, default=SAMPLE_BYTES, metavar="BYTES",
                       help="bytes of each sample; a global shuffle fetches more the more samples a shard holds "
                            "(default: %(default)s)")
    group.add_argument("--node-cache-fraction", type=_fraction, default=FRACTION, metavar="F",
                       help="the cache limit as a fraction of the dataset's bytes (default: %(default)s)")
    group.add_argument("--node-cache-epochs", type=_whole(1), default=EPOCHS, metavar="N",
                       help="epochs read in each run (default: %(default)s)")
    group.add_argument("--node-cache-order", action="append", choices=ORDERS,
                       help="order(s) to read in (default: both)")


def _fraction(text: str) -> float:
    """An argparse type: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number above 0 and at most 1, got {text!r}")
    return value


def _add_cold_arguments(parser) -> None:
    cold = parser.add_argument_group(
        "cold and larger-than-memory runs",
        "With --cold, each run starts with the dataset's files evicted from the page cache "
        "(checked with mincore) and reads synthetic datasets of --cold-size per format; "
        "--memory-limit confines each reader to a memory cgroup smaller than the dataset; "
        "--tier-latency-us reads through the emulated remote tier (tierfs, a FUSE "
        "passthrough adding that latency to every request). The device's O_DIRECT limits "
        "are measured with fio in the same run. Writes cold.json and cold.md to --out.")
    cold.add_argument("--cold", action="store_true", help="run the cold benchmark instead of the warm one")
    cold.add_argument("--cold-size", type=_bytes, default="2GB", metavar="BYTES",
                      help="bytes of each synthetic dataset (default: %(default)s)")
    cold.add_argument("--memory-limit", type=_bytes, default=None, metavar="BYTES",
                      help="memory cgroup limit of each reader process (default: none)")
    cold.add_argument("--tier-latency-us", type=int, default=None, metavar="US",
                      help="read through the emulated tier with this latency per request (with --dataloader: "
                           "add the tier 'emulated' to the sweep's tiers)")
    cold.add_argument("--tier-bandwidth", type=_bytes, default=None, metavar="BYTES",
                      help="the emulated tier's bandwidth cap in bytes/s, 0 for none (default: none; with "
                           "--node-cache 200MB)")
    cold.add_argument("--tier-max-background", type=_whole(0, 65535), default=0, metavar="N",
                      help="read-ahead requests the emulated tier's client keeps in flight "
                           "(default: FUSE's, 12; a Lustre client keeps 8 per storage target)")
    cold.add_argument("--tier-read-ahead-kb", type=_whole(0, 1024), default=0, metavar="KB",
                      help="the emulated tier's read-ahead window, the size of its requests, at most 1024 "
                           "(default: the kernel's, 128; needs root)")


def _whole(lo: int, hi: int | None = None):
    """An argparse type: a whole number from ``lo`` to ``hi`` (no bound when None)."""
    expected = f"of at least {lo}" if hi is None else f"from {lo} to {hi}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"expected a whole number {expected}, got {text!r}")
        return value
    return parse


def _bytes(text: str) -> int:
    from ..units import ByteSizeError, parse_bytes

    try:
        return parse_bytes(text)
    except ByteSizeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_cold(args) -> int:
    import json

    from ..bench import cold
    from ..errors import HpcioError

    data = args.data or os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    try:
        limits = cold.device_limits(data)
    except HpcioError as exc:  # tmpfs (/dev/shm) refuses O_DIRECT: the runs still compare
        limits = None
        print(f"device limits unknown: {exc}")
    else:
        print(f"device (fio, O_DIRECT): sequential {limits['sequential_bytes_per_s'] / 1e6:,.0f} MB/s, "
              f"random {limits['random_request_bytes'] >> 10} KiB {limits['random_bytes_per_s'] / 1e6:,.0f} MB/s "
              f"at depth {limits['random_best_depth']}")
    records = []
    for profile in args.profile or ("text", "vlm"):
        records += cold.run(profile, args.cold_size, data, ops=tuple(args.op or cold.COLD_OPS),
                            memory_limit=args.memory_limit, only=args.only,
                            include_interop=not args.no_interop, tier=_emulated_tier(args))
    with open(os.path.join(args.out, "cold.json"), "w") as f:
        json.dump({"device": limits, "runs": records}, f, indent=1)
    with open(os.path.join(args.out, "cold.md"), "w") as f:
        f.write(cold.markdown(limits, records))
    print(f"cold report written to {args.out}/cold.md and cold.json")
    return 0


def _emulated_tier(args) -> dict | None:
    """EmulatedTier's keyword arguments from the --tier-* options; None without a tier."""
    if args.tier_latency_us is None:
        return None
    return {"latency_us": args.tier_latency_us, "bandwidth": args.tier_bandwidth or 0,
            "max_background": args.tier_max_background, "read_ahead_kb": args.tier_read_ahead_kb}


def _run_node_cache(args) -> int:
    import json

    from ..bench import machine_facts
    from ..bench.node_cache import BANDWIDTH, LATENCY_US, markdown, node_cache_figures

    data = args.data or os.path.join(args.out, "data")
    os.makedirs(args.out, exist_ok=True)
    tier = {"latency_us": LATENCY_US if args.tier_latency_us is None else args.tier_latency_us,
            "bandwidth": BANDWIDTH if args.tier_bandwidth is None else args.tier_bandwidth,
            "max_background": args.tier_max_background, "read_ahead_kb": args.tier_read_ahead_kb}
    result = node_cache_figures(data, shards=args.node_cache_shards, shard_bytes=args.node_cache_shard_bytes,
                                sample_bytes=args.node_cache_sample_bytes, fraction=args.node_cache_fraction,
                                epochs=args.node_cache_epochs, orders=tuple(args.node_cache_order or ()) or None,
                                tier=tier, only=args.only)
    result["machine"] = machine_facts()
    table = markdown(result)
    with open(os.path.join(args.out, "node_cache.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "node_cache.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"node-cache report written to {args.out}/node_cache.md and node_cache.json")
    return 0


def _run_open_cost(args) -> int:
    import json

    from ..bench import machine_facts
    from ..bench.open_cost import markdown, open_cost_figures
    from ..bench.runner import interop_python

    data = os.path.join(args.data or os.path.join(args.out, "data"), f"open-cost-{args.vlm_samples}")
    os.makedirs(args.out, exist_ok=True)
    result = open_cost_figures(data, n=args.vlm_samples, repeats=args.repeats, only=args.only,
                               interop_python=None if args.no_interop else interop_python())
    result["machine"] = machine_facts()
    table = markdown(result)
    with open(os.path.join(args.out, "open_cost.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "open_cost.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"open-cost report written to {args.out}/open_cost.md and open_cost.json")
    return 0


def _loader_options(args) -> dict:
    from ..bench.loader import LOADER_FORMATS

    return {
        "workers": tuple(args.loader_workers or (0, 1, 2)),
        "batch_sizes": tuple(args.loader_batch or (32, 256)),
        "prefetch_factors": tuple(args.loader_prefetch or (2, 8)),
        "compute_per_sample": tuple(args.loader_compute or (50e-6,)),
        "emulated_tier": _emulated_tier(args),
        "formats": tuple(args.loader_format or LOADER_FORMATS),
        "cache": args.loader_cache,
    }


def _packed_options(args) -> dict:
    from ..bench.tokens import MAX_LEN, ROWS, WORKERS

    return {"workers": tuple(args.packed_workers or WORKERS), "max_len": args.packed_len or MAX_LEN,
            "rows": args.packed_rows or ROWS}


def run(args) -> int:
    from ..bench import CONVERSION_SCALE, OPERATIONS, run_bench
    from ..bench.pipeline import PIPELINE_REPEATS
    from ..tuning import ENVIRONMENT_VARIABLE

    if args.tuned:  # read by this process's first hpcio.tune() and inherited by the workers
        os.environ[ENVIRONMENT_VARIABLE] = "all"
    if args.cold:
        return _run_cold(args)
    if args.node_cache:
        return _run_node_cache(args)
    if args.open_cost:
        return _run_open_cost(args)

    result = run_bench(
        out_dir=args.out,
        data_dir=args.data,
        profiles=tuple(args.profile or ("text", "vlm")),
        sizes={"text": args.text_samples, "vlm": args.vlm_samples},
        ops=tuple(args.op or OPERATIONS),
        repeats=args.repeats,
        include_interop=not args.no_interop,
        only=args.only,
        dataloader=_loader_options(args) if args.dataloader else None,
        staging=args.staging,
        conversion=args.conversion,
        conversion_scale=CONVERSION_SCALE if args.conversion_scale is None else args.conversion_scale,
        pipeline_repeats=args.pipeline_repeats or PIPELINE_REPEATS,
        packed_llm=_packed_options(args) if args.packed_llm else None,
    )
    print(result["markdown"].split("## Physical limits")[0])
    print(f"reports written to {args.out}/ (results.md, results.csv, results.json, " 
          f"{len(result['plots'])} plots)")
    return 0
