"""Reading samples by index, in batches: the random-access machinery of the MDS reader.

A batch of sample ids is grouped by shard (one offset lookup and one batch decompression
per shard touched), its records are sliced into columns or sample dicts in place, and
the results are put back in the order asked for.  :class:`_BatchReads` is a part of
:class:`~hpcio.formats.mds.reader.Reader`, which provides the shards (``_shard``,
``shards``, ``_cum``, ``_total``, ``_any_whole``, ``_any_per_sample``), the layout and the read options.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from itertools import chain

import numpy as np
import orjson

from ..._core import _records
from ...columns import VarColumn, ViewColumn
from ...codecs import MAX_DECODED_ENV
from ...errors import (CorruptShardError, DecompressionLimitError, HpcioError, IndexOutOfRangeError, OutOfMemoryError,
                       ShardChangedError)
from ..._memory import available_bytes
from ..base import inverse_permutation
from .compression import Compression
from .shards import _OpenShard, _large_records

READ_PATHS = ("auto", "map", "planned")
# Planned reads of a batch (read_path "planned", or "auto" on a shard mostly not cached):
# requests in flight at once, and the gap between two records below which they are read
# as one request (a request costs more than reading a few pages it does not need).
_PLANNED_DEPTH = 8
_PLANNED_GAP = 16 << 10
# Prefetches running at once: the batch being read and the next one.
_PREFETCHES = 2
# A pass announced by will_read whose shards fit in this fraction of the memory still
# available is read ahead whole (see _BatchReads.will_read): records averaging at least
# _RECORD_PER_REQUEST each in its own request in the pass's order (a request that size
# runs at the storage's bandwidth, and each batch arrives in its turn); smaller records in
# storage order, in reads of up to 1 MiB, where a request per record would be bound by
# the storage's random reads.
_PASS_READ_FRACTION = 0.5
_RECORD_PER_REQUEST = 64 << 10
# Reads in flight at most: the bound of the read_ahead option, and of the depth a pass
# read scales it to.
_MAX_DEPTH = 64


def _gathers(samples: int, shards: int) -> bool:
    """Whether a batch of ``samples`` over ``shards`` shards is gathered into one buffer
    before it is sliced, rather than sliced shard by shard: many shards, few records
    each, where slicing per shard would run its Python per shard."""
    return shards > 8 and samples < 8 * shards


def _bytes_depth(read_ahead: int, record: int) -> int:
    """Requests in flight for records of ``record`` bytes read one request each: as many
    bytes as ``read_ahead`` reads of 1 MiB (on a remote tier the bytes in flight hide its
    latency), at most ``_MAX_DEPTH``."""
    return min(_MAX_DEPTH, read_ahead * max(1, (1 << 20) // max(1, record)))


class _BatchReads:
    """``read_many``, ``read_field``, ``read_columns`` and ``field_lengths`` of the reader."""

    def read_many(self, indices, fields: Sequence[str] | None = None) -> list:
        cols = self._layout.select(fields, self.path) if self._layout else []
        samples = self._read_columns(indices, cols, as_samples=True)
        return [] if samples is None else samples

    def read_field(self, indices, field: str) -> list:
        values = self._read_columns(indices, self._layout.select([field], self.path) if self._layout else [])
        return [] if values is None else values[0]

    def read_columns(self, indices, fields: Sequence[str] | None = None) -> dict:
        """Columns of samples ``indices`` (see :mod:`hpcio.columns`): numbers as numpy
        arrays, ``str``/``bytes``/``json`` columns (and undecoded images) as VarColumns
        sliced out of the records by one compiled call, other encodings as lists.  With
        ``zero_copy``, bytes columns are ViewColumns of the records where they lie."""
        cols = self._layout.select(fields, self.path) if self._layout else []
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        kinds = {c: self._layout.column_kind(c, self.decode_images) for c in cols}
        views = [c for c in cols if self.zero_copy and kinds[c] == "bytes"]
        direct = [c for c in cols if kinds[c] is not None and c not in views]
        out: dict = {}
        # Copied bytes columns (images) touch every page of their records anyway: through
        # the mapping they cost one copy, through pread two.
        if len(ids) and (direct or views) and all(kinds[c] != "bytes" for c in direct):
            read = self._columns_pread(ids, direct, views, kinds)
            if read is not None:
                out.update(read)
                direct = views = []
        if direct or views:
            out.update(self._columns_in_place(ids, cols, direct, views, kinds))
        general = [c for c in cols if kinds[c] is None]
        if general:
            values = self._read_columns(ids, general) if len(ids) else [[] for _ in general]
            for c, v in zip(general, values):
                out[self._layout.names[c]] = v
        return {self._layout.names[c]: out[self._layout.names[c]] for c in cols}

    def _columns_in_place(self, ids: np.ndarray, cols: list[int], direct: list[int], views: list[int],
                          kinds: dict) -> dict:
        """Columns ``direct`` copied out of the records where they lie (mapped, or
        decompressed per shard) by one compiled call, and columns ``views`` as ViewColumns
        of them; ``cols`` are the columns a bad record's error is reported for."""
        layout = self._layout
        bufs, buf_of, starts, ends = self._record_table(ids)
        out = {}
        if direct:
            pairs, bad = _records.mds_columns(bufs, buf_of, starts, ends, layout._sizes_t, tuple(direct))
            if pairs is None:
                self._report_bad_record(int(ids[bad]), cols)
            for c, (data, offsets) in zip(direct, pairs):
                out[layout.names[c]] = _column(kinds[c], data, offsets)
        for c in views:
            begin = np.empty(len(ids), np.int64)
            lengths, bad = _records.mds_lengths(bufs, buf_of, starts, ends, layout._sizes_t, c, False, begin)
            if lengths is None:
                self._report_bad_record(int(ids[bad]), cols)
            begin += starts
            out[layout.names[c]] = ViewColumn(bufs, buf_of, begin, begin + lengths)
        return out

    def _columns_pread(self, ids: np.ndarray, copied: list[int], viewed: list[int], kinds: dict) -> dict | None:
        """:meth:`read_columns` for shards of large records in small pages: the column
        sizes and the copied values are read with ``pread``, and the views (``zero_copy``)
        point into the mapping without touching it, since reading a record through such a
        mapping makes the kernel map the 64 KiB around it (fault-around).  None unless
        every shard the batch touches reads its values with pread
        (``_OpenShard.pread_values``) and has a descriptor to read them with."""
        groups, order = self._shard_groups(ids)
        if not all(self._shard(k).pread_values for k, _lidx, _a, _b in groups):
            return None
        pieces = self._pread_pieces(ids, groups, order, copied, viewed)
        if pieces is None:
            return None
        copies, spans, bufs, which = pieces
        inverse = None if order is None else inverse_permutation(order)
        out = {self._layout.names[c]: _copied_column(copies[c], kinds[c], inverse) for c in copied}
        if inverse is not None:
            which = which[inverse]
        for c in viewed:
            begin = np.concatenate([v[0] for v in spans[c]])
            end = np.concatenate([v[1] for v in spans[c]])
            if inverse is not None:
                begin, end = begin[inverse], end[inverse]
            out[self._layout.names[c]] = ViewColumn(bufs, which, begin, end)
        return out

    def _pread_pieces(self, ids: np.ndarray, groups: list, order, copied: list[int], viewed: list[int]):
        """Each shard group's part of the columns, read by ``mds_columns_pread``:
        ``(copies, spans, bufs, which)``, in shard order: per copied column its
        ``(data, offsets)`` pieces, per viewed column its ``(begin, end)`` pieces, the
        shards' buffers and the buffer of each record.  None when a shard has no
        descriptor left (the caller then reads through the mapping)."""
        sorted_ids = ids if order is None else ids[order]
        copies: dict = {c: [] for c in copied}
        spans: dict = {c: [] for c in viewed}
        bufs, buf_of = [], []
        for g, (k, lidx, a, b) in enumerate(groups):
            sh, lidx, lo, hi = self._ranges(k, lidx)
            fd = sh.read_fd()
            if fd is None:
                return None
            got, where, bad = _records.mds_columns_pread(
                fd, lo.astype(np.int64), hi.astype(np.int64), self._layout._sizes_t, tuple(copied),
                tuple(viewed), path=sh.path)
            if bad >= 0:
                self._report_bad_record(int(sorted_ids[a + bad]), copied + viewed)
            for c, pair in zip(copied, got):
                copies[c].append(pair)
            for c, pair in zip(viewed, where):
                spans[c].append(pair)
            bufs.append(memoryview(sh.buf))
            buf_of.append(np.full(b - a, g, np.int32))
        return copies, spans, bufs, np.concatenate(buf_of)

    def field_lengths(self, indices, field: str) -> np.ndarray | None:
        """``len()`` of a ``str`` or ``bytes`` field for samples ``indices`` (sort keys),
        counted in the records by one compiled call without building the values; None for
        other kinds.  A malformed record or a value that is not UTF-8 raises the error its
        read would, naming the file, byte offset and sample."""
        if not self._layout:
            return None
        (c,) = self._layout.select([field], self.path)
        kind = self._layout.column_kind(c, self.decode_images)
        if kind not in ("str", "bytes"):
            return None
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(ids) == 0:
            return np.empty(0, np.int64)
        bufs, buf_of, starts, ends = self._record_table(ids)
        lengths, bad = _records.mds_lengths(bufs, buf_of, starts, ends, self._layout._sizes_t, c, kind == "str")
        if lengths is None:
            self._report_bad_record(int(ids[bad]), [c])
        return lengths

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
        if self._pass_read is not None and self._pass_read.done:
            self._pass_read_ended()
        if not len(ids) or self._pass_read is not None:
            return
        extents = self._extents_by_shard(*_index.bisect_ids(self._cum, ids, path=self.path))
        if extents is None:
            return
        fds, file_of, starts, ends, _picked = extents
        if not self.read_ahead:
            for f, fd in enumerate(fds):
                mine = file_of == f
                _io.will_need(fd, starts[mine], ends[mine])
            return
        running = self._prefetches
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

        self._stop_pass_read()
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        if not len(ids) or not self.shards or self._any_whole:
            return
        shard_of, local = _index.bisect_ids(self._cum, ids, path=self.path)
        touched = np.unique(shard_of)
        if len(touched) > self.max_open:
            return
        self._read_heads(touched)
        available = available_bytes()
        shard_bytes = sum(self.shards[k].raw_bytes for k in touched.tolist())
        if available is None or shard_bytes > available * _PASS_READ_FRACTION:
            return
        record = shard_bytes // max(1, sum(self.shards[k].samples for k in touched.tolist()))
        in_turn = record >= _RECORD_PER_REQUEST
        depth = self.read_ahead or _PLANNED_DEPTH
        if in_turn and self.read_ahead:
            depth = _bytes_depth(self.read_ahead, record)
        extents = self._extents_by_shard(shard_of, local)
        if extents is None:
            return
        fds, file_of, starts, ends, picked = extents
        self._pass_read = _io.read_ahead_extents(fds, file_of, starts, ends, depth, _PLANNED_GAP,
                                                 ranks=picked if in_turn else None)

    def _pass_read_ended(self) -> None:
        """The announced pass's records are cached: its shards cold when opened are read as
        cached ones from now on (through the mapping, or value by value), where a planned
        request per batch costs a system call per coalesced range."""
        self._pass_read.close()
        self._pass_read = None
        attached = self.__dict__.get("_attached")
        for k, sh in list(self._maps.items()):
            if sh.cold:
                sh.cold = False
                if attached is not None and attached[k]:
                    self._detach(k)
                    self._attach(k, sh)

    def _extents_by_shard(self, shard_of: np.ndarray, local: np.ndarray):
        """The records of the samples at ``local`` in shards ``shard_of`` that lie in
        shards cold when opened: ``(fds, file_of, starts, ends, picked)``, ``picked`` the
        position of each record's sample among those asked; None when there is none, or
        when they touch more shards than may be open at once (opening them would close
        shards a batch reads)."""
        # one stable sort groups the samples by shard, each shard's in asked order
        order = np.argsort(shard_of, kind="stable")
        touched, first = np.unique(shard_of[order], return_index=True)
        if len(touched) > self.max_open:
            return None
        bounds = np.append(first, len(shard_of)).tolist()
        fds, file_of, starts, ends, picked = [], [], [], [], []
        for j, k in enumerate(touched.tolist()):
            if k in self._mem or (k in self._maps and not self._maps[k].cold):
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
                if k in self._maps or k in self._mem:
                    continue
                info = self.shards[k]
                try:
                    fds.append(os.open(os.path.join(self.directory, info.file_basename), os.O_RDONLY))
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
            sh = self._shard(k)
            if not sh.cold:
                return None
            _lidx, lo, hi = sh.extents(lidx)
        except HpcioError:
            return None
        return sh.mapped.fd, lo, hi

    def _stop_prefetches(self) -> None:
        while self._prefetches:
            self._prefetches.popleft().close()
        self._stop_pass_read()

    def _stop_pass_read(self) -> None:
        if self._pass_read is not None:
            self._pass_read.close()
        self._pass_read = None

    def _report_bad_record(self, i: int, cols: list[int]):
        """Raise for sample ``i``, which a compiled kernel refused: the general path names
        the file, byte offset and sample and the exact fault."""
        self._read_columns(np.array([i], np.int64), cols)
        raise CorruptShardError("malformed record", path=self.path, sample=i)

    def _record_table(self, ids: np.ndarray) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
        """Where the records of samples ``ids`` lie, for the compiled column kernels:
        ``(bufs, buf_of, starts, ends)``, record j being ``bufs[buf_of[j]][starts[j]:ends[j]]``
        (shards compressed per sample are decompressed into a buffer of their own)."""
        m = len(ids)
        bufs, buf_of = [], np.empty(m, np.int32)
        starts, ends = np.empty(m, np.int64), np.empty(m, np.int64)
        groups, order = self._shard_groups(ids) if m else ([], None)
        budget = _Budget(self.limit)
        for g, (k, lidx, a, b) in enumerate(groups):
            sh, lidx, lo, hi = self._ranges(k, lidx)
            codec = sh.info.compression
            if codec is None or not codec.per_sample:
                # a view of our own keeps the map alive if the shard is closed meanwhile
                buf = memoryview(sh.buf)
            else:
                buf, pos = self._records(sh, lo, hi, lidx, budget)
                lo, hi = pos[:-1], pos[1:]
            where = slice(a, b) if order is None else order[a:b]
            bufs.append(buf)
            buf_of[where] = g
            starts[where] = lo
            ends[where] = hi
        return bufs, buf_of, starts, ends

    def _read_columns(self, indices, cols: list[int], as_samples: bool = False) -> list | None:
        """Column value lists for samples ``indices`` (non-negative, in range), in order;
        with ``as_samples``, the list of sample dicts instead.

        Records are grouped by shard (one offset lookup and one batch decompression per
        shard).  Uncompressed and decompressed-in-memory shards are sliced in place (one
        copy per value); when a batch touches many shards with few records each, the
        records are first gathered into one buffer so the slicing runs once.
        """
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        m = len(ids)
        if m == 0:
            return None
        if self._batch_table() is not None:
            values = self._columns_across_shards(ids, cols, as_samples)
            if values is not None:
                return values
        groups, order = self._shard_groups(ids)
        budget = _Budget(self.limit)
        if _gathers(m, len(groups)):
            values = self._columns_gathered([(k, lidx) for k, lidx, _a, _b in groups], cols, as_samples, budget)
        else:
            per_group = [self._columns_of(k, lidx, cols, as_samples, budget) for k, lidx, _a, _b in groups]
            if len(per_group) == 1:
                values = per_group[0]
            elif as_samples:
                values = list(chain.from_iterable(per_group))
            else:
                values = [list(chain.from_iterable(g[c] for g in per_group)) for c in range(len(cols))]
        if order is not None:
            inv = inverse_permutation(order).tolist()
            if as_samples:
                values = [values[j] for j in inv]
            else:
                values = [[col[j] for j in inv] for col in values]
        return values

    # --- one compiled read of a batch across shards ---------------------------------------
    def _batch_table(self):
        """The ShardTable of the open shards, or None when batches are read shard by shard:
        records compressed one by one (decompressed per shard)."""
        table = self.__dict__.get("_table", False)
        if table is False:
            from ..._core import _io

            table = None if self._any_per_sample or not self.shards else _io.ShardTable(len(self.shards))
            self._table = table
            self._attached = np.zeros(len(self.shards), bool)
            self._read_by_value = np.zeros(len(self.shards), bool)
            self._uncached = np.zeros(len(self.shards), bool)
            self._in_memory = self.cache_dir is None and self._any_whole
        return table

    def _attach(self, k: int, sh: _OpenShard) -> None:
        """Enter a newly opened shard in the batch table, choosing how batches read it."""
        table = self._batch_table()
        if table is None:
            return
        planned = by_value = uncached = False
        if sh.mapped is not None and self.read_path != "map":
            cached = self.read_path != "planned" and not sh.cold
            uncached = not cached
            planned = not cached or sh.pread_values
            # cached large records: each value read once, straight into its bytes object,
            # not gathered into fresh memory first and copied out again
            by_value = cached and self.read_path == "auto" and _large_records(sh.info)
        table.attach(k, sh.buf, sh.n, sh.mapped.fd if sh.mapped is not None else -1, sh.path, planned)
        self._attached[k] = True
        self._read_by_value[k] = by_value
        self._uncached[k] = uncached

    def _detach(self, k: int) -> None:
        if self.__dict__.get("_table"):
            self._table.detach(k)
            self._attached[k] = self._read_by_value[k] = self._uncached[k] = False

    def _columns_across_shards(self, ids: np.ndarray, cols: list[int], as_samples: bool) -> list | None:
        """:meth:`_read_columns` in one compiled read whatever the number of shards the
        batch touches: the records located, size-checked and copied (or read as planned
        requests) back to back in request order, then sliced once.  None when the batch
        touches more shards than may be open at once, or, with ``zero_copy``, when every
        shard it touches was cached when opened and the batch is not gathered
        (:func:`_gathers`): its values then view the shards' own pages.  Otherwise
        zero-copy values view what one read brought in (the batch's buffer, or each
        value's own): one copy, where copied values take two."""
        from ..._core import _index

        shard_of, local = _index.bisect_ids(self._cum, ids, path=self.path)
        touched = np.unique(shard_of)
        if not self._open_all(touched):
            return None
        if self.zero_copy and not self._uncached[touched].any() and not _gathers(len(ids), len(touched)):
            return None
        shrunk = self._table.shrunk(touched)
        if shrunk is not None:
            k, size = shrunk
            raise ShardChangedError(
                f"shard shrank to {size} bytes while open ({self.shards[k].raw_bytes} bytes when opened): "
                "it was truncated or rewritten in place under the reader; reopen the dataset",
                path=self._shard_path(k), offset=size, sample=int(ids[np.argmax(shard_of == k)]))
        starts, ends = self._table.extents(shard_of, local)
        if self._read_by_value[touched].all():
            samples = self._samples_by_value(cols, touched, shard_of, starts, ends)
            if samples is not None:
                names = [self._layout.names[c] for c in cols]
                return samples if as_samples else [[s[name] for s in samples] for name in names]
        try:
            buf, pos = self._table.read(shard_of, starts, ends, _PLANNED_DEPTH, _PLANNED_GAP)
        except HpcioError as exc:
            item = getattr(exc, "batch_item", None)
            if item is None:
                raise
            raise _relocated(exc, int(ids[item])) from None
        pos = pos.astype(np.int64, copy=False)

        def locate(j):
            k = int(shard_of[j])
            sh = self._shard(k)
            return sh.path, int(starts[j]) if sh.in_file else None, int(ids[j])

        decode = self._layout.samples if as_samples else self._layout.columns
        return decode(buf, pos[:-1], pos[1:], cols, self.decode_images, locate, self.zero_copy)

    def _samples_by_value(self, cols, touched, shard_of, starts, ends) -> list | None:
        """The samples of records ``[starts[j], ends[j])`` of shards ``shard_of[j]``, all cached
        large records, each value read with ``pread`` into its own object: one copy where
        gathering the batch first takes two, the first into fresh pages.  None when the
        kernel cannot build a selected column or a record is bad (the gathered read then
        builds or reports it)."""
        if not self._layout.direct(cols, self.decode_images, self.zero_copy):
            return None
        shards = [self._maps[k] for k in touched.tolist()]
        fds = [sh.read_fd() for sh in shards]
        if None in fds:
            return None
        file_of = np.searchsorted(touched, shard_of).astype(np.int32)
        lay = self._layout
        out, _bad = _records.mds_samples_pread_files(
            np.array(fds, np.int32), [sh.buf for sh in shards], file_of, starts.astype(np.int64, copy=False),
            ends.astype(np.int64, copy=False), lay._names_t, lay._sizes_t,
            lay._direct_kinds(cols, self.decode_images, self.zero_copy), tuple(cols), orjson.loads)
        return out

    def _open_all(self, touched: np.ndarray) -> bool:
        """Open the shards ``touched`` that are not open, keeping those that are: False
        when they are more than may be open at once."""
        missing = touched[~self._attached[touched]]
        if not len(missing):
            return True
        caches = (self._maps, self._mem)
        if len(touched) > (min(self.max_open, self.max_decompressed) if self._in_memory else self.max_open):
            return False
        for k in touched.tolist():  # the most recently used: not evicted for the missing
            for cache in caches:
                if k in cache:
                    cache.move_to_end(k)
        for k in missing.tolist():
            self._shard(k)
        return bool(self._attached[touched].all())

    def _shard_path(self, k: int) -> str:
        return os.path.join(self.directory, self.shards[k].file_basename)

    def _shard_groups(self, ids: np.ndarray) -> tuple[list, np.ndarray | None]:
        """Samples ``ids`` (int64, non-empty) grouped by shard: ``(groups, order)``.

        ``groups`` lists ``(shard, local indices, a, b)`` in shard order; the group holds
        the requested samples ``order[a:b]`` (positions ``a..b`` when ``order`` is None,
        which means the request lies in one shard and keeps its order).
        """
        from ..._core import _index

        m = len(ids)
        if len(self.shards) == 1:
            shard_of = np.zeros(m, np.int64)
            lo_id, hi_id = int(ids.min()), int(ids.max())
            if lo_id < 0 or hi_id >= self._total:
                raise IndexOutOfRangeError(
                    f"index {lo_id if lo_id < 0 else hi_id} out of range for a dataset of "
                    f"{self._total} samples", path=self.path,
                )
            local = ids
        else:
            shard_of, local = _index.bisect_ids(self._cum, ids, path=self.path)
            local = local.astype(np.int64, copy=False)
        first = int(shard_of[0])
        if (shard_of == first).all():
            return [(first, local, 0, m)], None
        order = np.lexsort((local, shard_of))
        shard_of, local = shard_of[order], local[order]
        cuts = np.flatnonzero(np.diff(shard_of)) + 1
        bounds = [0, *cuts.tolist(), m]
        groups = [(int(shard_of[a]), local[a:b], a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        return groups, order

    def _ranges(self, k: int, lidx: np.ndarray):
        from ..._core import _io

        sh = self._shard(k)
        lidx, starts, ends = sh.extents(lidx)
        if sh.cold:
            _io.will_need(sh.mapped.fd, starts, ends)
        return sh, lidx, starts, ends

    def _columns_of(self, k: int, lidx: np.ndarray, cols: list[int], as_samples: bool = False,
                    budget: _Budget | None = None) -> list:
        """Columns (or, with ``as_samples``, sample dicts) of shard ``k``'s records
        ``lidx``, sliced in place where possible; decompression draws on ``budget`` (the
        read's, or one of its own)."""
        sh, lidx, starts, ends = self._ranges(k, lidx)

        def locate(j):
            return sh.path, int(starts[j]) if sh.in_file else None, sh.base + int(lidx[j])

        codec = sh.info.compression
        fd = None
        if codec is None or not codec.per_sample:
            buf, lo, hi = sh.buf, starts, ends
            if sh.pread_values:
                fd = sh.read_fd()
        else:
            buf, pos = self._records(sh, starts, ends, lidx, budget or _Budget(self.limit))
            pos = pos.astype(np.int64, copy=False)
            lo, hi = pos[:-1], pos[1:]
        if as_samples:
            return self._layout.samples(buf, lo, hi, cols, self.decode_images, locate, self.zero_copy, fd)
        if fd is not None and cols and self._layout.direct(cols, self.decode_images, self.zero_copy):
            # read, not faulted in through the mapping (see _LARGE_RECORD), then transposed
            samples = self._layout.samples(buf, lo, hi, cols, self.decode_images, locate, self.zero_copy, fd)
            return [[s[name] for s in samples] for name in (self._layout.names[c] for c in cols)]
        return self._layout.columns(buf, lo, hi, cols, self.decode_images, locate, self.zero_copy)

    def _columns_gathered(self, groups, cols: list[int], as_samples: bool, budget: _Budget) -> list:
        """Columns of records spread thinly over many shards: gather, then slice once."""
        parts = []
        for k, lidx in groups:
            sh, lidx, starts, ends = self._ranges(k, lidx)
            data, pos = self._records(sh, starts, ends, lidx, budget)
            parts.append((sh, data, pos, starts, lidx))
        buf = b"".join(p[1] for p in parts)
        shifts = np.cumsum([0] + [int(p[2][-1]) for p in parts[:-1]])
        pos = np.concatenate(
            [p[2][:-1].astype(np.int64) + s for p, s in zip(parts, shifts)] + [np.array([len(buf)], np.int64)]
        )
        firsts = np.cumsum([0] + [len(p[4]) for p in parts])

        def locate(j):
            g = int(np.searchsorted(firsts, j, side="right")) - 1
            sh, _, _, file_starts, lidx = parts[g]
            r = j - int(firsts[g])
            return sh.path, int(file_starts[r]) if sh.in_file else None, sh.base + int(lidx[r])

        decode = self._layout.samples if as_samples else self._layout.columns
        return decode(buf, pos[:-1], pos[1:], cols, self.decode_images, locate, self.zero_copy)

    def _records(self, sh: _OpenShard, starts, ends, lidx, budget: _Budget):
        """The (decompressed) records ``[starts[j], ends[j])`` of ``sh`` back to back."""
        codec = sh.info.compression
        if codec is None or not codec.per_sample:
            return sh.gather(starts, ends)
        return self._decode_records(sh.buf, starts, ends, codec, sh.path,
                                    lambda j: (int(starts[j]) if sh.in_file else None, sh.base + int(lidx[j])),
                                    budget)

    def _decode_records(self, buf, starts, ends, codec: Compression, path, where, budget: _Budget):
        """Decompress sample-compressed records in one batch call (zstd, blosc2) or a loop,
        each at most ``self.limit`` bytes and all of them at most what ``budget`` has left."""
        from ..._core import _codecs

        batch = {"zstd": _codecs.zstd_decode_many, "blosc2": _codecs.blosc2_decode_many}.get(codec.codec)
        if batch is not None:
            try:
                data, pos = batch(buf, starts, ends, self.limit, self.decode_threads, path=path,
                                  batch_limit=budget.left)
            except DecompressionLimitError as exc:  # item j of the batch: name its sample
                offset, sample = where(exc.sample or 0)
                raise DecompressionLimitError(_limit_message(exc), path=path, offset=offset, sample=sample) from None
            except MemoryError as exc:
                raise OutOfMemoryError(f"out of memory decompressing {len(starts)} {codec.codec} records",
                                       path=path) from exc
            except HpcioError:
                pass  # decode one by one below to name the bad record exactly
            else:
                budget.left -= len(data)
                return data, pos
        mv = memoryview(buf)
        out = []
        for j, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
            offset, sample = where(j)
            try:
                out.append(codec.decompress(mv[a:b], min(self.limit, budget.left), path=path, offset=offset,
                                            sample=sample))
            except DecompressionLimitError as exc:
                raise DecompressionLimitError(_limit_message(exc), path=path, offset=offset, sample=sample) from None
            budget.left -= len(out[-1])
        pos = np.zeros(len(out) + 1, np.uint64)
        np.cumsum([len(o) for o in out], out=pos[1:])
        return b"".join(out), pos


class _Budget:
    """The bytes one read (a sample, a batch, a step of a scan) may still decompress:
    ``max_decoded_bytes`` bounds a batch's values together, not each on its own."""

    __slots__ = ("left",)

    def __init__(self, limit: int):
        self.left = limit


def _limit_message(exc: DecompressionLimitError) -> str:
    """The message of a limit error, its location left out, with how to raise the limit."""
    message = str(exc).rsplit(" (", 1)[0] if exc.path is not None or exc.sample is not None else str(exc)
    return f"{message}; a larger limit: max_decoded_bytes= or ${MAX_DECODED_ENV} (trusted data only)"


def _relocated(exc: HpcioError, sample: int) -> HpcioError:
    """``exc`` raised again naming ``sample`` (a batch kernel knows only the position)."""
    message = str(exc).rsplit(" (", 1)[0] if exc.path is not None or exc.offset is not None else str(exc)
    new = type(exc)(message, path=exc.path, offset=exc.offset, sample=sample)
    if getattr(exc, "errno", None) is not None:
        new.errno = exc.errno
    return new


def _column(kind, data: np.ndarray, offsets: np.ndarray):
    """A column of ``kind`` (see ``_Layout.column_kind``) from its values' bytes: a
    VarColumn, or a numpy array of fixed-size numbers."""
    return VarColumn(kind, data, offsets) if isinstance(kind, str) else data.view(kind)


def _copied_column(parts: list, kind, inverse: np.ndarray | None):
    """A column from its shards' ``(data, offsets)`` pieces, in request order."""
    from ..._core import _io

    data, offsets = _concat_values(parts)
    if inverse is not None:
        gathered, positions = _io.gather(data, offsets[inverse], offsets[inverse + 1])
        data, offsets = np.frombuffer(gathered, np.uint8), positions.view(np.int64)
    return _column(kind, data, offsets)


def _concat_values(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """One ``(data, offsets)`` column from pieces of it, each ``(data, offsets)``."""
    if len(parts) == 1:
        return parts[0]
    lengths = np.concatenate([np.diff(o) for _d, o in parts])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.concatenate([d for d, _o in parts]), offsets
