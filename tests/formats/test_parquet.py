"""Parquet files: conformance, pyarrow reads the columns, projection, row groups,
schema mismatch between files."""

import gc
import os

import numpy as np
import pytest

import hpcio
from hpcio.errors import DecodeError, IndexOutOfRangeError, SchemaError
from hpcio.sources import expand_sources, open_reader
from hpcio.testing import FormatTests, assert_sample_equal


class TestParquetFormat(FormatTests):
    format_name = "parquet"
    writer_options = {"row_group_size": 10, "max_count": 30}
    # decoded, not checksummed: no page CRCs, and no hash manifest (whose digests would
    # change with the pyarrow version that wrote the files)
    report_options = {"compression": "none", "row_group_size": 2, "checksum": False, "hashes": []}
    expected_inspect = {"shards": 1, "fields": {"id": "int", "text": "str", "meta": "json"},
                        "details": {"row_groups": 3, "compression": "UNCOMPRESSED"}}
    corruption = (b'{"i":3}', b'{"i":3!')
    expected_problem = {"path": "{path}", "offset": None, "sample": 3, "type": "DecodeError",
                        "error": "field 'meta' is not valid JSON: Expecting ',' delimiter: line 1 column 7 (char 6) ({path}, sample 3)"}


def sample(i):
    return {"id": i, "score": i / 3, "text": f"t{i}", "blob": bytes([i]) * i,
            "meta": {"i": [i, None]}, "emb": np.arange(i, dtype=np.int16)}


def write(path, samples, **options):
    with hpcio.open_writer(path, format="parquet", **options) as w:
        for s in samples:
            w.write(s)
    return str(path)


def test_pyarrow_reads_columns_and_row_groups(tmp_path):
    import pyarrow.parquet as pq

    path = write(tmp_path / "p.parquet", [sample(i) for i in range(25)], row_group_size=10)
    f = pq.ParquetFile(path)
    assert f.metadata.num_row_groups == 3
    table = f.read(columns=["id", "text"])
    assert table.column("id").to_pylist() == list(range(25))
    assert table.column("text").to_pylist()[24] == "t24"


def test_typed_round_trip_projection_batches(tmp_path):
    samples = [sample(i) for i in range(25)]
    ds = hpcio.open(write(tmp_path / "p", samples, row_group_size=4, max_count=8))
    assert sorted(os.listdir(tmp_path / "p"))[:2] == ["hashes.json", "part-000000.parquet"]
    idx = [24, 0, 13, 13, 7]
    for j, got in zip(idx, ds.get_batch(idx)):
        assert_sample_equal(got, samples[j], f"sample {j}")
    assert ds.select(["text"])[9] == {"text": "t9"}


def test_schema_mismatch_between_files(tmp_path):
    os.makedirs(tmp_path / "d")
    write(tmp_path / "d" / "a.parquet", [{"id": 1, "text": "x"}])
    write(tmp_path / "d" / "b.parquet", [{"id": 2, "text": 3}])
    with pytest.raises(SchemaError, match=(
            r"^Parquet schema mismatch: columns \[id: int64, text: int64\] differ from the first "
            rf"file's \[id: int64, text: large_string\] \({tmp_path / 'd' / 'b.parquet'}, sample 1\)$")):
        hpcio.open(tmp_path / "d")


def test_writer_schema_mismatch(tmp_path):
    with pytest.raises(SchemaError, match=r"^field 'id': expected int, got str \(.*p, sample 1\)$"):
        write(tmp_path / "p", [{"id": 1}, {"id": "two"}])
    assert not (tmp_path / "p").exists()


def test_bad_json_value_names_its_own_sample_when_rows_are_taken(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = [f'{{"i": {i}}}' for i in range(12)]
    values[7] = '{"i": '
    field = pa.field("meta", pa.large_string(), metadata={b"hpcio.kind": b"json"})
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table([pa.array(values, pa.large_string())], schema=pa.schema([field])), path,
                   row_group_size=5)
    ds = hpcio.open(path)
    assert ds[6] == {"meta": {"i": 6}}
    # sample 7 is row 2 of the second row group, and the 2nd of the rows taken below
    for read in (lambda: ds[7], lambda: ds.get_batch([5, 7, 9]), lambda: ds.get_batch([9, 7])):
        with pytest.raises(DecodeError, match=(rf"^field 'meta' is not valid JSON: Expecting value: line 1 column 7 \(char 6\) "
                                                    rf"\({path}, sample 7\)$")):
            read()
    source = open_reader(expand_sources(str(path))[0])
    assert source.read_many(np.arange(0, 5))[4] == {"meta": {"i": 4}}
    with pytest.raises(DecodeError, match=rf"\({path}, sample 7\)$"):
        source.read_many(np.arange(5, 10))


def test_shuffled_reads_decode_each_row_group_once(tmp_path, row_group_reads):
    samples = [sample(i) for i in range(120)]
    path = write(tmp_path / "p.parquet", samples, row_group_size=10)  # 12 row groups
    reads = row_group_reads
    order = np.random.default_rng(42).permutation(120)
    ds = hpcio.open(path)
    for lo in range(0, 120, 8):
        for j, got in zip(order[lo:lo + 8], ds.get_batch(order[lo:lo + 8])):
            assert_sample_equal(got, samples[j], f"sample {j}")
    assert sorted(reads) == list(range(12))
    # a pass in order keeps no row group: each is read through to its last row
    reads.clear()
    passed = hpcio.open(path)
    for j, got in enumerate(passed):
        assert_sample_equal(got, samples[j], f"sample {j}")
    assert reads == list(range(12)) and not passed.reader.cache and passed.reader.cached_bytes == 0
    passed.get_batch(np.arange(22, 27))  # not to the end of its row group: kept
    assert list(passed.reader.cache) == [(2, tuple(passed.reader.fields))]
    # without a budget only the last row group stays: batches spanning row groups re-read
    reads.clear()
    small = hpcio.open(path, cache_bytes=0)
    for lo in range(0, 120, 8):
        small.get_batch(order[lo:lo + 8])
    assert len(reads) > 12 * 5
    assert small.reader.cached_bytes == small.reader.cache[next(iter(small.reader.cache))].nbytes
    with pytest.raises(ValueError, match=r"^cache_bytes must be >= 0, got -1$"):
        hpcio.open(path, cache_bytes=-1)


def test_an_announced_shuffle_larger_than_the_cache_decodes_each_row_group_once(tmp_path, monkeypatch,
                                                                              row_group_reads):
    """A shuffled view announces its pass (will_read): the cache then holds the row groups
    it touches where they fit in half the memory available, whatever CACHE_BYTES says;
    with cache_bytes given, or too little memory, the budget stays and groups are
    decoded again."""
    from hpcio.formats import parquet

    samples = [sample(i) for i in range(120)]
    path = write(tmp_path / "p.parquet", samples, row_group_size=10)  # 12 row groups
    monkeypatch.setattr(parquet, "CACHE_BYTES", 1)  # one row group kept, by default

    def shuffled(**options):
        ds = hpcio.open(path, **options)
        ds.reader.batch_size = 8  # 15 batches, each touching most row groups
        return ds.shuffle(42)

    view = shuffled()
    for j, got in zip(view.indices, view):
        assert_sample_equal(got, samples[j], f"sample {j}")
    assert sorted(row_group_reads) == list(range(12))
    for options in ({"cache_bytes": 1}, {}):
        if not options:
            monkeypatch.setattr("hpcio._memory.available_bytes", lambda: 1)
        row_group_reads.clear()
        assert [s["id"] for s in shuffled(**options)] == [samples[j]["id"] for j in view.indices]
        assert len(row_group_reads) > 12 * 3


def test_a_pass_decodes_one_row_group_at_a_time(tmp_path, monkeypatch):
    """iter_range asks for no step across a row group nor longer than ITER_ROWS, and
    holds one decoded row group at a time: a pass over a large file reuses the memory of
    the previous group's samples."""
    from hpcio.formats import parquet

    monkeypatch.setattr(parquet, "ITER_ROWS", 4)
    samples = [sample(i) for i in range(70)]
    ds = hpcio.open(write(tmp_path / "p", samples, row_group_size=10, max_count=30))  # 3 files, 8 groups
    reader = ds.reader
    steps, cached = [], []
    read_many = reader.read_many

    def recording(indices, fields=None):
        steps.append(list(indices))
        out = read_many(indices, fields)
        cached.append(len(reader.cache))
        return out

    monkeypatch.setattr(reader, "read_many", recording)
    got = list(reader.iter_range(7, 63))
    for want, have in zip(samples[7:63], got, strict=True):
        assert_sample_equal(have, want)
    assert [s[0] for s in steps] == [7, 10, 14, 18, 20, 24, 28, 30, 34, 38, 40, 44, 48, 50, 54, 58, 60]
    assert sum(steps, []) == list(range(7, 63)) and max(cached) == 1
    with pytest.raises(IndexOutOfRangeError, match="index 70 out of range for a dataset of 70 samples"):
        list(reader.iter_range(60, 71))


def test_rows_read_are_arrow_memory_from_jemalloc_and_the_pool_is_given_back(tmp_path, monkeypatch, tuned):
    """Opted in, the reader decodes row groups with jemalloc as Arrow's pool, then
    restores the pool it found; a pool the user chose (ARROW_DEFAULT_MEMORY_POOL) is left alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        jemalloc = pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow is built without jemalloc")
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"id": list(range(400)), "blob": [bytes([i % 256]) * 2000 for i in range(400)]}),
                   path, row_group_size=100)
    before = pa.default_memory_pool()
    reader = hpcio.open(path).reader
    held = jemalloc.bytes_allocated()
    samples = reader.read_many(np.arange(0, 400, 3))  # rows taken from every row group
    assert jemalloc.bytes_allocated() - held >= 100 * 2000  # the row group kept in the reader's cache
    assert [s["blob"] for s in samples] == [bytes([i % 256]) * 2000 for i in range(0, 400, 3)]
    assert pa.default_memory_pool().backend_name == before.backend_name
    reader.close()
    del reader, samples
    gc.collect()  # what the first reader still held in jemalloc goes now, not during the read below
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", before.backend_name)
    reader = hpcio.open(path).reader
    held = jemalloc.bytes_allocated()
    reader.read_many(np.arange(0, 400, 3))
    assert jemalloc.bytes_allocated() == held
    reader.close()


def test_overlapping_uses_of_jemalloc_share_one_switch():
    import pyarrow as pa

    from hpcio.formats.parquet import use_jemalloc

    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow is built without jemalloc")
    before = pa.default_memory_pool().backend_name
    first, second = use_jemalloc(), use_jemalloc()
    assert pa.default_memory_pool().backend_name == "jemalloc"
    first()
    first()  # a second call of the same undo changes nothing
    assert pa.default_memory_pool().backend_name == "jemalloc"
    second()
    assert pa.default_memory_pool().backend_name == before
