"""One reading process's side of a node cache: its announced order, what it publishes of
its future, and the fetches it waits for or starts ahead.

A consumer's future is the stream of reader positions its passes announced
(``will_read``), of which it has read ``cursor``.  It publishes, in
``meta/consumers/<pid>-<n>``, a window of that stream as runs of shards, recomputed from
the computed order as it advances (never the whole order: at 10^10 samples the window
stays the size of a few chunks), and its cursor, updated in place on every batch.  An
evicting process reads every live consumer's file and takes, per shard, the nearest next
use over all of them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from typing import Any

import numpy as np

from .._processes import alive
from ..errors import NodeCacheError
from .budget import Budget
from .policy import NEVER, first_uses, victims
from .store import ABSENT, FETCHING, RESIDENT, Store

__all__ = ["Consumer"]

_CHUNK = 8192  # stream positions mapped to shards at a time when a window is built
_HEAD = 4  # int64 words of a consumer file: pid, cursor, batch length, runs
_serial = itertools.count()


class Consumer:
    """This process's reads of one dataset through the node cache ``store``."""

    def __init__(self, store: Store, cum: np.ndarray, *, budget: Budget, policy: str, prefetch: int,
                 horizon: int, release):
        self.store, self.cum, self.budget = store, np.asarray(cum, dtype=np.int64), budget
        self.policy, self.ahead, self.horizon = policy, prefetch, horizon
        self.release = release  # the reader's release_shards
        self.pid = -1
        self._lock = threading.Lock()  # the table lock is per process file: one thread at a time
        self._reset()

    @property
    def limit(self) -> int:
        """The cache directory's byte limit, over all its datasets."""
        return self.budget.limit

    def _reset(self) -> None:
        """Fresh per-process state (also in a forked DataLoader worker, whose threads and
        published file are not its parent's)."""
        self.pid = os.getpid()
        self.segments: list = []  # announced passes, in order (arrays or computed maps)
        self.cursor = 0
        self.batch = 1
        self.w0, self.w_end = 0, 0
        self.runs = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.log_offset = 0
        # shards the reader may hold open as links to the shared tier: handed to its
        # release_shards once resident, so it reads the node's copy from then on
        self.stale = self.store.state != RESIDENT
        self.pool: Any = None  # a ThreadPoolExecutor, started on the first fetch ahead
        self.queued: set[int] = set()
        self.protected = np.zeros(0, np.int64)  # the shards of the batch being read
        self.counts = {"hits": 0, "misses": 0, "wait_s": 0.0, "prefetched": 0, "over_limit": 0,
                       "prefetch_errors": 0}
        self.file = os.path.join(self.store.meta, "consumers", f"{self.pid}-{next(_serial)}")
        self.fd = -1

    def _own(self) -> None:
        if self.pid != os.getpid():
            self._reset()

    # --- the announced future -----------------------------------------------------------
    def announce(self, positions, after: bool = False) -> None:
        """A pass over ``positions`` begins now (``after``: once the announced ones end)."""
        self._own()
        if not after:
            self.segments, self.cursor = [], 0
        self.segments.append(positions)
        self._window()
        self._publish()

    def _stream(self, lo: int, hi: int) -> np.ndarray:
        """Reader positions ``[lo, hi)`` of the announced stream."""
        parts, base = [], 0
        for seg in self.segments:
            n = len(seg)
            a, b = max(lo - base, 0), min(hi - base, n)
            if a < b:
                parts.append(np.asarray(seg[a:b], dtype=np.int64))
            base += n
            if base >= hi:
                break
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _length(self) -> int:
        return sum(len(seg) for seg in self.segments)

    def shards_of(self, positions: np.ndarray) -> np.ndarray:
        """The shard of each reader position."""
        return np.searchsorted(self.cum, positions, side="right") - 1

    _shards = shards_of

    def _window(self) -> None:
        """Recompute the published window from the cursor: chunks of the stream until every
        shard has appeared, or ``horizon`` positions, or the stream's end."""
        total, n = self._length(), self.store.n
        seen = np.zeros(n, bool)
        shards, starts = [], []
        at = self.cursor
        while at < total and at - self.cursor < self.horizon:
            ids = self._shards(self._stream(at, min(at + _CHUNK, total)))
            keep = np.ones(len(ids), bool)
            keep[1:] = ids[1:] != ids[:-1]
            if shards and len(ids) and shards[-1][-1] == ids[0]:
                keep[0] = False
            shards.append(ids[keep])
            starts.append(np.flatnonzero(keep) + at)
            seen[ids] = True
            at += len(ids)
            if seen.all():
                break
        self.w0, self.w_end = self.cursor, at
        self.runs = ((np.concatenate(shards), np.concatenate(starts)) if shards
                     else (np.zeros(0, np.int64), np.zeros(0, np.int64)))

    def _publish(self) -> None:
        shards, starts = self.runs
        head = np.array([self.pid, self.cursor, self.batch, len(shards)], np.int64)
        tmp = f"{self.file}.tmp"
        os.makedirs(os.path.dirname(self.file), exist_ok=True)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        os.write(fd, head.tobytes() + shards.tobytes() + starts.tobytes())
        os.replace(tmp, self.file)
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = fd

    def _advance(self, cursor: int, batch: int) -> None:
        self.cursor, self.batch = cursor, max(batch, 1)
        if self.segments and self.cursor >= self._length():
            # the announced stream is read: its last run is no longer in use, so the
            # window is published empty rather than pinning that run's shard
            self.segments, self.runs = [], (np.zeros(0, np.int64), np.zeros(0, np.int64))
            self.cursor = self.w0 = self.w_end = 0
            self._publish()
        elif self.segments and self.cursor - self.w0 >= max((self.w_end - self.w0) // 2, 1) \
                and self.w_end < self._length():
            self._window()
            self._publish()
        elif self.fd >= 0:
            os.pwrite(self.fd, np.array([self.cursor, self.batch], np.int64).tobytes(), 8)

    def _at(self, position: int, first: int) -> bool:
        total = self._length()
        return position < total and int(self._stream(position, position + 1)[0]) == first

    # --- reads ----------------------------------------------------------------------------
    def before_read(self, positions: np.ndarray) -> None:
        """Make the shards of ``positions`` resident before the reader touches them, after
        moving the cursor past them when they are the stream's next; then start fetching
        the shards of the next batches."""
        self._own()
        positions = np.asarray(positions, dtype=np.int64)
        if not len(positions):
            return
        with self._lock:
            follows = bool(self.segments) and self._at(self.cursor, int(positions[0]))
            if follows:  # published first: the batch's shards have next use 0 while it is read
                self._advance(self.cursor, len(positions))
            self._release_evicted()
            self._ensure(np.unique(self._shards(positions)))
            if follows:
                self._advance(self.cursor + len(positions), len(positions))
            self._read_ahead()

    def hint(self, positions: np.ndarray) -> None:
        """``positions`` are read next (the batch after the one being read)."""
        self._own()
        positions = np.asarray(positions, dtype=np.int64)
        if not len(positions):
            return
        with self._lock:
            n = len(positions)
            for step in (1, 2):
                c = self.cursor + step * n
                if self.segments and self._at(c, int(positions[0])):
                    self._advance(max(self.cursor, c - n), n)
                    break
            self._read_ahead()

    def _release_evicted(self) -> None:
        evicted, self.log_offset = self.store.evicted_since(self.log_offset)
        if len(evicted):
            self.release(np.unique(evicted).tolist())
            self.stale[evicted] = True

    def _ensure(self, shards: np.ndarray) -> None:
        """Fetch the batch's missing ``shards``; none of them is evicted meanwhile (nor by
        this process's fetches ahead until the next batch)."""
        self.protected = shards
        state = self.store.state
        missing = shards[state[shards] != RESIDENT]
        self.counts["hits"] += len(shards) - len(missing)
        if len(missing):
            self.counts["misses"] += len(missing)
            began = time.perf_counter()
            for k in missing.tolist():
                self.fetch(k)
            self.counts["wait_s"] += time.perf_counter() - began
        self.store.touch(shards)
        reopen = shards[self.stale[shards]]
        if len(reopen):
            self.release(reopen.tolist())
            self.stale[reopen] = False

    def _read_ahead(self) -> None:
        """Start fetching the next shard the coming ``prefetch`` batches read that is not
        resident.  One fetch ahead at a time per consumer: several at once each evict for
        a shard not yet needed, and the fetches rise well above Belady's (see
        docs/staging.md); a node's consumers together still keep ``fetchers`` busy."""
        if not self.ahead or not self.segments:
            return
        ids = self._shards(self._stream(self.cursor, self.cursor + self.ahead * self.batch))
        if not len(ids):
            return
        uniq, first = np.unique(ids, return_index=True)
        upcoming = uniq[np.argsort(first, kind="stable")]
        self._schedule(upcoming[self.store.state[upcoming] == ABSENT])

    def _schedule(self, shards: np.ndarray) -> None:
        for k in shards.tolist():
            if self.queued:
                break
            if k in self.queued:
                continue
            if self.pool is None:
                import concurrent.futures

                self.pool = concurrent.futures.ThreadPoolExecutor(1, "hpcio-nodecache")
            self.queued.add(k)
            self.pool.submit(self._prefetch, k)

    def _prefetch(self, k: int) -> None:
        try:
            if self.fetch(k, ahead=True):
                self.counts["prefetched"] += 1
        except Exception:
            self.counts["prefetch_errors"] += 1  # the read that needs it fetches it and raises
        finally:
            self.queued.discard(k)

    # --- fetching -------------------------------------------------------------------------
    def fetch(self, k: int, ahead: bool = False) -> bool:
        """Bring shard ``k`` onto the node: True when this process copied it.  A demand fetch
        evicts what it must.  A fetch ``ahead`` of need evicts only shards whose next use
        comes after ``k``'s (so it makes no fetch that waiting would have saved), or that
        no consumer reads again, and gives up when that frees too little."""
        store = self.store
        with store.shard_lock(k):
            if store.state[k] == RESIDENT:
                return False
            size = int(store.sizes[k]) or _stat_size(store, k)
            with self.budget.locked(), store.locked():
                need = self.budget.used() - (store.table[k, 1] if store.state[k] == FETCHING else 0) \
                    + size - self.budget.limit
                if need > 0 and not self._make_room(need, k, ahead):
                    if ahead:
                        return False
                    self.counts["over_limit"] += 1
                store.set_shard(k, FETCHING, size, time.monotonic_ns())
            try:
                with store.fetch_slot():
                    got = store.copy_in(k)
            except BaseException:
                with store.locked():
                    store.set_shard(k, ABSENT, 0)
                raise
            with store.locked():
                store.set_shard(k, RESIDENT, got, time.monotonic_ns())
                store.header[2] += got
                store.header[3] += 1
        return True

    def _make_room(self, need: int, k: int, ahead: bool) -> bool:
        """Evict until ``need`` bytes are free for shard ``k`` (under the budget and table
        locks), from this dataset and the others this process has open under the cache
        directory; False if it cannot."""
        stores = self.budget.stores(self.store)
        beyond = -1
        if ahead:
            beyond = int(node_future(self.store)[0][k])
            if beyond == NEVER:
                return False
        found = []  # per store: its resident shards no consumer's batch reads, with their marks
        for i, s in enumerate(stores):
            next_use, pinned = node_future(s)
            if s is self.store:
                pinned[self.protected] = True
            shards = np.flatnonzero((s.state == RESIDENT) & ~pinned)
            found.append((np.full(len(shards), i, np.int64), shards, next_use[shards], s.table[shards, 2],
                          s.table[shards, 1]))
        owner, shards, next_use, last_use, sizes = (np.concatenate(column) for column in zip(*found))
        if ahead:  # this dataset's shards read after k, or any shard no consumer reads again
            keep = ((next_use > beyond) & (owner == 0)) | (next_use == NEVER)
            owner, shards, next_use, last_use, sizes = (a[keep] for a in (owner, shards, next_use, last_use, sizes))
        chosen = victims(self.policy, next_use, last_use, sizes, need, other=owner > 0)
        freed = int(sizes[chosen].sum())
        if freed < need and ahead:
            return False
        for o, j in zip(owner[chosen].tolist(), shards[chosen].tolist()):
            s = stores[o]
            if s is self.store:
                s.evict(j)
                continue
            with s.locked():
                if s.state[j] == RESIDENT:
                    s.evict(j)
        return freed >= need

    def wait(self) -> None:
        """Return once the fetches ahead this process started have ended (the pool has one
        thread, so a task queued now runs after them)."""
        if self.pool is not None and self.pid == os.getpid():
            self.pool.submit(int).result()

    def stats(self) -> dict:
        return dict(self.counts)

    def close(self) -> None:
        if self.pool is not None and self.pid == os.getpid():
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        if self.fd >= 0 and self.pid == os.getpid():
            os.close(self.fd)
            self.fd = -1
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.file)


def _stat_size(store: Store, k: int) -> int:
    try:
        return sum(os.stat(remote).st_size for remote, _m, _s, _h in store.files[k])
    except OSError as exc:
        raise NodeCacheError(f"cannot stat the shard on the shared tier: {exc.strerror}",
                             path=store.files[k][0][0]) from None


def node_future(store: Store) -> tuple[np.ndarray, np.ndarray]:
    """Per shard, the nearest next use over the node's live consumers (samples, NEVER
    when none announced it), and whether a consumer's current batch reads it."""
    next_use = np.full(store.n, NEVER, dtype=np.int64)
    pinned = np.zeros(store.n, bool)
    directory = os.path.join(store.meta, "consumers")
    for name in os.listdir(directory) if os.path.isdir(directory) else ():
        if name.endswith(".tmp"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        words = np.frombuffer(data[: len(data) - len(data) % 8], dtype=np.int64)
        if len(words) < _HEAD:
            continue
        pid, cursor, batch, runs = (int(w) for w in words[:_HEAD])
        if not alive(pid):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            continue
        if len(words) < _HEAD + 2 * runs:
            continue
        shards, starts = words[_HEAD : _HEAD + runs], words[_HEAD + runs : _HEAD + 2 * runs]
        uses = first_uses(shards, starts, cursor, store.n)
        np.minimum(next_use, uses, out=next_use)
        pinned |= uses < batch
    return next_use, pinned
