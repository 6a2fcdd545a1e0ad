"""The hash manifest of HDF5 shards, which lets a reader open a dataset without opening a file.

hpcio's HDF5 writer records, in the ``hashes.json`` beside its files
(:mod:`hpcio.formats._checksums`), each file's bytes and xxh3_64, and the two facts of its
layout attribute a reader needs at open: its sample count and its fields::

    {"files": {"shard-000000.h5": {"bytes": 81920, "hashes": {"xxh3_64": "9c1f..."},
                                   "samples": 1000, "fields": {"id": {"kind": "int", ...}}}}}

A reader told both need not open a file to know the dataset's length and fields.  The
``.h5`` files are the same with or without the manifest (``hashes=[]`` writes none), and
h5py never looks at it.
"""

from __future__ import annotations

import os

from .._hashing import DEFAULT_HASH, file_digest, new_hash
from ._checksums import MANIFEST_NAME, Manifest
from .base import PendingFiles

__all__ = ["image_entry", "file_entry", "add_manifest"]


def image_entry(image: bytes, samples: int, fields: dict) -> dict:
    """The manifest entry of a file whose bytes are ``image``."""
    h = new_hash()
    h.update(image)
    return {"bytes": len(image), "hashes": {DEFAULT_HASH: h.hexdigest()}, "samples": samples, "fields": fields}


def file_entry(path: str, samples: int, fields: dict) -> dict:
    """The manifest entry of the file at ``path`` (written by HDF5 itself: the mpio driver)."""
    return {"bytes": os.path.getsize(path), "hashes": {DEFAULT_HASH: file_digest(path)}, "samples": samples,
            "fields": fields}


def add_manifest(pending: PendingFiles, manifest: Manifest, directory: str) -> None:
    """Write the ``hashes.json`` of ``manifest``'s files into ``directory`` under a
    temporary name of ``pending``, added last so that it is published after the files it
    names (a visible manifest always finds its files)."""
    target = os.path.join(directory, MANIFEST_NAME)
    data = manifest.encode(target)
    if data is not None:
        with open(pending.add(target), "wb") as f:
            f.write(data)
