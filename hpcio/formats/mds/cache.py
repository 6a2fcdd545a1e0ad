"""The open shards of an MDS reader: opened on first use, evicted least recently used, and
attached to the batch table with the read mode a batch reads them by.

A shard is memory-mapped, or, whole-shard compressed, decompressed into memory (or into
the ``cache_dir`` the caller names, then mapped).  Its read mode (:class:`ReadMode`) is
fixed when it is attached, from the reader's ``read_path`` and what the shard's file was
like when opened (cached or not, large records in small pages or not); a batch then only
looks the modes of its shards up.
"""

from __future__ import annotations

import enum
import errno
import os
from collections import OrderedDict

import numpy as np

from ..._paths import named_inside
from ..._published import Version
from ...errors import CorruptShardError, ShardNotFoundError, TruncatedShardError
from .compression import _FAST_HASHES, _digest
from .index import _ShardInfo
from .shards import _check_count, _large_records, _OpenShard

__all__ = ["READ_PATHS", "ReadMode", "ShardCache"]

READ_PATHS = ("auto", "map", "planned")


class ReadMode(enum.IntEnum):
    """How a batch reads the records of an attached shard."""

    DETACHED = 0
    #: held in memory (decompressed whole): records copied from it
    MEMORY = 1
    #: mapped, cached when opened (or ``read_path="map"``): records copied from the mapping
    MAP = 2
    #: mapped, mostly not cached when opened (or ``read_path="planned"``): records read
    #: from the file as planned requests
    PLANNED = 3
    #: mapped, cached, large records (``read_path="auto"``): each value read straight
    #: into its own object
    VALUES = 4
    #: records compressed one by one: decompressed per shard (no batch table)
    RECORDS = 5


class ShardCache:
    """Shards ``shards`` of the dataset in ``directory`` (``cum`` their cumulative sample
    counts), opened on demand: at most ``max_open`` mapped and ``max_decompressed`` in
    memory, least recently used closed first.  ``counted`` shards have had their counts
    checked against their files; the others are checked in turn before a later one is
    opened.  ``table`` (a ``ShardTable``, None when some shard compresses its records one
    by one) holds the attached shards for batch reads across shards in one compiled call,
    ``modes`` the :class:`ReadMode` of each."""

    def __init__(self, directory: str, shards, cum: np.ndarray, *, compact: bool, counted: int,
                 any_whole: bool, any_per_sample: bool, cache_dir: str | None, max_open: int,
                 max_decompressed: int, validate_hashes, limit: int, read_path: str):
        from ..._core import _io

        self.directory = directory
        self.shards = shards
        self.cum = cum
        self.cum_list = cum.tolist()
        self.compact = compact
        self.counted = counted
        self.any_whole = any_whole
        self.cache_dir = cache_dir
        self.max_open = max_open
        self.max_decompressed = max_decompressed
        self.validate_hashes = validate_hashes
        self.limit = limit
        self.read_path = read_path
        self.maps: OrderedDict[int, _OpenShard] = OrderedDict()
        self.mem: OrderedDict[int, _OpenShard] = OrderedDict()
        self.version = Version(directory)  # a staged dataset staged again is not mixed
        self.table = None if any_per_sample or not len(shards) else _io.ShardTable(len(shards))
        self.modes = np.zeros(len(shards), np.int8)

    @property
    def capacity(self) -> int:
        """Most shards one batch may hold open at once."""
        if self.cache_dir is None and self.any_whole:
            return min(self.max_open, self.max_decompressed)
        return self.max_open

    # --- opening ------------------------------------------------------------------------
    def get(self, k: int) -> _OpenShard:
        """Shard ``k`` opened (mmap or decompressed), most recently used; a mapped shard
        is checked not to have shrunk since it was opened (one ``fstat``)."""
        for cache in (self.maps, self.mem):
            sh = cache.get(k)
            if sh is not None:
                cache.move_to_end(k)
                sh.check_size()
                return sh
        info = self.shards[k]
        base_id = self.cum_list[k]
        path = self.file(info)
        if info.whole_shard and self.cache_dir is None:
            raw = self.decompress_shard(info, path)
            sh = _OpenShard(info, path, memoryview(raw), None, base_id, in_file=False)
            cache, bound = self.mem, self.max_decompressed
        else:
            if info.whole_shard:
                path = self._cached_raw(info, path)
            elif self.validate_hashes:
                self.check_hash(info, path)
            mapped = self._map_file(path)
            try:
                sh = _OpenShard(info, path, mapped.buffer(), mapped, base_id, in_file=True)
            except BaseException:
                mapped.close()
                raise
            cache, bound = self.maps, self.max_open
        try:
            self.version.check(path)
        except BaseException:
            sh.close()
            raise
        cache[k] = sh
        if len(cache) > bound:
            self._close_one(cache, oldest=True)
        self._attach(k, sh)
        return sh

    def peek(self, k: int) -> _OpenShard | None:
        """Shard ``k`` if it is open, left where it is in the LRU order."""
        sh = self.maps.get(k)
        return self.mem.get(k) if sh is None else sh

    def extents(self, k: int, lidx):
        """``(shard, lidx, starts, ends)``: shard ``k`` opened and the byte ranges of its
        records ``lidx``; records of a shard mostly not cached when opened are asked for
        first (``will_need``), as a fault would read the whole read-around window."""
        from ..._core import _io

        sh = self.get(k)
        lidx, starts, ends = sh.extents(lidx)
        if sh.cold:
            _io.will_need(sh.mapped.fd, starts, ends)
        return sh, lidx, starts, ends

    def open_all(self, touched: np.ndarray) -> bool:
        """Open the shards ``touched`` that are not open, keeping those that are: False
        when they are more than may be open at once."""
        missing = touched[self.modes[touched] == 0]
        if not len(missing):
            return True
        if len(touched) > self.capacity:
            return False
        for k in touched.tolist():  # the most recently used: not evicted for the missing
            for cache in (self.maps, self.mem):
                if k in cache:
                    cache.move_to_end(k)
        for k in missing.tolist():
            self.get(k)
        return bool(self.modes[touched].all())

    def file(self, info: _ShardInfo) -> str:
        """The path of ``info``'s file, which must exist; the counts of the shards before
        it are checked first."""
        path = named_inside(self.directory, info.file_basename, what="shard file",
                            source=os.path.join(self.directory, info.source))
        if not os.path.isfile(path):
            raise ShardNotFoundError(
                f"shard file {info.file_basename} named by {info.source} is missing", path=path
            )
        if info.position > self.counted:
            self._check_counts_before(info.position)
        return path

    def shard_path(self, k: int) -> str:
        return os.path.join(self.directory, self.shards[k].file_basename)

    def _check_counts_before(self, k: int) -> None:
        """Check the counts (and sizes) index.json gives the shards before shard ``k``
        against their files, once: a wrong count there would shift the index of every
        sample of shard ``k`` and after it onto another sample."""
        for info in self.shards[self.counted : k]:
            _check_count(info, os.path.join(self.directory, info.file_basename))
            self.counted = info.position + 1

    def check_hash(self, info: _ShardInfo, path: str, data=None) -> None:
        hashes = info.zip_hashes if info.whole_shard else info.raw_hashes
        algo = self.validate_hashes
        if algo is True:
            algo = next((a for a in _FAST_HASHES if a in hashes), next(iter(sorted(hashes)), None))
            if algo is None:
                return
        if algo not in hashes:
            raise CorruptShardError(
                f"{info.source} records no {algo} hash for this shard (it has: {', '.join(sorted(hashes)) or 'none'})",
                path=path,
            )
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        got = _digest(algo, data, path)
        if got != hashes[algo]:
            raise CorruptShardError(
                f"{algo} mismatch: {info.source} says {hashes[algo]}, the file hashes to {got}", path=path
            )

    def _map_file(self, path: str):
        """``path`` mapped; out of descriptors, the older half of the open shards are
        closed and ``max_open`` lowered to what remains, once."""
        from ..._core import _io

        try:
            return _io.MappedShard(path)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or len(self.maps) < 2:
                raise
        self.max_open = len(self.maps) // 2
        while len(self.maps) > self.max_open:
            self._close_one(self.maps, oldest=True)
        return _io.MappedShard(path)

    def decompress_shard(self, info: _ShardInfo, path: str) -> bytes:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) != info.zip_bytes:  # the file as index.json sizes it, before it is trusted
            cls = TruncatedShardError if len(data) < info.zip_bytes else CorruptShardError
            raise cls(f"shard is {len(data)} bytes, {info.source} says {info.zip_bytes}", path=path,
                      offset=min(len(data), info.zip_bytes))
        if self.validate_hashes:
            self.check_hash(info, path, data)
        raw = info.compression.decompress(data, min(self.limit, info.raw_bytes), path=path, offset=0)
        if len(raw) != info.raw_bytes:
            raise CorruptShardError(
                f"decompressed shard is {len(raw)} bytes, {info.source} says {info.raw_bytes}", path=path
            )
        return raw

    def _cached_raw(self, info: _ShardInfo, path: str) -> str:
        """The decompressed shard in ``cache_dir`` (written once, atomically)."""
        from ..tar_gzip import cache_key

        key = cache_key(path)
        target = os.path.join(self.cache_dir, f"{key}.{os.path.basename(info.raw_basename)}")
        if not os.path.isfile(target) or os.path.getsize(target) != info.raw_bytes:
            raw = self.decompress_shard(info, path)
            os.makedirs(self.cache_dir, exist_ok=True)
            tmp = f"{target}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(raw)
            os.replace(tmp, target)
        return target

    # --- read modes -----------------------------------------------------------------------
    def _attach(self, k: int, sh: _OpenShard) -> None:
        """Fix how batches read the newly opened shard ``k`` and enter it in the table."""
        codec = sh.info.compression
        if self.table is None:
            per_sample = codec is not None and codec.per_sample
            mode = ReadMode.RECORDS if per_sample else ReadMode.MEMORY if sh.mapped is None else ReadMode.MAP
            self.modes[k] = int(mode)
            return
        if sh.mapped is None:
            mode = ReadMode.MEMORY
        elif self.read_path == "map":
            mode = ReadMode.MAP
        elif self.read_path == "planned" or sh.cold:
            mode = ReadMode.PLANNED
        elif self.read_path == "auto" and _large_records(sh.info):
            # cached large records: each value read once, straight into its bytes object,
            # not gathered into fresh memory first and copied out again
            mode = ReadMode.VALUES
        else:
            mode = ReadMode.MAP
        planned = mode == ReadMode.PLANNED or (mode == ReadMode.VALUES and sh.pread_values)
        self.table.attach(k, sh.buf, sh.n, sh.mapped.fd if sh.mapped is not None else -1, sh.path, planned)
        self.modes[k] = int(mode)

    def _detach(self, k: int) -> None:
        if self.table is not None and self.modes[k]:
            self.table.detach(k)
        self.modes[k] = 0  # ReadMode.DETACHED

    def mark_cached(self) -> None:
        """The records of the shards cold when opened are cached now (a pass read them
        ahead): read them as cached ones from now on, through the mapping or value by
        value, where a planned request per batch costs a system call per coalesced range."""
        for k, sh in list(self.maps.items()):
            if sh.cold:
                sh.cold = False
                if self.modes[k]:
                    self._detach(k)
                    self._attach(k, sh)

    # --- closing --------------------------------------------------------------------------
    def _close_one(self, cache, oldest: bool = False) -> None:
        """Close one open shard of ``cache`` and take it out of the batch table first: its
        descriptor is reused by the next open, which the table must never read."""
        k, sh = cache.popitem(last=not oldest)
        self._detach(k)
        sh.close()

    def release(self, shards) -> None:
        """Close the shards ``shards`` that are open (a later read opens them again)."""
        for k in shards:
            for cache in (self.maps, self.mem):
                sh = cache.pop(int(k), None)
                if sh is not None:
                    self._detach(int(k))
                    sh.close()

    def drop_pages(self) -> None:
        """Close the mapped shards (a later read maps its shard again)."""
        while self.maps:
            self._close_one(self.maps)

    def close(self) -> None:
        for cache in (self.maps, self.mem):
            while cache:
                self._close_one(cache)
