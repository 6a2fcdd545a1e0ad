"""The record layout of an MDS shard: slicing records into columns and samples.

A record holds a u32 size for each variable-size column, then every column's bytes in
column order.  :class:`_Layout` finds the columns of many records at once (numpy over
the size headers, or the compiled ``_records`` kernels when every selected column has
a fixed construction) and reports a malformed record or undecodable value exactly.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import orjson

from ..._core import _records
from ...errors import CorruptShardError, DecodeError, HpcioError, KeyNotFoundError
from .encodings import COMPILED_KINDS, NUMERIC_DTYPES, ColumnCodec, column_codec

# The compiled value kinds of the encodings whose values have one construction, read
# (mds_samples, RecordSamples) and written (RecordPacker) alike.
_FIXED_KINDS = {"str": _records.KIND_STR, "int": _records.KIND_INT, "json": _records.KIND_JSON}
# And those read only: hpcio's extension encodings, whose values the writer packs itself,
# and pickle, unpickled from the record's bytes in place.
_READ_KINDS = {**_FIXED_KINDS, **COMPILED_KINDS}


class _Layout:
    """The columns of a shard and the vectorised slicing of records into them."""

    def __init__(self, names, encodings, sizes, *, path=None):
        self.names = list(names)
        self.encodings = list(encodings)
        self.codecs: list[ColumnCodec] = [
            column_codec(e, path=path, column=n) for n, e in zip(names, encodings)
        ]
        self.sizes = list(sizes)
        self.var_cols = [j for j, s in enumerate(sizes) if s is None]
        self.nvar = len(self.var_cols)
        self.head = 4 * self.nvar
        self.position = {n: j for j, n in enumerate(self.names)}
        self._head_fmt = struct.Struct(f"<{self.nvar}I")
        self._fixed_row = np.array([0 if s is None else s for s in sizes], np.int64)
        self._names_t = tuple(self.names)
        self._sizes_t = tuple(-1 if s is None else s for s in sizes)

    def _direct_kinds(self, cols: list[int], decode_images: bool, zero_copy: bool) -> tuple | None:
        """Kind codes for :func:`hpcio._core._records.mds_samples`, or None when a
        selected column needs the general decoder."""
        if len(self.names) > _records.MAX_COLUMNS:
            return None
        kinds = []
        for codec in self.codecs:
            kind = codec.kind
            if kind in _READ_KINDS:
                kinds.append(_READ_KINDS[kind])
            elif kind == "bytes" or (not decode_images and kind in ("jpeg", "png", "pil")):
                kinds.append(_records.KIND_VIEW if zero_copy else _records.KIND_BYTES)
            else:
                kinds.append(-1)
        if any(kinds[c] < 0 for c in cols):
            return None
        return tuple(kinds)

    def direct(self, cols: list[int], decode_images: bool, zero_copy: bool) -> bool:
        """Whether :meth:`samples` builds these columns straight from the record bytes."""
        return self._direct_kinds(cols, decode_images, zero_copy) is not None

    def binary(self, cols: list[int]) -> bool:
        """Whether columns ``cols`` include a binary value (bytes, images, arrays, ...):
        anything but the text, JSON and numbers of metadata."""
        small = ("str", "int", "json", *NUMERIC_DTYPES)
        return any(self.codecs[c].kind not in small for c in cols)

    def column_kind(self, c: int, decode_images: bool):
        """How :meth:`Reader.read_columns` returns column ``c``: a numpy dtype (fixed-size
        numbers), ``"str"``, ``"bytes"`` or ``"json"`` (a VarColumn), or None (a list)."""
        kind = self.codecs[c].kind
        if kind == "int":
            return np.dtype("<i8")
        if kind in NUMERIC_DTYPES:
            return np.dtype(kind).newbyteorder("<")
        if kind in ("str", "bytes", "json"):
            return kind
        if not decode_images and kind in ("jpeg", "png", "pil"):
            return "bytes"
        return None

    def samples(self, buf, starts: np.ndarray, ends: np.ndarray, cols: list[int],
                decode_images: bool, locate, zero_copy: bool = False, fd: int | None = None) -> list[dict]:
        """The records ``buf[starts[j]:ends[j]]`` as dicts of columns ``cols``.

        Built directly from the record bytes when every selected column has a fixed
        construction (read from ``fd``, the file ``buf`` maps, when given); otherwise, and
        to report any malformed record or bad value exactly, through :meth:`columns`.
        """
        kinds = self._direct_kinds(cols, decode_images, zero_copy)
        if kinds is not None and len(starts):
            args = (np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64),
                    self._names_t, self._sizes_t, kinds, tuple(cols), orjson.loads)
            if fd is None:
                out, _bad = _records.mds_samples(buf, *args)
            else:
                out, _bad = _records.mds_samples_pread(fd, buf, *args)
            if out is not None:
                return out
        values = self.columns(buf, starts, ends, cols, decode_images, locate, zero_copy)
        if not cols:
            return [{} for _ in range(len(starts))]
        names = [self.names[c] for c in cols]
        return [dict(zip(names, row)) for row in zip(*values)]

    def sample_iterator(self, buf, starts: np.ndarray, ends: np.ndarray, cols: list[int],
                        decode_images: bool, locate, zero_copy: bool = False):
        """The records ``buf[starts[j]:ends[j]]`` as dicts built one at a time, as they
        are asked for (:class:`hpcio._core._records.RecordSamples`), or None when a
        selected column needs the general decoder.  A record the kernel refuses goes
        through :meth:`samples`, which builds it the general way or raises the exact
        error (``locate(j)`` names record j)."""
        kinds = self._direct_kinds(cols, decode_images, zero_copy)
        if kinds is None:
            return None
        starts = np.ascontiguousarray(starts, np.int64)
        ends = np.ascontiguousarray(ends, np.int64)

        def general(j: int) -> dict:
            return self.samples(buf, starts[j : j + 1], ends[j : j + 1], cols, decode_images,
                                lambda _r: locate(j), zero_copy)[0]

        return _records.RecordSamples(buf, starts, ends, self._names_t, self._sizes_t, kinds,
                                      tuple(cols), orjson.loads, general)

    def select(self, fields: Sequence[str] | None, path=None) -> list[int]:
        if fields is None:
            return list(range(len(self.names)))
        try:
            return [self.position[f] for f in fields]
        except KeyError as exc:
            raise KeyNotFoundError(
                f"no column {exc.args[0]!r} in {path}; columns: {', '.join(self.names)}"
            ) from None

    def columns(self, buf, starts: np.ndarray, ends: np.ndarray, cols: list[int],
                decode_images: bool, locate, zero_copy: bool = False) -> list[list]:
        """Values of columns ``cols`` for the records ``buf[starts[j]:ends[j]]``.

        ``locate(j)`` gives (path, file offset, sample) of record j for error messages.
        """
        m = len(starts)
        if m == 0:
            return [[] for _ in cols]
        starts = starts.astype(np.int64, copy=False)
        ends = ends.astype(np.int64, copy=False)
        u8 = np.frombuffer(buf, np.uint8)
        ncols = len(self.names)
        if self.nvar:
            short = np.flatnonzero(ends - starts < self.head)
            if short.size:
                j = int(short[0])
                self._raise_layout(j, locate, f"a record of {int(ends[j] - starts[j])} bytes "
                                   f"cannot hold the {self.nvar} column sizes")
            heads = u8[starts[:, None] + np.arange(self.head, dtype=np.int64)]
            sizes = np.empty((m, ncols), np.int64)
            sizes[:] = self._fixed_row
            sizes[:, self.var_cols] = heads.view("<u4")
        else:
            sizes = np.broadcast_to(self._fixed_row, (m, ncols))
        col_ends = np.cumsum(sizes, axis=1)
        col_ends += (starts + self.head)[:, None]
        total = col_ends[:, -1] if ncols else starts + self.head
        bad = np.flatnonzero(total != ends)
        if bad.size:
            j = int(bad[0])
            self._raise_layout(j, locate, f"the record is {int(ends[j] - starts[j])} bytes but its "
                               f"columns add up to {int(total[j] - starts[j])}")
        out = []
        for c in cols:
            codec = self.codecs[c]
            hi = col_ends[:, c]
            lo = hi - sizes[:, c]
            try:
                out.append(codec.decode_batch(buf, u8, lo, hi, decode_images, zero_copy))
            except Exception as exc:
                if _passes_through(exc):
                    raise
                self._find_bad_value(buf, lo, hi, c, starts, decode_images, locate)
                raise
        return out

    def _raise_layout(self, j, locate, detail):
        path, offset, sample = locate(j)
        raise CorruptShardError(f"malformed record: {detail}", path=path, offset=offset, sample=sample)

    def _find_bad_value(self, buf, lo, hi, c, starts, decode_images, locate):
        codec = self.codecs[c]
        mv = memoryview(buf)
        for j, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
            try:
                codec.decode_one(mv[a:b], decode_images)
            except Exception as exc:
                path, offset, sample = locate(j)
                if offset is not None:
                    offset += a - int(starts[j])
                raise DecodeError(
                    f"column {self.names[c]!r} ({codec.encoding}): cannot decode the value: {exc}",
                    path=path, offset=offset, sample=sample,
                ) from exc

    def record(self, rec: memoryview, cols: list[int], decode_images: bool, where) -> dict:
        """One record as a dict (the single-sample path; ``where()`` = (path, offset, sample))."""
        n = len(rec)
        if n < self.head:
            path, offset, sample = where()
            raise CorruptShardError(
                f"malformed record: a record of {n} bytes cannot hold the {self.nvar} column sizes",
                path=path, offset=offset, sample=sample,
            )
        var = iter(self._head_fmt.unpack_from(rec, 0))
        bounds = []
        pos = self.head
        for size in self.sizes:
            end = pos + (next(var) if size is None else size)
            bounds.append((pos, end))
            pos = end
        if pos != n:
            path, offset, sample = where()
            raise CorruptShardError(
                f"malformed record: the record is {n} bytes but its columns add up to {pos}",
                path=path, offset=offset, sample=sample,
            )
        out = {}
        for c in cols:
            a, b = bounds[c]
            try:
                out[self.names[c]] = self.codecs[c].decode_one(rec[a:b], decode_images)
            except Exception as exc:
                if _passes_through(exc):
                    raise
                path, offset, sample = where()
                raise DecodeError(
                    f"column {self.names[c]!r} ({self.encodings[c]}): cannot decode the value: {exc}",
                    path=path, offset=None if offset is None else offset + a, sample=sample,
                ) from exc
        return out


def _passes_through(exc: BaseException) -> bool:
    """Whether a value's decoding error is raised as it is: an hpcio error that names its
    place already, or is not about the value's bytes (a missing library)."""
    return isinstance(exc, HpcioError) and not (isinstance(exc, DecodeError) and exc.path is None)
