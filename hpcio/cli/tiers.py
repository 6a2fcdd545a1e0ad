"""``hpcio tiers``: list the storage tiers with free space, quotas and, on request, bandwidth."""

from __future__ import annotations

import json
import os
import sys

from ..errors import HpcioError
from ..staging.tiers import bench_tier, config_path, fs_usage, resolve_tiers
from ..units import format_bytes, parse_bytes

HELP = "list storage tiers (free bytes and inodes, quotas, purge policy); --bench measures bandwidth"


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="*", help="tiers to show (default: every tier with a path)")
    parser.add_argument("--config", help=f"tier config file (default: $HPCIO_TIERS_CONFIG or {config_path()})")
    parser.add_argument("--bench", action="store_true",
                        help="measure sequential write and read bandwidth (fsync, page cache dropped)")
    parser.add_argument("--bench-size", default="256M",
                        help="bytes written and read per tier by --bench (default 256M)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _row(tier, bench: bool, bench_size: int) -> dict:
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
        if bench and not tier.read_only:
            result = bench_tier(tier.path, size=bench_size)
            row["write_bytes_per_s"] = result["write_bytes_per_s"]
            row["read_bytes_per_s"] = result["read_bytes_per_s"]
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
            print(f"hpcio tiers: error: unknown or unset tiers {unknown}; known here: {sorted(tiers)}",
                  file=sys.stderr)
            return 1
        rows = [_row(tiers[n], args.bench, parse_bytes(args.bench_size, what="--bench-size")) for n in names]
    except HpcioError as exc:
        print(f"hpcio tiers: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
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
    return 0
