"""hpcio.stage gives a staged MDS dataset an up-to-date compact index (index.hpcio)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct

import pytest

import hpcio
from hpcio.formats import mds
from hpcio.staging import read_manifest, stage, unstage

HERE = os.path.dirname(os.path.abspath(__file__))
STREAMING = os.path.normpath(os.path.join(HERE, os.pardir, "fixtures", "mds", "streaming-none"))
NO_TIERS: dict = {}


def run(src, dst):
    return stage(src, dst, threads=2, tiers=NO_TIERS, progress=False)


def samples(path) -> list:
    with mds.Reader(path) as reader:
        return [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in s.items()} for s in reader.iter_range()]


def test_a_dataset_without_one_gets_one(tmp_path):
    src = tmp_path / "work" / "ds"
    shutil.copytree(STREAMING, src)
    dst = tmp_path / "scratch" / "ds"
    result = run(src, dst)
    assert result.indexed == [str(dst / "index.hpcio")]
    assert not (src / "index.hpcio").exists()
    with mds.Reader(dst) as reader:
        assert reader.compact and reader.shards.matched == "stat"
    assert samples(dst) == samples(src)
    listed = {rec.path for rec in read_manifest(dst).files}
    assert "index.hpcio" in listed
    again = run(src, dst)  # resumed: the compact index still matches index.json, kept
    assert again.copied == [] and again.indexed == []
    with mds.Reader(dst) as reader:
        assert reader.compact and samples(dst) == samples(src)
    unstage(dst)
    assert not dst.exists()


def test_a_copied_one_is_kept_as_the_source_s_bytes(tmp_path):
    """A staged copy holds the source's files byte for byte: its compact index is not
    restamped, and its readers check index.json's digest (one read per process)."""
    src = tmp_path / "work" / "ds"
    with hpcio.open_writer(src, format="mds", columns={"id": "int"}, size_limit=200) as w:
        for i in range(50):
            w.write({"id": i})
    dst = tmp_path / "scratch" / "ds"
    result = run(src, dst)
    assert result.indexed == []
    assert (dst / "index.hpcio").read_bytes() == (src / "index.hpcio").read_bytes()
    with mds.Reader(dst) as reader:
        assert reader.compact and reader.shards.matched == "digest"
        assert [s["id"] for s in reader.iter_range()] == list(range(50))
    again = run(src, dst)
    assert "index.hpcio" in again.kept and again.copied == [] and again.recopied == []


def test_shards_that_disagree_with_index_json_leave_it_without_one(tmp_path):
    src = tmp_path / "work" / "ds"
    shutil.copytree(STREAMING, src)
    index = json.loads((src / "index.json").read_text())
    for entry in index["shards"]:  # no hashes: the copy is verified by its own digests only
        entry["raw_data"].pop("hashes", None)
    (src / "index.json").write_text(json.dumps(index, sort_keys=True))
    victim = src / "shard.00001.mds"
    victim.write_bytes(struct.pack("<I", 1) + victim.read_bytes()[4:])
    dst = tmp_path / "scratch" / "ds"
    with pytest.warns(UserWarning, match=re.escape(
            f"staged MDS dataset {dst} keeps no compact index: shard header says 1 samples, index.json says "
            f"{index['shards'][1]['samples']} ({dst / 'shard.00001.mds'}, byte offset 0)")):
        result = run(src, dst)
    assert result.indexed == [] and result.manifest and not (dst / "index.hpcio").exists()


def test_a_dataset_without_shards_gets_none(tmp_path):
    src = tmp_path / "work" / "ds"
    with hpcio.open_writer(src, format="mds", columns={"id": "int"}):
        pass
    os.remove(src / "index.hpcio")
    dst = tmp_path / "scratch" / "ds"
    assert run(src, dst).indexed == [] and not (dst / "index.hpcio").exists()
