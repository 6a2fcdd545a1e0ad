"""PyTorch adapters: DataLoader workers, epochs, exact resume at a different world size."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is the optional [torch] extra")

import hpcio.torch as ht  # noqa: E402
from hpcio.distributed.split import epoch_order, split_indices  # noqa: E402


def ids_of(batches) -> list[int]:
    return [int(i) for b in batches for i in b["id"]]


def rank_datasets(make_dataset, n, world, cls=ht.IterableDataset, **kw):
    ds = make_dataset(n)
    return [cls(ds, context={"rank": r, "world_size": world}, **kw) for r in range(world)]


def test_iterable_in_process_follows_split_and_batches_with_one_call(make_dataset):
    ds = make_dataset(23)
    it = ht.IterableDataset(ds, batch_size=4, seed=3, context={"rank": 1, "world_size": 2})
    batches = list(it)
    expected = split_indices(23, 1, 2, seed=3, batch_size=4).tolist()
    assert ids_of(batches) == expected
    assert [len(b["id"]) for b in batches] == [4, 4, 3]
    assert ds.reader.batch_calls == 3
    assert batches[0]["text"][0] == f"sample {expected[0]}"


def test_dataloader_two_persistent_workers_cover_the_rank_part_each_epoch(make_dataset):
    n, b = 50, 3
    parts = rank_datasets(make_dataset, n, 2, batch_size=b, seed=11)
    loaders = [ht.DataLoader(p, num_workers=2, persistent_workers=True) for p in parts]
    for epoch in range(2):
        seen = []
        for r, loader in enumerate(loaders):
            got = ids_of(loader)
            assert len(got) == n // 4 * 2  # 2 workers x 12 samples, equal everywhere
            assert len(loader) == 2 * -(-(n // 4) // b)
            expected = [split_indices(n, r, 2, w, 2, seed=11, epoch=epoch, batch_size=b)
                        for w in range(2)]
            assert sorted(got) == sorted(np.concatenate(expected).tolist())
            seen += got
        order = epoch_order(n, 11, epoch)
        assert sorted(seen) == sorted(order[:48].tolist())  # the 2 last positions dropped
        assert all(loader.state_dict()["epoch"] == epoch + 1 for loader in loaders)
    # epoch 2's order differs from epoch 0's
    assert not np.array_equal(epoch_order(n, 11, 0), epoch_order(n, 11, 2))


def test_set_epoch_reaches_persistent_workers(make_dataset):
    it = ht.IterableDataset(make_dataset(20), batch_size=5, seed=2)
    loader = ht.DataLoader(it, num_workers=2, persistent_workers=True)
    list(loader)
    loader.set_epoch(7)
    got = ids_of(loader)
    expected = np.concatenate([split_indices(20, 0, 1, w, 2, seed=2, epoch=7, batch_size=5)
                               for w in range(2)])
    assert sorted(got) == sorted(expected.tolist())
    assert got[:5] == expected[:5].tolist()  # worker 0's first batch comes first


def consume(loader, batches):
    got = []
    for k, batch in enumerate(loader):
        got += [int(i) for i in batch["id"]]
        if k + 1 == batches:
            break
    return got


@pytest.mark.parametrize("workers_before, workers_after", [(2, 0), (0, 2)])
def test_resume_mid_epoch_at_a_different_world_size(make_dataset, workers_before, workers_after):
    n, b, seed = 97, 4, 5
    before = rank_datasets(make_dataset, n, 2, batch_size=b, seed=seed)
    consumed = []
    for p in before:  # every rank receives 3 batches, as DDP keeps them in step
        consumed += consume(ht.DataLoader(p, num_workers=workers_before), 3)
    states = [p.state_dict() for p in before]
    assert states[0] == states[1]
    assert states[0]["position"] == 3 * 2 * b == len(consumed)
    assert sorted(consumed) == sorted(epoch_order(n, seed, 0)[: len(consumed)].tolist())

    after = rank_datasets(make_dataset, n, 3, batch_size=b, seed=seed)
    rest = []
    for p in after:
        p.load_state_dict(states[0])
        rest += ids_of(ht.DataLoader(p, num_workers=workers_after))
    assert not set(rest) & set(consumed)  # no replays
    consumers = 3 * max(1, workers_after)
    usable = (n - len(consumed)) // consumers * consumers
    order = epoch_order(n, seed, 0)
    assert sorted(consumed + rest) == sorted(order[: len(consumed) + usable].tolist())
    assert after[0].state_dict()["epoch"] == 1 and after[0].state_dict()["position"] == 0


@pytest.mark.parametrize("persistent", [False, True])
def test_break_and_iterate_again_continues_without_replay(make_dataset, persistent):
    it = ht.IterableDataset(make_dataset(30), batch_size=2, seed=1)
    loader = ht.DataLoader(it, num_workers=2, persistent_workers=persistent)
    first = consume(loader, 5)
    second = ids_of(loader)
    assert not set(first) & set(second)
    assert sorted(first + second) == list(range(30))


def test_map_dataset_sampler_resume_and_getitems(make_dataset):
    n, b = 41, 5
    ds = make_dataset(n)
    parts = [ht.MapDataset(ds, batch_size=b, seed=4, context={"rank": r, "world_size": 2})
             for r in range(2)]
    consumed = []
    for p in parts:
        loader = ht.DataLoader(p, num_workers=2)
        assert len(loader) == -(-(n // 2) // b)
        consumed += consume(loader, 2)
    state = parts[0].state_dict()
    assert state["position"] == 2 * 2 * b
    single = ht.MapDataset(ds, batch_size=b, seed=4, context={"rank": 0, "world_size": 1})
    single.load_state_dict(state)
    calls = ds.reader.batch_calls  # counted in this process: no workers below
    batches = list(ht.DataLoader(single))
    rest = ids_of(batches)
    assert ds.reader.batch_calls - calls == len(batches) == 5  # one get_batch per batch
    order = epoch_order(n, 4, 0)
    assert sorted(consumed + rest) == sorted(order.tolist())
    assert single[3]["id"] == 3


def test_tensor_parallel_peers_receive_identical_batches(make_dataset):
    ds = make_dataset(40)
    got = [ids_of(ht.IterableDataset(ds, batch_size=3, context={"rank": r, "world_size": 4, "tp_size": 2}))
           for r in range(4)]
    assert got[0] == got[1] and got[2] == got[3]
    assert not set(got[0]) & set(got[2])


def test_pad_mode_gives_every_rank_the_same_count(make_dataset):
    parts = rank_datasets(make_dataset, 10, 3, batch_size=2, remainder="pad", shuffle=False)
    got = [ids_of(p) for p in parts]
    assert [len(g) for g in got] == [4, 4, 4]
    assert set(sum(got, [])) == set(range(10))


def test_block_shuffle_needs_shard_sizes_and_uses_them(make_dataset):
    ds = make_dataset(12)
    with pytest.raises(ValueError, match=r"shuffle='block' needs shard_sizes .* does not report shards"):
        ht.IterableDataset(ds, shuffle="block")
    sharded = make_dataset(12, shards=[6, 6])
    with pytest.raises(ValueError, match=r"shuffle='block' needs shard_sizes .*: this dataset is a view"):
        ht.IterableDataset(sharded.shuffle(seed=1), shuffle="block")
    for batch in ht.IterableDataset(sharded, shuffle="block", batch_size=6):
        assert len({int(i) // 6 for i in batch["id"]}) == 1  # shard sizes from the reader
    it = ht.IterableDataset(ds, shuffle="block", shard_sizes=[4, 4, 4], window=1, batch_size=4)
    for batch in it:
        assert len({int(i) // 4 for i in batch["id"]}) == 1  # one shard per batch


def test_state_from_another_dataset_is_rejected(make_dataset):
    it = ht.IterableDataset(make_dataset(10), seed=1)
    state = ht.IterableDataset(make_dataset(10), seed=2).state_dict()
    with pytest.raises(ValueError, match="state was saved with seed=2 but this dataset has seed=1"):
        it.load_state_dict(state)


def test_state_names_the_order_and_refuses_another(make_dataset):
    it = ht.IterableDataset(make_dataset(10), seed=1)
    state = it.state_dict()
    assert state["order"] == "feistel6-splitmix64-v1" and state["version"] == 2
    with pytest.raises(ValueError, match=r"^state was saved with order='numpy' but this dataset has "
                       r"order='feistel6-splitmix64-v1'; resuming would read a different order$"):
        it.load_state_dict({**state, "order": "numpy"})
    with pytest.raises(ValueError, match=r"^state was saved by an hpcio whose epoch orders were numpy "
                       r"permutations; this one computes them \(feistel6-splitmix64-v1\), so the saved "
                       r"position names other samples: restart the epoch \(set_epoch\) instead of "
                       r"resuming it$"):
        it.load_state_dict({"version": 1, "epoch": 0, "position": 4, "n": 10, "seed": 1,
                            "shuffle": "global", "remainder": "drop"})


def test_dataloader_argument_errors(make_dataset):
    it = ht.IterableDataset(make_dataset(10), batch_size=2)
    with pytest.raises(ValueError, match="leave the DataLoader's batch_size unset"):
        ht.DataLoader(it, batch_size=2)
    mp = ht.MapDataset(make_dataset(10), batch_size=2)
    with pytest.raises(ValueError, match="shuffle= is set by the MapDataset"):
        ht.DataLoader(mp, shuffle=True)
    with pytest.raises(TypeError, match="takes an hpcio.torch.IterableDataset or MapDataset"):
        ht.DataLoader([1, 2])


def test_pipeline_dataset_splits_over_workers_and_epochs(make_dataset):
    from hpcio.pipeline import Pipeline

    pipe = Pipeline(make_dataset(30), seed=8, context={"rank": 1, "world_size": 2}).batch(2)
    pds = ht.PipelineDataset(pipe)
    loader = torch.utils.data.DataLoader(pds, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in (0, 3):
        pds.set_epoch(epoch)
        got = sorted(int(s["id"]) for b in loader for s in b)
        expected = [split_indices(30, 1, 2, w, 2, seed=8, epoch=epoch) for w in range(2)]
        assert got == sorted(np.concatenate(expected).tolist())
