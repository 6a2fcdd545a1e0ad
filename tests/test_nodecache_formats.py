"""hpcio.NodeCache over the formats beyond MDS and JINX: reads match direct reads under a
limit of a quarter of the shards, nothing is read at open, and what cannot read through
a cache is refused with a message that says why and what to do."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil

import numpy as np
import pytest

import hpcio
from hpcio.errors import CapabilityError


def write_webdataset(path, n=400, hashes=None):
    options = {} if hashes is None else {"hashes": hashes}
    with hpcio.open_writer(path, format="webdataset", max_size=1 << 14, **options) as w:
        for i in range(n):
            w.write({"__key__": f"{i:05d}", "id": i, "blob": i.to_bytes(4, "little") * 75})
    return str(path)


def shard_sizes_on_disk(path):
    files = hpcio.open(path).reader.files_of_shards()
    return np.array([sum(os.path.getsize(f.path) for f in shard) for shard in files])


def open_files_under(*tops):
    """Targets of this process's descriptors and maps under ``tops``."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    with open("/proc/self/maps") as f:
        out += [line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6]
    return sorted({t for t in out if any(t.startswith(top) for top in tops)})


def check_reads_through_the_cache(path, cache_dir, fetched):
    direct = hpcio.open(path)
    sizes = shard_sizes_on_disk(path)
    assert len(sizes) >= 8
    limit = int(sizes.sum() // 4)
    cache = hpcio.NodeCache(cache_dir, limit=limit)
    ds = hpcio.open(path, cache=cache)
    assert [dict(s) for s in ds.shuffle(5)] == [dict(s) for s in direct.shuffle(5)]
    picks = [3, len(ds) - 1, 7, len(ds) // 2]
    assert ds.get_batch(picks) == direct.get_batch(picks)
    cache.wait()
    stats = cache.stats()
    assert stats["resident_bytes"] <= limit
    assert stats["evictions"] > 0 and stats["over_limit"] == 0
    assert stats["fetches"] == len(fetched) and stats["fetched_bytes"] == int(sizes[fetched].sum())
    return cache, ds


# --- WebDataset -------------------------------------------------------------------------
def test_webdataset_reads_through_the_cache_match_direct_reads(tmp_path, fetched):
    path = write_webdataset(tmp_path / "remote")
    cache, ds = check_reads_through_the_cache(path, tmp_path / "cache", fetched)
    # evicted tars were closed and unmapped (once the next read saw the evictions):
    # nothing held is a deleted file or the remote
    ds.get_batch([len(ds) // 2])
    held = open_files_under(str(tmp_path))
    assert not [t for t in held if t.endswith("(deleted)") or t.startswith(os.path.realpath(path))], held


def test_opening_webdataset_through_the_cache_reads_no_tar(tmp_path):
    path = write_webdataset(tmp_path / "remote")
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    mirror = os.path.join(cache.root_of(path), "data")
    tars = sorted(n for n in os.listdir(mirror) if n.endswith(".tar"))
    assert len(tars) >= 8 and all(os.path.islink(os.path.join(mirror, n)) for n in tars)
    assert not os.path.islink(os.path.join(mirror, "hashes.json"))  # the manifest is copied
    assert open_files_under(str(tmp_path / "remote"), mirror) == []  # no tar open nor mapped
    assert cache.stats()["fetches"] == 0
    first = ds[0]
    assert first == hpcio.open(path)[0]
    assert not os.path.islink(os.path.join(mirror, tars[0]))
    assert open_files_under(str(tmp_path / "remote"), mirror) == [os.path.join(mirror, tars[0])]


def test_a_released_webdataset_tar_is_opened_again(tmp_path):
    path = write_webdataset(tmp_path / "remote")
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    before = ds[0]
    cache.clear()  # the tar becomes a link again; the next read fetches it and reopens it
    assert ds[0] == before
    mirror = os.path.join(cache.root_of(path), "data")
    held = open_files_under(mirror)  # the new copy, not the evicted one nor the link's target
    assert held == [os.path.join(mirror, "shard-000000.tar")], held
    assert cache.stats()["fetches"] == 2


def _refused(path, cache_dir, message, **options):
    with pytest.raises(CapabilityError, match=re.escape(message) + "$"):
        hpcio.open(path, cache=hpcio.NodeCache(cache_dir, limit="1MB"), **options)
    assert not os.path.exists(cache_dir)  # refused before any mirror (or reader) was made


def test_webdataset_without_recorded_sample_counts_is_refused(tmp_path):
    path = write_webdataset(tmp_path / "remote", hashes=[])
    count = len([n for n in os.listdir(path) if n.endswith(".tar")])
    _refused(path, tmp_path / "cache",
             f"hashes.json records no sample count for {count} of the {count} tars, so opening them would "
             "scan every such tar through the shared tier, around the node cache; rewrite the shards with "
             "the hashes.json hpcio's WebDataset writer records (hpcio convert SRC DST --to webdataset, or "
             f'hpcio.open_writer(DST, format="webdataset")) ({os.path.join(path, "shard-000000.tar")})')


def test_webdataset_with_a_tar_the_manifest_does_not_count_is_refused(tmp_path):
    path = write_webdataset(tmp_path / "remote")
    manifest = os.path.join(path, "hashes.json")
    with open(manifest) as f:
        record = json.load(f)
    del record["files"]["shard-000003.tar"]["samples"]
    with open(manifest, "w") as f:
        json.dump(record, f)
    count = len(record["files"])
    _refused(path, tmp_path / "cache",
             f"hashes.json records no sample count for 1 of the {count} tars, so opening them would "
             "scan every such tar through the shared tier, around the node cache; rewrite the shards with "
             "the hashes.json hpcio's WebDataset writer records (hpcio convert SRC DST --to webdataset, or "
             f'hpcio.open_writer(DST, format="webdataset")) ({os.path.join(path, "shard-000003.tar")})')


def test_webdataset_gzip_tars_sidecars_and_hashing_at_open_are_refused(tmp_path):
    path = write_webdataset(tmp_path / "remote")
    _refused(path, tmp_path / "cache",
             "validate_hashes would hash every tar through the shared tier at open; a node cache checks each "
             "tar against the xxh3_64 hashes.json records as it fetches it: leave validate_hashes out "
             f"({path})", validate_hashes=True)
    _refused(path, tmp_path / "cache",
             "WebDataset sidecars cannot read through a node cache (it fetches the tars of one shard set): "
             f"read them without cache= ({path})", sidecars=[path])
    tar = os.path.join(path, "shard-000000.tar")
    _refused(tar, tmp_path / "cache",
             "a node cache mirrors a directory of WebDataset tars: pass the directory, not a file, a glob "
             f"or a list ({tar})")
    gz = tmp_path / "gz"
    gz.mkdir()
    with open(tar, "rb") as src, gzip.open(gz / "shard-000000.tar.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    _refused(gz, tmp_path / "cache",
             "gzip-compressed tars cannot read through a node cache: each would be decompressed into a copy "
             "outside the cache's limit; decompress them and record them in hashes.json (hpcio convert SRC "
             f"DST --to webdataset writes both) ({gz / 'shard-000000.tar.gz'})")


# --- MessagePack ------------------------------------------------------------------------
def write_msgpack(path, n=800, hashes=None):
    options = {} if hashes is None else {"hashes": hashes}
    with hpcio.open_writer(path, format="msgpack", max_size=1 << 13, **options) as w:
        for i in range(n):
            w.write({"id": i, "blob": i.to_bytes(4, "little") * 75})
    return str(path)


def test_msgpack_reads_through_the_cache_match_direct_reads(tmp_path, fetched):
    path = write_msgpack(tmp_path / "remote")
    cache, ds = check_reads_through_the_cache(path, tmp_path / "cache", fetched)
    ds.get_batch([len(ds) // 2])
    held = open_files_under(str(tmp_path))
    assert not [t for t in held if t.endswith("(deleted)") or t.startswith(os.path.realpath(path))], held


def test_opening_msgpack_through_the_cache_reads_no_file(tmp_path):
    path = write_msgpack(tmp_path / "remote")
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    mirror = os.path.join(cache.root_of(path), "data")
    files = sorted(n for n in os.listdir(mirror) if n.endswith(".msgpack"))
    assert len(files) >= 8 and all(os.path.islink(os.path.join(mirror, n)) for n in files)
    assert open_files_under(str(tmp_path / "remote"), mirror) == []
    assert ds[len(ds) - 1] == hpcio.open(path)[len(ds) - 1]
    assert open_files_under(str(tmp_path / "remote"), mirror) == [os.path.join(mirror, files[-1])]
    cache.clear()
    assert ds[len(ds) - 1]["id"] == len(ds) - 1
    assert open_files_under(mirror) == [os.path.join(mirror, files[-1])]  # the new copy, reopened


def test_msgpack_counts_are_checked_when_a_file_is_first_read(tmp_path):
    from hpcio.errors import CorruptShardError

    path = write_msgpack(tmp_path / "remote")
    manifest = os.path.join(path, "hashes.json")
    with open(manifest) as f:
        record = json.load(f)
    assert record["files"]["shard-000000.msgpack"]["samples"] > 1
    record["files"]["shard-000000.msgpack"]["samples"] -= 1
    with open(manifest, "w") as f:
        json.dump(record, f)
    ds = hpcio.open(path)
    with pytest.raises(CorruptShardError, match=re.escape("the file holds")):
        ds[0]


def test_msgpack_without_recorded_sample_counts_is_refused(tmp_path):
    path = write_msgpack(tmp_path / "remote", hashes=[])
    count = len(os.listdir(path))
    _refused(path, tmp_path / "cache",
             f"hashes.json records no sample count for {count} of the {count} MessagePack files, so opening "
             "them would index every such file through the shared tier, around the node cache; rewrite them "
             "with hpcio's MessagePack writer (hpcio.open_writer(DST, format=\"msgpack\")), which records the "
             f"counts in hashes.json ({os.path.join(path, 'shard-000000.msgpack')})")
    path = write_msgpack(tmp_path / "single.msgpack", n=4)
    _refused(path, tmp_path / "cache",
             f"a node cache mirrors a directory of MessagePack files: pass the directory, not a file ({path})")
