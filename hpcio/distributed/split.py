"""Pure splitting functions: which samples each (rank, worker) reads, in which order.

Everything here is a function of plain integers and numpy arrays, so it is testable
without MPI or PyTorch and gives the same answer on every rank.

The model
---------
An *epoch order* is a permutation of ``0..n-1`` fixed by ``(seed, epoch)`` and the
shuffle mode (:func:`epoch_order`).  The ``C = world_size * num_workers`` consumers read
it in *rounds*: in each round every consumer takes the next ``batch_size`` positions,
consumers ordered worker-major (``c = worker * world_size + rank``).  A PyTorch
DataLoader hands out worker 0's batch, then worker 1's, ... on every rank, and DDP keeps
ranks in step, so after any number of delivered batches the samples consumed by the whole
job are exactly a prefix ``order[start:position]`` of the epoch order.  That prefix
length is the *global consumed position* (:func:`consumed_position`); resuming means
splitting ``order[position:]`` again, at any new world size or worker count.

Equal counts
------------
Every consumer gets ``m`` samples so DDP never waits at epoch end.  With
``remainder="drop"`` (the default) ``m = R // C`` for ``R = n - start`` remaining
samples, and the last ``R % C`` positions of the epoch order are not read this epoch
(they are random samples in a shuffled epoch, and different ones each epoch).  With
``remainder="pad"`` ``m = ceil(R / C)`` and the missing ``-R % C`` positions repeat the
first remaining ones, so every sample is read at least once and a few twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgumentError
from .order import Arange, BlockOrder, GlobalOrder, IndexMap, Rotated, as_index_map

__all__ = [
    "SHUFFLE_MODES",
    "REMAINDERS",
    "shuffle_mode",
    "epoch_order",
    "block_order",
    "per_consumer",
    "split_indices",
    "consumer_order",
    "ConsumerOrder",
    "consumed_position",
    "contiguous_part",
    "circular_shift",
    "dataset_shard_sizes",
]

SHUFFLE_MODES = ("global", "block", "none")
REMAINDERS = ("drop", "pad")


def shuffle_mode(shuffle) -> str:
    """The mode named by a user's ``shuffle=`` argument: True is "global", False "none".

    >>> shuffle_mode(True), shuffle_mode("block")
    ('global', 'block')
    """
    if shuffle is True:
        return "global"
    if shuffle is False or shuffle is None:
        return "none"
    if shuffle in SHUFFLE_MODES:
        return shuffle
    raise InvalidArgumentError(
        f"shuffle must be True, False or one of {', '.join(SHUFFLE_MODES)}, got {shuffle!r}"
    )


def _check_nonneg(**values: int) -> None:
    for name, v in values.items():
        if int(v) < 0:
            raise InvalidArgumentError(f"{name} must be >= 0, got {v}")


def block_order(
    shard_sizes: Sequence[int] | np.ndarray, seed: int, epoch: int, window: int
) -> BlockOrder:
    """Shard-aware shuffle: shuffle the shard order, then samples within ``window`` shards.

    Shards are taken in a random order; consecutive groups of ``window`` shards form a
    window whose samples are shuffled together.  At any time the job reads from about
    ``window`` shards, each of which is consumed completely before it leaves the window,
    so whole-shard fetches from cold storage are used once.  ``window=1`` is "shard
    shuffle + in-shard shuffle"; ``window >= len(shard_sizes)`` is a global shuffle.
    The order is computed (:class:`hpcio.distributed.order.BlockOrder`): it holds the
    shard table, never an array of ``n``.

    >>> block_order([3, 2], seed=4, epoch=0, window=1).tolist()
    [3, 4, 2, 0, 1]
    """
    return BlockOrder(shard_sizes, seed, epoch, window)


def epoch_order(
    n: int,
    seed: int = 0,
    epoch: int = 0,
    mode: str = "global",
    shard_sizes: Sequence[int] | np.ndarray | None = None,
    window: int = 1,
) -> IndexMap:
    """The order in which the whole job reads the ``n`` samples in ``epoch``.

    ``mode="global"``: :class:`~hpcio.distributed.order.GlobalOrder`, a keyed bijection
    of ``[0, n)``: a true global shuffle, different every epoch.  ``mode="block"``:
    :func:`block_order` over ``shard_sizes`` (which must sum to ``n``).  ``mode="none"``:
    ``0..n-1``.  Each is computed for the positions asked (``order[a:b]``,
    ``order.take(positions)``); ``np.asarray(order)`` materialises a small one.

    >>> epoch_order(5, mode="none").tolist()
    [0, 1, 2, 3, 4]
    >>> sorted(epoch_order(5, seed=1, epoch=3).tolist())
    [0, 1, 2, 3, 4]
    """
    _check_nonneg(n=n, epoch=epoch)
    if mode == "global":
        return GlobalOrder(n, seed, epoch)
    if mode == "none":
        return Arange(0, 1, n)
    if mode == "block":
        if shard_sizes is None:
            raise InvalidArgumentError("shuffle mode 'block' needs shard_sizes (samples per shard)")
        total = int(np.sum(shard_sizes))
        if total != n:
            raise InvalidArgumentError(f"shard_sizes sum to {total} samples, expected {n}")
        return block_order(shard_sizes, seed, epoch, window)
    raise InvalidArgumentError(f"unknown shuffle mode {mode!r}; expected one of {', '.join(SHUFFLE_MODES)}")


def per_consumer(remaining: int, consumers: int, remainder: str = "drop") -> int:
    """Samples each of ``consumers`` reads out of ``remaining``: equal for all of them.

    >>> per_consumer(10, 4), per_consumer(10, 4, "pad")
    (2, 3)
    """
    if consumers < 1:
        raise InvalidArgumentError(f"the number of consumers must be >= 1, got {consumers}")
    if remainder == "drop":
        return remaining // consumers
    if remainder == "pad":
        return -(-remaining // consumers)
    raise InvalidArgumentError(f"unknown remainder {remainder!r}; expected one of {', '.join(REMAINDERS)}")


def _check_consumer(rank: int, world_size: int, worker: int, num_workers: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgumentError(f"rank {rank} is not in [0, {world_size})")
    if num_workers < 1 or not 0 <= worker < num_workers:
        raise InvalidArgumentError(f"worker {worker} is not in [0, {num_workers})")


class ConsumerOrder(IndexMap):
    """One consumer's part of an epoch order, evaluated a batch at a time.

    Position ``j`` of the part is epoch-order position
    ``start + k*C*b + c*size_k + (j - k*b)`` for round ``k = j // b`` (``C`` consumers,
    consumer ``c``, ``b = batch_size``, ``size_k`` the round's length), wrapped modulo the
    remaining samples under ``remainder="pad"``.  Holds the epoch order, never its own
    indices, so a consumer of 10^10 samples costs what its current batch costs.
    """

    def __init__(self, order, *, start: int, consumer: int, consumers: int, batch_size: int,
                 count: int, remaining: int, pad: bool):
        self.order, self.start = order, int(start)
        self.consumer, self.consumers, self.batch_size = int(consumer), int(consumers), int(batch_size)
        self.count, self.remaining, self.pad = int(count), int(remaining), bool(pad)

    def __len__(self) -> int:
        return self.count

    def positions(self, j: np.ndarray) -> np.ndarray:
        """Epoch-order positions of this part's positions ``j``."""
        b = self.batch_size
        rnd = j // b
        size = np.minimum(b, self.count - rnd * b)
        pos = rnd * (self.consumers * b) + self.consumer * size + (j - rnd * b)
        if self.pad:
            pos %= self.remaining
        return self.start + pos

    def take(self, j):
        j = np.asarray(j, dtype=np.int64)
        if j.size == 0:
            return np.empty(0, dtype=np.int64)
        pos = self.positions(j)
        if isinstance(self.order, IndexMap):
            return self.order.take(pos)
        return self.order[pos]

    def spec(self) -> dict:
        order = self.order.spec() if isinstance(self.order, IndexMap) else {"array": len(self.order)}
        return {"order": "consumer", "of": order, "start": self.start, "consumer": self.consumer,
                "consumers": self.consumers, "batch_size": self.batch_size, "count": self.count,
                "pad": self.pad}


def consumer_order(
    n: int,
    rank: int = 0,
    world_size: int = 1,
    worker: int = 0,
    num_workers: int = 1,
    *,
    seed: int = 0,
    epoch: int = 0,
    mode: str = "global",
    remainder: str = "drop",
    batch_size: int = 1,
    start: int = 0,
    shard_sizes: Sequence[int] | np.ndarray | None = None,
    window: int = 1,
    order: IndexMap | np.ndarray | None = None,
) -> ConsumerOrder:
    """The part :func:`split_indices` returns, as a :class:`ConsumerOrder` computed on
    demand: ``part[a:b]`` is the next batch's indices.  Parameters as there.

    >>> part = consumer_order(10**10, 32767, 32768, batch_size=32)
    >>> len(part), len(part[:32])
    (305175, 32)
    """
    _check_consumer(rank, world_size, worker, num_workers)
    _check_nonneg(start=start)
    if batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")
    if order is None:
        order = epoch_order(n, seed, epoch, mode, shard_sizes, window)
    elif len(order) != n:
        raise InvalidArgumentError(f"order has {len(order)} entries, expected {n}")
    else:
        order = as_index_map(order)
    remaining = max(0, n - start)
    consumers = world_size * num_workers
    m = per_consumer(remaining, consumers, remainder)
    return ConsumerOrder(order, start=start, consumer=worker * world_size + rank, consumers=consumers,
                         batch_size=batch_size, count=m, remaining=remaining, pad=remainder == "pad")


def split_indices(
    n: int,
    rank: int = 0,
    world_size: int = 1,
    worker: int = 0,
    num_workers: int = 1,
    *,
    seed: int = 0,
    epoch: int = 0,
    mode: str = "global",
    remainder: str = "drop",
    batch_size: int = 1,
    start: int = 0,
    shard_sizes: Sequence[int] | np.ndarray | None = None,
    window: int = 1,
    order: IndexMap | np.ndarray | None = None,
) -> np.ndarray:
    """The sample indices consumer ``(rank, worker)`` reads, in reading order.

    Parameters
    ----------
    n : int
        Samples in the dataset.
    rank, world_size : int
        This data-parallel rank and the number of them (tensor-parallel peers pass
        the same data-parallel rank and so get identical indices).
    worker, num_workers : int
        This dataloader worker and the number of them (0 and 1 without workers).
    seed, epoch, mode, shard_sizes, window
        Define the epoch order, see :func:`epoch_order`.
    remainder : {"drop", "pad"}
        How counts are made equal; see the module docstring.  Default ``"drop"``.
    batch_size : int
        Positions a consumer takes per round.  Set it to the batch size the consumer
        yields so the delivered batches form a prefix of the epoch order (exact resume).
    start : int
        Global consumed position to start from (0 at the start of an epoch).
    order : IndexMap or numpy.ndarray, optional
        The epoch order, if already made (an :func:`epoch_order` or any index array).

    Returns
    -------
    numpy.ndarray
        int64 indices, ``per_consumer(n - start, world_size * num_workers, remainder)``
        of them, disjoint from every other consumer's (up to the repeats of ``pad``).
        Only this consumer's positions of the epoch order are evaluated; for a part too
        large to hold (one consumer of 10^10 samples) use :func:`consumer_order`.

    >>> [split_indices(10, r, 2, mode="none").tolist() for r in range(2)]
    [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    >>> split_indices(10, 1, 2, mode="none", batch_size=2).tolist()
    [2, 3, 6, 7, 9]
    """
    part = consumer_order(n, rank, world_size, worker, num_workers, seed=seed, epoch=epoch, mode=mode,
                          remainder=remainder, batch_size=batch_size, start=start,
                          shard_sizes=shard_sizes, window=window, order=order)
    return part[:]


def consumed_position(
    n: int,
    start: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    delivered: int,
    remainder: str = "drop",
) -> int:
    """The global consumed position after every rank received ``delivered`` batches.

    Assumes the round-robin delivery of a DataLoader (worker 0's batch, worker 1's,
    ...) and ranks in step; the result is ``start`` plus the number of distinct
    epoch-order positions read, capped at ``n`` (padding repeats are not progress).

    >>> consumed_position(10, 0, world_size=2, num_workers=1, batch_size=2, delivered=1)
    4
    >>> consumed_position(10, 0, 2, 1, 2, delivered=3)
    10
    """
    remaining = max(0, n - start)
    nworkers = max(1, num_workers)
    m = per_consumer(remaining, world_size * nworkers, remainder)
    full_rounds, extra = divmod(int(delivered), nworkers)
    done = world_size * nworkers * min(full_rounds * batch_size, m)
    done += extra * world_size * min(batch_size, max(0, m - full_rounds * batch_size))
    return start + min(done, remaining)


def contiguous_part(n: int, rank: int, world_size: int) -> np.ndarray:
    """Part ``rank`` of ``world_size`` contiguous parts of ``0..n-1``, equal lengths.

    Each part has ``n // world_size`` indices; the last ``n % world_size`` are dropped.
    This is :func:`split_indices` with ``mode="none"`` and one round per consumer.

    >>> contiguous_part(7, 1, 3).tolist()
    [2, 3]
    """
    _check_consumer(rank, world_size, 0, 1)
    per = n // world_size
    if per == 0:
        return np.empty(0, dtype=np.int64)
    return split_indices(n, rank, world_size, mode="none", batch_size=per)


def circular_shift(indices, consumer: int, consumers: int):
    """``indices`` rotated so consumer ``c`` of ``C`` starts ``c/C`` of the way through.

    With an unshuffled or block order every consumer would otherwise start in the same
    shard; rotating spreads the first reads over the dataset.  The set of indices is
    unchanged, so disjointness and coverage hold; the prefix property used for exact
    resume does not.  A computed part stays computed (:class:`~.order.Rotated`).

    >>> circular_shift(np.arange(6), 1, 2).tolist()
    [3, 4, 5, 0, 1, 2]
    """
    if len(indices) == 0:
        return indices
    shift = (consumer * len(indices)) // consumers
    if isinstance(indices, IndexMap):
        return Rotated(indices, shift)
    return np.roll(indices, -shift)


def dataset_shard_sizes(dataset) -> np.ndarray | None:
    """Samples per shard of an :class:`hpcio.Dataset` that is not a reordered view.

    A view (shuffled, sorted, sliced) no longer follows shard boundaries, so it has
    none; neither has a reader that does not report them.
    """
    if dataset.indices is not None:
        return None
    sizes = dataset.reader.shard_sizes()
    return None if sizes is None else np.asarray(sizes, dtype=np.int64)
