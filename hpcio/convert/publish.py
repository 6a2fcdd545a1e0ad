"""Publishing a conversion: the dataset's index, its bad-sample report and lineage record.

Rank 0 merges the shards' index parts into the format's dataset index, writes the
bad-sample report (:mod:`.faults`) and the lineage record (:mod:`hpcio.lineage.record`),
and renames the staging directory to the destination: the dataset appears whole or not
at all.  The sources are hashed for the record first, each rank a share.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from .._durable import fsync_dir
from ..errors import ResumeError
from ..sources import Source
from .faults import write_report
from .resume import load_part, state_dir
from .spec import ConvertOptions, spec_name

__all__ = ["PLAN_VERSION", "lineage_record", "digest_share", "publish_dataset"]

# The version of the plan a seed gives (:mod:`.plan`), part of a resumed run's
# fingerprint: a run resumes only the shards its own plan would have made.
PLAN_VERSION = 2


def lineage_record(fmt, src, options: ConvertOptions, sources: list[Source], first_id: np.ndarray, plan,
                   digests: dict) -> dict:
    """The lineage record (:mod:`hpcio.lineage.record`) but for what the shards'
    parts add at publishing: inputs, options and plan, the same at any rank count."""
    from .._version import __version__
    from ..lineage.record import DIGEST_BYTES_ENV, LINEAGE_VERSION, digest_limit

    given = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    hashed = all(digests.get(i) is not None for i in range(len(sources)))
    return {
        "lineage_version": LINEAGE_VERSION,
        "hpcio_version": __version__,
        "format": fmt.NAME,
        "inputs": [os.fspath(p) if isinstance(p, (str, os.PathLike)) else repr(p) for p in given],
        "sources": [{**s.to_json(), "resolved": os.path.realpath(s.path),
                     "samples": int(first_id[i + 1] - first_id[i]), "first_id": int(first_id[i]),
                     "xxh3_64": digests.get(i)} for i, s in enumerate(sources)],
        "source_digests": "xxh3_64" if hashed else (
            f"none: the sources exceed ${DIGEST_BYTES_ENV} ({digest_limit()} bytes)" if not digests
            else "xxh3_64 of the sources still readable at publishing; null for the others"),
        "options": {
            "to": fmt.NAME, "from_format": options.from_format,
            "writer_options": {k: _json_value(v) for k, v in sorted(options.output_writer_options.items())},
            "reader_options": {k: _json_value(v) for k, v in sorted((options.reader_options or {}).items())},
            "shard_size": options.shard_size, "num_shards": options.num_shards,
            "shards_multiple_of": options.shards_multiple,
            "fields": options.fields, "map": spec_name(options.map), "filter": spec_name(options.filter),
            "skip": options.skip, "take": options.take, "selection": options.selection is not None,
            "order": options.order, "seed": options.seed, "skip_bad": options.skip_bad,
        },
        "plan": {"plan_version": PLAN_VERSION, "order": plan.order, "seed": plan.seed,
                 "num_samples": plan.num_samples, "first": plan.first, "selection": None,
                 "bounds": plan.bounds.tolist()},
    }


def digest_share(sources: list[Source], rank: int, size: int) -> dict:
    """xxh3-64 of this rank's share of the sources, for the lineage record; none when
    the sources together exceed the digest limit (:func:`hpcio.lineage.record.digest_limit`)."""
    from ..lineage.record import digest_limit, source_digest

    if sum(s.nbytes for s in sources) > digest_limit():
        return {}
    digests = {}
    for i in range(rank, len(sources), size):
        try:
            digests[i] = source_digest(sources[i].path)
        except OSError:
            # The shards are written: a source gone since it was read costs its digest,
            # not the conversion.
            digests[i] = None
    return digests


def _json_value(value):
    """``value`` as the lineage record stores it: itself when JSON holds it, else its repr."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def publish_dataset(fmt, staging: str, dst: str, shards: int, opts: dict, plan, lineage: dict) -> dict:
    """Merge the shards' index parts, write the bad-sample report and the lineage record
    (``lineage`` completed with each shard's sample count and the ids it left out), and
    rename the staging directory to ``dst``; returns the summary of what was written."""
    from ..lineage.record import write_lineage

    parts = []
    for k in range(shards):
        part = load_part(staging, k)
        if part is None:
            raise ResumeError(f"shard {k} has no index part after writing", path=staging)
        parts.append(part)
    fmt.merge_index(staging, [p["index"] for p in parts], **opts)
    bad = [rec for p in parts for rec in p["bad"]]
    report = write_report(dst, bad)
    shutil.rmtree(state_dir(staging))
    # Runs of consecutive ids per shard; a run may end where the next shard's begins.
    dropped = np.array([run for p in parts for run in p.get("dropped", [])], np.int64).reshape(-1, 2)
    dropped = dropped[np.argsort(dropped[:, 0], kind="stable")]
    write_lineage(staging, {**lineage, "shards": {"samples": [p["samples"] for p in parts]}},
                  dropped, plan.selection)
    fsync_dir(staging)
    if os.path.isdir(dst):
        os.rmdir(dst)  # an empty directory made by the user for the output
    os.rename(staging, dst)
    fsync_dir(os.path.dirname(dst))
    return {
        "output": dst,
        "format": fmt.NAME,
        "num_shards": shards,
        "samples_planned": plan.num_samples,
        "samples_written": sum(p["samples"] for p in parts),
        "filtered": sum(p["filtered"] for p in parts),
        "bad_samples": len(bad),
        "report": report,
        "bytes_written": sum(f["bytes"] for p in parts for f in p["files"].values()),
    }
