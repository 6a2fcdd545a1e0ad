"""A reader never mixes two versions of a staged dataset: staged again under it, it keeps
reading the shards it has open from the old version and refuses to open one more."""

from __future__ import annotations

import shutil

import pytest

import hpcio
from hpcio.errors import DatasetChangedError
from hpcio.staging import stage

NO_TIERS: dict = {}


OPTIONS = {"mds": {"size_limit": 1 << 12}, "webdataset": {"max_count": 20}, "msgpack": {"max_count": 20},
           "parquet": {"max_count": 20, "row_group_size": 10}}


def write_version(path, tag: bytes, fmt: str = "mds"):
    """A dataset of several files whose every sample holds ``tag``: two versions written
    with different tags have the same sizes."""
    shutil.rmtree(path, ignore_errors=True)
    with hpcio.open_writer(path, format=fmt, **OPTIONS[fmt]) as w:
        for i in range(64):
            w.write({"id": i, "tag": tag * 100})


@pytest.mark.parametrize("fmt", sorted(OPTIONS))
def test_a_reader_keeps_the_old_version_or_refuses_to_mix(tmp_path, fmt):
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_version(src, b"A", fmt)
    stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    ds = hpcio.open(dst)
    assert len(ds.reader.shard_sizes()) >= 2
    assert ds[0]["tag"] == b"A" * 100  # opens the first file
    write_version(src, b"B", fmt)  # a new version, every file the same size
    stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    assert ds[1]["tag"] == b"A" * 100  # the first file is open: still the old version, whole
    with pytest.raises(DatasetChangedError) as info:
        ds[len(ds) - 1]  # the last file, not opened before the new version landed
    assert str(info.value).startswith(
        "the dataset was staged again since this reader opened it: this shard may be of the new version and "
        f"the samples read so far of the old one; open the dataset again to read the new version ({dst}")
    assert {s["tag"] for s in hpcio.open(dst)} == {b"B" * 100}  # opened again: the new version, whole


def test_a_dataset_being_staged_is_refused_at_open(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_version(src, b"A")
    stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    (dst / ".hpcio-manifest.json").rename(tmp_path / "manifest")  # as a staging run does first
    (dst / ".hpcio-journal.0.jsonl").write_text("")
    with pytest.raises(DatasetChangedError, match=r"^the dataset is being staged, or a staging run stopped "
                                                  r"part-way \(a journal, no manifest\): wait for it to end, or "
                                                  r"run the same hpcio stage again to finish it"):
        hpcio.open(dst)


def test_a_dataset_that_was_never_staged_is_read_as_it_is(tmp_path):
    path = tmp_path / "plain"
    write_version(path, b"A")
    ds = hpcio.open(path)
    assert ds[0]["tag"] == b"A" * 100
    write_version(path, b"B")
    assert ds[len(ds) - 1]["tag"] == b"B" * 100  # no manifest, no version to keep
