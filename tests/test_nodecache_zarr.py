"""hpcio.NodeCache over Zarr stores, one cache shard per part: reads match direct reads
under a limit of a quarter of the parts, opening reads no chunk file, every fetch is
checked against the xxh3_64 the root records, and a store without that record is
refused with a message saying how to rewrite it (and still reads directly)."""

from __future__ import annotations

import builtins
import io
import json
import os
import re

import pytest

import hpcio
from hpcio._hashing import file_digest
from hpcio.errors import CapabilityError, ChecksumMismatchError, PathEscapeError, ShardChangedError
from hpcio.formats import _zarr_files, zarr as zfmt

# tests/ is on sys.path (no __init__.py): the helpers the other formats' cache tests use
from test_nodecache_formats import check_reads_through_the_cache, open_files_under

pytest.importorskip("zarr")

PARTS = 12
PER_PART = 30
CHUNK = re.compile(r"/part-\d{5}/.*/c/")  # a chunk (shard) file of the sharding codec


def sample(i):
    return {"id": i, "text": f"t{i}" * (1 + i % 5), "blob": i.to_bytes(4, "little") * (20 + i % 30)}


def write_parts(path):
    """A store of PARTS parts, one writer each, published by finalize."""
    for k in range(PARTS):
        with hpcio.open_writer(path, format="zarr", part=k) as w:
            for i in range(k * PER_PART, (k + 1) * PER_PART):
                w.write(sample(i))
    zfmt.finalize(path)
    return str(path)


def convert_parts(path):
    """A store of PARTS parts written by the converter (sharded-writing hook)."""
    src = path.parent / "src.jsonl"
    with open(src, "w") as f:
        for i in range(PARTS * PER_PART):
            f.write(json.dumps({"id": i, "text": f"t{i}" * (1 + i % 5)}) + "\n")
    hpcio.convert([str(src)], path, to="zarr", num_shards=PARTS, order="source", progress=False)
    return str(path)


@pytest.fixture(params=["writers", "convert"])
def store(request, tmp_path):
    make = write_parts if request.param == "writers" else convert_parts
    return make(tmp_path / "remote")


@pytest.fixture
def opened(monkeypatch):
    """``(path, was a link)`` of every file this process opens by name: ``io.open`` (what
    pathlib and so zarr's local store use), ``builtins.open`` and ``os.open``."""
    seen = []

    def wrap(real):
        def opening(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)):
                path = os.fsdecode(os.fspath(file))
                seen.append((os.path.abspath(path), os.path.islink(path)))
            return real(file, *args, **kwargs)
        return opening

    monkeypatch.setattr(io, "open", wrap(io.open))
    monkeypatch.setattr(builtins, "open", wrap(builtins.open))
    monkeypatch.setattr(os, "open", wrap(os.open))
    return seen


def chunks(seen):
    return [(path, link) for path, link in seen if CHUNK.search(path)]


def root_layout(path):
    with open(os.path.join(path, "zarr.json")) as f:
        return json.load(f)["attributes"]["hpcio"]


def edit_root(path, edit):
    meta_path = os.path.join(path, "zarr.json")
    with open(meta_path) as f:
        meta = json.load(f)
    edit(meta["attributes"]["hpcio"])
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def refused(path, cache_dir, message, error=CapabilityError):
    with pytest.raises(error, match=re.escape(message) + "$"):
        hpcio.open(path, cache=hpcio.NodeCache(cache_dir, limit="1MB"))
    assert not os.path.exists(cache_dir)  # refused before any mirror (or reader) was made


# --- the record -------------------------------------------------------------------------
def test_the_root_records_each_part_s_data_files(store):
    """Both routes record every file of each part but its zarr.json metadata, with the
    bytes and xxh3_64 on disk; the chunk files stay zarr-python's."""
    layout = root_layout(store)
    assert [p["name"] for p in layout["parts"]] == [f"part-{k:05d}" for k in range(PARTS)]
    for p in layout["parts"]:
        part = os.path.join(store, p["name"])
        on_disk = sorted(os.path.relpath(os.path.join(top, n), part) for top, _d, names in os.walk(part)
                         for n in names if n != "zarr.json")
        assert list(p["files"]) == on_disk and all("/c/" in n for n in on_disk)
        assert p["files"] == {n: {"bytes": os.path.getsize(os.path.join(part, n)),
                                  "xxh3_64": file_digest(os.path.join(part, n))} for n in on_disk}
    files = hpcio.open(store).reader.files_of_shards()
    assert [[os.path.relpath(f.path, store) for f in shard] for shard in files] == \
        [[f"{p['name']}/{n}" for n in p["files"]] for p in layout["parts"]]


# --- reads through the cache ----------------------------------------------------------------
def test_zarr_reads_through_the_cache_match_direct_reads(tmp_path, fetched):
    """A converted store (the route of large ones; every other test reads one whose
    writers' parts finalize published)."""
    store = convert_parts(tmp_path / "remote")
    cache, ds = check_reads_through_the_cache(store, tmp_path / "cache", fetched)
    ds.get_batch([len(ds) // 2])
    # zarr keeps no chunk file open: nothing held is the remote, a mirror file or a
    # deleted (evicted) copy
    assert open_files_under(str(tmp_path / "remote"), os.path.join(cache.root_of(store), "data")) == []
    assert not [t for t in open_files_under(str(tmp_path)) if t.endswith("(deleted)")]


def test_opening_zarr_through_the_cache_opens_no_chunk_file(tmp_path, opened):
    path = write_parts(tmp_path / "remote")
    direct = hpcio.open(path)
    expected = direct[3 * PER_PART + 7]
    opened.clear()
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    assert chunks(opened) == []  # neither the probe of the remote nor the reader of the mirror
    assert cache.stats()["fetches"] == 0
    mirror = os.path.join(cache.root_of(path), "data")
    files = [os.path.join(mirror, p["name"], n) for p in root_layout(path)["parts"] for n in p["files"]]
    assert len(files) == PARTS * 5 and all(os.path.islink(f) for f in files)
    assert not os.path.islink(os.path.join(mirror, "part-00003", "text", "offsets", "zarr.json"))  # copied

    opened.clear()
    assert ds[3 * PER_PART + 7] == expected
    part = os.path.join(mirror, "part-00003") + os.sep
    read = [(p, link) for p, link in chunks(opened) if p.startswith(mirror) and ".fetch-" not in p]
    # zarr opened the part's files by name after the fetch renamed them over the links
    assert read and all(p.startswith(part) and not link for p, link in read), read
    assert {p for p, _link in read} == {f for f in files if f.startswith(part)}
    remote = [p for p, _link in chunks(opened) if not p.startswith(mirror)]
    assert remote and all(p.startswith(os.path.join(path, "part-00003") + os.sep) for p in remote)  # the fetch
    assert cache.stats()["fetches"] == 1


def test_a_zarr_part_reads_again_after_the_cache_is_cleared(tmp_path, opened):
    path = write_parts(tmp_path / "remote")
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    picks = [5, 2 * PER_PART + 1, 5 * PER_PART + 9]
    before = ds.get_batch(picks)
    mirror = os.path.join(cache.root_of(path), "data")
    cache.clear()  # every part's files become links again
    assert all(os.path.islink(os.path.join(mirror, "part-00002", n))
               for n in root_layout(path)["parts"][2]["files"])
    opened.clear()
    assert ds.get_batch(picks) == before == hpcio.open(path).get_batch(picks)
    read = [(p, link) for p, link in chunks(opened) if p.startswith(mirror) and ".fetch-" not in p]
    assert read and not any(link for _p, link in read)  # the new copies, not the links
    assert cache.stats()["fetches"] == 6
    assert open_files_under(str(tmp_path / "remote"), mirror) == []


def test_a_fetched_chunk_file_whose_bytes_changed_is_refused(tmp_path):
    path = write_parts(tmp_path / "remote")
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    victim = os.path.join(path, "part-00001", "blob", "data", "c", "0")
    data = bytearray(open(victim, "rb").read())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    recorded = root_layout(path)["parts"][1]["files"]["blob/data/c/0"]["xxh3_64"]
    with open(victim, "wb") as f:
        f.write(data)
    with pytest.raises(ChecksumMismatchError) as err:
        ds[PER_PART + 2]
    assert str(err.value) == (f"xxh3_64 of the fetched shard is {file_digest(victim)}, the index records "
                              f"{recorded} ({victim})")
    assert ds[2]["id"] == 2  # the other parts still read
    with open(victim, "ab") as f:
        f.write(b"x")
    with pytest.raises(ShardChangedError, match=re.escape(
            f"shard file has {len(data) + 1} bytes where the index records {len(data)} ({victim})")):
        ds[PER_PART + 2]


# --- refusals --------------------------------------------------------------------------------
def test_a_store_without_the_record_is_refused_and_reads_directly(tmp_path):
    path = write_parts(tmp_path / "remote")
    expected = hpcio.open(path).get_batch([0, PER_PART * PARTS - 1])

    def forget(layout):  # a store hpcio wrote before it recorded files
        for p in layout["parts"][2:]:
            del p["files"]
    edit_root(path, forget)
    refused(path, tmp_path / "cache",
            f"the root zarr.json records no files for {PARTS - 2} of the {PARTS} parts (the first is part-00002), "
            "so a node cache could neither list their files without walking the shared tier nor check what it "
            "fetches; rewrite the store with hpcio's Zarr writer (hpcio convert SRC DST --to zarr, or "
            "hpcio.open_writer(DST, format=\"zarr\")), which records each part's files with their bytes and "
            f"xxh3_64 ({os.path.join(path, 'zarr.json')})")
    ds = hpcio.open(path)
    assert ds.get_batch([0, PER_PART * PARTS - 1]) == expected
    assert ds.reader.files_of_shards() is None


def test_a_hooked_writer_without_the_converter_records_no_files(tmp_path):
    """The hook's writer leaves the record to the converter, which digests each part as it
    publishes it: merge_index called directly publishes a store the cache refuses."""
    path = tmp_path / "remote"
    parts = []
    for k in range(2):
        with zfmt.Writer(path, shard_id=k, num_shards=2) as w:
            w.write(sample(k))
        parts.append(w.index_part())
    zfmt.merge_index(path, parts)
    assert hpcio.open(path)[1] == sample(1)
    with pytest.raises(CapabilityError, match=r"^the root zarr.json records no files for 2 of the 2 parts "):
        hpcio.open(path, cache=hpcio.NodeCache(tmp_path / "cache", limit="1MB"))


def test_a_recorded_file_name_leaving_its_part_is_refused(tmp_path):
    path = write_parts(tmp_path / "remote")
    meta_path = os.path.join(path, "zarr.json")

    def escape(layout):
        layout["parts"][0]["files"]["../../../outside"] = {"bytes": 1, "xxh3_64": "0" * 16}
    edit_root(path, escape)
    refused(path, tmp_path / "cache", f"Zarr part file name '../../../outside' leaves its directory ({meta_path})",
            error=PathEscapeError)


def test_a_damaged_record_is_a_damaged_layout(tmp_path):
    from hpcio.errors import CorruptShardError

    path = write_parts(tmp_path / "remote")

    def damage(layout):
        layout["parts"][1]["files"]["id/c/0"] = {"bytes": -1}
    edit_root(path, damage)
    with pytest.raises(CorruptShardError) as err:
        hpcio.open(path)
    assert str(err.value) == ("the 'hpcio' layout attribute is damaged: part 'part-00001': files entry 'id/c/0' "
                              f"is not {{bytes, xxh3_64}} ({os.path.join(path, 'zarr.json')})")
    assert _zarr_files.files_problem({"zarr.json": {"bytes": 1, "xxh3_64": "0"}}) == \
        "files entry 'zarr.json' names metadata, which is no part's data"
