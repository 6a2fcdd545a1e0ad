"""An MDS dataset's ``index.json``: finding it, loading it, checking every shard entry.

The index is trusted for nothing: each entry is checked (version, format, sample count,
file names inside its directory, a known compression, one encoding and size per column) before a
reader opens a shard, so a bad index fails with the entry named instead of a stray read.
"""

from __future__ import annotations

import json
import os

import orjson

from ..._paths import encodable
from ..._struct import Struct
from ...errors import CorruptShardError, ShardNotFoundError
from .compression import Compression, parse_compression
from .encodings import column_codec

__all__ = ["NAME", "INDEX_NAME", "sniff"]

NAME = "mds"
INDEX_NAME = "index.json"


def _dataset_dir(path) -> str:
    """The dataset directory ``path`` names: itself, or the directory of its index.json."""
    path = os.fspath(path)
    if os.path.basename(path) == INDEX_NAME and os.path.isfile(path):
        return os.path.dirname(path) or "."
    return path


def sniff(path) -> bool:
    """Whether ``path`` is an MDS dataset directory (or its ``index.json``)."""
    directory = _dataset_dir(path)
    index = os.path.join(directory, INDEX_NAME)
    if not os.path.isfile(index):
        return False
    # A compact index says so in its first 8 bytes: index.json, 30 MB at 10^5 shards,
    # is then not read (whether the compact index matches it is the reader's question).
    try:
        with open(os.path.join(directory, "index.hpcio"), "rb") as f:
            if f.read(8) == b"HPCIOMDS":
                return True
    except OSError:
        pass
    try:
        with open(index, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if b'"format": "mds"' in head:
        return True
    # An empty dataset's index names no format: accept exactly streaming's empty index.
    return head.strip() == b'{"shards": [], "version": 2}'


class _ShardInfo(Struct):
    """One entry of ``index.json``, checked."""

    _fields = ("position", "samples", "raw_basename", "raw_bytes", "raw_hashes", "zip_basename", "zip_bytes",
               "zip_hashes", "compression", "columns", "entry", "source")
    _defaults = {"source": INDEX_NAME}
    _frozen = False
    __slots__ = _fields
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
    source: str  # the index the entry came from, named by errors

    @property
    def file_basename(self) -> str:
        return self.zip_basename or self.raw_basename

    @property
    def whole_shard(self) -> bool:
        return self.zip_basename is not None


def _loads(raw):
    """JSON from bytes: orjson, or Python's json for what orjson refuses (NaN, huge
    integers) and for its exact error messages.  Nesting too deep for json's recursion
    is a JSONDecodeError like any other malformed document."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            return json.loads(bytes(raw))
        except RecursionError:
            raise json.JSONDecodeError("arrays and objects nested too deep", "", 0) from None


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


def _check_entry(k: int, entry, index_path: str, source: str = INDEX_NAME, offset: int | None = None) -> _ShardInfo:
    """Shard entry ``k`` checked; errors name ``source`` (the index it came from) and
    ``offset`` (where in that file the entry starts, when known)."""
    def bad(detail: str) -> CorruptShardError:
        return CorruptShardError(f"shard entry {k} of {source}: {detail}", path=index_path, offset=offset)

    if not isinstance(entry, dict):
        raise bad(f"expected an object, got {type(entry).__name__}")
    if entry.get("version") != 2:
        raise bad(f"version {entry.get('version')!r}; MDS readers need version 2")
    if entry.get("format") != NAME:
        raise bad(f"format {entry.get('format')!r}, expected 'mds'")
    samples = entry.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        raise bad(f"'samples' is {samples!r}, expected a non-negative integer")
    algos = entry.get("hashes")
    if algos and not (isinstance(algos, list) and all(isinstance(a, str) for a in algos)):
        raise bad(f"'hashes' is {algos!r}, expected a list of algorithm names")
    raw, zip_ = entry.get("raw_data"), entry.get("zip_data")
    _check_files(raw, zip_, bad)
    # A shard holds its count and n + 1 u32 offsets, the last of which is its size: a
    # count its size cannot hold is refused here, before any sum of counts is trusted.
    if 8 + 4 * samples > raw["bytes"]:
        raise bad(f"'samples' is {samples}, but a shard of {raw['bytes']} bytes holds at most "
                  f"{max(raw['bytes'] - 8, 0) // 4}")
    if raw["bytes"] >= 1 << 32:
        raise bad(f"'raw_data' bytes is {raw['bytes']}; MDS offsets are u32, so a shard is under 4 GiB")
    compression = _entry_compression(entry, zip_, bad)
    columns = _entry_columns(entry, index_path, bad)
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
        columns=columns,
        entry=entry,
        source=source,
    )


def _inside_name(name: str) -> bool:
    """Whether ``name`` is a relative path that stays below the dataset directory.

    streaming's ``merge_index`` writes basenames such as ``0/shard.00000.mds``, so
    sub-directories are allowed; an absolute path, ``..``, ``.`` or an empty component
    would let an index point anywhere.
    """
    if not name or "\\" in name or "\0" in name:
        return False
    parts = name.split("/")
    return all(part not in ("", ".", "..") for part in parts)


def _check_files(raw, zip_, bad) -> None:
    """The entry's ``raw_data`` and optional ``zip_data``: a name inside and a size."""
    for key, info in (("raw_data", raw), ("zip_data", zip_)):
        if info is None and key == "zip_data":
            continue
        if not isinstance(info, dict) or not isinstance(info.get("basename"), str):
            raise bad(f"'{key}' lacks a basename")
        name = info["basename"]
        if not _inside_name(name):
            raise bad(f"'{key}' basename {name!r} leaves the dataset directory")
        if not encodable(name):
            raise bad(f"'{key}' basename {name!r} is not a file name")
        if not isinstance(info.get("bytes"), int) or info["bytes"] < 0:
            raise bad(f"'{key}' bytes is {info.get('bytes')!r}")
        hashes = info.get("hashes")
        if hashes and not (isinstance(hashes, dict)
                           and all(isinstance(a, str) and isinstance(d, str) for a, d in hashes.items())):
            raise bad(f"'{key}' hashes is {hashes!r}, expected an object of hex digests by algorithm")


def _entry_compression(entry: dict, zip_, bad) -> Compression | None:
    """The entry's compression, which has a ``zip_data`` exactly when it is whole-shard."""
    try:
        compression = parse_compression(entry.get("compression"))
    except ValueError as exc:
        raise bad(str(exc)) from None
    if compression is not None and not compression.per_sample and zip_ is None:
        raise bad(f"compression {compression.spec!r} but no 'zip_data'")
    if zip_ is not None and (compression is None or compression.per_sample):
        raise bad(f"'zip_data' present but compression is {entry.get('compression')!r}")
    return compression


def _entry_columns(entry: dict, index_path: str, bad) -> tuple:
    """The entry's ``(names, encodings, sizes)``: known encodings, each with its size."""
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
        if not isinstance(name, str) or not isinstance(encoding, str):
            raise bad(f"column {name!r} has encoding {encoding!r}: names and encodings are strings")
        codec = column_codec(encoding, path=index_path, column=name)
        if size != codec.size:
            raise bad(f"column {name!r} ({encoding}) has size {size!r}; the encoding's size is {codec.size!r}")
    return tuple(names), tuple(encodings), tuple(sizes)
