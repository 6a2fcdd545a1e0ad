"""Column batches: many samples read as one array per field.

``Dataset.get_columns(indices)`` returns a dict mapping each field to a column:

- fixed-size numbers (MDS ``int``, ``int32``, ``float64``...): a numpy array;
- strings, bytes and JSON documents: a :class:`VarColumn`, every value's bytes back to
  back in one buffer with an offsets array, the layout of Arrow's ``large_string`` and
  ``large_binary`` arrays;
- bytes read by a ``zero_copy`` reader: a :class:`ViewColumn`, every value left where it
  lies (in the shard's mapping or a decompressed batch), as that reader's samples do;
- any other value (formats or encodings without a columnar path): a list.

A JSON column whose documents are objects with the same keys splits into one column per
key (:meth:`VarColumn.json_columns`): numbers and booleans as numpy arrays, strings as
VarColumns, flat lists as :class:`ListColumn` s.

No Python object is made per value until one is asked for, so a batch costs a few copies
of its bytes, not a dict per sample: the form for tokenisers and collate functions that
work on whole batches, and for filters over one field.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence

import numpy as np

from .errors import (
    DecodeError,
    HpcioError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    InvalidJSONError,
    KeyNotFoundError,
    WrongTypeError,
)

__all__ = ["ListColumn", "VarColumn", "ViewColumn", "columns_from_values", "loads_json"]

_KINDS = ("str", "bytes", "json")
# What decoding one stored value raises when its bytes are bad: not UTF-8, not JSON, or
# JSON nested deeper than the interpreter's recursion limit.
_VALUE_ERRORS = (ValueError, RecursionError)


class _Column(Sequence):
    """Indexing shared by the column classes: ``col[j]`` is ``self._value(j)`` for
    ``0 <= j < len``, negative positions count from the end, a slice gives a list."""

    __slots__ = ()

    def __getitem__(self, j):
        n = len(self)
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(n))]
        j = int(j)
        if not -n <= j < n:
            raise IndexOutOfRangeError(f"index {j} out of range for a column of {n} values")
        return self._value(j % n)


class VarColumn(_Column):
    """Variable-size values of one field for a batch: value j is
    ``data[offsets[j]:offsets[j + 1]]``.

    Parameters
    ----------
    kind
        ``"str"`` (UTF-8 text), ``"bytes"`` or ``"json"`` (UTF-8 JSON documents): what
        ``col[j]`` and :meth:`to_pylist` turn a value into.
    data
        The values back to back, a uint8 array.
    offsets
        ``len(col) + 1`` non-decreasing int64 positions in ``data``, starting at 0.

    A value whose bytes do not decode raises DecodeError; a column read from a dataset
    names its file and sample, as reading that sample does (``locate``, set by
    :meth:`hpcio.Dataset.get_columns`: position -> the error reading its sample raises).

    >>> col = VarColumn.from_values("str", ["a", "bé", ""])
    >>> len(col), col[1], col.to_pylist()
    (3, 'bé', ['a', 'bé', ''])
    >>> col.byte_lengths().tolist(), col.str_lengths().tolist()
    ([1, 3, 0], [1, 2, 0])
    """

    __slots__ = ("kind", "data", "offsets", "locate")

    def __init__(self, kind: str, data: np.ndarray, offsets: np.ndarray):
        if kind not in _KINDS:
            raise InvalidArgumentError(f"VarColumn kind must be one of {', '.join(_KINDS)}, got {kind!r}")
        self.kind = kind
        self.data = data
        self.offsets = offsets
        self.locate: Callable | None = None

    @classmethod
    def from_values(cls, kind: str, values: Sequence) -> VarColumn:
        """A column holding ``values`` (str, bytes-like, or JSON-able objects)."""
        if kind == "str":
            encoded = [v.encode("utf-8") for v in values]
        elif kind == "json":
            import orjson

            encoded = [orjson.dumps(v) for v in values]
        else:
            encoded = [bytes(v) for v in values]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(kind, np.frombuffer(b"".join(encoded), np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def value_bytes(self, j: int) -> memoryview:
        """The stored bytes of value ``j`` (a view of :attr:`data`)."""
        return memoryview(self.data)[self.offsets[j] : self.offsets[j + 1]]  # type: ignore[arg-type]

    def _value(self, j: int):
        return self._decode_at(j, self.value_bytes(j))

    def _decode_at(self, j: int, raw: memoryview):
        """Value ``j`` decoded from ``raw``; DecodeError, located when it can be, if not."""
        try:
            return self._decode(raw)
        except HpcioError:
            raise
        except _VALUE_ERRORS as exc:
            located = None if self.locate is None else self.locate(j, exc)
            if located is not None:
                raise located from exc
            if isinstance(exc, json.JSONDecodeError):
                raise InvalidJSONError(f"value {j} of a json column is not JSON: {exc.msg}", exc.doc,
                                       exc.pos) from exc
            raise DecodeError(f"value {j} of a {self.kind} column cannot be decoded: "
                              f"{type(exc).__name__}: {exc}") from exc

    def _decode(self, raw: memoryview):
        if self.kind == "str":
            return str(raw, "utf-8")
        if self.kind == "bytes":
            return raw.tobytes()
        return loads_json(raw)

    def to_pylist(self) -> list:
        """Every value as a Python object (str, bytes or the decoded JSON)."""
        if self.kind == "json":
            import orjson

            from ._core import _records

            # One compiled loop of orjson calls; when a value does not decode (NaN, which
            # orjson refuses, or a broken value), a parse per value here, which reports it.
            values = _records.loads_json_values(self.data, np.ascontiguousarray(self.offsets, np.int64),
                                                orjson.loads)
            if values is not None:
                return values
        view = memoryview(self.data)  # type: ignore[arg-type]
        bounds = self.offsets.tolist()
        decode = self._decode_at
        return [decode(j, view[a:b]) for j, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]

    def byte_lengths(self) -> np.ndarray:
        """Stored bytes of every value (int64)."""
        return np.diff(self.offsets)

    def str_lengths(self) -> np.ndarray:
        """Characters of every value, as ``len(str)`` counts them (UTF-8 columns).

        Counted over the bytes by a compiled kernel, without decoding: every byte that
        does not continue a multi-byte character starts one.
        """
        from ._core import _records

        offsets = np.ascontiguousarray(self.offsets, np.int64).view(np.uint64)
        return _records.utf8_lengths(self.data, offsets)

    def json_columns(self) -> dict:
        """The JSON objects of a ``json`` column as one column per key, parsed in C with
        no Python object per document.

        Every document must be an object with the keys of the first (in any order); keys
        come in the first document's order.  A key's column is, by what its values hold:
        an int64, float64 or bool numpy array; a ``str`` VarColumn; a :class:`ListColumn`
        for flat lists of one of those; otherwise (null, nested objects, integers past
        int64, values of different types) a ``json`` VarColumn of each value's JSON text.
        Every column's ``to_pylist()`` gives the values ``to_pylist()`` of this column
        holds under that key.  A document that is not JSON or not such an object raises
        ValueError naming it and the byte.

        >>> col = VarColumn.from_values("json", [{"lang": "en", "score": 0.5, "tags": ["a"]},
        ...                                      {"lang": "fr", "score": 1.0, "tags": []}])
        >>> parts = col.json_columns()
        >>> parts["lang"].to_pylist(), parts["score"], parts["tags"].to_pylist()
        (['en', 'fr'], array([0.5, 1. ]), [['a'], []])
        """
        from ._core import _records

        if self.kind != "json":
            raise WrongTypeError(f"json_columns needs a json column, not a {self.kind} column")
        names, parts = _records.json_columns(self.data, np.ascontiguousarray(self.offsets, np.int64))
        return {loads_json(name): _json_part(part) for name, part in zip(names, parts)}

    def to_arrow(self):
        """The column as a pyarrow ``large_string`` (str, json) or ``large_binary`` array,
        sharing this column's buffers."""
        import pyarrow as pa

        typ = pa.large_binary() if self.kind == "bytes" else pa.large_string()
        return pa.Array.from_buffers(
            typ, len(self), [None, pa.py_buffer(self.offsets), pa.py_buffer(self.data)]
        )

    def __eq__(self, other):
        if not isinstance(other, VarColumn):
            return NotImplemented
        return (self.kind == other.kind and np.array_equal(self.offsets, other.offsets)
                and np.array_equal(self.data, other.data))

    __hash__ = None

    def __repr__(self):
        return f"<hpcio.VarColumn {self.kind} n={len(self)} bytes={int(self.offsets[-1])}>"


class ListColumn(_Column):
    """Flat lists of one field for a batch: value j is the list of
    ``values[offsets[j]:offsets[j + 1]]``, the elements of every list back to back in
    ``values`` (a numpy array or a :class:`VarColumn`; None when every list is empty).

    >>> col = ListColumn(np.array([0, 2, 2, 3]), np.array([1, 2, 3]))
    >>> len(col), col[0], col.to_pylist(), col.list_lengths().tolist()
    (3, [1, 2], [[1, 2], [], [3]], [2, 0, 1])
    """

    __slots__ = ("offsets", "values")
    kind = "list"

    def __init__(self, offsets: np.ndarray, values):
        self.offsets = offsets
        self.values = values

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _value(self, j: int) -> list:
        a, b = int(self.offsets[j]), int(self.offsets[j + 1])
        return [] if a == b else _pylist(self.values[a:b])

    def to_pylist(self) -> list:
        """Every value as a list."""
        flat = [] if self.values is None else _pylist(self.values)
        return [flat[a:b] for a, b in itertools.pairwise(self.offsets.tolist())]

    def list_lengths(self) -> np.ndarray:
        """Elements of every list (int64)."""
        return np.diff(self.offsets)

    def __repr__(self):
        return f"<hpcio.ListColumn n={len(self)} items={int(self.offsets[-1])}>"


def _pylist(values) -> list:
    """The values of a numpy array, a list or a column, as a list."""
    if isinstance(values, np.ndarray):
        return values.tolist()
    return values if isinstance(values, list) else values.to_pylist()


def _json_part(part):
    """A column of :meth:`VarColumn.json_columns` from the compiled split's description."""
    kind = part[0]
    if kind == "list":
        return ListColumn(part[1], None if part[2] is None else _json_part(part[2]))
    if kind in ("str", "json"):
        return VarColumn(kind, part[1], part[2])
    return part[1]


class ViewColumn(_Column):
    """Bytes values of one field for a batch, not copied: value j is
    ``bufs[buf_of[j]][begin[j]:end[j]]``.

    What a ``zero_copy`` reader's :meth:`~hpcio.Dataset.get_columns` returns for bytes
    (and undecoded image) fields: a batch of large values (images) costs no copy of their
    bytes, and values are read-only memoryviews, as in that reader's samples.  The column
    keeps its buffers (shard mappings) alive.  :meth:`to_varcolumn` copies the values
    back to back when one buffer is needed.

    >>> col = ViewColumn([b"abcdef"], np.zeros(2, np.int32), np.array([4, 0]), np.array([6, 3]))
    >>> len(col), bytes(col[0]), col.byte_lengths().tolist()
    (2, b'ef', [2, 3])
    >>> col.to_varcolumn().to_pylist()
    [b'ef', b'abc']
    """

    __slots__ = ("begin", "buf_of", "bufs", "end")
    kind = "bytes"

    def __init__(self, bufs: Sequence, buf_of: np.ndarray, begin: np.ndarray, end: np.ndarray):
        self.bufs = [memoryview(b).cast("B") for b in bufs]
        self.buf_of = buf_of
        self.begin = begin
        self.end = end

    def __len__(self) -> int:
        return len(self.begin)

    def value_bytes(self, j: int) -> memoryview:
        """The stored bytes of value ``j`` (a view of its buffer)."""
        return self.bufs[self.buf_of[j]][self.begin[j] : self.end[j]]

    _value = value_bytes

    def to_pylist(self) -> list:
        """Every value as a read-only memoryview."""
        bufs = self.bufs
        return [bufs[k][a:b] for k, a, b in zip(self.buf_of.tolist(), self.begin.tolist(),
                                                  self.end.tolist())]

    def byte_lengths(self) -> np.ndarray:
        """Stored bytes of every value (int64)."""
        return self.end - self.begin

    def to_varcolumn(self) -> VarColumn:
        """The values copied back to back into a :class:`VarColumn`."""
        offsets = np.zeros(len(self) + 1, np.int64)
        np.cumsum(self.byte_lengths(), out=offsets[1:])
        return VarColumn("bytes", np.frombuffer(b"".join(self.to_pylist()), np.uint8), offsets)

    def to_arrow(self):
        """The column as a pyarrow ``large_binary`` array (a copy: Arrow wants the values
        back to back)."""
        return self.to_varcolumn().to_arrow()

    def __eq__(self, other):
        if not isinstance(other, (ViewColumn, VarColumn)):
            return NotImplemented
        return self.to_varcolumn() == (other.to_varcolumn() if isinstance(other, ViewColumn) else other)

    __hash__ = None

    def __repr__(self):
        return f"<hpcio.ViewColumn bytes n={len(self)} bytes={int(self.byte_lengths().sum())}>"


def loads_json(raw) -> object:
    """The JSON document in ``raw`` (UTF-8 bytes-like):
    :func:`hpcio._core._records.loads_exact` (orjson, or Python's json for integers past
    64 bits), or Python's json for what orjson refuses (NaN, Infinity)."""
    from ._core import _records

    try:
        return _records.loads_exact(raw)
    except json.JSONDecodeError:
        return json.loads(str(raw, "utf-8"))


def columns_from_values(samples: Sequence, fields: Sequence[str]) -> dict:
    """Columns of ``samples`` (mappings) for ``fields``: the generic path of readers
    without a columnar one.

    Integers, floats and bools become numpy arrays, str and bytes values
    :class:`VarColumn` s, anything else (or a mix) a list of the values.
    """
    out = {}
    for f in fields:
        try:
            values = [s[f] for s in samples]
        except KeyError:
            j = next(j for j, s in enumerate(samples) if f not in s)
            raise KeyNotFoundError(f"sample {j} of the batch has no field {f!r}") from None
        out[f] = _column_of(values)
    return out


def _column_of(values: list):
    types = {type(v) for v in values}
    if len(types) != 1:
        return values
    (t,) = types
    if t is bool:
        return np.array(values, dtype=bool)
    if t is int:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            return values
    if t is float:
        return np.array(values, dtype=np.float64)
    if t is str:
        return VarColumn.from_values("str", values)
    if t is bytes:
        return VarColumn.from_values("bytes", values)
    return values
