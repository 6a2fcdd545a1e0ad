"""A count a manifest declares is trusted only where the file can hold it."""

import json

import pytest

import hpcio


@pytest.mark.parametrize("declared", [0, 10**15, -1])
def test_a_webdataset_count_the_tar_cannot_hold_is_not_trusted(tmp_path, declared):
    path = tmp_path / "w"
    with hpcio.open_writer(str(path), format="webdataset", max_count=5) as w:
        for i in range(12):
            w.write({"__key__": f"k{i}", "txt": f"t{i}".encode()})
    manifest = json.loads((path / "hashes.json").read_text())
    manifest["files"]["shard-000001.tar"]["samples"] = declared
    (path / "hashes.json").write_text(json.dumps(manifest))
    ds = hpcio.open(str(path), include_key=True)
    assert len(ds) == 12  # the shard was scanned, not believed
    assert sorted(s["__key__"] for s in ds.shuffle(1)) == sorted(f"k{i}" for i in range(12))


def test_a_plausible_count_still_spares_the_scan(tmp_path):
    path = tmp_path / "w"
    with hpcio.open_writer(str(path), format="webdataset", max_count=5) as w:
        for i in range(12):
            w.write({"__key__": f"k{i}", "txt": f"t{i}".encode()})
    ds = hpcio.open(str(path))
    assert [s.recorded for s in ds.reader.shards] == [5, 5, 2]
