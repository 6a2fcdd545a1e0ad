"""MDS batches read across shards by one compiled call: the same bytes whatever the
shard count and read path (mapping or planned reads), and errors that name the shard
file and the sample."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest

import hpcio
from hpcio.distributed import GlobalOrder
from hpcio.errors import ShardChangedError, TruncatedShardError
from tests.conftest import child_env

N = 240
COLUMNS = {"id": "int", "text": "str", "meta": "json", "blob": "bytes", "images": "list[bytes]"}


def _sample(i: int) -> dict:
    rng = random.Random(i)
    return {"id": i, "text": "é" * rng.randrange(0, 40) + str(i), "meta": {"n": i, "tags": ["a"] * (i % 3)},
            "blob": rng.randbytes(rng.randrange(0, 3000)),
            "images": [rng.randbytes(rng.randrange(1, 2000)) for _ in range(i % 4)]}


def _write(path, shards: int) -> str:
    total = sum(len(s["blob"]) + sum(map(len, s["images"])) + len(s["text"].encode()) + 60
                for s in map(_sample, range(N)))
    with hpcio.open_writer(path, format="mds", columns=COLUMNS, size_limit=total // shards + 1) as w:
        for i in range(N):
            w.write(_sample(i))
    return str(path)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("batches")
    return {k: _write(root / f"x{k}", k) for k in (1, 4, 16)}


@pytest.mark.parametrize("read_path", ["map", "planned", "auto"])
@pytest.mark.parametrize("shards", [1, 4, 16])
def test_batches_equal_samples_whatever_the_shards_and_read_path(datasets, shards, read_path):
    expected = [_sample(i) for i in range(N)]
    with hpcio.open(datasets[shards], read_path=read_path) as ds:
        assert shards == 1 or len(ds.reader.shards) >= shards
        order = np.random.default_rng(shards).permutation(N)
        for lo in range(0, N, 50):
            got = ds.get_batch(order[lo : lo + 50])
            assert got == [expected[i] for i in order[lo : lo + 50]]
        assert list(ds.shuffle(seed=3)) == [expected[i] for i in GlobalOrder(N, seed=3)]
        assert ds.get_batch([5, 5, N - 1, 0]) == [expected[5], expected[5], expected[N - 1], expected[0]]


def test_batch_path_serves_views_and_columns_alike(datasets):
    with hpcio.open(datasets[16], read_path="planned") as ds:
        ids = [7, 200, 3, 7]
        cols = ds.reader.read_columns(np.array(ids), ["text", "blob"])
        assert cols["text"].to_pylist() == [_sample(i)["text"] for i in ids]
        assert [bytes(b) for b in cols["blob"].to_pylist()] == [_sample(i)["blob"] for i in ids]
        assert ds.reader.read_field(np.array(ids), "id") == ids


def test_read_path_is_checked(datasets):
    with pytest.raises(hpcio.HpcioError, match="read_path must be one of auto, map, planned"):
        hpcio.open(datasets[1], read_path="mmap")


_CHILD = r"""
import os, sys
import numpy as np
import hpcio

path, read_path = sys.argv[1:]
ds = hpcio.open(path, read_path=read_path)
n = len(ds)
ds.get_batch(np.arange(n))  # every shard open
shards = ds.reader.shards
victim = shards[1]
first = sum(s.samples for s in shards[:1])
os.truncate(os.path.join(path, victim.file_basename), 4096)
try:
    ds.get_batch([0, first + victim.samples - 1, first])
except hpcio.errors.ShardChangedError as exc:
    print(exc.path, exc.sample)
"""


@pytest.mark.parametrize("read_path", ["map", "planned"])
def test_shrunk_shard_names_shard_and_sample(tmp_path, read_path):
    path = _write(tmp_path / "ds", 4)
    proc = subprocess.run([sys.executable, "-c", _CHILD, path, read_path], capture_output=True, text=True,
                          env=child_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    with hpcio.open(path) as ds:
        shards = ds.reader.shards
    shard_path, sample = proc.stdout.split()
    assert shard_path == os.path.join(path, shards[1].file_basename)
    assert int(sample) == shards[0].samples + shards[1].samples - 1


class _RacingTable:
    """A ShardTable whose size check misses a truncation (the file shrank between the
    check and the read): the planned read itself must report it."""

    def __init__(self, table):
        self._table = table

    def shrunk(self, shards):
        return None

    def __getattr__(self, name):
        return getattr(self._table, name)


def test_planned_read_of_truncated_shard_names_shard_and_sample(tmp_path):
    path = _write(tmp_path / "ds", 4)
    with hpcio.open(path, read_path="planned") as ds:
        reader = ds.reader
        ds.get_batch(np.arange(len(ds)))
        info = reader.shards[2]
        first = sum(s.samples for s in reader.shards[:2])
        shard_file = os.path.join(path, info.file_basename)
        # keep the header and offset table, lose the records' bytes
        os.truncate(shard_file, 8 + 4 * info.samples + 200)
        reader.cache.table = _RacingTable(reader.cache.table)
        last = first + info.samples - 1
        with pytest.raises(TruncatedShardError) as caught:
            ds.get_batch([0, last])
        assert caught.value.path == shard_file
        assert caught.value.sample == last
        assert not isinstance(caught.value, ShardChangedError)


@pytest.mark.parametrize("read_path", ["map", "planned"])
def test_batches_after_drop_pages_read_the_reopened_shards(datasets, tmp_path, read_path):
    # drop_pages closes the mapped shards; their descriptors are reused by the next open,
    # so a batch table still holding them would read (or size-check) another file.
    expected = [_sample(i) for i in range(N)]
    with hpcio.open(datasets[16], read_path=read_path) as ds:
        order = np.random.default_rng(0).permutation(N)
        assert ds.get_batch(order[:60]) == [expected[i] for i in order[:60]]
        ds.reader.drop_pages()
        others = [open(tmp_path / f"other{k}", "wb+") for k in range(32)]
        try:
            for f in others:
                f.write(b"x" * 7)
                f.flush()
            assert ds.get_batch(order[60:]) == [expected[i] for i in order[60:]]
        finally:
            for f in others:
                f.close()
