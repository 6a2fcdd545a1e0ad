"""Crash-safe output layout, shard publication and resume.

A conversion writes into a hidden staging directory beside the destination,
``<parent>/.<name>.hpcio-partial``, and renames it to the destination only when every
shard and the dataset index are written: readers never see a half-written dataset.
Inside it, ``.hpcio/`` holds the converter's own state:

``plan.json``
    The fingerprint of the inputs and options (sources with sizes and mtimes, output
    format, shard layout, seed, map/filter, fields).  ``--resume`` refuses to continue a
    run whose fingerprint differs, since its shards would not fit together.
``parts/shard-NNNNNN.json``
    Written (atomically) after a shard's files are fsynced and renamed into place: the
    files with their sizes and xxh3-64 checksums, the sample count, the bad samples and
    the format's index part.  A shard is complete exactly when its part exists and every
    file it lists still has that size and checksum.
``tmp/``
    Where shards are written before their files are renamed into place.

After a kill -9 of one rank or all, ``--resume`` recomputes the plan, keeps the
complete shards and writes the others again.  Renames replace files atomically, so a
shard that was half-published when the process died is simply written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np

from .._core._io import start_writeback
from .._durable import fsync_dir
from .._hashing import file_digest

__all__ = [
    "staging_path",
    "state_dir",
    "plan_file",
    "scan_dir",
    "part_path",
    "fingerprint",
    "array_fingerprint",
    "write_json_atomic",
    "file_digest",
    "publish_files",
    "verify_part",
    "load_part",
]


def staging_path(dst: str) -> str:
    """The hidden directory a conversion into ``dst`` writes to before publishing."""
    dst = os.path.abspath(dst).rstrip(os.sep)
    parent, name = os.path.split(dst)
    return os.path.join(parent, f".{name}.hpcio-partial")


def state_dir(staging: str) -> str:
    return os.path.join(staging, ".hpcio")


def plan_file(staging: str) -> str:
    """Where a run records its plan's fingerprint (what ``--resume`` checks first)."""
    return os.path.join(state_dir(staging), "plan.json")


def scan_dir(staging: str) -> str:
    """Where a run keeps what it learnt of its sources: every sample's size, line indexes."""
    return os.path.join(state_dir(staging), "scan")


def part_path(staging: str, shard: int) -> str:
    return os.path.join(state_dir(staging), "parts", f"shard-{shard:06d}.json")


def fingerprint(obj) -> str:
    """A stable digest of a JSON-able description of the inputs and options."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def array_fingerprint(values) -> str:
    """A digest of an integer array (a selection of sample ids): its bytes as little-endian
    int64, hashed where they are.  Listing a selection of 10^8 samples as JSON first would
    take seconds and gigabytes."""
    data = np.ascontiguousarray(values, dtype="<i8")
    return hashlib.sha256(data.data.cast("B")).hexdigest()


def write_json_atomic(path: str, obj) -> None:
    """Write ``obj`` as JSON to ``path``: temporary name, fsync, rename, fsync the dir."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def _walk_files(root: str):
    """Relative paths of the files under ``root`` (sorted)."""
    out = []
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            out.append(os.path.relpath(os.path.join(base, name), root))
    return out


def start_writeback_files(tmpdir: str) -> None:
    """Start writing what a shard writer left in ``tmpdir`` to storage, without waiting:
    storage works while this rank writes its next shard or waits for the others, and the
    fsyncs of :func:`publish_files` wait only for the rest."""
    for rel in _walk_files(tmpdir):
        start_writeback(os.path.join(tmpdir, rel))


def publish_files(tmpdir: str, staging: str) -> dict:
    """Move what a shard writer left in ``tmpdir`` into ``staging``.

    Every file is fsynced before the rename, and the directories after, so a published
    file is never empty or short after a crash.  Returns ``{relative path: {"bytes",
    "xxh3"}}`` for every file.
    """
    files = {}
    for rel in _walk_files(tmpdir):
        path = os.path.join(tmpdir, rel)
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        files[rel] = {"bytes": os.path.getsize(path), "xxh3": file_digest(path)}
    touched = {staging}
    for rel in files:
        target = os.path.join(staging, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(os.path.join(tmpdir, rel), target)
        touched.add(os.path.dirname(target))
    for d in sorted(touched):
        fsync_dir(d)
    shutil.rmtree(tmpdir, ignore_errors=True)
    return files


def load_part(staging: str, shard: int) -> dict | None:
    """The part recorded for ``shard``, or None (missing or unreadable)."""
    try:
        with open(part_path(staging, shard), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def verify_part(staging: str, part: dict) -> bool:
    """True when every file the part lists has its recorded size and checksum."""
    for rel, meta in part.get("files", {}).items():
        path = os.path.join(staging, rel)
        try:
            if os.path.getsize(path) != meta["bytes"]:
                return False
        except OSError:
            return False
        if file_digest(path) != meta["xxh3"]:
            return False
    return True
