"""Zarr v3 stores: conformance, the layout as zarr itself sees it, sharding, parts
written by separate writers, and a store missing a shard."""

import os

import numpy as np
import pytest

import hpcio
from hpcio.errors import SchemaError, ShardNotFoundError
from hpcio.formats import zarr as zfmt
from hpcio.testing import FormatTests, assert_sample_equal

SMALL = {"chunk_samples": 8, "shard_samples": 16, "chunk_bytes": 256, "shard_bytes": 1024}


class TestZarrFormat(FormatTests):
    format_name = "zarr"
    # bytes chunks large enough that the 24 MiB sample stays a few hundred chunks
    writer_options = {**SMALL, "chunk_bytes": 64 << 10, "shard_bytes": 1 << 20}
    report_path = "store"
    report_options = {"compression": None, "checksum": False}  # values decoded, not checksummed
    expected_inspect = {"shards": 1, "fields": {"id": "int", "text": "str", "meta": "json"},
                        "details": {"layout_version": 1, "parts": {"part-00000": 5}}}
    corruption = (b'{"i":3}', b'{"i":3!')
    expected_problem = {"path": "{path}/part-00000", "offset": None, "sample": 3, "type": "DecodeError",
                        "error": "field 'meta' is not valid JSON: Expecting ',' delimiter: line 1 column 7 (char 6) ({path}/part-00000, sample 3)"}


def sample(i):
    return {"emb": np.full((2, 3), i, dtype=np.float32), "label": i - 3, "score": i / 3,
            "text": f"t{i}", "meta": {"i": [i, None, True]}, "blob": bytes([i]) * i}


def write(path, samples, **options):
    with hpcio.open_writer(path, format="zarr", **{**SMALL, **options}) as w:
        for s in samples:
            w.write(s)
    return str(path)


def test_zarr_opens_the_arrays(tmp_path):
    import zarr

    samples = [sample(i) for i in range(40)]
    path = write(tmp_path / "z", samples, compression="lz4")
    root = zarr.open_group(path, mode="r")
    assert root.attrs["hpcio"]["num_samples"] == 40
    part = root["part-00000"]
    assert part["emb"].shape == (40, 2, 3) and part["emb"].shards == (16, 2, 3)
    assert part["emb"].chunks == (8, 2, 3)
    np.testing.assert_array_equal(part["emb"][:], np.stack([s["emb"] for s in samples]))
    np.testing.assert_array_equal(part["label"][:], np.arange(40) - 3)
    offsets = part["text/offsets"][:]
    data = part["text/data"][:].tobytes()
    assert [data[a:b].decode() for a, b in zip(offsets[:-1], offsets[1:])] == [f"t{i}" for i in range(40)]
    # sharding: 40 samples in shards of 16 are 3 files per sample-indexed array
    assert sorted(os.listdir(os.path.join(path, "part-00000", "label", "c"))) == ["0", "1", "2"]


def test_typed_round_trip_and_batches(tmp_path):
    samples = [sample(i) for i in range(40)]
    ds = hpcio.open(write(tmp_path / "z", samples))
    idx = [39, 0, 17, 17, 5]
    for j, got in zip(idx, ds.get_batch(idx)):
        assert_sample_equal(got, samples[j], f"sample {j}")
    assert type(ds[3]["label"]) is int and type(ds[3]["score"]) is float
    assert ds.select(["blob"])[7] == {"blob": bytes([7]) * 7}


def test_parts_from_parallel_writers(tmp_path):
    path = tmp_path / "z"
    samples = [sample(i) for i in range(30)]
    for part, chunk in enumerate((samples[:12], samples[12:])):
        with hpcio.open_writer(path, format="zarr", part=part, **SMALL) as w:
            for s in chunk:
                w.write(s)
    assert not zfmt.sniff(path)  # not visible before finalize
    zfmt.finalize(path)
    ds = hpcio.open(path)
    assert len(ds) == 30
    for i in (0, 11, 12, 29):
        assert_sample_equal(ds[i], samples[i], f"sample {i}")


def test_schema_mismatch(tmp_path):
    with pytest.raises(SchemaError, match=r"^field 'label': expected int, got str \(.*z, sample 1\)$"):
        write(tmp_path / "z", [{"label": 1}, {"label": "x"}])
    with pytest.raises(SchemaError, match=r"expected an array of dtype <f4 and shape \(2, 3\), got <f4 \(3,\)"):
        write(tmp_path / "y", [sample(0), {**sample(1), "emb": np.zeros(3, np.float32)}])
    ragged = [{"a": np.zeros(i, np.int16)} for i in range(1, 4)]
    ds = hpcio.open(write(tmp_path / "r", ragged, schema={"a": "npy"}))
    assert [s["a"].shape for s in ds] == [(1,), (2,), (3,)]


def test_missing_shard(tmp_path):
    path = write(tmp_path / "z", [sample(i) for i in range(40)])
    victim = os.path.join(path, "part-00000", "label", "c", "1")
    os.remove(victim)
    ds = hpcio.open(path)
    assert ds[3]["label"] == 0  # shard 0 is intact
    with pytest.raises(ShardNotFoundError, match=rf"^array 'label' is missing shard 1 \({victim}, sample 20\)$"):
        ds[20]
    os.remove(os.path.join(path, "part-00000", "text", "offsets", "c", "0"))
    ds = hpcio.open(path)  # opening reads no chunk file: a part's offsets are read at its first read
    with pytest.raises(ShardNotFoundError, match=r"^array 'text/offsets' is missing shard 0 "):
        ds[3]


def test_array_metadata_with_a_number_past_64_bits_is_corruption(tmp_path):
    """zarr raises OverflowError for a fill value of 2**64: a damaged zarr.json, reported as such."""
    import json

    from hpcio.errors import CorruptShardError

    path = tmp_path / "z"
    with hpcio.open_writer(path, format="zarr") as w:
        for i in range(4):
            w.write({"id": i, "blob": bytes([i]) * 10})
    meta = path / "part-00000" / "blob" / "offsets" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["fill_value"] = 2**64
    meta.write_text(json.dumps(doc))
    with pytest.raises(CorruptShardError, match=r"^array 'blob/offsets' cannot be opened: OverflowError"):
        hpcio.open(path)[0]
