"""The record of each Zarr part's data files in the root's ``hpcio`` attribute.

Every part entry of the root layout carries ``files``: each file of the part other than
its ``zarr.json`` metadata (the sharding codec's chunk files, ``<field>/c/...``), by its
path inside the part, with its bytes and xxh3_64::

    {"name": "part-00000", "num_samples": 300,
     "files": {"id/c/0": {"bytes": 2417, "xxh3_64": "9c1f..."}, ...}}

It is what lets a node cache (:class:`hpcio.NodeCache`) read a store: the cache shard of
part ``k`` is these files, listed with no directory walk or ``stat`` of the shared tier,
and each fetch is checked against the recorded size and digest.  The chunk files stay
as zarr-python writes them (plain zarr reads the store and ignores the attribute).  A
single writer hashes its part's files at close (they are in the page cache then) and
keeps them in the part's own attribute, where :func:`~hpcio.formats.zarr.finalize` finds
them; a conversion takes the digests the converter computes anyway as it publishes each
part (:func:`record_digests`), so the record costs it no read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .._hashing import DEFAULT_HASH, file_digest
from .._paths import check_relative_name
from ..errors import CapabilityError
from .base import ShardFile

__all__ = ["RECORD", "part_files", "record_digests", "part_entry", "parts_problem", "files_problem", "files_of_parts",
           "check_node_cache"]

RECORD = "files"  # the key of a part entry (and of a part's attribute) holding the record
METADATA = "zarr.json"  # a node cache's mirror copies these; they are no shard's files


def part_files(part_path: str) -> dict:
    """The record of the part directory ``part_path``: every file but the metadata, by
    ``/``-separated path inside the part, sorted, with its bytes and xxh3_64."""
    out = {}
    for top, _dirs, names in os.walk(part_path):
        for name in names:
            if name == METADATA:
                continue
            path = os.path.join(top, name)
            rel = os.path.relpath(path, part_path).replace(os.sep, "/")
            out[rel] = {"bytes": os.path.getsize(path), DEFAULT_HASH: file_digest(path)}
    return dict(sorted(out.items()))


def record_digests(index: dict, files: Mapping[str, Mapping]) -> dict:
    """Converter hook: the index part of a part the converter published, with the
    record of the part's files taken from the digests of the published ``files``
    (``{path inside the store: {"bytes", "xxh3"}}``), so no file is read again."""
    prefix = index["name"] + "/"
    record = {}
    for rel, meta in files.items():
        rel = rel.replace(os.sep, "/")
        if rel.startswith(prefix) and rel.rsplit("/", 1)[-1] != METADATA:
            record[rel[len(prefix):]] = {"bytes": meta["bytes"], DEFAULT_HASH: meta["xxh3"]}
    return {**index, RECORD: dict(sorted(record.items()))}


def part_entry(name: str, meta: Mapping) -> dict:
    """A part's entry in the root layout: its name, sample count and the record of its
    files when ``meta`` (the part's attribute, or its index part) carries a sound one."""
    entry = {"name": name, "num_samples": meta["num_samples"]}
    record = meta.get(RECORD)
    if record is not None and files_problem(record) is None:
        entry[RECORD] = record
    return entry


def parts_problem(parts: list) -> str | None:
    """What is wrong with the records of the root layout's ``parts`` (each a dict with a
    name), None when nothing."""
    for p in parts:
        problem = files_problem(p[RECORD]) if RECORD in p else None
        if problem:
            return f"part {p['name']!r}: {problem}"
    return None


def files_problem(files) -> str | None:
    """What is wrong with a part's record (None when nothing): the root layout is
    checked whole before a reader indexes it."""
    if not isinstance(files, dict):
        return "files is not a map of file names"
    for name, entry in files.items():
        if not isinstance(entry, dict) or type(entry.get("bytes")) is not int or entry["bytes"] < 0 \
                or not isinstance(entry.get(DEFAULT_HASH), str):
            return f"files entry {name!r} is not {{bytes, {DEFAULT_HASH}}}"
        if isinstance(name, str) and name.rsplit("/", 1)[-1] == METADATA:
            return f"files entry {name!r} names metadata, which is no part's data"
    return None


def files_of_parts(store: str, parts: list, part_paths: list[str]) -> list[list[ShardFile]] | None:
    """The files of each part's cache shard, from the root layout's ``parts`` of the
    store ``store`` (their directories ``part_paths``); None when some part has no
    record.  A name that would leave its part raises PathEscapeError naming the root
    ``zarr.json``: a node cache copies to and from these paths."""
    if any(RECORD not in p for p in parts):
        return None
    source = os.path.join(store, METADATA)
    out = []
    for p, part_path in zip(parts, part_paths):
        shard = []
        for name, entry in p[RECORD].items():
            check_relative_name(name, what="Zarr part file name", source=source)
            shard.append(ShardFile(os.path.join(part_path, name), entry["bytes"],
                                   {DEFAULT_HASH: entry[DEFAULT_HASH]}))
        out.append(shard)
    return out


def check_node_cache(path: str, layout: dict) -> None:
    """Refuse a store whose root records no files for some part.  Listing them by a walk
    of the shared tier would be possible, but nothing would then check a fetched file:
    the sizes would be the ones just read off the same files, and there is no digest (the
    chunks' crc32c is optional and zarr checks it only as it decodes).  Rewriting the
    store records them."""
    parts = layout["parts"]
    missing = [p["name"] for p in parts if RECORD not in p]
    source = os.path.join(path, METADATA)
    if missing:
        raise CapabilityError(
            f"the root zarr.json records no files for {len(missing)} of the {len(parts)} parts (the first is "
            f"{missing[0]}), so a node cache could neither list their files without walking the shared tier "
            "nor check what it fetches; rewrite the store with hpcio's Zarr writer (hpcio convert SRC DST --to "
            "zarr, or hpcio.open_writer(DST, format=\"zarr\")), which records each part's files with their "
            "bytes and xxh3_64", path=source)
    for p in parts:
        for name in p[RECORD]:
            check_relative_name(name, what="Zarr part file name", source=source)
