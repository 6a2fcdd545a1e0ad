"""The cold-cache tools and the emulated remote tier the benchmarks read through."""

from __future__ import annotations

import os

import numpy as np
import pytest

import hpcio
from hpcio import demo
from hpcio.bench import pagecache
from hpcio.bench.limits import dataset_files
from hpcio.bench.tier import EmulatedTier
from hpcio.distributed import GlobalOrder
from hpcio.errors import TierEmulatorError

fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="this machine has no /dev/fuse")


@pytest.fixture
def text_mds(tmp_path):
    root = tmp_path / "src"
    with hpcio.open_writer(root / "mds", format="mds", size_limit=1 << 16) as w:
        for sample in demo.generate("text", 400, seed=3):
            w.write(sample)
    return root


def test_evict_drops_every_page_and_resident_counts_them(text_mds):
    files = dataset_files(text_mds)
    assert len(files) > 3  # index.json and several shards
    for p in files:
        with open(p, "rb") as f:
            f.read()
    total = sum(os.path.getsize(p) for p in files)
    assert pagecache.resident(files) == (total, total)
    pagecache.evict(files)
    assert pagecache.resident(files) == (0, total)
    assert pagecache.resident(files).fraction == 0.0


def test_tmpfs_pages_cannot_be_evicted():
    """/dev/shm is memory: a cold figure cannot be taken there, and resident() shows it."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    path = os.path.join("/dev/shm", f"hpcio-test-{os.getpid()}")
    try:
        with open(path, "wb") as f:
            f.write(b"x" * (1 << 20))
        pagecache.evict([path])
        assert pagecache.resident([path]).fraction == 1.0
    finally:
        os.unlink(path)


def test_the_tier_source_is_cached_where_it_fits(text_mds):
    """The emulated tier's servers are another machine: its source files are read into
    this one's page cache before a run, so that only the tier's latency and cap are
    charged, not this disk as well."""
    from hpcio.bench.tier import cache_source

    files = dataset_files(text_mds)
    pagecache.evict(files)
    assert pagecache.resident(files).fraction == 0.0
    assert cache_source(files) == 1.0
    assert pagecache.resident(files).fraction == 1.0


@fuse
def test_reads_through_the_tier_are_byte_exact_and_counted(text_mds):
    local = hpcio.open(text_mds / "mds")
    expected = [dict(local[i]) for i in range(len(local))]
    files = dataset_files(text_mds)
    total = sum(os.path.getsize(p) for p in files)
    with EmulatedTier(text_mds, latency_us=100, bandwidth=0, threads=8) as tier:
        tier_files = dataset_files(tier.path("mds"))
        pagecache.evict(tier_files)
        assert tier.stats() == {"requests": 0, "bytes": 0}
        ds = hpcio.open(tier.path("mds"))
        assert [dict(ds[i]) for i in range(len(ds))] == expected
        first = tier.stats()
        assert first["requests"] > 0 and first["bytes"] >= total - os.path.getsize(text_mds / "mds" / "index.json")
        # A second pass is served by the client page cache, as on a real tier...
        assert [dict(s) for s in ds] == expected
        assert tier.stats() == first
        # ...until the pages are evicted.
        ds.close()
        pagecache.evict(tier_files)
        assert pagecache.resident(tier_files).fraction == 0.0
        assert [dict(s) for s in hpcio.open(tier.path("mds"))] == expected
        assert tier.stats()["bytes"] >= 2 * first["bytes"]
    assert tier.mountpoint is None


@fuse
def test_without_a_client_cache_every_open_reads_the_file_again(tmp_path):
    """client_cache=False: a file copied three times is served by the tier three times (a
    node cache's or a peer's fetch of a shard it evicted meanwhile), and counted by
    tier_stats from its mount point alone."""
    from hpcio.bench.tier import tier_stats

    (tmp_path / "src").mkdir()
    data = np.random.default_rng(0).bytes(3 << 20)
    (tmp_path / "src" / "a.bin").write_bytes(data)
    counted = {}
    for client_cache in (True, False):
        with EmulatedTier(tmp_path / "src", latency_us=100, client_cache=client_cache) as tier:
            pagecache.evict([tier.path("a.bin")])
            for _ in range(3):
                with open(tier.path("a.bin"), "rb") as f:
                    assert f.read() == data
            counted[client_cache] = tier_stats(tier.path())["bytes"]
            assert counted[client_cache] == tier.stats()["bytes"]
    assert len(data) <= counted[True] <= len(data) + 4096  # once, whole pages
    assert 3 * len(data) <= counted[False] <= 3 * (len(data) + 4096)


def test_read_ahead_brings_an_evicted_range_into_the_page_cache(tmp_path):
    """ReadAhead reads what is not cached, skips what is, and stops quietly at the end of
    the file (the reader's own read reports a short file)."""
    from hpcio._core import _io

    path = tmp_path / "f"
    data = os.urandom((5 << 20) + 123)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        assert not _io.kernel_reads_ahead_alone(fd)
        pagecache.evict([path])
        assert pagecache.resident([path]).fraction == 0.0
        # pieces the kernel's own read-ahead cached first are skipped, not counted
        assert 0 < _io.ReadAhead(fd, 0, len(data), 4).close(wait=True) <= len(data)
        assert pagecache.resident([path]).fraction == 1.0
        assert _io.ReadAhead(fd, 0, len(data), 4).close(wait=True) == 0
        pagecache.evict([path])
        got = _io.ReadAhead(fd, 1 << 20, 10 << 20, 2).close(wait=True)
        assert 0 < got <= len(data) - (1 << 20)
        assert pagecache.resident([path]).fraction > 0.75
    finally:
        os.close(fd)


@pytest.mark.parametrize(("zero_copy", "read_path"), [(False, "auto"), (True, "auto"), (True, "map")])
def test_batches_from_cold_shards_ask_for_their_records_first(tmp_path, monkeypatch, zero_copy, read_path):
    """A batch of shards not cached when opened is read as planned requests, zero-copy
    views included (they view the batch's buffer); read through the mapping
    (``read_path="map"``), it asks the kernel for exactly its records first (a major
    fault would read the whole read-around window per record).  Shards opened cached
    are read through the mapping and ask nothing."""
    from hpcio._core import _io

    rng = np.random.default_rng(0)
    samples = [{"id": i, "blob": rng.bytes(30_000)} for i in range(60)]
    with hpcio.open_writer(tmp_path / "d", format="mds", size_limit=1 << 20) as w:
        for s in samples:
            w.write(s)
    asked, real = [], _io.will_need
    monkeypatch.setattr(_io, "will_need", lambda fd, a, b: asked.extend(zip(a.tolist(), b.tolist())) or real(fd, a, b))
    order = np.random.default_rng(1).permutation(len(samples))[:20]
    with hpcio.open(tmp_path / "d", zero_copy=zero_copy, read_path=read_path) as ds:  # just written: cached
        assert [bytes(s["blob"]) for s in ds.get_batch(order)] == [samples[i]["blob"] for i in order]
    assert asked == []
    files = dataset_files(tmp_path / "d")
    for p in files:
        with open(p, "rb+") as f:
            os.fsync(f.fileno())
    pagecache.evict(files)
    assert pagecache.resident(files).fraction == 0.0
    with hpcio.open(tmp_path / "d", zero_copy=zero_copy, read_path=read_path) as ds:
        batch = ds.get_batch(order)
        assert [bytes(s["blob"]) for s in batch] == [samples[i]["blob"] for i in order]
        assert all(isinstance(s["blob"], memoryview if zero_copy else bytes) for s in batch)
        asked_by_batch = list(asked)
        reader = ds.reader
        extents = set()
        for i in order.tolist():
            k = int(np.searchsorted(reader._cum_list, i, side="right")) - 1
            _sh, _l, lo, hi = reader.cache.extents(k, np.array([i - reader._cum_list[k]]))
            extents.add((int(lo[0]), int(hi[0])))
    if read_path == "map":  # read through the mapping: every record asked for, nothing else
        assert set(asked_by_batch) == extents
    else:  # read as planned requests from the file, not through the mapping
        assert asked_by_batch == []


@pytest.mark.parametrize("cached", [True, False])
def test_zero_copy_batches_over_many_shards_are_views(tmp_path, cached):
    """A zero-copy batch spread over many small shards, cached or not, is read in one
    call and its bytes values are memoryviews (of the batch's buffer), equal to the
    copying reader's values."""
    rng = np.random.default_rng(0)
    blobs = [rng.bytes(30_000) for _ in range(60)]
    with hpcio.open_writer(tmp_path / "d", format="mds", size_limit=64 << 10) as w:
        for i, blob in enumerate(blobs):
            w.write({"id": i, "blob": blob})
    files = dataset_files(tmp_path / "d")
    if not cached:
        pagecache.evict(files)
    order = np.random.default_rng(1).permutation(len(blobs))[:20]
    with hpcio.open(tmp_path / "d", zero_copy=True) as ds:
        assert len(ds.reader.shards) > 20
        batch = ds.get_batch(order)
        assert all(isinstance(s["blob"], memoryview) for s in batch)
        assert [bytes(s["blob"]) for s in batch] == [blobs[i] for i in order]


def test_read_ahead_extents_reads_each_merged_range_once(tmp_path):
    """Scattered extents are sorted, neighbours within the gap merged, each byte read once;
    a file index beyond the descriptors given is refused before anything is read."""
    from hpcio._core import _io

    path = tmp_path / "f"
    path.write_bytes(os.urandom(6 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        pagecache.evict([path])
        # [0, 100) and [1000, 5096) merge (gap 900); file 1's two extents overlap
        ra = _io.read_ahead_extents([fd, fd], [1, 0, 0, 1], [3 << 20, 1000, 0, 3 << 20], [(4 << 20) + 7, 5096, 100, 3 << 20 | 10],
                                    depth=3, max_gap=1000)
        assert ra.close(wait=True) == 5096 + (1 << 20) + 7
        assert _io.read_ahead_extents([], [], [], []).close(wait=True) == 0
        with pytest.raises(hpcio.HpcioError, match=r"^extent 0 names file 1 of 1"):
            _io.read_ahead_extents([fd], [1], [0], [10])
    finally:
        os.close(fd)


def _written_blobs(path, count=60, size=30_000):
    rng = np.random.default_rng(0)
    blobs = [rng.bytes(size) for _ in range(count)]
    with hpcio.open_writer(path, format="mds", size_limit=1 << 20) as w:
        for i, blob in enumerate(blobs):
            w.write({"id": i, "blob": blob})
    return blobs


def _batch_prefetches_only(monkeypatch) -> None:
    """No read of an announced pass ahead of it, whatever the memory available."""
    from hpcio.formats.mds import prefetch

    monkeypatch.setattr(prefetch, "_PASS_READ_FRACTION", 0)


def test_an_announced_pass_of_small_records_reads_its_cold_shards_in_storage_order(tmp_path, monkeypatch):
    """``will_read`` of a pass whose cold shards fit in half the memory available reads
    their records (under 64 KiB) ahead, merged into whole shards in storage order; the
    batches then prefetch nothing more, and once it ends its shards are read as cached.
    Cached shards, or shards that do not fit, leave the batches' own prefetches."""
    from hpcio.formats.mds import prefetch

    blobs = _written_blobs(tmp_path / "d", count=200)
    files = [f for f in dataset_files(tmp_path / "d") if f.endswith(".mds")]
    assert len(files) > 3
    order = np.random.default_rng(3).permutation(len(blobs))
    pagecache.evict(files)
    with hpcio.open(tmp_path / "d", read_ahead=2) as ds:
        ds.will_read(order)
        whole = ds.reader.prefetcher.pass_read
        assert whole.close(wait=True) >= sum(os.path.getsize(f) for f in files) - 4096 * len(files)
        assert pagecache.resident(files).fraction == 1.0
        # once it has ended, the next prefetch reads the shards as cached ones
        ds.prefetch(order[10:20])
        assert not ds.reader.prefetcher.prefetches and ds.reader.prefetcher.pass_read is None
        assert not any(sh.cold for sh in ds.reader.cache.maps.values()) and ds.reader.cache.maps
        assert [s["blob"] for s in ds.get_batch(order)] == [blobs[i] for i in order]
    with hpcio.open(tmp_path / "d", read_ahead=2) as ds:  # cached now: nothing to read
        ds.will_read(order)
        assert ds.reader.prefetcher.pass_read is None
    monkeypatch.setattr(prefetch, "available_bytes", lambda: 2 * sum(os.path.getsize(f) for f in files) - 1)
    pagecache.evict(files)
    with hpcio.open(tmp_path / "d", read_ahead=2) as ds:
        ds.will_read(order)
        assert ds.reader.prefetcher.pass_read is None
        # too large to read ahead, but its shards' offset tables were read all at once
        assert not ds.reader.cache.maps and all(pagecache.resident_range(f, 0, 4096) for f in files)
        ds.prefetch(order[:10])
        assert len(ds.reader.prefetcher.prefetches) == 1
        assert 10 * 30_000 <= ds.reader.prefetcher.prefetches[0].close(wait=True) < 20 * 30_000


def test_an_announced_pass_reads_only_the_records_it_names(tmp_path):
    """A rank's share of a pass reads its own records ahead, not the whole shards."""
    blobs = _written_blobs(tmp_path / "d", count=200, size=100_000)
    files = [f for f in dataset_files(tmp_path / "d") if f.endswith(".mds")]
    share = np.random.default_rng(4).permutation(len(blobs))[::4]
    pagecache.evict(files)
    with hpcio.open(tmp_path / "d", read_ahead=2) as ds:
        ds.will_read(share)
        got = ds.reader.prefetcher.pass_read.close(wait=True)
        assert len(share) * 100_000 <= got < len(share) * 100_000 + len(share) * 4096 * 2
        assert [s["blob"] for s in ds.get_batch(share)] == [blobs[i] for i in share]


@fuse
@pytest.mark.skipif(os.geteuid() != 0, reason="the mount's read-ahead window is set through /sys, as root")
def test_an_announced_pass_of_large_records_reads_them_in_its_order(tmp_path):
    """Records of 64 KiB or more are read one request each in the order the pass needs
    them: stopped while its first read is in flight (behind 300 ms per 1 MiB request, one
    at a time), the pass has read its first record and none of its last ones."""
    import time

    blobs = _written_blobs(tmp_path / "src" / "d", count=12, size=1_200_000)
    order = np.random.default_rng(5).permutation(len(blobs))
    with EmulatedTier(tmp_path / "src", latency_us=300_000, bandwidth=0, threads=8, read_ahead_kb=1024) as tier:
        files = [f for f in dataset_files(tier.path("d")) if f.endswith(".mds")]
        pagecache.evict(files)
        with hpcio.open(tier.path("d"), read_ahead=1) as ds:
            reader = ds.reader
            ds.will_read(order)
            time.sleep(0.1)
            reader.prefetcher.stop_pass_read()  # the read in flight completes, the rest is skipped

            def cached(i):
                k = int(np.searchsorted(reader._cum, i, side="right")) - 1
                sh = reader.cache.get(k)
                _lidx, lo, hi = sh.extents([i - reader._cum_list[k]])
                return pagecache.resident_range(sh.path, int(lo[0]), int(hi[0] - lo[0]))

            first = int(order[0])
            assert cached(first) > 1 << 20
            # of the others, only what the read of their shard's head brought in (16 KiB)
            assert max(cached(int(i)) for i in order[1:]) <= 16 << 10


@pytest.mark.parametrize("fits", [True, False])
def test_the_map_style_loader_reads_its_epoch_ahead(tmp_path, monkeypatch, fits):
    """hpcio.torch.DataLoader over a MapDataset reads ahead from its batch sampler, in the
    main process, whose page cache the workers read from: the announced epoch when it
    fits in memory; else each next batch as one is handed out, so with the first batch
    delivered the second one's records (16 of 30,000 bytes) are being read, and nothing
    more."""
    import hpcio.torch as ht

    if not fits:
        _batch_prefetches_only(monkeypatch)
    blobs = _written_blobs(tmp_path / "d", count=200)
    files = [f for f in dataset_files(tmp_path / "d") if f.endswith(".mds")]
    pagecache.evict(files)
    with hpcio.open(tmp_path / "d", read_ahead=2) as ds:
        source = ht.MapDataset(ds, batch_size=16, shuffle=True, seed=1, context={"rank": 0, "world_size": 1})
        batches = iter(ht.DataLoader(source, collate_fn=list))
        first = next(batches)
        if fits:
            assert ds.reader.prefetcher.pass_read.close(wait=True) > 0
            assert pagecache.resident(files).fraction == 1.0
        else:
            assert ds.reader.prefetcher.pass_read is None and len(ds.reader.prefetcher.prefetches) == 1
            assert 16 * 30_000 <= ds.reader.prefetcher.prefetches[0].close(wait=True) < 16 * (30_000 + 2 * 4096)
        got = [s["blob"] for batch in [first, *batches] for s in batch]
    assert len(got) == len(blobs) and sorted(got) == sorted(blobs)


def test_a_prefetch_keeps_the_bytes_of_read_ahead_reads_of_1_mib_in_flight():
    """Records read one request each get as many requests in flight as ``read_ahead``
    reads of 1 MiB would hold: more for smaller records, never more than 64."""
    from hpcio.formats.mds.prefetch import _MAX_DEPTH, _bytes_depth

    assert _bytes_depth(8, 225_000) == 32
    assert _bytes_depth(8, 2_400) == _bytes_depth(8, 0) == _MAX_DEPTH == 64
    assert _bytes_depth(2, 3 << 20) == 2


def test_available_memory_is_capped_by_the_cgroup_limit(tmp_path):
    """The room under a memory cgroup's limit, counting its page cache as available: a
    child that read 40 MB into the page cache of a 64 MB cgroup still has more than
    half of the limit (it would have about 10 MB if the cache counted as used)."""
    import subprocess
    import sys

    from hpcio._memory import available_bytes
    from hpcio.bench.cold import memory_cgroup

    with open("/proc/meminfo") as f:
        total = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024
    assert 0 < available_bytes() <= total
    try:
        cgroup = memory_cgroup(64 << 20)
        procs = cgroup.__enter__()
    except hpcio.HpcioError as exc:
        pytest.skip(f"no memory cgroup here: {exc}")
    try:
        cached = tmp_path / "cached.bin"
        cached.write_bytes(os.urandom(40 << 20))
        pagecache.evict([str(cached)])
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(1); "
                                  "from hpcio._memory import available_bytes; print(available_bytes()); "
                                  f"f = open({str(cached)!r}, 'rb')\nwhile f.read(1 << 20): pass\n"
                                  "print(available_bytes())"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        with open(procs, "w") as f:
            f.write(str(child.pid))
        out, _ = child.communicate("x")
    finally:
        cgroup.__exit__(None, None, None)
    before, after = (int(v) for v in out.split())
    assert 0 <= after <= before <= 64 << 20
    assert after > 32 << 20


def test_prefetch_reads_a_batch_of_cold_shards_ahead(tmp_path, monkeypatch):
    """``prefetch`` reads the records of shards that were cold when opened into the page
    cache, on threads with read_ahead > 0 and by POSIX_FADV_WILLNEED with 0; shards
    opened cached are left alone, and the batch then reads the same values."""
    from hpcio._core import _io

    _batch_prefetches_only(monkeypatch)
    blobs = _written_blobs(tmp_path / "d")
    order = np.random.default_rng(1).permutation(len(blobs))[:20]
    with hpcio.open(tmp_path / "d", read_ahead=4) as ds:  # just written: cached
        ds.prefetch(order)
        assert not ds.reader.prefetcher.prefetches
    files = dataset_files(tmp_path / "d")
    pagecache.evict(files)
    with hpcio.open(tmp_path / "d", read_ahead=4) as ds:
        ds.prefetch(order)
        (running,) = ds.reader.prefetcher.prefetches
        got = running.close(wait=True)
        assert 20 * 30_000 <= got < pagecache.resident(files)[1]
        assert [s["blob"] for s in ds.get_batch(order)] == [blobs[i] for i in order]
    asked, real = [], _io.will_need
    monkeypatch.setattr(_io, "will_need", lambda fd, a, b: asked.extend((b - a).tolist()) or real(fd, a, b))
    pagecache.evict(files)
    with hpcio.open(tmp_path / "d", read_ahead=0) as ds:
        ds.prefetch(order)
        assert len(asked) == 20 and min(asked) > 30_000
        assert not ds.reader.prefetcher.prefetches


def test_prefetch_leaves_a_missing_shard_to_the_read(tmp_path):
    """A hint raises nothing: the samples of a shard that cannot be opened are reported by
    their read, in their turn."""
    _written_blobs(tmp_path / "d")
    files = dataset_files(tmp_path / "d")
    with hpcio.open(tmp_path / "d", read_ahead=2) as ds:
        last = sorted(f for f in files if f.endswith(".mds"))[-1]
        os.unlink(last)
        ds.prefetch(np.arange(len(ds)))
        assert ds[0]["id"] == 0
        with pytest.raises(hpcio.HpcioError, match=os.path.basename(last)):
            ds[len(ds) - 1]


def test_prefetch_survives_a_fork(tmp_path):
    """A DataLoader worker forked while a prefetch runs has no thread of it to wait for:
    closing the reader there returns at once."""
    _written_blobs(tmp_path / "d")
    files = dataset_files(tmp_path / "d")
    pagecache.evict(files)
    with hpcio.open(tmp_path / "d", read_ahead=2) as ds:
        ds.prefetch(np.arange(60))
        pid = os.fork()
        if pid == 0:
            ds.close()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ds[59]["id"] == 59


def _spy_read_aheads(monkeypatch) -> list:
    from hpcio._core import _io

    started, real = [], _io.ReadAhead

    def spy(fd, offset, length, depth):
        started.append((offset, length, depth))
        return real(fd, offset, length, depth)

    monkeypatch.setattr(_io, "ReadAhead", spy)
    return started


@fuse
def test_storage_order_pass_reads_ahead_where_the_kernel_keeps_one_request(text_mds, monkeypatch):
    """Through FUSE, whose read-ahead keeps one request in flight, a pass reads every shard
    ahead, 8 requests deep, each byte once; on the local disk it leaves read-ahead to the
    kernel unless told a depth."""
    from hpcio._core import _io

    local = hpcio.open(text_mds / "mds")
    expected = [dict(s) for s in local]
    shards = [os.path.getsize(text_mds / "mds" / s.file_basename) for s in local.reader.shards]
    started = _spy_read_aheads(monkeypatch)
    assert local.reader.read_ahead == 0
    assert [dict(s) for s in hpcio.open(text_mds / "mds")] == expected and started == []
    assert [dict(s) for s in hpcio.open(text_mds / "mds", read_ahead=3)] == expected
    assert started == [(0, n, 3) for n in shards]
    started.clear()
    with EmulatedTier(text_mds, latency_us=100, bandwidth=0, threads=8) as tier:
        files = dataset_files(tier.path("mds"))
        pagecache.evict(files)
        fd = os.open(files[-1], os.O_RDONLY)
        assert _io.kernel_reads_ahead_alone(fd)
        os.close(fd)
        with hpcio.open(tier.path("mds")) as ds:
            assert ds.reader.read_ahead == 8
            assert [dict(s) for s in ds] == expected
        assert started == [(0, n, 8) for n in shards]
        total = sum(os.path.getsize(p) for p in files)
        assert tier.stats()["bytes"] <= total + 4096 * len(files)  # whole pages, each once
    with pytest.raises(hpcio.HpcioError, match=r"^read_ahead must be 'auto' or a number of reads from 0 to 64, got 65$"):
        hpcio.open(text_mds / "mds", read_ahead=65)


@fuse
def test_a_shuffled_pass_through_fuse_reads_batches_ahead_each_byte_once(tmp_path, monkeypatch):
    """Iterating a shuffled view through the emulated tier reads each batch ahead of its
    turn (read_ahead "auto" is 8 there) and still makes storage deliver each byte about
    once."""
    _batch_prefetches_only(monkeypatch)
    blobs = _written_blobs(tmp_path / "src" / "d", count=400)
    order = GlobalOrder(len(blobs), seed=2).tolist()
    with EmulatedTier(tmp_path / "src", latency_us=100, bandwidth=0, threads=8) as tier:
        files = dataset_files(tier.path("d"))
        pagecache.evict(files)
        with hpcio.open(tier.path("d")) as ds:
            assert len(order) > 2 * ds.reader.batch_size
            assert [s["blob"] for s in ds.shuffle(2)] == [blobs[i] for i in order]
            assert ds.reader.prefetcher.prefetches
        total = sum(os.path.getsize(p) for p in files)
        assert total <= tier.stats()["bytes"] <= 1.05 * total + 4096 * len(files)


@fuse
def test_writes_pass_through_to_the_source(tmp_path):
    (tmp_path / "src").mkdir()
    with EmulatedTier(tmp_path / "src", latency_us=0) as tier:
        with open(tier.path("new.bin"), "wb") as f:
            f.write(b"abc" * 1000)
        os.rename(tier.path("new.bin"), tier.path("moved.bin"))
    assert (tmp_path / "src" / "moved.bin").read_bytes() == b"abc" * 1000


@fuse
@pytest.mark.skipif(os.geteuid() != 0, reason="the mount's read-ahead window is set through /sys, as root")
def test_the_tier_client_sends_larger_requests_when_asked(tmp_path):
    """FUSE's client sends read-ahead requests of at most 128 KiB; read_ahead_kb=1024 and
    max_background=64 make it send 1 MiB ones, as a Lustre client sends its RPCs."""
    (tmp_path / "src").mkdir()
    data = os.urandom(8 << 20)
    (tmp_path / "src" / "f").write_bytes(data)
    sizes = {}
    for knobs in ({}, {"read_ahead_kb": 1024, "max_background": 64}):
        tier = EmulatedTier(tmp_path / "src", latency_us=100, **knobs)
        try:
            tier.__enter__()  # unmounted again if setting the read-ahead window fails
        except TierEmulatorError as exc:
            if "read-ahead window" not in str(exc):
                raise
            pytest.skip(f"this machine's /sys is not writable: {exc}")
        try:
            pagecache.evict([tier.path("f")])
            with open(tier.path("f"), "rb") as f:
                assert f.read() == data
            stats = tier.stats()
            sizes[bool(knobs)] = stats["bytes"] / stats["requests"]
        finally:
            tier.__exit__(None, None, None)
        assert tier.mountpoint is None
    assert sizes[False] <= 128 << 10
    assert sizes[True] > 512 << 10


def test_bad_options_are_refused_before_mounting(tmp_path):
    with pytest.raises(TierEmulatorError, match=r"^latency_us and bandwidth must be >= 0 and threads >= 1, got -1, 0, 64$"):
        EmulatedTier(tmp_path, latency_us=-1)
    with pytest.raises(TierEmulatorError, match=(
            r"^max_background must be 0 \(FUSE's default\) to 65535 and read_ahead_kb 0 \(the default\) "
            r"to 1024, got 0, 4096$")):
        EmulatedTier(tmp_path, read_ahead_kb=4096)
    with pytest.raises(TierEmulatorError, match=r"the tier's source .*/missing is not a directory$"):
        EmulatedTier(tmp_path / "missing")
    with pytest.raises(TierEmulatorError, match=r"^the emulated tier is not mounted$"):
        EmulatedTier(tmp_path).path("x")


@pytest.fixture(scope="module")
def cold_records(tmp_path_factory):
    from hpcio.bench import cold

    root = tmp_path_factory.mktemp("cold")
    records = cold.run("vlm", 30_000_000, str(root), ops=("iterate", "shuffle"), only=["hpcio mds"],
                       include_interop=False, log=lambda *a: None)
    starved = cold.run("vlm", 30_000_000, str(root), ops=("iterate",), only=["streaming"],
                       memory_limit=16 << 20, include_interop=False, log=lambda *a: None)
    return records, starved


def test_cold_runs_start_evicted_and_count_what_storage_read(cold_records):
    records, _ = cold_records
    assert {(r["system"], r["op"]) for r in records} == {
        ("hpcio mds", "iterate"), ("hpcio mds", "shuffle"),
        ("hpcio mds zero-copy", "iterate"), ("hpcio mds zero-copy", "shuffle")}
    for r in records:
        assert "error" not in r, r
        assert r["resident_before"] == 0.0
        assert r["samples"] == records[0]["samples"] > 100
    plain = {r["op"]: r for r in records if r["system"] == "hpcio mds"}
    # every sample's bytes were read, so storage delivered at least the image bytes
    assert plain["iterate"]["storage_ratio"] >= 0.9
    assert plain["iterate"]["checksum"] == plain["shuffle"]["checksum"]


def test_a_reader_over_its_memory_limit_is_reported_not_fatal(cold_records):
    from hpcio.bench import cold

    _, starved = cold_records
    assert [r["error"] for r in starved] == ["killed by the memory cgroup: needs more memory than the limit"]
    table = cold.markdown({"sequential_bytes_per_s": 1e9, "random_bytes_per_s": 5e8,
                           "random_request_bytes": 131072, "random_best_depth": 16}, cold_records[0] + starved)
    assert "| vlm | streaming mds | iterate | killed by the memory cgroup" in table
    assert table.count("\n| vlm | hpcio mds") == 4


def test_block_and_buffer_shuffles_and_the_dataloader_read_every_sample_against_iterate(tmp_path):
    from hpcio.bench import cold

    records = cold.run("vlm", 10_000_000, str(tmp_path), ops=cold.COLD_OPS[:1] + cold.COLD_OPS[2:],
                       only=["hpcio mds"], include_interop=False, log=lambda *a: None)
    plain = {r["op"]: r for r in records if r["system"] == "hpcio mds"}
    assert set(plain) == {"iterate", "shuffle-block", "shuffle-buffer", "dataloader"}
    assert len({r["checksum"] for r in plain.values()}) == 1  # the same samples, each once
    assert all(r["cpu_s"] > 0 and r["anon_peak_mb"] > 0 for r in plain.values())
    # the DataLoader's reader opens after PyTorch's import, which the others do not pay
    assert plain["dataloader"]["anon_at_open_mb"] > plain["iterate"]["anon_at_open_mb"] + 100
    table = cold.markdown(None, records)
    assert "Device limits unknown" in table
    block = next(line for line in table.splitlines() if line.startswith("| vlm | hpcio mds | shuffle-block |"))
    assert float(block.split("|")[7]) > 0  # "of iterate": against the same reader's pass


def test_cold_runs_write_only_what_their_readers_read(tmp_path):
    from hpcio.bench import cold

    described = cold.synthetic_datasets("vlm", 2_000_000, str(tmp_path), write=(), log=lambda *a: None)
    assert [d.name for d in described] == ["mds", "webdataset", "jinx", "parquet"]
    assert not any(os.path.exists(d.path) for d in described)
    cold.run("vlm", 2_000_000, str(tmp_path), ops=("iterate",), only=["hpcio mds"], include_interop=False,
             log=lambda *a: None)
    assert [os.path.exists(d.path) for d in described] == [True, False, False, False]


def test_cold_runs_read_jinx_and_parquet_with_every_reader(tmp_path):
    """hpcio's JINX and Parquet readers and pyarrow read the same cold samples."""
    from hpcio.bench import cold

    records = cold.run("text", 3_000_000, str(tmp_path), ops=("iterate", "shuffle"), only=["jinx", "parquet"],
                       include_interop=False, log=lambda *a: None)
    assert {(r["system"], r["op"]) for r in records} == {
        (system, op) for system in ("hpcio jinx lazy", "hpcio jinx eager", "hpcio parquet", "pyarrow parquet")
        for op in ("iterate", "shuffle")}
    for r in records:
        assert "error" not in r, r
        assert r["resident_before"] == 0.0 and r["samples"] == records[0]["samples"] > 1000
    hpcio_sums = {r["checksum"] for r in records if r["system"].startswith("hpcio")}
    assert len(hpcio_sums) == 1


def test_the_one_request_baseline_reads_each_record_exactly(tmp_path):
    """One pread per sample of exactly its record: the bytes it touches are the shards'
    records, nothing of their headers or embedded configs, every record once."""
    import json

    from hpcio.bench import cold

    records = cold.run("vlm", 2_000_000, str(tmp_path), ops=("shuffle",), only=["one-request"],
                       include_interop=False, log=lambda *a: None)
    assert [(r["system"], r["op"]) for r in records] == [("one-request mds", "shuffle")]
    mds = next(d.path for d in cold.synthetic_datasets("vlm", 2_000_000, str(tmp_path), write=(),
                                                      log=lambda *a: None) if d.name == "mds")
    with open(os.path.join(mds, "index.json")) as f:
        shards = json.load(f)["shards"]
    data = 0
    for shard in shards:
        raw = (tmp_path / mds / shard["raw_data"]["basename"]).read_bytes()
        first = int.from_bytes(raw[4:8], "little")  # after the offsets and the embedded config
        assert first > 4 * (shard["samples"] + 2)
        data += len(raw) - first
    assert records[0]["checksum"] == data
    assert records[0]["samples"] == sum(s["samples"] for s in shards)
