"""The node cache's limit holds over every dataset read through one directory: a mixture
of sources shares one budget, evicts across them, and hands each source its future."""

from __future__ import annotations

import os

import numpy as np

import hpcio
from hpcio.nodecache.budget import Budget
from hpcio.nodecache.policy import NEVER, victims


def write_mds(path, n, offset, per_shard=16, blob=1000):
    with hpcio.open_writer(path, format="mds", size_limit=per_shard * (blob + 100)) as w:
        for i in range(n):
            w.write({"id": offset + i, "blob": (offset + i).to_bytes(4, "little") * (blob // 4)})
    return str(path)


def dataset_bytes(path):
    return sum(f.size for shard in hpcio.open(path).reader.files_of_shards() for f in shard)


def sources(tmp_path, cache=None):
    paths = {"a": write_mds(tmp_path / "a", 1024, 0), "b": write_mds(tmp_path / "b", 512, 10_000)} \
        if not (tmp_path / "a").exists() else {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
    return {name: hpcio.open(p, cache=cache) for name, p in paths.items()}, paths


def test_a_mixture_through_one_cache_stays_under_one_limit(tmp_path):
    direct, paths = sources(tmp_path)
    limit = sum(dataset_bytes(p) for p in paths.values()) // 4
    cache = hpcio.NodeCache(tmp_path / "cache", limit=limit, prefetch=0)
    cached, _ = sources(tmp_path, cache)
    mixed = hpcio.mix(cached, {"a": 2, "b": 1}, seed=4)
    expected = hpcio.mix(direct, {"a": 2, "b": 1}, seed=4)
    got, peak = [], 0
    for epoch in range(2):
        for lo in range(0, len(mixed), 64):
            got += [s["id"] for s in mixed.epoch(epoch)[lo:lo + 64]]
            peak = max(peak, cache.stats()["resident_bytes"])
    want = [s["id"] for e in range(2) for s in expected.epoch(e)]
    assert got == want
    stats = cache.stats()
    assert peak <= limit  # one limit for both sources, not one each
    assert stats["over_limit"] == 0 and stats["evictions"] > 0
    for ds in cached.values():  # each source evicted some of its own shards
        assert int(ds.reader.consumer.store.header[4]) > 0


def test_datasets_opened_apart_share_the_directory_limit(tmp_path):
    _direct, paths = sources(tmp_path)
    limit = dataset_bytes(paths["a"]) // 2
    cache = hpcio.NodeCache(tmp_path / "cache", limit=limit, prefetch=0)
    a = hpcio.open(paths["a"], cache=cache)
    a.get_batch(list(range(0, len(a), 16))[: len(a) // 32])  # about half of a's shards
    filled = cache.stats()["resident_bytes"]
    b = hpcio.open(paths["b"], cache=cache)
    assert [s["id"] for s in b] == list(range(10_000, 10_512))
    stats = cache.stats()
    assert stats["resident_bytes"] <= limit and stats["over_limit"] == 0
    assert a.reader.consumer.store.resident_bytes() < filled  # b made room in a


def test_the_limit_counts_datasets_this_process_has_not_opened(tmp_path):
    """Another process's dataset under the directory counts against the limit, read from
    its table's header: a process cannot evict it, so it reads over the limit and says so."""
    _direct, paths = sources(tmp_path)
    limit = dataset_bytes(paths["a"]) // 2
    first = hpcio.NodeCache(tmp_path / "cache", limit=limit, prefetch=0)
    a = hpcio.open(paths["a"], cache=first)
    a.get_batch(list(range(0, len(a), 16)))  # every shard of a, read a part at a time
    held = first.stats()["resident_bytes"]
    assert 0 < held <= limit
    second = hpcio.NodeCache(tmp_path / "cache", limit=limit, prefetch=0)
    budget = Budget(second.directory, limit, lambda: [])
    assert budget.used() == held
    b = hpcio.open(paths["b"], cache=second)
    b.get_batch([0])
    assert second.stats()["over_limit"] == 1


def test_belady_takes_shards_no_one_reads_first_then_its_own_furthest():
    next_use = np.array([5, NEVER, 900, 40, NEVER], np.int64)
    last_use = np.array([1, 7, 3, 4, 2], np.int64)
    sizes = np.full(5, 10, np.int64)
    other = np.array([False, False, True, False, True])
    # never read again first (oldest use first), then this dataset's furthest next use;
    # another dataset's next use is on another stream's scale and goes last
    assert victims("belady", next_use, last_use, sizes, 50, other).tolist() == [4, 1, 3, 0, 2]
    assert victims("belady", next_use, last_use, sizes, 15, other).tolist() == [4, 1]
    assert victims("lru", next_use, last_use, sizes, 30, other).tolist() == [0, 4, 2]
    assert victims("lru", next_use, last_use, sizes, 0, other).tolist() == []


def test_the_mixture_hands_each_source_its_part_of_the_pass(tmp_path):
    direct, _paths = sources(tmp_path)
    announced = {}
    for name, ds in direct.items():
        ds.reader.will_read = lambda idx, name=name: announced.setdefault(name, []).append(np.asarray(idx))
    mixed = hpcio.mix(direct, {"a": 2, "b": 1}, seed=4)
    mixed.reader.will_read(np.arange(96))
    names, index = mixed.reader.locate(np.arange(96))
    for name in ("a", "b"):
        want = index[np.array(names) == name]
        assert np.concatenate(announced[name]).tolist() == want.tolist()
    assert os.path.isdir(tmp_path / "a")


def test_the_adapter_reads_a_cached_mixture_as_an_uncached_one(tmp_path):
    import hpcio.torch as ht

    direct, paths = sources(tmp_path)
    cache = hpcio.NodeCache(tmp_path / "cache", limit=sum(dataset_bytes(p) for p in paths.values()) // 4)
    cached, _ = sources(tmp_path, cache)
    runs = []
    for parts in (direct, cached):
        it = ht.IterableDataset(hpcio.mix(parts, {"a": 2, "b": 1}, seed=4), batch_size=16)
        ids = []
        for epoch in range(2):
            it.set_epoch(epoch)
            for batch in ht.DataLoader(it):
                ids.extend(batch["id"].tolist())
        runs.append(ids)
    assert runs[0] == runs[1] and len(runs[0]) == 2 * 1536
    cache.wait()
    assert cache.stats()["resident_bytes"] <= cache.limit


def test_a_finished_pass_pins_no_shard(tmp_path):
    """After a pass ends, the shard its last run read is free to evict: a read outside
    any pass then stays under the limit (it pinned that shard, and went over)."""
    path = write_mds(tmp_path / "a", 256, 0)
    sizes = [f.size for shard in hpcio.open(path).reader.files_of_shards() for f in shard]
    cache = hpcio.NodeCache(tmp_path / "cache", limit=int(max(sizes) * 1.5), prefetch=0)
    ds = hpcio.open(path, cache=cache)
    assert [s["id"] for s in ds.shuffle(1)] == [s["id"] for s in hpcio.open(path).shuffle(1)]
    for i in (0, 100, 255, 17):
        assert ds[i]["id"] == i
    stats = cache.stats()
    assert stats["over_limit"] == 0 and stats["resident_bytes"] <= cache.limit


def test_the_environment_s_cache_reads_what_it_can_and_says_what_it_cannot(tmp_path, monkeypatch):
    """$HPCIO_NODE_CACHE turns a cache on for a script that does not name one: a dataset
    that cache cannot read (Parquet written by pyarrow) is read in place, with a warning."""
    import warnings

    import pyarrow as pa
    import pyarrow.parquet as pq

    mds = write_mds(tmp_path / "a", 64, 0)
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"id": list(range(10))}), tmp_path / "pq" / "part-0.parquet")
    monkeypatch.setenv("HPCIO_NODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HPCIO_NODE_CACHE_LIMIT", "1MB")
    with hpcio.open(mds) as through:
        assert through.reader.consumer is not None and through[3]["id"] == 3  # through the cache
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = hpcio.open(tmp_path / "pq")
    assert [s["id"] for s in ds] == list(range(10))
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and said[0].startswith(
        f"not reading {tmp_path / 'pq'} through the node cache $HPCIO_NODE_CACHE names: "), said
