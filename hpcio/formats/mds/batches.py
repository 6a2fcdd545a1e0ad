"""Reading samples by index, in batches: fetch the records, then decode them.

:func:`locate` range-checks a batch's sample ids once and finds each one's shard;
:func:`fetch` brings the records of the located samples into a :class:`RecordBatch`
(buffers, and each record's start and end in its buffer), reading each shard by the
:class:`~hpcio.formats.mds.cache.ReadMode` it was attached with; :func:`decode` slices
the batch into sample dicts or columns and puts them back in the order asked for.

A batch is fetched in one compiled read across shards where the dataset has a batch
table (no shard compresses its records one by one): records copied from the mappings,
or read from the files as planned requests, back to back in request order.  Otherwise,
and for zero-copy reads of cached shards (whose values view the shards' own pages), the
records stay where they lie, shard by shard, in file order within each shard: a seek per
record costs more than the sort.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain

import numpy as np
import orjson

from ..._core import _index, _records
from ...codecs import MAX_DECODED_ENV
from ...errors import (
    CorruptShardError,
    DecompressionLimitError,
    HpcioError,
    IndexOutOfRangeError,
    OutOfMemoryError,
    ShardChangedError,
)
from ..base import inverse_permutation
from .cache import ReadMode, ShardCache
from .compression import Compression
from .layout import _Layout
from .shards import _OpenShard

__all__ = ["Budget", "Located", "RecordBatch", "decode", "fetch", "locate"]

# Planned reads of a batch (read_path "planned", or "auto" on a shard mostly not cached):
# requests in flight at once, and the gap between two records below which they are read
# as one request (a request costs more than reading a few pages it does not need).
_PLANNED_DEPTH = 8
_PLANNED_GAP = 16 << 10
# ReadMode values as plain ints: numpy compares them without looking the enum's attributes up
_PLANNED, _VALUES = int(ReadMode.PLANNED), int(ReadMode.VALUES)


def _gathers(samples: int, shards: int) -> bool:
    """Whether a batch of ``samples`` over ``shards`` shards is gathered into one buffer
    before it is sliced, rather than sliced shard by shard: many shards, few records
    each, where slicing per shard would run its Python per shard."""
    return shards > 8 and samples < 8 * shards


class Budget:
    """The bytes one read (a sample, a batch, a step of a scan) may still decompress:
    ``max_decoded_bytes`` bounds a batch's values together, not each on its own."""

    __slots__ = ("left",)

    def __init__(self, limit: int):
        self.left = limit


class Located:
    """Sample ids (int64, non-empty) with the shard (``shard_of``) and index in it
    (``local``, uint64) of each, range-checked once; ``touched`` the shards, sorted
    (``nshards`` in the dataset)."""

    __slots__ = ("ids", "shard_of", "local", "nshards", "_touched", "_groups")

    def __init__(self, ids, shard_of, local, nshards: int):
        self.ids = ids
        self.shard_of = shard_of
        self.local = local
        self.nshards = nshards
        self._touched: np.ndarray | None = None
        self._groups: tuple[list, np.ndarray | None] | None = None

    @property
    def touched(self) -> np.ndarray:
        if self._touched is None:
            self._touched = self.shard_of[:1].copy() if self.nshards == 1 else np.unique(self.shard_of)
        return self._touched

    def groups(self) -> tuple[list, np.ndarray | None]:
        """``(groups, order)``: ``groups`` lists ``(shard, local indices, a, b)`` in shard
        order, the group holding the samples asked at ``order[a:b]`` in file order
        (positions ``a..b`` when ``order`` is None: one shard, in the order asked)."""
        if self._groups is None:
            m = len(self.ids)
            first = int(self.shard_of[0])
            if self.nshards == 1 or (self.shard_of == first).all():
                self._groups = [(first, self.local, 0, m)], None
            else:
                order = np.lexsort((self.local, self.shard_of))
                shard_of, local = self.shard_of[order], self.local[order]
                cuts = np.flatnonzero(np.diff(shard_of)) + 1
                bounds = [0, *cuts.tolist(), m]
                self._groups = [(int(shard_of[a]), local[a:b], a, b) for a, b in zip(bounds[:-1], bounds[1:])], order
        return self._groups


def locate(cache: ShardCache, ids) -> Located:
    """Samples ``ids`` located in their shards: the one range check of a read."""
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    shard_of, local = _index.bisect_ids(cache.cum, ids, path=cache.directory)
    return Located(ids, shard_of, local, len(cache.shards))


class RecordBatch:
    """The records of a batch of samples and where they lie.

    ``parts`` lists ``(buffer, starts, ends, fd)``: the records, part after part, record
    ``j`` of a part being ``buffer[starts[j]:ends[j]]``, ``fd`` a descriptor to read the
    part's large values from (or None).  Record ``j`` of the batch is the sample asked
    at position ``order[j]`` (None: in the order asked); ``offsets`` (one array per part)
    give where each record lies in its shard's file.  A batch of values read one by one
    (``values``: ``(fds, shards' buffers, file of each record, starts, ends)``, file
    offsets, in the order asked) has no parts until it is ``gather``-ed into one buffer,
    for what its kernel cannot build.
    """

    __slots__ = ("located", "order", "parts", "offsets", "cache", "values", "gather", "_ids", "_shards",
                 "_offsets")

    def __init__(self, located: Located, order, parts: list, offsets: list, cache: ShardCache, *,
                 values=None, gather: Callable | None = None):
        self.located = located
        self.order = order
        self.parts = parts
        self.offsets = offsets
        self.cache = cache
        self.values = values
        self.gather = gather
        self._ids: np.ndarray | None = None
        self._shards: np.ndarray | None = None
        self._offsets: np.ndarray | None = None

    def locate(self, j: int):
        """``(path, file offset or None, sample)`` of record ``j``, for error messages."""
        if self._ids is None:
            order, located = self.order, self.located
            self._ids = located.ids if order is None else located.ids[order]
            self._shards = located.shard_of if order is None else located.shard_of[order]
            self._offsets = self.offsets[0] if len(self.offsets) == 1 else np.concatenate(self.offsets)
        k = int(self._shards[j])
        sh = self.cache.peek(k) or self.cache.get(k)
        return sh.path, int(self._offsets[j]) if sh.in_file else None, int(self._ids[j])

    def record(self, j: int):
        """``(buffer, start, end)`` of record ``j``."""
        for buf, starts, ends, _fd in self.parts:
            if j < len(starts):
                return buf, starts[j : j + 1], ends[j : j + 1]
            j -= len(starts)
        raise IndexOutOfRangeError(str(j))

    def table(self) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
        """``(buffers, buf_of, starts, ends)`` in the order asked (int32, int64, int64),
        for the compiled column kernels: record ``j`` is ``buffers[buf_of[j]][starts[j]:ends[j]]``."""
        parts = self.parts
        buffers = [p[0] for p in parts]
        if len(parts) == 1:
            buf_of = np.zeros(len(parts[0][1]), np.int32)
            starts, ends = parts[0][1].astype(np.int64, copy=False), parts[0][2].astype(np.int64, copy=False)
        else:
            buf_of = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p[1]) for p in parts])
            starts = np.concatenate([p[1].astype(np.int64, copy=False) for p in parts])
            ends = np.concatenate([p[2].astype(np.int64, copy=False) for p in parts])
        if self.order is not None:
            inverse = inverse_permutation(self.order)
            buf_of, starts, ends = buf_of[inverse], starts[inverse], ends[inverse]
        return buffers, buf_of, starts, ends


# --- fetch ------------------------------------------------------------------------------
def fetch(cache: ShardCache, located: Located, *, zero_copy: bool = False, threads: int = 1,
          in_place: bool = False) -> RecordBatch:
    """The records of the samples ``located``, decompressed where compressed one by one,
    at most ``cache.limit`` bytes in all.  ``in_place``: left in the shards' bytes
    (decompressed shard by shard), for the compiled column kernels.  With ``zero_copy``,
    a batch over cached shards also leaves them there, for its values to view."""
    table = cache.table
    if in_place or table is None:
        return _fetch_by_shard(cache, located, threads, in_place)
    touched = located.touched
    modes = cache.modes[touched]
    if not modes.all():
        if not cache.open_all(touched):
            return _fetch_by_shard(cache, located, threads, in_place)
        modes = cache.modes[touched]
    if zero_copy and not (modes == _PLANNED).any() and not _gathers(len(located.ids), len(touched)):
        return _fetch_by_shard(cache, located, threads, in_place)
    shrunk = table.shrunk(touched)
    if shrunk is not None:
        k, size = shrunk
        raise ShardChangedError(
            f"shard shrank to {size} bytes while open ({cache.shards[k].raw_bytes} bytes when opened): "
            "it was truncated or rewritten in place under the reader; reopen the dataset",
            path=cache.shard_path(k), offset=size,
            sample=int(located.ids[np.argmax(located.shard_of == k)]))
    starts, ends = table.extents(located.shard_of, located.local)
    if (modes == _VALUES).all():
        batch = _values_batch(cache, located, starts, ends)
        if batch is not None:
            return batch
    return _read_table(cache, located, starts, ends)


def _read_table(cache: ShardCache, located: Located, starts, ends) -> RecordBatch:
    """The records ``[starts[j], ends[j])`` of the located samples read by the batch
    table into one buffer, in the order asked."""
    try:
        buf, pos = cache.table.read(located.shard_of, starts, ends, _PLANNED_DEPTH, _PLANNED_GAP)
    except HpcioError as exc:
        item = getattr(exc, "batch_item", None)
        if item is None:
            raise
        raise _relocated(exc, int(located.ids[item])) from None
    pos = pos.astype(np.int64, copy=False)
    return RecordBatch(located, None, [(buf, pos[:-1], pos[1:], None)], [starts], cache)


def _values_batch(cache: ShardCache, located: Located, starts, ends) -> RecordBatch | None:
    """The located samples, all in shards of cached large records, as a batch whose values
    :func:`decode` reads one by one from the files; None when a shard has no descriptor
    left."""
    touched = located.touched
    shards = [cache.maps[k] for k in touched.tolist()]
    fds = [sh.read_fd() for sh in shards]
    if None in fds:
        return None
    file_of = np.searchsorted(touched, located.shard_of).astype(np.int32)
    return RecordBatch(located, None, [], [starts], cache, values=(fds, [sh.buf for sh in shards], file_of, starts, ends),
                       gather=lambda: _read_table(cache, located, starts, ends))


def _fetch_by_shard(cache: ShardCache, located: Located, threads: int, in_place: bool) -> RecordBatch:
    """The records shard by shard: in place (a part per shard, each shard's records in
    file order), or, over many shards with few records each or more shards than may be
    open at once, gathered into one buffer."""
    groups, order = located.groups()
    budget = Budget(cache.limit)
    gathered = not in_place and (_gathers(len(located.ids), len(groups)) or len(groups) > cache.capacity)
    parts, offsets = [], []
    for k, lidx, _a, _b in groups:
        sh, lidx, lo, hi = cache.extents(k, lidx)
        codec = sh.info.compression
        fd = None
        if codec is not None and codec.per_sample:
            buf, pos = decode_records(sh.buf, lo, hi, codec, sh.path, cache.limit, threads, budget,
                                      _where(sh, lo, lidx))
            first, last = pos[:-1], pos[1:]
        elif gathered:
            buf, pos = sh.gather(lo, hi)
            first, last = pos[:-1], pos[1:]
        else:
            # a view of our own keeps the map alive if the shard is closed meanwhile
            buf, first, last = memoryview(sh.buf), lo, hi
            if sh.pread_values and not in_place:
                fd = sh.read_fd()
        parts.append((buf, first, last, fd))
        offsets.append(lo)
    if gathered and len(parts) > 1:
        parts = [_joined(parts)]
    return RecordBatch(located, order, parts, offsets, cache)


def _joined(parts: list) -> tuple:
    """Parts, each its records back to back, joined into one."""
    shifts = np.cumsum([0] + [len(p[0]) for p in parts[:-1]], dtype=np.int64)
    starts = np.concatenate([p[1].astype(np.int64) + s for p, s in zip(parts, shifts.tolist())])
    ends = np.concatenate([p[2].astype(np.int64) + s for p, s in zip(parts, shifts.tolist())])
    return b"".join(p[0] for p in parts), starts, ends, None


def _where(sh: _OpenShard, starts, lidx):
    return lambda j: (int(starts[j]) if sh.in_file else None, sh.base + int(lidx[j]))


def decode_records(buf, starts, ends, codec: Compression, path, limit: int, threads: int, budget: Budget, where):
    """Decompress sample-compressed records in one batch call (zstd, blosc2) or a loop,
    each at most ``limit`` bytes and all of them at most what ``budget`` has left:
    ``(data, positions)``; ``where(j)`` gives record ``j``'s file offset and sample."""
    from ..._core import _codecs

    batch = {"zstd": _codecs.zstd_decode_many, "blosc2": _codecs.blosc2_decode_many}.get(codec.codec)
    if batch is not None:
        try:
            data, pos = batch(buf, starts, ends, limit, threads, path=path, batch_limit=budget.left)
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
            out.append(codec.decompress(mv[a:b], min(limit, budget.left), path=path, offset=offset, sample=sample))
        except DecompressionLimitError as exc:
            raise DecompressionLimitError(_limit_message(exc), path=path, offset=offset, sample=sample) from None
        budget.left -= len(out[-1])
    pos = np.zeros(len(out) + 1, np.uint64)
    np.cumsum([len(o) for o in out], out=pos[1:])
    return b"".join(out), pos


# --- decode -----------------------------------------------------------------------------
def decode(batch: RecordBatch, layout: _Layout, cols: list[int], *, as_samples: bool, decode_images: bool,
           zero_copy: bool) -> list:
    """Column value lists of ``batch``'s records (with ``as_samples``, the list of sample
    dicts), in the order asked."""
    if batch.values is not None:
        values = _decode_values(batch.values, layout, cols, as_samples, decode_images, zero_copy)
        if values is not None:
            return values
        batch = batch.gather()
    parts = batch.parts
    if len(parts) == 1:
        buf, starts, ends, fd = parts[0]
        values = decode_slice(layout, buf, starts, ends, cols, as_samples, decode_images, zero_copy, fd,
                              batch.locate)
    else:
        pieces, a = [], 0
        for buf, starts, ends, fd in parts:
            where = batch.locate if a == 0 else (lambda j, a=a: batch.locate(a + j))
            pieces.append(decode_slice(layout, buf, starts, ends, cols, as_samples, decode_images, zero_copy, fd,
                                       where))
            a += len(starts)
        if as_samples:
            values = list(chain.from_iterable(pieces))
        else:
            values = [list(chain.from_iterable(p[c] for p in pieces)) for c in range(len(cols))]
    if batch.order is not None:
        inv = inverse_permutation(batch.order).tolist()
        if as_samples:
            values = [values[j] for j in inv]
        else:
            values = [[col[j] for j in inv] for col in values]
    return values


def decode_slice(layout: _Layout, buf, lo, hi, cols: list[int], as_samples: bool, decode_images: bool,
                 zero_copy: bool, fd, where) -> list:
    """The records ``buf[lo[j]:hi[j]]`` as sample dicts or column lists; large values read
    from ``fd`` (the file ``buf`` maps) when given."""
    if as_samples:
        return layout.samples(buf, lo, hi, cols, decode_images, where, zero_copy, fd)
    if fd is not None and cols and layout.direct(cols, decode_images, zero_copy):
        # read, not faulted in through the mapping (see _LARGE_RECORD), then transposed
        samples = layout.samples(buf, lo, hi, cols, decode_images, where, zero_copy, fd)
        return [[s[name] for s in samples] for name in (layout.names[c] for c in cols)]
    return layout.columns(buf, lo, hi, cols, decode_images, where, zero_copy)


# Value kinds parsed out of a record's bytes rather than copied whole: read with pread they
# would be copied twice (into a read buffer, then into their objects), so records holding
# them are built where they lie in the mapping, copied once.
_PARSED_BINARY = frozenset((_records.KIND_BYTES_LIST, _records.KIND_BYTES_DICT, _records.KIND_PICKLE))


def _decode_values(values: tuple, layout: _Layout, cols, as_samples, decode_images, zero_copy):
    """The samples of a batch of cached large records, built in the order asked with no
    copy of the batch first: each ``bytes`` value read with ``pread`` into its own object
    (where the mapping would take a page fault or two per record), or, where a selected
    column is parsed out of the record (``pkl``, lists and dicts of bytes), unpickled or
    split straight from the mapping.  None when the kernel cannot build a selected column
    or a record is bad (the gathered read then builds or reports it)."""
    kinds = layout._direct_kinds(cols, decode_images, zero_copy)
    if kinds is None:
        return None
    fds, buffers, file_of, starts, ends = values
    starts, ends = starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False)
    if any(kinds[c] in _PARSED_BINARY for c in cols):
        samples, _bad = _records.mds_samples_files(buffers, file_of, starts, ends, layout._names_t, layout._sizes_t,
                                                   kinds, tuple(cols), orjson.loads)
    else:
        samples, _bad = _records.mds_samples_pread_files(
            np.array(fds, np.int32), buffers, file_of, starts, ends, layout._names_t, layout._sizes_t, kinds,
            tuple(cols), orjson.loads)
    if samples is None or as_samples:
        return samples
    return [[s[name] for s in samples] for name in (layout.names[c] for c in cols)]


def refuse(batch: RecordBatch, j: int, layout: _Layout, cols: list[int], decode_images: bool):
    """Raise for record ``j`` of ``batch``, which a compiled kernel refused: the general
    decoder, on the bytes already fetched, names the file, byte offset, sample and the
    exact fault."""
    buf, start, end = batch.record(j)
    layout.columns(buf, start, end, cols, decode_images, lambda _r: batch.locate(j))
    path, offset, sample = batch.locate(j)
    raise CorruptShardError("malformed record", path=path, offset=offset, sample=sample)


def _limit_message(exc: DecompressionLimitError) -> str:
    """The message of a limit error, its location left out, with how to raise the limit."""
    message = str(exc).rsplit(" (", 1)[0] if exc.path is not None or exc.sample is not None else str(exc)
    return f"{message}; a larger limit: max_decoded_bytes= or ${MAX_DECODED_ENV} (trusted data only)"


def _relocated(exc: HpcioError, sample: int) -> HpcioError:
    """``exc`` raised again naming ``sample`` (a batch kernel knows only the position)."""
    message = str(exc).rsplit(" (", 1)[0] if exc.path is not None or exc.offset is not None else str(exc)
    new = type(exc)(message, path=exc.path, offset=exc.offset, sample=sample)
    errno = getattr(exc, "errno", None)
    if errno is not None and isinstance(new, OSError):  # only the OSError kinds carry one
        new.errno = errno
    return new
