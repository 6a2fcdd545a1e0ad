"""An open MDS shard: its bytes (a memory map or decompressed memory), header checked.

A shard file starts with its record count, the u32 offset of every record and of the
end, and the shard's configuration as JSON; the records follow.  The header is checked
against ``index.json`` once, when the shard is opened, so that the per-sample paths
can trust every offset.
"""

from __future__ import annotations

import errno
import json
import os
import struct

import numpy as np

from ...errors import CorruptShardError, ShardNotFoundError, TruncatedShardError
from .compression import parse_compression
from .index import _CONFIG_KEYS, _loads, _ShardInfo

# Mean record size above which the sequential path maps the shard instead of reading it
# through the pread buffer (which costs a second copy of every value).  Records this large
# share no pages: where the mapping maps small pages it takes a page fault or two per
# record, and sample dicts are then built from reads of each record's values instead
# (see _OpenShard.pread_values).
_LARGE_RECORD = 16 << 10


def _large_records(info: _ShardInfo) -> bool:
    """Whether the shard's records average more than _LARGE_RECORD."""
    return info.raw_bytes > _LARGE_RECORD * max(info.samples, 1)

# Share of a shard's file in the page cache, when it is opened, from which it is read as
# cached: batches copy its records from the mapping (read_path "auto").
_CACHED_SHARE = 0.9
_U32 = struct.Struct("<I")


class _OpenShard:
    """A shard's bytes (mmap or decompressed memory) with its checked header."""

    __slots__ = ("info", "path", "n", "size", "buf", "table", "mapped", "base", "in_file", "_fd",
                 "pread_values", "cold")

    def __init__(self, info: _ShardInfo, path: str, buf: memoryview, mapped, base: int, in_file: bool):
        self.info = info
        self.path = path  # the file the offsets refer to (the zip file when decompressed)
        self.buf = buf
        self.mapped = mapped
        # Large records are read value by value with pread (read_fd), not through the
        # mapping, where the file's cached pages are small: a page fault or two per record
        # costs more than two reads.  In huge pages one fault maps many records, and the
        # mapping is faster.
        self.pread_values = (mapped is not None and _large_records(info)
                             and (info.compression is None or not info.compression.per_sample)
                             and not _maps_cheaply(mapped))
        self.size = len(buf)
        # Mostly not cached when opened: batches read through the mapping ask for their
        # records first (will_need), as a fault would read the whole read-around window.
        self.cold = mapped is not None and mapped.resident_bytes() < _CACHED_SHARE * self.size
        self.base = base  # global id of local sample 0
        self.in_file = in_file  # offsets are file offsets (False: into decompressed bytes)
        self.n = _check_header(info, path, self.size, lambda off, ln: buf[off : off + ln], base)
        self.table = buf[4 : 8 + 4 * self.n]
        self._fd = -1

    def read_fd(self) -> int | None:
        """A descriptor of the mapped file to ``pread`` large records' values from, opened
        on first use (None when the shard is held in memory)."""
        if self.mapped is None:
            return None
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    return None  # out of descriptors: read through the map
                raise
        return self._fd

    def extents(self, lidx):
        """``(lidx, starts, ends)``: the byte ranges of local records ``lidx`` (as uint64), from
        the checked offset table."""
        from ..._core import _index

        lidx = np.ascontiguousarray(lidx, dtype=np.uint64)
        starts, ends = _index.offset_ranges(self.table, 4, self.n, self.size, lidx, path=self.path,
                                            table_offset=4, sample_base=self.base)
        return lidx, starts, ends

    def check_size(self) -> None:
        """Raise ShardChangedError if the mapped file shrank since it was opened: reading
        the lost part of the mapping would kill the process (SIGBUS)."""
        if self.mapped is not None:
            self.mapped.check_size()

    def gather(self, starts, ends):
        from ..._core import _io

        if self.mapped is not None:
            return self.mapped.gather(starts, ends)
        return _io.gather(self.buf, starts, ends)

    def close(self) -> None:
        # Values handed out with zero_copy may still view the bytes: the mapping (or the
        # decompressed buffer) then lives on with them, so never force a release here.
        self.table.release()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self.mapped is not None:
            self.mapped.close()
            self.mapped = None


def _maps_cheaply(mapped) -> bool:
    """Most of the cached regions probed in a fresh mapping map 1 MiB or more per page
    fault (``MappedShard.probe_pages``); False when none is cached."""
    cheap, probed = mapped.probe_pages()
    return 2 * cheap > probed


def _check_count(info: _ShardInfo, path: str) -> None:
    """A shard file's size and record count agree with its index.json entry, read
    without mapping it: the first 4 bytes and ``fstat``.  A whole-shard compressed file
    only has its size checked (its count is inside the compressed bytes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ShardNotFoundError(f"shard file {info.file_basename} named by {info.source} is missing",
                                 path=path) from None
    try:
        size = os.fstat(fd).st_size
        expected = info.zip_bytes if info.whole_shard else info.raw_bytes
        if size != expected:
            cls = TruncatedShardError if size < expected else CorruptShardError
            raise cls(f"shard is {size} bytes, {info.source} says {expected}", path=path, offset=min(size, expected))
        if not info.whole_shard:
            n = _U32.unpack(os.pread(fd, 4, 0))[0]
            if n != info.samples:
                raise CorruptShardError(
                    f"shard header says {n} samples, {info.source} says {info.samples}", path=path, offset=0
                )
    finally:
        os.close(fd)


def _check_header(info: _ShardInfo, path: str, size: int, read, base: int) -> int:
    """Check a shard's header and offset table against index.json; return its count.

    ``read(offset, length)`` returns bytes of the shard (decompressed when whole-shard
    compressed).  Every offset is checked (non-decreasing, within the file) once here, so
    the per-sample paths need no checks.
    """
    n, data_start = _check_offset_table(info, path, size, read, base)
    _check_embedded_config(info, path, read(8 + 4 * n, data_start - 8 - 4 * n), 8 + 4 * n)
    return n


def _check_offset_table(info: _ShardInfo, path: str, size: int, read, base: int) -> tuple[int, int]:
    """The shard's record count and first record offset, every offset checked."""
    from ..._core import _index

    if size != info.raw_bytes:
        cls = TruncatedShardError if size < info.raw_bytes else CorruptShardError
        raise cls(f"shard is {size} bytes, {info.source} says {info.raw_bytes}", path=path,
                  offset=min(size, info.raw_bytes))
    if size < 4:
        raise TruncatedShardError(f"shard is {size} bytes, too short for a header", path=path, offset=0)
    n = _U32.unpack(read(0, 4))[0]
    if n != info.samples:
        raise CorruptShardError(
            f"shard header says {n} samples, {info.source} says {info.samples}", path=path, offset=0
        )
    table_end = 8 + 4 * n
    if table_end > size:
        raise TruncatedShardError(
            f"shard is {size} bytes; its offset table needs {table_end}", path=path, offset=size
        )
    table = read(4, 4 * (n + 1))
    data_start = _U32.unpack_from(table, 0)[0]
    if not table_end <= data_start <= size:
        raise CorruptShardError(
            f"first record offset {data_start} is outside [{table_end}, {size}]", path=path, offset=4
        )
    _index.offset_ranges(table, 4, n, size, None, path=path, table_offset=4, sample_base=base)
    return n, data_start


def _check_embedded_config(info: _ShardInfo, path: str, config_raw, offset: int) -> None:
    """The configuration a shard's header ends with (at ``offset``) must agree with its
    index.json entry: same columns, and compressed per sample or not alike."""
    try:
        config = _loads(config_raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptShardError(
            f"the shard's embedded config is not valid JSON: {exc}", path=path, offset=offset
        ) from None
    if not isinstance(config, dict):
        raise CorruptShardError("the shard's embedded config is not an object", path=path, offset=offset)
    for key in _CONFIG_KEYS:
        if config.get(key) != info.entry.get(key):
            raise CorruptShardError(
                f"the shard's embedded config has {key} = {config.get(key)!r}; "
                f"{info.source} has {info.entry.get(key)!r}",
                path=path, offset=offset,
            )
    try:
        embedded = parse_compression(config.get("compression")) if isinstance(config.get("compression"), str) else None
    except ValueError as exc:
        raise CorruptShardError(f"the shard's embedded config: {exc}", path=path, offset=offset) from None
    per_sample = info.compression is not None and info.compression.per_sample
    if per_sample != (embedded is not None and embedded.per_sample):
        raise CorruptShardError(
            f"the shard's embedded config has compression = {config.get('compression')!r}; "
            f"{info.source} has {info.entry.get('compression')!r}",
            path=path, offset=offset,
        )


# Reads in flight by default where the kernel's read-ahead keeps one (see Reader.read_ahead).
_AUTO_READ_AHEAD = 8


def _auto_read_ahead(directory: str) -> int:
    """Reader.read_ahead="auto" for the dataset in ``directory``, where its shards lie:
    _AUTO_READ_AHEAD where the kernel's read-ahead keeps one request in flight, else 0."""
    from ..._core import _io

    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        return _AUTO_READ_AHEAD if _io.kernel_reads_ahead_alone(fd) else 0
    finally:
        os.close(fd)


class _ReadAheads:
    """The shard a pass in storage order reads and the next, brought into the page cache
    by ``ReadAhead`` (``depth`` reads of 1 MiB in flight, ``depth`` > 0)."""

    def __init__(self, depth: int):
        self.depth = depth
        self._running: dict = {}

    def ahead_of(self, k: int, files: list) -> None:
        """Read ``files`` (shard ``k``'s file and the next's, or just ``k``'s) ahead; stop
        the read-aheads of shards before ``k``."""
        from ..._core import _io

        for j in [j for j in self._running if j < k]:
            self._running.pop(j).close()
        for j, path in enumerate(files, k):
            if j in self._running:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue  # the read itself reports a missing or unreadable file
            try:
                self._running[j] = _io.ReadAhead(fd, 0, os.fstat(fd).st_size, self.depth)
            finally:
                os.close(fd)

    def close(self) -> None:
        while self._running:
            self._running.popitem()[1].close()
