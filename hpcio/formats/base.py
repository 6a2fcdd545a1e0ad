"""The reader and writer interfaces every format implements.

Readers are random-access where the format allows it; the dataset views in
:mod:`hpcio.dataset` are index arrays over a reader and never copy data.  A format
overrides the batch methods (``read_many``, ``iter_range``) with vectorised paths built
on the compiled kernels; the defaults here are correct but per-sample.

What a format module exposes besides its reader and writer, and the signatures of its
optional hooks (inspect, verify, sharded writing, encoded and placed records), are the
protocols of :mod:`hpcio.formats.contract`.  ``Reader.mean_sample_bytes()`` (None by
default) is the cheap average that sizes the read batches of views and pipelines
(``Reader.batch_size``).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._paths import listed_inside
from .._struct import Struct
from ..errors import CapabilityError, HpcioError, IndexOutOfRangeError, ShardNotFoundError
from ._checksums import recorded_entries, verify_files
from .reports import InspectReport, VerifyReport, problem

__all__ = ["Reader", "ShardFile", "manifest_shard_files", "BatchReader", "Writer", "FileWriter", "PendingFiles", "project", "even_sizes", "sample_starts", "locate", "by_shard",
           "shard_files", "first_file_head",
           "inspect_report", "Verification", "verify_samples", "files_bytes", "remove_files",
           "remove_empty_dir"]

# Batch size used by the default sequential paths: large enough to amortise Python
# overhead, small enough to keep a batch of big samples in cache-sized memory.
DEFAULT_BATCH = 256
# Read batches are bounded in bytes too: the values of a batch are allocated at once, and
# large ones (images) in fresh memory the allocator may hand back after each batch.  4 MiB
# (about 30 vlm samples) still reuses memory in a warm pass, and gives planned reads of
# cold or high-latency storage enough records per call to keep several requests in
# flight (see docs/performance.md).
BATCH_BYTES = 4 << 20
MIN_BATCH = 8


def even_sizes(total: int, count: int, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Sizes of samples ``start .. stop`` when ``total`` bytes are spread evenly over
    ``count`` samples: the remainder goes to the first samples, so the sizes of all
    ``count`` add up to ``total`` whatever the windows they are asked in.

    >>> even_sizes(10, 4).tolist(), even_sizes(10, 4, 1, 3).tolist()
    ([3, 3, 2, 2], [3, 2])
    """
    stop = count if stop is None else stop
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    per, extra = divmod(total, count)
    sizes = np.full(stop - start, per, dtype=np.int64)
    sizes[: max(0, extra - start)] += 1
    return sizes


def project(sample: Mapping, fields: Sequence[str] | None) -> Mapping:
    """``sample`` restricted to ``fields`` (all fields when ``fields`` is None)."""
    if fields is None:
        return sample
    return {f: sample[f] for f in fields}


def sample_starts(counts) -> np.ndarray:
    """The first global sample index of every shard, then the total: ``[0, c0, c0+c1,
    ...]`` (int64) for shards holding ``counts`` samples."""
    return np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)


def locate(starts: np.ndarray, indices):
    """``(shard, index within the shard)`` of global sample ``indices`` (an int or an
    array), ``starts`` being :func:`sample_starts`; empty shards are never chosen."""
    shards = np.searchsorted(starts, indices, side="right") - 1
    return shards, indices - starts[shards]


def inverse_permutation(order: np.ndarray) -> np.ndarray:
    """The permutation that puts values taken in ``order`` back in request order."""
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.arange(len(order))
    return inverse


def by_shard(starts: np.ndarray, indices: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """For each shard that ``indices`` touch, in shard order: ``(shard, positions in
    indices, indices within the shard)``, so a reader reads each shard once per batch."""
    shards, local = locate(starts, indices)
    for k in np.unique(shards):
        where = np.flatnonzero(shards == k)
        yield int(k), where, local[where]


def shard_files(path, suffixes: tuple[str, ...], what: str) -> list[str]:
    """The files of a dataset: ``path`` itself when it is a file, else the files of the
    directory ``path`` whose names end with one of ``suffixes``, sorted by name (a
    symbolic link out of the directory refused: :func:`~hpcio._paths.listed_inside`);
    ShardNotFoundError naming ``what`` (the format) when neither exists."""
    path = os.fspath(path)
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith(suffixes))
        return listed_inside(path, names, what=f"{what} file")
    if os.path.isfile(path):
        return [path]
    raise ShardNotFoundError(f"no {what} file or directory", path=path)


def first_file_head(list_files, path, size: int) -> bytes | None:
    """The first ``size`` bytes of the first file of ``list_files(path)``, for sniffing;
    None when there is no such file."""
    try:
        files = list_files(path)
    except ShardNotFoundError:
        return None
    if not files:
        return None
    with open(files[0], "rb") as f:
        return f.read(size)


def handed_out(samples: list) -> Iterator:
    """The items of a list, the list letting go of each as it is handed out.

    For :meth:`Reader.iter_many` of readers whose samples grow when read: a lazy JINX
    sample keeps what it decodes (a 60 KB image), so a list holding a batch of read
    samples until its end holds all their values; the heap grows by the batch and
    shrinks after it, and the next batch faults the memory in again (23,000 page faults
    and four times the time of a vlm pass).
    """
    for i in range(len(samples)):
        sample = samples[i]
        samples[i] = None
        yield sample


class ShardFile(Struct):
    """One file of a shard: its ``path``, and the ``size`` and ``hashes`` (hex digests by
    algorithm name) its dataset's index records, when it records them."""

    _fields = ("path", "size", "hashes")
    _defaults = {"size": None}
    _factories = {"hashes": dict}
    __slots__ = _fields
    path: str
    size: int | None
    hashes: Mapping[str, str]


def manifest_shard_files(paths: Sequence[str]) -> list[list[ShardFile]]:
    """Each of ``paths`` as a shard of one file, with the size and xxh3_64 its hash
    manifest records (its size on disk where none names it): ``files_of_shards`` of the
    formats whose files ``hashes.json`` describes."""
    out = []
    for path, entry in zip(paths, recorded_entries(paths)):
        entry = entry or {}
        size, hashes = entry.get("bytes"), entry.get("hashes")
        hashes = {k: v for k, v in hashes.items() if k == "xxh3_64" and isinstance(v, str)} \
            if isinstance(hashes, dict) else {}
        out.append([ShardFile(path, size if isinstance(size, int) else os.path.getsize(path), hashes)])
    return out


class Reader(abc.ABC):
    """Random-access (or sequential-only) access to the samples of one dataset.

    Subclasses implement ``__len__`` and ``read``; ``fields`` is the list of field
    names when the format knows it up front (MDS columns, Zarr arrays), else None.
    """

    path: str
    fields: list[str] | None = None

    def __init__(self, path: str | os.PathLike, **options):
        self.path = os.fspath(path)

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        """Sample ``i`` (0 <= i < len), restricted to ``fields`` if given."""

    def read_many(self, indices: np.ndarray, fields: Sequence[str] | None = None) -> list:
        """Samples at ``indices`` (already non-negative and in range), in that order."""
        return [self.read(int(i), fields) for i in indices]

    def iter_many(self, indices: np.ndarray, fields: Sequence[str] | None = None) -> Iterator[Mapping]:
        """The samples of :meth:`read_many`, one at a time: what iterating a view reads.
        Formats whose samples grow when read (lazy ones caching what they decode) hand
        each out and let go of it, so that only the samples the caller keeps stay alive."""
        return iter(self.read_many(indices, fields))

    def prefetch(self, indices: np.ndarray) -> None:
        """Start reading the samples at ``indices`` (non-negative, in range) from storage in
        the background and return at once, so that reading them next finds them in
        memory.  A hint: formats that cannot read ahead do nothing."""

    def will_read(self, indices: np.ndarray) -> None:
        """A pass is about to read the samples at ``indices`` (non-negative, in range) in
        this order: formats that can read it ahead in that order start doing so in the
        background.  A hint, like :meth:`prefetch`."""

    def drop_pages(self) -> None:
        """Unmap from this process the pages of the files it maps that were read so far
        (they stay in the page cache): a pass over a source larger than memory then keeps
        no more of it resident than it reads at a time."""

    def block_starts(self) -> np.ndarray | None:
        """First sample of each unit the format decodes whole (a Parquet row group), when
        reading part of a unit costs as much as reading all of it; None otherwise."""
        return None

    def iter_range(
        self, start: int = 0, stop: int | None = None, fields: Sequence[str] | None = None
    ) -> Iterator[Mapping]:
        """Samples ``start..stop`` in order: the sequential fast path."""
        stop = len(self) if stop is None else stop
        for lo in range(start, stop, DEFAULT_BATCH):
            idx = np.arange(lo, min(lo + DEFAULT_BATCH, stop), dtype=np.int64)
            yield from self.read_many(idx, fields)

    def read_field(self, indices: np.ndarray, field: str) -> list:
        """The value of one field for many samples (sort keys); formats with lazy or
        columnar access override this to avoid decoding other fields."""
        return [s[field] for s in self.read_many(indices, [field])]

    def field_lengths(self, indices: np.ndarray, field: str) -> np.ndarray | None:
        """``len()`` of one field's values for many samples (``ds.sort(len, field=...)``)
        as an int64 array, or None when the format cannot count them without building the
        values (the caller then applies ``len`` to :meth:`read_field`)."""
        return None

    def read_columns(self, indices: np.ndarray, fields: Sequence[str] | None = None) -> dict:
        """Samples at ``indices`` as one column per field (see :mod:`hpcio.columns`).

        This default reads the samples and converts their values; formats with a compiled
        columnar path override it.  ``fields`` None means the reader's fields, or those of
        the samples read, in first-seen order.
        """
        from ..columns import columns_from_values

        samples = self.read_many(indices, fields)
        if fields is None:
            fields = self.fields or list(dict.fromkeys(k for s in samples for k in s))
        return columns_from_values(samples, fields)

    def mean_sample_bytes(self) -> float | None:
        """Average stored bytes per sample when the format knows it without reading the
        samples (it sizes the read batches), else None."""
        return None

    @functools.cached_property
    def batch_size(self) -> int:
        """Samples per vectorised read: DEFAULT_BATCH, fewer for large samples."""
        avg = self.mean_sample_bytes()
        if not avg:
            return DEFAULT_BATCH
        return int(min(DEFAULT_BATCH, max(MIN_BATCH, BATCH_BYTES // avg)))

    def shard_sizes(self) -> list[int] | None:
        """Samples per shard in index order (for shard-aware shuffling), or None when
        the format has no shards.  Readers that keep their shards' first samples in
        ``cum`` (n + 1 cumulative counts) report them from it."""
        cum = getattr(self, "cum", None)
        if cum is None or len(cum) < 2:
            return None
        return np.diff(np.asarray(cum, dtype=np.int64)).tolist()

    def files_of_shards(self) -> list[list[ShardFile]] | None:
        """The files each shard reads (in shard order, aligned with :meth:`shard_sizes`),
        with the size and digests the index records for them, or None when the format
        cannot say: what a node cache (:class:`hpcio.NodeCache`) fetches per shard."""
        return None

    @classmethod
    def check_node_cache(cls, path, options: Mapping) -> None:
        """Raise :class:`~hpcio.errors.CapabilityError` saying why when the dataset at
        ``path``, opened with ``options``, cannot read through a node cache: checked before
        any reader opens it, so a reader that would read the shards' bytes at open (through
        the shared tier, around the cache) is never opened."""

    def release_shards(self, shards: Sequence[int]) -> None:
        """Close whatever this reader holds open of the shards ``shards`` (descriptors,
        maps): a node cache evicted their files, and an open descriptor would keep the
        evicted bytes on the node's disk.  A later read opens them again."""

    def check_index(self, i: int) -> int:
        """``i`` as a non-negative index, or IndexOutOfRangeError."""
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexOutOfRangeError(
                f"index {i} out of range for a dataset of {n} samples", path=self.path
            )
        return j

    def close(self) -> None:
        """Release files and maps; the reader is unusable afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<{type(self).__module__}.{type(self).__name__} {self.path!r} n={len(self)}>"


class BatchReader(Reader):
    """Base for readers whose path is the batch read: ``read`` is a ``read_many`` of one
    sample, and the length is the last of ``cum``, the shards' :func:`sample_starts`."""

    cum: np.ndarray

    def __len__(self) -> int:
        return int(self.cum[-1])

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        i = self.check_index(i)
        return self.read_many(np.array([i], dtype=np.int64), fields)[0]

    @abc.abstractmethod
    def read_many(self, indices: np.ndarray, fields: Sequence[str] | None = None) -> list: ...


class SequentialReader(Reader):
    """Base for stream-only formats: ``read`` raises CapabilityError."""

    def read(self, i, fields=None):
        raise CapabilityError(
            f"{type(self).__name__} has no random access; iterate, or convert to a "
            "format with an index (mds, jinx, zarr, hdf5)",
            path=self.path,
        )


class Writer(abc.ABC):
    """Writes samples; nothing is visible to readers until ``close`` publishes the index.

    Used as a context manager: on normal exit the dataset is finalised; on an exception,
    in the block or in ``close`` itself (a full disk at the final flush), ``abort``
    removes what was written, so no half-written dataset is ever visible.  A format's
    ``close`` runs its work under :meth:`aborting` so a direct call cleans up the same.
    """

    def __init__(self, path: str | os.PathLike, **options):
        self.path = os.fspath(path)
        self.count = 0

    @abc.abstractmethod
    def write(self, sample: Mapping) -> None: ...

    def write_many(self, samples: Iterable[Mapping]) -> None:
        for s in samples:
            self.write(s)

    @abc.abstractmethod
    def close(self) -> None:
        """Flush shards and publish the index (atomically)."""

    def abort(self) -> None:
        """Discard the output written so far (temporary files included); safe to call
        again, and after a ``close`` that failed."""

    @contextlib.contextmanager
    def aborting(self):
        """Run a ``close`` body: on any failure the output is discarded, then the error
        raised."""
        try:
            yield
        except BaseException:
            self.abort()
            raise

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            with self.aborting():
                self.close()
        else:
            self.abort()
        return False


class FileWriter(Writer):
    """Base for writers that write one output file at a time: ``file`` is the file being
    written (None between files), written under a temporary name held by ``pending``
    (:class:`PendingFiles`) until ``close`` publishes it.  A writer that sets
    ``manifest`` (:class:`~hpcio.formats._checksums.Manifest`) has each file opened by
    :meth:`open_file` hashed as it is written, and :meth:`publish` adds the manifest."""

    file = None
    pending: PendingFiles
    manifest: Any = None
    _final: str | None = None

    def open_file(self, final: str):
        """Start writing the output file ``final`` under its temporary name."""
        file = open(self.pending.add(final), "wb")
        self.file = file if self.manifest is None else self.manifest.wrap(file)
        self._final = final
        return self.file

    def close_file(self) -> None:
        """Close the file being written, if one is open (it counts as closed even when
        its last flush fails)."""
        file, self.file = self.file, None
        if file is not None:
            if self.manifest is not None:
                self.manifest.record(self._final, file, **self.file_facts())
            file.close()

    def file_facts(self) -> dict:
        """What the manifest records about the file being closed beyond its size and hash."""
        return {}

    def publish(self, manifest_at: str | None = None) -> None:
        """Publish the files written, then (last, so a visible manifest always finds its
        files) the manifest of their hashes at ``manifest_at``."""
        data = None if self.manifest is None or manifest_at is None else self.manifest.encode(manifest_at)
        if data is not None:
            with open(self.pending.add(manifest_at), "wb") as f:
                f.write(data)
        self.pending.publish()

    def abort(self) -> None:
        try:
            self.close_file()
        except Exception:  # noqa: BLE001 - the file is discarded: its flush error is moot
            pass
        self.pending.discard()


class PendingFiles:
    """Output files written under temporary names and published together.

    Readers must never see a half-written dataset: each file is written as
    ``<final>.tmp.<pid>`` and renamed only by :meth:`publish`; :meth:`discard` removes the
    temporaries (and the output directory, when this writer created it and it is empty).
    """

    def __init__(self, directory: str | None = None):
        self.directory = directory
        self.created_dir = False
        if directory is not None:
            self.created_dir = not os.path.exists(directory)
            os.makedirs(directory, exist_ok=True)
        self.finals: list[str] = []

    def add(self, final: str) -> str:
        """Register ``final`` and return the temporary name to write it under."""
        self.finals.append(final)
        return self.temp_name(final)

    @staticmethod
    def temp_name(final: str) -> str:
        return f"{final}.tmp.{os.getpid()}"

    def __bool__(self) -> bool:
        return bool(self.finals)

    def publish(self) -> None:
        """Rename every file to its final name; if one rename fails, the files already
        renamed are taken back (removed) with the temporaries."""
        done = []
        try:
            for final in self.finals:
                os.replace(self.temp_name(final), final)
                done.append(final)
        except BaseException:
            remove_files(done)
            self.discard()
            raise
        self.finals = []

    def discard(self) -> None:
        remove_files(self.temp_name(final) for final in self.finals)
        self.finals = []
        if self.created_dir:
            remove_empty_dir(self.directory)


def remove_files(paths: Iterable[str]) -> None:
    """Delete ``paths``; one already gone is not an error, so an abort can run after a
    partial cleanup."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def remove_empty_dir(directory: str) -> None:
    """Remove the output directory a writer created, unless it is not empty: files the
    writer did not create stay, and so does the directory holding them."""
    try:
        os.rmdir(directory)
    except OSError:
        pass


# --- inspect and verify -----------------------------------------------------------------
def files_bytes(paths: Iterable[str]) -> int:
    """Bytes stored by ``paths``, the files under a directory counted recursively."""
    total = 0
    for path in paths:
        if os.path.isdir(path):
            total += sum(os.path.getsize(os.path.join(root, n))
                         for root, _dirs, names in os.walk(path) for n in names)
        else:
            total += os.path.getsize(path)
    return total


def inspect_report(fmt: str, path, *, samples: int, shards: int, fields: Mapping,
                   stored_bytes: int | None, details: Mapping | None = None) -> InspectReport:
    """An :class:`~hpcio.formats.reports.InspectReport` with every key of the schema."""
    return {"format": fmt, "path": os.fspath(path), "samples": int(samples), "shards": int(shards),
            "fields": dict(fields), "stored_bytes": stored_bytes, "details": dict(details or {})}


class Verification:
    """A :class:`~hpcio.formats.reports.VerifyReport` being filled: the problems found
    (each located with :func:`~hpcio.formats.reports.problem`, at most ``max_errors``
    kept) and what was checked."""

    def __init__(self, fmt: str, path, *, max_errors: int = 1000, shards: int = 0):
        self.max_errors = max_errors
        self.report: VerifyReport = {
            "format": fmt, "path": os.fspath(path), "ok": True, "samples": 0, "shards": shards,
            "checked": 0, "hashes_checked": 0, "errors": []}

    def fail(self, exc: BaseException) -> None:
        self.report["ok"] = False
        if len(self.report["errors"]) < self.max_errors:
            self.report["errors"].append(problem(exc))

    def decode(self, reader: Reader) -> VerifyReport:
        """Decode every sample of ``reader`` in batches; a batch that fails is read again
        sample by sample, so each bad sample is reported on its own and the rest counted."""
        n = len(reader)
        self.report["samples"] = n
        for lo in range(0, n, DEFAULT_BATCH):
            indices = np.arange(lo, min(lo + DEFAULT_BATCH, n), dtype=np.int64)
            try:
                reader.read_many(indices)
            except (HpcioError, OSError):
                for i in indices.tolist():
                    try:
                        reader.read(i)
                    except (HpcioError, OSError) as exc:
                        self.fail(exc)
                    else:
                        self.report["checked"] += 1
            else:
                self.report["checked"] += len(indices)
        return self.report

    def decode_dataset(self, open_reader) -> VerifyReport:
        """:meth:`decode` the reader ``open_reader()`` returns; a dataset it cannot open
        (damaged structure) is reported as one problem."""
        try:
            reader = open_reader()
        except (HpcioError, OSError) as exc:
            self.fail(exc)
            return self.report
        with reader:
            return self.decode(reader)


def verify_samples(fmt: str, path, open_reader, list_shards, *, max_errors: int = 1000,
                   manifest: bool = False) -> VerifyReport:
    """The report of a format whose verify is decoding every sample: ``open_reader()``
    opens the dataset, ``list_shards(path)`` names its shard files (HpcioError when
    there are none, then counted as 0).  With ``manifest`` the files are first checked
    against their hash manifest (:mod:`hpcio.formats._checksums`)."""
    try:
        files = list_shards(path)
    except HpcioError:
        files = []
    check = Verification(fmt, path, max_errors=max_errors, shards=len(files))
    if manifest:
        verify_files(check, files, path)
    return check.decode_dataset(open_reader)
