"""The columnar layout shared by the Zarr and HDF5 formats.

Each field becomes either

* a **fixed** array of shape ``(N, *shape)`` when every value has the same dtype and
  shape: numpy arrays, and scalars stored as ``int64``/``float64`` (``(N,)``); or
* a **ragged** pair ``offsets`` (``uint64``, ``N + 1`` entries, ``offsets[0] == 0``) and
  ``data`` (flat ``uint8``): value ``i`` is ``data[offsets[i]:offsets[i+1]]``, holding
  bytes as given, str as UTF-8, JSON (dicts, lists, bools, None) as compact JSON,
  arrays of varying shape as ``.npy`` bytes, lists of bytes (kind ``bytes_list``) as
  their item count and sizes followed by the items
  (:func:`hpcio.formats._values.encode_bytes_list`) and mappings holding bytes (kind
  ``bytes_mapping``) as such a list of their JSON, their bytes keys and bytes values.

The layout metadata (an attribute ``hpcio`` on the Zarr group or HDF5 file) records the
number of samples and, per field, its kind and storage, so a reader never guesses.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import CorruptShardError, KeyNotFoundError, SchemaError, UnsupportedValueError
from . import _values
from .base import BatchReader, by_shard

LAYOUT_VERSION = 1
# Sequential passes read this many samples per batch, so each read spans many chunks.
RANGE_BATCH = 4096
_INT64 = (-(1 << 63), (1 << 63) - 1)


def field_spec(kind: str, value) -> dict:
    """The storage of a field whose first value is ``value`` of ``kind``."""
    if kind == "ndarray":
        return {"kind": "ndarray", "storage": "fixed", "dtype": value.dtype.str,
                "shape": list(value.shape)}
    if kind == "int":
        return {"kind": "int", "storage": "fixed", "dtype": "<i8", "shape": []}
    if kind == "float":
        return {"kind": "float", "storage": "fixed", "dtype": "<f8", "shape": []}
    return {"kind": kind, "storage": "ragged"}


def spec_from_option(option) -> dict:
    """A field spec from a ``schema=`` entry: a kind name or a full spec dict.

    ``"npy"`` asks for arrays of varying shape (stored ragged as ``.npy`` bytes)."""
    if isinstance(option, Mapping):
        return dict(option)
    if option == "npy":
        return {"kind": "ndarray", "storage": "ragged"}
    if option not in _values.KINDS:
        raise SchemaError(f"unknown field kind {option!r}; known: {', '.join(_values.KINDS)}, npy")
    if option in ("int", "float"):
        return field_spec(option, None)
    if option == "ndarray":
        raise SchemaError("an ndarray field needs its dtype and shape: give a spec dict or 'npy'")
    return {"kind": option, "storage": "ragged"}


def check_field_name(name, sample, path) -> str:
    """A field name that can name an array or dataset: besides
    :func:`~hpcio.formats._values.check_field_name`'s rules, not ``.`` or ``..``, which
    would name the part itself or its parent."""
    _values.check_field_name(name, sample=sample, path=path)
    if name in (".", ".."):
        raise UnsupportedValueError(f"field name {name!r} would name a directory, not an array",
                                    path=path, sample=sample)
    return name


class ColumnBuffer:
    """Samples collected column by column, checked against a schema fixed by the first
    sample (or given up front)."""

    def __init__(self, path: str, schema: Mapping | None = None):
        self.path = path
        self.fields: dict[str, dict] | None = (
            {check_field_name(k, None, path): spec_from_option(v) for k, v in schema.items()}
            if schema else None)
        self.fixed_given = bool(schema)
        self.clear()

    def clear(self):
        self.columns: dict[str, list] = {k: [] for k in (self.fields or {})}
        self.nbytes = 0
        self.count = 0

    def _infer(self, sample: Mapping, index: int):
        fields = {}
        for name in sample:
            check_field_name(name, index, self.path)
            value = sample[name]
            fields[name] = field_spec(
                _values.kind_of(value, field=name, sample=index, path=self.path), value)
        self.fields = fields
        self.columns = {k: [] for k in fields}

    def add(self, sample: Mapping, index: int):
        if self.fields is None:
            self._infer(sample, index)
        if sample.keys() != self.fields.keys():
            raise SchemaError(
                f"sample fields {sorted(sample)} differ from the dataset's {sorted(self.fields)}",
                path=self.path, sample=index)
        for name, spec in self.fields.items():
            value = sample[name]
            kind = _values.kind_of(value, field=name, sample=index, path=self.path)
            if spec["storage"] == "fixed":
                self.columns[name].append(self._fixed(name, spec, kind, value, index))
            else:
                if kind != spec["kind"] and not _values.widens(spec["kind"], kind, value):
                    raise SchemaError(f"field {name!r}: expected {spec['kind']}, got {kind}",
                                      path=self.path, sample=index)
                data = _values.encode_value(spec["kind"], value, field=name, sample=index, path=self.path)
                self.columns[name].append(data)
                self.nbytes += len(data)
        self.count += 1

    def _fixed(self, name, spec, kind, value, index):
        if kind != spec["kind"]:
            raise SchemaError(f"field {name!r}: expected {spec['kind']}, got {kind}",
                              path=self.path, sample=index)
        if kind == "int" and not _INT64[0] <= value <= _INT64[1]:
            raise SchemaError(f"field {name!r}: int {value} does not fit int64; pass "
                              f"schema={{{name!r}: 'json'}}", path=self.path, sample=index)
        if kind == "ndarray" and (value.dtype.str != spec["dtype"] or list(value.shape) != spec["shape"]):
            raise SchemaError(
                f"field {name!r}: expected an array of dtype {spec['dtype']} and shape "
                f"{tuple(spec['shape'])}, got {value.dtype.str} {value.shape}; pass "
                f"schema={{{name!r}: 'npy'}} for arrays of varying shape",
                path=self.path, sample=index)
        self.nbytes += value.nbytes if kind == "ndarray" else 8
        return value

    def take(self) -> dict:
        """The buffered columns as arrays: fixed -> (n, *shape) array; ragged ->
        (lengths uint64, flat uint8 array); and an empty buffer."""
        out: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]] = {}
        for name, spec in self.fields.items():
            col = self.columns[name]
            if spec["storage"] == "fixed":
                shape = (len(col), *spec["shape"])
                out[name] = np.asarray(col, dtype=np.dtype(spec["dtype"])).reshape(shape)
            else:
                lengths = np.fromiter((len(v) for v in col), dtype=np.uint64, count=len(col))
                out[name] = (lengths, np.frombuffer(b"".join(col), dtype=np.uint8))
        self.clear()
        return out


def field_conflict(fields: dict, expected: dict) -> str:
    """Why the fields of one shard (``fields``) do not match the dataset's (``expected``)."""
    if fields.keys() != expected.keys():
        return f"fields {sorted(fields)} differ from the dataset's {sorted(expected)}"
    name = next(n for n in expected if fields[n] != expected[n])
    return (f"field {name!r} is {describe(fields[name])} here but {describe(expected[name])} in "
            f"the shards before; name its kind with the writer option schema=")


def describe(spec: dict) -> str:
    """A field spec in a few words: its kind, and dtype and shape for fixed arrays."""
    if spec["storage"] == "fixed" and spec["kind"] == "ndarray":
        return f"ndarray {spec['dtype']} {tuple(spec['shape'])}"
    return spec["kind"]


def fixed_value(spec: dict, value):
    """A stored fixed value in the type it was written with."""
    if spec["kind"] == "int":
        return int(value)
    if spec["kind"] == "float":
        return float(value)
    return np.array(value, dtype=np.dtype(spec["dtype"]), copy=True)


def ragged_value(spec: dict, data, *, field, sample, path):
    return _values.decode_value(spec["kind"], data, field=field, sample=sample, path=path)


def check_offsets(offsets: np.ndarray, n: int, data_len: int, *, field: str, path: str):
    """Offsets must have n+1 non-decreasing entries from 0 to len(data)."""
    if offsets.shape != (n + 1,):
        raise CorruptShardError(
            f"field {field!r}: offsets hold {offsets.shape[0] - 1} samples, layout says {n}", path=path)
    if n + 1 and (offsets[0] != 0 or int(offsets[-1]) != data_len):
        raise CorruptShardError(
            f"field {field!r}: offsets end at {int(offsets[-1])}, data holds {data_len} bytes",
            path=path)
    bad = np.flatnonzero(np.diff(offsets.astype(np.int64)) < 0)
    if bad.size:
        raise CorruptShardError(f"field {field!r}: offsets decrease", path=path, sample=int(bad[0]))


def span_values(spec: dict, span, lo: int, members, starts, ends, *, field, samples, path):
    """``(position, value)`` of each ragged value ``members`` of a span of
    :func:`merged_spans`: ``span`` holds the field's bytes from offset ``lo``, value
    ``pos`` those from ``starts[pos]`` to ``ends[pos]``; ``samples[pos]`` is its global
    sample index, for errors."""
    for pos in members:
        a, b = int(starts[pos]) - lo, int(ends[pos]) - lo
        yield pos, ragged_value(spec, span[a:b], field=field, sample=int(samples[pos]), path=path)


def merged_spans(starts: np.ndarray, ends: np.ndarray, gap: int):
    """Byte spans covering the ranges [starts, ends), merging ranges closer than ``gap``:
    yields (span_start, span_end, positions of the ranges inside it)."""
    order = np.argsort(starts, kind="stable")
    i = 0
    m = len(order)
    while i < m:
        lo = int(starts[order[i]])
        hi = int(ends[order[i]])
        j = i + 1
        while j < m and int(starts[order[j]]) <= hi + gap:
            hi = max(hi, int(ends[order[j]]))
            j += 1
        yield lo, hi, order[i:j]
        i = j


class LayoutReader(BatchReader):
    """Reader of parts (HDF5 files, Zarr groups) in this layout; a subclass sets
    ``parts``, each with ``read_rows(rows, fields, sample_base)``, ``layout_fields``
    (name to field spec), ``fields`` and ``cum``."""

    parts: list
    layout_fields: Mapping

    def read_many(self, indices, fields=None) -> list:
        indices = np.asarray(indices, dtype=np.int64)
        fields = self.fields if fields is None else list(fields)
        for f in fields:
            if f not in self.layout_fields:
                raise KeyNotFoundError(f"{self.path} has no field {f!r}")
        out: list = [None] * len(indices)
        for k, where, rows in by_shard(self.cum, indices):
            got = self.parts[k].read_rows(rows, fields, int(self.cum[k]))
            for j, pos in enumerate(where):
                out[pos] = got[j]
        return out

    def iter_range(self, start=0, stop=None, fields=None):
        stop = len(self) if stop is None else stop
        for lo in range(start, stop, RANGE_BATCH):
            yield from self.read_many(np.arange(lo, min(lo + RANGE_BATCH, stop)), fields)
