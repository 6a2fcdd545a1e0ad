"""Integrity data written by default, and the index counts readers cross-check."""

from __future__ import annotations

import json
import os
import struct
import warnings

import pytest

import hpcio
from hpcio.errors import ChecksumMismatchError, CorruptShardError, DecodeError, HpcioError
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


def test_a_compressed_shard_whose_zip_data_size_is_wrong_is_refused_and_verify_says_so(tmp_path):
    """``zip_data.bytes`` is trusted only once the file has that size: the one shard of
    a whole-shard compressed dataset is checked too, not only the shards before another."""
    from hpcio.errors import TruncatedShardError

    path = tmp_path / "z"
    with hpcio.open_writer(path, format="mds", compression="zstd") as w:
        for i in range(20):
            w.write({"id": i, "text": "x" * 50})
    index = json.load(open(path / "index.json"))
    entry = index["shards"][0]["zip_data"]
    size = entry["bytes"]
    entry["bytes"] += 7
    json.dump(index, open(path / "index.json", "w"))
    (path / "index.hpcio").unlink(missing_ok=True)
    message = f"shard is {size} bytes, index.json says {size + 7}"
    with pytest.raises(TruncatedShardError, match=message):
        hpcio.open(path)[0]
    report = mds.verify(str(path))
    assert not report["ok"] and [message in str(e) for e in report["errors"]] == [True]


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
    # the file's xxh3_64 in hashes.json, then the page's CRC
    assert not report["ok"] and [e["type"] for e in report["errors"][:2]] == ["ChecksumMismatchError",
                                                                              "CorruptShardError"]


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


# --- JINX, WebDataset, MessagePack, JSON Lines: hashes hpcio keeps -------------------------
KEPT = {  # format -> (dataset name, writer options, data file named in the errors)
    "jinx": ("d.jinx", {}, "d.jinx"),
    "webdataset": ("w", {"max_count": 10}, "w/shard-000000.tar"),
    "msgpack": ("m", {"max_count": 10}, "m/shard-000000.msgpack"),
    "jsonl": ("j.jsonl", {}, "j.jsonl"),
}


def kept_samples(n=20):
    return [{"id": i, "text": f"text {i} " * 3} for i in range(n)]


def write_kept(tmp_path, fmt, **options):
    name, defaults, data = KEPT[fmt]
    tmp_path.mkdir(parents=True, exist_ok=True)
    with hpcio.open_writer(tmp_path / name, format=fmt, **{**defaults, **options}) as w:
        for s in kept_samples():
            w.write(s)
    return str(tmp_path / name), str(tmp_path / data)


def expected_mismatch(fmt, data):
    """The message of the ChecksumMismatchError the damaged ``data`` file must raise."""
    import orjson
    import xxhash

    raw = open(data, "rb").read()
    if fmt == "jinx":
        fo = int(raw[:-1].rsplit(b"\n", 1)[1])
        footer = orjson.loads(raw[fo:].split(b"\n", 1)[0])
        want = footer.pop("hash").split(":", 1)[1]
        got = xxhash.xxh3_64(raw[:fo] + orjson.dumps(footer)).hexdigest()
        return (f"xxh3_64 mismatch: the footer's hash says {want}, bytes [0, {fo}) and the footer hash to {got} "
                f"({data}, byte offset 0)")
    manifest = os.path.join(os.path.dirname(data), "hashes.json") if fmt != "jsonl" else data + ".hashes.json"
    want = json.load(open(manifest))["files"][os.path.basename(data)]["hashes"]["xxh3_64"]
    got = xxhash.xxh3_64(raw).hexdigest()
    return (f"xxh3_64 mismatch: {os.path.basename(manifest)} says {want}, bytes [0, {len(raw)}) of the file "
            f"hash to {got} ({data}, byte offset 0)")


@pytest.mark.parametrize("fmt", KEPT)
def test_hashes_are_recorded_by_default_and_reads_are_unchanged(tmp_path, fmt):
    path, _ = write_kept(tmp_path, fmt)
    assert [dict(s) for s in hpcio.open(path, validate_hashes=True)] == kept_samples()
    assert [dict(s) for s in hpcio.open(path, validate_hashes="xxh3_64")] == kept_samples()
    report = hpcio.registry.get_format(fmt).verify(path)
    assert report["ok"] and report["hashes_checked"] >= (2 if fmt in ("webdataset", "msgpack") else 1)


@pytest.mark.parametrize("fmt", KEPT)
def test_a_flipped_byte_is_caught_by_verify_and_validate_hashes(tmp_path, fmt):
    path, data = write_kept(tmp_path, fmt)
    flip(data, open(data, "rb").read().index(b"text 3 ") + 2, 0x01)  # "text" -> "teyt": still valid
    assert dict(hpcio.open(path)[3])["text"] != "text 3 " * 3  # read back wrong, no error
    message = expected_mismatch(fmt, data)
    report = hpcio.registry.get_format(fmt).verify(path)
    assert not report["ok"]
    assert report["errors"][0] == {"path": data, "offset": 0, "sample": None, "type": "ChecksumMismatchError",
                                   "error": message}
    with pytest.raises(ChecksumMismatchError) as info:
        hpcio.open(path, validate_hashes=True)
    assert str(info.value) == message and info.value.path == data


@pytest.mark.parametrize("fmt", KEPT)
def test_hashes_opt_out_writes_the_same_data_files_alone(tmp_path, fmt):
    with_hashes, _ = write_kept(tmp_path / "a", fmt)
    without, _ = write_kept(tmp_path / "b", fmt, hashes=[])
    verify = hpcio.registry.get_format(fmt).verify
    files = 2 if os.path.isdir(without) else 1  # 20 samples, 10 a shard
    assert verify(with_hashes)["hashes_checked"] - verify(without)["hashes_checked"] == files
    with pytest.raises(CorruptShardError, match="records no xxh3_64 hash|no hash manifest records"):
        hpcio.open(without, validate_hashes="xxh3_64")
    assert [dict(s) for s in hpcio.open(without, validate_hashes=True)] == kept_samples()
    if fmt == "jinx":  # the footer loses its hash and nothing else
        ours, plain = open(with_hashes, "rb").read(), open(without, "rb").read()
        assert ours.split(b"\n")[:-3] == plain.split(b"\n")[:-3]
        footer = json.loads(ours.split(b"\n")[-3])
        del footer["hash"]
        assert footer == json.loads(plain.split(b"\n")[-3])
        return
    directory = without if os.path.isdir(without) else os.path.dirname(without)
    manifest = "hashes.json" if os.path.isdir(without) else os.path.basename(without) + ".hashes.json"
    data_files = sorted(os.listdir(directory))
    assert sorted(os.listdir(os.path.join(tmp_path, "a", os.path.relpath(directory, tmp_path / "b")))) == sorted(
        data_files + [manifest])
    for name in data_files:
        other = os.path.join(tmp_path, "a", os.path.relpath(os.path.join(directory, name), tmp_path / "b"))
        assert open(other, "rb").read() == open(os.path.join(directory, name), "rb").read(), name


def test_jinx_sidecar_hash_names_the_sidecar(tmp_path):
    path = str(tmp_path / "s.jinx")
    with hpcio.open_writer(path, format="jinx", binary_threshold=8) as w:
        for i in range(10):
            w.write({"id": i, "blob": bytes(range(i, i + 30))})
    binx = str(tmp_path / "s.binx")
    flip(binx, 5)
    report = hpcio.registry.get_format("jinx").verify(path)
    assert report["errors"][0]["path"] == binx and report["errors"][0]["type"] == "ChecksumMismatchError"
    assert report["errors"][0]["error"].startswith("xxh3_64 mismatch: the footer's binx_hash says ")
    with pytest.raises(ChecksumMismatchError, match=r"bytes \[0, \d+\) of the sidecar hash to"):
        hpcio.open(path, validate_hashes=True)


def test_parallel_webdataset_conversion_records_every_shard(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"text {i}"}) + "\n" for i in range(40)))
    hpcio.convert(str(src), str(tmp_path / "out"), to="webdataset", num_shards=4)
    manifest = json.load(open(tmp_path / "out" / "hashes.json"))
    assert sorted(manifest["files"]) == [f"shard-{i:06d}.tar" for i in range(4)]
    report = hpcio.registry.get_format("webdataset").verify(str(tmp_path / "out"))
    assert report["ok"] and report["hashes_checked"] == 4 + 80  # shard hashes, tar headers
    os.remove(tmp_path / "out" / "shard-000002.tar")
    report = hpcio.registry.get_format("webdataset").verify(str(tmp_path / "out"))
    assert [e["error"] for e in report["errors"]] == [
        f"hashes.json names 'shard-000002.tar', which is missing ({tmp_path / 'out' / 'hashes.json'})"]
