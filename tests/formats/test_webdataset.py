"""WebDataset shards: conformance, byte-exact interop with the webdataset library,
deterministic bytes, rollover, key grouping, sidecars, streaming and damaged tars."""

import hashlib
import io
import json
import os
import tarfile

import numpy as np
import pytest

import hpcio
from hpcio.distributed import GlobalOrder
from hpcio.errors import CorruptShardError, TruncatedShardError, UnsupportedValueError
from hpcio.formats import webdataset as wdsfmt
from hpcio.testing import FormatTests, assert_sample_equal

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(60))


class TestWebDatasetFormat(FormatTests):
    format_name = "webdataset"
    writer_options = {"max_count": 20}
    report_options = {"max_count": 2}
    expected_inspect = {"shards": 3, "fields": {"id": "id", "meta": "json", "text": "text"},
                        "details": {"members": 15}}
    expected_hashes_checked = 18  # tar header checksums and the 3 shard hashes of hashes.json
    corruption = (b'{"i":3}', b'{"i":3!')
    expected_hash_problem = {"path": "{file}", "offset": 0, "sample": None, "type": "ChecksumMismatchError",
                             "error": "xxh3_64 mismatch: hashes.json says c6485b4a0c98c3b2, bytes [0, 10240) "
                                      "of the file hash to 64eaafbd8a7ee0a6 ({file}, byte offset 0)"}
    expected_problem = {"path": "{file}", "offset": None, "sample": 3, "type": "DecodeError",
                        "error": "field 'meta' is not valid JSON: Expecting ',' delimiter: line 1 column 7 (char 6) ({file}, sample 3)"}


def typed_sample(i):
    return {
        "blob": bytes([i]) * (i * 3),
        "caption": f"caption {i} é",
        "cls": i % 4,
        "image": PNG if i % 2 else JPEG,
        "meta": {"i": i, "tags": ["a", None, True], "x": 0.1 * i},
        "score": i / 7,
        "emb": np.arange(i, i + 6, dtype=np.float32).reshape(2, 3),
        "jpg": JPEG,
    }


def write(path, samples, **options):
    with hpcio.open_writer(path, format="webdataset", **options) as w:
        for s in samples:
            w.write(s)
    return path


def test_member_names_and_extensions(tmp_path):
    write(tmp_path / "ds", [typed_sample(1)])
    with tarfile.open(tmp_path / "ds" / "shard-000000.tar") as t:
        members = t.getmembers()
    assert [m.name for m in members] == [
        "000000000.blob.bin", "000000000.caption.txt", "000000000.cls",
        "000000000.emb.npy", "000000000.image.png", "000000000.jpg",
        "000000000.meta.json", "000000000.score.json",
    ]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {
        (0, 0, "", "", wdsfmt.FIXED_MTIME)}


def test_typed_round_trip(tmp_path):
    samples = [typed_sample(i) for i in range(9)]
    ds = hpcio.open(write(tmp_path / "ds", samples, max_count=4))
    assert len(ds) == 9
    for i, s in enumerate(samples):
        assert_sample_equal(ds[i], s, f"sample {i}")
    assert ds[3]["emb"].dtype == np.float32 and ds[3]["emb"].shape == (2, 3)


def test_equal_input_gives_equal_bytes(tmp_path):
    samples = [typed_sample(i) for i in range(5)]
    digests = []
    for name in ("a", "b"):
        write(tmp_path / name, [dict(reversed(list(s.items()))) if name == "b" else s for s in samples])
        data = (tmp_path / name / "shard-000000.tar").read_bytes()
        digests.append(hashlib.sha256(data).hexdigest())
    assert digests[0] == digests[1]


def test_count_and_size_rollover(tmp_path):
    samples = [{"blob": bytes(3000)} for _ in range(10)]
    write(tmp_path / "c", samples, max_count=4)
    assert sorted(os.listdir(tmp_path / "c")) == ["hashes.json"] + [f"shard-{i:06d}.tar" for i in range(3)]
    # each sample is 512 header + 3072 data: two fit under 8000 bytes
    write(tmp_path / "s", samples, max_size=8000)
    assert len(os.listdir(tmp_path / "s")) == 5 + 1  # and hashes.json
    assert len(hpcio.open(tmp_path / "s")) == 10


def test_read_by_webdataset_library(tmp_path):
    import webdataset as wds

    samples = [typed_sample(i) for i in range(6)]
    write(tmp_path / "ds", samples, max_count=4)
    assert (tmp_path / "ds" / "hashes.json").is_file()  # beside the tars webdataset reads unchanged
    urls = [str(tmp_path / "ds" / f"shard-{i:06d}.tar") for i in range(2)]
    got = list(wds.WebDataset(urls, shardshuffle=False))
    assert len(got) == 6
    for i, (g, s) in enumerate(zip(got, samples)):
        assert g["__key__"] == f"{i:09d}"
        assert g["blob.bin"] == s["blob"]
        assert g["caption.txt"] == s["caption"].encode()
        assert g["cls"] == str(s["cls"]).encode()
        assert g["jpg"] == s["jpg"]
        assert g["image.png" if i % 2 else "image.jpg"] == s["image"]
        assert np.load(io.BytesIO(g["emb.npy"])).tobytes() == s["emb"].tobytes()
    decoded = next(iter(wds.WebDataset(urls, shardshuffle=False).decode()))
    assert decoded["cls"] == 0 and decoded["meta.json"] == samples[0]["meta"]


def test_reads_tar_written_by_webdataset_library(tmp_path):
    import webdataset as wds

    path = str(tmp_path / "lib.tar")
    with wds.TarWriter(path) as sink:
        for i in range(5):
            sink.write({"__key__": f"k{i:03d}", "jpg": JPEG, "cls": i, "json": {"i": i},
                        "txt": f"text {i}"})
    ds = hpcio.open(path)
    assert len(ds) == 5
    assert ds[4] == {"jpg": JPEG, "cls": 4, "json": {"i": 4}, "txt": "text 4"}
    raw = hpcio.open(path, decode=False, include_key=True)[2]
    assert raw == {"__key__": "k002", "jpg": JPEG, "cls": b"2", "json": b'{"i": 2}', "txt": b"text 2"}


def tar_bytes(names):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in names:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_key_dots_and_directories(tmp_path):
    path = tmp_path / "dots.tar"
    path.write_bytes(tar_bytes([
        ("dir/img.0001.jpg", JPEG), ("dir/img.0001.txt", b"one"),
        ("dir/img.0002.jpg", PNG), ("dir/img.0002.txt", b"two"), ("README", b"no suffix"),
        ("x/" + "long" * 40 + ".txt", b"long name"),
    ]))
    default = hpcio.open(path, format="webdataset", include_key=True)
    assert [s["__key__"] for s in default] == ["dir/img", "x/" + "long" * 40]
    assert default[1]["txt"] == "long name"  # a GNU long-name member
    ds = hpcio.open(path, format="webdataset", key_dots=1, include_key=True)
    assert len(ds) == 2  # the long name has a single dot: no suffix, skipped as webdataset does
    assert ds[1] == {"__key__": "dir/img.0002", "jpg": PNG, "txt": "two"}


def test_sidecars_merge_by_key(tmp_path):
    images = [{"__key__": f"s{i:04d}", "jpg": JPEG} for i in range(7)]
    captions = [{"__key__": f"s{i:04d}", "caption": f"c{i}"} for i in range(7)]
    write(tmp_path / "img", images, max_count=3)
    write(tmp_path / "cap", captions, max_count=3)
    ds = hpcio.open(tmp_path / "img", sidecars=[tmp_path / "cap"])
    assert ds[5] == {"jpg": JPEG, "caption": "c5"}
    assert [s["caption"] for s in ds.shuffle(seed=1)] == [
        f"c{i}" for i in GlobalOrder(7, seed=1)]
    write(tmp_path / "bad", [{"__key__": f"t{i:04d}", "caption": "x"} for i in range(7)], max_count=3)
    ds = hpcio.open(tmp_path / "img", sidecars=[tmp_path / "bad"])
    with pytest.raises(CorruptShardError, match=r"^sidecar key 't0000' does not match key 's0000' "
                       r"\(.*bad/shard-000000.tar, sample 0\)$"):
        ds[0]


def test_stream_iteration(tmp_path):
    samples = [typed_sample(i) for i in range(4)]
    write(tmp_path / "ds", samples)
    with open(tmp_path / "ds" / "shard-000000.tar", "rb") as f:
        got = list(wdsfmt.iter_tar(f, include_key=False))
    for g, s in zip(got, samples):
        assert_sample_equal(g, s)


def test_hashes_json_records_each_tars_sample_count(tmp_path):
    write(tmp_path / "ds", [typed_sample(i) for i in range(5)], max_count=2)
    files = json.loads((tmp_path / "ds" / "hashes.json").read_text())["files"]
    assert {name: entry["samples"] for name, entry in files.items()} == {
        "shard-000000.tar": 2, "shard-000001.tar": 2, "shard-000002.tar": 1}


def test_tars_are_scanned_when_first_read_not_at_open(tmp_path):
    """Opening reads no tar when hashes.json gives the counts; reading a sample brings in
    its own tar only, so a pass over a dataset larger than memory reads each tar once."""
    from hpcio.bench import pagecache

    rng = np.random.default_rng(0)
    samples = [{"n": i, "bin": rng.bytes(1 << 20)} for i in range(6)]
    write(tmp_path / "ds", samples, max_count=2)
    tars = sorted(str(p) for p in (tmp_path / "ds").glob("*.tar"))
    pagecache.evict(tars)
    with hpcio.open(tmp_path / "ds") as ds:
        assert len(ds) == 6
        # opening reads a tar's first block only (is it gzip?): tens of KiB of 2 MiB
        assert [pagecache.resident([t]).fraction < 0.1 for t in tars] == [True, True, True]
        assert ds[3] == samples[3]
        assert [pagecache.resident([t]).fraction < 0.1 for t in tars] == [True, False, True]
        assert pagecache.resident([tars[1]]).fraction == 1.0
        assert list(ds) == samples


def test_a_recorded_count_the_tar_contradicts_is_corrupt(tmp_path):
    write(tmp_path / "ds", [typed_sample(i) for i in range(3)])
    manifest = tmp_path / "ds" / "hashes.json"
    doc = json.loads(manifest.read_text())
    doc["files"]["shard-000000.tar"]["samples"] = 4
    manifest.write_text(json.dumps(doc))
    with hpcio.open(tmp_path / "ds") as ds:
        assert len(ds) == 4  # the count is taken as recorded until the tar is read
        with pytest.raises(CorruptShardError, match=(
                rf"^the tar holds 3 samples, hashes.json records 4 \({tmp_path / 'ds' / 'shard-000000.tar'}, "
                rf"sample 3\)$")):
            ds[0]


def test_a_count_for_another_size_or_a_garbled_manifest_means_a_scan_at_open(tmp_path):
    write(tmp_path / "ds", [typed_sample(i) for i in range(3)])
    manifest = tmp_path / "ds" / "hashes.json"
    doc = json.loads(manifest.read_text())
    doc["files"]["shard-000000.tar"]["samples"] = 4
    doc["files"]["shard-000000.tar"]["bytes"] += 512
    manifest.write_text(json.dumps(doc))
    with hpcio.open(tmp_path / "ds") as ds:
        assert len(ds) == 3
    manifest.write_text("{garbled")
    with hpcio.open(tmp_path / "ds") as ds:
        assert len(ds) == 3


def test_bad_header_checksum(tmp_path):
    write(tmp_path / "ds", [typed_sample(i) for i in range(3)])
    shard = tmp_path / "ds" / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    with tarfile.open(shard) as t:
        victim = [m for m in t.getmembers() if m.name.startswith("000000001.")][0]
    data[victim.offset] ^= 0x01  # a name byte: the checksum no longer matches
    shard.write_bytes(bytes(data))
    message = (rf"^bad tar header checksum: stored \d+, computed \d+ \({shard}, "
               rf"byte offset {victim.offset}, sample 0\)$")
    # hashes.json records the tar's sample count: the headers are scanned at its first read
    ds = hpcio.open(tmp_path / "ds")
    assert len(ds) == 3
    with pytest.raises(CorruptShardError, match=message):
        ds[2]
    ds.close()
    (tmp_path / "ds" / "hashes.json").unlink()
    with pytest.raises(CorruptShardError, match=message):
        hpcio.open(tmp_path / "ds")
    with pytest.raises(CorruptShardError, match=rf"^bad tar header checksum: .*byte offset {victim.offset}, sample 0\)$"):
        with open(shard, "rb") as f:
            list(wdsfmt.iter_tar(f, path=str(shard)))


def test_truncated_tar(tmp_path):
    write(tmp_path / "ds", [{"blob": bytes(5000)} for _ in range(3)])
    shard = tmp_path / "ds" / "shard-000000.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[: 512 + 5120 + 512 + 1000])
    with pytest.raises(TruncatedShardError, match=(
            rf"^tar member data truncated: header promises 5000 bytes, file has 1000 "
            rf"\({shard}, byte offset 5632, sample 0\)$")):
        hpcio.open(shard)
    shard.write_bytes(data[: 2 * 5632])
    with pytest.raises(TruncatedShardError, match=(
            rf"^tar archive ends without its end-of-archive blocks \({shard}, byte offset 11264, sample 1\)$")):
        hpcio.open(shard)


def test_bad_keys_rejected(tmp_path):
    with pytest.raises(UnsupportedValueError, match=r"^sample key 'a.b' must be non-empty and contain no '.'"):
        write(tmp_path / "k", [{"__key__": "a.b", "x": b""}])
    assert not (tmp_path / "k").exists()


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_member_index_matches_tarfile(fmt):
    from hpcio._core import _tar

    long = "p" * 120 + "/q.bin" if fmt == tarfile.USTAR_FORMAT else "d/" + "x" * 150 + ".bin"
    names = ["a.txt", long] + (["é✓.json"] if fmt != tarfile.USTAR_FORMAT else [])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for i, name in enumerate(names * 400):  # enough members to grow the C buffers
            info = tarfile.TarInfo(name)
            data = bytes([i % 256]) * (i % 700)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    got_names, _headers, offsets, sizes, _end, error = _tar.scan(data)
    expected = [(m.name, m.offset_data, m.size) for m in tarfile.open(fileobj=io.BytesIO(data))]
    assert error is None
    assert [(n.decode(), int(o), int(s)) for n, o, s in zip(got_names, offsets, sizes)] == expected



def test_verify_reports_a_damaged_header(tmp_path):
    path = TestWebDatasetFormat().write_report_dataset(tmp_path)
    shard = os.path.join(path, "shard-000001.tar")
    with open(shard, "r+b") as f:
        f.seek(1024 + 148)  # the checksum field of the second member's header
        f.write(b"0000000")
    report = wdsfmt.verify(path)
    assert report["ok"] is False and report["checked"] == 0
    [mismatch, error] = report["errors"]
    assert (mismatch["path"], mismatch["type"]) == (shard, "ChecksumMismatchError")
    assert (error["path"], error["offset"], error["type"]) == (shard, 1024, "CorruptShardError")
    assert error["error"].startswith("bad tar header checksum: stored 0, computed ")
