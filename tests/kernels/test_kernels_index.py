"""Index kernels (bisection, offset tables, newline scanning) against pure-Python oracles."""

import bisect
import re
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hpcio._core import _index
from hpcio.errors import CorruptShardError, IndexOutOfRangeError, TruncatedShardError

SEEDS = range(6)


def bisect_oracle(cum, ids):
    shards = [bisect.bisect_right(cum, i) - 1 for i in ids]
    return shards, [i - cum[k] for i, k in zip(ids, shards)]


def random_counts(rng, nshards):
    counts = rng.integers(0, 50, size=nshards)
    counts[rng.random(nshards) < 0.3] = 0  # empty shards
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.uint64)


# ---- bisection --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_bisect_matches_bisect_module(seed):
    rng = np.random.default_rng(seed)
    cum = random_counts(rng, int(rng.integers(1, 200)))
    if cum[-1] == 0:
        cum[-1] = 1
    ids = rng.integers(0, int(cum[-1]), size=1000)
    shard, local = _index.bisect_ids(cum, ids)
    want_shard, want_local = bisect_oracle([int(c) for c in cum], ids.tolist())
    assert shard.dtype == np.int64 and local.dtype == np.uint64
    assert shard.tolist() == want_shard
    assert local.tolist() == want_local


def test_bisect_sorted_ids_cover_every_sample_once():
    cum = np.array([0, 3, 3, 3, 7, 8, 8, 12], dtype=np.uint64)
    ids = np.arange(12)
    shard, local = _index.bisect_ids(cum, ids)
    assert shard.tolist() == [0, 0, 0, 3, 3, 3, 3, 4, 6, 6, 6, 6]
    assert local.tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 2, 3]


@given(counts=st.lists(st.integers(0, 5), min_size=1, max_size=30),
       data=st.data())
@settings(max_examples=150, deadline=None)
def test_bisect_hypothesis(counts, data):
    cum = [0]
    for c in counts:
        cum.append(cum[-1] + c)
    if cum[-1] == 0:
        return
    ids = data.draw(st.lists(st.integers(0, cum[-1] - 1), max_size=50))
    shard, local = _index.bisect_ids(np.array(cum, dtype=np.uint64), np.array(ids, dtype=np.int64))
    assert (shard.tolist(), local.tolist()) == bisect_oracle(cum, ids)


def test_bisect_empty_ids_and_one_element():
    shard, local = _index.bisect_ids([0, 1], np.array([], dtype=np.int64))
    assert shard.shape == (0,) and local.shape == (0,)
    shard, local = _index.bisect_ids([0, 1], [0])
    assert shard.tolist() == [0] and local.tolist() == [0]


def test_bisect_keeps_the_shape_of_ids():
    shard, local = _index.bisect_ids([0, 2, 4], np.array([[0, 1], [2, 3]]))
    assert shard.tolist() == [[0, 0], [1, 1]]
    assert local.tolist() == [[0, 1], [0, 1]]


def test_bisect_values_near_2_64():
    big = 2**64 - 2
    cum = np.array([0, 2**63, 2**63, big], dtype=np.uint64)
    ids = np.array([0, 2**63 - 1, 2**63, big - 1], dtype=np.uint64)
    shard, local = _index.bisect_ids(cum, ids)
    assert shard.tolist() == [0, 0, 2, 2]
    assert local.tolist() == [0, 2**63 - 1, 0, big - 1 - 2**63]
    with pytest.raises(IndexOutOfRangeError,
                       match=re.escape(f"sample id {2**64 - 1} out of range: the dataset "
                                       f"has {big} samples")):
        _index.bisect_ids(cum, np.array([2**64 - 1], dtype=np.uint64))


def test_bisect_out_of_range_names_the_id_and_path():
    with pytest.raises(IndexOutOfRangeError) as info:
        _index.bisect_ids([0, 3, 7], [1, 7, 2], path="data/index.json")
    assert str(info.value) == ("sample id 7 out of range: the dataset has 7 samples "
                               "(data/index.json, sample 7)")
    assert info.value.sample == 7 and isinstance(info.value, IndexError)


def test_bisect_no_samples():
    with pytest.raises(IndexOutOfRangeError,
                       match=r"^sample id 0 out of range: the dataset has 0 samples \(sample 0\)$"):
        _index.bisect_ids([0, 0], [0])


def test_bisect_rejects_negative_and_non_integer_ids():
    with pytest.raises(IndexOutOfRangeError, match=r"^sample ids must be non-negative, got -2$"):
        _index.bisect_ids([0, 5], [1, -2])
    with pytest.raises(TypeError, match=r"^sample ids must be integers, got dtype float64$"):
        _index.bisect_ids([0, 5], [1.0])


def test_bisect_rejects_bad_cumulative_counts():
    with pytest.raises(CorruptShardError,
                       match=r"^cumulative sample counts start at 2, not 0 \(idx\)$"):
        _index.bisect_ids([2, 5], [0], path="idx")
    with pytest.raises(CorruptShardError,
                       match=r"^cumulative sample counts decrease at shard 1: 5 then 4 \(idx\)$"):
        _index.bisect_ids([0, 5, 4], [0], path="idx")
    with pytest.raises(ValueError, match="at least one entry"):
        _index.bisect_ids([], [0])


# ---- offset tables ----------------------------------------------------------------------

def table_bytes(offsets, width):
    return struct.pack(f"<{len(offsets)}{'I' if width == 4 else 'Q'}", *offsets)


@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize("seed", SEEDS)
def test_offset_ranges_match_struct(width, seed):
    rng = np.random.default_rng(seed)
    nrec = int(rng.integers(0, 300))
    offsets = np.cumsum(np.concatenate([[int(rng.integers(0, 100))],
                                        rng.integers(0, 40, size=nrec)])).tolist()
    # Prefix bytes make the table unaligned, as inside a real shard header.
    table = b"\x01\x02\x03" + table_bytes(offsets, width)
    starts, ends = _index.offset_ranges(memoryview(table)[3:], width, nrec, offsets[-1])
    assert starts.tolist() == offsets[:-1] and ends.tolist() == offsets[1:]
    if nrec:
        idx = rng.integers(0, nrec, size=50)  # with duplicates
        starts, ends = _index.offset_ranges(table[3:], width, nrec, offsets[-1], idx)
        assert starts.tolist() == [offsets[i] for i in idx]
        assert ends.tolist() == [offsets[i + 1] for i in idx]


def test_offset_ranges_empty_table_and_numpy_buffer():
    starts, ends = _index.offset_ranges(table_bytes([0], 4), 4, 0, 0)
    assert starts.shape == (0,) and ends.shape == (0,)
    arr = np.array([0, 5, 5, 9], dtype="<u4")
    starts, ends = _index.offset_ranges(arr, 4, 3, 9)
    assert starts.tolist() == [0, 5, 5] and ends.tolist() == [5, 5, 9]


def test_offset_ranges_u64_values_near_2_64():
    top = 2**64 - 1
    offsets = [top - 10, top - 3, top]
    starts, ends = _index.offset_ranges(table_bytes(offsets, 8), 8, 2, top)
    assert starts.tolist() == offsets[:2] and ends.tolist() == offsets[1:]


def test_offset_ranges_decreasing_names_entry_offset_and_sample():
    table = table_bytes([0, 10, 25, 20, 30], 4)
    with pytest.raises(CorruptShardError) as info:
        _index.offset_ranges(table, 4, 4, 100, path="s.mds", table_offset=8, sample_base=100)
    assert str(info.value) == ("offset table decreases: record ends at byte 20 before it "
                               "starts at byte 25 (s.mds, byte offset 20, sample 102)")
    assert (info.value.offset, info.value.sample) == (20, 102)


def test_offset_ranges_past_the_limit_is_truncation():
    table = table_bytes([0, 10, 40], 8)
    with pytest.raises(TruncatedShardError) as info:
        _index.offset_ranges(table, 8, 2, 30, path="s.mds", table_offset=4)
    assert str(info.value) == ("record ends at byte 40, past the end of the data (30 bytes) "
                               "(s.mds, byte offset 20, sample 1)")
    table = table_bytes([50, 60], 4)
    with pytest.raises(TruncatedShardError,
                       match=re.escape("record starts at byte 50, past the end of the data "
                                       "(30 bytes) (byte offset 0, sample 0)")):
        _index.offset_ranges(table, 4, 1, 30)


def test_offset_ranges_only_checks_the_records_asked_for():
    table = table_bytes([0, 10, 5, 20], 4)
    starts, ends = _index.offset_ranges(table, 4, 3, 20, [0, 0])
    assert starts.tolist() == [0, 0] and ends.tolist() == [10, 10]
    with pytest.raises(CorruptShardError, match=r"\(byte offset 8, sample 1\)$"):
        _index.offset_ranges(table, 4, 3, 20, [0, 1])


def test_offset_ranges_short_table_and_bad_arguments():
    with pytest.raises(TruncatedShardError) as info:
        _index.offset_ranges(table_bytes([0, 1, 2], 4), 4, 3, 10, path="s.mds", table_offset=4)
    assert str(info.value) == ("offset table of 3 records needs 16 bytes, only 12 present "
                               "(s.mds, byte offset 4)")
    with pytest.raises(IndexOutOfRangeError,
                       match=re.escape("record 3 out of range: the table has 3 records "
                                       "(s.mds, sample 3)")):
        _index.offset_ranges(table_bytes([0, 1, 2, 3], 4), 4, 3, 10, [0, 3], path="s.mds")
    with pytest.raises(ValueError, match=r"^offset width must be 4 or 8 bytes, got 2$"):
        _index.offset_ranges(b"\0" * 8, 2, 1, 10)
    with pytest.raises(ValueError, match=r"^record count must be >= 0, got -1$"):
        _index.offset_ranges(b"", 4, -1, 10)


# ---- newline scanning --------------------------------------------------------------------

def lines_oracle(buf, base=0):
    lines = buf.split(b"\n")
    if buf.endswith(b"\n") or not buf:
        lines.pop()
    out, pos = [base], 0
    for line in lines:
        pos += len(line) + 1
        out.append(base + min(pos, len(buf)))
    return out


@pytest.mark.parametrize("buf", [b"", b"\n", b"a", b"a\n", b"\n\n", b"ab\ncd", b"ab\ncd\n",
                                 b"\nx", "é\n€\n".encode()])
def test_scan_lines_edges(buf):
    assert _index.scan_lines(buf).tolist() == lines_oracle(buf)
    assert _index.scan_lines(buf, base=1000).tolist() == lines_oracle(buf, 1000)


@pytest.mark.parametrize("seed", SEEDS)
def test_scan_lines_random(seed):
    rng = np.random.default_rng(seed)
    buf = rng.choice(np.frombuffer(b"ab{}\n", dtype=np.uint8), size=int(rng.integers(0, 20000)),
                     p=[0.3, 0.3, 0.15, 0.15, 0.1]).tobytes()
    out = _index.scan_lines(bytearray(buf), base=2**40)
    assert out.dtype == np.uint64
    assert out.tolist() == lines_oracle(buf, 2**40)
