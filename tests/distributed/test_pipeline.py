"""Pipeline stages and the cache boundary, over an in-memory dataset."""

from __future__ import annotations

import functools
import os
import threading

import json_format
import numpy as np
import pytest

from hpcio.distributed import RuntimeContext, epoch_order, split_indices
from hpcio.pipeline import (
    CacheTimeoutError,
    Pipeline,
    SequencePacker,
    UnstableIdentityError,
    sample_nbytes,
)

CALLS = {"n": 0}
_LOCK = threading.Lock()


@pytest.fixture(scope="module", autouse=True)
def json_format_registered():
    """The test format is known while this module runs, and forgotten afterwards so
    tests elsewhere see only the shipped formats."""
    json_format.register()
    yield
    from hpcio.registry import unregister_format

    unregister_format(json_format.NAME)


def double(sample):
    with _LOCK:
        CALLS["n"] += 1
    return {"id": sample["id"], "x": 2 * sample["id"]}


def triple(sample):
    return {"id": sample["id"], "x": 3 * sample["id"]}


def is_even(sample):
    return sample["id"] % 2 == 0


def add(sample, k):
    return {"id": sample["id"] + k}


def tokens_of(sample):
    return {"tokens": list(range(sample["id"] % 5 + 1))}


def ctx(rank=0, world=1, **kw):
    return RuntimeContext(rank=rank, world_size=world, **kw)


def ids(samples):
    return [s["id"] for s in samples]


def test_map_select_batch_unbatch_follow_the_split(make_dataset):
    pipe = Pipeline(make_dataset(40), seed=3).map(double).select(is_even).batch(4).unbatch()
    parts = [list(pipe.iterate(ctx(r, 2), allow_unequal=True)) for r in range(2)]
    for r, got in enumerate(parts):
        expected = [i for i in split_indices(40, r, 2, seed=3).tolist() if i % 2 == 0]
        assert ids(got) == expected
        assert all(s["x"] == 2 * s["id"] for s in got)


def test_batch_by_count_and_drop_last(make_dataset):
    ds = make_dataset(10)
    sizes = [len(b) for b in Pipeline(ds, shuffle=False).batch(4).iterate(ctx())]
    assert sizes == [4, 4, 2]
    sizes = [len(b) for b in Pipeline(ds, shuffle=False).batch(4, drop_last=True).iterate(ctx())]
    assert sizes == [4, 4]


def test_batch_by_byte_budget(make_dataset):
    ds = make_dataset(30)  # samples hold an int and "sample <i>"
    batches = list(Pipeline(ds, shuffle=False).batch(max_bytes=40).iterate(ctx()))
    assert ids(s for b in batches for s in b) == list(range(30))
    for b, nxt in zip(batches, batches[1:]):
        assert sum(sample_nbytes(s) for s in b) <= 40
        # closed only because the next sample would not fit
        assert sum(sample_nbytes(s) for s in b) + sample_nbytes(nxt[0]) > 40


def test_batch_by_padded_token_budget(make_dataset):
    pipe = Pipeline(make_dataset(25), shuffle=False).map(tokens_of)
    batches = list(pipe.batch(max_tokens=12, token_field="tokens").iterate(ctx()))
    flat = [len(s["tokens"]) for b in batches for s in b]
    assert flat == [i % 5 + 1 for i in range(25)]
    for b in batches:
        longest = max(len(s["tokens"]) for s in b)
        assert len(b) * longest <= 12 or len(b) == 1
    with pytest.raises(ValueError, match=r"max_tokens= needs token_field="):
        pipe.batch(max_tokens=5)
    with pytest.raises(ValueError, match=r"batch\(\) needs size=, max_bytes= or max_tokens="):
        pipe.batch()


def test_buffer_shuffle_is_local_deterministic_and_per_epoch(make_dataset):
    ds = make_dataset(60)
    pipe = Pipeline(ds, shuffle=False).shuffle(8)
    first = ids(pipe.iterate(ctx(seed=1, epoch=0)))
    assert sorted(first) == list(range(60)) and first != list(range(60))
    assert first == ids(pipe.iterate(ctx(seed=1, epoch=0)))
    assert first != ids(pipe.iterate(ctx(seed=1, epoch=1)))
    # a buffer of 8 emits output i from the first i + 8 inputs
    assert all(v < i + 8 for i, v in enumerate(first))


class RankTagger:
    """An assembler that pairs samples and records the context it was given."""

    def __init__(self, context):
        self.context, self.held = context, []

    def push(self, sample):
        self.held.append(sample["id"])
        if len(self.held) == 2:
            out, self.held = [{"pair": self.held, "rank": self.context.rank}], []
            return out
        return []

    def flush(self):
        return [{"pair": self.held, "rank": self.context.rank}] if self.held else []


def test_assemble_gets_the_context_and_flushes(make_dataset):
    out = list(Pipeline(make_dataset(7), shuffle=False).assemble(RankTagger).iterate(ctx(1, 1 + 1), allow_unequal=True))
    assert [o["pair"] for o in out] == [[1, 3], [5]]
    assert {o["rank"] for o in out} == {1}


def test_sequence_packing(make_dataset):
    pipe = Pipeline(make_dataset(20), shuffle=False).map(tokens_of)
    rows = list(pipe.assemble(SequencePacker.factory(6, eos=-1)).iterate(ctx()))
    stream = [t for i in range(20) for t in [*range(i % 5 + 1), -1]]
    assert all(len(r["tokens"]) == 6 for r in rows)
    assert np.concatenate([r["tokens"] for r in rows]).tolist() == stream[: len(rows) * 6]
    assert len(rows) == len(stream) // 6
    first = rows[0]
    assert first["tokens"].tolist() == [0, -1, 0, 1, -1, 0]
    assert first["doc_ids"].tolist() == [0, 0, 1, 1, 1, 2]
    kept = list(pipe.assemble(SequencePacker.factory(6, eos=-1, keep_remainder=True)).iterate(ctx()))
    assert np.concatenate([r["tokens"] for r in kept]).tolist() == stream


def test_circular_shift_starts_consumers_apart(make_dataset):
    pipe = Pipeline(make_dataset(40), shuffle=False, circular_shift=True)
    firsts = [next(iter(pipe.iterate(ctx(r, 4))))["id"] for r in range(4)]
    assert firsts == [c + 4 * (c * 10 // 4) for c in range(4)] == [0, 9, 22, 31]
    union = sorted(i for r in range(4) for i in ids(pipe.iterate(ctx(r, 4))))
    assert union == list(range(40))


def test_unstable_stage_functions_are_rejected(make_dataset, tmp_path):
    pipe = Pipeline(make_dataset(5))

    def local(sample):
        return sample

    with pytest.raises(UnstableIdentityError, match="a lambda has no stable identity across runs"):
        pipe.map(lambda s: s).cache(tmp_path)
    with pytest.raises(
        UnstableIdentityError,
        match=r"test_pipeline.test_unstable_stage_functions_are_rejected.<locals>.local is "
        "defined inside a function",
    ):
        pipe.select(local).cache(tmp_path)


def test_fingerprint_names_the_source_and_every_stage(make_dataset):
    base = Pipeline(make_dataset(10)).map(double)
    assert base.fingerprint() == Pipeline(make_dataset(10)).map(double).fingerprint()
    assert base.fingerprint() != Pipeline(make_dataset(11)).map(double).fingerprint()
    assert base.fingerprint() != Pipeline(make_dataset(10)).map(triple).fingerprint()
    one = Pipeline(make_dataset(10)).map(functools.partial(add, k=1)).fingerprint()
    two = Pipeline(make_dataset(10)).map(functools.partial(add, k=2)).fingerprint()
    assert one != two


def test_cache_is_written_once_then_read(make_dataset, tmp_path):
    CALLS["n"] = 0
    pipe = (Pipeline(make_dataset(30), seed=2).map(double)
            .cache(tmp_path, format="testjson").select(is_even))
    first = list(pipe.iterate(ctx(epoch=0)))
    assert CALLS["n"] == 30
    again = list(pipe.iterate(ctx(epoch=0)))
    later = list(pipe.iterate(ctx(epoch=1)))
    assert CALLS["n"] == 30  # the cache was read, upstream did not run again
    assert first == again and first != later  # downstream runs over a new order each epoch
    assert sorted(ids(later)) == list(range(0, 30, 2))
    assert all(s["x"] == 2 * s["id"] for s in later)
    (key,) = os.listdir(tmp_path)
    assert key == pipe.fingerprint(2)
    assert sorted(os.listdir(tmp_path / key)) == [
        "manifest.json", "part-00000-of-00001", "part-00000-of-00001.done",
    ]


def test_cache_parts_one_per_data_parallel_leader(make_dataset, tmp_path):
    """4 ranks, tensor-parallel pairs: 2 leaders write, all 4 read every part."""
    CALLS["n"] = 0
    n = 21
    pipe = Pipeline(make_dataset(n), seed=9).map(double).cache(tmp_path, format="testjson", timeout=60)
    results, errors = {}, []

    def run(rank):
        try:
            results[rank] = ids(pipe.iterate(ctx(rank, 4, tp_size=2, seed=9)))
        except Exception as exc:  # surfaced below, with the rank
            errors.append((rank, exc))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert CALLS["n"] == n  # each part computed once, not by tensor-parallel peers
    assert results[0] == results[1] and results[2] == results[3]
    assert sorted(results[0] + results[2]) == sorted(epoch_order(n, 9, 0)[:20].tolist())
    (key,) = os.listdir(tmp_path)
    assert sorted(f for f in os.listdir(tmp_path / key) if f.endswith(".done")) == [
        "part-00000-of-00002.done", "part-00001-of-00002.done",
    ]


def test_cache_waits_for_missing_parts_then_times_out(make_dataset, tmp_path):
    pipe = Pipeline(make_dataset(10)).map(double).cache(tmp_path, format="testjson", timeout=0.2)
    with pytest.raises(
        CacheTimeoutError,
        match=r"1 of 2 cache parts still missing after 0.2 s \(part-00001-of-00002\); "
        "did every data-parallel rank run the pipeline\\?",
    ):
        list(pipe.iterate(ctx(0, 2)))


def test_block_shuffle_uses_the_reader_shards(make_dataset):
    got = ids(Pipeline(make_dataset(12, shards=[3, 3, 3, 3]), shuffle="block").iterate(ctx(seed=4)))
    assert [len({i // 3 for i in got[k : k + 3]}) for k in range(0, 12, 3)] == [1, 1, 1, 1]


# --- provenance and mixtures -----------------------------------------------------------------
def tokens_kept(sample):
    """tokens_of, keeping the provenance fields the packer reads."""
    return {**tokens_of(sample), **{k: v for k, v in sample.items() if k.startswith("__")}}


def test_provenance_is_kept_through_batching(make_dataset):
    ds = make_dataset(30)
    pipe = Pipeline(ds, seed=4, provenance=True).batch(4)
    batches = list(pipe.iterate(ctx(1, 2)))
    samples = [s for b in batches for s in b]
    part = split_indices(30, 1, 2, seed=4)
    assert [s["__index__"] for s in samples] == part.tolist() == [s["id"] for s in samples]
    assert all(s["__source__"] == "memory://list" for s in samples)
    order = epoch_order(30, 4, 0)
    assert [s["__position__"] for s in samples] == [int(order.position_of([i])[0]) for i in part]


def test_packed_rows_carry_their_documents_provenance(make_dataset):
    ds = make_dataset(12)
    pipe = Pipeline(ds, shuffle=False, provenance=True).map(tokens_kept)
    rows = list(pipe.assemble(SequencePacker.factory(6, eos=-1)).iterate(ctx()))
    # documents of 1..5 tokens + eos: 2, 3, 4, 5, 6, 2, 3, ... tokens
    assert rows[0]["tokens"].tolist() == [0, -1, 0, 1, -1, 0]
    assert rows[0]["__index__"] == [0, 1, 2] and rows[0]["__position__"] == [0, 1, 2]
    assert rows[1]["tokens"].tolist() == [1, 2, -1, 0, 1, 2]
    assert rows[1]["__index__"] == [2, 3] and rows[1]["doc_ids"].tolist() == [0, 0, 0, 1, 1, 1]
    assert rows[0]["__source__"] == ["memory://list"] * 3
    for row in rows:
        assert len(row["__index__"]) == int(row["doc_ids"][-1]) + 1


def test_pipeline_reads_a_mixture_epoch_by_epoch(make_dataset):
    import hpcio

    m = hpcio.mix({"a": make_dataset(40), "b": make_dataset(4)}, {"a": 0.75, "b": 0.25}, block=8, seed=2)
    assert len(m) == 44
    pipe = Pipeline(m, provenance=True)
    for epoch in (0, 1):
        got = [s for r in range(2) for s in pipe.iterate(ctx(r, 2, epoch=epoch))]
        assert sorted(s["__position__"] for s in got) == list(range(44))
        by_position = sorted(got, key=lambda s: s["__position__"])
        names, index = m.locate(np.arange(44 * epoch, 44 * (epoch + 1)))
        assert [(s["__source__"], s["__index__"]) for s in by_position] == list(zip(names, index.tolist()))
    with pytest.raises(ValueError, match=r"^a mixture is read in its own order, epoch by epoch: leave "
                       r"shuffle=True \(the default\), got shuffle='block'"):
        Pipeline(m, shuffle="block")


def test_iterating_an_unequal_pipeline_over_several_consumers_is_refused(make_dataset):
    pipe = Pipeline(make_dataset(40), seed=3).select(is_even).batch(4)
    with pytest.raises(RuntimeError, match=r"^this pipeline's consumers would take different numbers of steps "
                       r"\(2 consumers; a select, budget batch or assemble changes counts\)"):
        pipe.iterate(ctx(0, 2))
    assert len(list(pipe.iterate(ctx(0, 1)))) == 5  # one consumer: nothing to keep in step
