"""Pure planning: how many shards, and which samples go into each.

Nothing here touches files or processes; every function is a deterministic function of
its arguments, so every MPI rank (or rank 0 alone, which then broadcasts) computes the
same plan, and the output does not depend on how many ranks write it.

Assignment (``order="seeded"``): the samples selected for conversion are visited in a
seeded order (a bijection computed on demand, :mod:`.order`), and that sequence is cut
into ``num_shards`` consecutive runs of (as near as possible) equal bytes.  Each shard is
therefore a uniform random sample of the whole source (representative: no shard holds
"the end of the file"), and its bytes differ from the mean by at most the largest
sample.  Within a shard samples are kept in source order, so each writer reads its
sources front to back.  ``order="source"`` visits the selection in its order (joins keep
the sources' order).  The plan holds a few numbers per shard, never one per sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import PlanError
from ..units import format_bytes
from .order import sample_order

__all__ = [
    "ShardPlan",
    "Recommendation",
    "shard_count",
    "assign_shards",
    "recommend",
    "write_rounds",
    "held_bytes",
    "read_shares",
    "weigh",
    "cut",
    "Weighing",
    "DEFAULT_SHARD_SIZE",
    "DEFAULT_ROUND_BYTES",
    "DEFAULT_PLACED_RUN_BYTES",
    "MIN_RECOMMENDED_SHARD",
    "MAX_RECOMMENDED_SHARD",
]

DEFAULT_SHARD_SIZE = 256 * 1000**2
MIN_RECOMMENDED_SHARD = 100 * 1000**2
MAX_RECOMMENDED_SHARD = 1000**3
# Bytes of samples one rank holds in one round of a conversion (see write_rounds).
DEFAULT_ROUND_BYTES = 512 * 2**20
# What a sample costs in memory beyond its stored bytes while a round holds it: a dict
# and its (id, sample) pair, plus the record it is encoded into, and each field's entry
# and value object.  Measured with tracemalloc on JSON lines of 2, 6 and 12 fields read
# and encoded as MDS records; without them a round of small samples holds 6x its bytes.
SAMPLE_HELD_BYTES = 220
FIELD_HELD_BYTES = 72
# The smallest mean run of records one rank writes into one shard for the ranks to write
# their records in place (one run per rank and shard of a round) rather than send them
# to the shard's owner: 1 MiB, the stripe size Lustre defaults to.  With the default
# round it holds up to 256 ranks writing shards of 256 MiB.
DEFAULT_PLACED_RUN_BYTES = 2**20
# Relative spread of shard bytes the planner promises (and checks in its tests).
BALANCE_TOLERANCE = 0.05


def shard_count(
    total_bytes: int,
    num_samples: int,
    *,
    shard_size: int | None = None,
    num_shards: int | None = None,
    multiple_of: int = 1,
) -> int:
    """The number of shards: ``num_shards`` if given, else the smallest multiple of
    ``multiple_of`` whose mean shard size is at most ``shard_size``.

    >>> shard_count(10_000, 500, shard_size=1_000, multiple_of=4)
    12
    >>> shard_count(10, 500, shard_size=1_000, multiple_of=4)
    4
    >>> shard_count(10_000, 500, num_shards=6, multiple_of=4)
    Traceback (most recent call last):
    ...
    hpcio.errors.PlanError: --num-shards 6 is not a multiple of 4 (ngpus x nworkers or --shards-multiple-of)
    """
    if multiple_of < 1:
        raise PlanError(f"the shard count must be a multiple of a positive number, got {multiple_of}")
    if num_shards is not None:
        if num_shards < 1:
            raise PlanError(f"--num-shards must be at least 1, got {num_shards}")
        if num_shards % multiple_of:
            raise PlanError(
                f"--num-shards {num_shards} is not a multiple of {multiple_of} "
                "(ngpus x nworkers or --shards-multiple-of)"
            )
        count = num_shards
    else:
        size = DEFAULT_SHARD_SIZE if shard_size is None else shard_size
        if size < 1:
            raise PlanError(f"--shard-size must be positive, got {size}")
        wanted = max(1, math.ceil(total_bytes / size))
        count = math.ceil(wanted / multiple_of) * multiple_of
    if count > num_samples:
        raise PlanError(
            f"{num_samples} samples cannot fill {count} shards (every shard needs at least "
            f"one sample); lower --ngpus/--nworkers, --shards-multiple-of or --num-shards"
        )
    return count


@dataclass
class ShardPlan:
    """Which samples go into which shard, computed per shard rather than stored.

    The ``num_samples`` selected samples are visited in the plan's order (a bijection of
    their positions, :mod:`.order`); shard ``k`` holds the samples at positions
    ``bounds[k]:bounds[k+1]`` of that order.  ``selection`` holds their global ids (a
    global id numbers the samples of all sources one after the other), or is None when
    they are the ids ``first, first + 1, ...``.  ``shard_bytes[k]`` is shard ``k``'s size
    according to the sizes the plan was made from.  A plan holds a few bytes per shard,
    not per sample: each rank computes the members of the shards it needs.
    """

    num_samples: int
    bounds: np.ndarray
    shard_bytes: np.ndarray
    seed: int
    order: str
    first: int = 0
    selection: np.ndarray | None = None

    def __post_init__(self):
        self._order = sample_order(self.num_samples, self.seed, self.order)
        # The selection's positions ordered by id, and its ids so ordered: made when
        # first needed (by the ranks that look samples up), not sent with the plan.
        self._by_id = self._sorted = None

    @property
    def num_shards(self) -> int:
        return len(self.bounds) - 1

    def ids(self, positions: np.ndarray) -> np.ndarray:
        """Global ids of the samples at ``positions`` of the selection (not of the order)."""
        return self.first + positions if self.selection is None else self.selection[positions]

    def shard(self, k: int) -> np.ndarray:
        """Global ids of shard ``k``, ascending (source order)."""
        at = np.arange(self.bounds[k], self.bounds[k + 1], dtype=np.int64)
        ids = self.ids(self._order.forward(at))
        ids.sort()
        return ids

    def shard_of(self, ids: np.ndarray) -> np.ndarray:
        """The shard of each of the global ``ids``: -1 for an id not selected."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.selection is None:
            positions = ids - self.first
            selected = (positions >= 0) & (positions < self.num_samples)
        else:
            if self._by_id is None:
                self._by_id = np.argsort(self.selection, kind="stable")
                self._sorted = self.selection[self._by_id]
            at = np.minimum(np.searchsorted(self._sorted, ids), max(self.num_samples - 1, 0))
            selected = self._sorted[at] == ids if self.num_samples else np.zeros(len(ids), bool)
            positions = self._by_id[at]
        shards = np.full(len(ids), -1, dtype=np.int64)
        visits = self._order.inverse(positions[selected])
        shards[selected] = np.searchsorted(self.bounds, visits, side="right") - 1
        return shards

    def imbalance(self) -> float:
        """Largest relative distance of a shard's bytes from the mean shard."""
        mean = float(self.shard_bytes.mean()) if self.num_shards else 0.0
        if mean == 0:
            return 0.0
        return float(np.abs(self.shard_bytes - mean).max() / mean)


# Selected samples an assignment pass reads the sizes of at a time.
PASS_SAMPLES = 1 << 16


@dataclass
class Weighing:
    """The selected samples weighed in the plan's order (:func:`weigh`), ready to be cut
    into any number of shards (:func:`cut`): the weights of buckets of ``bucket``
    consecutive positions, as running totals ``ends``, and the samples' stored bytes."""

    plan: ShardPlan  # still one shard: its order and selection
    bucket: int
    ends: np.ndarray
    total_bytes: int


def weigh(sizes, seed: int = 0, *, selection: np.ndarray | None = None, first: int = 0,
          count: int | None = None, order: str = "seeded") -> Weighing:
    """One pass over the sizes of the selected samples, a window at a time (see
    :func:`assign_shards` for the parameters): the weight (bytes, at least 1) of each
    bucket of consecutive positions of the order, and the bytes of them all."""
    if selection is not None:
        selection = np.asarray(selection, dtype=np.int64)
        n = len(selection)
        if len(np.unique(selection)) != n:
            raise PlanError("the selection lists a sample more than once")
    else:
        n = len(sizes) - first if count is None else count
    plan = ShardPlan(num_samples=n, bounds=np.array([0, n], np.int64), shard_bytes=np.zeros(1, np.int64),
                     seed=seed, order=order, first=first, selection=selection)
    bucket = max(1024, -(-n // (1 << 18)))
    weights = np.zeros(-(-n // bucket), np.int64)
    total = 0
    for visits, nbytes in _windows(plan, sizes):
        # Weigh each sample at least one byte so empty samples still spread evenly.
        weights += np.bincount(visits // bucket, np.maximum(nbytes, 1), len(weights)).astype(np.int64)
        total += int(nbytes.sum())
    return Weighing(plan, bucket, np.cumsum(weights), total)


def cut(weighing: Weighing, sizes, num_shards: int) -> ShardPlan:
    """The plan cutting the weighed samples into ``num_shards`` shards (see
    :func:`assign_shards`); one more pass over the sizes sums each shard's bytes."""
    plan, ends = weighing.plan, weighing.ends
    n = plan.num_samples
    if num_shards < 1 or num_shards > max(n, 1) or (n == 0 and num_shards != 1):
        raise PlanError(f"cannot cut {n} samples into {num_shards} shards")
    total = int(ends[-1]) if n else 0
    targets = (np.arange(1, num_shards, dtype=np.float64) * total) / num_shards
    cuts = np.array([_cut(plan, sizes, ends, weighing.bucket, t) for t in targets], dtype=np.int64)
    # Every shard gets at least one sample: keep the cuts strictly increasing in (0, n).
    k = np.arange(1, num_shards, dtype=np.int64)
    cuts = np.maximum(cuts, k)
    cuts = np.minimum(cuts, n - (num_shards - k))
    cuts = np.maximum.accumulate(cuts) if len(cuts) else cuts
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    shard_bytes = np.zeros(num_shards, np.int64)
    for visits, nbytes in _windows(plan, sizes):
        owner = np.searchsorted(bounds, visits, side="right") - 1
        shard_bytes += np.bincount(owner, nbytes, num_shards).astype(np.int64)
    return replace(plan, bounds=bounds, shard_bytes=shard_bytes)


def assign_shards(
    sizes,
    num_shards: int,
    seed: int = 0,
    *,
    selection: np.ndarray | None = None,
    first: int = 0,
    count: int | None = None,
    order: str = "seeded",
) -> ShardPlan:
    """Assign samples to ``num_shards`` shards balanced by bytes.

    The selected samples, visited in the plan's order, are cut into ``num_shards``
    consecutive runs of (as near as possible) equal bytes: each cut falls after the
    sample whose running total is nearest its target, every shard keeps at least one
    sample.  Two passes over the sizes find the cuts without holding a value per
    sample: the first sums the bytes of buckets of consecutive positions
    (:func:`weigh`), the second the bytes of each shard (:func:`cut`); between them,
    each cut is placed within its bucket.

    Parameters
    ----------
    sizes
        Stored size in bytes of every sample of the sources, indexed by global id (an
        array, or any object whose ``[ids]`` gives the sizes of an id array, such as
        :class:`.sizes.SampleSizes`).
    num_shards
        Number of shards (at most the number of selected samples).
    seed
        Seed of the order (``order="seeded"``).
    selection
        Global ids to convert, each at most once (e.g. from a split); else the ``count``
        ids from ``first`` (default: every id of ``sizes``).
    order
        ``"seeded"`` spreads every part of the source over all shards; ``"source"``
        keeps the selection's order (shard 0 holds its beginning).

    >>> p = assign_shards(np.full(10, 100), 2, seed=1)
    >>> p.num_shards, sorted(p.shard(0).tolist() + p.shard(1).tolist()) == list(range(10))
    (2, True)
    >>> p.shard_bytes.tolist()
    [500, 500]
    """
    weighing = weigh(sizes, seed, selection=selection, first=first, count=count, order=order)
    return cut(weighing, sizes, num_shards)


def _windows(plan: ShardPlan, sizes):
    """``(positions in the order, stored sizes)`` of the plan's selected samples,
    :data:`PASS_SAMPLES` at a time."""
    n = plan.num_samples
    for start in range(0, n, PASS_SAMPLES):
        at = np.arange(start, min(n, start + PASS_SAMPLES), dtype=np.int64)
        yield plan._order.inverse(at), np.asarray(sizes[plan.ids(at)], dtype=np.int64)


def _cut(plan: ShardPlan, sizes, ends: np.ndarray, bucket: int, target: float) -> int:
    """The position after which to cut for ``target`` bytes: after the sample whose
    running total (of weights, in the plan's order) is nearest the target.  ``ends`` are
    the running totals at the ends of the buckets; the bucket holding the target is
    weighed sample by sample."""
    n = plan.num_samples
    b = min(int(np.searchsorted(ends, target, side="left")), len(ends) - 1)
    lo = b * bucket
    at = np.arange(lo, min(n, lo + bucket), dtype=np.int64)
    weights = np.maximum(np.asarray(sizes[plan.ids(plan._order.forward(at))], dtype=np.int64), 1)
    before = int(ends[b - 1]) if b else 0
    running = before + np.cumsum(weights)
    right = min(int(np.searchsorted(running, target, side="left")), len(at) - 1)
    left_gap = target - (int(running[right - 1]) if right else before)
    right_gap = int(running[right]) - target
    return lo + right + 1 if right_gap < left_gap else lo + right


def held_bytes(plan: ShardPlan, fields: int) -> np.ndarray:
    """Each shard's estimated bytes in memory while a round holds its samples: its stored
    bytes and, per sample, the Python objects of a sample of ``fields`` fields."""
    per_sample = SAMPLE_HELD_BYTES + FIELD_HELD_BYTES * max(1, fields)
    return plan.shard_bytes + np.diff(plan.bounds) * per_sample


def write_rounds(shards: list[int], shard_bytes: np.ndarray, ranks: int, round_bytes: int) -> list[list[int]]:
    """Cut the shards to write into rounds of at most ``round_bytes`` per rank, a shard
    weighing ``shard_bytes`` (what it holds in memory, :func:`held_bytes`).

    Rank ``r`` writes ``shards[r::ranks]``; a round is a run of ``shards`` whose length is
    a multiple of ``ranks``, so every rank keeps its shards.  In each round every rank
    reads its share of the round's samples once (:func:`read_shares`) and they are
    exchanged, so a sample's block of the sources is read once per round (once in all,
    when the rounds are read ahead, :mod:`.spill`), not once per shard; a rank holds
    about a round's bytes at a time, and at least one shard.

    >>> write_rounds([0, 1, 2, 3, 4], np.array([10, 10, 10, 10, 10]), 2, 10)
    [[0, 1], [2, 3], [4]]
    >>> write_rounds([0, 1, 2, 3, 4], np.array([10, 10, 10, 10, 10]), 2, 20)
    [[0, 1, 2, 3], [4]]
    >>> write_rounds([0, 1, 2, 3, 4], np.array([10, 10, 10, 10, 10]), 2, 10**6)
    [[0, 1, 2, 3, 4]]
    """
    if not shards:
        return []
    biggest = max(1, max(int(shard_bytes[k]) for k in shards))
    step = max(1, round_bytes // biggest) * ranks
    return [list(shards[i : i + step]) for i in range(0, len(shards), step)]


def read_shares(blocks: np.ndarray, nbytes: np.ndarray, ranks: int) -> np.ndarray:
    """Where each rank's share of samples starts and ends: ``ranks + 1`` positions.

    ``blocks`` numbers the block (a unit its source decodes whole, such as a Parquet row
    group) of each sample, ascending; ``nbytes`` are the samples' sizes.  The samples are
    cut into runs of about equal bytes; a cut falling inside a block smaller than half a
    share moves to the nearer edge of the block, so the block is read by one rank; a
    larger block is shared (each of its ranks decodes it and keeps its own samples).

    >>> read_shares(np.array([0, 0, 1, 1, 2, 2, 3, 3]), np.full(8, 10), 2).tolist()
    [0, 4, 8]
    >>> read_shares(np.array([0, 0, 0, 1, 2, 2]), np.full(6, 10), 2).tolist()
    [0, 3, 6]
    >>> read_shares(np.zeros(6, np.int64), np.full(6, 10), 2).tolist()
    [0, 3, 6]
    """
    n = len(blocks)
    weights = np.maximum(np.asarray(nbytes, dtype=np.int64), 1)
    ends = np.cumsum(weights)
    total = int(ends[-1]) if n else 0
    cuts = [0]
    for r in range(1, ranks):
        target = total * r / ranks
        p = int(np.searchsorted(ends, target, side="left")) + 1 if n else 0
        p = min(p, n)
        if 0 < p < n and blocks[p - 1] == blocks[p]:
            b = blocks[p]
            lo = int(np.searchsorted(blocks, b, side="left"))
            hi = int(np.searchsorted(blocks, b, side="right"))
            block_bytes = int(ends[hi - 1] - (ends[lo - 1] if lo else 0))
            if block_bytes * 2 * ranks < total:
                start = int(ends[lo - 1]) if lo else 0
                p = lo if target - start < int(ends[hi - 1]) - target else hi
        cuts.append(max(p, cuts[-1]))
    cuts.append(n)
    return np.asarray(cuts, dtype=np.int64)


@dataclass
class Recommendation:
    """What ``hpcio plan`` recommends, with the reasons in plain words."""

    num_shards: int
    shard_bytes: int
    multiple_of: int
    files_per_shard: int
    inodes: int
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "num_shards": self.num_shards,
            "shard_bytes": self.shard_bytes,
            "multiple_of": self.multiple_of,
            "files_per_shard": self.files_per_shard,
            "inodes": self.inodes,
            "reasons": list(self.reasons),
        }


def recommend(
    total_bytes: int,
    num_samples: int,
    *,
    ngpus: int = 1,
    nworkers: int = 1,
    nodes: int = 1,
    inode_quota: int | None = None,
    files_per_shard: int = 1,
    target: int = DEFAULT_SHARD_SIZE,
) -> Recommendation:
    """Recommend a shard count and size for ``nodes`` nodes of ``ngpus`` GPUs, each
    GPU's data loader running ``nworkers`` workers.

    The count is a multiple of nodes x ngpus x nworkers (every worker of every rank
    gets whole shards), shards are 100 MB - 1 GB (near ``target`` when the data allows),
    and the files (``files_per_shard`` per shard plus one index) fit ``inode_quota``.

    >>> r = recommend(50 * 1000**3, 10**6, ngpus=4, nworkers=8, nodes=2)
    >>> r.num_shards, r.num_shards % 64, round(r.shard_bytes / 1e6)
    (192, 0, 260)
    """
    for name, value in (("ngpus", ngpus), ("nworkers", nworkers), ("nodes", nodes)):
        if value < 1:
            raise PlanError(f"{name} must be at least 1, got {value}")
    m = nodes * ngpus * nworkers
    job = f"{nodes} node(s) x {ngpus} GPU(s)" if nodes > 1 else f"{ngpus} GPU(s)"
    reasons = [
        f"{job} x {nworkers} worker(s) = {m} data loader workers: "
        f"the shard count is a multiple of {m} so each gets whole shards"
    ]
    lo = max(1, math.ceil(total_bytes / MAX_RECOMMENDED_SHARD / m)) * m
    hi = (total_bytes // MIN_RECOMMENDED_SHARD) // m * m
    near = max(1, round(total_bytes / target / m)) * m
    if hi >= lo:
        count = min(max(near, lo), hi)
        reasons.append(
            f"{format_bytes(total_bytes)} in shards of about {format_bytes(total_bytes / count)} "
            f"(between 100 MB and 1 GB, near the {format_bytes(target)} target)"
        )
    elif total_bytes / m < MIN_RECOMMENDED_SHARD:
        count = m
        reasons.append(
            f"the dataset ({format_bytes(total_bytes)}) is too small for {m} shards of 100 MB: "
            f"one shard per worker, {format_bytes(total_bytes / m)} each"
        )
    else:
        count = lo
        reasons.append(f"{count} shards of {format_bytes(total_bytes / count)} keep shards under 1 GB")
    if count > num_samples:
        raise PlanError(
            f"{num_samples} samples cannot fill {count} shards: fewer workers, or more data"
        )
    if inode_quota is not None:
        fit = (inode_quota - 1) // files_per_shard // m * m
        if fit < 1:
            raise PlanError(
                f"an inode quota of {inode_quota} cannot hold {m} shards of "
                f"{files_per_shard} file(s) plus an index"
            )
        if count > fit:
            count = fit
            reasons.append(
                f"the inode quota ({inode_quota}) allows at most {fit} shards of "
                f"{files_per_shard} file(s): shards grow to {format_bytes(total_bytes / count)}"
            )
        else:
            reasons.append(
                f"{count * files_per_shard + 1} files use "
                f"{100 * (count * files_per_shard + 1) / inode_quota:.2g}% of the inode quota ({inode_quota})"
            )
    per_sample = total_bytes / max(num_samples, 1)
    reasons.append(
        f"about {num_samples // count} samples of {format_bytes(per_sample)} per shard"
    )
    return Recommendation(
        num_shards=count,
        shard_bytes=math.ceil(total_bytes / count),
        multiple_of=m,
        files_per_shard=files_per_shard,
        inodes=count * files_per_shard + 1,
        reasons=reasons,
    )
