"""Pipeline checkpoints: stopped mid-epoch on some ranks, resumed on others."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import hpcio.torch as ht  # noqa: E402
from hpcio.errors import UsageError  # noqa: E402
from hpcio.pipeline import Pipeline  # noqa: E402


def tokens_kept(sample):
    """Tokens as many as the text's characters, keeping the provenance fields."""
    return {"tokens": np.arange(len(sample["text"]), dtype=np.int64),
            **{k: v for k, v in sample.items() if k.startswith("__")}}


BUILD = {
    "packed": lambda ds, **kw: Pipeline(ds, seed=4, plan_window=50, provenance=True, **kw)
    .shuffle(16).map(tokens_kept).pack(32, eos=-1, lengths="text").batch(2),
    "bucketed": lambda ds, **kw: Pipeline(ds, seed=4, plan_window=50, provenance=True, **kw)
    .map(tokens_kept).batch(max_tokens=40, token_field="tokens", lengths="text", buckets=2),
    "counted": lambda ds, **kw: Pipeline(ds, seed=4, provenance=True, **kw).batch(3),
}


def positions(item):
    if isinstance(item, dict):
        return list(item["__position__"])
    return [p for x in item for p in (x["__position__"] if "cu_seqlens" in x else [x["__position__"]])]


def loaders(kind, ds, world, workers):
    out = []
    for r in range(world):
        data = ht.PipelineDataset(BUILD[kind](ds, context={"rank": r, "world_size": world}))
        out.append((data, ht.DataLoader(data, num_workers=workers)))
    return out


def run(pairs, steps=None):
    """Every rank takes ``steps`` steps (all of the epoch when None), in step."""
    got = []
    for _data, loader in pairs:
        got.append([positions(b) for b in itertools.islice(loader, steps)])
    assert len({len(g) for g in got}) == 1  # ranks in step
    return [p for g in got for b in g for p in b]


@pytest.mark.parametrize("kind", sorted(BUILD))
@pytest.mark.parametrize("workers", [0, 2])
def test_stopped_on_four_ranks_resumed_on_three_reads_every_sample_once(make_dataset, kind, workers):
    ds = make_dataset(300)
    first = loaders(kind, ds, 4, workers)
    before = run(first, steps=3)
    states = [data.state_dict() for data, _ in first]
    assert all(s == states[0] for s in states)  # the same global state on every rank
    state = states[0]
    assert state["epoch"] == 0 and len(repr(state)) < 2000
    second = loaders(kind, ds, 3, 0)
    for data, _ in second:
        data.load_state_dict(state)
    after = run(second)
    seen = before + after
    assert len(seen) == len(set(seen))  # nothing read twice
    if kind == "counted":  # the remainder: fewer than 3 of the positions left
        assert 300 - len(seen) < 3 * 3
    else:  # the remainder: fewer than a round of 3 groups of the sequence left
        plan = second[0][0].pipeline.plan(second[0][0].context())
        groups = list(plan.groups())
        left = len(groups) - state["position"]
        rest = {int(wp[o]) for wp, g in groups[len(groups) - left % 3:]
                for o in (g.tolist() if isinstance(g, np.ndarray) else [x for row in g for x in row[:, 0].tolist()])}
        assert sorted(set(seen) | rest) == list(range(300))
    # the epoch ran out: the next state starts epoch 1
    assert second[0][0].state_dict()["epoch"] == 1


def test_a_state_names_what_it_was_saved_with(make_dataset):
    ds = make_dataset(60)
    data = ht.PipelineDataset(BUILD["packed"](ds))
    other = ht.PipelineDataset(BUILD["bucketed"](ds))
    with pytest.raises(ValueError, match=r"^state was saved with policy='planned' but this pipeline has "
                       r"policy='counted'; resuming would read a different sequence$"):
        ht.PipelineDataset(BUILD["counted"](ds)).load_state_dict(data.state_dict())
    with pytest.raises(ValueError, match=r"^state was saved with stages=\['shuffle', 'map', 'pack', 'batch'\] "
                       r"but this pipeline has stages=\['map', 'batch'\]"):
        other.load_state_dict(data.state_dict())


def fixed_loaders(ds, world, workers, select=None):
    """A steps_per_epoch pipeline whose consumers read at different speeds: a budget
    batch over texts of varying length, after a position shuffle (and a select)."""
    out = []
    for r in range(world):
        pipe = Pipeline(ds, seed=1, steps_per_epoch=6, provenance=True, context={"rank": r, "world_size": world})
        pipe = pipe.shuffle(8)
        if select is not None:
            pipe = pipe.select(select)
        data = ht.PipelineDataset(pipe.batch(max_tokens=60, token_field="text"))
        out.append((data, ht.DataLoader(data, num_workers=workers)))
    return out


def short_text(sample):
    return len(sample["text"]) < 12


@pytest.mark.parametrize("workers", [0, 2])
def test_fixed_steps_resume_at_another_world_and_worker_count(make_dataset, workers):
    ds = make_dataset(600)
    first = fixed_loaders(ds, 4, workers)
    before = run(first, steps=5)
    states = [data.state_dict() for data, _ in first]
    assert states[0]["steps"] == 6 * max(1, workers) and states[0]["position"] == 5
    assert len(repr(states)) < 4000
    second = fixed_loaders(ds, 3, 0)
    for data, _ in second:
        data.load_state_dict(states)
    assert [len(loader) for _, loader in second] == [6 * max(1, workers) - 5] * 3
    after = run(second, steps=6 * max(1, workers) - 5)  # all steps, the loop not yet left
    seen = before + after
    assert len(seen) == len(set(seen))  # nothing read twice
    # nothing lost: what neither run delivered is exactly what the saved reads leave
    end = [data.state_dict() for data, _ in second]
    data = second[0][0]
    data.load_state_dict(end)
    left = data._fixed_reads()[1].kept(0, 600)[:].tolist()
    assert sorted(seen + left) == list(range(600))


def test_fixed_steps_with_a_select_resume_elastically(make_dataset):
    ds = make_dataset(600)
    first = fixed_loaders(ds, 2, 2, short_text)
    before = run(first, steps=3)
    states = [data.state_dict() for data, _ in first]
    second = fixed_loaders(ds, 3, 1, short_text)
    for data, _ in second:
        data.load_state_dict(states)
    after = run(second)
    seen = before + after
    assert len(seen) == len(set(seen)) and len(after) > 0
    with pytest.raises(ValueError, match=r"^this steps_per_epoch state holds the reads of rank\(s\) \[0\] only "
                       r"\(2 of 4 consumers missing\): give load_state_dict the states of all ranks, as a list$"):
        fixed_loaders(ds, 3, 1, short_text)[0][0].load_state_dict(states[0])


def test_a_broken_loop_of_a_fixed_pipeline_goes_on_where_it_stopped(make_dataset):
    ds = make_dataset(300)
    whole = run(fixed_loaders(ds, 1, 0))
    (data, loader), = fixed_loaders(ds, 1, 0)
    head = [positions(b) for b in itertools.islice(loader, 2)]
    rest = [positions(b) for b in loader]
    assert len(head) + len(rest) == 6
    assert sorted(p for b in head + rest for p in b) == sorted(whole)


def test_a_shuffle_before_a_batch_checkpoints_as_positions(make_dataset):
    ds = make_dataset(40)
    whole = [positions(b) for b in ht.PipelineDataset(Pipeline(ds, provenance=True).shuffle(4).batch(2))]
    data = ht.PipelineDataset(Pipeline(ds, provenance=True).shuffle(4).batch(2))
    head = [positions(b) for b in itertools.islice(data, 3)]
    again = ht.PipelineDataset(Pipeline(ds, provenance=True).shuffle(4).batch(2))
    again.load_state_dict(data.state_dict())
    assert head + [positions(b) for b in again] == whole


def test_a_buffer_shuffle_after_a_batch_cannot_checkpoint(make_dataset):
    data = ht.PipelineDataset(Pipeline(make_dataset(20)).batch(2).shuffle(4))
    next(iter(data))
    with pytest.raises(UsageError, match=r"^a buffer shuffle after a batch holds samples read "
                       r"but not delivered"):
        data.state_dict()


def test_persistent_workers_continue_where_a_loop_stopped_and_then_the_next_epoch(make_dataset):
    ds = make_dataset(120)
    data = ht.PipelineDataset(BUILD["packed"](ds))
    loader = ht.DataLoader(data, num_workers=2, persistent_workers=True)
    head = [p for b in itertools.islice(loader, 2) for p in positions(b)]
    rest = [p for b in loader for p in positions(b)]  # continues, then the epoch ends
    assert len(head + rest) == len(set(head + rest))
    whole = [p for b in ht.DataLoader(ht.PipelineDataset(BUILD["packed"](ds)), num_workers=2)
             for p in positions(b)]
    assert sorted(head + rest) == sorted(whole)
    assert data.state_dict()["epoch"] == 1
    later = [p for b in loader for p in positions(b)]  # epoch 1: another plan
    assert sorted(later) != sorted(whole) or later != whole


@pytest.mark.parametrize("kind", sorted(BUILD))
def test_the_loader_knows_its_length(make_dataset, kind):
    ds = make_dataset(200)
    data = ht.PipelineDataset(BUILD[kind](ds, context={"rank": 1, "world_size": 2}))
    loader = ht.DataLoader(data, num_workers=2)
    assert len(loader) == len(list(loader))


def keeps_nothing(sample):
    return False


def test_a_fixed_pipeline_whose_select_keeps_nothing_stops_with_an_error(make_dataset):
    pipe = Pipeline(make_dataset(30), seed=1, steps_per_epoch=3).select(keeps_nothing).batch(2)
    with pytest.raises(UsageError, match=r"^two whole passes \(epochs 0 and 1\) kept nothing for this consumer: "
                       r"its selects reject all of its 30 samples per pass$"):
        list(pipe.iterate())


def test_fixed_steps_resumed_twice_keep_every_layer_of_reads(make_dataset):
    ds = make_dataset(600)
    first = fixed_loaders(ds, 4, 0)
    seen = run(first, steps=2)
    second = fixed_loaders(ds, 3, 2)
    for data, _ in second:
        data.load_state_dict([d.state_dict() for d, _ in first])
    seen += run(second, steps=2)
    third = fixed_loaders(ds, 2, 0)
    for data, _ in third:
        data.load_state_dict([d.state_dict() for d, _ in second])
    assert [len(loader) for _, loader in third] == [6 - 4] * 2
    seen += run(third, steps=2)
    assert len(seen) == len(set(seen))
    data = third[0][0]
    data.load_state_dict([d.state_dict() for d, _ in third])
    assert len(data._fixed_reads()[1].layers[0]) == 3  # one layer of counts per run
    left = data._fixed_reads()[1].kept(0, 600)[:].tolist()
    assert sorted(seen + left) == list(range(600))


def test_a_mixture_reweighted_from_the_next_epoch_resumes_a_planned_pipeline(make_dataset):
    import hpcio

    m = hpcio.mix({"a": make_dataset(200), "b": make_dataset(100)}, {"a": 0.5, "b": 0.5}, block=10, seed=3)

    def build(mixture, world):
        return loaders_of(lambda **kw: Pipeline(mixture, plan_window=50, provenance=True, **kw)
                          .map(tokens_kept).pack(32, eos=-1, lengths="text"), world)

    first = build(m, 4)
    before = run(first, steps=2)
    state = first[0][0].state_dict()
    later = m.with_weights({"a": 0.9, "b": 0.1}, at=len(m))  # from epoch 1 on
    second = build(later, 3)
    for data, _ in second:
        data.load_state_dict(state)
    after = run(second)
    assert len(before + after) == len(set(before + after)) and after
    sooner = m.with_weights({"a": 0.9, "b": 0.1}, at=100)  # inside the epoch begun
    with pytest.raises(ValueError, match=r"^the mixture segment at 100 is in only one of the saved state and "
                       r"this mixture, before stream position 300"):
        build(sooner, 3)[0][0].load_state_dict(state)


def loaders_of(make, world, workers=0):
    out = []
    for r in range(world):
        data = ht.PipelineDataset(make(context={"rank": r, "world_size": world}))
        out.append((data, ht.DataLoader(data, num_workers=workers)))
    return out
