"""Datasets saved by Hugging Face ``datasets.Dataset.save_to_disk``, read as a source.

``save_to_disk`` writes a directory holding ``dataset_info.json`` (features, sizes),
``state.json`` (``_data_files``: the data files in order, plus the dataset's format
settings) and the rows in ``data-NNNNN-of-MMMMM.arrow`` files, each an Arrow IPC
*stream* whose schema carries the features again as ``huggingface`` metadata.  The
files are memory-mapped and rows taken from them without decoding anything else;
format settings (``set_format`` columns) are views and are ignored: every stored column
is read.  Image and audio columns are ``{"bytes", "path"}`` structs, which the field
decoder turns into bytes (:mod:`.fields`).

A ``DatasetDict`` saved the same way is a directory of such directories (one per split,
beside ``dataset_dict.json``); the converter expands it to its splits.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..errors import (
    CorruptShardError,
    KeyNotFoundError,
    MissingDependencyError,
    OptionError,
    SchemaError,
    ShardNotFoundError,
)
from ..formats import base

__all__ = ["NAME", "ALIASES", "sniff", "Reader", "load_libraries"]

NAME = "huggingface"
ALIASES = ("hf",)
STATE = "state.json"
INFO = "dataset_info.json"


def _pa():
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise MissingDependencyError(
            "reading a Hugging Face dataset saved to disk needs pyarrow: pip install pyarrow") from exc
    return pa


def load_libraries() -> None:
    _pa()


def sniff(path) -> bool:
    """True for a directory written by ``Dataset.save_to_disk``."""
    path = os.fspath(path)
    return os.path.isfile(os.path.join(path, STATE)) and os.path.isfile(os.path.join(path, INFO))


def data_files(path: str) -> list[str]:
    """The data files of the saved dataset at ``path``, in row order (``state.json``)."""
    try:
        with open(os.path.join(path, STATE), encoding="utf-8") as f:
            state = json.load(f)
        names = [entry["filename"] for entry in state["_data_files"]]
    except FileNotFoundError:
        raise ShardNotFoundError("not a saved Hugging Face dataset: no state.json", path=path) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptShardError(f"state.json does not list the data files: {exc!r}",
                                path=os.path.join(path, STATE)) from None
    return [os.path.join(path, name) for name in names]


class Reader(base.BatchReader):
    """Random access to the rows of a saved Hugging Face dataset (see the module)."""

    def __init__(self, path, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unexpected options for a Hugging Face dataset: {sorted(options)}")
        pa = _pa()
        self.paths = data_files(self.path)
        self._maps = []
        tables = []
        for p in self.paths:
            try:
                source = pa.memory_map(p)
            except FileNotFoundError:
                raise ShardNotFoundError("data file listed in state.json is missing", path=p) from None
            self._maps.append(source)
            try:
                tables.append(pa.ipc.open_stream(source).read_all())
            except (pa.ArrowInvalid, OSError) as exc:
                raise CorruptShardError(f"not an Arrow IPC stream: {exc}", path=p) from None
        for p, table in zip(self.paths[1:], tables[1:]):
            if not table.schema.equals(tables[0].schema, check_metadata=False):
                raise SchemaError(f"columns {table.schema.names} differ from the first data file's "
                                  f"{tables[0].schema.names}", path=p)
        self.table = pa.concat_tables(tables) if tables else pa.table({})
        self.schema = self.table.schema
        self.fields = list(self.schema.names)
        self.cum = np.concatenate([[0], np.cumsum([t.num_rows for t in tables], dtype=np.int64)]).astype(np.int64)

    def __len__(self) -> int:
        return self.table.num_rows

    def file_row(self, i: int) -> tuple[str, int]:
        """The data file holding sample ``i`` and its row there (for error messages)."""
        k = int(np.searchsorted(self.cum, i, side="right")) - 1
        return self.paths[k], i - int(self.cum[k])

    def read_many(self, indices, fields=None) -> list:
        fields = self.fields if fields is None else list(fields)
        missing = [f for f in fields if f not in self.fields]
        if missing:
            raise KeyNotFoundError(f"{self.path} has no field {missing[0]!r}")
        rows = self.table.select(fields).take(np.asarray(indices, dtype=np.int64))
        columns = [rows.column(f).to_pylist() for f in fields]
        return [dict(zip(fields, values)) for values in zip(*columns)] if fields else [{} for _ in range(len(rows))]

    def sample_nbytes(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Bytes of the rows ``start`` to ``stop`` (the end when None): their binary and
        string values (image bytes, text) and an even share of the fixed-width columns,
        so shards balance by what they hold.  A row's size does not depend on the window
        it is asked in."""
        rows = range(len(self))[start:stop]
        sizes = np.zeros(len(rows), dtype=np.int64)
        for column in self.table.columns:
            at = 0  # first row of the chunk
            for chunk in column.chunks:
                lo, hi = max(rows.start - at, 0), min(rows.stop - at, len(chunk))
                if lo < hi:
                    sizes[at + lo - rows.start:at + hi - rows.start] += _value_bytes(chunk, lo, hi)
                at += len(chunk)
        return sizes

    def close(self) -> None:
        self.table = None
        for source in self._maps:
            source.close()
        self._maps = []


def _value_bytes(array, lo: int, hi: int) -> np.ndarray:
    """Bytes each of the rows ``lo`` to ``hi`` of ``array`` holds: the lengths of binary
    and string values, the sum over struct fields, else the whole array's bytes shared
    out evenly over its rows (the first ones taking the remainder)."""
    pa = _pa()
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_struct(kind):
        return sum((_value_bytes(array.field(k), lo, hi) for k in range(kind.num_fields)),
                   np.zeros(hi - lo, dtype=np.int64))
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind) \
            or pa.types.is_large_string(kind):
        lengths = pc.binary_length(array.slice(lo, hi - lo)).fill_null(0)
        return lengths.to_numpy(zero_copy_only=False).astype(np.int64)
    return base.even_sizes(array.nbytes, len(array), lo, hi)
