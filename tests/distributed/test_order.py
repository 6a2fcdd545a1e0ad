"""Computed epoch orders: exact at small n, and at 10^10 samples a consumer's cost is its
own batch (memory counted with tracemalloc, which sees numpy's allocations)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hpcio
from hpcio.distributed import BlockOrder, GlobalOrder, consumer_order, epoch_order, split_indices
from hpcio.distributed.order import Arange, Composed, Rotated, seed_keys
from hpcio.errors import IndexOutOfRangeError, InvalidArgumentError

quick = settings(max_examples=100, deadline=None)
MB = 1 << 20


def peak_bytes(fn):
    """The peak of what ``fn()`` allocates, and its result."""
    tracemalloc.start()
    try:
        result = fn()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


@quick
@given(st.integers(0, 3000), st.integers(0, 2**32 - 1), st.integers(0, 100))
def test_global_order_is_a_permutation_with_its_inverse(n, seed, epoch):
    order = GlobalOrder(n, seed, epoch)
    values = np.asarray(order)
    assert values.dtype == np.int64 and len(values) == n
    assert np.array_equal(np.sort(values), np.arange(n))
    assert np.array_equal(order.position_of(values), np.arange(n))


def test_epochs_and_seeds_give_different_orders():
    a, b, c = (np.asarray(GlobalOrder(1000, s, e)) for s, e in ((1, 0), (1, 1), (2, 0)))
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(a, np.asarray(GlobalOrder(1000, 1, 0)))  # a pure function


def test_slices_arrays_and_ints_agree():
    order = GlobalOrder(10_007, seed=3, epoch=2)
    whole = np.asarray(order)
    assert np.array_equal(order[100:200], whole[100:200])
    assert np.array_equal(order[5:5000:7], whole[5:5000:7])
    assert np.array_equal(order[[3, -1, 0]], whole[[3, -1, 0]])
    assert order[-1] == whole[-1] and isinstance(order[7], int)
    with pytest.raises(IndexOutOfRangeError, match=r"^position 10007 out of range for an order of 10007$"):
        order[[10_007]]


def test_order_refuses_what_it_cannot_cover():
    with pytest.raises(InvalidArgumentError, match=r"^an order covers 0 <= n < 2\*\*63 samples, got 9223372036854775808$"):
        GlobalOrder(2**63)
    with pytest.raises(InvalidArgumentError, match=r"^seeds and epochs must be >= 0, got -1$"):
        seed_keys(-1, 0)


def test_the_largest_order_evaluates_at_its_ends():
    order = GlobalOrder(2**63 - 1, seed=1)
    got = order[[0, 2**63 - 2]]
    assert ((got >= 0) & (got < 2**63 - 1)).all()
    assert order.position_of(got).tolist() == [0, 2**63 - 2]


@quick
@given(st.lists(st.integers(0, 40), max_size=15), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_block_order_reads_each_window_of_shards_before_the_next(sizes, window, seed):
    order = BlockOrder(sizes, seed=seed, epoch=1, window=window)
    values = np.asarray(order)
    n = sum(sizes)
    assert np.array_equal(np.sort(values), np.arange(n))
    starts = np.concatenate(([0], np.cumsum(sizes)))
    shard_of = np.searchsorted(starts, values, side="right") - 1
    # each window of positions draws from exactly the shards of one window of slots
    seen: set[int] = set()
    bounds = order._bounds
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        shards = set(shard_of[lo:hi].tolist())
        assert len(shards) <= window and not shards & seen
        seen |= shards


def test_block_order_holds_the_shard_table_not_n():
    sizes = np.full(100_000, 100_000, dtype=np.int64)  # 10^10 samples in 10^5 shards
    peak, order = peak_bytes(lambda: BlockOrder(sizes, seed=1, epoch=0, window=4))
    assert len(order) == 10**10
    assert peak < 16 * MB  # a few int64 arrays of 10^5 shards
    batch = order[123_456_789_000:123_456_789_032]
    shard = batch // 100_000
    assert len(set(shard.tolist())) <= 4


def test_a_consumer_of_ten_billion_samples_costs_its_own_slice():
    peak, part = peak_bytes(lambda: split_indices(10**10, 32767, 32768, batch_size=32))
    assert len(part) == 10**10 // 32768 == 305_175
    assert peak < 32 * MB
    assert ((part >= 0) & (part < 10**10)).all() and len(np.unique(part)) == len(part)


def test_one_of_eight_workers_over_ten_billion_samples_reads_batch_by_batch():
    def first_batch():
        part = consumer_order(10**10, 0, 1, 7, 8, batch_size=32)
        return part, part[:32]

    peak, (part, batch) = peak_bytes(first_batch)
    assert len(part) == 1_250_000_000 and len(batch) == 32
    assert peak < 32 * MB
    # worker 7 of 8 takes the eighth batch of the first round of the epoch order
    assert np.array_equal(batch, GlobalOrder(10**10)[7 * 32 : 8 * 32])


@pytest.mark.parametrize("world, workers, batch", [(1, 1, 1), (2, 3, 4), (4, 2, 7), (3, 1, 5), (8, 8, 2)])
@pytest.mark.parametrize("mode", ["global", "block", "none"])
def test_the_consumers_together_read_the_epoch_order(world, workers, batch, mode):
    n, sizes = 1003, [100] * 10 + [3]
    kw = dict(seed=5, epoch=2, mode=mode, batch_size=batch, shard_sizes=sizes, window=2)
    parts = [split_indices(n, r, world, w, workers, **kw) for r in range(world) for w in range(workers)]
    union = np.concatenate(parts)
    m = n // (world * workers)
    assert {len(p) for p in parts} == {m} and len(np.unique(union)) == len(union)
    order = np.asarray(epoch_order(n, 5, 2, mode, sizes, 2))
    assert sorted(union.tolist()) == sorted(order[: m * world * workers].tolist())
    lazy = consumer_order(n, world - 1, world, workers - 1, workers, **kw)
    assert np.array_equal(lazy[:], parts[-1])


def test_views_compose_without_materialising():
    base = GlobalOrder(1000, seed=1)
    sliced = Composed(Arange(10, 3, 50), base)
    assert np.array_equal(sliced[:], np.asarray(base)[10:160:3])
    rotated = Rotated(sliced, 7)
    assert np.array_equal(rotated[:], np.roll(sliced[:], -7))
    assert sliced.tobytes() != Composed(Arange(10, 3, 50), GlobalOrder(1000, seed=2)).tobytes()


def test_a_dataset_view_of_a_shuffle_is_computed(tmp_path):
    with hpcio.open_writer(tmp_path / "d", format="mds") as w:
        for i in range(500):
            w.write({"id": i})
    ds = hpcio.open(tmp_path / "d")
    view = ds.shuffle(seed=9)[100:400:3].split(1, 2)
    expected = np.asarray(GlobalOrder(500, seed=9))[100:400:3][50:100]
    assert [s["id"] for s in view] == expected.tolist()
    assert not isinstance(view.indices, np.ndarray)
    assert [s["id"] for s in view.get_batch([0, -1])] == [expected[0], expected[-1]]
