"""Multimodal samples in every format: lists of binaries and mappings holding bytes are
stored natively (no pickle) and read back byte for byte, with their Python types."""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest

import hpcio
from hpcio.errors import SchemaError, UnsupportedValueError
from hpcio.formats import _values

FORMATS = ["mds", "jinx", "webdataset", "zarr", "hdf5"]
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 3
PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)


def images(count: int, salt: int = 0) -> list:
    """``count`` distinct binaries: JPEG- and PNG-like, other bytes, an empty one."""
    pool = [JPEG + bytes([salt]), PNG + bytes([salt]) * 3, bytes([salt, 0, 255]) * 7, b""]
    return [pool[j % len(pool)] + bytes([j]) * (j // len(pool)) for j in range(count)]


def vlm(i: int, count: int) -> dict:
    return {"id": f"s{i}", "messages": [{"role": "user", "content": "<image>\n" * count + "Hi"}],
            "images": images(count, i)}


# (case name, samples): lists of 0, 1 and 4 images, an empty binary, a mapping of bytes
CASES = {
    "one_image": [vlm(i, 1) for i in range(5)],
    "four_images": [vlm(i, 4) for i in range(5)],
    "zero_to_four": [vlm(i, i % 5) for i in range(1, 11)],  # the first has 1: its kind is inferred
    "empty_binaries": [{"id": f"s{i}", "images": [b""] * (i + 1)} for i in range(4)],
}
NESTED = [{"id": f"s{i}", "meta": {"thumb": JPEG + bytes([i]), "w": i, "raw": b"", "tags": ["a"]}}
          for i in range(4)]


def write(path, fmt, samples, **options):
    with hpcio.open_writer(path, format=fmt, **options) as w:
        for s in samples:
            w.write(s)
    return path


def typed(value):
    """``value`` with the type of every leaf beside it (mappings of any class compare as
    dicts), so lists of bytes must come back as lists of ``bytes``."""
    if hasattr(value, "keys"):
        return {k: typed(value[k]) for k in value.keys()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    return type(value).__name__, value


def assert_same(got, want):
    assert typed(got) == typed(want)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_lists_of_binaries_round_trip(tmp_path, fmt, case):
    samples = CASES[case]
    ds = hpcio.open(write(tmp_path / "d", fmt, samples))
    for got, want in zip(ds, samples):
        assert_same(dict(got), want)
    order = np.arange(len(samples))[::-1]
    for got, j in zip(ds.get_batch(order), order):
        assert_same(dict(got), samples[j])
    assert [list(s["images"]) for s in ds.select(["images"])] == [s["images"] for s in samples]


@pytest.mark.parametrize("fmt", FORMATS)
def test_mapping_holding_bytes_round_trips(tmp_path, fmt):
    ds = hpcio.open(write(tmp_path / "d", fmt, NESTED))
    for got, want in zip(ds, NESTED):
        assert_same(dict(got), want)


# Every format hpcio writes, with the file name it takes; JSON Lines has no binary type.
ALL_FORMATS = {"mds": "d", "jinx": "d.jinx", "webdataset": "d", "zarr": "d.zarr", "hdf5": "d.h5",
               "parquet": "d.parquet", "msgpack": "d.msgpack", "jsonl": "d.jsonl"}
MULTIMODAL = [{"id": f"s{i}", "images": images(3, i), "meta": {"thumb": JPEG + bytes([i]), "caption": f"c{i}"}}
              for i in range(3)]


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_multimodal_sample_in_every_format(tmp_path, fmt):
    """A list of images and a mapping holding a thumbnail, natively or a plain refusal."""
    path = tmp_path / ALL_FORMATS[fmt]
    if fmt == "jsonl":
        with pytest.raises(UnsupportedValueError, match=r"field 'images': images\[0\] is bytes, which JSON Lines "
                                                        r"cannot store \(JSON has no binary type"):
            write(path, fmt, MULTIMODAL)
        return
    ds = hpcio.open(write(path, fmt, MULTIMODAL))
    fields = hpcio.get_format(fmt).inspect(path)["fields"]
    assert "pkl" not in str(fields)
    for got, want in zip(ds, MULTIMODAL):
        assert_same({k: v for k, v in dict(got).items() if not k.startswith("__")}, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_converted_between_formats(tmp_path, fmt):
    samples = CASES["zero_to_four"]
    source = write(tmp_path / "src", "mds", samples)
    hpcio.convert(source, tmp_path / "dst", to=fmt, progress=False)
    for got, want in zip(hpcio.open(tmp_path / "dst"), samples):
        assert_same(dict(got), want)


# --- MDS ------------------------------------------------------------------------------
def test_mds_infers_list_of_bytes(tmp_path):
    from hpcio.formats.mds import infer_columns

    assert infer_columns(vlm(0, 2)) == {"id": "str", "messages": "json", "images": "list[bytes]"}
    # mldataforge's rules are kept where they decide: bytearrays are a jpeg_array, [] json
    assert infer_columns({"a": [bytearray(b"x")], "b": []}) == {"a": "jpeg_array", "b": "json"}
    # a dict holding bytes has its native encoding, pickle or not; a list of them has none
    assert infer_columns({"m": {"t": b"x"}}, allow_pickle=True) == {"m": "dict[bytes]"}
    assert infer_columns({"m": [1, {"t": b"x"}]}, allow_pickle=True) == {"m": "pkl"}
    with pytest.raises(UnsupportedValueError, match=r"column 'm': m\[1\]\['t'\] is bytes inside"):
        infer_columns({"m": [1, {"t": b"x"}]})


def test_mds_list_of_bytes_layout(tmp_path):
    """streaming's list layout: u32 placeholder 0, u32 count, u32 sizes, the values."""
    from hpcio.formats.mds.encodings import column_codec

    codec = column_codec("list[bytes]")
    data = codec.encode([b"ab", b"", b"xyz"])
    assert data == np.array([0, 3, 2, 0, 3], "<u4").tobytes() + b"abxyz"
    assert codec.decode_one(memoryview(data)) == [b"ab", b"", b"xyz"]
    assert codec.decode_one(memoryview(data), decode_images=True) == [b"ab", b"", b"xyz"]
    assert codec.encode([]) == bytes(8)


def test_mds_list_of_bytes_refuses_other_items(tmp_path):
    with pytest.raises(SchemaError, match=r"column 'images' \(list\[bytes\]\) cannot store this value: "
                                          r"item 1 is a str, expected bytes"):
        write(tmp_path / "d", "mds", [vlm(0, 1), {"id": "x", "messages": [], "images": [b"a", "b"]}])


# --- JINX -----------------------------------------------------------------------------
def test_jinx_typed_list_layout(tmp_path):
    """A list needing suffixes is stored under '<key>.list' as one-key objects; plain
    lists stay JSON arrays as mldataforge writes them."""
    sample = {"images": [b"\x00\x01", b""], "mixed": [1, "a", b"z", np.arange(2)], "plain": [1, "a", None]}
    path = write(tmp_path / "t.jinx", "jinx", [sample])
    line = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert sorted(line) == ["images.list", "mixed.list", "plain"]
    assert [list(item) for item in line["images.list"]] == [["raw"], ["raw"]]
    assert [list(item) for item in line["mixed.list"]] == [[""], [""], ["raw"], ["npy"]]
    assert line["plain"] == [1, "a", None]
    for lazy in (True, False):
        got = hpcio.open(path, lazy=lazy)[0]
        assert got["images"] == [b"\x00\x01", b""] and got["plain"] == [1, "a", None]
        assert got["mixed"][:3] == [1, "a", b"z"] and got["mixed"][3].tolist() == [0, 1]


@pytest.mark.parametrize("options", [{"compression": "zst", "compress_threshold": 8},
                                     {"binary_threshold": 16}, {"encoding": "b64"}])
def test_jinx_typed_list_items_compressed_and_in_the_sidecar(tmp_path, options):
    samples = CASES["zero_to_four"]
    ds = hpcio.open(write(tmp_path / "d.jinx", "jinx", samples, **options))
    for got, want in zip(ds, samples):
        assert_same(dict(got), want)


def test_jinx_join_copies_typed_lists(tmp_path):
    from hpcio.formats import jinx

    samples = CASES["four_images"]
    src = write(tmp_path / "a.jinx", "jinx", samples, compression="zst", compress_threshold=8)
    jinx.join([src, src], tmp_path / "joined.jinx", encoding="b64")
    got = list(hpcio.open(tmp_path / "joined.jinx", lazy=False))
    assert got == samples + samples


# --- WebDataset -----------------------------------------------------------------------
def test_webdataset_members_of_lists_and_mappings(tmp_path):
    sample = {"__key__": "k0", "images": [JPEG, PNG, b"raw"], "meta": {"w": 3, "thumb": JPEG}, "none": []}
    path = write(tmp_path / "w", "webdataset", [sample])
    with tarfile.open(path / "shard-000000.tar") as tar:
        names = tar.getnames()
    assert names == ["k0.images.0.jpg", "k0.images.1.png", "k0.images.2.bin", "k0.meta.json",
                     "k0.meta.thumb.jpg", "k0.none.json"]
    got = hpcio.open(path)[0]
    assert got == {k: v for k, v in sample.items() if k != "__key__"}
    assert hpcio.open(path).select(["meta"])[0] == {"meta": {"w": 3, "thumb": JPEG}}


def test_webdataset_library_reads_the_members(tmp_path):
    import webdataset as wds

    path = write(tmp_path / "w", "webdataset", CASES["zero_to_four"][:3])
    got = list(wds.WebDataset(str(path / "shard-000000.tar"), shardshuffle=False, empty_check=False))
    assert [sorted(k for k in s if not k.startswith("__")) for s in got] == [
        ["id.txt", "images.0.jpg", "messages.json"],
        ["id.txt", "images.0.jpg", "images.1.png", "messages.json"],
        ["id.txt", "images.0.jpg", "images.1.png", "images.2.bin", "messages.json"],
    ]
    assert got[2]["images.1.png"] == CASES["zero_to_four"][2]["images"][1]


def test_webdataset_stream_groups_members(tmp_path):
    from hpcio.formats.webdataset import iter_tar

    samples = CASES["zero_to_four"] + NESTED
    samples = [dict(s, __key__=f"k{i}") for i, s in enumerate(samples)]
    path = write(tmp_path / "w", "webdataset", samples)
    with open(path / "shard-000000.tar", "rb") as f:
        assert list(iter_tar(f)) == samples


def test_webdataset_numbered_members_that_are_no_list_keep_their_names(tmp_path):
    from hpcio.formats import _nested

    assert _nested.group_fields({"x.1": b"a", "x.2": b"b"}) == {"x.1": b"a", "x.2": b"b"}
    assert _nested.group_fields({"x.0": b"a", "x": 1}) == {"x.0": b"a", "x": 1}
    assert _nested.group_fields({"x.0": "text"}) == {"x.0": "text"}


@pytest.mark.parametrize("sample, message", [
    ({"x.0": b"a"}, r"field 'x\.0' would be read back as item 0 of a list 'x'"),
    ({"m": {"a": 1}, "m.b": b"1"}, r"field 'm\.b' would be read back inside the mapping field 'm'"),
    ({"m": {"a.b": b""}}, r"field 'm': key 'a\.b' holds bytes, stored as a member of its own"),
    ({"m": {"a": b"", "deep": {"b": b""}}}, r"field 'm': m\['deep'\]\['b'\] is bytes inside a list or mapping"),
])
def test_webdataset_refuses_names_it_would_read_back_otherwise(tmp_path, sample, message):
    with pytest.raises(UnsupportedValueError, match=message):
        write(tmp_path / "w", "webdataset", [sample])


def test_webdataset_dotted_names_of_other_values_stay_as_they_are(tmp_path):
    sample = {"meta": {"a": 1}, "meta.x": "text", "x.0": 5}
    assert hpcio.open(write(tmp_path / "w", "webdataset", [sample]))[0] == sample


# --- Zarr and HDF5 ----------------------------------------------------------------------
def test_bytes_list_value_layout():
    data = _values.encode_bytes_list([b"ab", b"", b"xyz"])
    assert data == np.array([3, 2, 0, 3], "<u8").tobytes() + b"abxyz"
    assert _values.decode_bytes_list(data) == [b"ab", b"", b"xyz"]
    with pytest.raises(hpcio.errors.DecodeError, match="field 'images': items of 5 bytes"):
        _values.decode_bytes_list(data[:-1], field="images")


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_columnar_bytes_list_schema(tmp_path, fmt):
    samples = [{"images": []}, {"images": [JPEG]}]
    with pytest.raises(SchemaError, match="field 'images': expected json, got bytes_list"):
        write(tmp_path / "a", fmt, samples)
    ds = hpcio.open(write(tmp_path / "b", fmt, samples, schema={"images": "bytes_list"}))
    assert [s["images"] for s in ds] == [[], [JPEG]]
    assert hpcio.get_format(fmt).inspect(tmp_path / "b")["fields"] == {"images": "bytes_list"}


@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "parquet"])
def test_mapping_of_bytes_takes_mappings_without_bytes(tmp_path, fmt):
    samples = [{"meta": {"thumb": JPEG, "w": 1}}, {"meta": {"w": 2}}]
    assert [s["meta"] for s in hpcio.open(write(tmp_path / "d", fmt, samples))] == [s["meta"] for s in samples]
    assert _values.kind_of(samples[0]["meta"]) == "bytes_mapping"
    data = _values.encode_bytes_mapping({"a": b"x", "b": [1]})
    assert _values.decode_bytes_list(data) == [b'{"b":[1]}', b'["a"]', b"x"]
