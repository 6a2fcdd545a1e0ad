"""Value kinds shared by the formats that store typed fields (WebDataset, Zarr, HDF5,
Parquet, MessagePack, image folders).

Every format stores a field value as one of a few kinds and must give back a value equal
to the one written, with the same type class: bytes stay bytes, str stays str, an int
stays an int (any size where the format allows it), a float keeps every bit, JSON
(dicts, lists, bools, None) comes back as JSON, a list of bytes (the images of one
sample) comes back as a list of bytes, a mapping holding bytes (one level deep) as that
mapping, and a numpy array keeps its dtype and shape.
This module names the kinds and holds their byte encodings.
"""

from __future__ import annotations

import io
import json
import math
import struct
import tokenize
from collections.abc import Mapping

import numpy as np

from ..errors import DecodeError, InvalidArgumentError, UnsupportedValueError

__all__ = [
    "KINDS",
    "kind_of",
    "encode_json",
    "decode_json",
    "encode_npy",
    "decode_npy",
    "load_npy",
    "encode_value",
    "decode_value",
    "check_field_name",
    "is_bytes_list",
    "encode_bytes_list",
    "decode_bytes_list",
    "bytes_inside",
    "widens",
    "encode_bytes_mapping",
    "decode_bytes_mapping",
]

# bytes, str, int, float, json (dict/list/bool/None), ndarray, bytes_list (list of bytes),
# bytes_mapping (a dict holding bytes values at its first level)
KINDS = ("bytes", "str", "int", "float", "json", "ndarray", "bytes_list", "bytes_mapping")
_BINARY = (bytes, bytearray, memoryview)


def is_bytes_list(value) -> bool:
    """Whether ``value`` is a non-empty list (or tuple) of bytes-like values.

    An empty list is JSON: nothing in it says what it would hold; a field of kind
    ``bytes_list`` takes it all the same."""
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, _BINARY) for v in value)


def kind_of(value, *, field=None, sample=None, path=None) -> str:
    """The kind of ``value``; UnsupportedValueError for anything no format can store."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, str):
        return "str"
    if isinstance(value, bool) or value is None:
        return "json"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise UnsupportedValueError(
                f"field {field!r}: numpy arrays of dtype object cannot be stored",
                path=path, sample=sample)
        return "ndarray"
    if isinstance(value, np.generic):
        raise UnsupportedValueError(
            f"field {field!r}: numpy scalar {type(value).__name__} is ambiguous; pass "
            "int(x)/float(x) or a 0-d array", path=path, sample=sample)
    if is_bytes_list(value):
        return "bytes_list"
    if isinstance(value, Mapping) and any(isinstance(v, _BINARY) for v in value.values()):
        return "bytes_mapping"
    if isinstance(value, (dict, list, tuple)):
        return "json"
    raise UnsupportedValueError(
        f"field {field!r}: values of type {type(value).__name__} cannot be stored "
        f"(use bytes, str, int, float, bool, None, dict, list or numpy arrays)",
        path=path, sample=sample)


def bytes_inside(value, where: str) -> str | None:
    """Where the first bytes value inside ``value`` is (``where`` names ``value``:
    ``meta['thumb']``), or None when it holds none."""
    if isinstance(value, _BINARY):
        return where
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = bytes_inside(item, f"{where}[{key!r}]")
        if found:
            return found
    return None


def widens(field_kind: str, kind: str, value) -> bool:
    """Whether a value of ``kind`` is stored in a field of ``field_kind`` all the same:
    numbers in JSON fields, an empty list in a list-of-bytes field, a mapping without
    bytes in a mapping-of-bytes field."""
    if field_kind == "json":
        return kind in ("int", "float")
    if field_kind == "bytes_list":
        return isinstance(value, (list, tuple)) and not value
    return field_kind == "bytes_mapping" and isinstance(value, Mapping)


def _check_json(value, field, sample, path):
    # json would silently turn non-str keys into str and numpy scalars into errors
    # deep inside; reject them here with the field name.
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnsupportedValueError(
                    f"field {field!r}: JSON object key {k!r} is not a str", path=path, sample=sample)
            _check_json(v, field, sample, path)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_json(v, field, sample, path)
    elif not (value is None or isinstance(value, (str, int, float, bool))):
        raise UnsupportedValueError(
            f"field {field!r}: {type(value).__name__} inside a JSON value", path=path, sample=sample)


def encode_json(value, *, field=None, sample=None, path=None) -> bytes:
    """Compact UTF-8 JSON; floats keep every bit (repr), NaN/Infinity as Python writes them."""
    _check_json(value, field, sample, path)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode_json(data, *, field=None, sample=None, path=None):
    try:
        return json.loads(bytes(data))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DecodeError(f"field {field!r} is not valid JSON: {exc}", path=path, sample=sample) from None


def encode_npy(value: np.ndarray) -> bytes:
    """The array in .npy format (dtype, shape and order kept; never pickled)."""
    buf = io.BytesIO()
    np.save(buf, value, allow_pickle=False)
    return buf.getvalue()


def decode_npy(data, *, field=None, sample=None, path=None) -> np.ndarray:
    try:
        return load_npy(data)
    except ValueError as exc:
        raise DecodeError(f"field {field!r} is not a valid .npy array: {exc}", path=path, sample=sample) from None


_U64 = struct.Struct("<Q")


def encode_bytes_list(value) -> bytes:
    """A list of bytes as one value: the u64 item count, each item's u64 size, then the
    items back to back (all little-endian), so a ragged column's value stays one span."""
    return b"".join([struct.pack(f"<{1 + len(value)}Q", len(value), *map(len, value)), *value])


def decode_bytes_list(data, *, field=None, sample=None, path=None) -> list:
    """The inverse of :func:`encode_bytes_list`; DecodeError when the sizes do not add up."""
    mv = memoryview(data).cast("B")
    if len(mv) < 8:
        raise DecodeError(f"field {field!r}: a list of bytes needs 8 bytes, got {len(mv)}", path=path, sample=sample)
    count = _U64.unpack_from(mv, 0)[0]
    body = 8 + 8 * count
    if body > len(mv):
        raise DecodeError(f"field {field!r}: {count} items announced in {len(mv)} bytes", path=path, sample=sample)
    sizes = struct.unpack_from(f"<{count}Q", mv, 8)
    if body + sum(sizes) != len(mv):
        raise DecodeError(f"field {field!r}: items of {sum(sizes)} bytes after a {body}-byte head, "
                          f"the value holds {len(mv)}", path=path, sample=sample)
    out = []
    for size in sizes:
        out.append(mv[body : body + size].tobytes())
        body += size
    return out


def encode_bytes_mapping(value, *, field=None, sample=None, path=None) -> bytes:
    """A mapping holding bytes at its first level as one value: the list of bytes
    (:func:`encode_bytes_list`) of the mapping's JSON without its bytes values, the JSON
    list of their keys, then those values.  Bytes deeper down are refused."""
    rest = {k: v for k, v in value.items() if not isinstance(v, _BINARY)}
    keys = [k for k, v in value.items() if isinstance(v, _BINARY)]
    nested = bytes_inside(rest, field or "value")
    if nested:
        raise UnsupportedValueError(f"field {field!r}: {nested} is bytes inside a list or mapping; "
                                    "the bytes of a mapping are stored one level deep only",
                                    path=path, sample=sample)
    head = [encode_json(rest, field=field, sample=sample, path=path),
            encode_json(keys, field=field, sample=sample, path=path)]
    return encode_bytes_list(head + [value[k] for k in keys])


def decode_bytes_mapping(data, *, field=None, sample=None, path=None) -> dict:
    """The inverse of :func:`encode_bytes_mapping`."""
    parts = decode_bytes_list(data, field=field, sample=sample, path=path)
    if len(parts) < 2:
        raise DecodeError(f"field {field!r}: a mapping of bytes needs its JSON and its keys", path=path, sample=sample)
    out = decode_json(parts[0], field=field, sample=sample, path=path)
    keys = decode_json(parts[1], field=field, sample=sample, path=path)
    if (not isinstance(out, dict) or not isinstance(keys, list) or len(keys) != len(parts) - 2
            or not all(isinstance(k, (str, int, float, bool)) or k is None for k in keys)):
        raise DecodeError(f"field {field!r}: {len(parts) - 2} bytes values do not match their keys",
                          path=path, sample=sample)
    out.update(zip(keys, parts[2:]))
    return out


# Header parses are cached by the header's bytes: the values of one field share a few.
_npy_headers: dict[bytes, tuple] = {}
# What numpy's header parser raises for text that is not a header: literal_eval errors,
# and tokenize errors from the fallback parse of headers written by Python 2.
_NPY_HEADER_ERRORS = (ValueError, SyntaxError, TypeError, tokenize.TokenError, RecursionError)


def load_npy(data) -> np.ndarray:
    """The array in .npy bytes, never unpickled; a DecodeError (a ValueError) names what is wrong.

    The size the header declares is checked against the bytes that follow it before
    anything is allocated: a 4 TiB shape in a small value is refused, not handed to
    numpy's allocator."""
    mv = memoryview(data)
    if len(mv) < 10 or bytes(mv[:6]) != b"\x93NUMPY":
        raise DecodeError("not a .npy value (bad magic)")
    hlen = (10 + int.from_bytes(mv[8:10], "little")) if mv[6] == 1 else (12 + int.from_bytes(mv[8:12], "little"))
    if hlen > len(mv):
        raise DecodeError(f".npy header of {hlen} bytes in a value of {len(mv)}")
    header = bytes(mv[:hlen])
    parsed = _npy_headers.get(header)
    if parsed is None:
        parsed = _parse_npy_header(header)
        if len(_npy_headers) < 1024:
            _npy_headers[header] = parsed
    shape, fortran, dtype, count = parsed
    if len(mv) - hlen < count * dtype.itemsize:
        raise DecodeError(f".npy header declares shape {shape} of {dtype} ({count * dtype.itemsize} bytes); "
                         f"the value holds {len(mv) - hlen} data bytes")
    arr = np.frombuffer(mv, dtype=dtype, count=count, offset=hlen).copy()
    return arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)


def _parse_npy_header(header: bytes) -> tuple:
    fp = io.BytesIO(header)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
    except _NPY_HEADER_ERRORS:
        text = header[10 if header[6] == 1 else 12 :].decode("latin-1").strip()
        raise DecodeError(f"garbled .npy header {text!r}") from None
    if dtype.hasobject:
        raise DecodeError(".npy value holds Python objects (pickles are refused)")
    if not all(type(dim) is int for dim in shape):  # numpy's parser lets True through
        raise DecodeError(f".npy header declares shape {shape}, with a dimension that is not an integer")
    if any(dim < 0 for dim in shape):
        raise DecodeError(f".npy header declares shape {shape}, with a negative dimension")
    count = math.prod(shape)  # Python ints: a huge shape cannot wrap
    if count > _MAX_ITEMS:  # only items of 0 bytes get this far with a small value
        raise DecodeError(f".npy header declares shape {shape}: more items than an array holds")
    return shape, fortran, dtype, count


_MAX_ITEMS = np.iinfo(np.intp).max


def encode_value(kind: str, value, *, field=None, sample=None, path=None) -> bytes:
    """``value`` of ``kind`` as bytes (the ragged storage of Zarr, HDF5 and image folders)."""
    if kind == "bytes":
        return bytes(value)
    if kind == "str":
        return value.encode("utf-8", "surrogatepass")
    if kind == "int":
        return str(value).encode("ascii")
    if kind == "float":
        return repr(float(value)).encode("ascii")
    if kind == "json":
        return encode_json(value, field=field, sample=sample, path=path)
    if kind == "ndarray":
        return encode_npy(value)
    if kind == "bytes_list":
        return encode_bytes_list(value)
    if kind == "bytes_mapping":
        return encode_bytes_mapping(value, field=field, sample=sample, path=path)
    raise InvalidArgumentError(f"unknown value kind {kind!r}")


def decode_value(kind: str, data, *, field=None, sample=None, path=None):
    """The inverse of :func:`encode_value`."""
    if kind == "bytes":
        return bytes(data)
    try:
        if kind == "str":
            return bytes(data).decode("utf-8", "surrogatepass")
        if kind == "int":
            return int(bytes(data))
        if kind == "float":
            return float(bytes(data).decode("ascii"))
    except ValueError as exc:
        raise DecodeError(f"field {field!r} is not a valid {kind}: {exc}", path=path, sample=sample) from None
    if kind == "json":
        return decode_json(data, field=field, sample=sample, path=path)
    if kind == "ndarray":
        return decode_npy(data, field=field, sample=sample, path=path)
    if kind == "bytes_list":
        return decode_bytes_list(data, field=field, sample=sample, path=path)
    if kind == "bytes_mapping":
        return decode_bytes_mapping(data, field=field, sample=sample, path=path)
    raise DecodeError(f"field {field!r} has unknown value kind {kind!r}", path=path, sample=sample)


def check_field_name(name, *, sample=None, path=None) -> str:
    if not isinstance(name, str) or not name or "/" in name or "\x00" in name:
        raise UnsupportedValueError(
            f"field name {name!r} must be a non-empty str without '/' or NUL", path=path, sample=sample)
    return name
