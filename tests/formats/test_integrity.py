"""Integrity data written by default, and the index counts readers cross-check."""

from __future__ import annotations

import json
import os
import struct
import warnings

import pytest

import hpcio
from hpcio.errors import CorruptShardError, DecodeError, HpcioError
from hpcio.formats import mds


def write_mds(path, n=20, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hpcio.open_writer(path, format="mds", size_limit=300, **options) as w:
            for i in range(n):
                w.write({"id": i, "text": f"text {i} " * 3})
    return str(path)


def flip(path, offset, mask=0x20):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def last_record_offset(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<I", data)[0]
    return struct.unpack_from("<I", data, 4 + 4 * (n - 1))[0]


def test_mds_records_an_xxh3_64_hash_of_every_shard_by_default(tmp_path):
    path = write_mds(tmp_path / "d")
    index = json.load(open(f"{path}/index.json"))
    import xxhash

    for shard in index["shards"]:
        assert shard["hashes"] == ["xxh3_64"]
        data = open(os.path.join(path, shard["raw_data"]["basename"]), "rb").read()
        assert shard["raw_data"]["hashes"] == {"xxh3_64": xxhash.xxh3_64(data).hexdigest()}
    assert json.load(open(f"{write_mds(tmp_path / 'none', hashes=[])}/index.json"))["shards"][0]["hashes"] == []


def test_verify_and_validate_hashes_catch_a_value_the_reader_returns_changed(tmp_path):
    path = write_mds(tmp_path / "d")
    shard = f"{path}/shard.00000.mds"
    flip(shard, last_record_offset(shard) + 12)  # inside the text value: still valid UTF-8
    last = struct.unpack_from("<I", open(shard, "rb").read())[0] - 1
    assert hpcio.open(path)[last]["text"] != f"text {last} " * 3  # read back wrong, no error
    report = mds.verify(path)
    assert not report["ok"] and report["errors"][0]["type"] == "CorruptShardError"
    assert "xxh3_64 mismatch" in report["errors"][0]["error"] and report["errors"][0]["path"] == shard
    with pytest.raises(CorruptShardError, match="xxh3_64 mismatch"):
        hpcio.open(path, validate_hashes=True)[0]


def test_sample_zstd_records_carry_a_frame_checksum(tmp_path):
    path = write_mds(tmp_path / "d", compression="sample::zstd")
    shard = f"{path}/shard.00000.mds"
    data = open(shard, "rb").read()
    begin = last_record_offset(shard)
    assert data[begin : begin + 4] == b"\x28\xb5\x2f\xfd" and data[begin + 4] & 0x04  # Content_Checksum_flag
    flip(shard, len(data) - 6)  # a byte of the last frame's compressed block
    ds = hpcio.open(path)
    n = struct.unpack_from("<I", data)[0]
    with pytest.raises(DecodeError) as info:
        ds[n - 1]
    assert info.value.path == shard and info.value.sample == n - 1
    plain = write_mds(tmp_path / "plain", compression="sample::zstd", frame_checksums=False)
    first = open(f"{plain}/shard.00000.mds", "rb").read()
    assert not first[last_record_offset(f"{plain}/shard.00000.mds") + 4] & 0x04


def set_count(path, shard, value):
    index_path = f"{path}/index.json"
    index = json.load(open(index_path))
    index["shards"][shard]["samples"] = value
    json.dump(index, open(index_path, "w"))


def test_a_zero_count_never_shifts_later_samples(tmp_path):
    path = write_mds(tmp_path / "d")
    n0 = json.load(open(f"{path}/index.json"))["shards"][0]["samples"]
    set_count(path, 0, 0)
    ds = hpcio.open(path)
    with pytest.raises(CorruptShardError) as info:
        ds[0]  # now the first sample of shard 1
    assert str(info.value) == (f"shard header says {n0} samples, index.json says 0 "
                               f"({path}/shard.00000.mds, byte offset 0)")
    with pytest.raises(CorruptShardError, match="shard header says"):
        list(hpcio.open(path))


def test_counts_summing_to_2_64_are_refused_at_open(tmp_path):
    path = write_mds(tmp_path / "d")
    index = json.load(open(f"{path}/index.json"))
    rest = sum(s["samples"] for s in index["shards"][1:])
    set_count(path, 0, 2**64 - rest)
    with pytest.raises(CorruptShardError) as info:
        hpcio.open(path)
    assert str(info.value).startswith(f"shard entry 0 of index.json: 'samples' is {2**64 - rest}, but a shard of ")
    assert info.value.path == f"{path}/index.json"


def test_a_count_the_shard_size_cannot_hold_is_refused(tmp_path):
    path = write_mds(tmp_path / "d")
    set_count(path, 1, 10**6)
    with pytest.raises(HpcioError, match=r"shard entry 1 of index.json: 'samples' is 1000000, but a shard of \d+ "
                                         r"bytes holds at most \d+"):
        hpcio.open(path)


def test_a_shard_size_rewritten_in_the_index_is_refused_before_later_shards_are_read(tmp_path):
    path = write_mds(tmp_path / "d")
    index = json.load(open(f"{path}/index.json"))
    index["shards"][0]["raw_data"]["bytes"] += 4
    json.dump(index, open(f"{path}/index.json", "w"))
    ds = hpcio.open(path)
    with pytest.raises(CorruptShardError, match="shard is .* bytes, index.json says"):
        ds[len(ds) - 1]


def test_hdf5_chunks_carry_a_fletcher32_checksum(tmp_path):
    import h5py

    with hpcio.open_writer(tmp_path / "h", format="hdf5", compression=None) as w:
        for i in range(30):
            w.write({"id": i, "text": f"text {i}"})
    path = str(tmp_path / "h" / "shard-000000.h5")
    with h5py.File(path) as f:
        assert f["id"].fletcher32 and f["text/data"].fletcher32 and f["text/offsets"].fletcher32
        at = f["text/data"].id.get_chunk_info(0).byte_offset
    flip(path, at + 3, 0x01)  # "text 0" -> "tevt 0": still valid UTF-8
    with pytest.raises(CorruptShardError, match="filter returned failure") as info:
        hpcio.open(tmp_path / "h")[0]
    assert info.value.path == path
    report = hpcio.registry.get_format("hdf5").verify(str(tmp_path / "h"))
    assert not report["ok"] and report["errors"][0]["type"] == "CorruptShardError"


def test_zarr_chunks_carry_a_crc32c_checksum(tmp_path):
    with hpcio.open_writer(tmp_path / "z", format="zarr", compression=None) as w:
        for i in range(30):
            w.write({"id": i, "text": f"text {i}"})
    meta = json.load(open(tmp_path / "z" / "part-00000" / "text" / "data" / "zarr.json"))
    assert meta["codecs"][0]["configuration"]["codecs"][-1] == {"name": "crc32c"}
    chunk = str(tmp_path / "z" / "part-00000" / "text" / "data" / "c" / "0")
    flip(chunk, 1, 0x01)  # "text 0" -> "tdxt 0": still valid UTF-8
    with pytest.raises(CorruptShardError, match="checksum do not match"):
        hpcio.open(tmp_path / "z")[0]
    report = hpcio.registry.get_format("zarr").verify(str(tmp_path / "z"))
    assert not report["ok"] and report["errors"][0]["type"] == "CorruptShardError"


def test_parquet_pages_carry_a_crc_the_reader_checks(tmp_path):
    with hpcio.open_writer(tmp_path / "q", format="parquet", compression="none") as w:
        for i in range(30):
            w.write({"id": i, "text": f"text {i}"})
    path = str(tmp_path / "q" / "part-000000.parquet")
    flip(path, open(path, "rb").read().find(b"text 3") + 1, 0x01)
    with pytest.raises(CorruptShardError, match="CRC checksum verification failed") as info:
        hpcio.open(tmp_path / "q")[0]
    assert info.value.path == path
    report = hpcio.registry.get_format("parquet").verify(str(tmp_path / "q"))
    assert not report["ok"] and report["errors"][0]["type"] == "CorruptShardError"


@pytest.mark.parametrize("placed", ["0", str(1 << 40)])
def test_converted_mds_records_the_hash_of_every_shard(tmp_path, monkeypatch, placed):
    """Records placed by ranks straight into their shard (run bytes >= the threshold) or
    written by one shard writer: either way every shard's hash is in index.json."""
    from hpcio.convert.driver import PLACED_RUN_BYTES_ENV

    monkeypatch.setenv(PLACED_RUN_BYTES_ENV, placed)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"text {i}"}) + "\n" for i in range(40)))
    hpcio.convert(str(src), str(tmp_path / "out"), to="mds", num_shards=4)
    index = json.load(open(tmp_path / "out" / "index.json"))
    assert [sorted(s["raw_data"]["hashes"]) for s in index["shards"]] == [["xxh3_64"]] * 4
    report = mds.verify(str(tmp_path / "out"))
    assert report["ok"] and report["hashes_checked"] == 4


def test_an_unknown_compression_in_a_shard_header_is_a_corrupt_shard(tmp_path):
    path = write_mds(tmp_path / "d", compression="sample::zstd")
    shard = f"{path}/shard.00000.mds"
    data = open(shard, "rb").read()
    at = data.index(b"sample::zstd") + len("sample::z")
    flip(shard, at, ord("s") ^ ord("t"))  # sample::zstd -> sample::ztd... still JSON
    with pytest.raises(CorruptShardError, match="the shard's embedded config: unknown MDS compression 'sample::zttd'"):
        hpcio.open(path)[0]
