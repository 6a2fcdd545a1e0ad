"""The hash manifest of HDF5 shards, which lets a reader open a dataset without opening a file.

hpcio's HDF5 writer records, in the ``hashes.json`` beside its files
(:mod:`hpcio.formats._checksums`), each file's bytes and xxh3_64, and the two facts of its
layout attribute a reader needs at open: its sample count and its fields::

    {"files": {"shard-000000.h5": {"bytes": 81920, "hashes": {"xxh3_64": "9c1f..."},
                                   "samples": 1000, "fields": {"id": {"kind": "int", ...}}}}}

When every file has both recorded, the reader knows the dataset's length and fields
without opening a file and opens each file on its first read, checking its layout
attribute against the record then: opening reads no file's bytes, which is what lets a
node cache (:class:`hpcio.NodeCache`) read them.  The ``.h5`` files are the same with or
without the manifest (``hashes=[]`` writes none), and h5py never looks at it.
"""

from __future__ import annotations

import json
import os

from .._hashing import DEFAULT_HASH, file_digest, new_hash
from ..errors import CapabilityError, CorruptShardError
from ._checksums import recorded_entries, recorded_samples

__all__ = ["image_entry", "file_entry", "recorded_layouts", "check_recorded", "open_every_file",
           "check_node_cache"]

# No HDF5 file of hpcio's holds more samples than this; a count above it is a garbled
# record (read as none), not a length to trust: a sample can take no bytes at all (a
# sample of no field), so the file's size bounds nothing.
_MAX_SAMPLES = 1 << 40


def image_entry(image: bytes, samples: int, fields: dict) -> dict:
    """The manifest entry of a file whose bytes are ``image``."""
    h = new_hash()
    h.update(image)
    return {"bytes": len(image), "hashes": {DEFAULT_HASH: h.hexdigest()}, "samples": samples, "fields": fields}


def file_entry(path: str, samples: int, fields: dict) -> dict:
    """The manifest entry of the file at ``path`` (written by HDF5 itself: the mpio driver)."""
    return {"bytes": os.path.getsize(path), "hashes": {DEFAULT_HASH: file_digest(path)}, "samples": samples,
            "fields": fields}


def plausible_samples(samples: int, size: int | None, file: str | None = None) -> bool:
    """Whether an HDF5 file of ``size`` bytes can hold ``samples`` samples as far as a
    record can say (a count of ``recorded_samples``).

    >>> plausible_samples(0, 800), plausible_samples(-1, 800), plausible_samples(1 << 41, 800)
    (True, False, False)
    """
    return size is not None and 0 <= samples <= _MAX_SAMPLES


def _plausible_fields(fields) -> bool:
    """Whether ``fields`` is a layout's field specs (a garbled record counts as none)."""
    if not isinstance(fields, dict):
        return False
    for name, spec in fields.items():
        if not isinstance(name, str) or not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            return False
        storage = spec.get("storage")
        if storage == "fixed":
            shape = spec.get("shape")
            if not isinstance(spec.get("dtype"), str) or not isinstance(shape, list) or not all(
                    isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                return False
        elif storage != "ragged":
            return False
    return True


def recorded_layouts(paths) -> list[tuple[int, dict] | None]:
    """``(samples, fields)`` the manifest records for each of ``paths``; None where it
    records no count, a size the file no longer has, or no fields (or garbled ones): a
    record is a shortcut for opening the file, never a reason to fail."""
    out: list[tuple[int, dict] | None] = []
    for count, entry in zip(recorded_samples(paths, plausible_samples), recorded_entries(paths)):
        fields = None if entry is None else entry.get("fields")
        out.append((count, fields) if count is not None and _plausible_fields(fields) else None)
    return out


def check_recorded(path: str, samples, fields, recorded: tuple[int, dict], sample_base: int,
                   recorded_by: str = "its hash manifest records") -> None:
    """CorruptShardError naming ``path`` unless its layout attribute (``samples``,
    ``fields``) is what the manifest recorded (``recorded_by`` says who, in the message):
    the reader counted on the record at open, so a file that disagrees would misplace
    every sample after it."""
    count, want = recorded
    if samples != count:
        at = sample_base + min(samples, count) if isinstance(samples, int) else None
        raise CorruptShardError(f"the file holds {samples} samples, {recorded_by} {count}", path=path, sample=at)
    if fields == want:
        return
    if not isinstance(fields, dict) or fields.keys() != want.keys():
        got = sorted(fields) if isinstance(fields, dict) else fields
        raise CorruptShardError(f"the file's layout has fields {got}, {recorded_by} {sorted(want)}", path=path)
    name = next(k for k in want if fields[k] != want[k])
    raise CorruptShardError(f"the file's layout has field {name!r} as {json.dumps(fields[name], sort_keys=True)}, "
                            f"{recorded_by} {json.dumps(want[name], sort_keys=True)}", path=path)


def open_every_file(reader):
    """``reader`` (an HDF5 reader) with every file opened, so each is checked against its
    record: what ``verify`` reads, since a file recorded as holding no sample is never
    opened by a read.  The reader is closed when a file fails."""
    try:
        for part in reader.parts:
            part.datasets()
    except BaseException:
        reader.close()
        raise
    return reader


def check_node_cache(path, options, list_files) -> None:
    """What :meth:`hpcio.formats.hdf5.Reader.check_node_cache` refuses (``list_files``
    lists the dataset's ``.h5`` files)."""
    if os.path.isfile(path):
        raise CapabilityError("a node cache mirrors a directory of HDF5 files: pass the directory, not a file",
                              path=path)
    if options.get("validate_hashes"):
        raise CapabilityError("validate_hashes would hash every file through the shared tier at open; a node "
                              "cache checks each file against the xxh3_64 hashes.json records as it fetches it: "
                              "leave validate_hashes out", path=path)
    paths = list_files(path)
    missing = [p for p, layout in zip(paths, recorded_layouts(paths)) if layout is None]
    if missing:
        raise CapabilityError(
            f"hashes.json records no sample count and fields for {len(missing)} of the {len(paths)} HDF5 files, "
            "so opening them would read every such file's layout through the shared tier, around the node cache; "
            "rewrite them with hpcio's HDF5 writer (hpcio convert SRC DST --to hdf5, or "
            "hpcio.open_writer(DST, format=\"hdf5\")), which records both in hashes.json", path=missing[0])
