"""How well a shuffle mixes, next to what it asks of storage, for choosing one with numbers.

Three shuffles read a sharded dataset differently: the exact global permutation
(``shuffle=True``) touches any shard at any time; the block shuffle
(``shuffle="block"``, ``window=W``) reads about ``W`` shards at a time, each to the end;
the buffer shuffle (``Pipeline.shuffle(buffer_size)``, webdataset's) reads shards in a
shuffled order, sequentially, through a buffer.  For an order of sample ids,
:func:`quality` gives figures that are 1.0 for a true random permutation:

``jump``
    mean distance in the source between consecutive samples, over its value for a random
    permutation, ``(n + 1) / 3``;
``displacement``
    mean distance between a sample's place in the epoch and in the source, over ``n / 3``;
``same_shard``
    the share of consecutive pairs that come from one shard, over its value for a random
    permutation (``sum(p_k**2)``, ``p_k`` a shard's share of the samples): 1.0 is random,
    larger means runs of one shard, which a training step sees as correlated samples;

and three that are 0.0 for a true random permutation:

``correlation``
    Pearson's correlation of a sample's place in the source with its place in the epoch;
``lag1``
    the correlation of consecutive samples' places in the source (an order that drifts
    through the source scores near 1);
``jump_ks``
    the Kolmogorov-Smirnov distance between the distribution of ``|order[i+1] -
    order[i]| / n`` and that of a random permutation (density ``2(1 - x)``), so the
    whole distribution of jumps is compared, not only its mean;

and, for the storage, ``shards_per_1k``: distinct shards among each 1024 consecutive
samples (how many files a reader has open at once).  :func:`compare` puts numpy's
``permutation`` beside the computed global order, and :func:`order_cost` measures what an
index of each costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..distributed.split import block_order, epoch_order
from ..errors import InvalidArgumentError

__all__ = ["buffer_order", "quality", "compare", "order_cost"]

_CHUNK = 1024


def buffer_order(stream: np.ndarray, buffer_size: int, seed: int = 0) -> np.ndarray:
    """``stream`` passed through a shuffle buffer of ``buffer_size`` samples, as
    webdataset's ``shuffle(bufsize)`` does: fill the buffer, then emit a random member and
    put the next sample in its place; drain the buffer in random order at the end."""
    stream = np.asarray(stream, dtype=np.int64)
    if buffer_size < 1:
        raise InvalidArgumentError(f"buffer_size must be >= 1, got {buffer_size}")
    rng = np.random.default_rng(seed)
    k = min(buffer_size, len(stream))
    buf = stream[:k].copy()
    out = np.empty(len(stream), np.int64)
    picks = rng.integers(0, k, size=max(len(stream) - k, 0)) if k else np.zeros(0, np.int64)
    for j, (nxt, pick) in enumerate(zip(stream[k:].tolist(), picks.tolist())):
        out[j] = buf[pick]
        buf[pick] = nxt
    out[len(stream) - k:] = buf[rng.permutation(k)]
    return out


def quality(order, shard_sizes: Sequence[int] | np.ndarray | None = None) -> dict:
    """The mixing figures of ``order`` (a permutation of ``0..n-1``), see the module."""
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    if n < 3:
        return {"jump": 1.0, "displacement": 1.0, "correlation": 0.0, "lag1": 0.0, "jump_ks": 0.0,
                "same_shard": 1.0, "shards_per_1k": 1.0}
    jumps = np.abs(np.diff(order))
    x = np.sort(jumps) / n
    expected = 1.0 - (1.0 - x) ** 2  # the CDF of |U - V| for independent uniforms
    steps = np.arange(1, len(x) + 1) / len(x)
    out = {"jump": float(jumps.mean() / ((n + 1) / 3)),
           "displacement": float(np.abs(order - np.arange(n)).mean() / (n / 3)),
           "correlation": float(np.corrcoef(order, np.arange(n))[0, 1]),
           "lag1": float(np.corrcoef(order[1:], order[:-1])[0, 1]),
           "jump_ks": float(max(np.abs(steps - expected).max(), np.abs(steps - 1 / len(x) - expected).max()))}
    if shard_sizes is None:
        return out
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    shard_of = np.repeat(np.arange(len(sizes)), sizes)[order]
    random_same = float(((sizes / n) ** 2).sum())
    out["same_shard"] = float((shard_of[1:] == shard_of[:-1]).mean() / random_same)
    chunks = [len(np.unique(shard_of[a:a + _CHUNK])) for a in range(0, n, _CHUNK)]
    out["shards_per_1k"] = float(np.mean(chunks))
    return out


def compare(shard_sizes: Sequence[int], seed: int = 0, windows=(1, 4, 16),
            buffers=(1_000, 10_000)) -> list[dict]:
    """:func:`quality` of each shuffle over one dataset's shards: exact, block with each
    window, and a buffer of each size over the shards read in a shuffled order."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    n = int(sizes.sum())
    rows = [{"shuffle": "exact", **quality(epoch_order(n, seed, 0, "global"), sizes)},
            {"shuffle": "numpy permutation", **quality(np.random.default_rng(seed).permutation(n), sizes)}]
    for w in windows:
        rows.append({"shuffle": f"block, window {w} shards", **quality(block_order(sizes, seed, 0, w), sizes)})
    # a buffer shuffle's stream: shards in a random order, each read from start to end
    shards = np.random.default_rng(seed).permutation(len(sizes))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    stream = np.concatenate([np.arange(starts[k], starts[k] + sizes[k]) for k in shards]) if n else sizes
    for b in buffers:
        rows.append({"shuffle": f"buffer of {b:,} samples", **quality(buffer_order(stream, b, seed), sizes)})
    return rows


def order_cost(n: int, count: int = 1 << 20, seed: int = 0) -> dict:
    """Nanoseconds per index: a batch of ``count`` consecutive positions of the computed
    global order of ``n`` samples, the same number of scattered positions, and numpy's
    ``permutation(n)`` (which must hold all ``n``: only asked where that fits)."""
    import time

    from ..distributed.order import GlobalOrder

    order = GlobalOrder(n, seed, 0)
    t0 = time.perf_counter()
    order[n // 2 : n // 2 + count]
    t1 = time.perf_counter()
    order.take(np.random.default_rng(seed).integers(0, n, count))
    t2 = time.perf_counter()
    out = {"n": n, "consecutive_ns": (t1 - t0) / count * 1e9, "scattered_ns": (t2 - t1) / count * 1e9}
    if n <= 10**8:
        t3 = time.perf_counter()
        np.random.default_rng(seed).permutation(n)
        out["numpy_ns"] = (time.perf_counter() - t3) / n * 1e9
    return out
