"""``hpcio plan``: how many shards of what size, for a dataset and a cluster job."""

from __future__ import annotations

import argparse
import json
import sys

from .convert import byte_size

HELP = "recommend a shard count and size for a dataset, GPUs, workers, nodes and an inode quota"

DESCRIPTION = """\
Recommend how to shard a dataset: the shard count is a multiple of
ngpus x nworkers (each data loader worker of each rank reads whole shards),
shards are 100 MB - 1 GB (near --target), and the files fit the inode quota
(Jean Zay: 500k inodes on WORK, 100k on STORE).  Give a dataset (its bytes and sample
count are measured) or --bytes and --samples.  Prints the recommendation and why.

  hpcio plan raw/ --ngpus 32 --nworkers 8 --inode-quota 500000
  hpcio plan --bytes 1.2TB --samples 1281167 --ngpus 8 --nworkers 6
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("paths", nargs="*", metavar="DATASET", help="dataset(s) to measure")
    parser.add_argument("--from", dest="from_format", metavar="FORMAT", help="read the datasets as FORMAT")
    parser.add_argument("--bytes", type=byte_size, help="dataset size instead of measuring (e.g. 1.2TB)")
    parser.add_argument("--samples", type=int, help="sample count instead of measuring")
    parser.add_argument("--ngpus", type=int, default=1, metavar="G",
                        help="GPUs (ranks) that will read the data, over all nodes, as for hpcio convert (default 1)")
    parser.add_argument("--nworkers", type=int, default=1, help="data loader workers per GPU (default 1)")
    parser.add_argument("--inode-quota", type=int, help="inodes the output may use")
    parser.add_argument("--files-per-shard", type=int, default=1,
                        help="files each shard takes (2 for JINX with a .binx sidecar)")
    parser.add_argument("--target", type=byte_size, default="256MB", help="preferred shard size (default 256MB)")
    parser.add_argument("--json", action="store_true", help="print the recommendation as JSON")


def run(args) -> int:
    from hpcio.convert.plan import recommend
    from hpcio.errors import HpcioError, PlanError

    try:
        total, samples = args.bytes, args.samples
        if total is None or samples is None:
            if not args.paths:
                print("hpcio: error: give a dataset, or both --bytes and --samples", file=sys.stderr)
                return 2
            from hpcio.sources.inputs import expand_sources, source_totals

            totals = [source_totals(s) for s in expand_sources(args.paths, args.from_format)]
            total = sum(nbytes for _n, nbytes in totals) if total is None else total
            samples = sum(n for n, _nbytes in totals) if samples is None else samples
        rec = recommend(total, samples, ngpus=args.ngpus, nworkers=args.nworkers,
                        inode_quota=args.inode_quota, files_per_shard=args.files_per_shard,
                        target=args.target)
    except (PlanError, HpcioError) as exc:
        print(f"hpcio: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rec.to_json(), sort_keys=True))
        return 0
    print(f"{rec.num_shards} shards of about {rec.shard_bytes / 1e6:.1f} MB "
          f"(--num-shards {rec.num_shards}, a multiple of {rec.multiple_of}; {rec.inodes} files)")
    for reason in rec.reasons:
        print(f"  - {reason}")
    return 0
