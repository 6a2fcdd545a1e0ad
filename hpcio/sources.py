"""Sources the converter reads from, cut into units of work.

Every source lists its :class:`Unit` s (a file, a Parquet row group, a byte range of a
JSONL file, a tar shard, a range of samples) with their sizes, so a converter can
balance them across MPI ranks by bytes, and yields the samples of one unit on its own,
so each rank reads only its units.

* JSONL, plain (split into byte ranges at line boundaries), ``.zst`` or ``.gz`` (one unit
  per file: a compressed stream cannot be entered in the middle).  Fields can hold bytes
  as base64 (``base64_fields``) or as references (``ref_fields``): a path relative to
  ``root``, or ``tar://<shard>#<key>.<field>`` naming a member of a tar shard, resolved
  through a bounded cache of open tar indexes.
* Parquet: one unit per row group, with column projection.
* MessagePack: one unit per file.
* Image folders: ranges of samples.
* Existing tars (WebDataset-style): one unit per shard.
* Any dataset hpcio opens: ranges of samples.
"""

from __future__ import annotations

import abc
import base64
import binascii
import io
import json
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .errors import DecodeError, MissingDependencyError, SchemaError, ShardNotFoundError

__all__ = [
    "Unit",
    "Source",
    "JsonlSource",
    "ParquetSource",
    "MsgpackSource",
    "TarSource",
    "DatasetSource",
    "TarRefResolver",
    "open_source",
]

DEFAULT_SPLIT_BYTES = 64 << 20


@dataclass(frozen=True)
class Unit:
    """One independent piece of a source.

    ``kind`` says what ``start``/``stop`` count: ``"bytes"`` (a byte range of ``path``),
    ``"row_group"`` (row groups ``start..stop``), ``"samples"`` (sample indices) or
    ``"file"`` (the whole file, start 0 and stop its size).  ``size`` is the bytes the
    unit reads (compressed size for compressed files); ``count`` its samples when known
    without reading them.
    """

    path: str
    kind: str
    start: int
    stop: int
    size: int
    count: int | None = None


class Source(abc.ABC):
    """Base class: ``units()`` and ``samples(unit)``; iterating yields every sample."""

    @abc.abstractmethod
    def units(self) -> list[Unit]: ...

    @abc.abstractmethod
    def samples(self, unit: Unit) -> Iterator[dict]: ...

    def __iter__(self) -> Iterator[dict]:
        for unit in self.units():
            yield from self.samples(unit)

    def close(self) -> None:
        """Release open files and caches."""


# --- tar references ----------------------------------------------------------------------
class TarRefResolver:
    """Resolves ``tar://<shard>#<member>`` references with an LRU of open tar indexes.

    ``shard`` is relative to ``root`` unless absolute; ``member`` is the full member
    name (``<key>.<suffix>``).  At most ``max_open`` shards stay open (memory maps and
    member tables).
    """

    def __init__(self, root: str | None = None, max_open: int = 16):
        self.root = root or ""
        self.max_open = max_open
        self.open: OrderedDict = OrderedDict()

    def _shard(self, shard: str):
        from .formats.webdataset import _Shard

        path = os.path.join(self.root, shard)
        entry = self.open.get(path)
        if entry is None:
            index = _Shard(path, key_dots=0)
            names = {f"{key}.{index.suffixes[m]}": m
                     for j, key in enumerate(index.keys) for m in index.members(j)}
            entry = (index, names)
            self.open[path] = entry
            if len(self.open) > self.max_open:
                _path, (old, _names) = self.open.popitem(last=False)
                old.close()
        else:
            self.open.move_to_end(path)
        return entry

    def resolve(self, ref: str, *, path=None, sample=None) -> bytes:
        if not ref.startswith("tar://") or "#" not in ref:
            raise DecodeError(f"bad tar reference {ref!r}: expected tar://<shard>#<key>.<field>",
                              path=path, sample=sample)
        shard, member = ref[6:].split("#", 1)
        index, names = self._shard(shard)
        m = names.get(member)
        if m is None:
            raise ShardNotFoundError(f"tar member {member!r} not found", path=index.path, sample=sample)
        return bytes(index.data(m))

    def close(self):
        for index, _names in self.open.values():
            index.close()
        self.open.clear()


# --- JSONL ---------------------------------------------------------------------------------
def _open_text_stream(path: str):
    """A binary stream of the decompressed content of ``path`` (.zst, .gz or plain)."""
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    if path.endswith((".zst", ".zstd")):
        try:
            import zstandard
        except ImportError as exc:
            raise MissingDependencyError(
                "reading .zst JSONL needs zstandard: pip install zstandard (or 'hpcio[codecs]')"
            ) from exc
        raw = open(path, "rb")
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))
    return open(path, "rb")


class JsonlSource(Source):
    """JSON Lines files, one sample per line.

    Parameters
    ----------
    paths
        Files (``.jsonl``, ``.jsonl.zst``, ``.jsonl.gz``) or directories of them.
    split_bytes
        Byte-range size for plain files (compressed files are one unit each).
    base64_fields
        Fields whose str values are base64 bytes.
    ref_fields
        Fields whose values reference bytes: ``tar://<shard>#<key>.<field>`` or a path;
        both relative to ``root``.
    root
        Base directory of references (default: the directory of each JSONL file).
    max_open_tars
        Open tar indexes kept by the reference cache.
    """

    SUFFIXES = (".jsonl", ".json", ".jsonl.zst", ".jsonl.zstd", ".jsonl.gz", ".ndjson")

    def __init__(self, paths, split_bytes: int = DEFAULT_SPLIT_BYTES,
                 base64_fields: Sequence[str] = (), ref_fields: Sequence[str] = (),
                 root: str | None = None, max_open_tars: int = 16):
        self.paths = _expand(paths, self.SUFFIXES)
        self.split_bytes = split_bytes
        self.base64_fields = list(base64_fields)
        self.ref_fields = list(ref_fields)
        self.root = root
        self.resolvers: dict[str, TarRefResolver] = {}
        self.max_open_tars = max_open_tars

    def units(self) -> list[Unit]:
        units = []
        for p in self.paths:
            size = os.path.getsize(p)
            if p.endswith((".zst", ".zstd", ".gz")) or size == 0:
                units.append(Unit(p, "file", 0, size, size))
                continue
            for a in range(0, size, self.split_bytes):
                b = min(a + self.split_bytes, size)
                units.append(Unit(p, "bytes", a, b, b - a))
        return units

    def _lines(self, unit: Unit) -> Iterator[tuple[int, bytes]]:
        """(byte offset, line) of the lines that start inside the unit."""
        if unit.kind == "file":
            with _open_text_stream(unit.path) as f:
                pos = 0
                for line in f:
                    yield pos, line
                    pos += len(line)
            return
        with open(unit.path, "rb") as f:
            pos = unit.start
            if pos > 0:
                # the line that straddles the start belongs to the previous range
                f.seek(pos - 1)
                pos += len(f.readline()) - 1
            while pos < unit.stop:
                line = f.readline()
                if not line:
                    break
                yield pos, line
                pos += len(line)

    def _resolver(self, jsonl_path: str) -> TarRefResolver:
        root = self.root or os.path.dirname(jsonl_path)
        r = self.resolvers.get(root)
        if r is None:
            r = self.resolvers[root] = TarRefResolver(root, self.max_open_tars)
        return r

    def samples(self, unit: Unit) -> Iterator[dict]:
        line_no = 0 if unit.start == 0 else None
        for offset, line in self._lines(unit):
            where = {"path": unit.path, "offset": offset,
                     "sample": line_no if line_no is not None else None}
            if line_no is not None:
                line_no += 1
            if not line.strip():
                continue
            try:
                sample = json.loads(line)
            except ValueError as exc:
                detail = f"{exc.msg} at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise DecodeError(f"JSONL line is not JSON: {detail}", **where) from None
            if not isinstance(sample, dict):
                raise SchemaError(f"JSONL line holds a {type(sample).__name__}, not an object", **where)
            for field in self.base64_fields:
                if sample.get(field) is not None:
                    try:
                        sample[field] = base64.b64decode(sample[field], validate=True)
                    except (binascii.Error, TypeError, ValueError) as exc:
                        raise DecodeError(f"field {field!r} is not base64: {exc}", **where) from None
            for field in self.ref_fields:
                ref = sample.get(field)
                if ref is None:
                    continue
                if not isinstance(ref, str):
                    raise DecodeError(f"field {field!r} is not a reference string", **where)
                if ref.startswith("tar://"):
                    sample[field] = self._resolver(unit.path).resolve(
                        ref, path=unit.path, sample=where["sample"])
                else:
                    target = os.path.join(self.root or os.path.dirname(unit.path), ref)
                    try:
                        with open(target, "rb") as f:
                            sample[field] = f.read()
                    except FileNotFoundError:
                        raise ShardNotFoundError(f"field {field!r} references a missing file {ref!r}",
                                                 **where) from None
            yield sample

    def close(self):
        for r in self.resolvers.values():
            r.close()
        self.resolvers.clear()


# --- Parquet ---------------------------------------------------------------------------------
class ParquetSource(Source):
    """Parquet files; one unit per row group, reading only ``columns`` when given.

    Files must share one schema (SchemaError names the first file that differs)."""

    def __init__(self, paths, columns: Sequence[str] | None = None):
        from .formats import parquet

        self.paths = _expand(paths, (".parquet",))
        self.columns = None if columns is None else list(columns)
        self.parquet = parquet
        self.files = {}
        self.schema = None

    def _file(self, path):
        f = self.files.get(path)
        if f is None:
            _pa, pq = self.parquet._pa()
            f = self.files[path] = pq.ParquetFile(path)
        return f

    def units(self) -> list[Unit]:
        units = []
        first = None
        for p in self.paths:
            f = self._file(p)
            if first is None:
                first = f.schema_arrow
            elif not f.schema_arrow.equals(first):
                raise SchemaError(
                    f"Parquet schema mismatch: columns {self.parquet._describe(f.schema_arrow)} differ "
                    f"from the first file's {self.parquet._describe(first)}", path=p)
            for g in range(f.metadata.num_row_groups):
                rg = f.metadata.row_group(g)
                units.append(Unit(p, "row_group", g, g + 1, rg.total_byte_size, rg.num_rows))
        self.schema = first
        return units

    def samples(self, unit: Unit) -> Iterator[dict]:
        f = self._file(unit.path)
        schema = f.schema_arrow
        kinds = {fld.name: (fld.metadata or {}).get(b"hpcio.kind", b"").decode() or None for fld in schema}
        first = sum(f.metadata.row_group(g).num_rows for g in range(unit.start))
        for g in range(unit.start, unit.stop):
            table = f.read_row_group(g, columns=self.columns)
            names = table.column_names
            rows = range(first, first + table.num_rows)
            first += table.num_rows
            cols = [self.parquet._decode_column(table.column(n), kinds[n], n, unit.path, rows) for n in names]
            for k in range(table.num_rows):
                yield {n: c[k] for n, c in zip(names, cols)}

    def close(self):
        for f in self.files.values():
            f.close()
        self.files.clear()


# --- MessagePack -----------------------------------------------------------------------------
class MsgpackSource(Source):
    """MessagePack map streams; one unit per file."""

    def __init__(self, paths):
        self.paths = _expand(paths, (".msgpack", ".mpk"))

    def units(self) -> list[Unit]:
        return [Unit(p, "file", 0, os.path.getsize(p), os.path.getsize(p)) for p in self.paths]

    def samples(self, unit: Unit) -> Iterator[dict]:
        from .formats import msgpack as mfmt

        with open(unit.path, "rb") as f:
            data = f.read()
        offsets = mfmt.build_index(data, path=unit.path)
        for i in range(len(offsets) - 1):
            a, b = int(offsets[i]), int(offsets[i + 1])
            yield mfmt.unpack(data[a:b], sample_index=i, path=unit.path, offset=a)


# --- tars --------------------------------------------------------------------------------------
class TarSource(Source):
    """Existing WebDataset-style tar shards, streamed; one unit per shard."""

    def __init__(self, paths, key_dots: int = 0, decode: bool = True, include_key: bool = False):
        from .formats.webdataset import list_shards

        self.paths = [p for p in (list_shards(paths) if not isinstance(paths, (list, tuple))
                                  else [q for x in paths for q in list_shards(x)])]
        self.key_dots, self.decode, self.include_key = key_dots, decode, include_key

    def units(self) -> list[Unit]:
        return [Unit(p, "file", 0, os.path.getsize(p), os.path.getsize(p)) for p in self.paths]

    def samples(self, unit: Unit) -> Iterator[dict]:
        from .formats.webdataset import iter_tar

        with open(unit.path, "rb", buffering=1 << 20) as f:
            yield from iter_tar(f, self.key_dots, self.decode, path=unit.path,
                                include_key=self.include_key)


# --- any hpcio dataset ---------------------------------------------------------------------------
class DatasetSource(Source):
    """Any dataset :func:`hpcio.open` reads (including image folders), in ranges of
    ``samples_per_unit`` samples; sizes are the dataset's bytes shared out by count."""

    def __init__(self, path, format: str | None = None, samples_per_unit: int = 10_000, **options):
        from .dataset import open as open_dataset

        self.path = os.fspath(path)
        self.dataset = open_dataset(self.path, format=format, **options)
        self.samples_per_unit = samples_per_unit

    def units(self) -> list[Unit]:
        n = len(self.dataset)
        total = _tree_size(self.path)
        return [Unit(self.path, "samples", a, min(a + self.samples_per_unit, n),
                     total * (min(a + self.samples_per_unit, n) - a) // max(n, 1),
                     min(a + self.samples_per_unit, n) - a)
                for a in range(0, n, self.samples_per_unit)]

    def samples(self, unit: Unit) -> Iterator[dict]:
        yield from (dict(s) for s in self.dataset[unit.start : unit.stop])

    def close(self):
        self.dataset.close()


def _tree_size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(r, n)) for r, _d, names in os.walk(path) for n in names)


def _expand(paths, suffixes) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in map(os.fspath, paths):
        if os.path.isdir(p):
            out += sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(suffixes))
        elif os.path.exists(p):
            out.append(p)
        else:
            raise ShardNotFoundError("source file not found", path=p)
    return out


def open_source(paths, format: str | None = None, **options) -> Source:
    """The source for ``paths`` by ``format`` (``jsonl``, ``parquet``, ``msgpack``, ``tar``,
    or any hpcio format name) or, when None, by file suffix, then by sniffing."""
    first = os.fspath(paths[0] if isinstance(paths, (list, tuple)) else paths)
    if format is None:
        probe = first
        if os.path.isdir(first):
            names = sorted(os.listdir(first))
            probe = os.path.join(first, names[0]) if names and all(
                os.path.isfile(os.path.join(first, n)) for n in names) else first
        if probe.endswith(JsonlSource.SUFFIXES):
            format = "jsonl"
        elif probe.endswith(".parquet"):
            format = "parquet"
        elif probe.endswith((".msgpack", ".mpk")):
            format = "msgpack"
        elif probe.endswith(".tar"):
            format = "tar"
    if format == "jsonl":
        return JsonlSource(paths, **options)
    if format == "parquet":
        return ParquetSource(paths, **options)
    if format == "msgpack":
        return MsgpackSource(paths, **options)
    if format in ("tar", "webdataset", "wds"):
        return TarSource(paths, **options)
    return DatasetSource(first, format=format, **options)
