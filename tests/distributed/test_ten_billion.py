"""A dataset of 10^10 samples in 10^5 shards, read as one GPU with 8 DataLoader workers
would: only the shards the first batches read exist on disk (hard links of one real
shard), so opening or stat'ing any other one fails the test, and no worker holds an
order of 10^10 entries (it could not: 80 GB)."""

from __future__ import annotations

import json
import os

import pytest

import hpcio
from hpcio.distributed import consumer_order
from hpcio.formats.mds import write_compact_index

torch = pytest.importorskip("torch", reason="torch is the optional [torch] extra")
import hpcio.torch as ht  # noqa: E402

SHARDS, PER_SHARD, BATCH, WORKERS = 100_000, 100_000, 32, 8


@pytest.fixture(scope="module")
def ten_billion(tmp_path_factory):
    root = tmp_path_factory.mktemp("tenbillion")
    one = root / "one"
    with hpcio.open_writer(one, format="mds", columns={"id": "int"}, size_limit=1 << 30) as w:
        for i in range(PER_SHARD):
            w.write({"id": i})
    entry = json.loads((one / "index.json").read_text())["shards"][0]
    data = root / "data"
    data.mkdir()
    shards = []
    for k in range(SHARDS):
        e = dict(entry, raw_data=dict(entry["raw_data"], basename=f"shard.{k:05d}.mds"))
        shards.append(e)
    (data / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))
    # the compact index vouches for the counts, so no other shard is opened or stat'ed
    write_compact_index(data, check_files=False)
    # only the shards the first two batches of each worker read are present
    needed = set()
    for w in range(WORKERS):
        part = consumer_order(SHARDS * PER_SHARD, 0, 1, w, WORKERS, seed=7, batch_size=BATCH)
        needed |= set((part[: 2 * BATCH] // PER_SHARD).tolist())
    for k in sorted(needed):
        os.link(one / "shard.00000.mds", data / f"shard.{k:05d}.mds")
    return data


@pytest.mark.filterwarnings("ignore:This DataLoader will create 8 worker processes")
def test_one_gpu_with_eight_workers_reads_ten_billion_samples(ten_billion):
    ds = hpcio.open(ten_billion)
    assert len(ds) == 10**10
    data = ht.IterableDataset(ds, batch_size=BATCH, seed=7, context={"rank": 0, "world_size": 1})
    loader = ht.DataLoader(data, num_workers=WORKERS)
    got = []
    for step, batch in enumerate(loader):
        got.append(batch["id"].tolist())
        if step == 2 * WORKERS - 1:
            break
    expected = []
    for k in range(2):
        for w in range(WORKERS):
            part = consumer_order(10**10, 0, 1, w, WORKERS, seed=7, batch_size=BATCH)
            expected.append((part[k * BATCH : (k + 1) * BATCH] % PER_SHARD).tolist())
    assert got == expected
    state = loader.state_dict()
    assert state["position"] == 2 * WORKERS * BATCH and state["n"] == 10**10
