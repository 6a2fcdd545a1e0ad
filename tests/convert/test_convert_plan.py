"""The planner: shard counts, byte balance, representativeness, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from hpcio.convert import plan as planning
from hpcio.convert.order import SeededOrder
from hpcio.convert.plan import (
    BALANCE_TOLERANCE,
    ShardPlan,
    assign_shards,
    held_bytes,
    read_shares,
    recommend,
    shard_count,
    write_rounds,
)
from hpcio.errors import PlanError


@pytest.mark.parametrize("multiple", [1, 3, 8, 16])
def test_shard_count_is_a_multiple_honouring_the_size_target(multiple):
    count = shard_count(10_000_000, 50_000, shard_size=400_000, multiple_of=multiple)
    assert count % multiple == 0
    assert 10_000_000 / count <= 400_000  # mean shard at most the target
    assert 10_000_000 / (count - multiple) > 400_000 if count > multiple else True


def test_shard_count_errors_name_the_problem():
    with pytest.raises(PlanError, match=r"^--num-shards 10 is not a multiple of 4 \(ngpus x nworkers"):
        shard_count(1000, 100, num_shards=10, multiple_of=4)
    with pytest.raises(PlanError, match=r"^5 samples cannot fill 8 shards \(every shard needs at least one"):
        shard_count(1000, 5, shard_size=1000, multiple_of=8)


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("dist", ["uniform", "lognormal"])
def test_shards_are_balanced_by_bytes_within_5_percent(seed, dist):
    rng = np.random.default_rng(100 + seed)
    sizes = (rng.integers(50, 5000, 30_000) if dist == "uniform"
             else rng.lognormal(7, 1, 30_000).astype(np.int64) + 1)
    plan = assign_shards(sizes, 32, seed)
    assert plan.imbalance() <= BALANCE_TOLERANCE
    assert plan.shard_bytes.sum() == sizes.sum()
    for k in range(plan.num_shards):
        assert plan.shard_bytes[k] == sizes[plan.shard(k)].sum()


def _members(plan):
    return np.concatenate([plan.shard(k) for k in range(plan.num_shards)])


def test_every_sample_is_in_exactly_one_shard_in_source_order_within_it():
    plan = assign_shards(np.arange(1, 1001), 10, seed=3)
    assert sorted(_members(plan).tolist()) == list(range(1000))
    for k in range(10):
        ids = plan.shard(k)
        assert len(ids) > 0 and (np.diff(ids) > 0).all()


def test_shards_are_representative_of_the_whole_source():
    n, shards = 20_000, 16
    plan = assign_shards(np.full(n, 100), shards, seed=5)
    for k in range(shards):
        ids = plan.shard(k)
        # every tenth of the source is present in every shard, in about equal measure
        deciles = np.bincount(ids * 10 // n, minlength=10)
        assert deciles.min() > 0.7 * len(ids) / 10, (k, deciles)
        assert abs(ids.mean() / n - 0.5) < 0.05
    # and the source order does not decide the shard
    first = np.array([plan.shard(k).min() for k in range(shards)])
    assert first.max() < n // 100


def test_source_order_keeps_contiguous_runs():
    plan = assign_shards(np.full(100, 10), 4, seed=5, order="source")
    assert [plan.shard(k).tolist() for k in range(4)] == [list(range(25 * k, 25 * k + 25)) for k in range(4)]


def test_plan_is_deterministic_and_seeded():
    sizes = np.random.default_rng(0).integers(1, 1000, 5000)
    a, b = assign_shards(sizes, 8, seed=42), assign_shards(sizes, 8, seed=42)
    assert np.array_equal(_members(a), _members(b)) and np.array_equal(a.bounds, b.bounds)
    c = assign_shards(sizes, 8, seed=43)
    assert not np.array_equal(a.shard(0), c.shard(0))


def test_selection_restricts_the_plan():
    sel = np.arange(100, 200)
    plan = assign_shards(np.full(1000, 5), 4, seed=0, selection=sel)
    assert sorted(_members(plan).tolist()) == sel.tolist()
    ranged = assign_shards(np.full(1000, 5), 4, seed=0, first=100, count=100)
    assert [ranged.shard(k).tolist() for k in range(4)] == [plan.shard(k).tolist() for k in range(4)]


def test_a_selection_listing_a_sample_twice_is_refused():
    with pytest.raises(PlanError, match=r"^the selection lists a sample more than once$"):
        assign_shards(np.full(10, 5), 2, selection=np.array([1, 2, 2]))


def _reference_cuts(weights, num_shards):
    """The cuts of a materialised order: after the sample whose running total is nearest
    each target, every shard keeping one sample."""
    n = len(weights)
    cum = np.cumsum(weights)
    targets = np.arange(1, num_shards) * float(cum[-1]) / num_shards
    right = np.minimum(np.searchsorted(cum, targets, side="left"), n - 1)
    left_gap = targets - np.where(right > 0, cum[right - 1], 0)
    cuts = np.where(cum[right] - targets < left_gap, right + 1, right)
    k = np.arange(1, num_shards)
    cuts = np.maximum.accumulate(np.minimum(np.maximum(cuts, k), n - (num_shards - k)))
    return np.concatenate([[0], cuts, [n]])


@pytest.mark.parametrize("n, shards", [(5_000, 7), (200_000, 64), (3, 3)])
def test_cuts_match_those_of_the_materialised_order(monkeypatch, n, shards):
    # Passes of a few windows, and buckets far smaller than the selection.
    monkeypatch.setattr(planning, "PASS_SAMPLES", 4096)
    rng = np.random.default_rng(n)
    sizes = rng.lognormal(7, 2, n + 50).astype(np.int64)
    sizes[rng.integers(0, n, n // 10)] = 0
    sel = rng.permutation(n + 50)[:n]
    plan = assign_shards(sizes, shards, seed=11, selection=sel)
    visited = sel[SeededOrder(n, 11).forward(np.arange(n))]
    assert plan.bounds.tolist() == _reference_cuts(np.maximum(sizes[visited], 1), shards).tolist()
    for k in range(shards):
        members = np.sort(visited[plan.bounds[k]:plan.bounds[k + 1]])
        assert plan.shard(k).tolist() == members.tolist()
        assert plan.shard_bytes[k] == sizes[members].sum()


def test_shard_of_inverts_the_shards():
    sel = np.random.default_rng(1).permutation(3000)[:2000]
    for plan in (assign_shards(np.full(3000, 9), 6, seed=4, selection=sel),
                 assign_shards(np.full(3000, 9), 6, seed=4, first=500, count=2000),
                 assign_shards(np.full(3000, 9), 6, seed=4, order="source")):
        expected = np.full(3000, -1)
        for k in range(plan.num_shards):
            expected[plan.shard(k)] = k
        assert plan.shard_of(np.arange(3000)).tolist() == expected.tolist()


def test_every_shard_gets_a_sample_even_with_one_huge_sample():
    sizes = np.ones(10, dtype=np.int64)
    sizes[3] = 10**9
    plan = assign_shards(sizes, 10, seed=0)
    assert all(len(plan.shard(k)) == 1 for k in range(10))


def test_recommend_respects_multiple_size_range_and_quota():
    rec = recommend(2 * 10**12, 10**7, ngpus=4, nworkers=8, nodes=8)
    assert rec.num_shards % 256 == 0
    assert 100e6 <= rec.shard_bytes <= 1e9
    rec = recommend(2 * 10**12, 10**7, ngpus=4, nworkers=8, nodes=8, inode_quota=1000)
    assert rec.num_shards == 768 and rec.num_shards % 256 == 0 and rec.inodes <= 1000
    assert any("inode quota (1000) allows at most 768 shards" in r for r in rec.reasons)
    small = recommend(10**9, 10**5, ngpus=4, nworkers=8)
    assert small.num_shards == 32
    assert any("too small for 32 shards of 100 MB" in r for r in small.reasons)
    with pytest.raises(PlanError, match="inode quota of 10 cannot hold 32 shards"):
        recommend(10**9, 10**5, ngpus=4, nworkers=8, inode_quota=10)


def test_a_shard_is_weighed_by_its_bytes_and_its_samples_objects():
    plan = ShardPlan(num_samples=10, bounds=np.array([0, 4, 10]), shard_bytes=np.array([400, 50]), seed=0,
                     order="source")
    assert held_bytes(plan, 3).tolist() == [400 + 4 * (220 + 3 * 72), 50 + 6 * (220 + 3 * 72)]
    assert held_bytes(plan, 0).tolist() == held_bytes(plan, 1).tolist()


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("round_bytes", [1, 250, 1000, 10**9])
def test_rounds_keep_each_ranks_shards_and_bound_its_bytes(ranks, round_bytes):
    shard_bytes = np.array([100, 90, 120, 80, 100, 110, 95, 105, 100, 99, 101])
    todo = [0, 2, 3, 5, 6, 7, 9, 10]  # shards 1, 4, 8 already written
    rounds = write_rounds(todo, shard_bytes, ranks, round_bytes)
    assert [k for r in rounds for k in r] == todo
    position = 0
    for r in rounds:
        for rank in range(ranks):
            mine = r[rank::ranks]
            # the shards a rank writes in the round are the ones it writes overall
            assert mine == [k for t, k in enumerate(todo) if t % ranks == rank and position <= t < position + len(r)]
            assert len(mine) <= 1 or sum(shard_bytes[k] for k in mine) <= round_bytes
        position += len(r)
    assert write_rounds([], shard_bytes, ranks, round_bytes) == []


def test_read_shares_keep_small_blocks_whole_and_balance_bytes():
    rng = np.random.default_rng(5)
    blocks = np.repeat(np.arange(40), rng.integers(1, 30, 40))
    nbytes = rng.integers(10, 1000, len(blocks))
    for ranks in (1, 2, 3, 8):
        cuts = read_shares(blocks, nbytes, ranks)
        assert cuts[0] == 0 and cuts[-1] == len(blocks) and np.all(np.diff(cuts) >= 0)
        for c in cuts[1:-1]:
            assert c in (0, len(blocks)) or blocks[c - 1] != blocks[c]  # never inside a block
        share = nbytes.sum() / ranks
        biggest = max(nbytes[blocks == b].sum() for b in range(40))
        for r in range(ranks):
            assert abs(nbytes[cuts[r]:cuts[r + 1]].sum() - share) <= biggest


def test_read_shares_split_a_block_too_big_for_one_rank():
    # one row group of 100 samples and a small one: the big one is read by both ranks
    blocks = np.array([0] * 100 + [1] * 4)
    cuts = read_shares(blocks, np.full(104, 10), 2)
    assert cuts.tolist() == [0, 52, 104]
    assert read_shares(np.zeros(0, np.int64), np.zeros(0, np.int64), 3).tolist() == [0, 0, 0, 0]
    assert read_shares(np.array([0, 1]), np.array([5, 5]), 4).tolist() == [0, 1, 1, 2, 2]
