"""MessagePack streams: conformance, files from the msgpack library, the offset index,
truncated and invalid streams."""

import msgpack
import numpy as np
import pytest

import hpcio
from hpcio.distributed import GlobalOrder
from hpcio.errors import CorruptShardError, TruncatedShardError
from hpcio.formats import msgpack as mfmt
from hpcio.testing import FormatTests, assert_sample_equal


class TestMsgpackFormat(FormatTests):
    format_name = "msgpack"
    writer_options = {"max_count": 20}
    report_options = {"max_count": 2}
    expected_inspect = {"shards": 3, "fields": {"id": "int", "text": "str", "meta": "json"}, "details": {}}
    expected_hashes_checked = 3  # the shard hashes of hashes.json
    corruption = (b"t3", b"\xff3")  # not UTF-8
    expected_hash_problem = {
        "path": "{file}", "offset": 0, "sample": None, "type": "ChecksumMismatchError",
        "error": "xxh3_64 mismatch: hashes.json says eb5ce16a1ccec1eb, bytes [0, 44) of the file hash to "
                 "5de79a761b728131 ({file}, byte offset 0)"}
    expected_problem = {
        "path": "{file}", "offset": 22, "sample": 3, "type": "CorruptShardError",
        "error": "invalid MessagePack data: 'utf-8' codec can't decode byte 0xff in position 0: "
                 "invalid start byte ({file}, byte offset 22, sample 3)"}


def test_reads_plain_msgpack_stream(tmp_path):
    path = tmp_path / "raw.msgpack"
    with open(path, "wb") as f:
        for i in range(6):
            f.write(msgpack.packb({"id": i, "text": f"t{i}", "blob": bytes([i]) * i}))
    ds = hpcio.open(path)
    assert len(ds) == 6
    assert ds[5] == {"id": 5, "text": "t5", "blob": b"\x05" * 5}
    assert [s["id"] for s in ds.shuffle(seed=3)] == GlobalOrder(6, seed=3).tolist()


def test_arrays_and_json_round_trip(tmp_path):
    samples = [{"emb": np.arange(i, dtype=np.float32).reshape(1, i), "meta": {"a": [1, None, 2.5]}}
               for i in range(1, 4)]
    with hpcio.open_writer(tmp_path / "m.msgpack", format="msgpack") as w:
        for s in samples:
            w.write(s)
    for got, exp in zip(hpcio.open(tmp_path / "m.msgpack"), samples):
        assert_sample_equal(got, exp)


def test_offset_index(tmp_path):
    data = b"".join(msgpack.packb({"i": i}) for i in range(3))
    assert mfmt.build_index(data).tolist() == [0, 4, 8, 12]


def test_truncated_and_invalid(tmp_path):
    path = tmp_path / "t.msgpack"
    data = b"".join(msgpack.packb({"text": "x" * 20}) for _ in range(3))
    path.write_bytes(data[:-5])
    with pytest.raises(TruncatedShardError, match=(
            rf"^MessagePack object truncated: 22 bytes left at the end \({path}, byte offset 54, sample 2\)$")):
        hpcio.open(path)
    path.write_bytes(data + msgpack.packb([1, 2]))
    ds = hpcio.open(path)
    with pytest.raises(CorruptShardError, match=rf"^expected a map, got list \({path}, byte offset 81, sample 3\)$"):
        ds[3]
