"""Shard file access: buffered pread and mmap (compiled)."""
import mmap
import os

import numpy as np
from numpy.typing import NDArray
from typing_extensions import disjoint_base

DEFAULT_BUFFER_SIZE: int  # 8 MiB

def keep_freed_heap() -> None:
    """Have glibc keep up to 32 MiB of freed heap for the next allocations instead of
    returning it to the system at once (once per process)."""

def pack_pieces(pieces: list, index: int, offset: int, out) -> tuple[int, int, int]:
    """Copy the byte pieces from ``pieces[index][offset:]`` on back to back into ``out``
    until it is full or they end; returns ``(index, offset, written)``."""

def start_writeback(target: str | os.PathLike | int, offset: int = 0, length: int = 0) -> None:
    """Start writing a file's dirty pages (of ``length`` bytes at ``offset``; 0: to the
    end) to storage without waiting (Linux ``sync_file_range``; elsewhere nothing is
    done); a later fsync waits only for the rest.  ``target``: a path or an open fd."""

@disjoint_base
class ShardFile:
    """A file opened for reading with pread into a reusable buffer (default 8 MiB).

    ``pread`` may be called from several threads; ``read_records`` reuses one buffer,
    so each thread needs its own ShardFile."""
    path: str
    size: int
    def __init__(self, path: str, buffer_size: int = ...) -> None: ...
    def pread(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset`` (TruncatedShardError if the file is shorter)."""
    def read_records(self, starts: NDArray[np.uint64], ends: NDArray[np.uint64], *,
                     sample_base: int | None = None
                     ) -> tuple[memoryview, NDArray[np.uint64], int]:
        """Read as many of the records [starts[j], ends[j]) as fit into the internal buffer
        (at least one; the buffer grows for a single large record) with merged preads.
        Returns (buffer view, positions of the records in it: k+1 entries, k = number read).
        The view is valid until the next call.  Errors name path, byte offset and, when
        ``sample_base`` is given, sample ``sample_base + j``."""
    def close(self) -> None: ...
    def __enter__(self) -> ShardFile: ...
    def __exit__(self, *exc) -> None: ...

def map_file(fd: int) -> mmap.mmap:
    """A read-only mmap of the whole (non-empty) file open on ``fd``; 2 MiB or more is
    advised for huge pages (``MADV_HUGEPAGE``)."""

def check_mapped_size(fd: int, size: int, path: str | None) -> None:
    """Raise ShardChangedError when the file open on ``fd`` is now shorter than ``size``."""

@disjoint_base
class MappedShard:
    """A read-only mmap of a whole file, kept open; zero-copy record views."""
    path: str
    size: int
    fd: int
    def __init__(self, path: str) -> None: ...
    def check_size(self) -> None:
        """Raise ShardChangedError if the file is now shorter than its mapping."""
    def buffer(self) -> memoryview:
        """The whole mapping (zero-copy, read-only)."""
    def view(self, start: int, end: int) -> memoryview:
        """Zero-copy view of [start, end); bounds-checked (TruncatedShardError)."""
    def probe_pages(self, regions: int = 8) -> tuple[int, int]:
        """``(cheap, probed)``: of up to ``regions`` cached 2 MiB regions, how many map
        1 MiB or more with one page fault.  Call it on a fresh mapping."""
    def resident_bytes(self) -> int:
        """Bytes of the file in the page cache (mincore over the mapping)."""
    def gather(self, starts: NDArray[np.uint64], ends: NDArray[np.uint64], *,
               sample_base: int | None = None) -> tuple[bytearray, NDArray[np.uint64]]:
        """Copy many records back to back in one GIL-free call: (data, m+1 positions)."""
    def close(self) -> None: ...
    def __enter__(self) -> MappedShard: ...
    def __exit__(self, *exc) -> None: ...

def gather(src, starts: NDArray[np.uint64], ends: NDArray[np.uint64], *, path: str | None = None,
           sample_base: int | None = None) -> tuple[bytearray, NDArray[np.uint64]]:
    """Same as MappedShard.gather over any buffer; errors name ``path``."""

def will_need(fd: int, starts, ends) -> None:
    """Ask the kernel to read ranges ``[starts[j], ends[j])`` of ``fd`` into the page cache
    now (``POSIX_FADV_WILLNEED``)."""

def kernel_reads_ahead_alone(fd: int) -> bool:
    """Whether the kernel's read-ahead of the file open on ``fd`` keeps a single request
    in flight (FUSE)."""

@disjoint_base
class ReadAhead:
    """Bytes ``[offset, offset + length)`` of the file open on ``fd`` read into the page cache
    in the background, ``depth`` MiB-sized reads at once; :meth:`close` stops the reads not
    started and waits for those in flight (``wait=True``: for every read)."""

    bytes_read: int

    def __init__(self, fd: int, offset: int, length: int, depth: int = 8) -> None: ...
    @property
    def done(self) -> bool:
        """Whether every read has ended (closed, or never started, counts as ended)."""
    def close(self, wait: bool = False) -> int: ...

def read_ahead_extents(fds, file_of, starts, ends, depth: int = 8, max_gap: int = 16384,
                       ranks=None) -> ReadAhead:
    """Records ``[starts[j], ends[j])`` of the files open on ``fds[file_of[j]]`` read into
    the page cache in the background, neighbours within ``max_gap`` bytes as one range,
    ``depth`` reads at once; with ``ranks``, in order of ``ranks[j]``."""

def read_extents(fds, paths, file, offsets, lengths, out, dst, *, max_gap: int = 0,
                 max_request: int = 0, depth: int = 1) -> tuple[int, int]: ...

@disjoint_base
class ShardTable:
    """The open shards of a dataset as C arrays, for batch reads across shards in one
    GIL-free call (records copied from their bytes, or read as planned requests)."""
    nshards: int
    def __new__(cls, nshards: int) -> ShardTable: ...
    def attach(self, k: int, buf, count: int, fd: int, path: str | None, planned: bool) -> None:
        """Shard ``k``: its bytes (count, offset table, records), descriptor and path."""
    def detach(self, k: int) -> None:
        """Forget shard ``k`` (before it is closed)."""
    def shrunk(self, shards: NDArray[np.int64]) -> tuple[int, int] | None:
        """``(shard, size)`` of the first of ``shards`` whose file shrank, or None."""
    def extents(self, shard: NDArray[np.int64], local: NDArray[np.uint64]
                ) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
        """Byte extents of record ``local[j]`` of shard ``shard[j]``."""
    def read(self, shard: NDArray[np.int64], starts: NDArray[np.uint64], ends: NDArray[np.uint64],
             depth: int = 1, max_gap: int = 0) -> tuple[bytearray, NDArray[np.uint64]]:
        """The records back to back in batch order: ``(data, m+1 positions)``."""
