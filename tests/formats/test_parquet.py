"""Parquet files: conformance, pyarrow reads the columns, projection, row groups,
schema mismatch between files."""

import os

import numpy as np
import pytest

import hpcio
from hpcio.errors import SchemaError
from hpcio.testing import FormatTests, assert_sample_equal


class TestParquetFormat(FormatTests):
    format_name = "parquet"
    writer_options = {"row_group_size": 10, "max_count": 30}


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
    assert sorted(os.listdir(tmp_path / "p"))[0] == "part-000000.parquet"
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
