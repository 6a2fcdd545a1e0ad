"""hpcio.NodeCache over Parquet: a file's row groups are one cache unit, opening through
the cache reads no byte of any file (the row groups and schema come from hashes.json),
reads match direct reads under a limit of a quarter of the files, a wrong manifest entry
is reported when its file is first read, and what cannot read through a cache is
refused saying what to do."""

from __future__ import annotations

import builtins
import json
import os
import re

import numpy as np
import pytest

import hpcio
from hpcio.errors import CapabilityError, ChecksumMismatchError, CorruptShardError
from hpcio.formats.base import ShardFile
from hpcio.nodecache import _release_units, _units
from test_nodecache_formats import open_files_under

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

FILES, GROUPS, ROWS = 16, 4, 16  # files, row groups per file, rows per row group


def write_parquet(path, hashes=None):
    options = {} if hashes is None else {"hashes": hashes}
    with hpcio.open_writer(path, format="parquet", row_group_size=ROWS, max_count=GROUPS * ROWS,
                           **options) as w:
        for i in range(FILES * GROUPS * ROWS):
            w.write({"id": i, "blob": i.to_bytes(4, "little") * 75})
    return str(path)


def parquet_files(path):
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet"))


@pytest.fixture
def opened(monkeypatch):
    """Every path a ``.parquet`` file is opened by, through Python or pyarrow."""
    paths: list[str] = []

    def noting(fn):
        def call(where, *args, **kwargs):
            if isinstance(where, (str, os.PathLike)) and os.fspath(where).endswith(".parquet"):
                paths.append(os.fspath(where))
            return fn(where, *args, **kwargs)
        return call

    for owner, name in ((builtins, "open"), (os, "open"), (pa, "OSFile"), (pa, "memory_map"),
                        (pq, "read_metadata"), (pq, "read_schema"), (pq, "read_table")):
        monkeypatch.setattr(owner, name, noting(getattr(owner, name)))
    base = pq.ParquetFile

    class Noted(base):
        def __init__(self, source, *args, **kwargs):
            noting(lambda *_a, **_k: None)(source)
            super().__init__(source, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", Noted)
    return paths


def _refused(path, cache_dir, message, **options):
    with pytest.raises(CapabilityError, match=re.escape(message) + "$"):
        hpcio.open(path, format="parquet", cache=hpcio.NodeCache(cache_dir, limit="1MB"), **options)
    assert not os.path.exists(cache_dir)  # refused before any mirror (or reader) was made


# --- cache units ------------------------------------------------------------------------
def test_shards_reading_the_same_files_are_one_cache_unit():
    a, b, c, d = (ShardFile(name, 10) for name in ("a", "b", "c", "d"))
    shards = [[a], [a], [b, c], [b, c], [b, c], [], [], [d]]
    units, first = _units(shards, "/top", "fmt")
    assert units == [[a], [b, c], [], [d]] and first.tolist() == [0, 2, 5, 7, 8]
    released = []
    _release_units(released.extend, first)([1, 3])
    assert released == [2, 3, 4, 7]
    assert _units([], "/top", "fmt")[1].tolist() == [0]
    with pytest.raises(CapabilityError, match=re.escape(
            "the fmt reader's shards 0 and 2 both read this file but are not one run of shards reading the "
            "same files, which a node cache fetches and evicts as one unit (/top/a)") + "$"):
        _units([[a], [b], [a]], "/top", "fmt")
    with pytest.raises(CapabilityError, match=re.escape("shards 0 and 1 both read this file") + ".*/top/b"):
        _units([[a, b], [b, c]], "/top", "fmt")


# --- reads through the cache ------------------------------------------------------------
def test_parquet_reads_through_the_cache_match_direct_reads(tmp_path, fetched):
    path = write_parquet(tmp_path / "remote")
    direct = hpcio.open(path)
    sizes = np.array([os.path.getsize(p) for p in parquet_files(path)])
    assert len(sizes) == FILES and len(direct.reader.shard_sizes()) == FILES * GROUPS
    limit = int(sizes.sum() // 4)
    cache = hpcio.NodeCache(tmp_path / "cache", limit=limit)
    ds = hpcio.open(path, cache=cache)
    assert ds.reader.consumer.store.n == FILES  # one unit per file, not per row group
    assert ds.reader.consumer.cum.tolist() == [k * GROUPS * ROWS for k in range(FILES + 1)]
    assert [dict(s) for s in ds.shuffle(5)] == [dict(s) for s in direct.shuffle(5)]
    picks = [3, len(ds) - 1, 7, len(ds) // 2, 130]
    assert ds.get_batch(picks) == direct.get_batch(picks)
    assert [dict(s) for s in ds] == [dict(s) for s in direct]  # in order, a file at a time
    cache.wait()
    stats = cache.stats()
    assert stats["resident_bytes"] <= limit
    assert stats["evictions"] > 0 and stats["over_limit"] == 0
    assert stats["fetches"] == len(fetched) and stats["fetched_bytes"] == int(sizes[fetched].sum())
    # evicted files were closed (once the next read saw the evictions): nothing held is a
    # deleted file or the remote
    direct.reader.close()
    ds.get_batch([len(ds) // 2])
    held = open_files_under(str(tmp_path))
    assert not [t for t in held if t.endswith("(deleted)") or t.startswith(os.path.realpath(path))], held


def test_opening_parquet_through_the_cache_opens_no_file(tmp_path, opened):
    path = write_parquet(tmp_path / "remote")
    opened.clear()
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, format="parquet", cache=cache, validate_hashes=True)
    mirror = os.path.join(cache.root_of(path), "data")
    names = [os.path.basename(p) for p in parquet_files(mirror)]
    assert len(names) == FILES and all(os.path.islink(os.path.join(mirror, n)) for n in names)
    assert not os.path.islink(os.path.join(mirror, "hashes.json"))  # the manifest is copied
    assert opened == [] and open_files_under(str(tmp_path / "remote"), mirror) == []
    assert ds.reader.inner.files == [None] * FILES and cache.stats()["fetches"] == 0
    last = len(ds) - 1
    got = ds[last]
    # the fetch copies the remote file, then the reader opens the copy
    assert opened == [os.path.join(os.path.realpath(path), names[-1]), os.path.join(mirror, names[-1])]
    assert got == hpcio.open(path)[last]
    assert open_files_under(str(tmp_path / "remote"), mirror) == [os.path.join(mirror, names[-1])]
    assert not os.path.islink(os.path.join(mirror, names[-1]))


def test_opening_through_the_cache_reads_no_byte_of_the_files(tmp_path):
    """The remote files are zeroed at their sizes: a reader that read any footer at open
    would fail; the first read fetches a file, whose xxh3_64 the cache checks."""
    path = write_parquet(tmp_path / "remote")
    for p in parquet_files(path):
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            f.write(bytes(size))
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, format="parquet", cache=cache)
    assert len(ds) == FILES * GROUPS * ROWS and ds.reader.fields == ["id", "blob"]
    with pytest.raises(ChecksumMismatchError, match=r"^xxh3_64 of the fetched shard is [0-9a-f]+, the index "
                                                    rf"records [0-9a-f]+ \({re.escape(path)}/part-000000.parquet\)$"):
        ds[0]


def test_a_released_parquet_file_is_opened_again(tmp_path):
    path = write_parquet(tmp_path / "remote")
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    before = ds.get_batch([0, GROUPS * ROWS - 1])
    ds.reader.inner.cache.clear()  # not the decoded row groups: the file's bytes are read again
    cache.clear()  # the file becomes a link again; the next read fetches it and reopens it
    assert ds.get_batch([0, GROUPS * ROWS - 1]) == before
    mirror = os.path.join(cache.root_of(path), "data")
    held = open_files_under(mirror)  # the new copy, not the evicted one nor the link's target
    assert held == [os.path.join(mirror, "part-000000.parquet")], held
    assert cache.stats()["fetches"] == 2


def test_a_converted_parquet_dataset_reads_through_the_cache(tmp_path):
    src = write_parquet(tmp_path / "src", hashes=[])  # pyarrow-like: no manifest
    out = tmp_path / "out"
    hpcio.convert([src], out, to="parquet", num_shards=4, progress=False)
    direct = hpcio.open(out)
    ds = hpcio.open(out, cache=hpcio.NodeCache(tmp_path / "cache", limit="1MB"))
    assert sorted(s["id"] for s in ds) == list(range(FILES * GROUPS * ROWS))
    assert [dict(s) for s in ds.shuffle(1)] == [dict(s) for s in direct.shuffle(1)]


# --- a manifest that disagrees with its file ----------------------------------------------
def test_a_wrong_manifest_entry_is_reported_when_its_file_is_first_read(tmp_path):
    path = write_parquet(tmp_path / "remote")
    manifest = os.path.join(path, "hashes.json")
    with open(manifest) as f:
        record = json.load(f)
    entry = record["files"]["part-000001.parquet"]
    assert entry["row_groups"] == [ROWS] * GROUPS and entry["samples"] == GROUPS * ROWS
    entry["row_groups"][0] -= 1  # the same samples in all: a plausible entry, a wrong one
    entry["row_groups"][1] += 1
    with open(manifest, "w") as f:
        json.dump(record, f)
    size = entry["row_group_bytes"][0]
    message = (f"row group 0 holds {ROWS} rows of {size} bytes decoded by the file's footer, {ROWS - 1} rows "
               "of {size} bytes by its hash manifest ({file}, sample 64)")
    ds = hpcio.open(path)
    assert ds[0]["id"] == 0  # other files read
    with pytest.raises(CorruptShardError, match="^" + re.escape(message.format(
            size=size, file=os.path.join(path, "part-000001.parquet"))) + "$"):
        ds[GROUPS * ROWS]
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    cached = hpcio.open(path, cache=cache)
    mirrored = os.path.join(cache.root_of(path), "data", "part-000001.parquet")
    with pytest.raises(CorruptShardError, match="^" + re.escape(message.format(size=size, file=mirrored)) + "$"):
        cached[GROUPS * ROWS]


# --- what is refused ------------------------------------------------------------------------
def test_parquet_without_recorded_row_groups_is_refused(tmp_path):
    path = write_parquet(tmp_path / "remote", hashes=[])
    _refused(path, tmp_path / "cache",
             f"hashes.json records no row groups for {FILES} of the {FILES} Parquet files, so opening them would "
             "read every such file's footer through the shared tier, around the node cache; rewrite them with "
             "hpcio, which records them in hashes.json (hpcio convert SRC DST --to parquet), or convert them to "
             f"MDS (--to mds) ({os.path.join(path, 'part-000000.parquet')})")
    single = str(tmp_path / "one.parquet")
    with hpcio.open_writer(single, format="parquet") as w:
        w.write({"id": 0})
    assert os.path.exists(single + ".hashes.json")
    _refused(single, tmp_path / "cache",
             f"a node cache mirrors a directory of Parquet files: pass the directory, not a file ({single})")


def test_parquet_with_a_file_the_manifest_does_not_describe_is_refused(tmp_path):
    path = write_parquet(tmp_path / "remote")
    manifest = os.path.join(path, "hashes.json")
    with open(manifest) as f:
        record = json.load(f)
    del record["files"]["part-000003.parquet"]["row_groups"]
    with open(manifest, "w") as f:
        json.dump(record, f)
    _refused(path, tmp_path / "cache",
             f"hashes.json records no row groups for 1 of the {FILES} Parquet files, so opening them would "
             "read every such file's footer through the shared tier, around the node cache; rewrite them with "
             "hpcio, which records them in hashes.json (hpcio convert SRC DST --to parquet), or convert them to "
             f"MDS (--to mds) ({os.path.join(path, 'part-000003.parquet')})")
    assert hpcio.open(path).reader.layouts is None  # read directly, every footer is read at open


def test_a_pyarrow_written_directory_is_refused_and_reads_directly_as_before(tmp_path):
    path = tmp_path / "remote"
    path.mkdir()
    for k in range(2):
        table = pa.table({"id": list(range(k * 100, (k + 1) * 100)), "text": [f"t{i}" for i in range(100)]})
        pq.write_table(table, path / f"part-{k}.parquet", row_group_size=25)
    _refused(path, tmp_path / "cache",
             "hashes.json records no row groups for 2 of the 2 Parquet files, so opening them would read every "
             "such file's footer through the shared tier, around the node cache; rewrite them with hpcio, which "
             "records them in hashes.json (hpcio convert SRC DST --to parquet), or convert them to MDS (--to mds) "
             f"({path / 'part-0.parquet'})")
    ds = hpcio.open(path)
    assert ds.reader.layouts is None and all(f is not None for f in ds.reader.files)
    assert len(ds) == 200 and ds[199] == {"id": 199, "text": "t99"}
    assert ds.reader.shard_sizes() == [25] * 8
