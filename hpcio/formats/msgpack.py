"""MessagePack files: a stream of maps, one per sample.

Values map onto MessagePack types directly (bytes as bin, str as str, ints up to 64
bits, floats as float64, lists and maps); numpy arrays are an extension type (code 1)
holding ``.npy`` bytes, so they keep dtype and shape.  A reader builds an offset index
of the samples on first open (one pass, kept in memory) and then decodes only the
samples asked for, from a memory map.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping

import numpy as np

from ..errors import (
    CorruptShardError,
    MissingDependencyError,
    OptionError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from ..registry import Capabilities
from . import _values
from ._checksums import Manifest, manifest_path, validate_files
from .base import (
    BatchReader,
    FileWriter,
    PendingFiles,
    files_bytes,
    inspect_report,
    locate,
    sample_starts,
    shard_files,
    verify_samples,
)
from .reports import InspectReport, VerifyReport

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "build_index", "list_files",
           "inspect", "verify"]

NAME = "msgpack"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=False, batch_read=True)
SHARD_PATTERN = "shard-%06d.msgpack"
NDARRAY_EXT = 1


def _msgpack():
    try:
        import msgpack
    except ImportError as exc:
        raise MissingDependencyError(
            "the msgpack format needs msgpack: pip install msgpack (or pip install 'hpcio[formats]')"
        ) from exc
    return msgpack


def list_files(path) -> list[str]:
    return shard_files(path, (".msgpack", ".mpk"), "MessagePack")


def sniff(path) -> bool:
    try:
        files = list_files(path)
    except ShardNotFoundError:
        return False
    if not files or not files[0].endswith((".msgpack", ".mpk")):
        return False
    with open(files[0], "rb") as f:
        first = f.read(1)
    # a stream of maps starts with a fixmap (0x80-0x8f) or map16/map32 (0xde/0xdf)
    return not first or 0x80 <= first[0] <= 0x8F or first[0] in (0xDE, 0xDF)


def _default(value):
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        msgpack = _msgpack()
        return msgpack.ExtType(NDARRAY_EXT, _values.encode_npy(value))
    raise UnsupportedValueError(f"cannot serialize {type(value).__name__}")


def _ext_hook(code, data):
    if code == NDARRAY_EXT:
        return _values.decode_npy(data)
    return _msgpack().ExtType(code, data)


def pack(sample: Mapping, *, sample_index=None, path=None) -> bytes:
    """One sample as a MessagePack map."""
    msgpack = _msgpack()
    for name, value in sample.items():
        _values.check_field_name(name, sample=sample_index, path=path)
        _values.kind_of(value, field=name, sample=sample_index, path=path)
    try:
        return msgpack.packb(dict(sample), use_bin_type=True, default=_default, strict_types=False)
    except (TypeError, OverflowError, ValueError) as exc:
        raise UnsupportedValueError(f"sample cannot be packed: {exc}", path=path, sample=sample_index) from None


def unpack(data, *, sample_index=None, path=None, offset=None) -> dict:
    msgpack = _msgpack()
    try:
        value = msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise CorruptShardError(f"invalid MessagePack data: {exc}", path=path, offset=offset,
                                sample=sample_index) from None
    if not isinstance(value, dict):
        raise CorruptShardError(f"expected a map, got {type(value).__name__}", path=path,
                                offset=offset, sample=sample_index)
    return value


def build_index(buf, *, path=None, sample_base: int = 0) -> np.ndarray:
    """Start offsets of the top-level objects in ``buf`` plus the end (count+1 entries).

    A final object cut short is a TruncatedShardError naming the byte offset where it
    starts and its sample number.
    """
    msgpack = _msgpack()
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(buf), 1 << 20))
    unpacker.feed(buf)
    offsets = [0]
    while True:
        try:
            unpacker.skip()
        except msgpack.OutOfData:
            break
        except Exception as exc:
            raise CorruptShardError(f"invalid MessagePack data: {exc}", path=path, offset=offsets[-1],
                                    sample=sample_base + len(offsets) - 1) from None
        offsets.append(unpacker.tell())
    if offsets[-1] != len(buf):
        raise TruncatedShardError(
            f"MessagePack object truncated: {len(buf) - offsets[-1]} bytes left at the end",
            path=path, offset=offsets[-1], sample=sample_base + len(offsets) - 1)
    return np.asarray(offsets, dtype=np.uint64)


class Writer(FileWriter):
    """Writes ``path/shard-%06d.msgpack`` (or one file when ``path`` ends in ``.msgpack``).

    ``hashes``: ``["xxh3_64"]`` (None, the default) records the xxh3_64 of every file in
    a manifest beside them (``hashes.json`` in the directory, ``<file>.hashes.json`` beside
    a single file; :mod:`hpcio.formats._checksums`) for ``validate_hashes=True`` and
    ``hpcio verify``; ``[]`` writes the MessagePack files alone, the same bytes either way.
    """

    def __init__(self, path, max_count: int = 100_000, max_size: int = 1 << 30, hashes=None, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unknown MessagePack writer options: {', '.join(options)}")
        self.manifest = Manifest(hashes, "MessagePack")
        _msgpack()
        self.single = self.path.endswith((".msgpack", ".mpk"))
        self.pending = PendingFiles(None if self.single else self.path)
        self.max_count, self.max_size = max_count, max_size
        self.file = None
        self.number = 0

    def _open(self):
        final = self.path if self.single else os.path.join(self.path, SHARD_PATTERN % self.number)
        self.number += 1
        self.open_file(final)
        self.file_count = self.file_size = 0

    def write(self, sample: Mapping) -> None:
        data = pack(sample, sample_index=self.count, path=self.path)
        if self.file is not None and not self.single and (
                self.file_count >= self.max_count or self.file_size + len(data) > self.max_size):
            self.close_file()
        if self.file is None:
            self._open()
        self.file.write(data)
        self.file_count += 1
        self.file_size += len(data)
        self.count += 1

    def close(self) -> None:
        with self.aborting():
            if self.file is None and not self.pending:
                self._open()
            self.close_file()
            self.publish(manifest_path(self.path, self.single))


class Reader(BatchReader):
    """Random-access reader of MessagePack map streams (a file or a directory of them).

    ``validate_hashes=True`` checks every file against the xxh3_64 its hash manifest
    records before reading (:class:`~hpcio.errors.ChecksumMismatchError` naming the file);
    ``"xxh3_64"`` also requires every file to have one.
    """

    def __init__(self, path, validate_hashes: bool | str = False, **options):
        from .._core import _io

        super().__init__(path)
        self.paths = list_files(self.path)
        validate_files(self.paths, validate_hashes)
        self.maps, self.files, self.offsets = [], [], []
        counts = []
        try:
            for p in self.paths:
                f = open(p, "rb")
                self.files.append(f)
                size = os.fstat(f.fileno()).st_size
                m = _io.map_file(f.fileno()) if size else b""
                self.maps.append(m)
                table = build_index(m, path=p, sample_base=sum(counts))
                self.offsets.append(table)
                counts.append(len(table) - 1)
        except BaseException:
            self.close()
            raise
        self.cum = sample_starts(counts)

    def read_many(self, indices, fields=None) -> list:
        indices = np.asarray(indices, dtype=np.int64)
        which, local = locate(self.cum, indices)
        out = []
        for k, j, i in zip(which.tolist(), local.tolist(), indices.tolist()):
            a, b = int(self.offsets[k][j]), int(self.offsets[k][j + 1])
            sample = unpack(self.maps[k][a:b], sample_index=i, path=self.paths[k], offset=a)
            out.append(sample if fields is None else {f: sample[f] for f in fields})
        return out

    def close(self) -> None:
        for m in self.maps:
            if isinstance(m, mmap.mmap):
                m.close()
        for f in self.files:
            f.close()
        self.maps, self.files = [], []


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> InspectReport:
    """Samples and files of MessagePack streams; ``fields`` are the keys of the first
    sample with the kinds of their values (other samples may differ: maps are untyped)."""
    with Reader(path) as r:
        first = r.read(0) if len(r) else {}
        fields = {k: _values.kind_of(v, field=k, sample=0, path=r.paths[0]) for k, v in first.items()}
        return inspect_report(NAME, path, samples=len(r), shards=len(r.paths), fields=fields,
                              stored_bytes=files_bytes(r.paths))


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Check every file against its hash manifest entry, then decode every map of every
    file (the offset index already walked their structure)."""
    return verify_samples(NAME, path, lambda: Reader(path), list_files, max_errors=max_errors, manifest=True)
