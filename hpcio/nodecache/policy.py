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
from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["POLICIES", "NEVER", "check_policy", "first_uses", "victims", "simulate"]

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


def victims(policy: str, candidates: np.ndarray, next_use: np.ndarray, last_use: np.ndarray,
            sizes: np.ndarray, need: int, beyond: int = -1) -> list[int]:
    """The candidates to evict, in order, until ``need`` bytes are free; only shards whose
    next use is further than ``beyond`` samples away (a prefetch never evicts a shard read
    before the one it brings).  Fewer than needed when not enough qualify."""
    if need <= 0 or not len(candidates):
        return []
    allowed = candidates[next_use[candidates] > beyond]
    if policy == "belady":
        # furthest next use first; among shards never used again, the oldest use first
        order = np.lexsort((last_use[allowed], -next_use[allowed].astype(np.float64)))
    else:
        order = np.argsort(last_use[allowed], kind="stable")
    chosen, freed = [], 0
    for k in allowed[order].tolist():
        if freed >= need:
            break
        chosen.append(k)
        freed += int(sizes[k])
    return chosen


def _runs(sequence: Sequence[int] | np.ndarray) -> np.ndarray:
    seq = np.asarray(sequence, dtype=np.int64)
    if not len(seq):
        return seq
    keep = np.ones(len(seq), bool)
    keep[1:] = seq[1:] != seq[:-1]
    return seq[keep]


def simulate(sequence, shard_bytes, limit: int, policy: str = "belady") -> int:
    """Bytes a cache of ``limit`` bytes fetches serving the shard uses ``sequence`` in
    order, fetching on a miss and evicting by ``policy`` with the whole future known.

    ``shard_bytes[k]`` is shard ``k``'s size.  A shard larger than the limit is fetched
    on every use.  This is the figure a node cache is measured against."""
    check_policy(policy)
    seq = _runs(sequence)
    sizes = np.asarray(shard_bytes, dtype=np.int64)
    if policy == "lru":
        return _simulate_lru(seq, sizes, limit)
    n = len(seq)
    nxt = np.full(n, n, dtype=np.int64)  # position of the next use of the same shard
    order = np.lexsort((np.arange(n), seq))
    same = seq[order[1:]] == seq[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    resident: dict[int, int] = {}  # shard -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, shard), lazily invalidated
    used = fetched = 0
    for i, k in enumerate(seq.tolist()):
        if k not in resident:
            size = int(sizes[k])
            while used + size > limit and resident:
                far, v = heapq.heappop(heap)
                if resident.get(v) != -far:
                    continue
                del resident[v]
                used -= int(sizes[v])
            fetched += size
            if size > limit:
                continue
            used += size
        resident[k] = int(nxt[i])
        heapq.heappush(heap, (-int(nxt[i]), k))
    return fetched


def _simulate_lru(seq: np.ndarray, sizes: np.ndarray, limit: int) -> int:
    resident: OrderedDict[int, None] = OrderedDict()
    used = fetched = 0
    for k in seq.tolist():
        if k in resident:
            resident.move_to_end(k)
            continue
        size = int(sizes[k])
        while used + size > limit and resident:
            v, _ = resident.popitem(last=False)
            used -= int(sizes[v])
        fetched += size
        if size <= limit:
            resident[k] = None
            used += size
    return fetched
