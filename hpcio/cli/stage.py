"""``hpcio stage SRC DST``: copy a dataset to a faster tier, verified and resumable."""

from __future__ import annotations

import sys

from ..errors import HpcioError, SymlinkError
from ..staging.plan import DEFAULT_CHUNK_BYTES
from ..staging.stage import stage
from ..units import parse_bytes

HELP = "copy a dataset to another tier: plan space and inodes, parallel verified copy, resume"


def add_arguments(parser) -> None:
    parser.add_argument("src", help="dataset directory (any format or any tree of files), or a single-file dataset")
    parser.add_argument("dst", help="destination directory (created if needed); re-running resumes")
    parser.add_argument("--threads", type=int, default=None,
                        help="copy threads per process (default: $SLURM_CPUS_PER_TASK, else the CPUs allowed)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and check space; write nothing")
    parser.add_argument("--chunk-size", default=str(DEFAULT_CHUNK_BYTES),
                        help="split files larger than this into chunks copied in parallel (default 256Mi)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--node-local", dest="node_local", action="store_true", default=None,
                       help="DST is private to each node: one leader per node copies everything")
    where.add_argument("--shared", dest="node_local", action="store_false",
                       help="DST is shared by all nodes: every rank copies a part")
    parser.add_argument("--no-mpi", action="store_true",
                        help="never import mpi4py; under srun the first task (per node if node-local) copies")
    parser.add_argument("--method", choices=("auto", "copy_file_range", "readwrite"), default="auto",
                        help="copy primitive (default auto: read, hash and write through a 1 MiB buffer in one "
                             "pass; copy_file_range: in-kernel copy with a hashing thread, for filesystems "
                             "that copy server-side or reflink)")
    durability = parser.add_mutually_exclusive_group()
    durability.add_argument("--fsync", dest="fsync", action="store_true", default=None,
                            help="fsync every copy, directory and the manifest before publishing "
                                 "(default: only for a shared destination)")
    durability.add_argument("--no-fsync", dest="fsync", action="store_false",
                            help="never fsync (default for a node-local destination, which does not "
                                 "outlive the job; a resumed run re-verifies what it keeps)")
    links = parser.add_mutually_exclusive_group()
    links.add_argument("--follow-symlinks", action="store_true",
                       help="copy what links in SRC point to (each must lie inside SRC) instead of "
                            "recreating them as links")
    links.add_argument("--refuse-symlinks", action="store_true", help="fail on any link in SRC")
    parser.add_argument("--allow-outside-links", action="store_true",
                        help="with --follow-symlinks, also copy targets that lie outside SRC")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def symlink_policy(args) -> str:
    """The ``symlinks=`` value of :func:`hpcio.staging.stage` the link options ask for."""
    if args.allow_outside_links and not args.follow_symlinks:
        raise SymlinkError("--allow-outside-links needs --follow-symlinks")
    if args.refuse_symlinks:
        return "refuse"
    if args.follow_symlinks:
        return "follow-outside" if args.allow_outside_links else "follow"
    return "copy"


def run(args) -> int:
    try:
        symlinks = symlink_policy(args)
        result = stage(
            args.src, args.dst, threads=args.threads, dry_run=args.dry_run,
            chunk_bytes=parse_bytes(args.chunk_size, what="--chunk-size"), node_local=args.node_local,
            use_mpi=not args.no_mpi, method=args.method, progress=not args.quiet, fsync=args.fsync,
            symlinks=symlinks,
        )
    except HpcioError as exc:
        print(f"hpcio: error: {exc}", file=sys.stderr)
        return 1
    if result.copier or args.dry_run:
        print(result.summary())
    return 0
