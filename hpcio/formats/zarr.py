"""Zarr v3 stores: one group per writer ("part"), the columnar layout of
:mod:`hpcio.formats._layout`, blosc compression and the sharding codec.

Layout (``docs/formats/zarr.md``)::

    store/zarr.json                   root group; attribute "hpcio": {version, num_samples,
                                      parts: [{name, num_samples, files}], fields}
    store/part-00000/zarr.json        part group; attribute "hpcio": {version, num_samples, fields[, files]}
    store/part-00000/<field>          fixed field: array (n, *shape), chunks along samples
    store/part-00000/<field>/offsets  ragged field: uint64 (n + 1,)
    store/part-00000/<field>/data     ragged field: uint8 (total bytes,)

Each writer (MPI rank) writes its own part, so it owns every shard it touches and never
read-modify-writes another rank's object; :func:`finalize` (rank 0, after all parts are
closed) publishes the root.  Under the converter's sharded-writing hook each converter
shard ``k`` is part ``k`` and :func:`merge_index` publishes the root from the parts'
descriptions.  Shards are written even when they equal the fill value, and
the reader checks that every shard it reads exists: a missing shard is an error, not a
run of zeros.  ``files`` records each part's data files (:mod:`._zarr_files`): a node
cache reads a store one part per cache shard.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._paths import resolve_inside
from ..errors import (
    CorruptShardError,
    InvalidArgumentError,
    MissingDependencyError,
    OptionError,
    PathExistsError,
    SchemaError,
    ShardNotFoundError,
)
from ..registry import Capabilities
from . import _layout, _zarr_files, base
from ._zarr_files import record_digests
from .base import Writer as _Writer, files_bytes, inspect_report, sample_starts, verify_samples
from .reports import InspectReport, VerifyReport

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "finalize", "merge_index", "record_digests",
           "load_libraries", "inspect", "verify"]

NAME = "zarr"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)

PART_PATTERN = "part-%05d"
# What zarr raises on a damaged store (its own errors, json's, its codecs'); MemoryError
# is left out: running out of memory is not corruption.
_ZARR_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError, OSError,
                NotImplementedError, OverflowError, ZeroDivisionError)


def _zarr():
    try:
        import zarr
    except ImportError as exc:
        raise MissingDependencyError(
            "the zarr format needs zarr>=3: pip install zarr (or pip install 'hpcio[formats]')"
        ) from exc
    return zarr


def load_libraries() -> None:
    """Import zarr now rather than when the first file is opened (:func:`hpcio.registry.load_libraries`)."""
    _zarr()


def _read_attrs(path: str) -> dict | None:
    try:
        with open(os.path.join(path, "zarr.json"), "rb") as f:
            meta = json.load(f)
    except (FileNotFoundError, NotADirectoryError, ValueError, RecursionError):
        return None
    attrs = meta.get("attributes") if isinstance(meta, dict) else None
    return attrs.get("hpcio") if isinstance(attrs, dict) else None


def _read_layout(path: str) -> dict:
    """The root's ``hpcio`` layout, its shape checked before anything indexes it: a
    damaged ``zarr.json`` is a corrupt store, not a KeyError deep in the reader."""
    layout = _read_attrs(path)
    if layout is None:
        if not os.path.isdir(path):
            raise ShardNotFoundError("no Zarr store", path=path)
        raise SchemaError("Zarr group has no 'hpcio' layout attribute (not written by hpcio, "
                          "or the writers were not finalized)", path=path)
    problem = _layout_problem(layout)
    if problem:
        raise CorruptShardError(f"the 'hpcio' layout attribute is damaged: {problem}",
                                path=os.path.join(path, "zarr.json"))
    return layout


def _count(value) -> bool:
    return type(value) is int and value >= 0


def _spec_ok(spec) -> bool:
    if not isinstance(spec, dict) or spec.get("storage") not in ("fixed", "ragged") \
            or not isinstance(spec.get("kind"), str):
        return False
    if spec["storage"] == "ragged":
        return True
    shape = spec.get("shape")
    if spec["kind"] == "ndarray" and not (isinstance(shape, list) and all(map(_count, shape))):
        return False
    try:  # a fixed field's values are cast to its dtype
        return isinstance(spec.get("dtype"), str) and np.dtype(spec["dtype"]) is not None
    except (TypeError, ValueError):
        return False


def _layout_problem(layout) -> str | None:
    if not isinstance(layout, dict) or not {"version", "num_samples", "parts", "fields"} <= set(layout):
        return "not an object with version, num_samples, parts and fields"
    if not _count(layout["num_samples"]):
        return f"num_samples {layout['num_samples']!r} is not a count"
    fields, parts = layout["fields"], layout["parts"]
    if not isinstance(fields, dict) or not all(map(_spec_ok, fields.values())):
        return "fields is not a map of field specs with a storage, a kind and (fixed) a dtype and shape"
    if not isinstance(parts, list) or not all(
            isinstance(p, dict) and isinstance(p.get("name"), str) and _count(p.get("num_samples"))
            for p in parts):
        return "parts is not a list of {name, num_samples}"
    return _zarr_files.parts_problem(parts)


def sniff(path) -> bool:
    path = os.fspath(path)
    return os.path.isdir(path) and _read_attrs(path) is not None


def finalize(path) -> dict:
    """Publish the root metadata of a store whose parts are all closed.

    Parts are found by name; their fields must agree.  Returns the root layout.
    """
    path = os.fspath(path)
    zarr = _zarr()
    names = sorted(n for n in os.listdir(path) if n.startswith("part-")
                   and os.path.isdir(os.path.join(path, n)))
    parts, fields = [], None
    for name in names:
        meta = _read_attrs(os.path.join(path, name))
        if meta is None:
            raise CorruptShardError("part has no hpcio layout metadata (not closed?)",
                                    path=os.path.join(path, name))
        if meta["num_samples"] and fields is not None and meta["fields"] != fields:
            raise SchemaError(f"part fields {sorted(meta['fields'])} differ from {sorted(fields)}",
                              path=os.path.join(path, name))
        if meta["num_samples"] and fields is None:
            fields = meta["fields"]
        parts.append(_zarr_files.part_entry(name, meta))
    layout = {"version": _layout.LAYOUT_VERSION, "fields": fields or {},
              "num_samples": sum(p["num_samples"] for p in parts), "parts": parts}
    root = zarr.open_group(path, mode="a")
    root.attrs["hpcio"] = layout
    return layout


def merge_index(directory, parts, **options) -> dict:
    """Publish the root group of a store written under the sharded-writing hook.

    ``parts`` are the :meth:`Writer.index_part` descriptions in shard order, with the
    record of their files when the converter added it (:func:`record_digests`).  Parts
    that received no sample are left out of the layout (they hold no arrays); the others
    must exist and agree on their fields.  The root ``zarr.json`` is rendered by zarr into a
    scratch directory and renamed into place, so it appears whole.  Returns the layout.
    """
    directory = os.fspath(directory)
    zarr = _zarr()
    kept, fields = [], None
    for part in parts:
        if not part["num_samples"]:
            continue
        where = resolve_inside(directory, part["name"], what="Zarr part name", source=directory)
        if _read_attrs(where) is None:
            raise ShardNotFoundError("Zarr part named by an index part is missing", path=where)
        if fields is not None and part["fields"] != fields:
            raise SchemaError(_layout.field_conflict(part["fields"], fields), path=where)
        fields = part["fields"] if fields is None else fields
        kept.append(_zarr_files.part_entry(part["name"], part))
    layout = {"version": _layout.LAYOUT_VERSION, "fields": fields or {},
              "num_samples": sum(p["num_samples"] for p in kept), "parts": kept}
    scratch = os.path.join(directory, f".root.tmp.{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        zarr.open_group(scratch, mode="w").attrs["hpcio"] = layout
        rendered = os.path.join(scratch, "zarr.json")
        with open(rendered, "rb") as f:
            os.fsync(f.fileno())
        os.replace(rendered, os.path.join(directory, "zarr.json"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return layout


class Writer(_Writer):
    """Writes one part of a Zarr v3 store.

    Parameters
    ----------
    part
        Part number for parallel writers (one per rank); each then calls
        :func:`finalize` once all are closed.  None (default): a single writer that
        writes part 0 and publishes the root itself.
    chunk_samples, shard_samples
        Samples per chunk (the unit of compression and of a random read) and per shard
        (the unit of a file) for fixed fields and offsets.
    chunk_bytes, shard_bytes
        The same for the flat bytes of ragged fields.
    compression
        ``"zstd"`` (default), ``"lz4"`` or None: blosc with byte shuffle.
    clevel
        blosc compression level.
    checksum
        End every chunk with Zarr v3's ``crc32c`` codec (default), which zarr checks on
        every read, so a damaged chunk raises instead of returning wrong values.  The
        ``zarr.json`` metadata carries none.
    schema
        ``{field: kind or spec}`` overriding what the first sample implies, e.g.
        ``{"emb": "npy"}`` for arrays of varying shape.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.contract`): write part ``shard_id``
        only, without the root group; :meth:`index_part` then describes it for
        :func:`merge_index`.
    """

    def __init__(self, path, part: int | None = None, chunk_samples: int = 1024,
                 shard_samples: int = 65536, chunk_bytes: int = 1 << 20,
                 shard_bytes: int = 64 << 20, compression: str | None = "zstd",
                 clevel: int = 5, checksum: bool = True, schema: Mapping | None = None,
                 shard_id: int | None = None, num_shards: int | None = None, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unknown Zarr writer options: {', '.join(options)}")
        # under the hook the part is all this writer makes: the root belongs to merge_index
        self.hooked = shard_id is not None
        if self.hooked:
            part = shard_id
        if shard_samples % chunk_samples or shard_bytes % chunk_bytes:
            raise InvalidArgumentError("shard sizes must be multiples of the chunk sizes")
        self.zarr = _zarr()
        self.single = part is None
        self.part_name = PART_PATTERN % (part or 0)
        self.created_dir = not os.path.exists(self.path)
        self.created_root = False
        self.part_path = os.path.join(self.path, self.part_name)
        if os.path.exists(self.part_path):
            raise PathExistsError(f"{self.part_path} already exists")
        self.chunk_samples, self.shard_samples = chunk_samples, shard_samples
        self.chunk_bytes, self.shard_bytes = chunk_bytes, shard_bytes
        if compression is None:
            self.compressors: list = []
        elif compression in ("zstd", "lz4"):
            from zarr.codecs import BloscCodec

            self.compressors = [BloscCodec(cname=compression, clevel=clevel, shuffle="shuffle")]  # type: ignore[arg-type]
        else:
            raise InvalidArgumentError(f"unknown Zarr compression {compression!r}: use zstd, lz4 or None")
        if checksum:
            from zarr.codecs import Crc32cCodec

            self.compressors.append(Crc32cCodec())
        self.buffer = _layout.ColumnBuffer(self.path, schema)
        self.group: Any = None
        self.arrays: dict = {}
        self.pending: dict[str, np.ndarray] = {}  # ragged bytes not yet filling a shard
        self.rows = 0  # samples written to arrays
        self.data_written: dict[str, int] = {}
        self.last_offset: dict[str, int] = {}

    def _create(self):
        zarr = self.zarr
        if self.hooked:
            os.makedirs(self.path, exist_ok=True)
        elif self.single and self.created_dir:
            zarr.open_group(self.path, mode="w")
        elif not os.path.exists(os.path.join(self.path, "zarr.json")):
            os.makedirs(self.path, exist_ok=True)
            self.created_root = True
            zarr.open_group(self.path, mode="a")
        self.group = zarr.open_group(self.part_path, mode="w-")
        cfg = {"write_empty_chunks": True}
        for name, spec in self.buffer.fields.items():
            if spec["storage"] == "fixed":
                shape = spec["shape"]
                self.arrays[name] = self.group.create_array(
                    name, shape=(0, *shape), dtype=np.dtype(spec["dtype"]),
                    chunks=(self.chunk_samples, *shape), shards=(self.shard_samples, *shape),
                    compressors=self.compressors, fill_value=0, config=cfg)
            else:
                sub = self.group.create_group(name)
                offsets = sub.create_array(
                    "offsets", shape=(1,), dtype="uint64", chunks=(self.chunk_samples,),
                    shards=(self.shard_samples,), compressors=self.compressors, fill_value=0,
                    config=cfg)
                data = sub.create_array(
                    "data", shape=(0,), dtype="uint8", chunks=(self.chunk_bytes,),
                    shards=(self.shard_bytes,), compressors=self.compressors, fill_value=0,
                    config=cfg)
                self.arrays[name] = (offsets, data)
                self.pending[name] = np.zeros(0, np.uint8)
                self.data_written[name] = 0
                self.last_offset[name] = 0

    def write(self, sample: Mapping) -> None:
        self.buffer.add(sample, self.count)
        self.count += 1
        if self.buffer.count >= self.shard_samples:
            self._flush()

    def _flush(self, final: bool = False):
        if self.buffer.fields is None:
            return
        if self.group is None:
            self._create()
        n = self.buffer.count
        columns = self.buffer.take()
        lo, hi = self.rows, self.rows + n
        for name, spec in self.buffer.fields.items():
            if spec["storage"] == "fixed":
                arr = self.arrays[name]
                arr.resize((hi, *spec["shape"]))
                if n:
                    arr[lo:hi] = columns[name]
                continue
            offsets, data = self.arrays[name]
            lengths, flat = columns[name]
            ends = self.last_offset[name] + np.cumsum(lengths, dtype=np.uint64)
            offsets.resize((hi + 1,))
            if n:
                offsets[lo + 1 : hi + 1] = ends
                self.last_offset[name] = int(ends[-1])
            pending = np.concatenate([self.pending[name], flat])
            # whole data shards only, so a later flush never rewrites a shard
            take = len(pending) if final else len(pending) // self.shard_bytes * self.shard_bytes
            if take:
                start = self.data_written[name]
                data.resize((start + take,))
                data[start : start + take] = pending[:take]
                self.data_written[name] = start + take
            self.pending[name] = pending[take:]
        self.rows = hi

    def close(self) -> None:
        with self.aborting():
            if self.buffer.fields is None:  # no sample at all: an empty store
                self.buffer.fields = {}
            self._flush(final=True)
            if self.group is None:
                self._create()
            meta = {"version": _layout.LAYOUT_VERSION, "num_samples": self.rows, "fields": self.buffer.fields}
            if not self.hooked:  # under the hook the converter records them as it publishes the part
                meta[_zarr_files.RECORD] = _zarr_files.part_files(self.part_path)
            self.group.attrs["hpcio"] = meta
            if self.single:
                finalize(self.path)

    def index_part(self) -> dict:
        """The part written under the sharded-writing hook: name, sample count, fields."""
        return {"name": self.part_name, "num_samples": self.rows, "fields": self.buffer.fields}

    def abort(self) -> None:
        shutil.rmtree(self.part_path, ignore_errors=True)
        if self.created_dir:
            shutil.rmtree(self.path, ignore_errors=True)
        elif self.created_root:
            base.remove_files([os.path.join(self.path, "zarr.json")])


def _check_array(name: str, arr, dtype, meta_path: str) -> None:
    """Refuse array metadata that would read back other values than the writer stored:
    the data type the layout records, little-endian bytes, ``/``-separated chunk keys
    and the sharding codec with non-empty chunks, as :class:`Writer` writes them.  An
    edited ``zarr.json`` (another separator, type or byte order) otherwise reads the same
    bytes as different values, or fails deep in zarr with a ZeroDivisionError."""
    def refuse(what: str):
        return CorruptShardError(f"array {name!r}: {what}; hpcio reads the layout its writer makes", path=meta_path)

    try:
        with open(meta_path, "rb") as f:
            meta = json.load(f)
        encoding = meta.get("chunk_key_encoding") or {}
        separator = (encoding.get("configuration") or {}).get("separator", "/")
        codecs = meta.get("codecs") or []
        sharding = next((c for c in codecs if c.get("name") == "sharding_indexed"), None)
        outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise refuse(f"unreadable metadata ({type(exc).__name__}: {exc})") from None
    if encoding.get("name", "default") != "default" or separator != "/":
        raise refuse(f"chunk keys {encoding.get('name')!r} with separator {separator!r}, not 'default' with '/'")
    if sharding is None:
        raise refuse("no sharding codec")
    inner = (sharding.get("configuration") or {})
    if not all(isinstance(v, int) and v > 0 for v in [*outer, *(inner.get("chunk_shape") or [0])]):
        raise refuse(f"chunk shape {outer} / {inner.get('chunk_shape')} has an empty chunk")
    endians = [(c.get("configuration") or {}).get("endian") for c in (inner.get("codecs") or [])
               if c.get("name") == "bytes"]
    if any(e not in (None, "little") for e in endians):
        raise refuse(f"bytes stored {endians[0]}-endian, not little-endian")
    if dtype is not None and np.dtype(arr.dtype).str != np.dtype(dtype).str:
        raise refuse(f"data type {np.dtype(arr.dtype).str}, the layout records {np.dtype(dtype).str}")


class _Part:
    """The arrays of one part, with ragged offsets held in memory.

    Opening reads only metadata (``zarr.json``); the offsets are read and checked at the
    part's first read, so a store opens without reading a chunk file (through a node
    cache, a link to the shared tier until fetched).  zarr opens a chunk file on each
    read and keeps no descriptor: after :meth:`release` (arrays dropped, reopened from
    their metadata) a read opens whatever file the path names then."""

    def __init__(self, store: str, name: str, fields: dict, n: int, zarr):
        root_meta = os.path.join(store, "zarr.json")
        self.path = resolve_inside(store, name, what="Zarr part name", source=root_meta)
        self.n = n
        self.fields = fields
        self.zarr = zarr
        self.offsets: dict | None = None  # ragged field -> offsets, from the first read on
        self.checked: set = set()
        if not os.path.isdir(self.path):
            raise ShardNotFoundError("Zarr part is missing", path=self.path)
        self.arrays: dict | None = self._open_arrays()

    def _open_arrays(self) -> dict:
        """Fixed field -> array, ragged field -> (offsets, data), their metadata checked."""
        arrays: dict = {}
        for field, spec in self.fields.items():
            if spec["storage"] == "fixed":
                arr = self._open(field, spec.get("dtype"))
                if arr.shape[0] != self.n:
                    raise CorruptShardError(
                        f"field {field!r}: array holds {arr.shape[0]} samples, layout says {self.n}",
                        path=self.path)
                arrays[field] = arr
            else:
                arrays[field] = (self._open(f"{field}/offsets", "<u8"), self._open(f"{field}/data", "|u1"))
        return arrays

    def _opened(self) -> tuple[dict, dict]:
        """The arrays (opened again after :meth:`release`) and the ragged offsets, read
        and checked on the part's first read."""
        arrays = self.arrays
        if arrays is None:
            arrays = self.arrays = self._open_arrays()
        offsets = self.offsets
        if offsets is None:
            offsets = {}
            for field, spec in self.fields.items():
                if spec["storage"] == "ragged":
                    array, data = arrays[field]
                    self._require(f"{field}/offsets", array, 0, array.shape[0])
                    table = self._get(f"{field}/offsets", array, slice(None), 0)
                    _layout.check_offsets(table, self.n, data.shape[0], field=field, path=self.path)
                    offsets[field] = table
            self.offsets = offsets
        return arrays, offsets

    def release(self) -> None:
        """Drop zarr's arrays of the part; the checked offsets stay (a node cache checks a
        fetched file's xxh3_64, so they still describe it)."""
        self.arrays = None

    def _open(self, name, dtype=None):
        where = resolve_inside(self.path, name, what="Zarr array name",
                               source=os.path.join(os.path.dirname(self.path), "zarr.json"))
        try:
            arr = self.zarr.open_array(where, mode="r")
        except FileNotFoundError:
            raise ShardNotFoundError(f"array {name!r} is missing", path=self.path) from None
        except _ZARR_ERRORS as exc:  # a damaged zarr.json: zarr raises json's, its own, ...
            raise CorruptShardError(f"array {name!r} cannot be opened: {type(exc).__name__}: {exc}",
                                    path=os.path.join(self.path, name, "zarr.json")) from None
        _check_array(name, arr, dtype, os.path.join(where, "zarr.json"))
        return arr

    def _require(self, name: str, arr, lo: int, hi: int, sample: int | None = None):
        """Every shard of ``arr`` holding rows ``lo..hi`` must exist: zarr would read a
        missing one as fill values."""
        if hi <= lo:
            return
        per = arr.shards[0]
        tail = "/0" * (arr.ndim - 1)
        for k in range(lo // per, (hi - 1) // per + 1):
            key = (name, k)
            if key in self.checked:
                continue
            shard = os.path.join(self.path, name, "c", f"{k}{tail}")
            if not os.path.exists(shard):
                raise ShardNotFoundError(f"array {name!r} is missing shard {k}",
                                         path=shard, sample=sample)
            self.checked.add(key)

    def _get(self, name, arr, selection, sample):
        # zarr raises whatever its codecs raise on damaged chunks (checksums, blosc)
        try:
            return arr[selection]
        except _ZARR_ERRORS as exc:
            raise CorruptShardError(f"array {name!r} cannot be decoded: {exc}",
                                    path=self.path, sample=sample) from None

    def read_rows(self, rows: np.ndarray, fields, sample_base: int) -> list[dict]:
        out = [dict() for _ in range(len(rows))]
        if not len(rows):
            return out
        arrays, offsets = self._opened()
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        for field in fields:
            spec = self.fields[field]
            arr = arrays[field]
            if spec["storage"] == "fixed":
                for lo, hi, _ in _layout.merged_spans(sorted_rows, sorted_rows + 1, arr.chunks[0]):
                    self._require(field, arr, lo, hi, sample_base + lo)
                values = self._get(field, arr.oindex, sorted_rows, sample_base + int(sorted_rows[0]))
                for k, pos in enumerate(order):
                    out[pos][field] = _layout.fixed_value(spec, values[k])
                continue
            arr = arr[1]
            table = offsets[field]
            starts, ends = table[rows], table[rows + 1]
            for lo, hi, members in _layout.merged_spans(starts, ends, arr.chunks[0]):
                self._require(f"{field}/data", arr, lo, hi, sample_base + int(rows[members[0]]))
                first = sample_base + int(rows[members[0]])
                span = self._get(f"{field}/data", arr, slice(lo, hi), first).tobytes() if hi > lo else b""
                for pos, value in _layout.span_values(spec, span, lo, members, starts, ends, field=field,
                                                      samples=sample_base + rows, path=self.path):
                    out[pos][field] = value
        return out


class Reader(_layout.LayoutReader):
    """Random-access reader of a Zarr v3 store written by :class:`Writer`."""

    def __init__(self, path, validate_hashes: bool = False, **options):
        # validate_hashes is accepted as every format takes it: each chunk's crc32c is
        # checked on every read whatever it says.
        super().__init__(path)
        zarr = _zarr()
        layout = _read_layout(self.path)
        self.layout = layout
        self.layout_fields = layout["fields"]
        self.fields = list(layout["fields"])
        self.parts = [_Part(self.path, p["name"], layout["fields"], p["num_samples"], zarr)
                      for p in layout["parts"]]
        self.cum = sample_starts([p.n for p in self.parts])

    @classmethod
    def check_node_cache(cls, path, options) -> None:
        """A node cache reads a store whose root records each part's files
        (:mod:`._zarr_files`), one cache shard per part."""
        path = os.fspath(path)
        _zarr_files.check_node_cache(path, _read_layout(path))

    def files_of_shards(self) -> list[list[base.ShardFile]] | None:
        """Each part's data files with the bytes and xxh3_64 the root records (None when
        it records none for some part)."""
        return _zarr_files.files_of_parts(self.path, self.layout["parts"], [p.path for p in self.parts])

    def release_shards(self, shards) -> None:
        """Drop zarr's arrays of the parts ``shards``: the next read opens them again."""
        for k in shards:
            self.parts[int(k)].release()


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> InspectReport:
    """Samples, parts and fields of a Zarr store, from its root layout alone."""
    layout = _read_layout(os.fspath(path))
    return inspect_report(
        NAME, path, samples=layout["num_samples"], shards=len(layout["parts"]),
        fields={k: _layout.describe(spec) for k, spec in layout["fields"].items()},
        stored_bytes=files_bytes([os.fspath(path)]),
        details={"layout_version": layout["version"],
                 "parts": {p["name"]: p["num_samples"] for p in layout["parts"]}})


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Decode every sample of every part; zarr compares the checksums of the shard
    indexes as it reads them, and a mismatch is reported as a damaged array."""
    return verify_samples(NAME, path, lambda: Reader(path),
                          lambda p: _read_layout(os.fspath(p))["parts"],
                          max_errors=max_errors)
