"""xxh3_64, the hash hpcio records by default beside the data it writes.

It hashes faster than storage writes, mosaicml-streaming knows it by this name
(``validate_hash="xxh3_64"``), and parallel conversion already takes it of every file it
publishes, so one algorithm serves the writers, the readers and ``hpcio verify``.
"""

from __future__ import annotations

import mmap
import os

import xxhash

from .errors import InvalidArgumentError

__all__ = ["DEFAULT_HASH", "new_hash", "file_digest", "recorded_hashes"]

DEFAULT_HASH = "xxh3_64"


def new_hash():
    """A streaming xxh3_64 hasher (``update``, ``hexdigest``)."""
    return xxhash.xxh3_64()


def file_digest(path: str, start: int = 0, stop: int | None = None) -> str:
    """xxh3-64 of a file's bytes ``[start, stop)`` (``stop`` None: to the end), as hex.

    The file is hashed through a read-only mapping: a shard just written is in the page
    cache, and reading it into buffers would copy it once more into fresh memory."""
    h = new_hash()
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                with memoryview(m) as view:
                    h.update(view[start:stop])
    return h.hexdigest()


def recorded_hashes(hashes, fmt: str) -> list[str]:
    """The hash names a writer of format ``fmt`` records: ``["xxh3_64"]`` for None (the
    default), none for ``[]``; the formats whose digests hpcio keeps itself know only
    xxh3_64."""
    names = [DEFAULT_HASH] if hashes is None else list(hashes)
    unknown = [h for h in names if h != DEFAULT_HASH]
    if unknown or len(names) > 1:
        raise InvalidArgumentError(
            f"{fmt} records only {DEFAULT_HASH!r} (hashes=[{DEFAULT_HASH!r}], the default) or nothing "
            f"(hashes=[]), got hashes={names!r}")
    return names
