"""MessagePack files: a stream of maps, one per sample.

Values map onto MessagePack types directly (bytes as bin, str as str, ints up to 64
bits, floats as float64, lists and maps); numpy arrays are an extension type (code 1)
holding ``.npy`` bytes, so they keep dtype and shape.  A reader builds an offset index
of each file's samples (one pass, kept in memory) and then decodes only the samples
asked for, from a memory map.  The writer records each file's sample count in its hash
manifest; a file whose count is recorded is opened, mapped and indexed on its first read
(the count checked then), so opening reads no file's bytes, which is what lets a node
cache (:class:`hpcio.NodeCache`) read the files; the others are indexed at open.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Mapping

import numpy as np

from .._published import Version
from ..errors import (
    CapabilityError,
    CorruptShardError,
    MissingDependencyError,
    OptionError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from ..registry import Capabilities
from . import _values
from ._checksums import Manifest, manifest_path, recorded_samples, validate_files
from .base import (
    BatchReader,
    FileWriter,
    PendingFiles,
    ShardFile,
    files_bytes,
    inspect_report,
    locate,
    manifest_shard_files,
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

    def file_facts(self) -> dict:
        return {"samples": self.file_count}

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


def plausible_samples(samples: int, size: int | None, file: str | None = None) -> bool:
    """Whether a MessagePack stream of ``size`` bytes can hold ``samples`` maps (each
    takes a byte at least, and an empty file none).

    >>> plausible_samples(0, 0), plausible_samples(3, 2), plausible_samples(0, 5)
    (True, False, False)
    """
    return size is not None and 0 <= samples <= size and (samples > 0 or size == 0)


class Reader(BatchReader):
    """Random-access reader of MessagePack map streams (a file or a directory of them).

    ``validate_hashes=True`` checks every file against the xxh3_64 its hash manifest
    records before reading (:class:`~hpcio.errors.ChecksumMismatchError` naming the file);
    ``"xxh3_64"`` also requires every file to have one.  A file whose sample count the
    manifest records is opened and indexed on its first read.
    """

    def __init__(self, path, validate_hashes: bool | str = False, **options):
        super().__init__(path)
        self.paths = list_files(self.path)
        validate_files(self.paths, validate_hashes)
        # a staged dataset staged again is not read across its versions
        self.version = Version(os.path.dirname(self.paths[0])) if self.paths else None
        n = len(self.paths)
        self.maps: list = [None] * n
        self.files: list = [None] * n
        self.offsets: list = [None] * n
        self.recorded = recorded_samples(self.paths, plausible_samples)
        counts: list[int] = []
        try:
            for k, recorded in enumerate(self.recorded):
                if recorded is None:
                    self._index(k, sum(counts))
                    recorded = len(self.offsets[k]) - 1
                counts.append(recorded)
        except BaseException:
            self.close()
            raise
        self.cum = sample_starts(counts)

    def _open(self, k: int) -> None:
        from .._core import _io

        try:
            f = open(self.paths[k], "rb")
        except FileNotFoundError:
            raise ShardNotFoundError("MessagePack file is missing", path=self.paths[k]) from None
        try:
            size = os.fstat(f.fileno()).st_size
            self.maps[k] = _io.map_file(f.fileno()) if size else b""
            if self.version is not None:
                self.version.check(self.paths[k])
        except BaseException:
            self.maps[k] = None
            f.close()
            raise
        self.files[k] = f

    def _index(self, k: int, base: int) -> None:
        if self.maps[k] is None:
            self._open(k)
        table = build_index(self.maps[k], path=self.paths[k], sample_base=base)
        recorded = self.recorded[k]
        if recorded is not None and len(table) - 1 != recorded:
            raise CorruptShardError(f"the file holds {len(table) - 1} samples, its hash manifest records "
                                    f"{recorded}", path=self.paths[k], sample=base + min(len(table) - 1, recorded))
        self.offsets[k] = table

    def _mapped(self, k: int):
        """File ``k``'s map and offsets, opened and indexed on first use."""
        if self.offsets[k] is None:
            self._index(k, int(self.cum[k]))
        elif self.maps[k] is None:
            self._open(k)
        return self.maps[k], self.offsets[k]

    def object_span(self, k: int, j: int) -> tuple[int, int]:
        """Byte range of object ``j`` in file ``k``, indexing the file on first use."""
        _, offsets = self._mapped(k)
        return int(offsets[j]), int(offsets[j + 1])

    def read_many(self, indices, fields=None) -> list:
        indices = np.asarray(indices, dtype=np.int64)
        which, local = locate(self.cum, indices)
        out = []
        for k, j, i in zip(which.tolist(), local.tolist(), indices.tolist()):
            m, offsets = self._mapped(k)
            a, b = int(offsets[j]), int(offsets[j + 1])
            sample = unpack(m[a:b], sample_index=i, path=self.paths[k], offset=a)
            out.append(sample if fields is None else {f: sample[f] for f in fields})
        return out

    @classmethod
    def check_node_cache(cls, path, options) -> None:
        """A node cache reads a directory of MessagePack files each with its size,
        xxh3_64 and sample count in ``hashes.json`` (what hpcio's writer records): without
        the count, opening would index every file through the shared tier.
        ``validate_hashes`` (every file hashed at open; the cache checks each file's
        xxh3_64 as it fetches it) and a single file are refused too."""
        if not os.path.isdir(path):
            raise CapabilityError("a node cache mirrors a directory of MessagePack files: pass the directory, "
                                  "not a file", path=str(path))
        if options.get("validate_hashes"):
            raise CapabilityError("validate_hashes would hash every file through the shared tier at open; a "
                                  "node cache checks each file against the xxh3_64 hashes.json records as it "
                                  "fetches it: leave validate_hashes out", path=path)
        paths = list_files(path)
        missing = [p for p, c in zip(paths, recorded_samples(paths, plausible_samples)) if c is None]
        if missing:
            raise CapabilityError(
                f"hashes.json records no sample count for {len(missing)} of the {len(paths)} MessagePack files, "
                "so opening them would index every such file through the shared tier, around the node cache; "
                "rewrite them with hpcio's MessagePack writer (hpcio.open_writer(DST, format=\"msgpack\")), "
                "which records the counts in hashes.json", path=missing[0])

    def files_of_shards(self) -> list[list[ShardFile]]:
        """Each file, with the size and xxh3_64 its hash manifest records (its size on
        disk where none names it)."""
        return manifest_shard_files(self.paths)

    def release_shards(self, shards) -> None:
        """Close the files of ``shards``; their offset indexes stay (a node cache checks
        that the fetched bytes are the same), and the next read maps the file now there."""
        for k in shards:
            self._close(int(k))

    def _close(self, k: int) -> None:
        m, f = self.maps[k], self.files[k]
        self.maps[k] = self.files[k] = None
        if isinstance(m, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view still exported: freed with it
                m.close()
        if f is not None:
            f.close()

    def close(self) -> None:
        for k in range(len(self.maps)):
            self._close(k)
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
