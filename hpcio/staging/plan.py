"""Planning a staging run: what the source holds, what the destination already has, and
whether the rest fits.

A plan is made without writing anything.  Files already in the destination with the
source's size and a checksum to compare with (the source's own, or an earlier run's) are
verified rather than copied; the space needed counts every other file, rounded up to the
destination's block size, and the inodes of every file and directory to create.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable

from ..errors import HpcioError, ShardNotFoundError, StagingError
from ..units import format_bytes
from .manifest import TREE_ALGO, Digest, FileRecord, LinkRecord, read_journals, read_manifest
from .scan import SourceFile, scan_destination, scan_source
from .tiers import Tier, fs_usage, is_node_local, resolve_tiers, tier_for_path

__all__ = ["plan_stage", "StagePlan", "SourceFile", "digest_scheme", "DEFAULT_CHUNK_BYTES"]

DEFAULT_CHUNK_BYTES = 256 * 2**20
_CHUNK_ALIGN = 2**20


@dataclasses.dataclass
class StagePlan:
    """What a staging run will do, and whether it fits.

    ``reference`` maps a relative path to the checksum the source vouches for (its index
    or manifest); ``prior`` to the checksum an earlier run recorded for the destination
    copy of an unchanged source file; ``changed`` to what an earlier run recorded of a
    source file whose size or mtime changed since (copied again, and checked against its
    index: a source that no longer matches its own index is refused).  ``links`` are the
    source's links copied as links; ``replace`` the destination links standing where
    files are planned.
    """

    src: str
    dst: str
    files: list[SourceFile]
    dirs: list[str]
    links: list[LinkRecord]
    replace: list[str]
    reference: dict[str, Digest]
    reference_origin: dict[str, str]
    prior: dict[str, FileRecord]
    changed: dict[str, FileRecord]
    to_check: list[str]
    to_copy: list[str]
    stale: list[str]
    need_bytes: int
    need_inodes: int
    free_bytes: int
    free_inodes: int
    limited_by: str
    tier: str | None
    node_local: bool
    old_manifest: bool

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.free_bytes and self.need_inodes <= self.free_inodes

    def by_rel(self) -> dict[str, SourceFile]:
        return {f.rel: f for f in self.files}

    def refusal(self) -> str:
        short = [
            what
            for what, need, free in (("bytes", self.need_bytes, self.free_bytes),
                                     ("inodes", self.need_inodes, self.free_inodes))
            if need > free
        ]
        return (
            f"not enough room to stage {len(self.to_copy)} files: "
            f"need {format_bytes(self.need_bytes)} ({self.need_bytes} bytes) and {self.need_inodes} inodes, "
            f"free {format_bytes(self.free_bytes)} ({self.free_bytes} bytes) and {self.free_inodes} inodes "
            f"(short of {' and '.join(short)}; limit from {self.limited_by})"
        )

    def summary(self) -> str:
        tier = f" (tier {self.tier})" if self.tier else ""
        where = "node-local" if self.node_local else "shared"
        return (
            f"{self.src} -> {self.dst}{tier}, {where}: {len(self.files)} files, "
            f"{format_bytes(self.total_bytes)}; copy {len(self.to_copy)}, verify {len(self.to_check)} "
            f"already present, remove {len(self.stale)} stale temporary files; "
            f"need {format_bytes(self.need_bytes)} and {self.need_inodes} inodes, "
            f"free {format_bytes(self.free_bytes)} and {self.free_inodes} inodes ({self.limited_by})"
        )



# ---------------------------------------------------------------------------- planning


def _index_digests(src_root: str, files: list[SourceFile]) -> dict[str, Digest]:
    """Checksums an MDS ``index.json`` records (``raw_data``/``zip_data`` ``hashes``)."""
    present = {f.rel for f in files}
    out: dict[str, Digest] = {}
    for f in files:
        if os.path.basename(f.rel) != "index.json":
            continue
        try:
            with open(os.path.join(src_root, f.rel), "rb") as fh:
                index = json.loads(fh.read())
            shards = index.get("shards") if isinstance(index, dict) else None
        except (OSError, ValueError):
            continue
        if not isinstance(shards, list):
            continue
        rel_dir = os.path.dirname(f.rel)
        for shard in shards:
            if not isinstance(shard, dict):
                continue
            for key in ("zip_data", "raw_data"):
                data = shard.get(key)
                if not isinstance(data, dict) or not isinstance(data.get("hashes"), dict):
                    continue
                rel = f"{rel_dir}/{data.get('basename')}" if rel_dir else str(data.get("basename"))
                if rel not in present:
                    continue
                for algo in ("xxh64", "xxh3_64"):
                    if isinstance(data["hashes"].get(algo), str):
                        out[rel] = Digest(algo, data["hashes"][algo])
                        break
    return out


def digest_scheme(size: int, reference: Digest | None, chunk_bytes: int) -> tuple[str, int | None]:
    """The checksum a copy of a ``size``-byte file gets, with its chunk size: the one the
    source records, else a tree of ``chunk_bytes`` chunks (copied in parallel) for a
    file larger than that, else xxh3_64 of the whole."""
    if reference is not None:
        return reference.algo, reference.chunk_bytes
    if size > chunk_bytes:
        return TREE_ALGO, chunk_bytes
    return "xxh3_64", None


def _round_up(n: int, block: int) -> int:
    return -(-n // block) * block if block > 0 else n



def plan_stage(
    src,
    dst,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    node_local: bool | None = None,
    tiers: dict[str, Tier] | None = None,
    fs_stat: Callable = os.statvfs,
    symlinks: str = "copy",
) -> StagePlan:
    """Plan a staging run without writing anything.

    Parameters are those of :func:`stage`.  Files already in ``dst`` with the source's
    size are planned as "verify" (they are re-copied if their checksum disagrees); the
    space needed counts every other file, rounded up to the destination block size, plus
    one inode per file and directory to create and two for the manifest and journal.
    """
    src = os.path.abspath(os.fspath(src))
    dst = os.path.abspath(os.fspath(dst))
    src_root = _check_request(src, dst, chunk_bytes)
    tiers = resolve_tiers() if tiers is None else tiers
    tier = tier_for_path(dst, tiers)
    if tier is not None and tier.read_only:
        raise StagingError(f"tier {tier.name!r} is read-only", path=dst)
    if node_local is None:
        node_local = is_node_local(dst, tiers)

    files, dirs, links = scan_source(src, symlinks)
    reference, origin = _references(src, src_root, files)
    by_rel = {f.rel: f for f in files}
    existing, stale, replace = scan_destination(dst, set(by_rel), dirs)
    dst_manifest = read_manifest(dst) if os.path.isdir(dst) else None
    prior, changed = _prior_records(dst, dst_manifest, by_rel)
    to_check, to_copy = [], []
    for f in files:
        # a source file changed since its copy is copied again, checked against its index
        if existing.get(f.rel) == f.size and (f.rel in reference or f.rel in prior) and f.rel not in changed:
            to_check.append(f.rel)
        else:
            to_copy.append(f.rel)

    usage = fs_usage(dst, fs_stat=fs_stat)
    free_bytes, free_inodes, limited_by = _free_space(usage, tier)
    need_bytes = sum(_round_up(by_rel[rel].size, usage.block_size) for rel in to_copy)
    new_dirs = [d for d in dirs if not os.path.isdir(os.path.join(dst, d))]
    need_inodes = (
        sum(1 for rel in to_copy if rel not in existing) + len(new_dirs) + len(links)
        + (0 if os.path.isdir(dst) else 1) + 2
    )
    return StagePlan(
        src=src, dst=dst, files=files, dirs=dirs, links=links, replace=replace, reference=reference, reference_origin=origin,
        prior=prior, changed=changed, to_check=to_check, to_copy=to_copy, stale=stale, need_bytes=need_bytes,
        need_inodes=need_inodes, free_bytes=free_bytes, free_inodes=free_inodes, limited_by=limited_by,
        tier=tier.name if tier else None, node_local=bool(node_local), old_manifest=dst_manifest is not None,
    )


def _check_request(src: str, dst: str, chunk_bytes: int) -> str:
    """Refuse a source that is missing or holds the destination, a destination that is
    not a directory, a chunk size that is not whole MiB; returns the source's root."""
    if not os.path.exists(src):
        raise ShardNotFoundError("staging source does not exist", path=src)
    src_root = src if os.path.isdir(src) else os.path.dirname(src)
    if dst == src_root or dst.startswith(src_root.rstrip(os.sep) + os.sep) and os.path.isdir(src):
        raise StagingError(f"destination {dst} is inside the source dataset", path=src)
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise StagingError("staging destination exists and is not a directory", path=dst)
    if chunk_bytes <= 0 or chunk_bytes % _CHUNK_ALIGN:
        raise HpcioError(f"chunk_bytes must be a positive multiple of {_CHUNK_ALIGN}, got {chunk_bytes}")
    return src_root


def _references(src: str, src_root: str, files: list[SourceFile]) -> tuple[dict[str, Digest], dict[str, str]]:
    """The checksums the source vouches for (its index, else its own staging manifest),
    and where each came from."""
    reference = _index_digests(src_root, files)
    origin = {rel: "index" for rel in reference}
    src_manifest = read_manifest(src_root) if os.path.isdir(src) else None
    if src_manifest is not None:
        sizes = {f.rel: f.size for f in files}
        for rec in src_manifest.files:
            if rec.path not in reference and sizes.get(rec.path) == rec.size:
                reference[rec.path] = rec.digest
                origin[rec.path] = "source manifest"
    return reference, origin


def _prior_records(dst: str, dst_manifest,
                   by_rel: dict[str, SourceFile]) -> tuple[dict[str, FileRecord], dict[str, FileRecord]]:
    """What an earlier run recorded (manifest or journals) for copies of source files
    that have not changed since, and for those whose size or mtime changed since."""
    old_records = list(dst_manifest.files) if dst_manifest else []
    old_records += list(read_journals(dst).values()) if os.path.isdir(dst) else []
    prior: dict[str, FileRecord] = {}
    changed: dict[str, FileRecord] = {}
    for rec in old_records:
        f = by_rel.get(rec.path)
        if f is None:
            continue
        if rec.size == f.size and rec.source_mtime_ns == f.mtime_ns:
            prior[rec.path] = rec
        else:
            changed[rec.path] = rec
    return prior, {rel: rec for rel, rec in changed.items() if rel not in prior}


def _free_space(usage, tier: Tier | None) -> tuple[int, int, str]:
    """Free bytes and inodes at the destination, the tier's quota included, and what
    limits them."""
    free_bytes, free_inodes, limited_by = usage.free_bytes, usage.free_inodes, "statvfs"
    if tier is not None:
        q_bytes, q_inodes = tier.quota_free()
        if q_bytes is not None and q_bytes < free_bytes:
            free_bytes, limited_by = q_bytes, tier.quota_label()
        if q_inodes is not None and q_inodes < free_inodes:
            free_inodes, limited_by = q_inodes, tier.quota_label()
    return free_bytes, free_inodes, limited_by
