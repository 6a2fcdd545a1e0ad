"""MDS ``dict[bytes]``: mappings holding bytes at any depth, stored natively (no pickle)
and read back byte for byte on every read path."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import hpcio
from hpcio._core import _records
from hpcio.errors import DecodeError, SchemaError
from hpcio.formats.mds import infer_columns
from hpcio.formats.mds.encodings import column_codec
from hpcio.formats.mds.streaming_encodings import decode_bytes_dict, encode_bytes_dict, pack_items

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256))


def meta(i: int) -> dict:
    """Mappings of several shapes: bytes at the top, in lists, in mappings in lists, none."""
    shapes = [
        {"thumb": JPEG + bytes([i]), "caption": f"x{i}", "size": [3, 4]},
        {"crops": [b"", JPEG[: i + 1], {"mask": bytes([i]) * 9, "w": 2}], "ok": True, "n": None},
        {"caption": "no bytes this time", "scores": [0.5, 1e300]},
        {},
        {"é": {"deep": {"deeper": [[bytes([i, 255])]]}}, "big": 2**70},
    ]
    return shapes[i % len(shapes)]


SAMPLES = [{"id": i, "meta": meta(i)} for i in range(25)]


def typed(value):
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return type(value).__name__, value


def write(path, samples, **options):
    with hpcio.open_writer(path, format="mds", **options) as w:
        for s in samples:
            w.write(s)
    return path


def test_infers_dict_of_bytes():
    assert infer_columns({"meta": {"thumb": b"x"}}) == {"meta": "dict[bytes]"}
    assert infer_columns({"meta": {"crops": [{"m": bytearray(b"x")}]}}) == {"meta": "dict[bytes]"}
    assert infer_columns({"meta": {"caption": "c"}}) == {"meta": "json"}


def test_layout():
    """streaming's list layout holding the JSON with nulls, the paths, then the bytes."""
    value = {"thumb": b"ab", "caption": "x", "crops": [b"c", {"z": b""}]}
    data = column_codec("dict[bytes]").encode(value)
    text = b'{"thumb": null, "caption": "x", "crops": [null, {"z": null}]}'
    paths = b'[["thumb"], ["crops", 0], ["crops", 1, "z"]]'
    sizes = [len(text), len(paths), 2, 1, 0]
    assert data == np.array([0, 5, *sizes], "<u4").tobytes() + text + paths + b"abc"
    assert data == encode_bytes_dict(value)
    assert _records.bytes_dict(data) == decode_bytes_dict(data) == value
    assert column_codec("dict[bytes]").encode({}) == pack_items([b"{}", b"[]"])


@pytest.mark.parametrize("options", [{}, {"compression": "zstd"}, {"compression": "sample::zstd"},
                                     {"zero_copy": True}], ids=["plain", "zstd", "sample-zstd", "zero-copy"])
def test_round_trip_on_every_read_path(tmp_path, options):
    zero_copy = options.pop("zero_copy", False)
    path = write(tmp_path / "d", SAMPLES, size_limit=2000, **options)
    ds = hpcio.open(path, zero_copy=zero_copy)
    assert ds.reader.columns["meta"] == "dict[bytes]"
    want = [typed(s) for s in SAMPLES]
    assert [typed(dict(s)) for s in ds] == want
    assert [typed(dict(ds[i])) for i in range(len(ds))] == want
    order = np.random.default_rng(0).permutation(len(SAMPLES))
    assert [typed(dict(s)) for s in ds.get_batch(order)] == [want[j] for j in order]
    assert [typed(m) for m in ds.get_columns(order)["meta"]] == [want[j]["meta"] for j in order]
    assert [typed(s["meta"]) for s in ds.select(["meta"])] == [w["meta"] for w in want]


def test_rewritten_byte_for_byte(tmp_path):
    first = write(tmp_path / "a", SAMPLES, size_limit=2000)
    again = write(tmp_path / "b", [dict(s) for s in hpcio.open(first)], size_limit=2000)
    names = sorted(n for n in os.listdir(first) if n.endswith(".mds"))
    assert len(names) > 1 and names == sorted(n for n in os.listdir(again) if n.endswith(".mds"))
    for name in names:
        assert (first / name).read_bytes() == (again / name).read_bytes(), name


@pytest.mark.parametrize("value, message", [
    ({"a": {1: b"x"}}, r"key 1 at \['a'\] is a int; JSON keys are str"),
    ({"a": b"x", "s": {1, 2}}, r"not JSON-serialisable: Object of type set"),
    ({"a": b"x", "arr": np.arange(2)}, r"not JSON-serialisable: Object of type ndarray"),
    ([b"x"], r"expected a mapping \(dict\), got list"),
], ids=["int-key", "set", "ndarray", "list"])
def test_values_it_cannot_hold(tmp_path, value, message):
    with pytest.raises(SchemaError, match=r"column 'meta' \(dict\[bytes\]\) cannot store this value: "
                                          + message + r".*sample 1"):
        write(tmp_path / "d", [{"meta": {"t": b"x"}}, {"meta": value}])
    assert not (tmp_path / "d").exists()


def test_json_column_meeting_bytes_names_the_encoding(tmp_path):
    with pytest.raises(SchemaError, match=r"column 'meta' \(json\) cannot store this value: value\['t'\]\[0\] "
                                          r"is bytes, which JSON cannot hold; declare the column dict\[bytes\]"):
        write(tmp_path / "d", [{"meta": {"t": [1]}}, {"meta": {"t": [b"x"]}}])


@pytest.mark.parametrize("items, message", [
    ([b'{"a": 1}', b'[["b"]]', b"x"], r"path \['b'\] of a dict\[bytes\] value leads nowhere"),
    ([b'{"a": 1}', b'[["a"]]', b"x"], r"path \['a'\] of a dict\[bytes\] value holds no placeholder"),
    ([b'{"a": null}', b'[]', b"x"], r"a dict\[bytes\] value holds 1 bytes items for 0 paths"),
    ([b'{"a": [null]}', b'[["a", 1]]', b"x"], r"path \['a', 1\] of a dict\[bytes\] value leads nowhere"),
    ([b'[1]', b'[]'], r"a dict\[bytes\] value holds 0 bytes items for 0 paths"),
    ([b'{"a": no}', b'[]'], r"the mapping of a dict\[bytes\] value is not JSON"),
    ([b'{}'], r"a dict\[bytes\] value holds 1 items; at least 2"),
], ids=["no-key", "no-placeholder", "count", "index", "not-a-dict", "bad-json", "short"])
def test_malformed_values_are_reported(tmp_path, items, message):
    with pytest.raises(DecodeError, match=message):
        _records.bytes_dict(pack_items(items))
    with pytest.raises(ValueError, match=message):  # streaming's decoder says the same
        decode_bytes_dict(pack_items(items))
    # stored as given (a bytes value is taken as already encoded), reported where it lies
    path = write(tmp_path / "d", [{"meta": {}}, {"meta": pack_items(items)}], columns={"meta": "dict[bytes]"})
    ds = hpcio.open(path)
    for read in (lambda: ds[1], lambda: list(ds), lambda: ds.get_batch([0, 1]), lambda: ds.get_columns([1])):
        with pytest.raises(DecodeError, match=r"column 'meta' \(dict\[bytes\]\): cannot decode the value: "
                                              + message + r".*byte offset \d+, sample 1"):
            read()


def test_truncated_list_is_reported():
    data = pack_items([b"{}", b"[]"])
    with pytest.raises(DecodeError, match="elements end at byte 20 of a 19-byte value"):
        _records.bytes_dict(data[:-1])
    with pytest.raises(DecodeError, match="a list needs 8 bytes, the value has 3"):
        _records.bytes_list(data[:3])
    assert json.loads(_records.bytes_list(data)[0]) == {}
