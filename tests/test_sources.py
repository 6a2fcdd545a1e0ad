"""Sources for conversion: units of work and the samples of each unit, field
references into tars, and bad input."""

import base64
import gzip
import json
import os

import numpy as np
import pytest

import hpcio
from hpcio.errors import DecodeError, SchemaError, ShardNotFoundError
from hpcio.sources import (
    DatasetSource, JsonlSource, MsgpackSource, ParquetSource, TarSource, Unit, open_source,
)

ROWS = [{"id": i, "text": f"line {i} " + "x" * (i % 7)} for i in range(50)]


def write_jsonl(path, rows):
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    elif str(path).endswith(".zst"):
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return str(path)


def test_jsonl_byte_ranges_cover_every_line_once(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", ROWS)
    src = JsonlSource(path, split_bytes=97)
    units = src.units()
    size = os.path.getsize(path)
    assert units[0] == Unit(path, "bytes", 0, 97, 97)
    assert sum(u.size for u in units) == size and units[-1].stop == size
    got = [s for u in units for s in src.samples(u)]
    assert got == ROWS


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_compressed_jsonl_is_one_unit(tmp_path, suffix):
    path = write_jsonl(tmp_path / f"a{suffix}", ROWS)
    src = open_source(path)
    assert isinstance(src, JsonlSource)
    assert [u.kind for u in src.units()] == ["file"]
    assert list(src) == ROWS


def test_jsonl_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"id": 0}\n{"id": 1\n')
    with pytest.raises(DecodeError, match=(
            rf"^JSONL line is not JSON: Expecting ',' delimiter at character 9 "
            rf"\({path}, byte offset 10, sample 1\)$")):
        list(JsonlSource(path))


def test_jsonl_base64_path_and_tar_references(tmp_path):
    with hpcio.open_writer(tmp_path / "shards", format="webdataset") as w:
        for i in range(3):
            w.write({"__key__": f"k{i}", "jpg": b"\xff\xd8\xff" + bytes([i])})
    (tmp_path / "blob.bin").write_bytes(b"on disk")
    rows = [{"img": f"tar://shards/shard-000000.tar#k{i}.jpg", "b": base64.b64encode(bytes([i] * 3)).decode(),
             "file": "blob.bin"} for i in range(3)]
    path = write_jsonl(tmp_path / "refs.jsonl", rows)
    src = JsonlSource(path, base64_fields=["b"], ref_fields=["img", "file"], max_open_tars=1)
    got = list(src)
    assert got[2] == {"img": b"\xff\xd8\xff\x02", "b": b"\x02\x02\x02", "file": b"on disk"}
    missing = write_jsonl(tmp_path / "missing.jsonl", [{"img": "tar://shards/shard-000000.tar#k9.jpg"}])
    with pytest.raises(ShardNotFoundError, match=r"^tar member 'k9.jpg' not found \(.*shard-000000.tar, sample 0\)$"):
        list(JsonlSource(missing, ref_fields=["img"]))
    src.close()


def test_parquet_row_groups_and_projection(tmp_path):
    with hpcio.open_writer(tmp_path / "p", format="parquet", row_group_size=8) as w:
        for r in ROWS:
            w.write(r)
    src = open_source(tmp_path / "p", columns=["text"])
    units = src.units()
    assert [(u.kind, u.start, u.count) for u in units] == [("row_group", g, 8) for g in range(6)] + [
        ("row_group", 6, 2)]
    assert list(src.samples(units[6])) == [{"text": r["text"]} for r in ROWS[48:]]


def test_parquet_schema_mismatch(tmp_path):
    os.makedirs(tmp_path / "p")
    for name, value in (("a", 1), ("b", "one")):
        with hpcio.open_writer(tmp_path / "p" / f"{name}.parquet", format="parquet") as w:
            w.write({"x": value})
    with pytest.raises(SchemaError, match=(
            r"^Parquet schema mismatch: columns \[x: large_string\] differ from the first file's "
            rf"\[x: int64\] \({tmp_path / 'p' / 'b.parquet'}\)$")):
        ParquetSource(tmp_path / "p").units()


def test_msgpack_tar_and_dataset_sources(tmp_path):
    with hpcio.open_writer(tmp_path / "m", format="msgpack", max_count=20) as w:
        for r in ROWS:
            w.write(r)
    src = open_source(tmp_path / "m")
    assert isinstance(src, MsgpackSource) and len(src.units()) == 3
    assert list(src) == ROWS
    with hpcio.open_writer(tmp_path / "t", format="webdataset", max_count=20) as w:
        for r in ROWS:
            w.write(r)
    tars = open_source(tmp_path / "t")
    assert isinstance(tars, TarSource) and [u.kind for u in tars.units()] == ["file"] * 3
    assert list(tars) == ROWS
    with hpcio.open_writer(tmp_path / "z", format="zarr") as w:
        for r in ROWS:
            w.write({**r, "v": np.full(2, r["id"], np.int32)})
    ds = open_source(tmp_path / "z", samples_per_unit=16)
    assert isinstance(ds, DatasetSource)
    assert [(u.start, u.stop, u.count) for u in ds.units()] == [(0, 16, 16), (16, 32, 16), (32, 48, 16), (48, 50, 2)]
    assert [s["id"] for s in ds.samples(ds.units()[3])] == [48, 49]


def test_image_folder_source(tmp_path):
    for cls in ("b", "a"):
        os.makedirs(tmp_path / cls)
        (tmp_path / cls / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n" + cls.encode())
    src = open_source(tmp_path, format="imagefolder", labels="index")
    assert [s["label"] for s in src] == [0, 1]
