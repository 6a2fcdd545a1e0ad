"""``inspect`` and ``verify`` of JINX datasets."""

from __future__ import annotations

import os

from ...errors import HpcioError
from .reader import Reader
from .shard import NAME, Shard, shard_paths


def inspect(path) -> dict:
    """A summary of a JINX file or shard directory: shards, footers, fields."""
    with Reader(path) as r:
        shards = []
        for s in r.shards:
            f = s.footer
            index_key = next(k for k in f if k.startswith("index" + s.ext_sep))
            shards.append({
                "path": s.path,
                "bytes": s.size,
                "sidecar_bytes": os.path.getsize(s.binx_path) if os.path.exists(s.binx_path) else None,
                "num_samples": s.num_samples,
                "index": index_key,
                **{k: v for k, v in f.items() if k != index_key and k != "num_samples"},
            })
        fields = {}
        if len(r):
            first = r.shards[0] if r.shards[0].num_samples else next(s for s in r.shards if s.num_samples)
            for rk in first.raw(0):
                logical, exts = first.plan(rk)
                fields[logical] = first.ext_sep.join(exts) or None
        return {"format": NAME, "path": os.fspath(path), "num_samples": len(r),
                "shards": shards, "fields": fields}


def verify(path) -> dict:
    """Decode every value of every sample; report the problems found.

    Returns ``{"ok": bool, "num_samples": n, "errors": [message, ...]}``; structural
    errors (footer, index) end the check of that shard, value errors are listed per
    sample (at most 100).
    """
    errors: list[str] = []
    n = 0
    for p in shard_paths(os.fspath(path)):
        try:
            shard = Shard(p)
        except HpcioError as exc:
            errors.append(str(exc))
            continue
        try:
            n += shard.num_samples
            for i in range(shard.num_samples):
                try:
                    shard.materialize(shard.raw(i), i)
                except HpcioError as exc:
                    errors.append(str(exc))
                    if len(errors) >= 100:
                        break
        finally:
            shard.close()
    return {"ok": not errors, "num_samples": n, "errors": errors}
