"""hpcio.NodeCache: reads through a bounded node-local shard cache."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

import hpcio
import hpcio.torch as ht
from hpcio.dataset import batches_read_ahead
from hpcio.errors import CapabilityError, InvalidArgumentError, ShardChangedError
from hpcio.nodecache import simulate
from hpcio.units import ByteSizeError

fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="this machine has no /dev/fuse")


def write_mds(path, n=2048, per_shard=16, blob=1000):
    with hpcio.open_writer(path, format="mds", size_limit=per_shard * (blob + 100)) as w:
        for i in range(n):
            w.write({"id": i, "blob": i.to_bytes(4, "little") * (blob // 4)})
    return str(path)


def shard_bytes(path):
    reader = hpcio.open(path).reader
    return np.array([os.path.getsize(f.path) for shard in reader.files_of_shards() for f in shard])


@pytest.fixture
def mds(tmp_path):
    return write_mds(tmp_path / "remote")


def test_reads_through_the_cache_match_direct_reads(mds, tmp_path):
    direct = hpcio.open(mds)
    cache = hpcio.NodeCache(tmp_path / "cache", limit=int(shard_bytes(mds).sum() // 4))
    ds = hpcio.open(mds, cache=cache)
    assert [s["blob"] for s in ds.shuffle(5)] == [s["blob"] for s in direct.shuffle(5)]
    assert ds.get_batch([3, 2000, 7]) == direct.get_batch([3, 2000, 7])
    wide = np.arange(0, 2048, 7)  # a batch touching every shard: read a part at a time
    assert ds.get_batch(wide) == direct.get_batch(wide)
    stats = cache.stats()
    assert stats["resident_bytes"] <= stats["limit"]
    assert stats["evictions"] > 0 and stats["over_limit"] == 0
    mirror = os.path.join(cache.root_of(mds), "data")
    links = [n for n in os.listdir(mirror) if os.path.islink(os.path.join(mirror, n))]
    local = [n for n in os.listdir(mirror) if n.endswith(".mds") and not os.path.islink(os.path.join(mirror, n))]
    assert len(local) == stats["resident_shards"] and len(links) == len(shard_bytes(mds)) - len(local)


def test_global_shuffle_epochs_fetch_no_more_than_belady(mds, tmp_path):
    """Two global-shuffle epochs through the adapter under a limit of 1/4: the demand
    cache fetches at most what Belady's rule does on the same order (simulated), and
    fewer bytes than LRU in the same run."""
    sizes = shard_bytes(mds)
    limit = int(sizes.sum() // 4)
    fetched = {}
    for policy in ("belady", "lru"):
        cache = hpcio.NodeCache(tmp_path / policy, limit=limit, policy=policy, prefetch=0)
        it = ht.IterableDataset(hpcio.open(mds, cache=cache), batch_size=16, seed=3)
        ids = []
        for epoch in range(2):
            it.set_epoch(epoch)
            for batch in ht.DataLoader(it):
                ids.extend(batch["id"].tolist())
        assert sorted(ids) == sorted(list(range(2048)) * 2)
        fetched[policy] = cache.stats()["fetched_bytes"]
    direct = hpcio.open(mds)
    cum = np.concatenate([[0], np.cumsum(direct.reader.shard_sizes())])
    order = np.concatenate([np.asarray(ht.IterableDataset(direct, batch_size=16, seed=3, epoch=e)._indices(
        ht.infer_context(), 0, 1)[:]) for e in range(2)])
    uses = np.searchsorted(cum, order, side="right") - 1
    assert fetched["belady"] <= simulate(uses, sizes, limit, "belady", batch=16)
    assert fetched["belady"] < fetched["lru"]
    assert fetched["belady"] > sizes.sum()  # a quarter of the dataset cannot hold an epoch


def test_wait_returns_once_the_fetches_ahead_have_ended(mds, tmp_path):
    """After ``wait`` no shard is in flight and the fetched bytes are those of the
    resident shards: a fetch ahead is counted once it ends, and wait lets it end."""
    from hpcio.nodecache.store import FETCHING

    cache = hpcio.NodeCache(tmp_path / "cache", prefetch=4)
    ds = hpcio.open(mds, cache=cache)
    ds.will_read(np.arange(2048))
    ds.get_batch(list(range(16)))  # reads shard 0 and starts fetching the next ones
    cache.wait()
    store = ds.reader.consumer.store
    assert not (store.state == FETCHING).any()
    stats = cache.stats()
    assert stats["prefetched"] >= 1
    assert stats["fetched_bytes"] == stats["resident_bytes"] == shard_bytes(mds)[:stats["resident_shards"]].sum()


def test_simulate_counts_what_each_policy_fetches():
    uses, sizes = [0, 1, 2, 0, 1, 3, 0], np.ones(4, np.int64)
    assert simulate(uses, sizes, 2, "belady") == 5
    assert simulate(uses, sizes, 2, "lru") == 7
    assert simulate([0, 0, 0, 1], [10, 3], 5) == 33  # a shard above the limit is fetched each time
    assert simulate([0, 1, 2, 3, 0, 1], sizes, 2, "belady", batch=2) == 6  # a batch's shards stay together


def test_jinx_reads_through_the_cache(tmp_path):
    path = tmp_path / "jinx"
    with hpcio.open_writer(path, format="jinx", shard_size=1 << 14) as w:
        for i in range(600):
            w.write({"id": i, "text": f"sample {i} " * 20})
    direct = hpcio.open(path)
    assert len(direct.reader.shards) > 4
    cache = hpcio.NodeCache(tmp_path / "cache", limit=3 << 14)
    ds = hpcio.open(path, cache=cache)
    assert [dict(s) for s in ds.shuffle(2)] == [dict(s) for s in direct.shuffle(2)]
    assert cache.stats()["evictions"] > 0


def test_formats_that_cannot_list_shard_files_are_refused(tmp_path):
    path = tmp_path / "data.jsonl"
    with hpcio.open_writer(path, format="jsonl") as w:
        w.write({"txt": "x"})
    with pytest.raises(CapabilityError) as err:
        hpcio.open(path, cache=hpcio.NodeCache(tmp_path / "cache", limit="1MB"))
    assert str(err.value) == ("the jsonl reader cannot list its shards' files, so it cannot read "
                              f"through a node cache (mds, jinx, webdataset, msgpack, hdf5, zarr and parquet can) ({os.path.realpath(path)})")


def test_options_are_checked_before_any_work(tmp_path):
    with pytest.raises(InvalidArgumentError) as err:
        hpcio.NodeCache(tmp_path, limit="1GB", policy="fifo")
    assert str(err.value) == "cache policy must be one of belady, lru, got 'fifo'"
    with pytest.raises(ByteSizeError) as err:
        hpcio.NodeCache(tmp_path, limit="lots")
    assert str(err.value).startswith("NodeCache limit: not a byte size: 'lots'")
    assert not os.listdir(tmp_path)


def test_a_dataset_changed_under_the_cache_is_refused(mds, tmp_path):
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    hpcio.open(mds, cache=cache)[0]
    index = os.path.join(mds, "index.json")
    os.utime(index, ns=(0, 0))
    with pytest.raises(ShardChangedError) as err:
        hpcio.open(mds, cache=cache)
    assert str(err.value) == (f"the dataset changed since the node cache in {cache.root_of(mds)} mirrored it "
                              f"(index.json differs); clear that directory (NodeCache.clear) to read the new "
                              f"version ({os.path.realpath(index)})")


def _read_part(path, cache_dir, seed, out):
    cache = hpcio.NodeCache(cache_dir, limit="1GB")
    ds = hpcio.open(path, cache=cache)
    view = ds.shuffle(seed)
    got = []
    for batch in batches_read_ahead(view.indices, 16, ds):
        got.extend(s["id"] for s in ds.get_batch(batch))
    out.put((seed, got))


@fuse
def test_processes_of_a_node_fetch_each_shard_once(tmp_path):
    """Four processes (two ranks of two workers) read overlapping orders at once: each
    shard crosses the emulated tier once, counted by the tier itself."""
    from hpcio.bench.tier import EmulatedTier

    write_mds(tmp_path / "src" / "remote", n=1024)
    with EmulatedTier(tmp_path / "src", latency_us=500) as tier:
        remote = tier.path("remote")
        cache = hpcio.NodeCache(tmp_path / "cache", limit="1GB")
        hpcio.open(remote, cache=cache).close()  # the mirror: index.json read once
        before = tier.stats()["bytes"]
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        procs = [ctx.Process(target=_read_part, args=(remote, tmp_path / "cache", seed, out)) for seed in range(4)]
        for p in procs:
            p.start()
        results = dict(out.get(timeout=240) for _ in procs)
        for p in procs:
            p.join(60)
        assert all(sorted(ids) == list(range(1024)) for ids in results.values())
        sizes = shard_bytes(remote)
        hpcio.open(remote, cache=cache)
        stats = cache.stats()
        assert stats["fetches"] == len(sizes) and stats["fetched_bytes"] == sizes.sum()
        # the tier serves whole pages: each shard's, once
        assert tier.stats()["bytes"] - before == int((-(-sizes // 4096) * 4096).sum())


def _fetch_one(path, cache_dir):
    ds = hpcio.open(path, cache=hpcio.NodeCache(cache_dir, limit="1GB", prefetch=0))
    ds[0]


@fuse
def test_a_fetcher_killed_mid_copy_leaves_no_file_another_reads(tmp_path):
    from hpcio.bench.tier import EmulatedTier

    write_mds(tmp_path / "src" / "remote", n=256, per_shard=256, blob=16000)  # shards of ~4 MB
    with EmulatedTier(tmp_path / "src", latency_us=1000, bandwidth=2e6) as tier:
        remote = tier.path("remote")
        cache = hpcio.NodeCache(tmp_path / "cache", limit="1GB", prefetch=0)
        hpcio.open(remote, cache=cache).close()
        mirror = os.path.join(cache.root_of(remote), "data")
        first = sorted(n for n in os.listdir(mirror) if n.endswith(".mds"))[0]
        proc = multiprocessing.get_context("fork").Process(target=_fetch_one, args=(remote, tmp_path / "cache"))
        proc.start()
        deadline = time.monotonic() + 60
        while not any(".fetch-" in n for n in os.listdir(mirror)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(".fetch-" in n for n in os.listdir(mirror))
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        assert os.path.islink(os.path.join(mirror, first))  # the torn copy was never published
        ds = hpcio.open(remote, cache=cache)
        assert ds[0] == hpcio.open(remote)[0]
        assert not any(".fetch-" in n for n in os.listdir(mirror))
        assert not os.path.islink(os.path.join(mirror, first))


def _train(ds, epochs=2):
    """A training loop as a user writes it: what it sees must not depend on the cache."""
    it = ht.IterableDataset(ds, batch_size=8, seed=11)
    seen = []
    for epoch in range(epochs):
        it.set_epoch(epoch)
        for batch in ht.DataLoader(it, num_workers=2):
            seen.append((batch["id"].tolist(), [bytes(b[:8]) for b in batch["blob"]]))
    return seen


def test_the_same_training_loop_runs_with_and_without_the_cache(tmp_path):
    path = write_mds(tmp_path / "remote", n=512)
    cache = hpcio.NodeCache(tmp_path / "cache", limit=int(shard_bytes(path).sum() // 3))
    assert _train(hpcio.open(path, cache=cache)) == _train(hpcio.open(path))
    assert cache.stats()["resident_bytes"] <= cache.limit


def test_simulate_takes_the_reads_the_cache_makes():
    from hpcio.nodecache.policy import read_groups, read_starts

    uses, sizes = np.array([0, 1, 2, 3, 0, 1, 4, 5, 0]), np.ones(6, np.int64)
    assert simulate(uses, sizes, 3, batch=3) == simulate(uses, sizes, 3, groups=np.arange(9) // 3)
    assert read_starts(np.array([0, 1, 0, 2, 3, 1]), 2) == [0, 3, 5]  # a third shard begins a part
    assert read_groups(uses, 4, 2).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    # read in parts of 2 shards under a limit of 2, every part evicts the one before it
    assert simulate(uses, sizes, 2, groups=read_groups(uses, 4, 2)) == 9
