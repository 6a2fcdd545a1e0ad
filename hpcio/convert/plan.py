"""Pure planning: how many shards, and which samples go into each.

Nothing here touches files or processes; every function is a deterministic function of
its arguments, so every MPI rank (or rank 0 alone, which then broadcasts) computes the
same plan, and the output does not depend on how many ranks write it.

Assignment (``order="seeded"``): the samples selected for conversion are permuted with
``numpy.random.default_rng(seed)``, and the permuted sequence is cut into ``num_shards``
consecutive runs of (as near as possible) equal bytes.  Each shard is therefore a uniform
random sample of the whole source (representative: no shard holds "the end of the
file"), and its bytes differ from the mean by at most the largest sample.  Within a shard
samples are kept in source order, so each writer reads its sources front to back.
``order="source"`` skips the permutation (joins keep the sources' order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
# numpy loads its random module on first use: imported here, with the rest of the
# converter, it is not paid inside a conversion's own time by rank 0 alone.
import numpy.random

from ..errors import PlanError
from ..units import format_bytes

__all__ = [
    "ShardPlan",
    "Recommendation",
    "shard_count",
    "assign_shards",
    "recommend",
    "write_rounds",
    "read_shares",
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
    """Which samples go into which shard.

    ``members[bounds[k]:bounds[k+1]]`` are the global sample ids of shard ``k`` (a
    global id numbers the samples of all sources one after the other), in source order;
    ``shard_bytes[k]`` is their size according to the sizes the plan was made from.
    """

    members: np.ndarray
    bounds: np.ndarray
    shard_bytes: np.ndarray
    seed: int
    order: str

    @property
    def num_shards(self) -> int:
        return len(self.bounds) - 1

    @property
    def num_samples(self) -> int:
        return len(self.members)

    def shard(self, k: int) -> np.ndarray:
        """Global sample ids of shard ``k``."""
        return self.members[self.bounds[k] : self.bounds[k + 1]]

    def imbalance(self) -> float:
        """Largest relative distance of a shard's bytes from the mean shard."""
        mean = float(self.shard_bytes.mean()) if self.num_shards else 0.0
        if mean == 0:
            return 0.0
        return float(np.abs(self.shard_bytes - mean).max() / mean)


def assign_shards(
    sizes: np.ndarray,
    num_shards: int,
    seed: int = 0,
    *,
    selection: np.ndarray | None = None,
    order: str = "seeded",
) -> ShardPlan:
    """Assign samples to ``num_shards`` shards balanced by bytes.

    Parameters
    ----------
    sizes
        Stored size in bytes of every sample of the sources (indexed by global id).
    num_shards
        Number of shards (at most the number of selected samples).
    seed
        Seed of the permutation (``order="seeded"``).
    selection
        Global ids to convert (default: all), e.g. from take/skip or a split.
    order
        ``"seeded"`` spreads every part of the source over all shards; ``"source"``
        keeps the selection's order (shard 0 holds its beginning).

    >>> p = assign_shards(np.full(10, 100), 2, seed=1)
    >>> p.num_shards, sorted(p.shard(0).tolist() + p.shard(1).tolist()) == list(range(10))
    (2, True)
    >>> p.shard_bytes.tolist()
    [500, 500]
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    ids = np.arange(len(sizes), dtype=np.int64) if selection is None else np.asarray(selection, np.int64)
    n = len(ids)
    if num_shards < 1 or num_shards > max(n, 1) or (n == 0 and num_shards != 1):
        raise PlanError(f"cannot cut {n} samples into {num_shards} shards")
    if order == "seeded":
        ids = ids[np.random.default_rng(seed).permutation(n)]
    elif order != "source":
        raise PlanError(f"unknown sample order {order!r}; use 'seeded' or 'source'")
    # Weigh each sample at least one byte so empty samples still spread evenly.
    weights = np.maximum(sizes[ids], 1) if n else np.zeros(0, np.int64)
    cum = np.cumsum(weights)
    total = int(cum[-1]) if n else 0
    targets = (np.arange(1, num_shards, dtype=np.float64) * total) / num_shards
    # Cut after the sample whose cumulative size is nearest the target.
    right = np.searchsorted(cum, targets, side="left")
    right = np.minimum(right, n - 1) if n else right
    left_gap = targets - np.where(right > 0, cum[right - 1], 0) if n else targets
    right_gap = cum[right] - targets if n else targets
    cuts = np.where(right_gap < left_gap, right + 1, right)
    # Every shard gets at least one sample: keep the cuts strictly increasing in (0, n).
    k = np.arange(1, num_shards, dtype=np.int64)
    cuts = np.maximum(cuts, k)
    cuts = np.minimum(cuts, n - (num_shards - k))
    cuts = np.maximum.accumulate(cuts) if len(cuts) else cuts
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    members = ids.copy()
    shard_bytes = np.empty(num_shards, dtype=np.int64)
    for s in range(num_shards):
        part = members[bounds[s] : bounds[s + 1]]
        part.sort()
        shard_bytes[s] = int(sizes[part].sum())
    return ShardPlan(members=members, bounds=bounds, shard_bytes=shard_bytes, seed=seed, order=order)


def write_rounds(shards: list[int], shard_bytes: np.ndarray, ranks: int, round_bytes: int) -> list[list[int]]:
    """Cut the shards to write into rounds of at most ``round_bytes`` per rank.

    Rank ``r`` writes ``shards[r::ranks]``; a round is a run of ``shards`` whose length is
    a multiple of ``ranks``, so every rank keeps its shards.  In each round every rank
    reads its share of the round's samples once (:func:`read_shares`) and they are
    exchanged, so a sample's block of the sources is read once per round (once in all,
    when the rounds are read ahead, :mod:`.spill`), not once per shard; a rank holds
    about a round's bytes at a time.

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
    reasons = [
        f"{nodes} node(s) x {ngpus} GPU(s) x {nworkers} worker(s) = {m} data loader workers: "
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
