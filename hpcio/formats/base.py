"""The reader and writer interfaces every format implements.

Readers are random-access where the format allows it; the dataset views in
:mod:`hpcio.dataset` are index arrays over a reader and never copy data.  A format
overrides the batch methods (``read_many``, ``iter_range``) with vectorised paths built
on the compiled kernels; the defaults here are correct but per-sample.

Sharded-writing hook (how :mod:`hpcio.convert` writes one dataset from many processes)
---------------------------------------------------------------------------------------
A sharded format supports it with two small additions; the converter does the rest
(temporary names, fsync, rename, resume, publishing the directory atomically):

``Writer(directory, shard_id=k, num_shards=n, **options)``
    Writes every sample it receives into the single shard numbered ``k`` of ``n`` inside
    ``directory`` (no size-based roll-over) and writes no dataset-level index.  The shard
    bytes must depend only on the samples, ``k``, ``n`` and the options (no times, host
    names or process ids), so any number of processes produce identical files.  After
    ``close()``, ``writer.index_part()`` returns a JSON-able dict describing the shard
    (for MDS: its ``index.json`` shard entry).
``merge_index(directory, parts, **options)`` (module level)
    Writes the dataset-level index of ``directory`` from ``parts``, the ``index_part()``
    dicts in shard order, atomically (temporary name, fsync, rename).  A format without a
    dataset index (self-describing shards) defines it as doing nothing.

Optional encoded-record hook (MDS): the converter then encodes each sample on the rank
that read it and sends the owner of its shard the record bytes, not the sample:

``record_options(sample, **options)`` (module level)
    The writer options that fix what a writer would take from ``sample`` as its first
    one (MDS: the columns), ``{}`` when ``options`` already fix it; raises what that
    writer would raise for ``sample``.
``record_encoder(path, **options)`` (module level)
    An object whose ``record(sample, number)`` returns the bytes ``Writer(path, **options)``
    stores for ``sample``, raising the same errors (``number`` names the sample in them).
``Writer.write_record(record)``
    Appends such bytes (any bytes-like object) as ``write`` would have.

Optional placed-record hook (MDS), with the encoded-record hook: each rank then writes
the records it made straight into their shard's file, and only their lengths cross
between ranks:

``record_layout(shard_id, lengths, **options)`` (module level)
    ``(file name, head, index part)`` of the shard ``shard_id`` whose records, in order,
    have ``lengths`` (at least one), when ``Writer(shard_id=...)`` would write it as one
    file holding ``head`` then the records back to back, ``index part`` being its
    ``index_part()``; None when these options make the file something else (MDS: a
    whole-shard compression, or file hashes).

Optional reader hook used for planning: ``Reader.sample_nbytes()`` returns an int64 array
with the stored size of every sample (from the index, without reading the data), so the
converter balances shards by bytes; without it, sizes are estimated from the file sizes.
``Reader.mean_sample_bytes()`` (defined here, None by default) is the cheaper average that
sizes the read batches of views and pipelines (``Reader.batch_size``).
"""

from __future__ import annotations

import abc
import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import CapabilityError, IndexOutOfRangeError

__all__ = ["Reader", "Writer", "project"]

# Batch size used by the default sequential paths: large enough to amortise Python
# overhead, small enough to keep a batch of big samples in cache-sized memory.
DEFAULT_BATCH = 256
# Read batches are bounded in bytes too.  The values of a batch are allocated at once; for
# large samples (images) that is fresh memory the allocator hands back to the system after
# each batch, so every batch pays a page fault per 4 KiB.  Batches of about 1 MiB reuse the
# same memory.
BATCH_BYTES = 1 << 20
MIN_BATCH = 8


def project(sample: Mapping, fields: Sequence[str] | None) -> Mapping:
    """``sample`` restricted to ``fields`` (all fields when ``fields`` is None)."""
    if fields is None:
        return sample
    return {f: sample[f] for f in fields}


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
        the format has no shards; sharded formats override this."""
        return None

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

    Used as a context manager: on normal exit the dataset is finalised; on an exception
    ``abort`` removes what was written, so no half-written dataset is ever visible.
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
        """Discard the output written so far (temporary files included)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


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
        for final in self.finals:
            os.replace(self.temp_name(final), final)
        self.finals = []

    def discard(self) -> None:
        for final in self.finals:
            try:
                os.remove(self.temp_name(final))
            except FileNotFoundError:
                pass
        self.finals = []
        if self.created_dir:
            try:
                os.rmdir(self.directory)
            except OSError:  # not empty: files this writer did not create stay
                pass
