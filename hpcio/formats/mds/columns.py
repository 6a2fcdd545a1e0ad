"""Columns of a batch of MDS samples (see :mod:`hpcio.columns`), sliced out of the records
by the compiled column kernels: numbers as numpy arrays, ``str``/``bytes``/``json``
columns (and undecoded images) as VarColumns, bytes columns as ViewColumns of the
records where they lie with ``zero_copy``, other encodings as lists by :func:`decode`.
"""

from __future__ import annotations

import numpy as np

from ..._core import _records
from ...columns import VarColumn, ViewColumn
from ..base import inverse_permutation
from .batches import Located, RecordBatch, decode, fetch, refuse
from .cache import ShardCache
from .layout import _Layout

__all__ = ["field_lengths", "read_columns"]


def record_table(cache: ShardCache, located: Located, threads: int) -> RecordBatch:
    """The records of the samples ``located`` where they lie (decompressed shard by shard
    where compressed one by one), for the column kernels."""
    return fetch(cache, located, threads=threads, in_place=True)


def read_columns(cache: ShardCache, layout: _Layout, located: Located | None, cols: list[int], *, decode_images: bool,
                 zero_copy: bool, threads: int) -> dict:
    """Columns ``cols`` of the samples ``located`` (None: no sample), by name, in the order
    of ``cols``."""
    kinds = {c: layout.column_kind(c, decode_images) for c in cols}
    views = [c for c in cols if zero_copy and kinds[c] == "bytes"]
    direct = [c for c in cols if kinds[c] is not None and c not in views]
    out: dict = {}
    if located is None:  # no sample
        table = ([], np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int64))
        out.update(_columns_in_place(None, table, layout, direct, views, kinds, cols, decode_images))
        out.update({layout.names[c]: [] for c in cols if kinds[c] is None})
        return {layout.names[c]: out[layout.names[c]] for c in cols}
    # Copied bytes columns (images) touch every page of their records anyway: through
    # the mapping they cost one copy, through pread two.
    if (direct or views) and all(kinds[c] != "bytes" for c in direct):
        read = _columns_pread(cache, layout, located, direct, views, kinds, decode_images)
        if read is not None:
            out.update(read)
            direct = views = []
    if direct or views:
        batch = record_table(cache, located, threads)
        out.update(_columns_in_place(batch, batch.table(), layout, direct, views, kinds, cols, decode_images))
    general = [c for c in cols if kinds[c] is None]
    if general:
        values = decode(fetch(cache, located, zero_copy=zero_copy, threads=threads), layout, general,
                        as_samples=False, decode_images=decode_images, zero_copy=zero_copy)
        for c, v in zip(general, values):
            out[layout.names[c]] = v
    return {layout.names[c]: out[layout.names[c]] for c in cols}


def _columns_in_place(batch: RecordBatch | None, table: tuple, layout: _Layout, direct: list[int], views: list[int],
                      kinds: dict, cols: list[int], decode_images: bool) -> dict:
    """Columns ``direct`` copied out of the records of ``batch`` where they lie (``table``
    its :meth:`RecordBatch.table`) by one compiled call, and columns ``views`` as
    ViewColumns of them; ``cols`` are the columns a bad record's error is reported for."""
    bufs, buf_of, starts, ends = table
    out = {}
    if direct:
        pairs, bad = _records.mds_columns(bufs, buf_of, starts, ends, layout._sizes_t, tuple(direct))
        if pairs is None:
            refuse(batch, _record_of(batch, bad), layout, cols, decode_images)
        for c, (data, offsets) in zip(direct, pairs):
            out[layout.names[c]] = _column(kinds[c], data, offsets)
    for c in views:
        begin = np.empty(len(starts), np.int64)
        lengths, bad = _records.mds_lengths(bufs, buf_of, starts, ends, layout._sizes_t, c, False, begin)
        if lengths is None:
            refuse(batch, _record_of(batch, bad), layout, cols, decode_images)
        begin += starts
        out[layout.names[c]] = ViewColumn(bufs, buf_of, begin, begin + lengths)
    return out


def _record_of(batch: RecordBatch, asked: int) -> int:
    """The record of ``batch`` that holds the sample asked at position ``asked``."""
    if batch.order is None:
        return asked
    return int(np.flatnonzero(batch.order == asked)[0])


def _columns_pread(cache: ShardCache, layout: _Layout, located: Located, copied: list[int], viewed: list[int],
                   kinds: dict, decode_images: bool) -> dict | None:
    """:func:`read_columns` for shards of large records in small pages: the column
    sizes and the copied values are read with ``pread``, and the views (``zero_copy``)
    point into the mapping without touching it, since reading a record through such a
    mapping makes the kernel map the 64 KiB around it (fault-around).  None unless
    every shard the batch touches reads its values with pread
    (``_OpenShard.pread_values``) and has a descriptor to read them with."""
    groups, order = located.groups()
    if not all(cache.get(k).pread_values for k, _lidx, _a, _b in groups):
        return None
    pieces = _pread_pieces(cache, layout, located, groups, order, copied, viewed, decode_images)
    if pieces is None:
        return None
    copies, spans, bufs, which = pieces
    inverse = None if order is None else inverse_permutation(order)
    out = {layout.names[c]: _copied_column(copies[c], kinds[c], inverse) for c in copied}
    if inverse is not None:
        which = which[inverse]
    for c in viewed:
        begin = np.concatenate([v[0] for v in spans[c]])
        end = np.concatenate([v[1] for v in spans[c]])
        if inverse is not None:
            begin, end = begin[inverse], end[inverse]
        out[layout.names[c]] = ViewColumn(bufs, which, begin, end)
    return out


def _pread_pieces(cache: ShardCache, layout: _Layout, located: Located, groups: list, order, copied: list[int],
                  viewed: list[int], decode_images: bool):
    """Each shard group's part of the columns, read by ``mds_columns_pread``:
    ``(copies, spans, bufs, which)``, in shard order: per copied column its
    ``(data, offsets)`` pieces, per viewed column its ``(begin, end)`` pieces, the
    shards' buffers and the buffer of each record.  None when a shard has no
    descriptor left (the caller then reads through the mapping)."""
    copies: dict = {c: [] for c in copied}
    spans: dict = {c: [] for c in viewed}
    bufs, buf_of = [], []
    for g, (k, lidx, a, b) in enumerate(groups):
        sh, lidx, lo, hi = cache.extents(k, lidx)
        fd = sh.read_fd()
        if fd is None:
            return None
        lo, hi = lo.astype(np.int64), hi.astype(np.int64)
        got, where, bad = _records.mds_columns_pread(fd, lo, hi, layout._sizes_t, tuple(copied), tuple(viewed),
                                                     path=sh.path)
        if bad >= 0:
            one = Located(located.ids[[a + bad if order is None else order[a + bad]]],
                          np.full(1, k, np.int64), lidx[bad : bad + 1], len(cache.shards))
            record = (memoryview(sh.buf), lo[bad : bad + 1], hi[bad : bad + 1], None)
            refuse(RecordBatch(one, None, [record], [record[1]], cache), 0, layout, copied + viewed, decode_images)
        for c, pair in zip(copied, got):
            copies[c].append(pair)
        for c, span in zip(viewed, where):
            spans[c].append(span)
        bufs.append(memoryview(sh.buf))
        buf_of.append(np.full(b - a, g, np.int32))
    return copies, spans, bufs, np.concatenate(buf_of)


def field_lengths(cache: ShardCache, layout: _Layout, located: Located, c: int, kind: str, *,
                  decode_images: bool, threads: int) -> np.ndarray:
    """``len()`` of ``str`` or ``bytes`` column ``c`` for the samples ``located``, counted
    in the records by one compiled call without building the values."""
    batch = record_table(cache, located, threads)
    bufs, buf_of, starts, ends = batch.table()
    lengths, bad = _records.mds_lengths(bufs, buf_of, starts, ends, layout._sizes_t, c, kind == "str")
    if lengths is None:
        refuse(batch, _record_of(batch, bad), layout, [c], decode_images)
    return lengths


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
