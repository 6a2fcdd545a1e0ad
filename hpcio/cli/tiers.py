"""``hpcio tiers``: list the storage tiers with free space, quotas and, on request, bandwidth."""

from __future__ import annotations

import json
import os
import sys

from ..errors import HpcioError
from ..staging.tiers import bench_tier, fs_usage, node_local_tier, resolve_tiers
from ..units import format_bytes, parse_bytes

HELP = "list storage tiers (free bytes and inodes, quotas, purge policy); --bench measures bandwidth"


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="*", help="tiers to show (default: every tier with a path)")
    # the rule, not this user's path: docs/cli.md holds this help as committed text
    parser.add_argument("--config", help="tier config file (default: $HPCIO_TIERS_CONFIG, else "
                                         "$XDG_CONFIG_HOME/hpcio/tiers.toml, ~/.config/hpcio/tiers.toml when unset)")
    parser.add_argument("--bench", action="store_true",
                        help="measure sequential write and read bandwidth (fsync, page cache dropped)")
    parser.add_argument("--bench-size", default="256M",
                        help="bytes written and read per tier by --bench, at most half the tier's free space "
                             "(default 256M); home is benched only when named")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


# Below this, a tier is too full to give a meaningful bandwidth figure.
_MIN_BENCH_BYTES = 2**20


def _bench_only_on_request(tier) -> bool:
    """Tiers --bench writes to only when named: the backed-up home (small quota, and
    writing gigabytes there is not what a user asked for), read-only ones and those
    compute nodes cannot reach."""
    return tier.name == "home" or tier.read_only or not tier.compute_reachable


def _bench_row(row: dict, path: str, bench_size: int) -> None:
    """Add the tier's bandwidth to ``row``, writing at most half its free space; a tier
    that fails gets an error and leaves the other tiers' figures alone."""
    size = min(bench_size, (row["free_bytes"] or 0) // 2)
    if size < _MIN_BENCH_BYTES:
        row["bench_note"] = f"not benched: {format_bytes(row['free_bytes'])} free"
        return
    try:
        result = bench_tier(path, size=size)
    except (OSError, HpcioError) as exc:
        row["bench_error"] = f"bench failed: {exc}"
        return
    row["bench_bytes"] = size
    row["write_bytes_per_s"] = result["write_bytes_per_s"]
    row["read_bytes_per_s"] = result["read_bytes_per_s"]


def _row(tier, bench: bool, bench_size: int, named: bool = False) -> dict:
    row = {
        "name": tier.name, "path": tier.path, "exists": os.path.isdir(tier.path),
        "free_bytes": None, "free_inodes": None,
        "quota_bytes": tier.quota_bytes, "quota_inodes": tier.quota_inodes,
        "purge": tier.purge, "purge_days": tier.purge_days, "node_local": tier.node_local,
        "read_only": tier.read_only, "compute_reachable": tier.compute_reachable,
    }
    if row["exists"]:
        usage = fs_usage(tier.path)
        row["free_bytes"], row["free_inodes"] = usage.free_bytes, usage.free_inodes
        if bench and (named or not _bench_only_on_request(tier)):
            _bench_row(row, tier.path, bench_size)
        elif bench:
            row["bench_note"] = "benched only when named"
    return row


def _flags(row: dict) -> str:
    flags = []
    if row["purge"] == "unused":
        flags.append(f"purged after {row['purge_days']} d unused")
    elif row["purge"] == "job":
        flags.append("deleted at job end")
    elif row["purge"] == "node":
        flags.append("lost at job end or reboot")
    if row["node_local"]:
        flags.append("node-local")
    if row["read_only"]:
        flags.append("read-only")
    if not row["compute_reachable"]:
        flags.append("not on compute nodes")
    if not row["exists"]:
        flags.append("missing")
    flags += [row[key] for key in ("bench_note", "bench_error") if row.get(key)]
    return ", ".join(flags)


def _inodes(n) -> str:
    if n is None:
        return "-"
    return "unlimited" if n >= 2**62 else f"{n:,}"


def run(args) -> int:
    try:
        tiers = resolve_tiers(config=args.config)
        names = args.names or list(tiers)
        unknown = [n for n in names if n not in tiers]
        if unknown:
            print(f"hpcio: error: unknown or unset tiers {unknown}; known here: {sorted(tiers)}",
                  file=sys.stderr)
            return 2
        size = parse_bytes(args.bench_size, what="--bench-size")
        rows = [_row(tiers[n], args.bench, size, named=n in args.names) for n in names]
    except HpcioError as exc:
        print(f"hpcio: error: {exc}", file=sys.stderr)
        return 1
    # A tier whose bench failed fails the command, after every other tier's figures.
    status = 1 if any("bench_error" in r for r in rows) else 0
    if args.json:
        print(json.dumps(rows, indent=1))
        return status
    header = ["tier", "path", "free", "free inodes", "quota", "quota inodes"]
    if args.bench:
        header += ["write/s", "read/s"]
    header.append("policy")
    table = [header]
    for r in rows:
        line = [r["name"], r["path"], format_bytes(r["free_bytes"]), _inodes(r["free_inodes"]),
                format_bytes(r["quota_bytes"]), _inodes(r["quota_inodes"])]
        if args.bench:
            line += [format_bytes(r.get("write_bytes_per_s")), format_bytes(r.get("read_bytes_per_s"))]
        line.append(_flags(r))
        table.append(line)
    widths = [max(len(str(line[i])) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip())
    print(_node_cache_line(tiers))
    return status


def _node_cache_line(tiers) -> str:
    """Where hpcio.NodeCache puts shards by default, and why a job tier is not it."""
    local = node_local_tier(tiers)
    line = (f"node cache default: {local.path}/hpcio-cache (tier {local.name})" if local is not None
            else "node cache default: none (no node-local tier here: pass NodeCache(directory=...))")
    job = tiers.get("jobscratch")
    if job is not None and not job.node_local:
        line += f"; jobscratch ({job.path}) is shared by the job's nodes, not node-local"
    return line
