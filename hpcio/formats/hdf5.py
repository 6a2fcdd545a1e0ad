"""HDF5 shards: the columnar layout of :mod:`hpcio.formats._layout` in one HDF5 file per
shard (and per writer), readable with plain ``h5py``.

Layout (``docs/formats/hdf5.md``)::

    dir/shard-000000.h5     attribute "hpcio" (JSON): {version, num_samples, fields}
        /<field>            fixed field: dataset (n, *shape), chunked along samples
        /<field>/offsets    ragged field: uint64 (n + 1,)
        /<field>/data       ragged field: uint8 (total bytes,)

Datasets are compressed with blosc (zstd, byte shuffle) through ``hdf5plugin`` when it
is installed, else with gzip, which every HDF5 build reads.  Parallel writers each write
their own files (``pattern="rank00003-%06d.h5"``); the ``mpio`` driver is only used when
asked for and h5py was built with MPI (``h5py.get_config().mpi``), which PyPI wheels are not.

The writer also records each file's bytes, xxh3_64, sample count and fields in
``hashes.json`` (:mod:`hpcio.formats._hdf5_manifest`); a reader of a dataset whose every
file is recorded opens each file on its first read, so opening reads no file's bytes
(what a node cache, :class:`hpcio.NodeCache`, needs).  Other datasets open every file
at open, as h5py reads them.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..codecs import MAX_DECODED_ENV, max_decoded_bytes as max_decoded_bytes_option
from ..errors import (
    CapabilityError,
    CorruptShardError,
    DecompressionLimitError,
    ExternalStorageError,
    HpcioError,
    InvalidArgumentError,
    MissingDependencyError,
    OptionError,
    SchemaError,
    ShardNotFoundError,
    TruncatedShardError,
    WriterSpaceError,
)
from ..registry import Capabilities
from ..units import format_bytes
from . import _hdf5_manifest, _layout
from ._checksums import Manifest, validate_files
from .base import (
    PendingFiles,
    ShardFile,
    Writer as _Writer,
    files_bytes,
    first_file_head,
    inspect_report,
    manifest_shard_files,
    sample_starts,
    shard_files,
    verify_samples,
)
from .reports import InspectReport, VerifyReport

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "compression_filter", "merge_index", "load_libraries",
           "inspect", "verify"]

NAME = "hdf5"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)

SHARD_PATTERN = "shard-%06d.h5"
# Room for the superblock, object headers and B-trees of a file written by the mpio driver.
_METADATA_BYTES = 1 << 20
_MAGIC = b"\x89HDF\r\n\x1a\n"
# What h5py (and json, for the layout attribute) raise on a damaged file; MemoryError is
# left out: running out of memory is not corruption.
_H5_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError, OSError)


def _h5py():
    try:
        import h5py
    except ImportError as exc:
        raise MissingDependencyError(
            "the hdf5 format needs h5py: pip install h5py hdf5plugin (or pip install 'hpcio[formats]')"
        ) from exc
    try:  # registers the blosc filter so compressed shards decode
        import hdf5plugin  # noqa: F401
    except ImportError:
        pass
    return h5py


def load_libraries() -> None:
    """Import h5py now rather than when the first file is opened (:func:`hpcio.registry.load_libraries`)."""
    _h5py()


def compression_filter(name: str | None = "blosc", clevel: int = 5) -> dict:
    """``create_dataset`` keyword arguments for ``name``: ``"blosc"`` (zstd + shuffle
    through hdf5plugin, gzip when hdf5plugin is missing), ``"gzip"`` or None."""
    if name is None:
        return {}
    if name == "blosc":
        try:
            import hdf5plugin
        except ImportError:
            name = "gzip"
        else:
            return dict(hdf5plugin.Blosc(cname="zstd", clevel=clevel, shuffle=hdf5plugin.Blosc.SHUFFLE))
    if name == "gzip":
        return {"compression": "gzip", "compression_opts": min(clevel, 9), "shuffle": True}
    raise InvalidArgumentError(f"unknown HDF5 compression {name!r}: use blosc, gzip or None")


def _files(path: str) -> list[str]:
    return shard_files(path, (".h5", ".hdf5"), "HDF5")


def sniff(path) -> bool:
    return first_file_head(_files, path, len(_MAGIC)) == _MAGIC


class Writer(_Writer):
    """Writes ``path/shard-%06d.h5`` files of at most ``max_count`` samples each.

    Parameters
    ----------
    max_count, max_size
        Samples and value bytes per file before a new file starts (a file's samples are
        held in memory until it is written).
    chunk_samples, chunk_bytes
        Chunk size of fixed datasets (samples) and of ragged data (bytes).
    compression
        ``"blosc"`` (default), ``"gzip"`` or None; see :func:`compression_filter`.
    checksum
        Add HDF5's Fletcher-32 filter to every chunked dataset (default): HDF5 checks
        it on every read, so a damaged chunk raises instead of returning wrong values.
        Datasets without chunks (empty ones) and the file's metadata carry none.
    pattern, start_shard
        File name pattern and first number, so parallel writers never collide.
    schema
        ``{field: kind or spec}`` overriding what the first sample implies.
    driver, comm
        ``driver="mpio"`` (with an mpi4py ``comm``) needs an MPI build of h5py.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.contract`): every sample goes into the
        single file ``shard-<shard_id>.h5`` (no roll-over); :meth:`index_part` then
        describes it for :func:`merge_index`.
    hashes
        ``["xxh3_64"]`` (None, the default): ``hashes.json`` beside the files records each
        file's bytes, xxh3_64, sample count and fields
        (:mod:`hpcio.formats._hdf5_manifest`); ``[]`` writes the files alone.  The files
        are the same either way.
    """

    def __init__(self, path, max_count: int = 100_000, max_size: int = 1 << 30, chunk_samples: int = 1024,
                 chunk_bytes: int = 1 << 20, compression: str | None = "blosc", clevel: int = 5,
                 checksum: bool = True, pattern: str = SHARD_PATTERN, start_shard: int = 0,
                 schema: Mapping | None = None, driver: str | None = None, comm=None,
                 shard_id: int | None = None, num_shards: int | None = None, hashes=None, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unknown HDF5 writer options: {', '.join(options)}")
        self.manifest = Manifest(hashes, "HDF5")
        self.shard_id = shard_id
        if shard_id is not None:
            max_count, max_size, start_shard = float("inf"), float("inf"), shard_id  # type: ignore[assignment]
        self.file_names: list[str] = []
        self.h5py = _h5py()
        if driver == "mpio" and not self.h5py.get_config().mpi:
            raise CapabilityError("driver='mpio' needs h5py built with MPI (h5py.get_config().mpi "
                                  "is False); write one file per rank instead", path=self.path)
        self.file_kwargs = {"driver": driver, "comm": comm} if driver == "mpio" else {}
        self.max_count = max_count
        self.chunk_samples, self.chunk_bytes = chunk_samples, chunk_bytes
        self.filters = {**compression_filter(compression, clevel), **({"fletcher32": True} if checksum else {})}
        self.pattern = pattern
        self.shard_number = start_shard
        self.buffer = _layout.ColumnBuffer(self.path, schema)
        self.pending = PendingFiles(self.path)
        self.max_size = max_size

    def write(self, sample: Mapping) -> None:
        self.buffer.add(sample, self.count)
        self.count += 1
        if self.buffer.count >= self.max_count or self.buffer.nbytes >= self.max_size:
            self._write_file()

    def _write_file(self):
        """Write the buffered samples as the next file.

        The file is assembled in memory (HDF5's core driver) and written with plain I/O
        after a free-space check: the HDF5 bundled with h5py crashes the process when a
        write fails on a full disk, so HDF5 never writes to the disk itself (except
        through the ``mpio`` driver, checked against an uncompressed estimate)."""
        final = os.path.join(self.path, self.pattern % self.shard_number)
        self.shard_number += 1
        self.file_names.append(os.path.basename(final))
        n = self.buffer.count
        fields = self.buffer.fields or {}
        estimate = self.buffer.nbytes + 8 * (n + 1) * len(fields) + _METADATA_BYTES
        columns = self.buffer.take() if self.buffer.fields is not None else {}
        tmp = self.pending.add(final)
        if self.file_kwargs:
            _check_space(tmp, estimate)
            with self.h5py.File(tmp, "w", **self.file_kwargs) as f:
                self._fill(f, fields, columns, n)
            if self.manifest.enabled:
                self.manifest.files[os.path.basename(final)] = _hdf5_manifest.file_entry(tmp, n, fields)
            return
        with self.h5py.File(f"{tmp}.image", "w", driver="core", backing_store=False) as f:
            self._fill(f, fields, columns, n)
            del columns
            f.flush()
            image = f.id.get_file_image()
        _write_image(tmp, image)
        if self.manifest.enabled:
            self.manifest.files[os.path.basename(final)] = _hdf5_manifest.image_entry(image, n, fields)

    def _fill(self, f, fields: dict, columns: dict, n: int) -> None:
        for name, spec in fields.items():
            if spec["storage"] == "fixed":
                values = columns[name]
                f.create_dataset(name, data=values,
                                 chunks=(max(1, min(self.chunk_samples, n)), *spec["shape"]) if n else None,
                                 **(self.filters if n else {}))
                continue
            lengths, flat = columns[name]
            offsets = np.zeros(n + 1, dtype=np.uint64)
            np.cumsum(lengths, out=offsets[1:])
            group = f.create_group(name)
            group.create_dataset("offsets", data=offsets,
                                 chunks=(min(self.chunk_samples, n + 1),), **self.filters)
            group.create_dataset("data", data=flat,
                                 chunks=(max(1, min(self.chunk_bytes, len(flat))),) if len(flat) else None,
                                 **(self.filters if len(flat) else {}))
        f.attrs["hpcio"] = json.dumps({"version": _layout.LAYOUT_VERSION, "num_samples": n,
                                       "fields": fields})

    def close(self) -> None:
        with self.aborting():
            if self.buffer.count or not self.pending:
                self._write_file()
            if self.shard_id is None:  # under the hook merge_index writes every shard's entry
                self.manifest.add_to(self.pending, self.path)
            self.pending.publish()

    def abort(self) -> None:
        self.pending.discard()

    def index_part(self) -> dict:
        """The file written under the sharded-writing hook: name, sample count, fields,
        and its manifest entry (``hashes``) unless ``hashes=[]``."""
        part = {"file": self.file_names[0], "samples": self.count, "fields": self.buffer.fields or {}}
        entry = self.manifest.files.get(self.file_names[0])
        return part if entry is None else {**part, "hashes": entry}


def _check_space(path: str, need: int) -> None:
    """WriterSpaceError when the filesystem holding ``path`` has fewer than ``need``
    bytes free for this user."""
    st = os.statvfs(os.path.dirname(path) or ".")
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise WriterSpaceError(f"HDF5 file needs {format_bytes(need)} ({need} bytes), the filesystem "
                               f"has {format_bytes(free)} ({free} bytes) free", path=path)


def _write_image(path: str, image: bytes) -> None:
    """Write a file image, a full disk raised as WriterSpaceError (the caller's abort
    removes the partial file)."""
    _check_space(path, len(image))
    try:
        with open(path, "wb") as f:
            f.write(image)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise WriterSpaceError(f"no space left writing the HDF5 file ({exc.strerror})", path=path) from exc
        raise


def merge_index(directory, parts, **options) -> None:
    """The sharded-writing hook's last step.  Every HDF5 file carries its own layout, so
    there is no dataset index to write; this checks that every file a part names exists
    and that the files holding samples agree on their fields (the reader requires it),
    and writes the ``hashes.json`` of the files whose parts carry their entry, as the
    WebDataset hook does (the manifest is the same at any rank count: one entry per
    shard, sorted by name)."""
    directory = os.fspath(directory)
    fields = None
    manifest = Manifest(None, "HDF5")
    for part in parts:
        path = manifest.add_part(directory, part, "HDF5 shard")
        if not part["samples"]:
            continue
        if fields is not None and part["fields"] != fields:
            raise SchemaError(_layout.field_conflict(part["fields"], fields), path=path)
        fields = part["fields"] if fields is None else fields
    pending = PendingFiles()
    manifest.add_to(pending, directory)
    pending.publish()


class _File:
    """One HDF5 file of a dataset: its sample count ``n`` and ``fields``, and (while it is
    open) its datasets and ragged offset tables.

    ``recorded`` is the ``(samples, fields)`` the hash manifest records: the file is then
    opened on its first read, and its layout attribute checked against the record; without
    it the file is opened now.  :meth:`release` closes it, and the next read opens the
    file now at its path again (a node cache fetched or evicted it)."""

    def __init__(self, path: str, h5py, limit: int, recorded: tuple[int, dict] | None = None):
        self.path = path
        self.h5py = h5py
        self.limit = limit
        self.recorded, self.recorded_by = recorded, "its hash manifest records"
        self.file: Any = None  # an h5py.File while open
        self.data: dict = {}
        self.offsets: dict = {}
        self.sample_base = 0  # the file's first sample in the dataset (the reader sets it), for errors
        if recorded is None:
            self.open()
        else:
            self.n, self.fields = recorded

    def open(self) -> None:
        path = self.path
        try:
            self.file = self.h5py.File(path, "r")
        except FileNotFoundError:
            raise ShardNotFoundError("HDF5 shard is missing", path=path) from None
        except OSError as exc:
            raise CorruptShardError(f"not a readable HDF5 file: {exc}", path=path) from None
        try:
            self._load()
        except BaseException as exc:
            self.release()
            if isinstance(exc, _H5_ERRORS) and not isinstance(exc, HpcioError):
                raise CorruptShardError(f"damaged hpcio layout in HDF5 file: {type(exc).__name__}: {exc}",
                                        path=path) from None
            raise
        if self.recorded is None:  # a file opened again must still be the file counted at open
            self.recorded, self.recorded_by = (self.n, self.fields), "the reader counted at open"

    def _load(self):
        raw = self.file.attrs.get("hpcio")
        if raw is None:
            raise SchemaError("HDF5 file has no 'hpcio' layout attribute (wrong layout, or not "
                              "written by hpcio)", path=self.path)
        layout = json.loads(raw)
        if self.recorded is not None:
            _hdf5_manifest.check_recorded(self.path, layout["num_samples"], layout["fields"], self.recorded,
                                          self.sample_base, self.recorded_by)
        self.n = layout["num_samples"]
        self.fields = layout["fields"]
        self.data = {}
        self.offsets = {}
        for field, spec in self.fields.items():
            if spec["storage"] == "fixed":
                ds = self._dataset(field)
                expected = (self.n, *spec["shape"])
                if ds is None or not hasattr(ds, "dtype"):
                    raise SchemaError(f"field {field!r}: expected a dataset of shape {expected}, "
                                      "found none", path=self.path)
                if ds.shape != expected or ds.dtype != np.dtype(spec["dtype"]):
                    raise SchemaError(f"field {field!r}: expected a dataset of shape {expected} and "
                                      f"dtype {spec['dtype']}, found {ds.shape} {ds.dtype.str}",
                                      path=self.path)
                self.data[field] = ds
            else:
                off, data = self._dataset(f"{field}/offsets"), self._dataset(f"{field}/data")
                if off is None or data is None or not hasattr(off, "shape") or not hasattr(data, "shape"):
                    raise SchemaError(f"field {field!r}: expected datasets {field}/offsets and "
                                      f"{field}/data", path=self.path)
                self._check_offsets_dataset(off, field)
                table = off[:]
                _layout.check_offsets(table, self.n, data.shape[0], field=field, path=self.path)
                self.offsets[field] = table
                self.data[field] = data

    def _dataset(self, name: str):
        """The object at ``name``, None when absent; ExternalStorageError when reaching
        it or its values would open another file: an external link on the way, external
        storage (HDF5 resolves those names from the working directory) or a virtual
        dataset.  hpcio never writes any of them."""
        h5py = sys.modules["h5py"]
        parts = name.split("/")
        for k in range(1, len(parts) + 1):
            link = self.file.get("/".join(parts[:k]), getlink=True)
            if link is None:
                return None
            if isinstance(link, h5py.ExternalLink):
                raise ExternalStorageError(
                    f"dataset {name!r}: {'/'.join(parts[:k])!r} is an external link to "
                    f"{link.filename}:{link.path}", path=self.path)
        obj = self.file.get(name)
        if isinstance(obj, h5py.Dataset):
            if obj.is_virtual:
                sources = sorted({m.file_name for m in obj.virtual_sources()})
                raise ExternalStorageError(f"dataset {name!r} is a virtual dataset over {sources}",
                                           path=self.path)
            if obj.external:
                files = sorted({str(e[0]) for e in obj.external})
                raise ExternalStorageError(f"dataset {name!r} keeps its values in external files {files}",
                                           path=self.path)
        return obj

    def _check_offsets_dataset(self, off, field: str) -> None:
        """Before a ragged field's offset table is read: it must hold n + 1 entries, fit
        the read limit, and be stored in full (every chunk written, a contiguous table
        within the file), so that a small file declaring a huge table is refused instead
        of filled with fill values in memory."""
        n = self.n
        if off.shape != (n + 1,):
            raise CorruptShardError(f"field {field!r}: offsets dataset has shape {off.shape}, "
                                    f"the layout's {n} samples need ({n + 1},)", path=self.path)
        declared = (n + 1) * off.dtype.itemsize
        if declared > self.limit:
            raise DecompressionLimitError(
                f"field {field!r}: the offsets of {n} samples take {declared} bytes, more than the "
                f"limit of {self.limit} (max_decoded_bytes= or ${MAX_DECODED_ENV})", path=self.path)
        file_size = os.path.getsize(self.path)
        if off.chunks:
            chunks = -(-(n + 1) // off.chunks[0])
            stored = off.id.get_num_chunks()
            if stored != chunks:
                raise CorruptShardError(f"field {field!r}: the offsets of {n} samples fill {chunks} chunks, "
                                        f"the file ({file_size} bytes) stores {stored}", path=self.path)
        elif not declared <= off.id.get_storage_size() <= file_size:
            raise TruncatedShardError(f"field {field!r}: the offsets of {n} samples take {declared} bytes, "
                                      f"the file ({file_size} bytes) stores {off.id.get_storage_size()}",
                                      path=self.path)

    def datasets(self) -> list:
        """The file's datasets, the file opened if it is not."""
        if self.file is None:
            self.open()
        return list(self.data.values())

    def read_rows(self, rows: np.ndarray, fields, sample_base: int) -> list[dict]:
        out = [dict() for _ in range(len(rows))]
        if not len(rows):
            return out
        if self.file is None:
            self.open()
        for field in fields:
            spec = self.fields[field]
            ds = self.data[field]
            if spec["storage"] == "fixed":
                # h5py fancy indexing wants increasing unique indices
                uniq, inverse = np.unique(rows, return_inverse=True)
                try:
                    values = ds[uniq] if len(uniq) > 1 else ds[int(uniq[0]) : int(uniq[0]) + 1]
                    for pos, k in enumerate(inverse):
                        out[pos][field] = _layout.fixed_value(spec, values[k])
                except _H5_ERRORS as exc:
                    if isinstance(exc, HpcioError):
                        raise
                    raise CorruptShardError(f"field {field!r}: cannot read: {type(exc).__name__}: {exc}",
                                            path=self.path, sample=sample_base + int(uniq[0])) from None
                continue
            table = self.offsets[field]
            starts, ends = table[rows], table[rows + 1]
            gap = ds.chunks[0] if ds.chunks else 0
            for lo, hi, members in _layout.merged_spans(starts, ends, gap):
                try:
                    span = ds[lo:hi].tobytes() if hi > lo else b""
                except OSError as exc:
                    raise CorruptShardError(f"field {field!r}: cannot read bytes {lo}..{hi}: {exc}",
                                            path=self.path, sample=sample_base + int(rows[members[0]])) from None
                for pos, value in _layout.span_values(spec, span, lo, members, starts, ends, field=field,
                                                      samples=sample_base + rows, path=self.path):
                    out[pos][field] = value
        return out

    def release(self) -> None:
        """Close the file (its datasets with it); the next read opens it again."""
        file, self.file = self.file, None
        self.data, self.offsets = {}, {}
        if file is not None:
            file.close()

    close = release


class Reader(_layout.LayoutReader):
    """Random-access reader of HDF5 shards written by :class:`Writer` (a directory of
    ``.h5`` files or one file).

    When ``hashes.json`` records every file's sample count and fields, a file is opened
    on its first read (its layout attribute checked against the record then,
    :class:`~hpcio.errors.CorruptShardError` naming it); otherwise every file is opened
    at open.  ``validate_hashes=True`` checks every file against the xxh3_64 the manifest
    records before reading; ``"xxh3_64"`` also requires every file to have one.  HDF5's
    fletcher32 chunk checksums, where the writer stored them, are checked on every read
    whatever it says.
    """

    def __init__(self, path, max_decoded_bytes: int | str | None = None, validate_hashes: bool | str = False,
                 **options):
        super().__init__(path)
        h5py = _h5py()
        limit = max_decoded_bytes_option(max_decoded_bytes)
        self.parts: list[_File] = []
        try:
            self.paths = _files(self.path)
            validate_files(self.paths, validate_hashes)
            recorded = _hdf5_manifest.recorded_layouts(self.paths)
            if not all(recorded):  # a file left out would be opened here: open them all, as h5py does
                recorded = [None] * len(self.paths)
            for p, layout in zip(self.paths, recorded):
                self.parts.append(_File(p, h5py, limit, layout))
        except BaseException:
            self.close()
            raise
        fields = None
        for f in self.parts:
            if f.n and fields is not None and f.fields != fields:
                raise SchemaError(f"file fields {sorted(f.fields)} differ from {sorted(fields)}",
                                  path=f.path)
            if f.n and fields is None:
                fields = f.fields
        self.layout_fields = fields or {}
        self.fields = list(self.layout_fields)
        self.cum = sample_starts([f.n for f in self.parts])
        for f, base in zip(self.parts, self.cum.tolist()):
            f.sample_base = base

    @classmethod
    def check_node_cache(cls, path, options) -> None:
        """A node cache reads a directory of HDF5 files each with its size, xxh3_64,
        sample count and fields in ``hashes.json`` (what hpcio's writer records): without
        them, opening would open every file through the shared tier.  ``validate_hashes``
        (every file hashed at open; the cache checks each file's xxh3_64 as it fetches it)
        and a single file are refused too."""
        _hdf5_manifest.check_node_cache(path, options, _files)

    def files_of_shards(self) -> list[list[ShardFile]]:
        """Each file, with the size and xxh3_64 its hash manifest records (its size on
        disk where none names it)."""
        return manifest_shard_files(self.paths)

    def release_shards(self, shards) -> None:
        """Close the files of ``shards``; the next read opens the file now there (its
        layout checked against the one counted at open)."""
        for k in shards:
            self.parts[int(k)].release()

    def close(self) -> None:
        for f in self.parts:
            f.close()
        self.parts = []


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> InspectReport:
    """Samples, files and fields of HDF5 shards, from their layout attributes."""
    with Reader(path) as r:
        first = next((ds for f in r.parts for ds in f.datasets()), None)  # opens files until one has a dataset
        return inspect_report(
            NAME, path, samples=len(r), shards=len(r.parts),
            fields={k: _layout.describe(spec) for k, spec in r.layout_fields.items()},
            stored_bytes=files_bytes(f.path for f in r.parts),
            details={"filters": _filters(first) if first is not None else []})


def _filters(dataset) -> list[str]:
    """The names of the HDF5 filters of ``dataset`` (h5py names only the ones it ships)."""
    plist = dataset.id.get_create_plist()
    return [plist.get_filter(k)[3].decode("ascii", "replace") for k in range(plist.get_nfilters())]


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Decode every sample of every file; HDF5 checks the checksums of its own metadata
    as it opens a file, and a mismatch is reported as an unreadable file.  Every file is
    opened (and checked against the manifest's record of it) before any is decoded."""
    return verify_samples(NAME, path, lambda: _hdf5_manifest.open_every_file(Reader(path)),
                          lambda p: _files(os.fspath(p)), max_errors=max_errors)
