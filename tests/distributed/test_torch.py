"""PyTorch adapters: DataLoader workers, epochs, exact resume at a different world size."""

from __future__ import annotations

import re

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


# --- mixtures, provenance and skip ranges ----------------------------------------------------
import hpcio  # noqa: E402
from conftest import ListReader  # noqa: E402
from hpcio.dataset import Dataset  # noqa: E402

MIX_WEIGHTS = {"web": 0.5, "code": 0.47, "math": 0.03}


def tagged(name, n):
    reader = ListReader(n, path=f"memory://{name}")
    reader.samples = [{"id": i, "text": f"{name} {i}"} for i in range(n)]
    return Dataset(reader)


@pytest.fixture
def mixture_sources():
    """Two sources of 400 samples and one 20 times smaller."""
    return {"web": tagged("web", 400), "code": tagged("code", 400), "math": tagged("math", 20)}


def served(batches) -> list[tuple[str, int, int]]:
    """(source, index, position) of every sample of ``batches`` (provenance on)."""
    return [(s, int(i), int(p)) for b in batches
            for s, i, p in zip(b["__source__"], b["__index__"], b["__position__"])]


def run(parts, workers, batches=None):
    """What each rank's DataLoader serves: its batches, ``batches`` of them when given."""
    out = []
    for p in parts:
        loader = ht.DataLoader(p, num_workers=workers)
        got = []
        for k, batch in enumerate(loader):
            got.append(batch)
            if batches is not None and k + 1 == batches:
                break
        out.append(got)
    return out


def mixture_parts(mixture, world, cls=ht.IterableDataset, batch_size=16, **kw):
    return [cls(mixture, batch_size=batch_size, provenance=True, context={"rank": r, "world_size": world},
                **kw) for r in range(world)]


def check_served(mixture, records, sources, size):
    """``records`` are exactly the mixture's positions [0, size), each its located sample."""
    assert sorted(p for _, _, p in records) == list(range(size))  # nothing lost, nothing twice
    by_position = {p: (s, i) for s, i, p in records}
    names, index = mixture.locate(np.arange(size))
    assert [by_position[p] for p in range(size)] == list(zip(names, index.tolist()))


@pytest.mark.parametrize("cls", [ht.IterableDataset, ht.MapDataset])
def test_mixture_steps_are_exact_and_resume_on_three_ranks(mixture_sources, cls):
    # 816 positions per epoch: 96 served on 2 ranks x 2 workers, then 720 = 6 x 120 on 3 x 2
    m = hpcio.mix(mixture_sources, MIX_WEIGHTS, block=32, seed=7, epoch_size=816)
    before = mixture_parts(m, 2, cls)
    got = run(before, workers=2, batches=3)
    # a step is one batch on every rank: 2 x 16 positions, one block of [16, 15, 1]
    for step in range(3):
        names = [s for rank in got for s in rank[step]["__source__"]]
        assert [names.count(k) for k in ("web", "code", "math")] == [16, 15, 1]
    first = [r for rank in got for r in served(rank)]
    states = [p.state_dict() for p in before]
    assert states[0] == states[1]
    assert states[0]["position"] == 96 and states[0]["shuffle"] == "mixture"
    assert states[0]["mixture"] == m.schedule()
    after = mixture_parts(m, 3, cls)
    for p in after:
        p.load_state_dict(states[0])
    rest = [r for rank in run(after, workers=2) for r in served(rank)]
    check_served(m, first + rest, mixture_sources, 816)
    for s, i, _ in first + rest:  # the sample is the source's sample at __index__
        assert mixture_sources[s][i]["id"] == i
    counts = {k: sum(1 for s, _, _ in first + rest if s == k) for k in MIX_WEIGHTS}
    assert counts == m.served(816) == {"web": 409, "code": 381, "math": 26}  # math up-sampled
    assert after[0].state_dict()["epoch"] == 1


def test_mixture_epoch_two_reads_the_next_stretch_of_the_stream(mixture_sources):
    m = hpcio.mix(mixture_sources, MIX_WEIGHTS, block=32, seed=7, epoch_size=64)
    it = ht.IterableDataset(m, batch_size=16, provenance=True, epoch=2, collate_fn=list)
    got = [s for b in it for s in b]
    assert [s["__position__"] for s in got] == list(range(64))
    names, index = m.locate(np.arange(128, 192))
    assert [(s["__source__"], s["__index__"]) for s in got] == list(zip(names, index.tolist()))
    assert [s["text"] for s in got] == [f"{k} {i}" for k, i in zip(names, index.tolist())]


def test_mixture_reweighted_mid_epoch_serves_each_position_once(mixture_sources):
    m = hpcio.mix(mixture_sources, MIX_WEIGHTS, block=32, seed=7, epoch_size=816)
    before = mixture_parts(m, 2)
    first = [r for rank in run(before, workers=2, batches=3) for r in served(rank)]
    state = before[0].state_dict()
    reweighted = m.with_weights({"web": 0.25, "code": 0.25, "math": 0.5}, at=128)
    after = mixture_parts(reweighted, 3, batch_size=10)  # another batch size too
    for p in after:
        p.load_state_dict(state)
    rest = [r for rank in run(after, workers=2) for r in served(rank)]
    check_served(reweighted, first + rest, mixture_sources, 816)
    counts = {k: sum(1 for s, _, _ in first + rest if s == k) for k in MIX_WEIGHTS}
    assert counts == reweighted.served(816) == {"web": 237, "code": 232, "math": 347}
    assert after[0].state_dict()["mixture"]["segments"][1] == {
        "at": 128, "block": 32, "weights": {"web": 0.25, "code": 0.25, "math": 0.5}}
    # math's passes of 20 never repeat a sample: the served math draws, in position order
    math = [i for s, i, p in sorted(first + rest, key=lambda r: r[2]) if s == "math"]
    for lo in range(0, len(math) - 20, 20):
        assert sorted(math[lo : lo + 20]) == list(range(20))


def test_mixture_source_added_mid_run(mixture_sources):
    m = hpcio.mix(mixture_sources, MIX_WEIGHTS, block=32, seed=7, epoch_size=816)
    before = mixture_parts(m, 2)
    first = [r for rank in run(before, workers=0, batches=3) for r in served(rank)]
    state = before[0].state_dict()
    books = tagged("books", 50)
    grown = m.with_weights({**MIX_WEIGHTS, "books": 0.25}, at=96, sources={"books": books})
    assert grown.block_counts(96) == {"web": 13, "code": 12, "math": 1, "books": 6}
    after = mixture_parts(grown, 3)
    for p in after:
        p.load_state_dict(state)
    rest = [r for rank in run(after, workers=2) for r in served(rank)]
    check_served(grown, first + rest, {**mixture_sources, "books": books}, 816)
    assert sum(1 for s, _, _ in rest if s == "books") == grown.served(816)["books"] == 136


def test_mixture_resume_refuses_a_schedule_changed_before_the_position(mixture_sources):
    m = hpcio.mix(mixture_sources, MIX_WEIGHTS, block=32, seed=7, epoch_size=816)
    before = mixture_parts(m, 2)
    run(before, workers=0, batches=3)
    state = before[0].state_dict()
    early = m.with_weights({"web": 1}, at=64)
    with pytest.raises(ValueError, match=r"^the mixture segment at 64 is in only one of the saved state and "
                       r"this mixture, before stream position 96; rebuild the mixture with "
                       r"hpcio\.mixture\.from_schedule\(sources, state\['mixture'\]\), then change "
                       r"weights at 96 or later$"):
        mixture_parts(early, 3)[0].load_state_dict(state)
    reweighted = hpcio.mix(mixture_sources, {"web": 1, "code": 1, "math": 1}, block=32, seed=7, epoch_size=816)
    with pytest.raises(ValueError, match=r"^state was saved with mixture segment 0 = \{'at': 0, 'block': 32, "
                       r"'weights': \{'web': 0\.5, 'code': 0\.47, 'math': 0\.03\}\} but this one has \{'at': 0, "
                       r"'block': 32, 'weights': \{'web': 1\.0, 'code': 1\.0, 'math': 1\.0\}\}, before stream "
                       r"position 96; rebuild"):
        mixture_parts(reweighted, 3)[0].load_state_dict(state)
    other = hpcio.mix(mixture_sources, MIX_WEIGHTS, block=32, seed=8, epoch_size=816)
    with pytest.raises(ValueError, match=r"^state was saved with seed=7 but this dataset has seed=8; "
                       r"resuming would read a different order$"):
        mixture_parts(other, 3)[0].load_state_dict(state)
    with pytest.raises(ValueError, match=r"^state was saved with shuffle='mixture' but this dataset has "
                       r"shuffle='global'; resuming would read a different order$"):
        ht.IterableDataset(tagged("x", 816), seed=7).load_state_dict(state)
    rebuilt = hpcio.mixture.from_schedule(mixture_sources, state["mixture"])
    mixture_parts(rebuilt, 3)[0].load_state_dict(state)  # the same schedule: accepted


def test_mixture_refuses_other_shuffle_modes(mixture_sources):
    m = hpcio.mix(mixture_sources, MIX_WEIGHTS, block=32)
    for shuffle in (False, "global", "block"):
        with pytest.raises(ValueError, match=re.escape(
                "a mixture is read in its own order, epoch by epoch: leave shuffle=True (the "
                f"default), got shuffle={shuffle!r}; to reorder its positions, pass a view such as "
                "mixture[:]")):
            ht.IterableDataset(m, shuffle=shuffle)
    ht.IterableDataset(m[:], shuffle="global")  # a view is an ordinary dataset
    with pytest.raises(ValueError, match=r"^a mixture's order is keyed by its own seed \(0, given to "
                       r"hpcio\.mix\); leave the adapter's seed unset, got seed=3$"):
        ht.MapDataset(m, seed=3)


@pytest.mark.parametrize("cls", [ht.IterableDataset, ht.MapDataset])
def test_provenance_names_the_dataset_index_and_position(make_dataset, cls):
    ds = make_dataset(23).shuffle(seed=9)  # a view: __index__ is the view's index
    parts = [cls(ds, batch_size=4, seed=3, provenance=True, context={"rank": r, "world_size": 2})
             for r in range(2)]
    records = []
    for _p, batches in zip(parts, run(parts, workers=2)):
        for b in batches:
            assert b["__source__"] == ["memory://list"] * len(b["id"])
            for sample_id, index in zip(b["id"].tolist(), b["__index__"].tolist()):
                assert ds[index]["id"] == sample_id
        records += served(batches)
    order = epoch_order(23, 3, 0)
    consumers = 4 if cls is ht.IterableDataset else 2  # a MapDataset's sampler splits by rank only
    assert sorted(p for _, _, p in records) == list(range(23 // consumers * consumers))
    assert all(order[p] == i for _, i, p in records)


def test_skipped_range_is_never_served_and_counts_stay_equal(make_dataset):
    n = 40
    ds = make_dataset(n)
    parts = [ht.IterableDataset(ds, batch_size=4, seed=3, provenance=True, skip=[(5, 12), (30, 31)],
                                context={"rank": r, "world_size": 2}) for r in range(2)]
    got = [served(b) for b in run(parts, workers=2)]
    assert [len(g) for g in got] == [16, 16]  # 32 positions left, 8 per consumer
    positions = sorted(p for g in got for _, _, p in g)
    assert positions == [p for p in range(n) if not (5 <= p < 12 or p == 30)]
    order = epoch_order(n, 3, 0)
    assert all(order[p] == i for g in got for _, i, p in g)
    assert parts[0].state_dict()["skip"] == [[5, 12], [30, 31]]


def test_skip_ranges_in_later_epochs_are_stream_positions(make_dataset):
    it = ht.IterableDataset(make_dataset(10), batch_size=2, shuffle=False, provenance=True,
                            skip=[(8, 13)], collate_fn=list)
    assert [s["__position__"] for b in it for s in b] == list(range(8))
    assert [s["__position__"] for b in it for s in b] == list(range(3, 10))  # epoch 1: 10..12 skipped
    assert it.state_dict()["epoch"] == 2


def test_skip_is_checked_on_load_and_may_grow_after_the_position(make_dataset):
    ds = make_dataset(40)
    first = ht.IterableDataset(ds, batch_size=4, seed=3, skip=[(30, 32)])
    loader = ht.DataLoader(first)
    consume(loader, 3)
    state = first.state_dict()
    assert state["position"] == 12 and state["skip"] == [[30, 32]]
    with pytest.raises(ValueError, match=r"^state was saved with skip=\[\[30, 32\]\] but this dataset has "
                       r"skip=\[\]: a skipped range cannot be read again$"):
        ht.IterableDataset(ds, batch_size=4, seed=3).load_state_dict(state)
    with pytest.raises(ValueError, match=r"^skip range \[10, 14\] starts before stream position 12, where "
                       r"the saved state stopped: a range must start at or after it$"):
        ht.IterableDataset(ds, batch_size=4, seed=3, skip=[(10, 14), (30, 32)]).load_state_dict(state)
    grown = ht.IterableDataset(ds, batch_size=4, seed=3, provenance=True, skip=[(12, 20), (30, 32)],
                               collate_fn=list)
    grown.load_state_dict(state)  # the loss-spike case: skip what follows the checkpoint
    assert [s["__position__"] for b in grown for s in b] == list(range(20, 30)) + list(range(32, 40))
    with pytest.raises(ValueError, match=r"^a skip range is \(start, end\) with 0 <= start <= end, got \(5, 2\)$"):
        ht.IterableDataset(ds, skip=[(5, 2)])
    with pytest.raises(ValueError, match=r"^skip takes \(start, end\) pairs of positions, got 7$"):
        ht.IterableDataset(ds, skip=[7])
