"""Column batches: VarColumn, the generic conversion and Dataset.get_columns on MDS."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings, strategies as st

import hpcio
from hpcio.columns import ListColumn, VarColumn, ViewColumn, columns_from_values
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
    got = _records.loads_json_values(b"".join(raw), offsets, orjson.loads)
    if got is None:
        # the documented refusal: a run of 20 or more digits, even inside a string, may be
        # an integer orjson would read as a float, and the caller decodes one by one
        assert any(_records.json_wide_int(r) for r in raw), raw
    else:
        assert got == [json.loads(r) for r in raw]


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


def _json_column(raw: list[bytes]) -> VarColumn:
    return VarColumn("json", np.frombuffer(b"".join(raw), np.uint8),
                     np.cumsum([0] + [len(r) for r in raw]).astype(np.int64))


def _typed(v):
    """v with every number tagged by its type (True == 1 and NaN != NaN otherwise hide
    differences)."""
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_typed(x) for x in v]
    return (type(v).__name__, repr(v) if isinstance(v, float) else v)


_SCALARS = [st.text(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.booleans()]
# what one key holds across the documents: one scalar type, flat lists of one, or any mix
_KEY_VALUES = (st.sampled_from(_SCALARS) | st.sampled_from(_SCALARS).map(lambda s: st.lists(s, max_size=3))
               | st.just(_JSON) | st.just(st.integers(2**63, 2**64 - 1)))


def _expected_column(values: list):
    """The column type json_columns gives for a key's values (with at least one)."""
    def kind(v):
        return type(v) if not isinstance(v, list) else (list, frozenset(type(x) for x in v))
    kinds = {kind(v) for v in values}
    scalar = {str: VarColumn, int: np.ndarray, float: np.ndarray, bool: np.ndarray}
    if len(kinds) == 1 and next(iter(kinds)) in scalar:
        t = next(iter(kinds))
        return scalar[t] if t is not int or all(-(2**63) <= v < 2**63 for v in values) else "json"
    if all(isinstance(k, tuple) for k in kinds):
        elems = set().union(*(k[1] for k in kinds))
        if len(elems) <= 1 and elems <= set(scalar) and all(
                -(2**63) <= x < 2**63 for v in values for x in v if type(x) is int):
            return ListColumn
    return "json"


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_json_columns_give_back_every_document(data):
    keys = data.draw(st.lists(st.text(max_size=4), unique=True, max_size=6))
    holds = {k: data.draw(_KEY_VALUES) for k in keys}
    n = data.draw(st.integers(0, 6))
    docs = [{k: data.draw(holds[k]) for k in data.draw(st.permutations(keys))} for _ in range(n)]
    ascii = data.draw(st.booleans())
    separators = data.draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
    raw = [json.dumps(d, ensure_ascii=ascii, separators=separators).encode() for d in docs]
    col = _json_column(raw)
    parts = col.json_columns()
    assert list(parts) == (list(docs[0]) if docs else [])
    rows = [dict(zip(parts, values)) for values in zip(*(
        p.tolist() if isinstance(p, np.ndarray) else p.to_pylist() for p in parts.values()))]
    if not parts:  # documents without keys: no column says how many there were
        rows = [{} for _ in docs]
    assert _typed(rows) == _typed(col.to_pylist()) == _typed(docs)
    for k, part in parts.items():
        expected = _expected_column([d[k] for d in docs])
        assert (part.kind == "json" if expected == "json" else isinstance(part, expected)), (k, part)


def test_json_columns_of_known_documents():
    raw = [(b'{"s": "x\\u00e9\\\\", "i": 1, "f": 1.5, "b": true, "l": ["p", "q"], "n": null, '
            b'"e": [], "m": 1, "o": {"z": [1]}}'),
           ('{"m": 2.0, "o": {}, "e": [], "n": null, "l": [], "b": false, "f": -0.0, "i": -5, '
            '"s": "yy\U0001F600"}').encode(),
           (b' {"s":"\\ud83d\\ude00\\n","i":9223372036854775807,"f":1e5,"b":true,"l":["\\u00e9"],'
            b'"n":null,"e":[],"m":3,"o":{"z":null}} ')]
    parts = _json_column(raw).json_columns()
    assert list(parts) == ["s", "i", "f", "b", "l", "n", "e", "m", "o"]
    assert parts["s"].kind == "str" and parts["s"].to_pylist() == ["xé\\", "yy\U0001F600", "\U0001F600\n"]
    assert parts["i"].dtype == np.int64 and parts["i"].tolist() == [1, -5, 2**63 - 1]
    assert parts["f"].dtype == np.float64 and [repr(x) for x in parts["f"].tolist()] == ["1.5", "-0.0", "100000.0"]
    assert parts["b"].dtype == np.bool_ and parts["b"].tolist() == [True, False, True]
    assert isinstance(parts["l"], ListColumn) and parts["l"].to_pylist() == [["p", "q"], [], ["é"]]
    assert parts["l"].list_lengths().tolist() == [2, 0, 1] and parts["l"][2] == ["é"]
    assert parts["e"].to_pylist() == [[], [], []] and parts["e"].values is None
    # null, an int and a float under one key, nested objects: each value as its JSON text
    for k, text in (("n", [b"null"] * 3), ("m", [b"1", b"2.0", b"3"]), ("o", [b'{"z": [1]}', b"{}", b'{"z":null}'])):
        assert parts[k].kind == "json" and [bytes(parts[k].value_bytes(j)) for j in range(3)] == text
    assert parts["m"].to_pylist() == [1, 2.0, 3]
    assert _json_column([]).json_columns() == {}


def test_json_columns_keep_what_utf8_cannot_hold_as_json_text():
    # a lone surrogate is a Python str that UTF-8 cannot hold; NaN and Infinity are read
    # as Python's json reads them, and integers past int64 stay exact
    raw = [b'{"s": "\\ud800", "f": NaN, "big": 18446744073709551615}',
           b'{"s": "ok", "f": -Infinity, "big": 1}']
    parts = _json_column(raw).json_columns()
    assert parts["s"].kind == "json" and parts["s"].to_pylist() == ["\ud800", "ok"]
    assert math.isnan(parts["f"][0]) and parts["f"][1] == -math.inf
    assert parts["big"].kind == "json" and parts["big"].to_pylist() == [2**64 - 1, 1]


def test_json_columns_keys_compare_unescaped():
    parts = _json_column([b'{"\\u00e9": 1, "a\\"b": 2}', '{"a\\"b": 3, "é": 4}'.encode()]).json_columns()
    assert {k: v.tolist() for k, v in parts.items()} == {"é": [1, 4], 'a"b': [2, 3]}


@pytest.mark.parametrize("raw, message", [
    ([b'{"a":1}', b"[1]"], "document 1 (byte 7 of the column): not a JSON object"),
    ([b'{"a":1}', b'{"a":1,"b":2}'], 'document 1 (byte 14 of the column): key "b" is not in the first document'),
    ([b'{"a":1,"b":2}', b'{"a":1}'], "document 1 (byte 13 of the column): holds 1 of the first document's 2 keys"),
    ([b'{"a":1,"a":2}'], 'document 0 (byte 7 of the column): key "a" appears twice'),
    ([b'{"a":1}', b'{"a":1,"a":3}'], 'document 1 (byte 14 of the column): key "a" appears twice'),
    ([b'{"a":1,}'], "document 0 (byte 7 of the column): not a JSON document: expected a string key in an object"),
    ([b'{"a":01}'], "document 0 (byte 6 of the column): not a JSON document: expected ',' or '}' in an object"),
    ([b'{"a":1} x'], "document 0 (byte 7 of the column): not a JSON document: data after the document"),
    ([b'{"a":"\x01"}'], "document 0 (byte 6 of the column): not a JSON document: control character in a string"),
    ([b'{"a":"\\q"}'], "document 0 (byte 6 of the column): not a JSON document: bad escape"),
    ([b'{"a":tru}'], "document 0 (byte 5 of the column): not a JSON document: bad literal"),
    ([b'{"a":[1 2]}'], "document 0 (byte 8 of the column): not a JSON document: expected ',' or ']' in an array"),
    ([b'{"a":"x}'], "document 0 (byte 5 of the column): not a JSON document: unterminated string"),
    ([b'{' + b",".join(b'"k%d":0' % i for i in range(257)) + b"}"],
     "document 0 (byte 2195 of the column): more than 256 keys"),
    ([b'{"a":' + b"[" * 1100 + b"]" * 1100 + b"}"], "document 0 (byte 1028 of the column): not a JSON document: nested too deep"),
])
def test_json_columns_errors_name_the_document_and_byte(raw, message):
    with pytest.raises(ValueError) as info:
        _json_column(raw).json_columns()
    assert str(info.value) == message
    with pytest.raises(TypeError, match=r"^json_columns needs a json column, not a str column$"):
        VarColumn.from_values("str", ["a"]).json_columns()


def test_large_column_batches_reuse_freed_memory_and_never_live_columns(tmp_path):
    # text columns of 1 MiB and more are built in memory kept from freed batches
    d = str(tmp_path / "big")
    texts = [f"{i:06d}" + "x" * 2000 for i in range(1200)]
    with hpcio.open_writer(d, format="mds", columns={"text": "str"}) as w:
        for t in texts:
            w.write({"text": t})
    ds = hpcio.open(d)
    first = ds.get_columns(np.arange(600))["text"]
    second = ds.get_columns(np.arange(600, 1200))["text"]
    assert second.data.nbytes > 1 << 20
    freed_at = second.data.ctypes.data
    del second
    third = ds.get_columns(np.arange(1199, 599, -1))["text"]
    assert third.data.ctypes.data == freed_at  # the freed batch's memory, not a new one
    assert third.data.ctypes.data != first.data.ctypes.data
    assert first.to_pylist() == texts[:600] and third.to_pylist() == texts[:599:-1]
    assert third.data.flags.writeable
