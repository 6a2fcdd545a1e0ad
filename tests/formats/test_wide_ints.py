"""JSON integers past 64 bits read back as the ints they are, on every read path.

orjson, which hpcio decodes JSON with, turns an integer below -2^63 or of 2^64 and more
into a float; Python's json (and so streaming's MDS reader) keeps the int.  hpcio checks
the text for such integers (``_records.json_wide_int``) and gives them to Python's json.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hpcio
from hpcio._core import _records
from hpcio._core._records import loads_exact
from hpcio.columns import VarColumn, loads_json

WIDE = [2**64, -(2**63) - 1, 10**40, -(10**30), 123456789012345678901234567890]
DOCS = [{"id": i, "big": big, "nested": {"list": [1, big, 2.5]}, "text": "x"} for i, big in enumerate(WIDE)]
NARROW = [{"id": 2**64 - 1, "neg": -(2**63), "f": 1.5e300, "s": "12345678901234567890"}]


def _exact(a, b):
    """Equal and of the same types all the way down (1 == 1.0 does not pass)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _exact(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _exact(x, y)
    else:
        assert a == b


def _wide_reference(text: bytes) -> bool:
    """Whether a run of digits in ``text`` (with the minus sign before it) lies outside
    orjson's range, -2^63 .. 2^64 - 1, counting leading zeros as digits as the check does
    (they are not JSON numbers, only text in strings, where reading the document with
    Python's json gives the same result)."""
    for run in re.finditer(rb"(-?)(\d+)", text):
        neg, digits = run.groups()
        limit = b"9223372036854775808" if neg else b"18446744073709551615"
        if (len(digits), digits) > (len(limit), limit):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"0", b"7", b"-", b" ", b"a", b".", b"e", b'"', b"123456789",
                                          b"9223372036854775808", b"18446744073709551615"]), max_size=40))
def test_wide_int_check_matches_the_range_of_every_digit_run(pieces):
    text = b"".join(pieces)
    assert _records.json_wide_int(text) == _wide_reference(text)


@pytest.mark.parametrize("value", [*WIDE, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**19, -(10**18), 0])
def test_wide_int_check_at_every_alignment(value):
    for pad in range(9):
        text = b" " * pad + json.dumps({"v": value}).encode()
        assert _records.json_wide_int(text) == _wide_reference(text), (value, pad)


def test_loads_keeps_wide_integers_and_floats_as_python_json_does():
    for doc in DOCS + NARROW:
        raw = json.dumps(doc).encode()
        _exact(loads_exact(raw), json.loads(raw))
        _exact(loads_json(raw), json.loads(raw))
    got = loads_json(b'{"n": NaN, "big": 18446744073709551616}')
    assert got["n"] != got["n"] and got["big"] == 2**64 and type(got["big"]) is int


def test_var_column_to_pylist_keeps_wide_integers():
    texts = [json.dumps(d).encode() for d in DOCS + NARROW]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    col = VarColumn("json", np.frombuffer(b"".join(texts), np.uint8), offsets)
    _exact(col.to_pylist(), DOCS + NARROW)
    _exact([col[j] for j in range(len(col))], DOCS + NARROW)


@pytest.mark.filterwarnings("ignore:compression='sample::")
@pytest.mark.parametrize("zero_copy", [False, True])
@pytest.mark.parametrize("compression", [None, "sample::zstd"])
def test_mds_json_column(tmp_path, zero_copy, compression):
    path = str(tmp_path / "ds")
    samples = [{"id": i, "meta": d} for i, d in enumerate(DOCS + NARROW)]
    options = {} if compression is None else {"compression": compression}
    with hpcio.open_writer(path, format="mds", columns={"id": "int", "meta": "json"}, **options) as w:
        for s in samples:
            w.write(s)
    ds = hpcio.open(path, zero_copy=zero_copy)
    order = np.arange(len(samples))[::-1]
    _exact([ds[i] for i in range(len(ds))], samples)
    _exact(list(ds), samples)
    _exact(ds.get_batch(order), [samples[i] for i in order])
    _exact(ds.get_columns(order)["meta"].to_pylist(), [samples[i]["meta"] for i in order])


@pytest.mark.parametrize("lazy", [True, False])
def test_jinx_sample_lines(tmp_path, lazy):
    # hpcio's JINX writer (orjson, as mldataforge's) cannot write these integers: write a
    # string of the same length in their place and put the digits there afterwards, which
    # keeps every offset of the file right
    path = tmp_path / "ds.jinx"
    wide = [str(v).encode() for v in WIDE]
    with hpcio.open_writer(str(path), format="jinx") as w:
        for i, digits in enumerate(wide):
            w.write({"id": i, "big": "x" * (len(digits) - 2), "list": [1, "y" * (len(digits) - 2)]})
    data = path.read_bytes()
    for digits in wide:
        placeholder = b'"' + b"x" * (len(digits) - 2) + b'"'
        data = data.replace(placeholder, digits, 1)
        data = data.replace(b'"' + b"y" * (len(digits) - 2) + b'"', digits, 1)
    path.write_bytes(data)
    want = [{"id": i, "big": v, "list": [1, v]} for i, v in enumerate(WIDE)]
    ds = hpcio.open(str(path), lazy=lazy)
    _exact([dict(ds[i]) for i in range(len(ds))], want)
    _exact([dict(s) for s in ds], want)


def test_jsonl_lines(tmp_path):
    path = tmp_path / "ds.jsonl"
    path.write_bytes(b"".join(json.dumps(d).encode() + b"\n" for d in DOCS + NARROW))
    ds = hpcio.open(str(path))
    _exact([ds[i] for i in range(len(ds))], DOCS + NARROW)
    _exact(list(ds), DOCS + NARROW)


def test_jsonl_line_with_a_wide_integer_and_bad_utf8_names_the_line(tmp_path):
    path = tmp_path / "ds.jsonl"
    path.write_bytes(b'{"a": 1}\n{"big": 18446744073709551616, "s": "\xff"}\n')
    ds = hpcio.open(str(path))
    with pytest.raises(hpcio.errors.CorruptShardError, match=r"^garbled JSON on line 2.*\(.*ds\.jsonl, byte offset 9, sample 1\)$"):
        ds[1]
