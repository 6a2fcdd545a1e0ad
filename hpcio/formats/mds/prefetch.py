"""Reading ahead of an MDS reader's batches: the records of the next batch
(``prefetch``) and of a whole announced pass (``will_read``), brought into the page
cache in the background while the caller works on the batch before."""

from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from ..._memory import available_bytes
from ...errors import HpcioError
from .batches import _PLANNED_DEPTH, _PLANNED_GAP
from .cache import ShardCache

if TYPE_CHECKING:
    from ..._core._io import ReadAhead

__all__ = ["Prefetcher"]

# Prefetches running at once: the batch being read and the next one.
_PREFETCHES = 2
# A pass announced by will_read whose shards fit in this fraction of the memory still
# available is read ahead whole (see Prefetcher.will_read): records averaging at least
# _RECORD_PER_REQUEST each in its own request in the pass's order (a request that size
# runs at the storage's bandwidth, and each batch arrives in its turn); smaller records in
# storage order, in reads of up to 1 MiB, where a request per record would be bound by
# the storage's random reads.
_PASS_READ_FRACTION = 0.5
_RECORD_PER_REQUEST = 64 << 10
# Reads in flight at most: the bound of the read_ahead option, and of the depth a pass
# read scales it to.
_MAX_DEPTH = 64


def _bytes_depth(read_ahead: int, record: int) -> int:
    """Requests in flight for records of ``record`` bytes read one request each: as many
    bytes as ``read_ahead`` reads of 1 MiB (on a remote tier the bytes in flight hide its
    latency), at most ``_MAX_DEPTH``."""
    return min(_MAX_DEPTH, read_ahead * max(1, (1 << 20) // max(1, record)))


class Prefetcher:
    """The reads ahead of the batches of the shards in ``cache``: ``read_ahead`` reads of
    1 MiB in flight (0: ``POSIX_FADV_WILLNEED``); ``prefetches`` the batches' own, oldest
    first, and ``pass_read`` the read of the pass announced by :meth:`will_read`."""

    def __init__(self, cache: ShardCache, read_ahead: int):
        self.cache = cache
        self.read_ahead = read_ahead
        self.prefetches: deque = deque()
        self.pass_read: ReadAhead | None = None

    def prefetch(self, indices) -> None:
        """Start reading the records of samples ``indices`` that lie in shards not cached
        when opened, and return: a batch read while the batch before it is consumed is
        found in the page cache when its turn comes, so storage latency overlaps the
        caller's work.  With ``read_ahead`` set, on threads of their own, one request per
        record or coalesced run (sorted as planned reads are), with as many bytes in flight
        as ``read_ahead`` reads of 1 MiB (:func:`_bytes_depth`); else by
        ``POSIX_FADV_WILLNEED``, which block devices serve asynchronously.  The oldest
        prefetch beyond the last two is stopped.  Nothing is done while the read of an
        announced pass (:meth:`will_read`) runs: it holds these records.  A shard that
        cannot be opened or whose offsets are bad is skipped: the read of its samples
        reports it, in its turn."""
        from ..._core import _index, _io

        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        if self.pass_read is not None and self.pass_read.done:
            self._pass_read_ended()
        if not len(ids) or self.pass_read is not None:
            return
        extents = self._extents_by_shard(*_index.bisect_ids(self.cache.cum, ids, path=self.cache.directory))
        if extents is None:
            return
        fds, file_of, starts, ends, _picked = extents
        if not self.read_ahead:
            for f, fd in enumerate(fds):
                mine = file_of == f
                _io.will_need(fd, starts[mine], ends[mine])
            return
        running = self.prefetches
        record = int((ends - starts).sum()) // len(starts)
        running.append(_io.read_ahead_extents(fds, file_of, starts, ends, _bytes_depth(self.read_ahead, record),
                                              _PLANNED_GAP))
        while len(running) > _PREFETCHES:
            running.popleft().close()

    def will_read(self, indices) -> None:
        """A pass is about to read samples ``indices`` in this order: when the shards it
        touches fit in ``_PASS_READ_FRACTION`` of the memory still available
        (:func:`available_bytes`), start reading its records that lie in shards cold when
        opened, in the background, ``read_ahead`` requests at once (else 8).  Records of
        ``_RECORD_PER_REQUEST`` or more are read one request each, in the pass's order, so
        each batch arrives in its turn while the ones before it are consumed, with as many
        more requests at once as fit in 1 MiB (on a remote tier, the bytes in flight are
        what hides its latency; at most ``_MAX_DEPTH``); smaller
        records in storage order, neighbours within ``_PLANNED_GAP`` merged into reads of
        up to 1 MiB, at the storage's sequential bandwidth where a request per record
        would be bound by its random reads.  A rank's share of the samples reads only its
        own records.  Larger than memory, the batches' own prefetches are the reads
        ahead.  Either way the heads of the shards touched are read concurrently first,
        so opening them costs one latency, not one per shard.  Announcing a pass stops
        the previous one's read."""
        from ..._core import _index, _io

        self.stop_pass_read()
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        if not len(ids) or not self.cache.shards or self.cache.any_whole:
            return
        shard_of, local = _index.bisect_ids(self.cache.cum, ids, path=self.cache.directory)
        touched = np.unique(shard_of)
        if len(touched) > self.cache.max_open:
            return
        self._read_heads(touched)
        available = available_bytes()
        shard_bytes = sum(self.cache.shards[k].raw_bytes for k in touched.tolist())
        if available is None or shard_bytes > available * _PASS_READ_FRACTION:
            return
        record = shard_bytes // max(1, sum(self.cache.shards[k].samples for k in touched.tolist()))
        in_turn = record >= _RECORD_PER_REQUEST
        depth = self.read_ahead or _PLANNED_DEPTH
        if in_turn and self.read_ahead:
            depth = _bytes_depth(self.read_ahead, record)
        extents = self._extents_by_shard(shard_of, local)
        if extents is None:
            return
        fds, file_of, starts, ends, picked = extents
        self.pass_read = _io.read_ahead_extents(fds, file_of, starts, ends, depth, _PLANNED_GAP,
                                                 ranks=picked if in_turn else None)

    def _pass_read_ended(self) -> None:
        """The announced pass's records are cached: its shards cold when opened are read as
        cached ones from now on (:meth:`ShardCache.mark_cached`)."""
        self.pass_read.close()
        self.pass_read = None
        self.cache.mark_cached()

    def _extents_by_shard(self, shard_of: np.ndarray, local: np.ndarray):
        """The records of the samples at ``local`` in shards ``shard_of`` that lie in
        shards cold when opened: ``(fds, file_of, starts, ends, picked)``, ``picked`` the
        position of each record's sample among those asked; None when there is none, or
        when they touch more shards than may be open at once (opening them would close
        shards a batch reads)."""
        # one stable sort groups the samples by shard, each shard's in asked order
        order = np.argsort(shard_of, kind="stable")
        touched, first = np.unique(shard_of[order], return_index=True)
        if len(touched) > self.cache.max_open:
            return None
        bounds = np.append(first, len(shard_of)).tolist()
        fds, file_of, starts, ends, picked = [], [], [], [], []
        for j, k in enumerate(touched.tolist()):
            if k in self.cache.mem or (k in self.cache.maps and not self.cache.maps[k].cold):
                continue  # in memory, or cached when opened: nothing to read ahead
            mine = order[bounds[j] : bounds[j + 1]]
            extents = self._cold_extents(k, local[mine])
            if extents is None:
                continue
            fd, lo, hi = extents
            file_of.append(np.full(len(lo), len(fds), np.uint32))
            fds.append(fd)
            starts.append(lo)
            ends.append(hi)
            picked.append(mine)
        if not fds:
            return None
        return fds, np.concatenate(file_of), np.concatenate(starts), np.concatenate(ends), np.concatenate(picked)

    def _read_heads(self, touched: np.ndarray) -> None:
        """Read the offset tables of the shards ``touched`` that are not open, all at
        once, and wait: opening each then finds its table cached instead of waiting for
        the storage in turn.  A file that cannot be opened is left to its shard's open."""
        from ..._core import _io

        fds, sizes = [], []
        try:
            for k in touched.tolist():
                if k in self.cache.maps or k in self.cache.mem:
                    continue
                info = self.cache.shards[k]
                try:
                    fds.append(os.open(os.path.join(self.cache.directory, info.file_basename), os.O_RDONLY))
                except OSError:
                    continue
                sizes.append(min(info.raw_bytes, 4 * (info.samples + 2)))
            if len(fds) > 1:
                _io.read_ahead_extents(fds, np.arange(len(fds), dtype=np.uint32), np.zeros(len(fds), np.int64),
                                       np.asarray(sizes, np.int64), len(fds)).close(wait=True)
        finally:
            for fd in fds:
                os.close(fd)

    def _cold_extents(self, k: int, lidx: np.ndarray):
        """``(fd, starts, ends)`` of shard ``k``'s records ``lidx`` when the shard was cold
        when opened, else None (also when opening it or its offsets fail)."""
        try:
            sh = self.cache.get(k)
            if not sh.cold:
                return None
            _lidx, lo, hi = sh.extents(lidx)
        except HpcioError:
            return None
        return sh.mapped.fd, lo, hi

    def stop(self) -> None:
        while self.prefetches:
            self.prefetches.popleft().close()
        self.stop_pass_read()

    def stop_pass_read(self) -> None:
        if self.pass_read is not None:
            self.pass_read.close()
        self.pass_read = None
