"""End to end over real MDS shards: DataLoader workers, resume, pipeline cache, mpiexec."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hpcio
from hpcio.distributed import epoch_order, split_indices
from hpcio.pipeline import Pipeline

torch = pytest.importorskip("torch", reason="torch is the optional [torch] extra")
from test_mpi import run_mpi  # noqa: E402

import hpcio.torch as ht  # noqa: E402

N = 150


def square(sample):
    return {"id": int(sample["id"]), "sq": int(sample["id"]) ** 2}


@pytest.fixture(scope="module")
def mds_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("mds") / "ds"
    with hpcio.open_writer(path, format="mds", columns={"id": "int", "text": "str"},
                           size_limit=600) as writer:
        for i in range(N):
            writer.write({"id": i, "text": f"sample {i}" * (1 + i % 3)})
    return path


def shard_sizes(path):
    with open(path / "index.json") as f:
        return [shard["samples"] for shard in json.load(f)["shards"]]


def test_fixture_has_several_shards(mds_dir):
    sizes = shard_sizes(mds_dir)
    assert len(sizes) > 3 and sum(sizes) == N


def test_dataloader_workers_and_resume_over_mds(mds_dir):
    ds = hpcio.open(mds_dir)
    kw = {"batch_size": 4, "seed": 3, "collate_fn": list}
    before = [ht.IterableDataset(ds, context={"rank": r, "world_size": 2}, **kw) for r in range(2)]
    consumed = []
    for p in before:
        for k, batch in enumerate(ht.DataLoader(p, num_workers=2)):
            for s in batch:
                assert s["text"] == f"sample {s['id']}" * (1 + s["id"] % 3)
                consumed.append(int(s["id"]))
            if k == 4:
                break
    state = before[0].state_dict()
    assert state["position"] == len(consumed) == 5 * 2 * 4
    after = [ht.IterableDataset(ds, context={"rank": r, "world_size": 3}, **kw) for r in range(3)]
    rest = []
    for p in after:
        p.load_state_dict(state)
        rest += [int(s["id"]) for batch in ht.DataLoader(p, num_workers=2) for s in batch]
    usable = (N - len(consumed)) // 6 * 6
    assert not set(rest) & set(consumed)
    assert sorted(consumed + rest) == sorted(epoch_order(N, 3, 0)[: len(consumed) + usable].tolist())


def test_block_shuffle_reads_whole_mds_shards(mds_dir):
    sizes = shard_sizes(mds_dir)
    it = ht.IterableDataset(hpcio.open(mds_dir), shuffle="block", shard_sizes=sizes, window=1,
                            batch_size=1, collate_fn=list)
    got = [int(b[0]["id"]) for b in it]
    shard_of = np.repeat(np.arange(len(sizes)), sizes)[got]
    assert np.count_nonzero(np.diff(shard_of)) == len(sizes) - 1  # each shard read in one run


def test_pipeline_cache_as_mds(mds_dir, tmp_path):
    pipe = Pipeline(hpcio.open(mds_dir).select(["id"]), seed=1).map(square).cache(tmp_path / "c")
    first = list(pipe)
    (key,) = [p for p in (tmp_path / "c").iterdir()]
    part = hpcio.open(key / "part-00000-of-00001")
    assert part.reader.__class__.__module__ == "hpcio.formats.mds"
    assert sorted(int(s["id"]) for s in part) == list(range(N))
    assert all(int(s["sq"]) == int(s["id"]) ** 2 for s in first)
    assert [int(s["id"]) for s in first] == split_indices(N, seed=1).tolist()


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2])
def test_mpiexec_over_mds(mds_dir, nprocs):
    out = run_mpi(nprocs, str(N), "11", str(mds_dir))
    assert f"OK size={nprocs} per_rank={N // nprocs} mine={N // nprocs}" in out
    assert f"CACHE OK size={nprocs} parts={nprocs}" in out
