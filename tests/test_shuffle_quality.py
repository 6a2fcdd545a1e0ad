"""Shuffle modes and their mixing figures."""

from __future__ import annotations

import numpy as np
import pytest

import hpcio
from hpcio.bench.shuffle_quality import buffer_order, compare, quality


def test_exact_permutation_scores_one_and_source_order_scores_zero():
    sizes = [500] * 20
    rng_order = np.random.default_rng(1).permutation(10_000)
    q = quality(rng_order, sizes)
    assert all(abs(q[k] - 1.0) < 0.05 for k in ("jump", "displacement", "same_shard")), q
    assert all(abs(q[k]) < 0.05 for k in ("correlation", "lag1", "jump_ks")), q
    assert q["shards_per_1k"] == pytest.approx(20, abs=0.5)
    ordered = quality(np.arange(10_000), sizes)
    assert ordered["jump"] < 0.001 and ordered["displacement"] == 0.0
    assert ordered["same_shard"] > 15 and ordered["shards_per_1k"] <= 3.0  # 1024 samples span 3 shards
    assert ordered["correlation"] == pytest.approx(1.0) and ordered["jump_ks"] > 0.9


def test_the_computed_order_mixes_as_numpy_permutation_does():
    rows = {r["shuffle"]: r for r in compare([2000] * 100, windows=(), buffers=())}
    exact, numpy_row = rows["exact"], rows["numpy permutation"]
    for key in ("jump", "displacement", "same_shard"):
        assert abs(exact[key] - 1.0) < 0.05 and abs(numpy_row[key] - 1.0) < 0.05, (key, exact, numpy_row)
    for key in ("correlation", "lag1", "jump_ks"):
        assert abs(exact[key]) < 0.01 and abs(numpy_row[key]) < 0.01, (key, exact, numpy_row)


def test_buffer_order_is_a_permutation_that_stays_near_the_stream():
    stream = np.arange(5000)
    out = buffer_order(stream, 100, seed=3)
    assert sorted(out.tolist()) == stream.tolist()
    assert not np.array_equal(out, stream)
    # a sample leaves the buffer at most a few buffer lengths after it entered, mostly
    assert np.median(np.abs(out - np.arange(5000))) < 200
    assert np.array_equal(buffer_order(stream, 100, seed=3), out)


def test_compare_orders_the_modes_by_how_many_shards_they_touch():
    rows = {r["shuffle"]: r for r in compare([1000] * 32, windows=(1, 8), buffers=(500,))}
    assert rows["exact"]["shards_per_1k"] > rows["block, window 8 shards"]["shards_per_1k"] \
        > rows["block, window 1 shards"]["shards_per_1k"]
    assert rows["block, window 1 shards"]["same_shard"] > rows["block, window 8 shards"]["same_shard"] \
        > rows["exact"]["same_shard"]


@pytest.mark.parametrize("fmt,options", [("mds", {"size_limit": 2000}), ("jinx", {"shard_size": 3000}),
                                         ("webdataset", {"max_count": 7})])
def test_block_shuffle_of_an_opened_dataset_reads_shard_by_shard(tmp_path, fmt, options):
    path = tmp_path / fmt
    with hpcio.open_writer(path, format=fmt, **options) as w:
        for i in range(40):
            w.write({"id": i, "text": "x" * 100})
    ds = hpcio.open(path)
    sizes = ds.reader.shard_sizes()
    assert sum(sizes) == 40 and len(sizes) > 1
    block = ds.shuffle(3, mode="block", window=1)
    ids = [s["id"] for s in block]
    assert sorted(ids) == list(range(40))
    shard_of = np.repeat(np.arange(len(sizes)), sizes)
    runs = 1 + int((np.diff(shard_of[ids]) != 0).sum())
    assert runs == len(sizes)  # each shard read whole before the next
    assert [s["id"] for s in ds.shuffle(3, mode="block", window=1)] == ids
    with pytest.raises(ValueError, match="shuffle mode must be 'global' or 'block', got 'window'"):
        ds.shuffle(3, mode="window")
