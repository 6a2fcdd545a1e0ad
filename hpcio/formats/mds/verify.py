"""``inspect`` and ``verify`` of an MDS dataset, in the report schema every format shares.

``inspect`` reads only the index (the compact one when it matches ``index.json``);
``verify`` checks every recorded hash, the header and offset table of every shard, and
decodes every record, reporting each bad sample on its own (see
:mod:`hpcio.formats.reports`).
"""

from __future__ import annotations

import struct

import numpy as np

from ...errors import CorruptShardError, HpcioError
from ..reports import InspectReport, VerifyReport, problem
from .compact_index import _load_compact
from .compression import _digest, parse_compression
from .index import NAME, _dataset_dir, _load_index, _ShardInfo
from .reader import Reader
from .shards import _OpenShard

__all__ = ["inspect", "verify"]

_PAIR = struct.Struct("<2I")


def inspect(path) -> InspectReport:
    """Summary of an MDS dataset: samples, shards, columns (``fields``, by encoding) and
    stored size; compression, hashes, size limit, raw size and the fewest and most
    samples per shard under ``details``."""
    directory = _dataset_dir(path)
    compact = _load_compact(directory)
    if compact is not None:
        return _inspect_compact(directory, compact)
    shards = _load_index(directory)
    return {
        "format": NAME,
        "path": directory,
        "samples": sum(s.samples for s in shards),
        "shards": len(shards),
        "fields": dict(zip(*shards[0].columns[:2])) if shards else {},
        "stored_bytes": sum(s.zip_bytes if s.whole_shard else s.raw_bytes for s in shards),
        "details": {
            "compression": sorted({s.compression.spec if s.compression else "none" for s in shards}),
            "hashes": sorted({h for s in shards for h in s.entry.get("hashes") or []}),
            "size_limit": shards[0].entry.get("size_limit") if shards else None,
            "raw_bytes": sum(s.raw_bytes for s in shards),
            "shard_samples": {"min": min((s.samples for s in shards), default=0),
                              "max": max((s.samples for s in shards), default=0)},
        },
    }


def _inspect_compact(directory: str, compact) -> InspectReport:
    """:func:`inspect` from the arrays and configurations of a compact index: the same
    report, without parsing one entry per shard."""
    configs = compact.configs
    counts = np.diff(compact.cum.astype(np.int64))
    used = [configs[j] for j in sorted(set(np.unique(compact._config_ids).tolist()))]
    specs = [parse_compression(c.get("compression")) for c in used]
    return {
        "format": NAME,
        "path": directory,
        "samples": int(compact.cum[-1]),
        "shards": len(compact),
        "fields": dict(zip(used[0]["column_names"], used[0]["column_encodings"])) if used else {},
        "stored_bytes": int(compact.file_bytes.sum()),
        "details": {
            "compression": sorted({c.spec if c else "none" for c in specs}),
            "hashes": sorted({h for c in used for h in c.get("hashes") or []}),
            "size_limit": configs[int(compact._config_ids[0])].get("size_limit") if used else None,
            "raw_bytes": int(compact.raw_bytes.sum()),
            "shard_samples": {"min": int(counts.min()) if len(counts) else 0,
                              "max": int(counts.max()) if len(counts) else 0},
        },
    }


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Check every hash and decode every record of an MDS dataset.

    ``checked`` counts the records decoded, ``hashes_checked`` the hashes compared (of
    the stored files and, for whole-shard compression, of the decompressed shards).
    Each bad sample is reported on its own and checking goes on; at most ``max_errors``
    problems are listed.  ``pkl`` columns are sliced and size-checked but only unpickled
    with ``allow_pickle``.
    """
    directory = _dataset_dir(path)
    report: VerifyReport = {"format": NAME, "path": directory, "ok": True, "samples": 0, "shards": 0,
                            "checked": 0, "hashes_checked": 0, "errors": []}

    def fail(exc: Exception) -> None:
        report["ok"] = False
        if len(report["errors"]) < max_errors:
            report["errors"].append(problem(exc))

    try:
        reader = Reader(directory, allow_pickle=True)
    except HpcioError as exc:
        fail(exc)
        return report
    report["samples"], report["shards"] = len(reader), len(reader.shards)
    layout = reader._layout
    cols = [c for c, e in enumerate(layout.encodings) if allow_pickle or e != "pkl"] if layout else []
    with reader:
        for k, info in enumerate(reader.shards):
            try:
                report["hashes_checked"] += _verify_hashes(reader, info)
                sh = reader.cache.get(k)
            except HpcioError as exc:
                fail(exc)
                continue
            report["checked"] += _verify_records(reader, sh, cols, fail)
            reader.close()  # one shard at a time keeps memory flat
    return report


def _verify_hashes(reader: Reader, info: _ShardInfo) -> int:
    """How many hashes index.json records for shard ``info``; raises at one that differs."""
    path = reader.cache.file(info)
    with open(path, "rb") as f:
        data = f.read()
    checked = 0
    stored = info.zip_hashes if info.whole_shard else info.raw_hashes
    for algo, want in sorted(stored.items()):
        got = _digest(algo, data, path)
        if got != want:
            raise CorruptShardError(f"{algo} mismatch: {info.source} says {want}, the file hashes to {got}", path=path)
        checked += 1
    if info.whole_shard:
        raw = reader.cache.decompress_shard(info, path)
        for algo, want in sorted(info.raw_hashes.items()):
            got = _digest(algo, raw, path)
            if got != want:
                raise CorruptShardError(
                    f"{algo} mismatch of the decompressed shard: {info.source} says {want}, got {got}", path=path
                )
            checked += 1
    return checked


def _verify_records(reader: Reader, sh: _OpenShard, cols: list[int], fail) -> int:
    """Decode columns ``cols`` of every record of ``sh``; each bad one goes to ``fail``.
    Returns how many records decoded."""
    codec = sh.info.compression
    ok = 0
    for local in range(sh.n):
        i = sh.base + local
        begin, end = _PAIR.unpack_from(sh.buf, 4 + 4 * local)
        offset = begin if sh.in_file else None
        try:
            rec = sh.buf[begin:end]
            if codec is not None and codec.per_sample:
                rec = memoryview(codec.decompress(rec, reader.limit, path=sh.path, offset=offset, sample=i))
            reader._layout.record(rec, cols, False, lambda offset=offset, i=i: (sh.path, offset, i))
            ok += 1
        except HpcioError as exc:
            fail(exc)
    return ok
