"""A reader seen through a node cache: the format's own reader, opened on the cache's
mirror of the dataset, whose reads first make their shards resident on the node."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from ..formats.base import Reader
from .consumer import Consumer
from .policy import read_starts, units_per_read

__all__ = ["CachedReader"]


class CachedReader(Reader):
    """``inner`` (a reader of the mirror) with every read preceded by the fetches it needs.

    ``will_read`` announces the pass to the cache (the future its eviction and prefetch
    use) instead of to the format, whose read-ahead would read shards not yet fetched
    from the shared tier; ``prefetch`` starts fetching the next batch's shards.  Anything
    else is the format reader's.  The consumer's shards (``consumer.cum``,
    ``consumer.shards_of``) are the cache's units: a run of the format's shards reading
    the same files, as the row groups of one Parquet file do, is one, since the cache
    fetches and evicts whole files; ``shard_sizes`` and ``release_shards`` here are the
    format's."""

    def __init__(self, inner: Reader, consumer: Consumer, remote: str):
        self.inner, self.consumer, self.remote = inner, consumer, remote
        self.path = inner.path
        self.fields = inner.fields

    def __getattr__(self, name):
        if name == "inner":  # during unpickling, before __init__ ran
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)

    @property
    def batch_size(self) -> int:  # type: ignore[override]
        """The format's batch, at most half the shards the limit holds: a batch's shards
        are resident together while it is read, and a shuffled batch touches about one
        shard per sample."""
        return max(1, min(self.inner.batch_size, self._fits()))

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        j = self.inner.check_index(i)
        self.consumer.before_read(np.array([j], np.int64))
        return self.inner.read(j, fields)

    def _fits(self) -> int:
        """Cache units one read may make resident together (:func:`.policy.units_per_read`)."""
        return units_per_read(self.consumer.limit, self.consumer.store.sizes)

    def _parts(self, indices: np.ndarray) -> list[np.ndarray]:
        """``indices`` in consecutive parts whose shards fit the limit together: a batch
        larger than that is read a part at a time, and the limit still holds."""
        indices = np.asarray(indices, dtype=np.int64)
        starts = read_starts(self.consumer.shards_of(indices), self._fits()) + [len(indices)]
        return [indices[a:b] for a, b in zip(starts[:-1], starts[1:])]

    def read_many(self, indices: np.ndarray, fields: Sequence[str] | None = None) -> list:
        out: list = []
        for part in self._parts(indices):
            self.consumer.before_read(part)
            out.extend(self.inner.read_many(part, fields))
        return out

    def iter_many(self, indices: np.ndarray, fields: Sequence[str] | None = None) -> Iterator[Mapping]:
        parts = self._parts(indices)
        if len(parts) == 1:
            self.consumer.before_read(parts[0])
            return self.inner.iter_many(parts[0], fields)
        return self._iter_parts(parts, fields)

    def _iter_parts(self, parts: list, fields) -> Iterator[Mapping]:
        for part in parts:
            self.consumer.before_read(part)
            yield from self.inner.iter_many(part, fields)

    def read_columns(self, indices: np.ndarray, fields: Sequence[str] | None = None) -> dict:
        self.consumer.before_read(indices)
        return self.inner.read_columns(indices, fields)

    def read_field(self, indices: np.ndarray, field: str) -> list:
        out: list = []
        for part in self._parts(indices):
            self.consumer.before_read(part)
            out.extend(self.inner.read_field(part, field))
        return out

    def field_lengths(self, indices: np.ndarray, field: str) -> np.ndarray | None:
        self.consumer.before_read(indices)
        return self.inner.field_lengths(indices, field)

    def iter_range(self, start: int = 0, stop: int | None = None,
                   fields: Sequence[str] | None = None) -> Iterator[Mapping]:
        """Samples ``start..stop`` in order, a cache unit at a time: each fetched (and the
        next ones started) before the format's sequential path reads it."""
        stop = len(self) if stop is None else stop
        cum = self.consumer.cum
        self.consumer.announce(np.arange(start, stop, dtype=np.int64))
        at = start
        while at < stop:
            k = int(np.searchsorted(cum, at, side="right")) - 1
            end = min(int(cum[k + 1]), stop)
            self.consumer.before_read(np.arange(at, end, dtype=np.int64))
            yield from self.inner.iter_range(at, end, fields)
            at = end

    def prefetch(self, indices: np.ndarray) -> None:
        """Fetch the next batch's shards ahead; the format's own read-ahead is not started:
        it opens files later, from another thread, when a shard may be evicted again and
        its file a link to the shared tier."""
        self.consumer.hint(indices)

    def will_read(self, indices: np.ndarray) -> None:
        self.consumer.announce(np.asarray(indices, dtype=np.int64))

    def will_read_after(self, indices: np.ndarray) -> None:
        """The pass after the announced ones (the next epoch): its shards' next uses count
        for eviction before it begins."""
        self.consumer.announce(np.asarray(indices, dtype=np.int64), after=True)

    def shard_sizes(self) -> list[int] | None:
        return self.inner.shard_sizes()

    def files_of_shards(self):
        return self.inner.files_of_shards()

    def release_shards(self, shards: Sequence[int]) -> None:
        self.inner.release_shards(shards)

    def mean_sample_bytes(self) -> float | None:
        return self.inner.mean_sample_bytes()

    def block_starts(self) -> np.ndarray | None:
        return self.inner.block_starts()

    def drop_pages(self) -> None:
        self.inner.drop_pages()

    def close(self) -> None:
        self.consumer.close()
        self.inner.close()

    def __repr__(self):
        return f"<hpcio node-cached {self.inner!r} of {self.remote!r}>"
