"""The MDS writer, and the hooks that let ranks encode and place records themselves.

The :class:`Writer` produces the same bytes as streaming's ``MDSWriter`` for the same
samples and options, plus mldataforge's sample-level compression
(``compression="sample::zstd"``) and hpcio's ``sample::blosc2``.  :class:`RecordEncoder`
makes a writer's record bytes apart from any writer, and ``record_options``,
``record_encoder`` and ``record_layout`` are the encoded-record and placed-record hooks
of :mod:`hpcio.formats.contract` that ``hpcio convert`` uses.
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from ..._core import _records
from ..._fileio import write_pieces
from ...errors import ClosedError, InvalidArgumentError, PathExistsError, SchemaError, UnsupportedValueError
from ...units import parse_bytes
from .. import base
from .compact_index import COMPACT_NAME, _write as _write_compact
from .compression import DEFAULT_HASHES, Compression, _hash_functions, parse_compression
from .encodings import column_codec, encode_value, infer_encoding
from .index import INDEX_NAME, NAME
from .json_text import _json_dumps
from .layout import _FIXED_KINDS, _Layout

__all__ = ["Writer", "RecordEncoder", "merge_index", "record_options", "record_encoder", "record_layout", "record_digests",
           "infer_columns"]

DEFAULT_SIZE_LIMIT = 1 << 26
_U32 = struct.Struct("<I")


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
    ``allow_pickle``); ``path`` is named in the errors.  ``frame_checksums``: see
    :class:`Writer`.
    """

    def __init__(self, columns: Mapping[str, str], *, compression=None, allow_pickle: bool = False,
                 path=None, frame_checksums: bool = True):
        _check_columns(columns, allow_pickle)
        names = sorted(columns)
        encodings = [columns[n] for n in names]
        self.layout = _Layout(names, encodings, [column_codec(e).size for e in encodings])
        self.path = path
        self.compression = compression if isinstance(compression, Compression) else parse_compression(compression)
        self.frame_checksums = frame_checksums
        self._names = set(names)
        self._plan = list(zip(names, self.layout.codecs, [s is None for s in self.layout.sizes]))
        # Samples of plain values are packed in one compiled call; the per-column path
        # below packs the rest and raises every error.
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
            record = self.compression.compress(record, checksum=self.frame_checksums)
        return record


def _hash_names(hashes: Sequence[str] | None) -> list[str]:
    """The hash names a writer records: ``hashes``, or the default ones when None."""
    return list(DEFAULT_HASHES if hashes is None else hashes)


def _shard_config(layout: _Layout, compression: Compression | None, hashes: list, size_limit) -> dict:
    """The configuration every shard entry of ``index.json`` carries, and a shard's
    header ends with."""
    return {
        "version": 2,
        "format": NAME,
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
        mldataforge, see :func:`hpcio.formats.mds.encodings.infer_encoding`).
    compression
        ``None``; whole-shard ``"zstd"``, ``"zstd:7"``, ``"gz"``, ``"bz2"``, ``"br"``,
        ``"snappy"``; or sample-level ``"sample::<any of those>"`` / ``"sample::blosc2"``.
    size_limit
        Start a new shard before one would exceed this many (uncompressed) bytes;
        an int below 2**32 or a string like ``"64mb"``; ``None`` for one shard.
    hashes
        Sorted hash names recorded for each file (``"sha1"``, ``"xxh64"``, ...), as
        streaming records them; by default ``["xxh3_64"]``, so that ``hpcio verify`` and
        ``validate_hashes=True`` catch a damaged shard.  ``[]`` records none.
    frame_checksums
        End each ``sample::zstd`` record's frame with its content checksum (default), so
        that every read of a damaged record fails instead of returning wrong values; 4
        bytes a record.  ``False`` writes mldataforge's exact records.  Blosc2 chunks
        have no checksum field: ``sample::blosc2`` records rely on the shard hashes.
    allow_pickle
        Allow ``pkl`` columns (explicit or inferred); reading them runs code.
    overwrite
        Remove an existing non-empty ``path`` first.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.contract`): write every sample into the
        single shard ``shard.<shard_id>.mds`` (no size roll-over) and no ``index.json``;
        :meth:`index_part` then gives the shard's ``index.json`` entry for
        :func:`merge_index`.
    """

    def __init__(self, path, columns: Mapping[str, str] | None = None, compression: str | None = None,
                 size_limit: int | str | None = DEFAULT_SIZE_LIMIT, hashes: Sequence[str] | None = None,
                 allow_pickle: bool = False, overwrite: bool = False,
                 shard_id: int | None = None, num_shards: int | None = None, frame_checksums: bool = True):
        super().__init__(path)
        self.shard_id = shard_id
        if shard_id is not None:
            size_limit = None
        self.compression = parse_compression(compression)
        self.hashes = _hash_names(hashes)
        if self.hashes != sorted(set(self.hashes)):
            raise InvalidArgumentError(f"hashes must be unique and sorted, got {self.hashes}")
        for algo in self.hashes:
            if algo not in _hash_functions():
                raise InvalidArgumentError(f"unknown hash {algo!r}; use a hashlib or xxhash algorithm name")
        # None or 0: no limit.  Strings read as streaming reads them ("64mb" is 64 MiB).
        self.size_limit = parse_bytes(size_limit, what="size_limit", decimal_base=1024) if size_limit else None
        if self.size_limit is not None and not 0 <= self.size_limit < 1 << 32:
            raise InvalidArgumentError(f"size_limit must be in [0, 2**32), got {self.size_limit}: offsets are u32")
        self.allow_pickle = allow_pickle
        self.frame_checksums = frame_checksums
        if os.path.isdir(self.path) and os.listdir(self.path):
            if not overwrite:
                raise PathExistsError(f"{self.path} exists and is not empty (pass overwrite=True to replace it)")
            import shutil

            shutil.rmtree(self.path)
        self._created_dir = not os.path.isdir(self.path)
        os.makedirs(self.path, exist_ok=True)
        self._written: list[str] = []
        self._shards: list[dict] = []
        self._records: list[bytes] = []
        self._closed = False
        self._columns: dict | None = None
        if self.compression is not None and self.compression.per_sample:
            _warn_sample_compression(self.compression.spec)
        if columns is not None:
            self._set_columns(dict(columns))

    def _set_columns(self, columns: dict) -> None:
        self._encoder = RecordEncoder(columns, compression=self.compression, allow_pickle=self.allow_pickle,
                                      path=self.path, frame_checksums=self.frame_checksums)
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
            raise ClosedError("write to a closed MDS writer")
        self.write_record(self._encoder_for(sample).record(sample, self.count))

    def write_record(self, record) -> None:
        """Append a record as :meth:`RecordEncoder.record` made it (bytes-like), for
        samples encoded elsewhere; the writer's columns must be the encoder's."""
        if self._closed:
            raise ClosedError("write to a closed MDS writer")
        if self._columns is None:
            raise SchemaError("an MDS writer takes records only once its columns are given")
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
        with self.aborting():
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
            self._written.append(os.path.join(self.path, COMPACT_NAME))
            _write_compact(self.path, self._shards, index_file=tmp)
            os.replace(tmp, index)
            self._closed = True

    def index_part(self) -> dict | None:
        """This shard's ``index.json`` entry (sharded-writing hook); None when no sample
        was written (the shard has no file)."""
        return self._shards[0] if self._shards else None

    def abort(self) -> None:
        self._closed = True
        self._records = []
        base.remove_files(self._written)
        if self._created_dir:
            base.remove_empty_dir(self.path)


def merge_index(directory, parts, **options) -> None:
    """Write ``index.json`` of ``directory`` from shard entries in shard order (the
    sharded-writing hook of :mod:`hpcio.formats.contract`), atomically, with its compact
    form ``index.hpcio`` (:mod:`hpcio.formats.mds.compact_index`) written just before;
    shards that received no sample (None) are left out."""
    index = os.path.join(os.fspath(directory), INDEX_NAME)
    tmp = index + ".tmp"
    entries = [p for p in parts if p is not None]
    with open(tmp, "w") as f:
        json.dump({"version": 2, "shards": entries}, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    _write_compact(os.fspath(directory), entries, durable=True, index_file=tmp)
    os.replace(tmp, index)


def record_options(sample: Mapping, *, columns: Mapping[str, str] | None = None,
                   allow_pickle: bool = False, **_options) -> dict:
    """Encoded-record hook (:mod:`hpcio.formats.contract`): the writer options that fix what
    a writer would take from ``sample`` as its first one, the columns; ``{}`` when
    ``columns`` are given.  Raises what that writer would raise for ``sample``."""
    if columns is not None:
        return {}
    fixed = infer_columns(sample, allow_pickle)
    _check_columns(fixed, allow_pickle)
    return {"columns": fixed}


def record_encoder(path, *, columns: Mapping[str, str], compression: str | None = None,
                   allow_pickle: bool = False, frame_checksums: bool = True, **_options) -> RecordEncoder:
    """Encoded-record hook: the encoder of the records a ``Writer(path, **options)``
    would store (``columns`` given or fixed by :func:`record_options`)."""
    return RecordEncoder(columns, compression=compression, allow_pickle=allow_pickle, path=os.fspath(path),
                         frame_checksums=frame_checksums)


def record_layout(shard_id: int, lengths: np.ndarray, *, columns: Mapping[str, str], compression: str | None = None,
                  hashes: Sequence[str] | None = None, allow_pickle: bool = False,
                  **_options) -> tuple[str, bytes, dict] | None:
    """Placed-record hook (:mod:`hpcio.formats.contract`): ``(file name, head, index part)``
    of the shard ``shard_id`` whose records have ``lengths``, as ``Writer(shard_id=...)``
    writes it: its file is ``head`` followed by the records back to back.  None when the
    file is not that: a whole-shard compression, or hashes of the file (computed over
    bytes that ranks place separately, other than the ``xxh3_64`` that
    :func:`record_digests` fills in once the file is published)."""
    codec = parse_compression(compression)
    hashes = _hash_names(hashes)
    if not set(hashes) <= {_PUBLISHED_HASH} or (codec is not None and not codec.per_sample):
        return None
    encoder = RecordEncoder(columns, compression=codec, allow_pickle=allow_pickle)
    config = _shard_config(encoder.layout, codec, hashes, None)
    basename = f"shard.{shard_id:05}.mds"
    head = _shard_head(np.asarray(lengths, np.int64), json.dumps(config, sort_keys=True).encode("utf-8"),
                       shard_id, basename)
    raw = {"basename": basename, "bytes": len(head) + int(np.sum(lengths)), "hashes": {}}
    return basename, head, {"samples": len(lengths), "raw_data": raw, "zip_data": None, **config}


# The digest parallel conversion takes of every file it publishes (``publish_files``).
_PUBLISHED_HASH = "xxh3_64"


def record_digests(index: dict, files: Mapping[str, Mapping]) -> dict:
    """Placed-record hook: the index part :func:`record_layout` made, with the hashes its
    configuration names taken from the digests of the published ``files``
    (``{name: {"bytes", "xxh3"}}``), which were written by several ranks at once."""
    raw = index["raw_data"]
    if _PUBLISHED_HASH in index["hashes"] and _PUBLISHED_HASH not in raw["hashes"]:
        raw = {**raw, "hashes": {**raw["hashes"], _PUBLISHED_HASH: files[raw["basename"]]["xxh3"]}}
    return {**index, "raw_data": raw}

