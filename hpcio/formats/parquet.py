"""Parquet files (pyarrow): one column per field, row groups as the unit of reading.

Column types follow the value kinds of :mod:`hpcio.formats._values`: bytes ->
``large_binary``, str -> ``large_string``, int -> ``int64``, float -> ``float64``,
JSON -> ``large_string`` holding compact JSON, arrays -> ``large_binary`` holding
``.npy`` bytes, lists of bytes -> ``list<large_binary>``, mappings holding bytes ->
``large_binary`` (:func:`~hpcio.formats._values.encode_bytes_mapping`).  The kind of
each column is kept in the field metadata (``hpcio.kind``) so values come back with
their type; files written by other tools are read with pyarrow's own conversion
(``to_pylist``).  A reader takes one file or a directory of ``.parquet`` files, reads only the projected columns, and decodes whole row groups
(kept up to a byte budget) so ``read_many`` is a batch ``take``.

The writer records each file's size, xxh3_64, row groups and schema in its hash manifest
(:mod:`hpcio.formats._parquet_manifest`); when the manifest records every file, a reader
opens each file on its first read (checking its footer then), so opening reads no file's
bytes, which is what lets a node cache (:class:`hpcio.NodeCache`) read the files.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping

import numpy as np

from .. import tuning
from .._published import Version
from ..errors import (
    CorruptShardError,
    DecodeError,
    InvalidArgumentError,
    KeyNotFoundError,
    MissingDependencyError,
    OptionError,
    SchemaError,
)
from ..registry import Capabilities
from . import _parquet_manifest as _manifest, _values
from ._checksums import Manifest, manifest_path
from ._parquet_manifest import merge_index
from .base import (
    BatchReader,
    FileWriter,
    PendingFiles,
    ShardFile,
    by_shard,
    files_bytes,
    first_file_head,
    inspect_report,
    inverse_permutation,
    locate,
    manifest_shard_files,
    sample_starts,
    shard_files,
    verify_samples,
)
from .reports import InspectReport, VerifyReport

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "list_files", "load_libraries",
           "merge_index", "inspect", "verify"]

NAME = "parquet"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)
SHARD_PATTERN = "part-%06d.parquet"
_KIND_KEY = b"hpcio.kind"
# Decoded row groups a reader keeps (Arrow bytes).  Each DataLoader worker has its own
# reader, so this is per worker.
CACHE_BYTES = 256 << 20
# Rows a sequential pass decodes into samples at a time, at most.
ITER_ROWS = 4096


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError(
            "the parquet format needs pyarrow: pip install pyarrow (or pip install 'hpcio[formats]')"
        ) from exc
    return pa, pq


_pool_lock = threading.Lock()
_pool_users = 0
_pool_before = None


def use_jemalloc() -> Callable[[], None]:
    """Make jemalloc Arrow's default memory pool until the returned function is called,
    unless the user chose a pool (``ARROW_DEFAULT_MEMORY_POOL``) or pyarrow has no
    jemalloc.  Uses that overlap (nested, or on other threads) share one switch: the pool
    before the first is put back after the last.

    Arrow's default pool on Linux, mimalloc, gives each decoding thread segments of its
    own, backed by transparent huge pages, so it touches several times the memory it
    holds; memory touched for the first time is what costs (page faults, and on a virtual
    machine the host backing each page).  Called only through :mod:`hpcio.tuning`, on the
    user's request (docs/performance.md).
    """
    global _pool_users, _pool_before
    pa, _pq = _pa()
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return lambda: None
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc keeps its own default
        return lambda: None
    with _pool_lock:
        if _pool_users == 0:
            _pool_before = pa.default_memory_pool()
            pa.set_memory_pool(pool)
        _pool_users += 1
    done = []

    def undo() -> None:
        global _pool_users, _pool_before
        with _pool_lock:
            if done:
                return
            done.append(True)
            _pool_users -= 1
            if _pool_users == 0:
                pa.set_memory_pool(_pool_before)
                _pool_before = None

    return undo


@contextlib.contextmanager
def _jemalloc_allocations():
    """Arrow's allocations inside the block come from jemalloc (:func:`use_jemalloc`) if
    the user opted in (``hpcio.tune(arrow_jemalloc=True)``).  A file opened inside keeps
    the pool for its decoded row groups; the buffers it reads them from are allocated
    when read."""
    undo = tuning.switch_arrow_pool()
    try:
        yield
    finally:
        undo()


def load_libraries() -> None:
    """Import pyarrow now rather than when the first file is opened (:func:`hpcio.registry.load_libraries`)."""
    _pa()


def list_files(path) -> list[str]:
    return shard_files(path, (".parquet",), "Parquet")


def sniff(path) -> bool:
    return first_file_head(list_files, path, 4) == b"PAR1"


def _arrow_type(pa, kind):
    return {"bytes": pa.large_binary(), "str": pa.large_string(), "int": pa.int64(),
            "float": pa.float64(), "json": pa.large_string(), "ndarray": pa.large_binary(),
            "bytes_list": pa.list_(pa.large_binary()), "bytes_mapping": pa.large_binary()}[kind]


class Writer(FileWriter):
    """Writes ``path/part-%06d.parquet`` (or one file when ``path`` ends in ``.parquet``).

    Parameters
    ----------
    row_group_size
        Rows per row group (the unit of a read).
    max_count
        Rows per file before a new file starts (directory output only).
    compression
        Parquet codec name (``"zstd"`` default, ``"snappy"``, ``"none"``...).
    checksum
        Write the CRC-32 of every data page (default), which the reader checks: a
        damaged page raises instead of returning wrong values.  The footer carries none.
    schema
        ``{field: kind}`` overriding what the first sample implies.
    hashes
        ``["xxh3_64"]`` (None, the default): ``hashes.json`` beside the files (or
        ``<file>.hashes.json``) records each file's size, xxh3_64, row groups and schema
        (:mod:`hpcio.formats._parquet_manifest`), with which hpcio's reader opens no file
        at open, ``hpcio verify`` checks each file and a node cache what it fetches;
        ``[]`` writes the files alone.
        The files are the same either way.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.contract`): every sample goes into
        the single file ``part-<shard_id>.parquet`` (no roll-over, no manifest);
        :meth:`index_part` then describes it for :func:`merge_index`.
    """

    def __init__(self, path, row_group_size: int = 1024, max_count: int = 1_000_000,
                 compression: str = "zstd", checksum: bool = True, schema: Mapping | None = None,
                 hashes=None, shard_id: int | None = None, num_shards: int | None = None, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unknown Parquet writer options: {', '.join(options)}")
        self.pa, self.pq = _pa()
        self.manifest = Manifest(hashes, "Parquet")
        self.shard_id = shard_id
        if shard_id is not None:
            max_count = float("inf")  # type: ignore[assignment]
        self.single = self.path.endswith(".parquet") and shard_id is None
        self.pending = PendingFiles(None if self.single else self.path)
        self.row_group_size = row_group_size
        self.max_count = max_count
        self.compression = compression
        self.checksum = checksum
        self.kinds: dict[str, str] | None = dict(schema) if schema else None
        self.rows: list[Mapping] = []
        self.file = None  # the ParquetWriter of the file being written
        self.sink = None  # the file it writes into
        self.file_rows = 0
        self.file_number = 0 if shard_id is None else shard_id
        self.final: str | None = None  # the name the file being written gets
        self.file_names: list[str] = []

    def _schema(self):
        pa = self.pa
        return pa.schema([pa.field(name, _arrow_type(pa, kind), nullable=True,
                                   metadata={_KIND_KEY: kind.encode()})
                          for name, kind in self.kinds.items()])

    def _infer(self, sample, index):
        kinds = {}
        for name, value in sample.items():
            _values.check_field_name(name, sample=index, path=self.path)
            kinds[name] = _values.kind_of(value, field=name, sample=index, path=self.path)
        self.kinds = kinds

    def write(self, sample: Mapping) -> None:
        index = self.count
        if self.kinds is None:
            self._infer(sample, index)
        if sample.keys() != self.kinds.keys():
            raise SchemaError(f"sample fields {sorted(sample)} differ from the file's {sorted(self.kinds)}",
                              path=self.path, sample=index)
        row = {}
        for name, kind in self.kinds.items():
            value = sample[name]
            got = _values.kind_of(value, field=name, sample=index, path=self.path)
            if got != kind and not _values.widens(kind, got, value):
                raise SchemaError(f"field {name!r}: expected {kind}, got {got}", path=self.path, sample=index)
            if kind == "int" and not -(1 << 63) <= value < (1 << 63):
                raise SchemaError(f"field {name!r}: int {value} does not fit int64; pass "
                                  f"schema={{{name!r}: 'json'}}", path=self.path, sample=index)
            if kind == "json":
                value = _values.encode_json(value, field=name, sample=index, path=self.path).decode()
            elif kind == "ndarray":
                value = _values.encode_npy(value)
            elif kind == "bytes":
                value = bytes(value)
            elif kind == "bytes_list":
                value = [bytes(v) for v in value]
            elif kind == "bytes_mapping":
                value = _values.encode_bytes_mapping(value, field=name, sample=index, path=self.path)
            row[name] = value
        self.rows.append(row)
        self.count += 1
        if len(self.rows) >= self.row_group_size:
            self._flush()

    def _target(self):
        if self.single:
            return self.path
        return os.path.join(self.path, SHARD_PATTERN % self.file_number)

    def _flush(self):
        if self.kinds is None:
            self.kinds = {}
        if self.file is None:
            final = self._target()
            self.final = final
            sink = self.pa.OSFile(self.pending.add(final), "wb")
            try:
                self.file = self.pq.ParquetWriter(sink, self._schema(), compression=self.compression,
                                                  write_page_checksum=self.checksum)
            except BaseException:
                sink.close()  # the file is not left open for the abort to find
                raise
            self.sink = sink
            self.file_rows = 0
        if self.rows:
            table = self.pa.Table.from_pylist(self.rows, schema=self._schema())
            self.file.write_table(table, row_group_size=self.row_group_size)
            self.file_rows += len(self.rows)
            self.rows = []
        if not self.single and self.file_rows >= self.max_count:
            self.close_file()
            self.file_number += 1

    def close_file(self) -> None:
        """Close the file being written and its sink, which pyarrow leaves open when
        the footer cannot be written (a full disk)."""
        file, sink, self.file, self.sink = self.file, self.sink, None, None
        try:
            if file is not None:
                file.close()
        finally:
            if sink is not None:
                sink.close()
        if file is not None and self.final is not None:
            self.file_names.append(os.path.basename(self.final))
            if self.manifest.enabled:  # hashed once written, from the page cache
                entry = _manifest.file_entry(self.pq, PendingFiles.temp_name(self.final))
                self.manifest.files[os.path.basename(self.final)] = entry

    def close(self) -> None:
        with self.aborting():
            # an empty dataset is one file of no rows; an empty shard of the hook, no file
            if self.rows or (self.file is None and not self.pending and self.shard_id is None):
                self._flush()
            self.close_file()
            # under the hook merge_index writes the manifest of every rank's file
            self.publish(None if self.shard_id is not None else manifest_path(self.path, self.single))

    def index_part(self) -> dict | None:
        """The file written under the sharded-writing hook (name, sample count, column
        kinds and manifest entry); None when no sample was written (no file)."""
        if not self.file_names:
            return None
        part = {"file": self.file_names[0], "samples": self.count, "kinds": dict(self.kinds or {})}
        entry = self.manifest.files.get(self.file_names[0])
        return part if entry is None else {**part, "hashes": entry}


def _decode_column(column, kind: str | None, name: str, path: str, samples) -> list:
    """The column's values as Python objects; ``samples[k]`` is row k's sample index in
    ``path`` (for error messages)."""
    try:
        values = column.to_pylist()
    except ValueError as exc:  # a string value that is not UTF-8: name its sample
        bad = next((k for k in range(len(column)) if not _converts(column, k)), 0)
        raise DecodeError(f"field {name!r} cannot be decoded: {exc}", path=path,
                          sample=int(samples[bad]) if len(samples) else None) from None
    if kind == "json":
        return [v if v is None else _values.decode_json(v.encode(), field=name, path=path, sample=int(i))
                for i, v in zip(samples, values)]
    if kind == "ndarray":
        return [v if v is None else _values.decode_npy(v, field=name, path=path, sample=int(i))
                for i, v in zip(samples, values)]
    if kind == "bytes_mapping":
        return [v if v is None else _values.decode_bytes_mapping(v, field=name, path=path, sample=int(i))
                for i, v in zip(samples, values)]
    return values


def _converts(column, k: int) -> bool:
    try:
        column[k].as_py()
        return True
    except ValueError:
        return False


class Reader(BatchReader):
    """Random-access reader of Parquet files (one file or a directory of them).

    All files must have the same columns and types (SchemaError names the first file
    that differs).  Decoded row groups are kept, least recently used dropped first, up
    to ``cache_bytes`` of Arrow memory (default ``CACHE_BYTES``, or for an announced
    pass every row group it touches where they fit in half the memory available, see
    :meth:`will_read`; the last one read is always kept): a shuffled pass over a file
    that fits decodes each row group once, where a cache of a few row groups would
    decode one for nearly every batch.  A request for a run of rows that ends a row
    group is a pass over it (iteration, conversion), which will not come back: that row
    group is dropped, so a pass holds one row group, not the budget's worth of fresh
    memory.
    """

    def __init__(self, path, cache_bytes: int | None = None, validate_hashes: bool = False, **options):
        # validate_hashes is accepted as every format takes it: page checksums are
        # verified on every read whatever it says.
        super().__init__(path)
        pa, _pq = _pa()
        if cache_bytes is not None and cache_bytes < 0:
            raise InvalidArgumentError(f"cache_bytes must be >= 0, got {cache_bytes}")
        self._cache_given = cache_bytes is not None
        self.cache: OrderedDict = OrderedDict()
        self.cache_bytes = CACHE_BYTES if cache_bytes is None else cache_bytes
        self.paths = list_files(self.path)
        # Every file's row groups and schema from the hash manifest when it records them
        # all: then each file is opened on its first read, and its footer checked then.
        layouts = _manifest.recorded_layouts(self.paths)
        self.layouts = layouts if all(entry is not None for entry in layouts) else None
        self.version = Version(os.path.dirname(self.paths[0]) if self.paths else self.path)  # opened lazily
        self.files: list = [None] * len(self.paths)  # a file's ParquetFile, once opened
        self.groups = []  # (file index, row group in the file)
        counts: list[int] = []
        sizes: list[int] = []  # uncompressed bytes of each row group
        self.first_group = []  # each file's first row group
        schema = None
        try:
            for k, p in enumerate(self.paths):
                if self.layouts is not None:
                    entry = self.layouts[k]
                    arrow_schema = schema if schema is not None and entry["schema"] == self.layouts[0]["schema"] \
                        else _manifest.parse_schema(pa, entry["schema"], p)
                    rows, group_bytes = entry["row_groups"], entry["row_group_bytes"]
                else:
                    arrow_schema = self._file(k).schema_arrow
                    rows, group_bytes = _manifest.footer_groups(self._file(k).metadata)
                if schema is None:
                    schema = arrow_schema
                elif not arrow_schema.equals(schema):
                    raise SchemaError(f"Parquet schema mismatch: columns {_describe(arrow_schema)} differ "
                                      f"from the first file's {_describe(schema)}", path=p,
                                      sample=sum(counts))
                self.first_group.append(len(self.groups))
                self.groups += [(k, g) for g in range(len(rows))]
                counts += rows
                sizes += group_bytes
        except BaseException:
            self.close()
            raise
        self.schema = schema
        self.fields = [] if schema is None else list(schema.names)
        self.kinds = {} if schema is None else {
            fld.name: (fld.metadata or {}).get(_KIND_KEY, b"").decode() or None for fld in schema}
        self.cum = sample_starts(counts)
        self.group_bytes = np.array(sizes, dtype=np.int64)

    def _file(self, k: int):
        """File ``k``'s ParquetFile, opened on first use; when the reader took the file's
        row groups from the hash manifest, its footer is checked against them then."""
        f = self.files[k]
        if f is not None:
            return f
        pa, pq = _pa()
        p = self.paths[k]
        try:
            with _jemalloc_allocations():
                f = pq.ParquetFile(p, page_checksum_verification=True)
            f.schema_arrow  # noqa: B018 - a footer whose names are not UTF-8 raises here
        except (pa.ArrowException, ValueError, OSError) as exc:  # ValueError: names not UTF-8
            raise CorruptShardError(f"not a readable Parquet file: {exc}", path=p) from None
        if self.layouts is not None:
            try:
                self.version.check(p)
                _manifest.check_footer(f, self.layouts[k], p, int(self.cum[self.first_group[k]]))
            except BaseException:
                f.close()
                raise
        self.files[k] = f
        return f

    @classmethod
    def check_node_cache(cls, path, options) -> None:
        """A node cache reads a directory of Parquet files whose hash manifest records
        every file's size, xxh3_64, row groups and schema (what hpcio's writer and
        ``hpcio convert --to parquet`` record): without them opening would read every
        footer through the shared tier.  A single file is refused (the cache mirrors a
        directory); ``validate_hashes`` is not, as this reader reads nothing for it (the
        cache checks each file's xxh3_64 as it fetches it)."""
        _manifest.check_node_cache(path, list_files(path) if os.path.isdir(path) else [])

    def files_of_shards(self) -> list[list[ShardFile]]:
        """Each row group's file, with the size and xxh3_64 its hash manifest records:
        the row groups of a file share it, and a node cache fetches it once for them."""
        per_file = manifest_shard_files(self.paths)
        return [per_file[k] for k, _g in self.groups]

    def release_shards(self, shards) -> None:
        """Close the files of the row groups ``shards``; the decoded row groups kept stay
        (a node cache checks the fetched bytes are the same) and the next read opens the
        file now at its path."""
        for k in sorted({self.groups[int(g)][0] for g in shards}):
            f, self.files[k] = self.files[k], None
            if f is not None:
                f.close()

    def will_read(self, indices) -> None:
        """A pass is about to read samples ``indices``: unless ``cache_bytes`` was given,
        the cache holds every row group the pass touches (their uncompressed size, from
        the footers or the hash manifest) when they fit in half the memory available, so
        a shuffled pass decodes each once, where a smaller cache would decode one for
        nearly every sample; else it stays ``CACHE_BYTES`` (shuffle in blocks of row
        groups there)."""
        from .._memory import available_bytes

        if self._cache_given:
            return
        touched = np.unique(locate(self.cum, np.asarray(indices, dtype=np.int64))[0])
        needed = int(self.group_bytes[touched].sum())
        needed += needed // 4  # decoded tables run a little over the metadata's sizes
        available = available_bytes()
        fits = available is not None and needed <= available // 2
        self.cache_bytes = max(CACHE_BYTES, needed) if fits else CACHE_BYTES

    @property
    def cached_bytes(self) -> int:
        """Arrow bytes of the decoded row groups kept."""
        return sum(table.nbytes for table in self.cache.values())

    def block_starts(self) -> np.ndarray:
        return self.cum[:-1].copy()

    def _group(self, g: int, fields: tuple):
        key = (g, fields)
        table = self.cache.get(key)
        if table is None:
            fi, rg = self.groups[g]
            file = self._file(fi)
            try:
                # Decoding is where Arrow allocates, on its threads: the pool is switched
                # per row group decoded, not per read of a cached one.
                with _jemalloc_allocations():
                    table = file.read_row_group(rg, columns=list(fields))
            except (OSError, ValueError) as exc:
                raise CorruptShardError(f"row group {rg} cannot be read: {exc}",
                                        path=self.paths[fi],
                                        sample=int(self.cum[g])) from None
            self.cache[key] = table
            while len(self.cache) > 1 and self.cached_bytes > self.cache_bytes:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(key)
        return table

    def read_many(self, indices, fields=None) -> list:
        indices = np.asarray(indices, dtype=np.int64)
        fields = tuple(self.fields if fields is None else fields)
        for f in fields:
            if f not in self.kinds:
                raise KeyNotFoundError(f"{self.path} has no field {f!r}")
        groups = list(by_shard(self.cum, indices))
        if not groups:
            return []
        if len(groups) == 1:
            g, _where, rows = groups[0]
            table = self._group(g, fields)
            if len(rows) and np.all(np.diff(rows) == 1):
                if len(rows) > 1 and rows[-1] == len(table) - 1:
                    self.cache.pop((g, fields), None)  # read through to its end: a pass
                table = table.slice(int(rows[0]), len(rows))  # a run of rows: no copy
            else:
                table = table.take(rows)
        else:
            # the rows taken from each row group, joined into one small table, then put in
            # request order: one conversion per column for the batch, where a shuffled
            # batch touches most row groups (a take on the row groups joined would copy
            # them all)
            pa, _pq = _pa()
            parts, order = [], []
            for g, where, rows in groups:
                parts.append(self._group(g, fields).take(rows))
                order.append(where)
            table = pa.concat_tables(parts).combine_chunks().take(inverse_permutation(np.concatenate(order)))
        columns = [_decode_column(table.column(f), self.kinds[f], f, self.path, indices) for f in fields]
        return [dict(zip(fields, values)) for values in zip(*columns)] if fields else [{} for _ in indices]

    def read_field(self, indices, field):
        return [s[field] for s in self.read_many(indices, [field])]

    def iter_range(self, start=0, stop=None, fields=None):
        # A row group at a time, in steps of at most ITER_ROWS rows: a pass then holds one
        # decoded row group and one step's samples, whose memory the next step reuses.
        stop = len(self) if stop is None else stop
        if start < stop:
            self.check_index(start)
            self.check_index(stop - 1)
        lo = start
        while lo < stop:
            group_end = int(self.cum[locate(self.cum, lo)[0] + 1])
            hi = min(stop, group_end, lo + ITER_ROWS)
            yield from self.read_many(np.arange(lo, hi), fields)
            lo = hi

    def close(self) -> None:
        for f in self.files:
            if f is not None:
                f.close()
        self.files = []
        self.cache.clear()


def _describe(schema) -> str:
    return "[" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "]"


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> InspectReport:
    """Samples, files and columns (hpcio's kind, or the Arrow type of columns written by
    other tools) of Parquet files, from their footers."""
    with Reader(path) as r:
        meta = r._file(0).metadata if r.paths else None
        codec = meta.row_group(0).column(0).compression if meta and meta.num_row_groups and meta.num_columns else None
        return inspect_report(
            NAME, path, samples=len(r), shards=len(r.paths),
            fields={f.name: r.kinds[f.name] or str(f.type) for f in r.schema} if r.schema else {},
            stored_bytes=files_bytes(r.paths),
            details={"row_groups": len(r.groups), "compression": codec})


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Check every file against its hash manifest, then decode every row group and
    every value of every file."""
    return verify_samples(NAME, path, lambda: Reader(path), list_files, max_errors=max_errors, manifest=True)
