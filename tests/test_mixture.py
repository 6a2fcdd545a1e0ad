"""Weighted mixtures: exact shares per block, passes, epochs, re-weighting, served counts."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

import hpcio
from hpcio.dataset import Dataset
from hpcio.distributed import GlobalOrder
from hpcio.errors import InvalidArgumentError, WrongTypeError
from hpcio.formats.base import Reader, project
from hpcio.mixture import block_counts, from_schedule, source_seed


class TaggedReader(Reader):
    """``{"id": i, "text": f"{tag} {i}"}``; counts ``read_many`` calls."""

    def __init__(self, n: int, tag: str):
        super().__init__(f"memory://{tag}")
        self.n, self.tag, self.batch_calls = n, tag, 0

    def __len__(self):
        return self.n

    def read(self, i, fields=None):
        i = self.check_index(i)
        return project({"id": i, "text": f"{self.tag} {i}"}, fields)

    def read_many(self, indices, fields=None):
        self.batch_calls += 1
        return [self.read(int(i), fields) for i in indices]


def sources(**sizes) -> dict:
    return {name: Dataset(TaggedReader(n, name)) for name, n in sizes.items()}


WEIGHTS = {"web": 0.5, "code": 0.47, "math": 0.03}


@pytest.fixture
def three():
    """Two sources of 640 samples and one 20 times smaller."""
    return sources(web=640, code=640, math=32)


def test_block_counts_are_largest_remainder_shares():
    assert block_counts([0.5, 0.47, 0.03], 32) == [16, 15, 1]
    assert block_counts([1, 1, 1], 4) == [2, 1, 1]  # equal remainders: the first named wins
    assert block_counts([1, 1, 1], 5) == [2, 2, 1]
    assert block_counts([0.1] * 10, 10) == [1] * 10  # exact rationals: 0.1 * 10 is not 0.999...
    assert block_counts([3, 0], 7) == [7, 0]


def test_every_block_holds_the_exact_shares(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5)
    assert len(m) == 640 + 640 + 32  # epoch size defaults to the sum of the lengths
    assert m.block_counts() == {"web": 16, "code": 15, "math": 1}
    names, _ = m.locate(np.arange(100 * 32))
    for b in range(100):
        counts = Counter(names[b * 32 : (b + 1) * 32])
        assert [counts["web"], counts["code"], counts["math"]] == [16, 15, 1]
    # the arrangement differs between blocks
    assert names[:32] != names[32:64]


def test_samples_come_from_their_source_at_the_located_index(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5)
    positions = np.array([70, 3, 1000, 5, 4000, 3], dtype=np.int64)  # any stream positions
    names, index = m.locate(positions)
    got = m.reader.read_many(positions)
    assert [s["text"] for s in got] == [f"{k} {i}" for k, i in zip(names, index.tolist())]
    assert [s["text"] for s in m.get_batch([3, 70])] == [got[1]["text"], got[0]["text"]]
    calls = {k: ds.reader.batch_calls for k, ds in three.items()}
    m.get_batch(np.arange(64))
    # one get_batch per source for a batch: grouped by source, handed back in request order
    assert {k: ds.reader.batch_calls - calls[k] for k, ds in three.items()} == {"web": 1, "code": 1, "math": 1}


def test_no_sample_repeats_within_a_pass_and_the_small_source_is_upsampled(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5)
    names, index = m.locate(np.arange(64 * 32))  # 64 blocks: 64 draws of math, 1024 of web
    draws = {k: [i for n, i in zip(names, index.tolist()) if n == k] for k in three}
    assert [len(draws[k]) for k in ("web", "code", "math")] == [1024, 960, 64]
    math = draws["math"]
    assert sorted(math[:32]) == list(range(32)) and sorted(math[32:]) == list(range(32))
    assert math[:32] != math[32:]  # pass 1 is a fresh order
    web = draws["web"]
    assert sorted(web[:640]) == list(range(640)) and len(set(web[640:])) == 384
    # the k-th draw of math is pass k // 32, position k % 32 of its pass order
    order1 = GlobalOrder(32, source_seed(5, "math"), 1)
    assert math[32:] == order1.tolist()


def test_served_counts_are_arithmetic_and_match_the_positions(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5)
    names, _ = m.locate(np.arange(3000))
    for p in (0, 1, 31, 32, 33, 1000, 2999, 3000):
        counts = Counter(names[:p])
        assert m.served(p) == {k: counts[k] for k in ("web", "code", "math")}
    assert m.served(32 * 10**9) == {"web": 16 * 10**9, "code": 15 * 10**9, "math": 10**9}


def test_epochs_are_consecutive_stretches_of_one_stream(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5, epoch_size=96)
    assert len(m) == 96
    first, second = m.epoch(0), m.epoch(1)
    stream = m.reader.read_many(np.arange(192))
    assert [s["text"] for s in first] == [s["text"] for s in stream[:96]]
    assert [s["text"] for s in second] == [s["text"] for s in stream[96:]]
    assert second[0]["text"] == stream[96]["text"] and second[-1]["text"] == stream[-1]["text"]
    assert [s["text"] for s in m] == [s["text"] for s in first]
    assert m.select(["id"])[0] == {"id": stream[0]["id"]}


def test_reweighting_continues_every_source_where_it_stopped(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5)
    at = 32 * 30
    m2 = m.with_weights({"web": 0.25, "code": 0.25, "math": 0.5}, at=at)
    before = m.locate(np.arange(at))
    assert m2.locate(np.arange(at))[0] == before[0]
    assert np.array_equal(m2.locate(np.arange(at))[1], before[1])  # the past is unchanged
    assert m2.block_counts(at) == {"web": 8, "code": 8, "math": 16}
    assert m2.served(at) == m.served(at) == {"web": 480, "code": 450, "math": 30}
    assert m2.served(at + 32) == {"web": 488, "code": 458, "math": 46}
    names, index = m2.locate(np.arange(at + 32 * 4))
    math = [i for n, i in zip(names, index.tolist()) if n == "math"]
    assert len(math) == 30 + 64
    # pass 0 of math (32 draws) ends after the change: its 32 samples all different
    assert sorted(math[:32]) == list(range(32)) and sorted(math[32:64]) == list(range(32))
    assert m2.schedule()["segments"] == [
        {"at": 0, "block": 32, "weights": WEIGHTS},
        {"at": at, "block": 32, "weights": {"web": 0.25, "code": 0.25, "math": 0.5}},
    ]


def test_a_source_added_and_removed_keeps_the_counters(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5)
    extra = sources(books=100)
    m2 = m.with_weights({"web": 0.5, "books": 0.5}, at=64, sources=extra)
    assert m2.block_counts(64) == {"web": 16, "books": 16}
    assert m2.served(96) == {"web": 48, "code": 30, "math": 2, "books": 16}
    m3 = m2.with_weights(WEIGHTS, at=128)  # code and math back: they continue their passes
    names, index = m3.locate(np.arange(128 + 32 * 30))
    math = [i for n, i in zip(names, index.tolist()) if n == "math"]
    assert len(math) == 32 and sorted(math) == list(range(32))
    assert m3.served(160)["books"] == 32 and m3.served(160)["math"] == 3


def test_from_schedule_rebuilds_the_same_positions(three):
    m = hpcio.mix(three, WEIGHTS, block=32, seed=5).with_weights({"web": 1, "code": 1}, at=320)
    again = from_schedule(three, m.schedule())
    p = np.arange(0, 2000, 7)
    assert again.locate(p)[0] == m.locate(p)[0]
    assert np.array_equal(again.locate(p)[1], m.locate(p)[1])
    with pytest.raises(InvalidArgumentError, match=r"^source 'math' has 31 samples; the schedule was made with 32$"):
        from_schedule({**three, "math": Dataset(TaggedReader(31, "math"))}, m.schedule())
    with pytest.raises(InvalidArgumentError, match=r"^the schedule was made by mixture algorithm 'mix-v0', "
                       r"this hpcio has 'mix-lr-v1\+feistel6-splitmix64-v1'$"):
        from_schedule(three, {**m.schedule(), "algorithm": "mix-v0"})
    with pytest.raises(InvalidArgumentError, match=r"^the schedule names source\(s\) 'math' that are not given$"):
        from_schedule({"web": three["web"], "code": three["code"]}, m.schedule())


def test_default_block_and_sequence_weights(three):
    m = hpcio.mix(three, [0.5, 0.47, 0.03])
    assert m.schedule()["segments"][0]["block"] == hpcio.mixture.DEFAULT_BLOCK == 1024
    assert m.block_counts() == {"web": 512, "code": 481, "math": 31}


@pytest.mark.parametrize("call, error, message", [
    (lambda s: hpcio.mix({}, {}), InvalidArgumentError,
     "a mixture needs a non-empty mapping name -> hpcio.Dataset"),
    (lambda s: hpcio.mix({"a": [1, 2]}, [1]), WrongTypeError, "source 'a' is a list, not an hpcio.Dataset"),
    (lambda s: hpcio.mix(s, {"web": 1, "books": 1}), InvalidArgumentError,
     "weights name 'books', which is not a source; the sources are 'web', 'code', 'math'"),
    (lambda s: hpcio.mix(s, [1, 2]), InvalidArgumentError,
     "2 weights for 3 sources; give one weight per source, or a mapping name -> weight"),
    (lambda s: hpcio.mix(s, {"web": -1}), InvalidArgumentError,
     "the weight of 'web' must be a finite number >= 0, got -1"),
    (lambda s: hpcio.mix(s, {"web": float("nan")}), InvalidArgumentError,
     "the weight of 'web' must be a finite number >= 0, got nan"),
    (lambda s: hpcio.mix(s, {"web": 0, "code": 0}), InvalidArgumentError,
     "the weights sum to 0: at least one source needs a positive weight"),
    (lambda s: hpcio.mix({**s, "empty": Dataset(TaggedReader(0, "e"))}, {"empty": 1}),
     InvalidArgumentError, "source 'empty' has no samples but weight 1"),
    (lambda s: hpcio.mix(s, WEIGHTS, block=0), InvalidArgumentError,
     "block must be an int >= 1 positions, got 0"),
    (lambda s: hpcio.mix(s, WEIGHTS, epoch_size=0), InvalidArgumentError,
     "epoch_size must be an int >= 1 positions, got 0"),
    (lambda s: hpcio.mix(s, WEIGHTS, block=32).with_weights(WEIGHTS, at=40), InvalidArgumentError,
     "weights can change only at a block boundary: position 40 is 8 positions into the block "
     "of 32 starting at 32; use 32 or 64"),
    (lambda s: hpcio.mix(s, WEIGHTS).with_weights(WEIGHTS, at=0, sources={"web": s["web"]}),
     InvalidArgumentError, "source 'web' is already mixed; give only new sources"),
    (lambda s: hpcio.mix(s, WEIGHTS).served(-1), InvalidArgumentError,
     "position must be an int >= 0, got -1"),
    (lambda s: hpcio.mix(s, WEIGHTS).locate([-2]), InvalidArgumentError,
     "mixture positions are >= 0, got -2"),
])
def test_errors_say_what_is_wrong(three, call, error, message):
    with pytest.raises(error, match="^" + re.escape(message) + "$"):
        call(three)


class Synthetic(Reader):
    """``n`` samples that exist only when read: ``{"id": i}``."""

    def __init__(self, n: int, tag: str):
        super().__init__(f"memory://{tag}")
        self.n = n

    def __len__(self):
        return self.n

    def read(self, i, fields=None):
        return {"id": self.check_index(i)}


def test_a_stream_of_ten_to_the_ten_is_evaluated_where_it_is_read():
    big = {"web": Dataset(Synthetic(5 * 10**9, "web")), "code": Dataset(Synthetic(5 * 10**9, "code")),
           "math": Dataset(Synthetic(25 * 10**7, "math"))}
    m = hpcio.mix(big, WEIGHTS, block=1024, seed=3)
    assert len(m) == 10_250_000_000
    at = 10**12 + 7 * 1024  # in epoch 97: web is in pass 100, math in pass 121
    assert at // len(m) == 97 and m.served(at)["web"] // (5 * 10**9) == 100
    names, index = m.locate(np.arange(at, at + 1024))
    assert Counter(names) == {"web": 512, "code": 481, "math": 31}
    assert m.served(at) == {"web": 512 * at // 1024, "code": 481 * at // 1024, "math": 31 * at // 1024}
    samples = m.reader.read_many(np.arange(at, at + 4))
    assert [s["id"] for s in samples] == index[:4].tolist()
    # the draw of math there is pass k // len, position k % len of its pass order
    first = names.index("math")
    pass_, within = divmod(m.served(at)["math"], 25 * 10**7)
    assert pass_ == 121
    assert int(index[first]) == GlobalOrder(25 * 10**7, source_seed(3, "math"), pass_)[within]
