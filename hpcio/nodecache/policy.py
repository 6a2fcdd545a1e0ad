"""Which resident shard a node cache evicts, and what a cache of a policy fetches.

Belady's rule evicts the shard whose next use is furthest in the future: with the whole
future known it fetches the fewest shards of any policy (for shards of one size).  The
future is the consumers' announced orders, so a shard no consumer will read again goes
first, oldest use first among those.  LRU evicts the shard used longest ago, which is what
a cache that does not know the future can do.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["POLICIES", "NEVER", "check_policy", "first_uses", "victims", "simulate", "units_per_read", "read_starts",
           "read_groups"]

POLICIES = ("belady", "lru")

#: The distance of a shard no announced order reads again.
NEVER = np.iinfo(np.int64).max


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise InvalidArgumentError(f"cache policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


def first_uses(shards: np.ndarray, starts: np.ndarray, cursor: int, n_shards: int) -> np.ndarray:
    """Samples from ``cursor`` to each shard's next use, :data:`NEVER` for a shard not in
    the window.  The window is a run list: run ``j`` reads shard ``shards[j]`` from stream
    position ``starts[j]`` to ``starts[j + 1]``."""
    out = np.full(n_shards, NEVER, dtype=np.int64)
    if not len(shards):
        return out
    j = max(int(np.searchsorted(starts, cursor, side="right")) - 1, 0)
    ahead = shards[j:]
    ids, first = np.unique(ahead, return_index=True)
    out[ids] = np.maximum(starts[j:][first] - cursor, 0)
    return out


def victims(policy: str, next_use: np.ndarray, last_use: np.ndarray, sizes: np.ndarray, need: int,
            other: np.ndarray | None = None) -> np.ndarray:
    """Positions of the candidates to evict, in order, until ``need`` bytes are free
    (fewer when they hold less).  ``other`` marks candidates of another dataset than the
    one fetching: under Belady they go after its own, but for a shard no consumer reads
    again, because next uses in two datasets' streams are not on one scale; LRU compares
    last uses, which are on the node's clock in every dataset."""
    if need <= 0 or not len(sizes):
        return np.zeros(0, np.int64)
    if policy == "belady":
        # no next use first (oldest use first), then this dataset's furthest next use
        later = np.zeros(len(sizes), bool) if other is None else other & (next_use != NEVER)
        order = np.lexsort((last_use, -next_use.astype(np.float64), later))
    else:
        order = np.argsort(last_use, kind="stable")
    freed = np.cumsum(sizes[order])
    return order[: int(np.searchsorted(freed, need)) + 1]


def units_per_read(limit: int, sizes: np.ndarray) -> int:
    """Cache units one read may make resident together: half of what ``limit`` holds of
    units of the mean size (``sizes``), so the next read's fetches find room."""
    mean = float(sizes.mean()) if len(sizes) and sizes.any() else 0.0
    return max(1, int(limit // mean) // 2) if mean else max(1, len(sizes))


def read_starts(shards: np.ndarray, fits: int) -> list[int]:
    """Where the parts of one batch read begin, given the shard of each of its samples:
    a new part begins at a sample whose shard would make ``fits`` + 1 distinct shards in
    the part, so each part's shards are resident together under the limit."""
    if len(np.unique(shards)) <= fits:
        return [0]
    starts, seen = [0], set()
    for j, k in enumerate(np.asarray(shards).tolist()):
        if k not in seen and len(seen) == fits:
            starts.append(j)
            seen = set()
        seen.add(k)
    return starts


def read_groups(sequence, batch: int, fits: int) -> np.ndarray:
    """For :func:`simulate`'s ``groups``: the read each use of ``sequence`` belongs to when
    it is read ``batch`` uses at a time, each batch in the parts :func:`read_starts`
    gives."""
    seq = np.asarray(sequence, dtype=np.int64)
    out = np.empty(len(seq), np.int64)
    group = 0
    for lo in range(0, len(seq), batch):
        part = seq[lo:lo + batch]
        starts = read_starts(part, fits) + [len(part)]
        for a, b in zip(starts[:-1], starts[1:]):
            out[lo + a:lo + b] = group
            group += 1
    return out


def simulate(sequence, shard_bytes, limit: int, policy: str = "belady", batch: int = 1, groups=None) -> int:
    """Bytes a cache of ``limit`` bytes fetches serving the shard uses ``sequence`` in
    order, ``batch`` uses at a time (or in the reads ``groups`` numbers, one
    non-decreasing id per use), fetching on a miss and evicting by ``policy`` with the
    whole future known.

    A batch's shards are resident together while it is read (a batch read is one call),
    so none of them is evicted for another of the same batch.  ``shard_bytes[k]`` is
    shard ``k``'s size; a shard larger than the limit is fetched on every use.  This is
    the figure a node cache is measured against."""
    check_policy(policy)
    seq = np.asarray(sequence, dtype=np.int64)
    sizes = np.asarray(shard_bytes, dtype=np.int64)
    if not len(seq):
        return 0
    n_shards = int(max(seq.max() + 1, len(sizes)))
    group = np.arange(len(seq)) // max(batch, 1) if groups is None else np.asarray(groups, dtype=np.int64)
    pairs = np.unique(group * n_shards + seq)
    batches, shards = pairs // n_shards, pairs % n_shards
    later = np.full(len(pairs), len(seq) + 1, dtype=np.int64)  # the next batch using the shard
    order = np.lexsort((batches, shards))
    same = shards[order[1:]] == shards[order[:-1]]
    later[order[:-1][same]] = batches[order[1:][same]]
    bounds = np.flatnonzero(np.diff(batches)) + 1
    cache = _Belady(sizes, limit) if policy == "belady" else _LRU(sizes, limit)
    fetched = 0
    for lo, hi in zip(np.concatenate([[0], bounds]).tolist(), np.concatenate([bounds, [len(pairs)]]).tolist()):
        group = shards[lo:hi].tolist()
        keep = set(group)
        for k in group:
            if not cache.holds(k):
                fetched += int(sizes[k])
                cache.admit(k, keep)
        for k, nxt in zip(group, later[lo:hi].tolist()):
            cache.used(k, nxt)
    return fetched


class _Belady:
    def __init__(self, sizes: np.ndarray, limit: int):
        self.sizes, self.limit, self.used_bytes = sizes, limit, 0
        self.next: dict[int, int] = {}  # resident shard -> the batch that uses it next
        self.heap: list[tuple[int, int]] = []  # (-next use, shard), stale entries skipped

    def holds(self, k: int) -> bool:
        return k in self.next

    def admit(self, k: int, keep: set) -> None:
        size = int(self.sizes[k])
        if size > self.limit:
            return
        kept = []
        while self.used_bytes + size > self.limit and self.heap:
            far, v = heapq.heappop(self.heap)
            if self.next.get(v) != -far:
                continue
            if v in keep:
                kept.append((far, v))
                continue
            del self.next[v]
            self.used_bytes -= int(self.sizes[v])
        for entry in kept:
            heapq.heappush(self.heap, entry)
        self.next[k] = 0
        self.used_bytes += size

    def used(self, k: int, nxt: int) -> None:
        if k in self.next:
            self.next[k] = nxt
            heapq.heappush(self.heap, (-nxt, k))


class _LRU:
    def __init__(self, sizes: np.ndarray, limit: int):
        self.sizes, self.limit, self.used_bytes = sizes, limit, 0
        self.order: OrderedDict[int, None] = OrderedDict()

    def holds(self, k: int) -> bool:
        return k in self.order

    def admit(self, k: int, keep: set) -> None:
        size = int(self.sizes[k])
        if size > self.limit:
            return
        for v in [v for v in self.order if v not in keep]:
            if self.used_bytes + size <= self.limit:
                break
            del self.order[v]
            self.used_bytes -= int(self.sizes[v])
        self.order[k] = None
        self.used_bytes += size

    def used(self, k: int, nxt: int) -> None:
        if k in self.order:
            self.order.move_to_end(k)
