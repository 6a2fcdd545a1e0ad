"""The MDS reader: random access and sequential bulk reads of an MDS dataset.

* a sequential bulk path (``iter_range``): one buffered file per shard, records read in
  large merged ``pread`` calls and sliced into columns a batch at a time, or, for a
  mapped shard whose values have a fixed construction, samples built one at a time
  straight from the mapping;
* a random-access path (``read``, and the batch reads of :mod:`.batches`): global index
  -> shard by bisection, memory-mapped shards kept in a bounded LRU, one offset lookup,
  one gather and one batch decompression per shard touched by a batch.

Whole-shard compressed datasets (``zstd``, ``gz``, ...) are decompressed into memory, or
into a ``cache_dir`` the caller names; the reader never writes beside the dataset.
"""

from __future__ import annotations

import bisect
import functools
import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain
from typing import cast

import numpy as np

from ... import codecs as _codec_table
from ...errors import CorruptShardError, InvalidArgumentError, ShardNotFoundError, UnsupportedValueError
from .. import base
from . import columns as _columns
from .batches import Budget, decode, decode_records, decode_slice, fetch, locate
from .cache import READ_PATHS, ShardCache
from .compact_index import COMPACT_NAME, _CompactIndex, _load_compact
from .compression import _hash_functions, parse_compression
from .index import INDEX_NAME, _dataset_dir, _load_index, _ShardInfo
from .layout import _Layout
from .prefetch import _MAX_DEPTH, Prefetcher
from .shards import _auto_read_ahead, _check_header, _large_records, _ReadAheads

__all__ = ["Reader"]

# Samples decoded per step of the sequential path where they are not built one at a
# time (Reader._record_samples): small enough that a batch's record bytes and new value
# objects stay in cache while the caller consumes them.  Large records (read value by
# value, see _LARGE_RECORD) take shorter steps, so that a fresh process reuses the
# previous step's memory instead of growing its heap: 64 when their binary values are
# viewed or not selected, 16 when those values are copied.
_SCAN_BATCH = 256
_LARGE_STEP = 64
_LARGE_COPY_STEP = 16
_PAIR = struct.Struct("<2I")
# Samples a dataset may declare before its shard files are looked at: arrays of that many
# ids (a shuffle's permutation) take at most 128 MiB.
_UNCHECKED_SAMPLES = 1 << 24
# The most a whole-shard codec is taken to shrink a shard (zstd's run-length blocks: 4
# bytes per 128 KiB).
_MAX_RATIO = 1 << 15
# The keys of a shard configuration that give its columns, in _Layout's order.
_COLUMN_KEYS = ("column_names", "column_encodings", "column_sizes")


class Reader(base.Reader):
    """Random-access and sequential reader of an MDS dataset.

    A batch read (``read_many``, ``read_field``, ``read_columns``, ``field_lengths``)
    locates its samples once, fetches their records from the shards of ``cache``
    (:mod:`~hpcio.formats.mds.cache`, :func:`~hpcio.formats.mds.batches.fetch`) and
    decodes them (:func:`~hpcio.formats.mds.batches.decode`, :mod:`~hpcio.formats.mds.columns`).

    Parameters
    ----------
    path
        The dataset directory (or its ``index.json``).
    cache_dir
        Where to decompress whole-shard compressed shards (``shard.NNNNN.mds.zstd``, ...);
        by default they are decompressed into memory.  Never the dataset directory
        unless the caller names it.
    max_open
        Most memory-mapped shards kept open at once (least recently used are closed).
        Each holds a descriptor; when the process runs out of descriptors, the reader
        closes its older half and keeps to the lower bound.  A shuffled batch touching
        more shards than this is read shard by shard, reopening them.
    max_decompressed
        Most whole-shard decompressed shards kept in memory at once.
    decode_images
        Return PIL images for ``jpeg``/``png``/``pil`` columns instead of their bytes.
    allow_pickle
        Read ``pkl`` columns (unpickling runs code from the file: trusted data only).
    validate_hashes
        ``True`` (the fastest hash the index lists) or an algorithm name: check each
        shard file against ``index.json`` when it is first opened.
    decode_threads
        Threads the C kernels use to decompress one batch of sample-compressed records.
    max_decoded_bytes
        Most bytes one read may decompress: one record or shard, or the records of one
        batch together, checked against their declared sizes before allocating (a byte
        size; default ``$HPCIO_MAX_DECODED_BYTES``, else 1 GiB).  The reader's ``limit``.
    zero_copy
        Return ``bytes`` (and undecoded image) values as read-only memoryviews instead
        of copies: of the mapped shard, or of the batch's buffer where its records were
        read as planned requests or decompressed.  Fastest for large binary values, but
        memoryviews cannot be pickled (e.g. sent back by DataLoader workers) and keep
        their shard mapped, or their batch's buffer, alive.
    read_path
        How a batch (``get_batch``, a shuffled pass) reads the records of a mapped shard:
        ``"map"`` copies them from the mapping, ``"planned"`` reads them from the file as
        planned requests (sorted by file and offset, neighbours coalesced, several in
        flight: for cold or high-latency storage, where the mapping would take its page
        faults one at a time), ``"auto"`` (default) decides per shard when it is opened:
        the mapping when at least 90% of the shard's file is in the page cache and its
        records are not read value by value (see ``_OpenShard.pread_values``), else
        planned reads.  The rule looks at the shard's own file (``mincore``), nothing else.
    read_ahead
        Reads of 1 MiB a pass in storage order (iteration, ``iter_range``) keeps in flight
        to bring the shard it reads and the next into the page cache, on threads of its
        own that end with the shard; parts already cached are skipped.  ``"auto"``
        (default): 8 on filesystems whose kernel read-ahead keeps one request in flight
        (FUSE), where each request's latency would otherwise bound the pass, else 0,
        leaving block devices, Lustre and Spectrum Scale to their own deeper read-ahead.
        A number from 0 to 64 applies everywhere.  :meth:`prefetch` keeps as many bytes
        in flight for a batch's records, one request per record or run of neighbours, up
        to 64 requests (0: ``POSIX_FADV_WILLNEED`` instead).

    Attributes
    ----------
    compact
        Whether the shards come from the compact index ``index.hpcio``
        (:mod:`hpcio.formats.mds.compact_index`): then no shard is opened or stat'ed
        until it is read, and each is checked against its entry when first opened.
        Otherwise they come from ``index.json``, whose counts are checked against the
        shard files (each shard before the one read, once).
    """

    def __init__(self, path, *, cache_dir=None, max_open: int = 1024, max_decompressed: int = 8,
                 decode_images: bool = False, allow_pickle: bool = False,
                 validate_hashes: bool | str = False, decode_threads: int = 1,
                 max_decoded_bytes: int | str | None = None, zero_copy: bool = False,
                 read_path: str = "auto", read_ahead: int | str = "auto"):
        from ..._core import _index  # noqa: F401  (a broken build fails here, on open)

        self.directory = _dataset_dir(path)
        super().__init__(self.directory)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.max_open = max(1, int(max_open))
        self.max_decompressed = max(1, int(max_decompressed))
        self.decode_images = decode_images
        self.zero_copy = zero_copy
        self.decode_threads = decode_threads
        self.limit = _codec_table.max_decoded_bytes(max_decoded_bytes)
        if isinstance(validate_hashes, str) and validate_hashes not in _hash_functions():
            raise InvalidArgumentError(
                f"validate_hashes={validate_hashes!r} is not a known hash (known: {', '.join(sorted(_hash_functions()))})"
            )
        self.validate_hashes = validate_hashes
        compact = _load_compact(self.directory)
        # A compact index whose digests match vouches for every count: each shard is
        # checked against its entry only when it is opened.  index.json alone is not
        # protected, so its counts are checked against the files (see _check_counts_before).
        self.compact = compact is not None
        self.shards: list[_ShardInfo] | _CompactIndex
        if compact is None:
            self.shards = _load_index(self.directory)
            _check_counts_fit_files(self.directory, self.shards)
            counts = [s.samples for s in self.shards]
            self._cum = np.zeros(len(counts) + 1, np.uint64)
            np.cumsum(counts, out=self._cum[1:])
            self._raw_bytes = np.array([s.raw_bytes for s in self.shards], np.int64)
            codecs = [s.compression for s in self.shards]
            counted = 0  # shards before this one have had their counts checked
        else:
            self.shards = compact
            self._cum = np.array(compact.cum, np.uint64)
            self._raw_bytes = np.array(compact.raw_bytes, np.int64)
            codecs = [parse_compression(c.get("compression")) for c in compact.configs]
            counted = len(compact)
        any_whole = any(c is not None and not c.per_sample for c in codecs)
        self._any_per_sample = any(c is not None and c.per_sample for c in codecs)
        self._cum_list = self._cum.tolist()
        self._total = int(self._cum[-1])
        self._layout = self._common_layout()
        self.fields = list(self._layout.names) if self._layout else []
        self.columns = dict(zip(self._layout.names, self._layout.encodings)) if self._layout else {}
        unsafe = [n for n, e in self.columns.items() if e == "pkl"]
        if unsafe and not allow_pickle:
            raise UnsupportedValueError(
                f"column {unsafe[0]!r} uses the pkl encoding; reading it unpickles, which runs "
                "code from the file: pass allow_pickle=True only for data you trust",
                path=os.path.join(self.directory, INDEX_NAME),
            )
        if read_path not in READ_PATHS:
            raise InvalidArgumentError(f"read_path must be one of {', '.join(READ_PATHS)}, got {read_path!r}")
        self.read_path = read_path
        if read_ahead != "auto" and (isinstance(read_ahead, bool) or not isinstance(read_ahead, int)
                                     or not 0 <= read_ahead <= _MAX_DEPTH):
            raise InvalidArgumentError(f"read_ahead must be 'auto' or a number of reads from 0 to {_MAX_DEPTH}, "
                                       f"got {read_ahead!r}")
        self.read_ahead = _auto_read_ahead(self.directory) if isinstance(read_ahead, str) else read_ahead
        self.cache = ShardCache(self.directory, self.shards, self._cum, compact=self.compact, counted=counted,
                                any_whole=any_whole, any_per_sample=self._any_per_sample,
                                cache_dir=self.cache_dir, max_open=self.max_open,
                                max_decompressed=self.max_decompressed, validate_hashes=validate_hashes,
                                limit=self.limit, read_path=read_path)
        self.prefetcher = Prefetcher(self.cache, self.read_ahead)

    def _common_layout(self) -> _Layout | None:
        if not self.shards:
            return None
        if self.compact:
            return self._compact_layout()
        first = self.shards[0].columns
        for s in self.shards[1:]:
            if s.columns != first:
                raise CorruptShardError(
                    f"shard entry {s.position} has columns {list(s.columns[0])} "
                    f"({list(s.columns[1])}); shard entry 0 has {list(first[0])} ({list(first[1])})",
                    path=os.path.join(self.directory, INDEX_NAME),
                )
        return _Layout(*first, path=os.path.join(self.directory, INDEX_NAME))

    def _compact_layout(self) -> _Layout:
        """The columns every configuration of the compact index names alike."""
        index = cast(_CompactIndex, self.shards)
        configs = index.configs
        first = tuple(tuple(configs[0][key]) for key in _COLUMN_KEYS)
        for j, config in enumerate(configs[1:], 1):
            columns = tuple(tuple(config[key]) for key in _COLUMN_KEYS)
            if columns != first:
                raise CorruptShardError(
                    f"configuration {j} of {COMPACT_NAME} has columns {list(columns[0])} ({list(columns[1])}); "
                    f"configuration 0 has {list(first[0])} ({list(first[1])})", path=index.path,
                )
        return _Layout(*first, path=index.path)

    def shard_sizes(self) -> list[int]:
        return np.diff(self._cum).tolist()

    def __len__(self) -> int:
        return self._total

    def mean_sample_bytes(self) -> float | None:
        return int(self._raw_bytes.sum()) / self._total if self._total else None

    @functools.cached_property
    def _views_only(self) -> bool:
        """Zero-copy reads whose large values view the mapped or in-memory shard: a batch
        allocates no memory for them, so its size need not be bounded in bytes."""
        return self.zero_copy and not self._any_per_sample

    @functools.cached_property
    def batch_size(self) -> int:
        return base.DEFAULT_BATCH if self._views_only else super().batch_size

    # --- batches ---------------------------------------------------------------------
    def read_many(self, indices, fields: Sequence[str] | None = None) -> list:
        cols = self._layout.select(fields, self.path) if self._layout else []
        samples = self._read(indices, cols, as_samples=True)
        return [] if samples is None else samples

    def read_field(self, indices, field: str) -> list:
        values = self._read(indices, self._layout.select([field], self.path) if self._layout else [])
        return [] if values is None else values[0]

    def _read(self, indices, cols: list[int], as_samples: bool = False) -> list | None:
        """Column value lists of samples ``indices`` (with ``as_samples``, the list of
        sample dicts), in order; None for no sample."""
        located = locate(self.cache, indices)
        if not len(located.ids):
            return None
        batch = fetch(self.cache, located, zero_copy=self.zero_copy, threads=self.decode_threads)
        return decode(batch, self._layout, cols, as_samples=as_samples, decode_images=self.decode_images,
                      zero_copy=self.zero_copy)

    def read_columns(self, indices, fields: Sequence[str] | None = None) -> dict:
        """Columns of samples ``indices`` (see :mod:`hpcio.columns`): numbers as numpy
        arrays, ``str``/``bytes``/``json`` columns (and undecoded images) as VarColumns
        sliced out of the records by one compiled call, other encodings as lists.  With
        ``zero_copy``, bytes columns are ViewColumns of the records where they lie."""
        cols = self._layout.select(fields, self.path) if self._layout else []
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        located = locate(self.cache, ids) if len(ids) else None
        return _columns.read_columns(self.cache, self._layout, located, cols, decode_images=self.decode_images,
                                     zero_copy=self.zero_copy, threads=self.decode_threads)

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
        return _columns.field_lengths(self.cache, self._layout, locate(self.cache, ids), c, kind,
                                      decode_images=self.decode_images, threads=self.decode_threads)

    def prefetch(self, indices) -> None:
        """Start reading the records of samples ``indices`` in the background (see
        :meth:`Prefetcher.prefetch <hpcio.formats.mds.prefetch.Prefetcher.prefetch>`)."""
        self.prefetcher.prefetch(indices)

    def will_read(self, indices) -> None:
        """Announce a pass over samples ``indices`` in this order (see
        :meth:`Prefetcher.will_read <hpcio.formats.mds.prefetch.Prefetcher.will_read>`)."""
        self.prefetcher.will_read(indices)

    # --- reading one sample -------------------------------------------------------------
    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        i = self.check_index(int(i))
        k = bisect.bisect_right(self._cum_list, i) - 1
        sh = self.cache.get(k)
        begin, end = _PAIR.unpack_from(sh.buf, 4 + 4 * (i - sh.base))
        rec = sh.buf[begin:end]
        codec = sh.info.compression
        where = lambda: (sh.path, begin if sh.in_file else None, i)  # noqa: E731
        if codec is not None and codec.per_sample:
            rec = memoryview(codec.decompress(rec, self.limit, path=sh.path,
                                              offset=begin if sh.in_file else None, sample=i))
        return self._layout.record(rec, self._layout.select(fields, self.path), self.decode_images, where)

    # --- sequential bulk path -----------------------------------------------------------
    def iter_range(self, start: int = 0, stop: int | None = None,
                   fields: Sequence[str] | None = None) -> Iterator[Mapping]:
        stop = self._total if stop is None else min(stop, self._total)
        if start >= stop:
            return iter(())
        cols = self._layout.select(fields, self.path)
        # A flat chain of each shard's runs of samples: no generator frame is resumed
        # per sample, only per run.
        return chain.from_iterable(self._runs(start, stop, cols))

    def _runs(self, start: int, stop: int, cols: list[int]) -> Iterator[Iterable[dict]]:
        k = bisect.bisect_right(self._cum_list, start) - 1
        ahead = _ReadAheads(self.read_ahead)
        try:
            while k < len(self.shards) and self._cum_list[k] < stop:
                lo = max(start, self._cum_list[k]) - self._cum_list[k]
                hi = min(stop, self._cum_list[k + 1]) - self._cum_list[k]
                if hi > lo:
                    if self.read_ahead:
                        last = min(k + 2, len(self.shards)) if self._cum_list[k + 1] < stop else k + 1
                        ahead.ahead_of(k, [self.cache.file(info) for info in self.shards[k:last]])
                    yield from self._scan_shard(k, lo, hi, cols)
                k += 1
        finally:
            ahead.close()

    def _scan_shard(self, k: int, lo: int, hi: int, cols: list[int]) -> Iterator[Iterable[dict]]:
        """Shard ``k``'s samples ``lo..hi`` as dicts, in runs: a buffer-full at a time, or
        all of them from one iterator that builds each sample as it is asked for."""
        info = self.shards[k]
        large = _large_records(info)
        # In memory or mapped already (zero-copy values must not view a reused read
        # buffer; large values are copied once from the map instead of twice through
        # the read buffer): slice batches straight out of the shard.
        if info.whole_shard or self.zero_copy or large or k in self.cache.maps:
            return self._scan_in_place(k, lo, hi, cols, large)
        return self._scan_file(k, lo, hi, cols)

    def _scan_in_place(self, k: int, lo: int, hi: int, cols: list[int], large: bool) -> Iterator[Iterable[dict]]:
        """Samples of a shard held in memory or mapped: built one at a time where the
        selected columns allow, else sliced a step of records at a time (shorter steps
        for large records, so that a pass reuses the memory of the previous step)."""
        one_by_one = self._record_samples(k, lo, hi, cols)
        if one_by_one is not None:
            yield one_by_one
            return
        if not large:
            step = _SCAN_BATCH
        elif self._views_only or not self._layout.binary(cols):
            step = _LARGE_STEP
        else:
            step = _LARGE_COPY_STEP
        for a in range(lo, hi, step):
            b = min(a + step, hi)
            sh, lidx, starts, ends = self.cache.extents(k, np.arange(a, b, dtype=np.int64))
            yield self._shard_samples(sh, lidx, starts, ends, cols)

    def _scan_file(self, k: int, lo: int, hi: int, cols: list[int]) -> Iterator[list[dict]]:
        """Samples of a shard read through one buffered file: records come in merged
        ``pread`` calls a buffer-full at a time, the buffer reused for the next one."""
        from ..._core import _index, _io

        info = self.shards[k]
        base_id = self._cum_list[k]
        path = self.cache.file(info)
        if self.validate_hashes:
            self.cache.check_hash(info, path)
        with _io.ShardFile(path) as f:
            size = f.size
            n = _check_header(info, path, size, f.pread, base_id)
            starts, ends = _index.offset_ranges(f.pread(4, 4 * (n + 1)), 4, n, size, None,
                                                path=path, table_offset=4, sample_base=base_id)
            starts, ends = starts[lo:hi], ends[lo:hi]
            j = 0
            while j < len(starts):
                view, pos, count = f.read_records(starts[j:], ends[j:])

                def where(r, first=j):
                    return int(starts[first + r]), base_id + lo + first + r

                yield from self._buffer_samples(info, path, view, pos, count, where, cols)
                j += count

    def _buffer_samples(self, info: _ShardInfo, path: str, buf, pos, count: int, where,
                        cols: list[int]) -> Iterator[list[dict]]:
        """The ``count`` records of a read buffer (``pos`` their bounds, ``where(r)`` the
        file offset and sample of record ``r``) as sample dicts, decompressed if need be.
        They are decoded a slice at a time: the values of a small batch are created and
        consumed while the record bytes are still in cache."""
        codec = info.compression
        if codec is not None and codec.per_sample:
            buf, pos = decode_records(buf, pos[:-1], pos[1:], codec, path, self.limit, self.decode_threads,
                                      Budget(self.limit), where)
        pos = np.asarray(pos, dtype=np.int64)
        for a in range(0, count, _SCAN_BATCH):
            b = min(a + _SCAN_BATCH, count)

            def locate(r, a=a):
                offset, sample = where(a + r)
                return path, offset, sample

            yield self._layout.samples(buf, pos[a:b], pos[a + 1 : b + 1], cols, self.decode_images, locate)

    def _record_samples(self, k: int, lo: int, hi: int, cols: list[int]):
        """Shard ``k``'s samples ``lo..hi`` built one at a time from its mapped (or
        decompressed) bytes (:meth:`_Layout.sample_iterator`), or None when a selected
        column needs the general decoder, records are compressed one by one, or the
        records are read with ``pread`` (small cached pages, see _LARGE_RECORD).

        One sample at a time keeps a pass's memory to one sample's, which a fresh process
        then reuses instead of growing its heap.
        """
        codec = self.shards[k].compression
        if (codec is not None and codec.per_sample) or not self._layout.direct(cols, self.decode_images,
                                                                                 self.zero_copy):
            return None
        sh, _lidx, starts, ends = self.cache.extents(k, np.arange(lo, hi, dtype=np.int64))
        if sh.pread_values:
            return None

        def locate(j):
            return sh.path, int(starts[j]) if sh.in_file else None, sh.base + lo + j

        # our own view of the shard keeps the map alive if the shard is evicted meanwhile
        return self._layout.sample_iterator(memoryview(sh.buf), starts, ends, cols, self.decode_images,
                                            locate, self.zero_copy)

    def _shard_samples(self, sh, lidx, starts, ends, cols: list[int]) -> list[dict]:
        """The records ``[starts[j], ends[j])`` of open shard ``sh`` (its records ``lidx``)
        as sample dicts, decompressed if need be."""
        def where(j):
            return sh.path, int(starts[j]) if sh.in_file else None, sh.base + int(lidx[j])

        codec = sh.info.compression
        fd = None
        if codec is None or not codec.per_sample:
            buf, lo, hi = sh.buf, starts, ends
            if sh.pread_values:
                fd = sh.read_fd()
        else:
            buf, pos = decode_records(sh.buf, starts, ends, codec, sh.path, self.limit, self.decode_threads,
                                      Budget(self.limit),
                                      lambda j: (int(starts[j]) if sh.in_file else None, sh.base + int(lidx[j])))
            pos = pos.astype(np.int64, copy=False)
            lo, hi = pos[:-1], pos[1:]
        return decode_slice(self._layout, buf, lo, hi, cols, True, self.decode_images, self.zero_copy, fd, where)

    def drop_pages(self) -> None:
        """Close the mapped shards (a later read maps its shard again)."""
        self.cache.drop_pages()

    def files_of_shards(self) -> list[list[base.ShardFile]]:
        """Each shard's one file, as stored (whole-shard compressed: the compressed file)."""
        out = []
        for k in range(len(self.shards)):
            info = self.shards[k]
            size, hashes = ((info.zip_bytes, info.zip_hashes) if info.zip_basename
                            else (info.raw_bytes, info.raw_hashes))
            out.append([base.ShardFile(os.path.join(self.directory, info.file_basename), size, hashes)])
        return out

    def release_shards(self, shards: Sequence[int]) -> None:
        self.cache.release(shards)

    def close(self) -> None:
        self.prefetcher.stop()
        self.cache.close()
        if self.compact:
            cast(_CompactIndex, self.shards).close()

    def __repr__(self):
        return f"<hpcio.formats.mds.Reader {self.directory!r} n={len(self)} shards={len(self.shards)}>"


def _check_counts_fit_files(directory: str, shards: list[_ShardInfo]) -> None:
    """Check index.json's sample counts against the sizes of the shard files before any
    array of that length (a shuffle's permutation) is allocated: a sample costs at least
    its 4-byte offset, and a whole-shard compressed file shrank its shard at most
    ``_MAX_RATIO`` times.  The largest counts are checked, one ``stat`` each, until the
    rest sum to at most ``_UNCHECKED_SAMPLES``: a small dataset opens without any."""
    rest = sum(s.samples for s in shards)
    for info in sorted(shards, key=lambda s: s.samples, reverse=True):
        if rest <= _UNCHECKED_SAMPLES:
            return
        path = os.path.join(directory, info.file_basename)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise ShardNotFoundError(
                f"shard file {info.file_basename} named by {info.source} is missing", path=path
            ) from None
        room = size * _MAX_RATIO if info.whole_shard else size
        if 8 + 4 * info.samples > room:
            raise CorruptShardError(
                f"shard entry {info.position} declares {info.samples} samples; its file "
                f"{info.file_basename} of {size} bytes cannot hold more than {max(room - 8, 0) // 4}",
                path=os.path.join(directory, INDEX_NAME),
            )
        rest -= info.samples
