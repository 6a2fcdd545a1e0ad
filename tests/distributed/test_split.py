"""Property tests of the pure splitting functions (no MPI, no torch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hpcio.distributed.split import (
    block_order,
    circular_shift,
    consumed_position,
    contiguous_part,
    epoch_order,
    per_consumer,
    split_indices,
)

# Local settings: a profile loaded here would change every other module's tests.
quick = settings(max_examples=150, deadline=None)


@st.composite
def layouts(draw):
    n = draw(st.integers(0, 400))
    mode = draw(st.sampled_from(["global", "block", "none"]))
    shard_sizes = None
    if mode == "block":
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=12)))
        shard_sizes = np.diff([0, *cuts, n])
    return {
        "n": n,
        "mode": mode,
        "shard_sizes": shard_sizes,
        "window": draw(st.integers(1, 4)),
        "seed": draw(st.integers(0, 2**32 - 1)),
        "epoch": draw(st.integers(0, 50)),
    }


def all_parts(layout, world, workers, **kw):
    order = epoch_order(
        layout["n"], layout["seed"], layout["epoch"], layout["mode"],
        layout["shard_sizes"], layout["window"],
    )
    parts = {
        (r, w): split_indices(
            layout["n"], r, world, w, workers, seed=layout["seed"], epoch=layout["epoch"],
            mode=layout["mode"], shard_sizes=layout["shard_sizes"], window=layout["window"], **kw,
        )
        for r in range(world)
        for w in range(workers)
    }
    return order, parts


@quick
@given(layouts(), st.integers(1, 6), st.integers(1, 4), st.integers(1, 9), st.integers(0, 60))
def test_drop_gives_disjoint_equal_parts_covering_a_prefix(layout, world, workers, batch, start):
    n = layout["n"]
    start = min(start, n)
    order, parts = all_parts(layout, world, workers, batch_size=batch, start=start)
    m = (n - start) // (world * workers)
    assert {len(p) for p in parts.values()} == {m}
    union = np.concatenate(list(parts.values()))
    assert len(np.unique(union)) == len(union)  # disjoint
    # exactly the first consumers*m positions of the remaining epoch order
    assert sorted(union.tolist()) == sorted(order[start : start + len(union)].tolist())


@quick
@given(layouts(), st.integers(1, 6), st.integers(1, 4), st.integers(1, 9))
def test_pad_covers_everything_with_equal_parts(layout, world, workers, batch):
    n = layout["n"]
    order, parts = all_parts(layout, world, workers, batch_size=batch, remainder="pad")
    consumers = world * workers
    m = -(-n // consumers)
    assert {len(p) for p in parts.values()} == {m}
    union = np.concatenate(list(parts.values()))
    assert set(union.tolist()) == set(range(n))
    # only the -n % consumers padding positions repeat samples
    assert len(union) - len(np.unique(union)) == m * consumers - n


@quick
@given(layouts())
def test_epoch_order_is_a_permutation(layout):
    order = epoch_order(
        layout["n"], layout["seed"], layout["epoch"], layout["mode"],
        layout["shard_sizes"], layout["window"],
    )
    assert order.dtype == np.int64
    assert sorted(order.tolist()) == list(range(layout["n"]))


def test_global_order_changes_with_epoch_and_seed():
    base = epoch_order(1000, seed=7, epoch=0)
    assert not np.array_equal(base, epoch_order(1000, seed=7, epoch=1))
    assert not np.array_equal(base, epoch_order(1000, seed=8, epoch=0))
    assert np.array_equal(base, epoch_order(1000, seed=7, epoch=0))


@quick
@given(st.lists(st.integers(0, 30), min_size=1, max_size=15), st.integers(1, 5),
       st.integers(0, 1000))
def test_block_order_keeps_windows_of_shards_together(sizes, window, seed):
    order = block_order(sizes, seed=seed, epoch=0, window=window)
    assert sorted(order.tolist()) == list(range(sum(sizes)))
    shard_of = np.repeat(np.arange(len(sizes)), sizes)[order]
    # Cut the order into minimal segments that hold whole shards: no segment may mix
    # samples of more than `window` shards.
    lo = 0
    while lo < len(order):
        chosen, end = set(), lo + 1
        while True:
            touched = set(shard_of[lo:end].tolist())
            if touched == chosen:
                break
            chosen = touched
            end = lo + sum(sizes[k] for k in chosen)
        assert len(chosen) <= window
        lo = end


def test_block_mode_validates_shard_sizes():
    with pytest.raises(ValueError, match="shuffle mode 'block' needs shard_sizes"):
        epoch_order(10, mode="block")
    with pytest.raises(ValueError, match="shard_sizes sum to 9 samples, expected 10"):
        epoch_order(10, mode="block", shard_sizes=[4, 5])
    with pytest.raises(ValueError, match="unknown shuffle mode 'random'"):
        epoch_order(10, mode="random")


@quick
@given(layouts(), st.integers(1, 4), st.integers(1, 3), st.integers(1, 6),
       st.sampled_from(["drop", "pad"]), st.data())
def test_delivered_batches_are_a_prefix_and_resume_at_any_world(
    layout, world, workers, batch, remainder, data
):
    """Simulate DataLoader round-robin delivery, stop, and resume with a new layout."""
    n = layout["n"]
    order, parts = all_parts(layout, world, workers, batch_size=batch, remainder=remainder)
    m = per_consumer(n, world * workers, remainder)
    per_rank = workers * -(-m // batch)
    delivered = data.draw(st.integers(0, per_rank), label="delivered")
    consumed = []
    for k in range(delivered):  # loader batch k comes from worker k % workers
        w, j = k % workers, k // workers
        for r in range(world):
            consumed.extend(parts[(r, w)][j * batch : (j + 1) * batch].tolist())
    pos = consumed_position(n, 0, world, workers, batch, delivered, remainder)
    if remainder == "drop" or pos < n:
        assert sorted(consumed) == sorted(order[:pos].tolist())
    else:  # pad: the last round repeats samples, every sample was read
        assert set(consumed) == set(range(n))

    world2 = data.draw(st.integers(1, 5), label="world2")
    workers2 = data.draw(st.integers(1, 3), label="workers2")
    _, rest = all_parts(layout, world2, workers2, batch_size=batch, start=pos)
    resumed = np.concatenate(list(rest.values())).tolist()
    assert not set(resumed) & set(consumed)  # no replays
    m2 = (n - pos) // (world2 * workers2)
    assert sorted(resumed) == sorted(order[pos : pos + m2 * world2 * workers2].tolist())


@quick
@given(st.integers(0, 300), st.integers(1, 7))
def test_contiguous_part_is_equal_contiguous_and_drops_the_tail(n, world):
    parts = [contiguous_part(n, r, world) for r in range(world)]
    per = n // world
    assert np.array_equal(np.concatenate(parts), np.arange(per * world))
    assert {len(p) for p in parts} == {per}


@quick
@given(st.integers(0, 100), st.integers(1, 6), st.data())
def test_circular_shift_keeps_the_set(n, consumers, data):
    c = data.draw(st.integers(0, consumers - 1))
    idx = np.arange(n) * 3
    shifted = circular_shift(idx, c, consumers)
    assert sorted(shifted.tolist()) == idx.tolist()
    if n:
        assert shifted[0] == idx[(c * n) // consumers]


def test_tensor_parallel_peers_share_parts():
    from hpcio.distributed import RuntimeContext

    parts = {}
    for rank in range(8):
        ctx = RuntimeContext(rank=rank, world_size=8, tp_size=2)
        parts[rank] = split_indices(100, ctx.dp_rank, ctx.dp_size, seed=3).tolist()
    for rank in range(0, 8, 2):
        assert parts[rank] == parts[rank + 1]
    assert not set(parts[0]) & set(parts[2])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rank": 2, "world_size": 2}, r"rank 2 is not in \[0, 2\)"),
        ({"worker": 3, "num_workers": 3}, r"worker 3 is not in \[0, 3\)"),
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"remainder": "wrap"}, "unknown remainder 'wrap'; expected one of drop, pad"),
        ({"start": -1}, "start must be >= 0, got -1"),
    ],
)
def test_split_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        split_indices(10, **kwargs)


def test_dataset_split_matches_contiguous_part(make_dataset):
    ds = make_dataset(11).shuffle(seed=5)
    for rank in range(3):
        part = ds.split(rank, 3)
        assert [s["id"] for s in part] == ds.indices[contiguous_part(11, rank, 3)].tolist()
    with pytest.raises(ValueError, match=r"rank 3 is not in \[0, 3\)"):
        ds.split(3, 3)
