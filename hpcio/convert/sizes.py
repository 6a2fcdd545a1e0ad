"""Every source sample's size, in a file beside the output rather than in each rank.

A conversion weighs its shards and its ranks' shares by the stored size of every source
sample: 8 bytes per sample, gigabytes for billions of samples, on every rank.  The
ranks that measure the sources write those sizes into one file of little-endian int64,
indexed by global id, in the staging directory; every rank maps it and reads the sizes
it needs.  The map's pages are let go once a rank may have touched more than
:data:`RESIDENT_BYTES` of it, so its resident memory stays bounded whatever the sources'
size (the pages stay in the page cache).
"""

from __future__ import annotations

import dataclasses
import mmap
import os

import numpy as np

from .._fileio import write_pieces

__all__ = ["SampleSizes", "Measured", "RESIDENT_BYTES"]

# Bytes of the sizes' map a rank keeps resident at most before letting its pages go.
RESIDENT_BYTES = 8 << 20
_ITEM = 8
_FAULT_AROUND = 64 << 10
# Ids whose sizes one span of the file holds: half the resident bound.
_SPAN_IDS = RESIDENT_BYTES // 2 // _ITEM


class SampleSizes:
    """The sizes file at ``path``, of ``count`` samples: ``sizes[ids]`` is an int64 array."""

    def __init__(self, path: str, count: int):
        self.path = path
        self.count = count
        self._touched = 0
        self._map = None
        self._values = np.zeros(0, np.int64)
        if count:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), count * _ITEM, access=mmap.ACCESS_READ)
            self._values = np.frombuffer(self._map, dtype="<i8", count=count)

    @staticmethod
    def create(path: str, count: int) -> None:
        """Make the file for ``count`` samples (its sizes written by :meth:`write`)."""
        with open(path, "wb") as f:
            f.truncate(count * _ITEM)

    @staticmethod
    def write(path: str, first: int, sizes: np.ndarray) -> None:
        """Write the sizes of the samples ``first, first + 1, ...`` into the file."""
        data = np.ascontiguousarray(sizes, dtype="<i8")
        fd = os.open(path, os.O_WRONLY)
        try:
            write_pieces(fd, [data.data.cast("B")], first * _ITEM)
        finally:
            os.close(fd)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, ids) -> np.ndarray:
        """The sizes of ``ids``, read a span of the file at a time in ascending order, so
        that the pages let go between spans bound what one call maps."""
        if isinstance(ids, slice):
            ids = np.arange(*ids.indices(self.count), dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return np.zeros(0, np.int64)
        order = None
        if len(ids) > 1 and (ids[1:] < ids[:-1]).any():
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
        out = np.empty(len(ids), np.int64)
        spans = np.flatnonzero(np.diff(ids // _SPAN_IDS)) + 1
        for lo, hi in zip([0, *spans.tolist()], [*spans.tolist(), len(ids)]):
            out[lo:hi] = self._values[ids[lo:hi]]
            # A fault maps up to 64 KiB around the page it reads (the kernel's default
            # fault-around), and at most the span the ids cover.
            span = (int(ids[hi - 1]) - int(ids[lo]) + 1) * _ITEM + _FAULT_AROUND
            self._touched += min((hi - lo) * _FAULT_AROUND, span)
            if self._touched > RESIDENT_BYTES:
                self.drop_pages()
        if order is None:
            return out
        values = np.empty_like(out)
        values[order] = out
        return values

    def drop_pages(self) -> None:
        """Unmap the pages read so far (they stay in the page cache)."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)
        self._touched = 0

    def close(self) -> None:
        self._values = np.zeros(0, np.int64)
        if self._map is not None:
            self._map.close()
            self._map = None


@dataclasses.dataclass
class Measured:
    """What measuring the sources found, the same on every rank."""

    sizes: SampleSizes  # every sample's size, by global id
    first_id: np.ndarray  # the global id of each source's first sample (and the total)
    block_first: np.ndarray  # the global id of the first sample of every block, ascending
