"""Shared helpers of the MDS tests: the golden fixtures and their expected values."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
from decimal import Decimal

import numpy as np

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "mds")
FIXTURES = os.path.normpath(FIXTURES)
STREAMING_FIXTURES = [
    "streaming-none", "streaming-zstd", "streaming-zstd7", "streaming-gz",
    "streaming-bz2", "streaming-br", "streaming-snappy",
]  # fmt: skip


def load_generators():
    """The sample generators of ``tests/fixtures/mds/make_fixtures.py``."""
    spec = importlib.util.spec_from_file_location("mds_make_fixtures", os.path.join(FIXTURES, "make_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected(library: str) -> dict:
    with open(os.path.join(FIXTURES, f"expected-{library}.json")) as f:
        return json.load(f)


def _b(text: str) -> bytes:
    return base64.b64decode(text)


def assert_value(got, tagged: dict, where: str) -> None:
    """``got`` (what hpcio returned) is the value ``tagged`` describes, type included."""
    t, v = tagged["t"], tagged.get("v")
    if t == "bytes":
        assert isinstance(got, bytes) and got == _b(v), f"{where}: {got!r}"
    elif t == "list":
        assert isinstance(got, list) and got == [_b(x) for x in v], f"{where}: {got!r}"
    elif t in ("str", "int", "str_int"):
        assert type(got) is {"str": str}.get(t, int) and got == v, f"{where}: {got!r} != {v!r}"
    elif t == "str_float":
        assert type(got) is float and got == v, f"{where}: {got!r} != {v!r}"
    elif t == "decimal":
        assert isinstance(got, Decimal) and str(got) == v, f"{where}: {got!r} != {v}"
    elif t == "json":
        assert got == v, f"{where}: {got!r} != {v!r}"
    elif t == "np":
        assert isinstance(got, np.generic) and got.dtype.name == tagged["dtype"], f"{where}: {got!r}"
        assert got.tobytes() == _b(v), f"{where}: {got!r}"
    elif t == "ndarray":
        assert isinstance(got, np.ndarray), f"{where}: {type(got)}"
        assert (got.dtype.name, list(got.shape)) == (tagged["dtype"], tagged["shape"]), where
        assert got.tobytes() == _b(v), where
    else:
        raise AssertionError(f"unknown tag {t}")


def assert_sample(got: dict, row: dict, where: str) -> None:
    assert sorted(got) == sorted(row), f"{where}: fields {sorted(got)} != {sorted(row)}"
    for name, tagged in row.items():
        assert_value(got[name], tagged, f"{where} column {name}")


def tree_bytes(path: str) -> dict:
    """Every file under ``path`` -> its bytes (to prove a reader wrote nothing)."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out
