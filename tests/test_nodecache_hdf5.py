"""hpcio.NodeCache over HDF5: the writer's hashes.json records each file's bytes, xxh3_64,
sample count and fields, so a reader opens each file on its first read; reads through a
cache under a limit of a quarter of the shards match direct reads, nothing is read at
open, and what cannot read through a cache is refused with a message that says why."""

from __future__ import annotations

import json
import os
import re

import pytest

import hpcio
from hpcio.errors import CapabilityError, ChecksumMismatchError, CorruptShardError, ExternalStorageError
from tests.test_nodecache_formats import check_reads_through_the_cache, open_files_under

h5py = pytest.importorskip("h5py")


def write_hdf5(path, n=800, hashes=None):
    options = {} if hashes is None else {"hashes": hashes}
    with hpcio.open_writer(path, format="hdf5", max_count=80, **options) as w:
        for i in range(n):
            w.write({"id": i, "blob": i.to_bytes(4, "little") * 75})
    return str(path)


def h5_names(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".h5"))


def edit_manifest(path, edit):
    manifest = os.path.join(path, "hashes.json")
    with open(manifest) as f:
        record = json.load(f)
    edit(record["files"])
    with open(manifest, "w") as f:
        json.dump(record, f)


def _refused(path, cache_dir, message, **options):
    with pytest.raises(CapabilityError, match=re.escape(message) + "$"):
        hpcio.open(path, cache=hpcio.NodeCache(cache_dir, limit="1MB"), **options)
    assert not os.path.exists(cache_dir)  # refused before any mirror (or reader) was made


def test_the_writer_records_each_file_and_leaves_the_files_as_they_were(tmp_path):
    path = write_hdf5(tmp_path / "with")
    plain = write_hdf5(tmp_path / "plain", hashes=[])
    names = h5_names(path)
    assert len(names) == 10 and sorted(os.listdir(plain)) == names  # hashes=[]: the files alone
    assert sorted(os.listdir(path)) == ["hashes.json", *names]
    files = json.load(open(os.path.join(path, "hashes.json")))["files"]
    for name in names:
        with open(os.path.join(path, name), "rb") as a, open(os.path.join(plain, name), "rb") as b:
            assert a.read() == b.read()
        with h5py.File(os.path.join(path, name), "r") as f:
            layout = json.loads(f.attrs["hpcio"])
        entry = files[name]
        assert entry["bytes"] == os.path.getsize(os.path.join(path, name)) and set(entry["hashes"]) == {"xxh3_64"}
        assert (entry["samples"], entry["fields"]) == (layout["num_samples"], layout["fields"]) == (80, layout["fields"])


def test_hdf5_reads_through_the_cache_match_direct_reads(tmp_path, fetched):
    path = write_hdf5(tmp_path / "remote")
    cache, ds = check_reads_through_the_cache(path, tmp_path / "cache", fetched)
    # evicted files were closed (once the next read saw the evictions): nothing held is
    # a deleted file or the remote
    ds.get_batch([len(ds) // 2])
    held = open_files_under(str(tmp_path))
    assert not [t for t in held if t.endswith("(deleted)") or t.startswith(os.path.realpath(path))], held


def test_opening_hdf5_through_the_cache_reads_no_file(tmp_path, monkeypatch):
    path = write_hdf5(tmp_path / "remote")
    opened = []
    real = h5py.File
    monkeypatch.setattr(h5py, "File", lambda name, *a, **k: opened.append(os.fspath(name)) or real(name, *a, **k))
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    mirror = os.path.join(cache.root_of(path), "data")
    names = h5_names(mirror)
    assert len(names) >= 8 and all(os.path.islink(os.path.join(mirror, n)) for n in names)
    assert not os.path.islink(os.path.join(mirror, "hashes.json"))  # the manifest is copied
    assert opened == [] and cache.stats()["fetches"] == 0
    assert open_files_under(str(tmp_path / "remote"), mirror) == []  # no file open nor mapped
    assert len(ds) == 800 and ds.reader.fields == ["id", "blob"]
    last = ds[len(ds) - 1]
    assert opened == [os.path.join(mirror, names[-1])]
    assert last == hpcio.open(path, format="hdf5")[len(ds) - 1]
    assert not os.path.islink(os.path.join(mirror, names[-1]))
    assert open_files_under(str(tmp_path / "remote"), mirror) == [os.path.join(mirror, names[-1])]


def test_a_released_hdf5_file_is_opened_again(tmp_path):
    path = write_hdf5(tmp_path / "remote")
    cache = hpcio.NodeCache(tmp_path / "cache", limit="1MB")
    ds = hpcio.open(path, cache=cache)
    before = ds[0]
    cache.clear()  # the file becomes a link again; the next read fetches it and reopens it
    assert ds[0] == before
    mirror = os.path.join(cache.root_of(path), "data")
    held = open_files_under(mirror)  # the new copy, not the evicted one nor the link's target
    assert held == [os.path.join(mirror, "shard-000000.h5")], held
    assert cache.stats()["fetches"] == 2


def test_a_converted_hdf5_dataset_reads_through_the_cache(tmp_path):
    src = tmp_path / "src.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": "x" * (i % 50)}) + "\n" for i in range(400)))
    out = tmp_path / "out"
    hpcio.convert(str(src), out, to="hdf5", num_shards=8, progress=False)
    files = json.load(open(out / "hashes.json"))["files"]
    assert sorted(files) == h5_names(out) and sum(e["samples"] for e in files.values()) == 400
    ds = hpcio.open(out, cache=hpcio.NodeCache(tmp_path / "cache", limit="1MB"))
    assert [dict(s) for s in ds] == [dict(s) for s in hpcio.open(out)]


def test_hdf5_counts_are_checked_when_a_file_is_first_read(tmp_path):
    path = write_hdf5(tmp_path / "remote")
    first = os.path.join(path, "shard-000000.h5")
    edit_manifest(path, lambda files: files["shard-000000.h5"].update(samples=79))
    ds = hpcio.open(path, cache=hpcio.NodeCache(tmp_path / "cache", limit="1MB"))  # opens: no file is read
    assert len(ds) == 799
    with pytest.raises(CorruptShardError) as err:
        ds[0]
    mirror = os.path.join(hpcio.NodeCache(tmp_path / "cache").root_of(path), "data", "shard-000000.h5")
    assert str(err.value) == f"the file holds 80 samples, its hash manifest records 79 ({mirror}, sample 79)"
    with pytest.raises(CorruptShardError) as err:
        hpcio.open(path)[0]
    assert str(err.value) == f"the file holds 80 samples, its hash manifest records 79 ({first}, sample 79)"


def test_hdf5_fields_are_checked_when_a_file_is_first_read(tmp_path):
    """The manifest's fields, the same for every file (else the reader refuses them at
    open, as it refuses files whose layouts disagree), but not the files' own."""
    path = write_hdf5(tmp_path / "remote")
    last = os.path.join(path, "shard-000009.h5")
    edit_manifest(path, lambda files: [e["fields"]["blob"].update(kind="str") for e in files.values()])
    ds = hpcio.open(path)
    assert ds.reader.layout_fields["blob"]["kind"] == "str"  # what the manifest says, until a file is read
    with pytest.raises(CorruptShardError) as err:
        ds[799]
    assert str(err.value) == ("""the file's layout has field 'blob' as {"kind": "bytes", "storage": "ragged"}, """
                              f"""its hash manifest records {{"kind": "str", "storage": "ragged"}} ({last})""")
    edit_manifest(path, lambda files: [e["fields"].pop("blob") for e in files.values()])
    with pytest.raises(CorruptShardError) as err:
        hpcio.open(path)[799]
    assert str(err.value) == f"the file's layout has fields ['blob', 'id'], its hash manifest records ['id'] ({last})"


def test_a_recorded_file_is_checked_like_any_other_on_its_first_read(tmp_path):
    """An external link put into a recorded file (the manifest updated to its new size):
    opening reads nothing, the first read of the file refuses it as an open would."""
    path = write_hdf5(tmp_path / "remote")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("v", data=list(range(81)))
    shard = os.path.join(path, "shard-000000.h5")
    with h5py.File(shard, "a") as f:
        del f["blob/offsets"]
        f["blob/offsets"] = h5py.ExternalLink(str(other), "/v")
    edit_manifest(path, lambda files: files["shard-000000.h5"].update(bytes=os.path.getsize(shard)))
    ds = hpcio.open(path)
    assert len(ds) == 800 and ds[100]["id"] == 100
    with pytest.raises(ExternalStorageError) as err:
        ds[0]
    assert str(err.value) == f"dataset 'blob/offsets': 'blob/offsets' is an external link to {other}:/v ({shard})"


def test_verify_opens_a_file_the_manifest_counts_as_empty(tmp_path):
    path = write_hdf5(tmp_path / "remote")
    edit_manifest(path, lambda files: files["shard-000004.h5"].update(samples=0))
    assert len(hpcio.open(path)) == 720  # a read never opens a file of no sample
    report = hpcio.registry.get_format("hdf5").verify(path)
    assert not report["ok"] and report["errors"][0]["type"] == "CorruptShardError"
    assert report["errors"][0]["error"].startswith("the file holds 80 samples, its hash manifest records 0")


def test_validate_hashes_checks_the_files_against_the_manifest(tmp_path):
    path = write_hdf5(tmp_path / "remote")
    assert [s["id"] for s in hpcio.open(path, validate_hashes=True)][-1] == 799
    shard = os.path.join(path, "shard-000002.h5")
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) - 8)
        last = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(ChecksumMismatchError, match=re.escape("xxh3_64 mismatch: hashes.json says ")):
        hpcio.open(path, validate_hashes=True)
    old = write_hdf5(tmp_path / "old", n=100, hashes=[])
    assert len(hpcio.open(old, validate_hashes=True)) == 100  # no manifest: nothing recorded to check


def test_hdf5_without_recorded_counts_and_fields_is_refused(tmp_path):
    path = write_hdf5(tmp_path / "remote", hashes=[])
    _refused(path, tmp_path / "cache",
             "hashes.json records no sample count and fields for 10 of the 10 HDF5 files, so opening them would "
             "read every such file's layout through the shared tier, around the node cache; rewrite them with "
             "hpcio's HDF5 writer (hpcio convert SRC DST --to hdf5, or hpcio.open_writer(DST, format=\"hdf5\")), "
             f"which records both in hashes.json ({os.path.join(path, 'shard-000000.h5')})")
    path = write_hdf5(tmp_path / "partly")
    edit_manifest(path, lambda files: files["shard-000003.h5"].pop("fields"))
    _refused(path, tmp_path / "cache",
             "hashes.json records no sample count and fields for 1 of the 10 HDF5 files, so opening them would "
             "read every such file's layout through the shared tier, around the node cache; rewrite them with "
             "hpcio's HDF5 writer (hpcio convert SRC DST --to hdf5, or hpcio.open_writer(DST, format=\"hdf5\")), "
             f"which records both in hashes.json ({os.path.join(path, 'shard-000003.h5')})")


def test_a_single_hdf5_file_and_validate_hashes_are_refused(tmp_path):
    path = write_hdf5(tmp_path / "remote")
    _refused(path, tmp_path / "cache",
             "validate_hashes would hash every file through the shared tier at open; a node cache checks each "
             "file against the xxh3_64 hashes.json records as it fetches it: leave validate_hashes out "
             f"({path})", validate_hashes=True)
    single = os.path.join(path, "shard-000000.h5")
    _refused(single, tmp_path / "cache",
             f"a node cache mirrors a directory of HDF5 files: pass the directory, not a file ({single})")


def test_hdf5_without_a_manifest_still_reads_every_file_at_open(tmp_path):
    old = write_hdf5(tmp_path / "old", hashes=[])
    reader = hpcio.open(old).reader
    assert all(part.file is not None for part in reader.parts)  # as before: each opened at open
    new = write_hdf5(tmp_path / "new")
    assert [dict(s) for s in hpcio.open(old).shuffle(3)] == [dict(s) for s in hpcio.open(new).shuffle(3)]
    assert all(part.file is None for part in hpcio.open(new).reader.parts)
    # one file left out of the manifest: every file is opened at open, as without one
    edit_manifest(new, lambda files: files.pop("shard-000005.h5"))
    reader = hpcio.open(new).reader
    assert all(part.file is not None for part in reader.parts) and len(reader) == 800
