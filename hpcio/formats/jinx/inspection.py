"""``inspect`` and ``verify`` of JINX datasets, in the report schema every format shares."""

from __future__ import annotations

import os

from ...errors import HpcioError
from ..reports import InspectReport, VerifyReport, problem
from .reader import Reader
from .shard import NAME, Shard, shard_paths


def inspect(path) -> InspectReport:
    """A summary of a JINX file or shard directory.

    ``fields`` maps each field of the first sample to its stored suffix chain
    (``str.zst.bin``; None for a plain JSON value); ``details["shards"]`` holds each
    file's size, sidecar size, index key and footer settings.
    """
    with Reader(path) as r:
        shards = [_shard_summary(s) for s in r.shards]
        fields = {}
        first = next((s for s in r.shards if s.num_samples), None)
        if first is not None:
            for rk in first.raw(0):
                logical, exts = first.plan(rk)
                fields[logical] = first.ext_sep.join(exts) or None
        return {
            "format": NAME,
            "path": os.fspath(path),
            "samples": len(r),
            "shards": len(r.shards),
            "fields": fields,
            "stored_bytes": sum(s["bytes"] + (s["sidecar_bytes"] or 0) for s in shards),
            "details": {"shards": shards},
        }


def _shard_summary(shard: Shard) -> dict:
    """One file's sizes and footer, the index entry named by its key (``index``)."""
    index_key = shard.index_key
    binx = shard.binx_path
    return {
        "path": shard.path,
        "bytes": shard.size,
        "sidecar_bytes": os.path.getsize(binx) if os.path.exists(binx) else None,
        "num_samples": shard.num_samples,
        "index": index_key,
        **{k: v for k, v in shard.footer.items() if k != index_key and k != "num_samples"},
    }


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Check the hashes the footers record, then decode every value of every sample of a
    JINX file or shard directory.

    A file whose footer or index is bad is reported once and skipped; a hash mismatch is
    reported once per file (``hashes_checked`` counts the hashes compared); every bad sample
    is reported on its own and checking goes on.  ``checked`` counts the samples
    decoded in full; ``errors`` keeps the first ``max_errors`` problems.  ``.pt`` values
    are read and decompressed but only unpickled (``torch.load``) with ``allow_pickle``,
    as unpickling runs code from the file.
    """
    report: VerifyReport = {"format": NAME, "path": os.fspath(path), "ok": True, "samples": 0,
                            "shards": 0, "checked": 0, "hashes_checked": 0, "errors": []}

    def fail(exc: HpcioError) -> None:
        report["ok"] = False
        if len(report["errors"]) < max_errors:
            report["errors"].append(problem(exc))

    try:
        paths = shard_paths(report["path"])
    except HpcioError as exc:
        fail(exc)
        return report
    report["shards"] = len(paths)
    for p in paths:
        try:
            shard = Shard(p)
        except HpcioError as exc:
            fail(exc)
            continue
        try:
            report["samples"] += shard.num_samples
            try:
                report["hashes_checked"] += shard.check_hashes()
            except HpcioError as exc:
                fail(exc)
            for i in range(shard.num_samples):
                try:
                    shard.materialize(shard.raw(i), i, unpickle=allow_pickle)
                    report["checked"] += 1
                except HpcioError as exc:
                    fail(exc)
        finally:
            shard.close()
    return report
