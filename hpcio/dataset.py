"""Dataset views: ``open``, iteration, ``shuffle``, ``sort``, ``select``, ``split``.

A :class:`Dataset` is a reader plus an optional index map and field projection.
Every view method returns a new Dataset sharing the reader; no sample data is copied.
Shuffled, sliced and split views are computed maps (:mod:`hpcio.distributed.order`),
so a view of 10^10 samples costs what the positions read cost; sorted and selected
views hold an index array.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from .columns import VarColumn
from .distributed.order import Arange, Composed, GlobalOrder, IndexMap, at, take
from .errors import CapabilityError, DecodeError, HpcioError, IndexOutOfRangeError, InvalidArgumentError, WrongTypeError
from .formats.base import DEFAULT_BATCH, Reader
from .options import check_reader_options, check_writer_options
from .registry import get_format, sniff_format
from .tuning import apply_freed_heap, gc_paused

# A computed pass of at most this many samples is announced whole to the reader
# (``will_read``), materialised for that once; beyond it, only its batches are.
ANNOUNCE_MAX = 1 << 24

__all__ = ["Dataset", "open", "open_writer"]


def batches_read_ahead(indices, size: int, source) -> Iterator:
    """``indices`` in slices of ``size``: ``source`` (a reader or a Dataset) is first told
    the whole pass (``will_read``), then given each next slice to ``prefetch`` before the
    current one is handed out, so storage reads a batch while the one before it is
    consumed."""
    if len(indices) and (not isinstance(indices, IndexMap) or len(indices) <= ANNOUNCE_MAX):
        source.will_read(indices[:])
    for lo in range(0, len(indices), size):
        if lo + size < len(indices):
            source.prefetch(indices[lo + size : lo + 2 * size])
        yield indices[lo : lo + size]


class Dataset(Sequence):
    """A view of a dataset's samples.

    >>> import hpcio, tempfile, os
    >>> d = os.path.join(tempfile.mkdtemp(), "toy")
    >>> with hpcio.open_writer(d, format="mds") as w:
    ...     for i in range(5):
    ...         w.write({"id": i, "text": f"sample {i}"})
    >>> ds = hpcio.open(d)
    >>> len(ds), ds[-1]["text"]
    (5, 'sample 4')
    >>> [s["id"] for s in ds.shuffle(seed=3)]
    [1, 3, 4, 2, 0]
    >>> [s["id"] for s in ds.sort("text", reverse=True).select(["id"])]
    [4, 3, 2, 1, 0]
    """

    def __init__(
        self,
        reader: Reader,
        indices: np.ndarray | IndexMap | None = None,
        fields: Sequence[str] | None = None,
    ):
        self.reader = reader
        self.indices = indices  # None means 0..len(reader)-1 in order
        self.fields = None if fields is None else list(fields)

    # --- size and access ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.reader) if self.indices is None else len(self.indices)

    def _positions(self, key) -> np.ndarray:
        """Reader positions for view positions ``key`` (int array), range-checked."""
        n = len(self)
        key = np.asarray(key)
        if key.dtype == bool:
            if key.shape != (n,):
                raise IndexOutOfRangeError(f"boolean mask of shape {key.shape} for {n} samples")
            key = np.flatnonzero(key)
        if key.dtype.kind in "USV":  # text: a field name, not a position
            raise self._not_positions(key)
        try:
            key = key.astype(np.int64, copy=False)
        except (TypeError, ValueError):
            raise self._not_positions(key) from None
        if key.size:
            lo, hi = int(key.min()), int(key.max())
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexOutOfRangeError(
                    f"index {bad} out of range for a dataset of {n} samples",
                    path=self.reader.path,
                )
            key = np.where(key < 0, key + n, key)
        return key if self.indices is None else take(self.indices, key)

    def _not_positions(self, key: np.ndarray) -> WrongTypeError:
        what = repr(key.item()) if key.ndim == 0 else f"an array of {key.dtype}"
        return WrongTypeError(f"samples are selected by an int, a slice, an int array or a boolean "
                              f"mask, not {what}; to keep fields, use select()", path=self.reader.path)

    def __getitem__(self, key):
        """``ds[i]`` a sample; ``ds[a:b]`` a view; ``ds[array]`` a list of samples."""
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            return self._view(Arange(start, step, len(range(start, stop, step))))
        if isinstance(key, (int, np.integer)):
            n = len(self)
            i = int(key)
            if not -n <= i < n:
                raise IndexOutOfRangeError(
                    f"index {i} out of range for a dataset of {n} samples",
                    path=self.reader.path,
                )
            if i < 0:
                i += n
            j = i if self.indices is None else at(self.indices, i)
            return self.reader.read(j, self.fields)
        return self.reader.read_many(self._positions(key), self.fields)

    def get_batch(self, indices) -> list:
        """Many samples in one vectorised call (the batch read API)."""
        positions = self._positions(indices)
        with gc_paused():
            return self.reader.read_many(positions, self.fields)

    def prefetch(self, indices) -> None:
        """Start reading the samples at ``indices`` from storage in the background and
        return at once: call it with the next batch's indices before reading the current
        one, and the storage's latency overlaps the work done meanwhile.  A hint; formats
        that cannot read ahead (all but MDS today) ignore it.  Iterating a view and the
        :mod:`hpcio.torch` adapters do this themselves."""
        positions = self._positions(indices)
        if len(positions):
            self.reader.prefetch(positions)

    def will_read(self, indices, *, after: bool = False) -> None:
        """Announce a pass that is about to read the samples at ``indices`` in this order:
        when what it touches fits in half the memory available, MDS reads their records
        ahead in that order, in large requests, and Parquet keeps every row group they
        touch decoded (see :doc:`formats/mds`, :doc:`formats/parquet`).  A hint, like
        :meth:`prefetch`; iterating a view and the :mod:`hpcio.torch` adapters announce
        their passes themselves.  ``after=True`` announces the pass that follows the one
        announced last (the next epoch), which only a node cache uses."""
        positions = self._positions(indices)
        if not len(positions):
            return
        if after:
            follow = getattr(self.reader, "will_read_after", None)
            if follow is not None:
                follow(positions)
            return
        self.reader.will_read(positions)

    def get_columns(self, indices) -> dict:
        """Many samples as one column per field (the columnar batch read API).

        Returns ``{field: column}``: fixed-size numbers as numpy arrays, strings, bytes and
        JSON documents as :class:`hpcio.VarColumn` (values back to back with offsets, no
        Python object per value until asked for), other values as lists.  See
        :mod:`hpcio.columns`.

        >>> import hpcio, tempfile, os
        >>> d = os.path.join(tempfile.mkdtemp(), "toy")
        >>> with hpcio.open_writer(d, format="mds", columns={"id": "int", "text": "str"}) as w:
        ...     for i in range(4):
        ...         w.write({"id": i, "text": "é" * i})
        >>> cols = hpcio.open(d).get_columns([3, 0, 2])
        >>> cols["id"], cols["text"].to_pylist(), cols["text"].str_lengths()
        (array([3, 0, 2]), ['ééé', '', 'éé'], array([3, 0, 2]))
        """
        positions = self._positions(indices)
        with gc_paused():
            columns = self.reader.read_columns(positions, self.fields)
        for name, column in columns.items():
            if isinstance(column, VarColumn):
                column.locate = _sample_error(self.reader, positions, name)
        return columns

    def __iter__(self) -> Iterator[Mapping]:
        if self.indices is None:
            # the reader's own iterator, not a generator delegating to it: one frame less
            # resumed per sample
            return iter(self.reader.iter_range(0, len(self.reader), self.fields))
        return self._iter_view()

    def _iter_view(self) -> Iterator[Mapping]:
        for batch in batches_read_ahead(self.indices, self.reader.batch_size, self.reader):
            yield from self.reader.iter_many(batch, self.fields)

    # --- views -----------------------------------------------------------------------
    def _view(self, positions: np.ndarray | IndexMap) -> Dataset:
        """The view reading this one's ``positions``: arrays compose into an array, a
        computed map stays computed."""
        if self.indices is None:
            idx = positions
        elif isinstance(positions, IndexMap):
            idx = Composed(positions, self.indices)
        else:
            idx = take(self.indices, np.asarray(positions, dtype=np.int64))
        if not isinstance(idx, IndexMap):
            idx = np.ascontiguousarray(idx, dtype=np.int64)
        return Dataset(self.reader, idx, self.fields)

    def shuffle(self, seed: int, *, mode: str = "global", window: int = 1) -> Dataset:
        """A shuffled view.

        ``mode="global"``: a keyed bijection of ``[0, n)``, any sample after any other,
        computed for the positions read (:class:`hpcio.distributed.GlobalOrder` of
        ``(n, seed, epoch=0)``: the order an adapter reads in epoch 0).  ``mode="block"``: shards in a random order, samples shuffled
        within each ``window`` consecutive shards, so a reader has about ``window`` shards
        open and reads each to its end (see :func:`hpcio.distributed.block_order`; for
        high-latency storage).  :mod:`hpcio.bench.shuffle_quality` measures how well
        each mixes.
        """
        if mode == "global":
            return self._view(GlobalOrder(len(self), seed, 0))
        if mode != "block":
            raise InvalidArgumentError(f"shuffle mode must be 'global' or 'block', got {mode!r}")
        from .distributed.split import block_order, dataset_shard_sizes

        sizes = dataset_shard_sizes(self)
        if sizes is None:
            raise InvalidArgumentError("shuffle(mode='block') needs a dataset with shards, not a "
                                       "reordered view or a single-file format")
        return self._view(block_order(sizes, seed, 0, window))

    def sort(
        self,
        key: str | Callable = None,
        reverse: bool = False,
        *,
        field: str | None = None,
    ) -> Dataset:
        """A stable sort view.

        ``ds.sort("text")`` sorts by a field's value; ``ds.sort(len, field="messages")``
        by a function of one field; ``ds.sort(fn)`` by a function of the whole sample.
        With a field, only that field is read (lazy and columnar formats decode nothing
        else); a whole-sample function sees the (projected) sample.
        """
        if isinstance(key, str):
            key, field = None, key
        idx = np.arange(len(self), dtype=np.int64) if self.indices is None else np.asarray(self.indices)
        if key is len and field is not None:
            # lengths counted in place by formats that can (MDS str/bytes columns)
            lengths = self.reader.field_lengths(idx, field)
            if lengths is not None:
                return self._view(_stable_argsort(lengths, descending=reverse))
        keys: list = []
        # Keys are read in chunks whose values are dropped once their keys are taken: a
        # chunk of about a thousand values reuses the memory the last one freed, where a
        # larger chunk would fault in fresh pages.
        step = DEFAULT_BATCH * 4
        for lo in range(0, len(idx), step):
            chunk = idx[lo : lo + step]
            if field is not None:
                values = self.reader.read_field(chunk, field)
                keys.extend(values if key is None else map(key, values))
            elif key is not None:
                keys.extend(map(key, self.reader.read_many(chunk, self.fields)))
            else:
                raise WrongTypeError("sort() needs a field name or a key function")
        return self._view(_stable_argsort(keys, descending=reverse))

    def select(self, fields: Sequence[str]) -> Dataset:
        """A projection view holding only ``fields``."""
        if isinstance(fields, str):
            fields = [fields]
        return Dataset(self.reader, self.indices, fields)

    def split(self, rank: int, world_size: int) -> Dataset:
        """Part ``rank`` of ``world_size`` contiguous, equal-length parts.

        Each part has ``len(self) // world_size`` samples; the last
        ``len(self) % world_size`` samples are dropped so every rank sees the same count
        (DDP never waits at epoch end).  Shuffle first for random parts.  This is
        :func:`hpcio.distributed.split.contiguous_part`; the per-epoch, per-worker
        split used by the PyTorch adapters is :func:`hpcio.distributed.split_indices`.
        """
        from .distributed.split import _check_consumer

        _check_consumer(rank, world_size, 0, 1)
        per = len(self) // world_size
        return self._view(Arange(rank * per, 1, per))

    def close(self) -> None:
        self.reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        view = "" if self.indices is None else " (view)"
        return f"<hpcio.Dataset {self.reader.path!r} n={len(self)}{view}>"


def _sample_error(reader: Reader, positions: np.ndarray, field: str) -> Callable:
    """A column's ``locate``: for a value that does not decode, the located error reading
    its sample raises (what ``ds[i]`` reports), else a DecodeError naming the sample."""

    def locate(j: int, exc: BaseException) -> HpcioError:
        sample = int(positions[j])
        try:
            reader.read(sample, [field])[field]
        except HpcioError as error:
            return error
        except Exception:
            pass
        return DecodeError(f"field {field!r}: cannot decode the value: {type(exc).__name__}: {exc}",
                           path=reader.path, sample=sample)

    return locate


def _stable_argsort(keys: Sequence | np.ndarray, descending: bool = False) -> np.ndarray:
    """Stable argsort of comparable Python keys; descending keeps ties in order.

    Descending is an ascending stable sort of the reversed keys, mapped back and
    reversed, which orders equal keys by their original position.
    """
    n = len(keys)
    if descending:
        return (n - 1 - _stable_argsort(keys[::-1]))[::-1].copy()
    arr = None
    try:
        arr = np.asarray(keys)
    except (ValueError, TypeError):
        pass
    if arr is not None and arr.shape == (n,) and arr.dtype.kind in "biuf":
        return np.argsort(arr, kind="stable")
    return np.asarray(sorted(range(n), key=keys.__getitem__), dtype=np.int64)


def open(path: str | os.PathLike, format: str | None = None, *, cache=None, **options) -> Dataset:
    """Open a dataset, sniffing its format unless ``format`` is given.

    ``options`` go to the format's reader (e.g. ``cache_dir=`` for whole-shard
    compressed MDS, ``lazy=`` for JINX).  ``cache``, a :class:`hpcio.NodeCache`, reads
    the shards through a bounded node-local copy of them (see :doc:`staging`); without
    one, ``$HPCIO_NODE_CACHE`` names the cache's directory for formats that can use one;
    a dataset that such a cache cannot read (:meth:`Reader.check_node_cache`) is then
    read directly, with a warning saying why.
    """
    apply_freed_heap()  # only if the user opted in: hpcio.tune(keep_freed_heap=True)
    module = get_format(format) if format else sniff_format(path)
    check_reader_options(module, options)
    if cache is None and os.environ.get("HPCIO_NODE_CACHE") and module.Reader.files_of_shards is not Reader.files_of_shards:
        from .nodecache import from_environment

        try:
            module.Reader.check_node_cache(path, options)
            cache = from_environment()
        except CapabilityError as exc:  # the job script's cache, not the user's call: read in place
            warnings.warn(f"not reading {os.fspath(path)} through the node cache $HPCIO_NODE_CACHE names: "
                          f"{' '.join(str(exc).split())}", stacklevel=2)
    if cache is not None:
        from .nodecache import NodeCache

        if not isinstance(cache, NodeCache):
            raise WrongTypeError(f"cache= takes an hpcio.NodeCache, got {type(cache).__name__}")
        return Dataset(cache.open_reader(module, path, options))
    return Dataset(module.Reader(path, **options))


def open_writer(path: str | os.PathLike, format: str, **options):
    """A writer for ``format`` at ``path``; use it as a context manager."""
    module = get_format(format)
    check_writer_options(module, options)
    return module.Writer(path, **options)
