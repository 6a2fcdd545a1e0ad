"""MDS (Mosaic Data Shard): read and write, byte-compatible with mosaicml-streaming.

A dataset is a directory holding ``index.json`` and ``shard.NNNNN.mds[.<ext>]`` files
(byte layout: ``specs/formats.md`` section 1).  The :class:`Writer` produces the same
bytes as streaming's ``MDSWriter`` for the same samples and options, plus mldataforge's
sample-level compression (``compression="sample::zstd"``) and hpcio's
``sample::blosc2``.  The :class:`Reader` offers:

* a sequential bulk path (``iter_range``): one buffered file per shard, records read in
  large merged ``pread`` calls and sliced into columns a batch at a time, or, for a
  mapped shard whose values have a fixed construction, samples built one at a time
  straight from the mapping;
* a random-access path (``read``/``read_many``): global index -> shard by bisection,
  memory-mapped shards kept in a bounded LRU, one offset lookup, one gather and one
  batch decompression per shard touched by a batch.

Whole-shard compressed datasets (``zstd``, ``gz``, ...) are decompressed into memory, or
into a ``cache_dir`` the caller names; the reader never writes beside the dataset.

Values: see :mod:`hpcio.formats._mds_encodings` (numeric dtype columns give numpy
scalars as streaming does; image columns give their bytes unless ``decode_images``).

>>> import hpcio, tempfile, os
>>> d = os.path.join(tempfile.mkdtemp(), "ds")
>>> with hpcio.open_writer(d, format="mds", columns={"id": "int", "text": "str"}) as w:
...     w.write({"id": 7, "text": "seven"})
>>> hpcio.open(d)[0]
{'id': 7, 'text': 'seven'}
"""

from __future__ import annotations

import bisect
import errno
import functools
import json
import os
import struct
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import orjson

from .. import codecs as _codec_table
from .._core import _records
from .._fileio import write_pieces
from ..columns import VarColumn, ViewColumn
from ..errors import (
    CorruptShardError,
    DecodeError,
    HpcioError,
    IndexOutOfRangeError,
    SchemaError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from ..registry import Capabilities
from . import base
from ._mds_encodings import (
    NUMERIC_DTYPES,
    ColumnCodec,
    _json_dumps,
    column_codec,
    encode_value,
    infer_encoding,
)

__all__ = [
    "NAME",
    "CAPABILITIES",
    "sniff",
    "Reader",
    "Writer",
    "merge_index",
    "inspect",
    "verify",
    "register_streaming_reader",
    "parse_compression",
    "Compression",
]

NAME = "mds"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)
INDEX_NAME = "index.json"
DEFAULT_SIZE_LIMIT = 1 << 26

# Mean record size above which the sequential path maps the shard instead of reading it
# through the pread buffer (which costs a second copy of every value).  Records this large
# share no pages: where the mapping maps small pages it takes a page fault or two per
# record, and sample dicts are then built from reads of each record's values instead
# (see _OpenShard.pread_values).
_LARGE_RECORD = 16 << 10
# Samples decoded per step of the sequential path where they are not built one at a
# time (Reader._record_samples): small enough that a batch's record bytes and new value
# objects stay in cache while the caller consumes them.  Large records (read value by
# value, see _LARGE_RECORD) take shorter steps, so that a fresh process reuses the
# previous step's memory instead of growing its heap: 64 when their binary values are
# viewed or not selected (a fresh process's vlm zero-copy pass took 400 page faults with
# 256, 40 with 64), 16 when those values are copied.
_SCAN_BATCH = 256
_LARGE_STEP = 64
_LARGE_COPY_STEP = 16
# The compiled value kinds of the encodings whose values have one construction, read
# (mds_samples, RecordSamples) and written (RecordPacker) alike.
_FIXED_KINDS = {"str": _records.KIND_STR, "int": _records.KIND_INT, "json": _records.KIND_JSON}
_U32 = struct.Struct("<I")
_PAIR = struct.Struct("<2I")


# --- compression names ------------------------------------------------------------------
@dataclass(frozen=True)
class Compression:
    """A parsed MDS ``compression`` value.

    ``spec`` is the string written to ``index.json``; ``name`` the MDS family (``zstd``,
    ``gz``, ...; also the shard file extension); ``codec`` the :mod:`hpcio.codecs` name;
    ``per_sample`` is True for ``sample::<algo>`` (each record compressed on its own).
    """

    spec: str
    name: str
    codec: str
    level: int | None
    per_sample: bool

    def compress(self, data) -> bytes:
        return _codec_table.get_codec(self.codec).compress(data, self.level)

    def decompress(self, data, limit: int, *, path=None, offset=None, sample=None) -> bytes:
        return _codec_table.get_codec(self.codec).decompress(
            data, limit, path=path, offset=offset, sample=sample
        )


# family -> (codec, allowed levels or None when the family takes no level)
_FAMILIES = {
    "zstd": ("zstd", range(1, 23)),
    "gz": ("gzip", range(0, 10)),
    "bz2": ("bz2", range(1, 10)),
    "br": ("brotli", range(0, 12)),
    "snappy": ("snappy-raw", None),
}
_SAMPLE_ONLY = {"blosc2": ("blosc2", range(0, 10))}
_ALIASES = {"gzip": "gz", "brotli": "br"}  # the spellings mldataforge's CLI accepts


def parse_compression(spec: str | None) -> Compression | None:
    """Parse an MDS compression value (``None``, ``"zstd:7"``, ``"sample::zstd"``, ...).

    >>> parse_compression("sample::zstd:7")
    Compression(spec='sample::zstd:7', name='zstd', codec='zstd', level=7, per_sample=True)
    >>> parse_compression("gzip").spec
    'gz'
    """
    if not spec:
        return None
    per_sample = spec.startswith("sample::")
    body = spec[len("sample::") :] if per_sample else spec
    name, sep, level_text = body.partition(":")
    name = _ALIASES.get(name, name)
    families = {**_FAMILIES, **_SAMPLE_ONLY} if per_sample else _FAMILIES
    if name not in families:
        known = ", ".join(sorted(_FAMILIES)) + ", sample::<any of these>, sample::blosc2"
        raise ValueError(f"unknown MDS compression {spec!r}; known: {known}")
    codec, levels = families[name]
    level = None
    if sep:
        try:
            level = int(level_text)
        except ValueError:
            raise ValueError(f"bad compression level in {spec!r}: expected an integer") from None
        if levels is None or level not in levels:
            allowed = "none" if levels is None else f"{levels.start}..{levels.stop - 1}"
            raise ValueError(f"compression level {level} is not valid for {name} (levels: {allowed})")
    canonical = name + (f":{level}" if sep else "")
    return Compression(("sample::" if per_sample else "") + canonical, name, codec, level, per_sample)


# --- hashes -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _hash_functions() -> dict:
    """Hash constructors by algorithm name (imported on first use: opening a dataset
    without hash validation needs none)."""
    import hashlib

    import xxhash

    funcs = {
        algo: getattr(hashlib, algo)
        for algo in hashlib.algorithms_available
        if hasattr(hashlib, algo) and not algo.startswith("shake_")
    }
    for algo in xxhash.algorithms_available:
        funcs[algo] = getattr(xxhash, algo)
    return funcs


# Preferred order when the reader picks one hash to validate with: fastest first.
_FAST_HASHES = ("xxh3_64", "xxh64", "xxh3_128", "xxh128", "xxh32", "md5", "sha1")


def _digest(algo: str, data) -> str:
    return _hash_functions()[algo](data).hexdigest()


def _concat_values(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """One ``(data, offsets)`` column from pieces of it, each ``(data, offsets)``."""
    if len(parts) == 1:
        return parts[0]
    lengths = np.concatenate([np.diff(o) for _d, o in parts])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.concatenate([d for d, _o in parts]), offsets


def _parse_size(value) -> int | None:
    """streaming's ``bytes_to_int``: an int, or a string such as ``"100kb"``."""
    if not value:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    text = value.lower().strip()
    units = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    if text.endswith("b") and text[:-1].isdigit():
        return int(text[:-1])
    return int(text)


# --- sniffing ---------------------------------------------------------------------------
def _dataset_dir(path) -> str:
    path = os.fspath(path)
    if os.path.basename(path) == INDEX_NAME and os.path.isfile(path):
        return os.path.dirname(path) or "."
    return path


def sniff(path) -> bool:
    """Whether ``path`` is an MDS dataset directory (or its ``index.json``)."""
    index = os.path.join(_dataset_dir(path), INDEX_NAME)
    if not os.path.isfile(index):
        return False
    try:
        with open(index, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if b'"format": "mds"' in head:
        return True
    # An empty dataset's index names no format: accept exactly streaming's empty index.
    return head.strip() == b'{"shards": [], "version": 2}'


# --- index.json -------------------------------------------------------------------------
@dataclass
class _ShardInfo:
    """One entry of ``index.json``, checked."""

    position: int
    samples: int
    raw_basename: str
    raw_bytes: int
    raw_hashes: dict
    zip_basename: str | None
    zip_bytes: int | None
    zip_hashes: dict
    compression: Compression | None
    columns: tuple  # (names, encodings, sizes) as tuples
    entry: dict

    @property
    def file_basename(self) -> str:
        return self.zip_basename or self.raw_basename

    @property
    def whole_shard(self) -> bool:
        return self.zip_basename is not None


def _loads(raw):
    """JSON from bytes: orjson, or Python's json for what orjson refuses (NaN, huge
    integers) and for its exact error messages."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(bytes(raw))


_CONFIG_KEYS = ("column_encodings", "column_names", "column_sizes")


def _load_index(directory: str) -> list[_ShardInfo]:
    index_path = os.path.join(directory, INDEX_NAME)
    try:
        with open(index_path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ShardNotFoundError("no index.json: not an MDS dataset", path=index_path) from None
    try:
        obj = _loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        pos = getattr(exc, "pos", getattr(exc, "start", None))
        detail = getattr(exc, "msg", None) or str(exc)
        raise CorruptShardError(f"index.json is not valid JSON: {detail}", path=index_path, offset=pos) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("shards"), list):
        raise CorruptShardError("index.json has no 'shards' list", path=index_path)
    if obj.get("version") != 2:
        raise CorruptShardError(
            f"index.json has version {obj.get('version')!r}; MDS readers need version 2",
            path=index_path,
        )
    return [_check_entry(k, entry, index_path) for k, entry in enumerate(obj["shards"])]


def _check_entry(k: int, entry, index_path: str) -> _ShardInfo:
    def bad(detail: str) -> CorruptShardError:
        return CorruptShardError(f"shard entry {k} of index.json: {detail}", path=index_path)

    if not isinstance(entry, dict):
        raise bad(f"expected an object, got {type(entry).__name__}")
    if entry.get("version") != 2:
        raise bad(f"version {entry.get('version')!r}; MDS readers need version 2")
    if entry.get("format") != "mds":
        raise bad(f"format {entry.get('format')!r}, expected 'mds'")
    samples = entry.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        raise bad(f"'samples' is {samples!r}, expected a non-negative integer")
    raw = entry.get("raw_data")
    zip_ = entry.get("zip_data")
    for key, info in (("raw_data", raw), ("zip_data", zip_)):
        if info is None and key == "zip_data":
            continue
        if not isinstance(info, dict) or not isinstance(info.get("basename"), str):
            raise bad(f"'{key}' lacks a basename")
        name = info["basename"]
        # A basename that leaves the directory would let an index point anywhere.
        if not name or os.path.basename(name) != name or name in (".", ".."):
            raise bad(f"'{key}' basename {name!r} is not a plain file name")
        if not isinstance(info.get("bytes"), int) or info["bytes"] < 0:
            raise bad(f"'{key}' bytes is {info.get('bytes')!r}")
    try:
        compression = parse_compression(entry.get("compression"))
    except ValueError as exc:
        raise bad(str(exc)) from None
    if compression is not None and not compression.per_sample and zip_ is None:
        raise bad(f"compression {compression.spec!r} but no 'zip_data'")
    if zip_ is not None and (compression is None or compression.per_sample):
        raise bad(f"'zip_data' present but compression is {entry.get('compression')!r}")
    names = entry.get("column_names")
    encodings = entry.get("column_encodings")
    sizes = entry.get("column_sizes")
    if not (isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)):
        raise bad("column_names, column_encodings and column_sizes must be lists")
    if not len(names) == len(encodings) == len(sizes):
        raise bad(
            f"{len(names)} column names, {len(encodings)} encodings and {len(sizes)} sizes"
        )
    for name, encoding, size in zip(names, encodings, sizes):
        codec = column_codec(encoding, path=index_path, column=name)
        if size != codec.size:
            raise bad(f"column {name!r} ({encoding}) has size {size!r}; the encoding's size is {codec.size!r}")
    return _ShardInfo(
        position=k,
        samples=samples,
        raw_basename=raw["basename"],
        raw_bytes=raw["bytes"],
        raw_hashes=dict(raw.get("hashes") or {}),
        zip_basename=None if zip_ is None else zip_["basename"],
        zip_bytes=None if zip_ is None else zip_["bytes"],
        zip_hashes={} if zip_ is None else dict(zip_.get("hashes") or {}),
        compression=compression,
        columns=(tuple(names), tuple(encodings), tuple(sizes)),
        entry=entry,
    )


# --- record layout: slicing records into columns ---------------------------------------
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
            if kind in _FIXED_KINDS:
                kinds.append(_FIXED_KINDS[kind])
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
            raise KeyError(
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
            except HpcioError:
                raise
            except Exception:
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
            except HpcioError:
                raise
            except Exception as exc:
                path, offset, sample = where()
                raise DecodeError(
                    f"column {self.names[c]!r} ({self.encodings[c]}): cannot decode the value: {exc}",
                    path=path, offset=None if offset is None else offset + a, sample=sample,
                ) from exc
        return out


# --- open shards ------------------------------------------------------------------------
class _OpenShard:
    """A shard's bytes (mmap or decompressed memory) with its checked header."""

    __slots__ = ("info", "path", "n", "size", "buf", "table", "mapped", "base", "in_file", "_fd",
                 "pread_values")

    def __init__(self, info: _ShardInfo, path: str, buf: memoryview, mapped, base: int, in_file: bool):
        self.info = info
        self.path = path  # the file the offsets refer to (the zip file when decompressed)
        self.buf = buf
        self.mapped = mapped
        # Large records read value by value with pread (read_fd), not through the mapping:
        # where the file's cached pages are small, each record would cost a page fault or
        # two (1-3 us each in a virtual machine) against two reads of well under 1 us.
        # Where they are huge pages, one fault maps 2 MiB (some 30 vlm records) and the
        # mapping is faster: a fresh process's shuffled vlm pass took 6.4 ms against 8.7.
        self.pread_values = (mapped is not None and info.raw_bytes > _LARGE_RECORD * max(info.samples, 1)
                             and (info.compression is None or not info.compression.per_sample)
                             and not _maps_cheaply(mapped))
        self.size = len(buf)
        self.base = base  # global id of local sample 0
        self.in_file = in_file  # offsets are file offsets (False: into decompressed bytes)
        self.n = _check_header(info, path, self.size, lambda off, ln: buf[off : off + ln], base)
        self.table = buf[4 : 8 + 4 * self.n]
        self._fd = -1

    def read_fd(self) -> int | None:
        """A descriptor of the mapped file to ``pread`` large records' values from, opened
        on first use (None when the shard is held in memory)."""
        if self.mapped is None:
            return None
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    return None  # out of descriptors (a map holds none): read through the map
                raise
        return self._fd

    def gather(self, starts, ends):
        from .._core import _io

        if self.mapped is not None:
            return self.mapped.gather(starts, ends)
        return _io.gather(self.buf, starts, ends)

    def close(self) -> None:
        # Values handed out with zero_copy may still view the bytes: the mapping (or the
        # decompressed buffer) then lives on with them, so never force a release here.
        self.table.release()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self.mapped is not None:
            self.mapped.close()
            self.mapped = None


def _maps_cheaply(mapped) -> bool:
    """Most of the cached regions probed in a fresh mapping map 1 MiB or more per page
    fault (``MappedShard.probe_pages``); False when none is cached."""
    cheap, probed = mapped.probe_pages()
    return 2 * cheap > probed


def _check_header(info: _ShardInfo, path: str, size: int, read, base: int) -> int:
    """Check a shard's header and offset table against index.json; return its count.

    ``read(offset, length)`` returns bytes of the shard (decompressed when whole-shard
    compressed).  Every offset is checked (non-decreasing, within the file) once here, so
    the per-sample paths need no checks.
    """
    from .._core import _index

    if size != info.raw_bytes:
        cls = TruncatedShardError if size < info.raw_bytes else CorruptShardError
        raise cls(f"shard is {size} bytes, index.json says {info.raw_bytes}", path=path,
                  offset=min(size, info.raw_bytes))
    if size < 4:
        raise TruncatedShardError(f"shard is {size} bytes, too short for a header", path=path, offset=0)
    n = _U32.unpack(read(0, 4))[0]
    if n != info.samples:
        raise CorruptShardError(
            f"shard header says {n} samples, index.json says {info.samples}", path=path, offset=0
        )
    table_end = 8 + 4 * n
    if table_end > size:
        raise TruncatedShardError(
            f"shard is {size} bytes; its offset table needs {table_end}", path=path, offset=size
        )
    table = read(4, 4 * (n + 1))
    data_start = _U32.unpack_from(table, 0)[0]
    if not table_end <= data_start <= size:
        raise CorruptShardError(
            f"first record offset {data_start} is outside [{table_end}, {size}]", path=path, offset=4
        )
    _index.offset_ranges(table, 4, n, size, None, path=path, table_offset=4, sample_base=base)
    config_raw = read(table_end, data_start - table_end)
    try:
        config = _loads(config_raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptShardError(
            f"the shard's embedded config is not valid JSON: {exc}", path=path, offset=table_end
        ) from None
    if not isinstance(config, dict):
        raise CorruptShardError("the shard's embedded config is not an object", path=path, offset=table_end)
    for key in _CONFIG_KEYS:
        if config.get(key) != info.entry.get(key):
            raise CorruptShardError(
                f"the shard's embedded config has {key} = {config.get(key)!r}; "
                f"index.json has {info.entry.get(key)!r}",
                path=path, offset=table_end,
            )
    embedded = parse_compression(config.get("compression")) if isinstance(config.get("compression"), str) else None
    per_sample = info.compression is not None and info.compression.per_sample
    if per_sample != (embedded is not None and embedded.per_sample):
        raise CorruptShardError(
            f"the shard's embedded config has compression = {config.get('compression')!r}; "
            f"index.json has {info.entry.get('compression')!r}",
            path=path, offset=table_end,
        )
    return n


# --- the reader -------------------------------------------------------------------------
class Reader(base.Reader):
    """Random-access and sequential reader of an MDS dataset.

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
    limit
        Largest decompressed size accepted for one record or shard.
    zero_copy
        Return ``bytes`` (and undecoded image) values as read-only memoryviews of the
        mapped shard or decompressed batch instead of copies: fastest for large binary
        values, but memoryviews cannot be pickled (e.g. sent back by DataLoader workers)
        and keep their shard mapped while alive.
    """

    def __init__(self, path, *, cache_dir=None, max_open: int = 256, max_decompressed: int = 8,
                 decode_images: bool = False, allow_pickle: bool = False,
                 validate_hashes: bool | str = False, decode_threads: int = 1,
                 limit: int = _codec_table.DEFAULT_LIMIT, zero_copy: bool = False):
        from .._core import _index  # noqa: F401  (a broken build fails here, on open)

        self.directory = _dataset_dir(path)
        super().__init__(self.directory)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.max_open = max(1, int(max_open))
        self.max_decompressed = max(1, int(max_decompressed))
        self.decode_images = decode_images
        self.zero_copy = zero_copy
        self.decode_threads = decode_threads
        self.limit = limit
        self.validate_hashes = validate_hashes
        self.shards = _load_index(self.directory)
        counts = [s.samples for s in self.shards]
        self._cum = np.zeros(len(counts) + 1, np.uint64)
        np.cumsum(counts, out=self._cum[1:])
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
        self._maps: OrderedDict[int, _OpenShard] = OrderedDict()
        self._mem: OrderedDict[int, _OpenShard] = OrderedDict()

    def _common_layout(self) -> _Layout | None:
        if not self.shards:
            return None
        first = self.shards[0].columns
        for s in self.shards[1:]:
            if s.columns != first:
                raise CorruptShardError(
                    f"shard entry {s.position} has columns {list(s.columns[0])} "
                    f"({list(s.columns[1])}); shard entry 0 has {list(first[0])} ({list(first[1])})",
                    path=os.path.join(self.directory, INDEX_NAME),
                )
        return _Layout(*first, path=os.path.join(self.directory, INDEX_NAME))

    def __len__(self) -> int:
        return self._total

    def mean_sample_bytes(self) -> float | None:
        return sum(s.raw_bytes for s in self.shards) / self._total if self._total else None

    @functools.cached_property
    def _views_only(self) -> bool:
        """Zero-copy reads whose large values view the mapped or in-memory shard: a batch
        allocates no memory for them, so its size need not be bounded in bytes."""
        return self.zero_copy and not any(s.compression is not None and s.compression.per_sample
                                          for s in self.shards)

    @functools.cached_property
    def batch_size(self) -> int:
        return base.DEFAULT_BATCH if self._views_only else super().batch_size

    # --- opening shards -----------------------------------------------------------------
    def _file(self, info: _ShardInfo) -> str:
        path = os.path.join(self.directory, info.file_basename)
        if not os.path.isfile(path):
            raise ShardNotFoundError(
                f"shard file {info.file_basename} named by index.json is missing", path=path
            )
        return path

    def _check_hash(self, info: _ShardInfo, path: str, data=None) -> None:
        hashes = info.zip_hashes if info.whole_shard else info.raw_hashes
        algo = self.validate_hashes
        if algo is True:
            algo = next((a for a in _FAST_HASHES if a in hashes), next(iter(sorted(hashes)), None))
            if algo is None:
                return
        if algo not in hashes:
            raise CorruptShardError(
                f"index.json records no {algo} hash for this shard (it has: {', '.join(sorted(hashes)) or 'none'})",
                path=path,
            )
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        got = _digest(algo, data)
        if got != hashes[algo]:
            raise CorruptShardError(
                f"{algo} mismatch: index.json says {hashes[algo]}, the file hashes to {got}", path=path
            )

    def _shard(self, k: int) -> _OpenShard:
        """Shard ``k`` opened (mmap or decompressed), most recently used."""
        for cache in (self._maps, self._mem):
            sh = cache.get(k)
            if sh is not None:
                cache.move_to_end(k)
                return sh
        info = self.shards[k]
        base_id = self._cum_list[k]
        path = self._file(info)
        if info.whole_shard and self.cache_dir is None:
            raw = self._decompress_shard(info, path)
            sh = _OpenShard(info, path, memoryview(raw), None, base_id, in_file=False)
            cache, bound = self._mem, self.max_decompressed
        else:
            from .._core import _io

            if info.whole_shard:
                path = self._cached_raw(info, path)
            elif self.validate_hashes:
                self._check_hash(info, path)
            mapped = _io.MappedShard(path)
            try:
                sh = _OpenShard(info, path, mapped.buffer(), mapped, base_id, in_file=True)
            except BaseException:
                mapped.close()
                raise
            cache, bound = self._maps, self.max_open
        cache[k] = sh
        if len(cache) > bound:
            cache.popitem(last=False)[1].close()
        return sh

    def _decompress_shard(self, info: _ShardInfo, path: str) -> bytes:
        with open(path, "rb") as f:
            data = f.read()
        if self.validate_hashes:
            self._check_hash(info, path, data)
        raw = info.compression.decompress(data, min(self.limit, info.raw_bytes), path=path, offset=0)
        if len(raw) != info.raw_bytes:
            raise CorruptShardError(
                f"decompressed shard is {len(raw)} bytes, index.json says {info.raw_bytes}", path=path
            )
        return raw

    def _cached_raw(self, info: _ShardInfo, path: str) -> str:
        """The decompressed shard in ``cache_dir`` (written once, atomically)."""
        st = os.stat(path)
        import hashlib

        key = hashlib.sha1(f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        target = os.path.join(self.cache_dir, f"{key}.{info.raw_basename}")
        if not os.path.isfile(target) or os.path.getsize(target) != info.raw_bytes:
            raw = self._decompress_shard(info, path)
            os.makedirs(self.cache_dir, exist_ok=True)
            tmp = f"{target}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(raw)
            os.replace(tmp, target)
        return target

    # --- random access ------------------------------------------------------------------
    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        i = self.check_index(int(i))
        k = bisect.bisect_right(self._cum_list, i) - 1
        sh = self._shard(k)
        begin, end = _PAIR.unpack_from(sh.buf, 4 + 4 * (i - sh.base))
        rec = sh.buf[begin:end]
        codec = sh.info.compression
        where = lambda: (sh.path, begin if sh.in_file else None, i)  # noqa: E731
        if codec is not None and codec.per_sample:
            rec = memoryview(codec.decompress(rec, self.limit, path=sh.path,
                                              offset=begin if sh.in_file else None, sample=i))
        return self._layout.record(rec, self._layout.select(fields, self.path), self.decode_images, where)

    def read_many(self, indices, fields: Sequence[str] | None = None) -> list:
        cols = self._layout.select(fields, self.path) if self._layout else []
        samples = self._read_columns(indices, cols, as_samples=True)
        return [] if samples is None else samples

    def read_field(self, indices, field: str) -> list:
        values = self._read_columns(indices, self._layout.select([field], self.path) if self._layout else [])
        return [] if values is None else values[0]

    def read_columns(self, indices, fields: Sequence[str] | None = None) -> dict:
        """Columns of samples ``indices`` (see :mod:`hpcio.columns`): numbers as numpy
        arrays, ``str``/``bytes``/``json`` columns (and undecoded images) as VarColumns
        sliced out of the records by one compiled call, other encodings as lists.  With
        ``zero_copy``, bytes columns are ViewColumns of the records where they lie."""
        cols = self._layout.select(fields, self.path) if self._layout else []
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        m = len(ids)
        kinds = {c: self._layout.column_kind(c, self.decode_images) for c in cols}
        views = [c for c in cols if self.zero_copy and kinds[c] == "bytes"]
        direct = [c for c in cols if kinds[c] is not None and c not in views]
        out: dict = {}
        # Copied bytes columns (images) touch every page of their records anyway: through
        # the mapping they cost one copy, through pread two.
        if m and (direct or views) and all(kinds[c] != "bytes" for c in direct):
            read = self._columns_pread(ids, direct, views, kinds)
            if read is not None:
                out.update(read)
                direct = views = []
        if direct or views:
            bufs, buf_of, starts, ends = self._record_table(ids)
        if direct:
            pairs, bad = _records.mds_columns(bufs, buf_of, starts, ends, self._layout._sizes_t, tuple(direct))
            if pairs is None:
                self._report_bad_record(int(ids[bad]), cols)
            for c, (data, offsets) in zip(direct, pairs):
                kind = kinds[c]
                out[self._layout.names[c]] = (VarColumn(kind, data, offsets) if isinstance(kind, str)
                                              else data.view(kind))
        for c in views:
            begin = np.empty(m, np.int64)
            lengths, bad = _records.mds_lengths(bufs, buf_of, starts, ends, self._layout._sizes_t, c,
                                                False, begin)
            if lengths is None:
                self._report_bad_record(int(ids[bad]), cols)
            begin += starts
            out[self._layout.names[c]] = ViewColumn(bufs, buf_of, begin, begin + lengths)
        general = [c for c in cols if kinds[c] is None]
        if general:
            values = self._read_columns(ids, general) if m else [[] for _ in general]
            for c, v in zip(general, values):
                out[self._layout.names[c]] = v
        return {self._layout.names[c]: out[self._layout.names[c]] for c in cols}

    def _columns_pread(self, ids: np.ndarray, copied: list[int], viewed: list[int], kinds: dict) -> dict | None:
        """:meth:`read_columns` for shards of large records in small pages: the column
        sizes and the copied values are read with ``pread``, and the views (``zero_copy``)
        point into the mapping without touching it.  Reading a record through such a
        mapping makes the kernel map the 64 KiB around it (fault-around): for 80 KB image
        records that was most of a column batch's time and 100 MB of RSS.  None unless
        every shard the batch touches reads its values with pread
        (``_OpenShard.pread_values``)."""
        from .._core import _io, _records

        layout = self._layout
        groups, order = self._shard_groups(ids)
        if not all(self._shard(k).pread_values for k, _lidx, _a, _b in groups):
            return None
        sorted_ids = ids if order is None else ids[order]
        wanted = copied + viewed
        copies: dict = {c: [] for c in copied}
        spans: dict = {c: [] for c in viewed}
        bufs, buf_of = [], []
        for g, (k, lidx, a, b) in enumerate(groups):
            sh, lidx, lo, hi = self._ranges(k, lidx)
            fd = sh.read_fd()
            if fd is None:  # out of descriptors: the caller reads through the mapping
                return None
            got, where, bad = _records.mds_columns_pread(
                fd, lo.astype(np.int64), hi.astype(np.int64), layout._sizes_t, tuple(copied),
                tuple(viewed), path=sh.path)
            if bad >= 0:
                self._report_bad_record(int(sorted_ids[a + bad]), wanted)
            for c, pair in zip(copied, got):
                copies[c].append(pair)
            for c, pair in zip(viewed, where):
                spans[c].append(pair)
            bufs.append(memoryview(sh.buf))
            buf_of.append(np.full(b - a, g, np.int32))
        inverse = None
        if order is not None:
            inverse = np.empty(len(ids), np.int64)
            inverse[order] = np.arange(len(ids))
        out = {}
        for c in copied:
            data, offsets = _concat_values(copies[c])
            if inverse is not None:
                gathered, positions = _io.gather(data, offsets[inverse], offsets[inverse + 1])
                data, offsets = np.frombuffer(gathered, np.uint8), positions.view(np.int64)
            kind = kinds[c]
            out[layout.names[c]] = VarColumn(kind, data, offsets) if isinstance(kind, str) else data.view(kind)
        which = np.concatenate(buf_of)
        if inverse is not None:
            which = which[inverse]
        for c in viewed:
            begin = np.concatenate([v[0] for v in spans[c]])
            end = np.concatenate([v[1] for v in spans[c]])
            if inverse is not None:
                begin, end = begin[inverse], end[inverse]
            out[layout.names[c]] = ViewColumn(bufs, which, begin, end)
        return out

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
        bufs, buf_of, starts, ends = self._record_table(ids)
        lengths, bad = _records.mds_lengths(bufs, buf_of, starts, ends, self._layout._sizes_t, c, kind == "str")
        if lengths is None:
            self._report_bad_record(int(ids[bad]), [c])
        return lengths

    def _report_bad_record(self, i: int, cols: list[int]):
        """Raise for sample ``i``, which a compiled kernel refused: the general path names
        the file, byte offset and sample and the exact fault."""
        self._read_columns(np.array([i], np.int64), cols)
        raise CorruptShardError("malformed record", path=self.path, sample=i)

    def _record_table(self, ids: np.ndarray) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
        """Where the records of samples ``ids`` lie, for the compiled column kernels:
        ``(bufs, buf_of, starts, ends)``, record j being ``bufs[buf_of[j]][starts[j]:ends[j]]``
        (shards compressed per sample are decompressed into a buffer of their own)."""
        m = len(ids)
        bufs, buf_of = [], np.empty(m, np.int32)
        starts, ends = np.empty(m, np.int64), np.empty(m, np.int64)
        groups, order = self._shard_groups(ids) if m else ([], None)
        for g, (k, lidx, a, b) in enumerate(groups):
            sh, lidx, lo, hi = self._ranges(k, lidx)
            codec = sh.info.compression
            if codec is None or not codec.per_sample:
                # a view of our own keeps the map alive if the shard is closed meanwhile
                buf = memoryview(sh.buf)
            else:
                buf, pos = self._records(sh, lo, hi, lidx)
                lo, hi = pos[:-1], pos[1:]
            where = slice(a, b) if order is None else order[a:b]
            bufs.append(buf)
            buf_of[where] = g
            starts[where] = lo
            ends[where] = hi
        return bufs, buf_of, starts, ends

    def _read_columns(self, indices, cols: list[int], as_samples: bool = False) -> list | None:
        """Column value lists for samples ``indices`` (non-negative, in range), in order;
        with ``as_samples``, the list of sample dicts instead.

        Records are grouped by shard (one offset lookup and one batch decompression per
        shard).  Uncompressed and decompressed-in-memory shards are sliced in place (one
        copy per value); when a batch touches many shards with few records each, the
        records are first gathered into one buffer so the slicing runs once.
        """
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        m = len(ids)
        if m == 0:
            return None
        groups, order = self._shard_groups(ids)
        if len(groups) > 8 and m < 8 * len(groups):
            values = self._columns_gathered([(k, lidx) for k, lidx, _a, _b in groups], cols, as_samples)
        else:
            per_group = [self._columns_of(k, lidx, cols, as_samples) for k, lidx, _a, _b in groups]
            if len(per_group) == 1:
                values = per_group[0]
            elif as_samples:
                values = list(chain.from_iterable(per_group))
            else:
                values = [list(chain.from_iterable(g[c] for g in per_group)) for c in range(len(cols))]
        if order is not None:
            inverse = np.empty(m, np.int64)
            inverse[order] = np.arange(m)
            inv = inverse.tolist()
            if as_samples:
                values = [values[j] for j in inv]
            else:
                values = [[col[j] for j in inv] for col in values]
        return values

    def _shard_groups(self, ids: np.ndarray) -> tuple[list, np.ndarray | None]:
        """Samples ``ids`` (int64, non-empty) grouped by shard: ``(groups, order)``.

        ``groups`` lists ``(shard, local indices, a, b)`` in shard order; the group holds
        the requested samples ``order[a:b]`` (positions ``a..b`` when ``order`` is None,
        which means the request lies in one shard and keeps its order).
        """
        from .._core import _index

        m = len(ids)
        if len(self.shards) == 1:
            shard_of = np.zeros(m, np.int64)
            lo_id, hi_id = int(ids.min()), int(ids.max())
            if lo_id < 0 or hi_id >= self._total:
                raise IndexOutOfRangeError(
                    f"index {lo_id if lo_id < 0 else hi_id} out of range for a dataset of "
                    f"{self._total} samples", path=self.path,
                )
            local = ids
        else:
            shard_of, local = _index.bisect_ids(self._cum, ids, path=self.path)
            local = local.astype(np.int64, copy=False)
        first = int(shard_of[0])
        if (shard_of == first).all():
            return [(first, local, 0, m)], None
        order = np.lexsort((local, shard_of))
        shard_of, local = shard_of[order], local[order]
        cuts = np.flatnonzero(np.diff(shard_of)) + 1
        bounds = [0, *cuts.tolist(), m]
        groups = [(int(shard_of[a]), local[a:b], a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        return groups, order

    def _ranges(self, k: int, lidx: np.ndarray):
        from .._core import _index

        sh = self._shard(k)
        lidx = np.ascontiguousarray(lidx, dtype=np.uint64)
        starts, ends = _index.offset_ranges(
            sh.table, 4, sh.n, sh.size, lidx, path=sh.path, table_offset=4, sample_base=sh.base
        )
        return sh, lidx, starts, ends

    def _columns_of(self, k: int, lidx: np.ndarray, cols: list[int], as_samples: bool = False) -> list:
        """Columns (or, with ``as_samples``, sample dicts) of shard ``k``'s records
        ``lidx``, sliced in place where possible."""
        sh, lidx, starts, ends = self._ranges(k, lidx)

        def locate(j):
            return sh.path, int(starts[j]) if sh.in_file else None, sh.base + int(lidx[j])

        codec = sh.info.compression
        fd = None
        if codec is None or not codec.per_sample:
            buf, lo, hi = sh.buf, starts, ends
            if sh.pread_values:
                fd = sh.read_fd()
        else:
            buf, pos = self._records(sh, starts, ends, lidx)
            pos = pos.astype(np.int64, copy=False)
            lo, hi = pos[:-1], pos[1:]
        if as_samples:
            return self._layout.samples(buf, lo, hi, cols, self.decode_images, locate, self.zero_copy, fd)
        if fd is not None and cols and self._layout.direct(cols, self.decode_images, self.zero_copy):
            # read, not faulted in through the mapping (see _LARGE_RECORD), then transposed
            samples = self._layout.samples(buf, lo, hi, cols, self.decode_images, locate, self.zero_copy, fd)
            return [[s[name] for s in samples] for name in (self._layout.names[c] for c in cols)]
        return self._layout.columns(buf, lo, hi, cols, self.decode_images, locate, self.zero_copy)

    def _columns_gathered(self, groups, cols: list[int], as_samples: bool = False) -> list:
        """Columns of records spread thinly over many shards: gather, then slice once."""
        parts = []
        for k, lidx in groups:
            sh, lidx, starts, ends = self._ranges(k, lidx)
            data, pos = self._records(sh, starts, ends, lidx)
            parts.append((sh, data, pos, starts, lidx))
        buf = b"".join(p[1] for p in parts)
        shifts = np.cumsum([0] + [int(p[2][-1]) for p in parts[:-1]])
        pos = np.concatenate(
            [p[2][:-1].astype(np.int64) + s for p, s in zip(parts, shifts)] + [np.array([len(buf)], np.int64)]
        )
        firsts = np.cumsum([0] + [len(p[4]) for p in parts])

        def locate(j):
            g = int(np.searchsorted(firsts, j, side="right")) - 1
            sh, _, _, file_starts, lidx = parts[g]
            r = j - int(firsts[g])
            return sh.path, int(file_starts[r]) if sh.in_file else None, sh.base + int(lidx[r])

        decode = self._layout.samples if as_samples else self._layout.columns
        return decode(buf, pos[:-1], pos[1:], cols, self.decode_images, locate, self.zero_copy)

    def _records(self, sh: _OpenShard, starts, ends, lidx):
        """The (decompressed) records ``[starts[j], ends[j])`` of ``sh`` back to back."""
        codec = sh.info.compression
        if codec is None or not codec.per_sample:
            return sh.gather(starts, ends)
        return self._decode_records(sh.buf, starts, ends, codec, sh.path,
                                    lambda j: (int(starts[j]) if sh.in_file else None, sh.base + int(lidx[j])))

    def _decode_records(self, buf, starts, ends, codec: Compression, path, where):
        """Decompress sample-compressed records in one batch call (zstd, blosc2) or a loop."""
        from .._core import _codecs

        batch = {"zstd": _codecs.zstd_decode_many, "blosc2": _codecs.blosc2_decode_many}.get(codec.codec)
        if batch is not None:
            try:
                return batch(buf, starts, ends, self.limit, self.decode_threads, path=path)
            except HpcioError:
                pass  # decode one by one below to name the bad record exactly
        mv = memoryview(buf)
        out = []
        for j, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
            offset, sample = where(j)
            out.append(codec.decompress(mv[a:b], self.limit, path=path, offset=offset, sample=sample))
        pos = np.zeros(len(out) + 1, np.uint64)
        np.cumsum([len(o) for o in out], out=pos[1:])
        return b"".join(out), pos

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
        while k < len(self.shards) and self._cum_list[k] < stop:
            lo = max(start, self._cum_list[k]) - self._cum_list[k]
            hi = min(stop, self._cum_list[k + 1]) - self._cum_list[k]
            if hi > lo:
                yield from self._scan_shard(k, lo, hi, cols)
            k += 1

    def _scan_shard(self, k: int, lo: int, hi: int, cols: list[int]) -> Iterator[Iterable[dict]]:
        """Shard ``k``'s samples ``lo..hi`` as dicts, in runs: a buffer-full at a time, or
        all of them from one iterator that builds each sample as it is asked for."""
        from .._core import _index, _io

        info = self.shards[k]
        base_id = self._cum_list[k]
        large = info.raw_bytes > _LARGE_RECORD * max(info.samples, 1)
        if info.whole_shard or self.zero_copy or large or k in self._maps:
            # In memory or mapped already (zero-copy values must not view a reused read
            # buffer; large values are copied once from the map instead of twice through
            # the read buffer): slice batches straight out of the shard.
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
                yield self._columns_of(k, np.arange(a, b, dtype=np.int64), cols, as_samples=True)
            return
        path = self._file(info)
        if self.validate_hashes:
            self._check_hash(info, path)
        with _io.ShardFile(path) as f:
            size = f.size
            n = _check_header(info, path, size, f.pread, base_id)
            starts, ends = _index.offset_ranges(f.pread(4, 4 * (n + 1)), 4, n, size, None,
                                                path=path, table_offset=4, sample_base=base_id)
            starts, ends = starts[lo:hi], ends[lo:hi]
            codec = info.compression
            j = 0
            while j < len(starts):
                view, pos, count = f.read_records(starts[j:], ends[j:])
                first = j

                def where(r, first=first):
                    return int(starts[first + r]), base_id + lo + first + r

                if codec is not None and codec.per_sample:
                    buf, pos = self._decode_records(view, pos[:-1], pos[1:], codec, path, where)
                else:
                    buf = view
                pos = np.asarray(pos, dtype=np.int64)

                # Decoded a slice at a time: the values of a small batch are created and
                # consumed while the record bytes are still in cache.
                for a in range(0, count, _SCAN_BATCH):
                    b = min(a + _SCAN_BATCH, count)

                    def locate(r, where=where, a=a):
                        offset, sample = where(a + r)
                        return path, offset, sample

                    yield self._layout.samples(buf, pos[a:b], pos[a + 1 : b + 1], cols,
                                               self.decode_images, locate)
                j += count

    def _record_samples(self, k: int, lo: int, hi: int, cols: list[int]):
        """Shard ``k``'s samples ``lo..hi`` built one at a time from its mapped (or
        decompressed) bytes (:meth:`_Layout.sample_iterator`), or None when a selected
        column needs the general decoder, records are compressed one by one, or the
        records are read with ``pread`` (small cached pages, see _LARGE_RECORD).

        One sample at a time keeps a pass's memory to one sample's: a fresh process
        reuses it instead of growing its heap (vlm zero-copy: 90 page faults instead of
        185, and 4.1 -> 3.6 ms for 2,000 samples).
        """
        codec = self.shards[k].compression
        if (codec is not None and codec.per_sample) or not self._layout.direct(cols, self.decode_images,
                                                                                 self.zero_copy):
            return None
        sh, _lidx, starts, ends = self._ranges(k, np.arange(lo, hi, dtype=np.int64))
        if sh.pread_values:
            return None

        def locate(j):
            return sh.path, int(starts[j]) if sh.in_file else None, sh.base + lo + j

        # our own view of the shard keeps the map alive if the shard is evicted meanwhile
        return self._layout.sample_iterator(memoryview(sh.buf), starts, ends, cols, self.decode_images,
                                            locate, self.zero_copy)

    def close(self) -> None:
        for cache in (self._maps, self._mem):
            while cache:
                cache.popitem()[1].close()

    def __repr__(self):
        return f"<hpcio.formats.mds.Reader {self.directory!r} n={len(self)} shards={len(self.shards)}>"


# --- the writer -------------------------------------------------------------------------
_warned_sample_compression = False


def _warn_sample_compression(spec: str) -> None:
    global _warned_sample_compression
    if _warned_sample_compression:
        return
    _warned_sample_compression = True
    warnings.warn(
        f"compression={spec!r} compresses each sample: hpcio and mldataforge read such "
        "shards, but stock mosaicml-streaming DELETES them when a StreamingDataset opens "
        "the directory; call hpcio.formats.mds.register_streaming_reader() before creating "
        "any StreamingDataset over them",
        UserWarning,
        stacklevel=4,
    )


def _check_columns(columns: Mapping[str, str], allow_pickle: bool) -> None:
    """Raise what a writer raises for these columns: names that are not str, unknown
    encodings, ``pkl`` without ``allow_pickle``."""
    for name in sorted(columns):
        encoding = columns[name]
        if not isinstance(name, str):
            raise SchemaError(f"column names must be str, got {name!r}")
        codec = column_codec(encoding, column=name)
        if codec.unsafe and not allow_pickle:
            raise UnsupportedValueError(
                f"column {name!r} uses the pkl encoding; readers of it run pickle (code from "
                "the file): pass allow_pickle=True to write it anyway"
            )


def infer_columns(sample: Mapping, allow_pickle: bool = False) -> dict:
    """The ``{name: encoding}`` columns a writer takes from its first sample."""
    return {key: infer_encoding(value, key, allow_pickle) for key, value in sample.items()}


class RecordEncoder:
    """The records of samples for fixed columns: the bytes a :class:`Writer` with these
    columns and compression stores for each sample, raising the same errors.

    Validates the columns (names are str, encodings known, ``pkl`` only with
    ``allow_pickle``); ``path`` is named in the errors.
    """

    def __init__(self, columns: Mapping[str, str], *, compression=None, allow_pickle: bool = False,
                 path=None):
        _check_columns(columns, allow_pickle)
        names = sorted(columns)
        encodings = [columns[n] for n in names]
        self.layout = _Layout(names, encodings, [column_codec(e).size for e in encodings])
        self.path = path
        self.compression = compression if isinstance(compression, Compression) else parse_compression(compression)
        self._names = set(names)
        self._plan = list(zip(names, self.layout.codecs, [s is None for s in self.layout.sizes]))
        # Samples of plain values are packed in one compiled call; the per-column path
        # below packs the rest and raises every error (the text bench's 20,000 records:
        # 67 -> 40 ms).
        self._packer = None
        if len(names) <= _records.MAX_COLUMNS:
            # every other column takes bytes values as they are, and nothing else
            kinds = tuple(_FIXED_KINDS.get(codec.kind, _records.KIND_BYTES) for codec in self.layout.codecs)
            self._packer = _records.RecordPacker(tuple(names), kinds, tuple(self.layout.sizes), _json_dumps)

    def encode(self, sample: Mapping, number: int = 0) -> bytes:
        """The record of ``sample`` before sample-level compression (``number`` names the
        sample in errors)."""
        if self._packer is not None:
            record = self._packer.pack(sample)
            if record is not None:
                return record
        if sample.keys() != self._names:
            missing = sorted(self._names - sample.keys())
            extra = sorted(set(sample.keys()) - self._names)
            detail = f"lacks column(s) {missing}" if missing else f"has field(s) {extra} that are not columns"
            raise SchemaError(
                f"sample {detail}; the columns are {sorted(self._names)}", path=self.path, sample=number
            )
        sizes = []
        data = [b""]  # the size header, packed once the sizes are known
        for name, codec, variable in self._plan:
            datum = encode_value(codec, sample[name], name, number)
            if variable:
                sizes.append(len(datum))
            data.append(datum)
        data[0] = self.layout._head_fmt.pack(*sizes)
        return b"".join(data)

    def record(self, sample: Mapping, number: int = 0) -> bytes:
        """The record of ``sample`` as stored: after sample-level compression, if any."""
        record = self.encode(sample, number)
        if self.compression is not None and self.compression.per_sample:
            record = self.compression.compress(record)
        return record


def _shard_config(layout: _Layout, compression: Compression | None, hashes: list, size_limit) -> dict:
    """The configuration every shard entry of ``index.json`` carries, and a shard's
    header ends with."""
    return {
        "version": 2,
        "format": "mds",
        "compression": None if compression is None else compression.spec,
        "hashes": hashes,
        "size_limit": size_limit,
        "column_names": layout.names,
        "column_encodings": layout.encodings,
        "column_sizes": layout.sizes,
    }


def _shard_head(lengths: np.ndarray, config_data: bytes, number: int, path) -> bytes:
    """The bytes of a shard before its records, which have ``lengths``: the record count,
    the u32 offset of every record and of the end, the configuration."""
    n = len(lengths)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets += 8 + 4 * n + len(config_data)
    if offsets[-1] >= 1 << 32:
        raise SchemaError(
            f"shard {number} would be {int(offsets[-1])} bytes; MDS offsets are u32 (lower size_limit)", path=path,
        )
    return _U32.pack(n) + offsets.astype("<u4").tobytes() + config_data


class Writer(base.Writer):
    """Writes an MDS dataset, byte-identical to streaming's ``MDSWriter``.

    Parameters
    ----------
    path
        Output directory; created if missing, and must be empty unless ``overwrite``.
    columns
        ``{name: encoding}``; inferred from the first sample when omitted (the rules of
        mldataforge, see :func:`hpcio.formats._mds_encodings.infer_encoding`).
    compression
        ``None``; whole-shard ``"zstd"``, ``"zstd:7"``, ``"gz"``, ``"bz2"``, ``"br"``,
        ``"snappy"``; or sample-level ``"sample::<any of those>"`` / ``"sample::blosc2"``.
    size_limit
        Start a new shard before one would exceed this many (uncompressed) bytes;
        an int below 2**32 or a string like ``"64mb"``; ``None`` for one shard.
    hashes
        Sorted hash names recorded for each file (``"sha1"``, ``"xxh64"``, ...).
    allow_pickle
        Allow ``pkl`` columns (explicit or inferred); reading them runs code.
    overwrite
        Remove an existing non-empty ``path`` first.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.base`): write every sample into the
        single shard ``shard.<shard_id>.mds`` (no size roll-over) and no ``index.json``;
        :meth:`index_part` then gives the shard's ``index.json`` entry for
        :func:`merge_index`.
    """

    def __init__(self, path, columns: Mapping[str, str] | None = None, compression: str | None = None,
                 size_limit: int | str | None = DEFAULT_SIZE_LIMIT, hashes: Sequence[str] | None = None,
                 allow_pickle: bool = False, overwrite: bool = False,
                 shard_id: int | None = None, num_shards: int | None = None):
        super().__init__(path)
        self.shard_id = shard_id
        if shard_id is not None:
            size_limit = None
        self.compression = parse_compression(compression)
        self.hashes = list(hashes or [])
        if self.hashes != sorted(set(self.hashes)):
            raise ValueError(f"hashes must be unique and sorted, got {self.hashes}")
        for algo in self.hashes:
            if algo not in _hash_functions():
                raise ValueError(f"unknown hash {algo!r}; use a hashlib or xxhash algorithm name")
        self.size_limit = _parse_size(size_limit)
        if self.size_limit is not None and not 0 <= self.size_limit < 1 << 32:
            raise ValueError(f"size_limit must be in [0, 2**32), got {self.size_limit}: offsets are u32")
        self.allow_pickle = allow_pickle
        if os.path.isdir(self.path) and os.listdir(self.path):
            if not overwrite:
                raise FileExistsError(f"{self.path} exists and is not empty (pass overwrite=True to replace it)")
            import shutil

            shutil.rmtree(self.path)
        self._created_dir = not os.path.isdir(self.path)
        os.makedirs(self.path, exist_ok=True)
        self._written: list[str] = []
        self._shards: list[dict] = []
        self._records: list[bytes] = []
        self._closed = False
        self._columns = None
        if self.compression is not None and self.compression.per_sample:
            _warn_sample_compression(self.compression.spec)
        if columns is not None:
            self._set_columns(dict(columns))

    def _set_columns(self, columns: dict) -> None:
        self._encoder = RecordEncoder(columns, compression=self.compression, allow_pickle=self.allow_pickle,
                                      path=self.path)
        self._columns = columns
        self._config = _shard_config(self._encoder.layout, self.compression, self.hashes, self.size_limit)
        self._config_data = json.dumps(self._config, sort_keys=True).encode("utf-8")
        self._shard_size = 8 + len(self._config_data)

    @property
    def columns(self) -> dict | None:
        """The ``{name: encoding}`` columns (None until known)."""
        return None if self._columns is None else dict(self._columns)

    def _encoder_for(self, sample: Mapping) -> RecordEncoder:
        """The encoder, with the columns of ``sample`` when none are set yet."""
        if self._columns is None:
            self._set_columns(infer_columns(sample, self.allow_pickle))
        return self._encoder

    def encode(self, sample: Mapping) -> bytes:
        """The record bytes of ``sample`` (before sample-level compression)."""
        return self._encoder_for(sample).encode(sample, self.count)

    def write(self, sample: Mapping) -> None:
        if self._closed:
            raise ValueError("write to a closed MDS writer")
        self.write_record(self._encoder_for(sample).record(sample, self.count))

    def write_record(self, record) -> None:
        """Append a record as :meth:`RecordEncoder.record` made it (bytes-like), for
        samples encoded elsewhere; the writer's columns must be the encoder's."""
        if self._closed:
            raise ValueError("write to a closed MDS writer")
        if self._columns is None:
            raise ValueError("an MDS writer takes records only once its columns are given")
        # streaming's rule, to the byte: flush when the limit would be exceeded, even
        # before the first record of a shard (which then flushes an empty shard).
        grow = len(record) + 4
        if self.size_limit and self.size_limit < self._shard_size + grow:
            self._flush()
        self._records.append(record)
        self._shard_size += grow
        self.count += 1

    def _flush(self) -> None:
        records = self._records
        n = len(records)
        number = len(self._shards) if self.shard_id is None else self.shard_id
        # The shard is written (and hashed) from its pieces: joining them first would copy
        # every record once more into a shard-sized buffer.
        lengths = np.fromiter((len(r) for r in records), np.int64, count=n)
        pieces = [_shard_head(lengths, self._config_data, number, self.path), *records]
        basename = f"shard.{number:05}.mds"
        raw_info = self._file_info(pieces, basename)
        zip_info = None
        if self.compression is not None and not self.compression.per_sample:
            pieces = [self.compression.compress(b"".join(pieces))]
            basename = f"{basename}.{self.compression.name}"
            zip_info = self._file_info(pieces, basename)
        target = os.path.join(self.path, basename)
        self._written.append(target)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            write_pieces(fd, pieces)
        finally:
            os.close(fd)
        self._shards.append({"samples": n, "raw_data": raw_info, "zip_data": zip_info, **self._config})
        self._records = []
        self._shard_size = 8 + len(self._config_data)

    def _file_info(self, pieces: list, basename: str) -> dict:
        """The index entry of a file holding ``pieces`` back to back."""
        hashes = {}
        for algo in self.hashes:
            h = _hash_functions()[algo]()
            for piece in pieces:
                h.update(piece)
            hashes[algo] = h.hexdigest()
        return {"basename": basename, "bytes": sum(len(p) for p in pieces), "hashes": hashes}

    def close(self) -> None:
        if self._closed:
            return
        if self._records:
            self._flush()
        if self.shard_id is not None:
            self._closed = True
            return
        index = os.path.join(self.path, INDEX_NAME)
        tmp = index + ".tmp"
        self._written.append(tmp)
        with open(tmp, "w") as f:
            json.dump({"version": 2, "shards": self._shards}, f, sort_keys=True)
        os.replace(tmp, index)
        self._closed = True

    def index_part(self) -> dict | None:
        """This shard's ``index.json`` entry (sharded-writing hook); None when no sample
        was written (the shard has no file)."""
        return self._shards[0] if self._shards else None

    def abort(self) -> None:
        self._closed = True
        self._records = []
        for name in self._written:
            try:
                os.remove(name)
            except FileNotFoundError:
                pass
        if self._created_dir:
            try:
                os.rmdir(self.path)
            except OSError:
                pass


def merge_index(directory, parts, **options) -> None:
    """Write ``index.json`` of ``directory`` from shard entries in shard order (the
    sharded-writing hook of :mod:`hpcio.formats.base`), atomically; shards that received
    no sample (None) are left out."""
    index = os.path.join(os.fspath(directory), INDEX_NAME)
    tmp = index + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"version": 2, "shards": [p for p in parts if p is not None]}, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, index)


def record_options(sample: Mapping, *, columns: Mapping[str, str] | None = None,
                   allow_pickle: bool = False, **_options) -> dict:
    """Encoded-record hook (:mod:`hpcio.formats.base`): the writer options that fix what
    a writer would take from ``sample`` as its first one, the columns; ``{}`` when
    ``columns`` are given.  Raises what that writer would raise for ``sample``."""
    if columns is not None:
        return {}
    fixed = infer_columns(sample, allow_pickle)
    _check_columns(fixed, allow_pickle)
    return {"columns": fixed}


def record_encoder(path, *, columns: Mapping[str, str], compression: str | None = None,
                   allow_pickle: bool = False, **_options) -> RecordEncoder:
    """Encoded-record hook: the encoder of the records a ``Writer(path, **options)``
    would store (``columns`` given or fixed by :func:`record_options`)."""
    return RecordEncoder(columns, compression=compression, allow_pickle=allow_pickle, path=os.fspath(path))


def record_layout(shard_id: int, lengths: np.ndarray, *, columns: Mapping[str, str], compression: str | None = None,
                  hashes: Sequence[str] | None = None, allow_pickle: bool = False,
                  **_options) -> tuple[str, bytes, dict] | None:
    """Placed-record hook (:mod:`hpcio.formats.base`): ``(file name, head, index part)``
    of the shard ``shard_id`` whose records have ``lengths``, as ``Writer(shard_id=...)``
    writes it: its file is ``head`` followed by the records back to back.  None when the
    file is not that: a whole-shard compression, or hashes of the file (computed over
    bytes that ranks place separately)."""
    codec = parse_compression(compression)
    if hashes or (codec is not None and not codec.per_sample):
        return None
    encoder = RecordEncoder(columns, compression=codec, allow_pickle=allow_pickle)
    config = _shard_config(encoder.layout, codec, [], None)
    basename = f"shard.{shard_id:05}.mds"
    head = _shard_head(np.asarray(lengths, np.int64), json.dumps(config, sort_keys=True).encode("utf-8"),
                       shard_id, basename)
    raw = {"basename": basename, "bytes": len(head) + int(np.sum(lengths)), "hashes": {}}
    return basename, head, {"samples": len(lengths), "raw_data": raw, "zip_data": None, **config}


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> dict:
    """Summary of an MDS dataset: samples, shards, columns, compression, sizes."""
    directory = _dataset_dir(path)
    shards = _load_index(directory)
    columns = dict(zip(*shards[0].columns[:2])) if shards else {}
    return {
        "format": NAME,
        "path": directory,
        "samples": sum(s.samples for s in shards),
        "shards": len(shards),
        "columns": columns,
        "compression": sorted({s.compression.spec if s.compression else "none" for s in shards}),
        "hashes": sorted({h for s in shards for h in s.entry.get("hashes") or []}),
        "size_limit": shards[0].entry.get("size_limit") if shards else None,
        "raw_bytes": sum(s.raw_bytes for s in shards),
        "stored_bytes": sum(s.zip_bytes if s.whole_shard else s.raw_bytes for s in shards),
        "shard_samples": {"min": min((s.samples for s in shards), default=0),
                          "max": max((s.samples for s in shards), default=0)},
    }


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> dict:
    """Check every hash and decode every record of an MDS dataset.

    Returns a report ``{"ok", "path", "samples", "shards", "hashes_checked",
    "records_checked", "errors": [{"path", "offset", "sample", "error"}]}``; each bad
    sample is reported on its own and checking goes on (up to ``max_errors``).  ``pkl``
    columns are sliced and size-checked but only unpickled with ``allow_pickle``.
    """
    directory = _dataset_dir(path)
    report = {"ok": True, "path": directory, "samples": 0, "shards": 0,
              "hashes_checked": 0, "records_checked": 0, "errors": []}

    def fail(exc: Exception) -> None:
        report["ok"] = False
        if len(report["errors"]) < max_errors:
            report["errors"].append({
                "path": getattr(exc, "path", None), "offset": getattr(exc, "offset", None),
                "sample": getattr(exc, "sample", None), "error": str(exc), "type": type(exc).__name__,
            })

    try:
        reader = Reader(directory, allow_pickle=True)
    except HpcioError as exc:
        fail(exc)
        return report
    report["samples"], report["shards"] = len(reader), len(reader.shards)
    layout = reader._layout
    cols = [c for c, e in enumerate(layout.encodings) if allow_pickle or e != "pkl"] if layout else []
    with reader:
        for k, info in enumerate(reader.shards):
            try:
                report["hashes_checked"] += _verify_hashes(reader, info)
                sh = reader._shard(k)
            except HpcioError as exc:
                fail(exc)
                continue
            report["records_checked"] += _verify_records(reader, sh, cols, fail)
            reader.close()  # one shard at a time keeps memory flat
    return report


def _verify_hashes(reader: Reader, info: _ShardInfo) -> int:
    path = reader._file(info)
    with open(path, "rb") as f:
        data = f.read()
    checked = 0
    stored = info.zip_hashes if info.whole_shard else info.raw_hashes
    for algo, want in sorted(stored.items()):
        if algo not in _hash_functions():
            raise CorruptShardError(f"index.json names an unknown hash {algo!r}", path=path)
        got = _digest(algo, data)
        if got != want:
            raise CorruptShardError(f"{algo} mismatch: index.json says {want}, the file hashes to {got}", path=path)
        checked += 1
    if info.whole_shard:
        raw = reader._decompress_shard(info, path)
        for algo, want in sorted(info.raw_hashes.items()):
            got = _digest(algo, raw)
            if got != want:
                raise CorruptShardError(
                    f"{algo} mismatch of the decompressed shard: index.json says {want}, got {got}", path=path
                )
            checked += 1
    return checked


def _verify_records(reader: Reader, sh: _OpenShard, cols: list[int], fail) -> int:
    codec = sh.info.compression
    ok = 0
    for local in range(sh.n):
        i = sh.base + local
        begin, end = _PAIR.unpack_from(sh.buf, 4 + 4 * local)
        offset = begin if sh.in_file else None
        try:
            rec = sh.buf[begin:end]
            if codec is not None and codec.per_sample:
                rec = memoryview(codec.decompress(rec, reader.limit, path=sh.path, offset=offset, sample=i))
            reader._layout.record(rec, cols, False, lambda: (sh.path, offset, i))
            ok += 1
        except HpcioError as exc:
            fail(exc)
    return ok


# --- streaming drop-in ------------------------------------------------------------------
def register_streaming_reader() -> type:
    """Make mosaicml-streaming read MDS shards through hpcio (``_readers["mds"]``).

    Afterwards every ``StreamingDataset`` in this process reads ``sample::<algo>``
    shards (which stock streaming deletes, see ``docs/formats/mds.md``) and plain ones.
    Returns the reader class installed.
    """
    from ..streaming_compat import install

    return install()
