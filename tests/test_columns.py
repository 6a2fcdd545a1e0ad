"""Column batches: VarColumn, the generic conversion and Dataset.get_columns on MDS."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hpcio
from hpcio.columns import VarColumn, ViewColumn, columns_from_values
from hpcio.errors import IndexOutOfRangeError


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), max_size=20))
def test_str_column_lengths_and_values_match_python(values):
    col = VarColumn.from_values("str", values)
    assert len(col) == len(values)
    assert col.to_pylist() == values
    assert col.str_lengths().tolist() == [len(v) for v in values]
    assert col.byte_lengths().tolist() == [len(v.encode()) for v in values]


def test_var_column_access():
    col = VarColumn.from_values("bytes", [b"ab", b"", b"\xff"])
    assert col[0] == b"ab" and col[-1] == b"\xff" and col[1:] == [b"", b"\xff"]
    assert bytes(col.value_bytes(2)) == b"\xff"
    with pytest.raises(IndexError, match=r"^index 3 out of range for a column of 3 values$"):
        col[3]
    with pytest.raises(ValueError, match=r"^VarColumn kind must be one of str, bytes, json, got 'text'$"):
        VarColumn("text", col.data, col.offsets)
    assert col == VarColumn.from_values("bytes", [b"ab", b"", b"\xff"])
    assert col != VarColumn.from_values("str", ["ab", "", "x"])
    assert repr(col) == "<hpcio.VarColumn bytes n=3 bytes=3>"


def test_json_column_decodes_what_orjson_cannot():
    # orjson refuses NaN; Python's json reads it (as the MDS reader's per-sample path does)
    raw = [b'{"a": [1, 2]}', b"NaN"]
    data = np.frombuffer(b"".join(raw), np.uint8)
    offsets = np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)
    col = VarColumn("json", data, offsets)
    got = col.to_pylist()
    assert got[0] == {"a": [1, 2]} and math.isnan(got[1]) and math.isnan(col[1])
    assert VarColumn.from_values("json", [{"x": None}, [1]]).to_pylist() == [{"x": None}, [1]]


@pytest.mark.parametrize("bad", [b"1,2", b"", b"[1"])
def test_json_column_value_that_is_not_a_document_alone(bad):
    # "1,2" is two values in an array: each value must be parsed alone
    raw = [b"0", bad, b"3"]
    col = VarColumn("json", np.frombuffer(b"".join(raw), np.uint8),
                    np.cumsum([0] + [len(r) for r in raw]).astype(np.int64))
    with pytest.raises(json.JSONDecodeError):
        col.to_pylist()


def test_json_column_values_that_would_regroup_in_one_array():
    # "[" + ",".join(raw) + "]" is [1, 2, [3, 4]]: three values, as many as the column has,
    # though none of the three is a JSON document alone
    raw = [b"1,2", b"[3", b"4]"]
    col = VarColumn("json", np.frombuffer(b"".join(raw), np.uint8),
                    np.cumsum([0] + [len(r) for r in raw]).astype(np.int64))
    with pytest.raises(json.JSONDecodeError):
        col.to_pylist()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_JSON, st.booleans()), max_size=12))
def test_json_values_decoded_in_one_call_match_python(values):
    from hpcio._core import _records

    raw = [json.dumps(v, ensure_ascii=ascii).encode() for v, ascii in values]
    offsets = np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)
    assert _records.loads_json_values(b"".join(raw), offsets, orjson.loads) == [json.loads(r) for r in raw]


def test_json_values_decoded_in_one_call_match_one_by_one():
    from hpcio._core import _records

    raw = [b'{"a": "x,]}\\"[", "b": [1, {"c": []}]}', b' "\\\"" ', b"[]", b"null", b' -7e2 ',
           '"é,["'.encode()]
    offsets = np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)
    data = b"".join(raw)
    assert _records.loads_json_values(data, offsets, orjson.loads) == [orjson.loads(r) for r in raw]
    assert _records.loads_json_values(data, offsets[:1], orjson.loads) == []
    # a value that is not one document alone is left to the caller
    for bad in ([b"1,2", b"3"], [b"[1", b"2]"], [b'"a', b'b"'], [b"1]", b"[2"]):
        assert _records.loads_json_values(b"".join(bad), np.array([0, len(bad[0]), len(bad[0]) + len(bad[1])]),
                                          orjson.loads) is None
    with pytest.raises(ValueError, match=r"^loads_json_values: offset 99 outside the 3 bytes$"):
        _records.loads_json_values(b"[1]", np.array([0, 99]), orjson.loads)
    with pytest.raises(ValueError, match=r"^loads_json_values: offset 1 below the one before it$"):
        _records.loads_json_values(b"[1]", np.array([0, 2, 1]), orjson.loads)


def test_to_arrow_shares_the_buffers():
    pa = pytest.importorskip("pyarrow")
    col = VarColumn.from_values("str", ["é", "", "xyz"])
    arr = col.to_arrow()
    assert arr.type == pa.large_string() and arr.to_pylist() == ["é", "", "xyz"]
    assert VarColumn.from_values("bytes", [b"\x00"]).to_arrow().to_pylist() == [b"\x00"]


def test_view_column_access():
    first, second = bytearray(b"abcdef"), b"XYZ"
    col = ViewColumn([first, second], np.array([0, 1, 0], np.int32), np.array([4, 0, 1]), np.array([6, 3, 1]))
    assert len(col) == 3 and col.kind == "bytes"
    assert [bytes(v) for v in col.to_pylist()] == [b"ef", b"XYZ", b""]
    assert all(isinstance(v, memoryview) for v in col.to_pylist())
    assert bytes(col[-2]) == b"XYZ" and [bytes(v) for v in col[:2]] == [b"ef", b"XYZ"]
    assert col.byte_lengths().tolist() == [2, 3, 0]
    first[4] = ord("E")  # a view, not a copy
    assert bytes(col[0]) == b"Ef"
    with pytest.raises(IndexError, match=r"^index -4 out of range for a column of 3 values$"):
        col[-4]
    copied = col.to_varcolumn()
    assert copied == VarColumn.from_values("bytes", [b"Ef", b"XYZ", b""]) == col
    assert col != VarColumn.from_values("bytes", [b"Ef", b"XY", b"Z"])
    assert col.to_arrow().to_pylist() == [b"Ef", b"XYZ", b""]
    assert repr(col) == "<hpcio.ViewColumn bytes n=3 bytes=5>"


def test_columns_from_values_types():
    samples = [{"i": 1, "f": 0.5, "b": True, "s": "x", "y": b"z", "m": {"k": 1}, "mix": 1},
               {"i": 2, "f": 1.5, "b": False, "s": "é", "y": b"", "m": {}, "mix": "one"}]
    cols = columns_from_values(samples, list(samples[0]))
    assert cols["i"].dtype == np.int64 and cols["i"].tolist() == [1, 2]
    assert cols["f"].dtype == np.float64 and cols["b"].dtype == bool
    assert cols["s"].to_pylist() == ["x", "é"] and cols["y"].to_pylist() == [b"z", b""]
    assert cols["m"] == [{"k": 1}, {}] and cols["mix"] == [1, "one"]
    assert columns_from_values([{"big": 2**70}], ["big"])["big"] == [2**70]


def write_mds(path, n, **options):
    columns = {"id": "int", "text": "str", "meta": "json", "blob": "bytes", "score": "float32",
               "note": "str_int"}
    with hpcio.open_writer(path, format="mds", columns=columns, **options) as w:
        for i in range(n):
            w.write({"id": i, "text": "é" * (i % 7), "meta": {"tags": ["t"] * (i % 3)},
                     "blob": bytes([i % 256]) * (i % 50), "score": np.float32(i / 4), "note": i * 3})
    return path


@pytest.mark.filterwarnings("ignore:compression=.sample..zstd. compresses each sample:UserWarning")
@pytest.mark.parametrize("options", [{}, {"compression": "sample::zstd"}, {"size_limit": 600}],
                         ids=["one-shard", "sample-zstd", "many-shards"])
@pytest.mark.parametrize("zero_copy", [False, True], ids=["copies", "zero-copy"])
def test_mds_columns_match_samples(tmp_path, options, zero_copy):
    path = write_mds(str(tmp_path / "ds"), 200, **options)
    ds = hpcio.open(path, zero_copy=zero_copy)
    if "size_limit" in options:
        assert len(ds.reader.shards) > 10
    idx = np.random.default_rng(3).permutation(200)[:150]
    cols = ds.get_columns(idx)
    batch = ds.get_batch(idx)
    assert list(cols) == ds.reader.fields == ["blob", "id", "meta", "note", "score", "text"]
    assert cols["id"].dtype == np.dtype("<i8") and cols["id"].tolist() == idx.tolist()
    assert cols["score"].dtype == np.dtype("<f4")
    # a zero-copy reader leaves bytes values where they lie, as its samples do
    assert [type(cols[f]) for f in ("text", "meta", "blob")] == [VarColumn, VarColumn,
                                                                 ViewColumn if zero_copy else VarColumn]
    assert [cols[f].kind for f in ("text", "meta", "blob")] == ["str", "json", "bytes"]
    assert cols["note"] == [s["note"] for s in batch]  # no columnar path: a list
    for f in ("id", "score"):
        assert cols[f].tolist() == [s[f] for s in batch]
    for f in ("text", "meta"):
        assert cols[f].to_pylist() == [s[f] for s in batch]
    assert [bytes(v) for v in cols["blob"].to_pylist()] == [bytes(s["blob"]) for s in batch]
    assert cols["text"].str_lengths().tolist() == [len(s["text"]) for s in batch]


def test_mds_columns_views_and_edges(tmp_path):
    ds = hpcio.open(write_mds(str(tmp_path / "ds"), 30, size_limit=500))
    view = ds.shuffle(seed=1).select(["text", "id"])
    cols = view.get_columns([0, -1, 5])
    assert list(cols) == ["text", "id"]
    assert cols["id"].tolist() == [int(view.indices[0]), int(view.indices[-1]), int(view.indices[5])]
    empty = ds.get_columns([])
    assert [len(c) for c in empty.values()] == [0] * 6
    assert empty["id"].dtype == np.dtype("<i8") and empty["text"].kind == "str"
    with pytest.raises(IndexOutOfRangeError, match=r"^index 30 out of range for a dataset of 30 samples"):
        ds.get_columns([1, 30])
    with pytest.raises(KeyError, match="no column 'nope'"):
        ds.select(["nope"]).get_columns([0])
