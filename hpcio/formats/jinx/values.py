"""JINX value coding: compression extensions, base encodings, and the .npy/.pt loaders.

A stored key's suffixes name how its value was coded (``text.str.zst``); this module
holds what each suffix means and the functions that apply or undo it.
"""

from __future__ import annotations

import binascii
import io
import pickle
import tokenize

import numpy as np

from ... import codecs as _codecs_table
from ..._core import _codecs as _zstd_kernels
from ..._core import _jinx
from ...errors import DecodeError, InvalidArgumentError, MissingDependencyError

#: JINX compression extension -> codec in :mod:`hpcio.codecs` (``lzma`` writes XZ, as
#: mldataforge's ``LZMACompressor()`` does; ``snappy`` is the framing format).
COMPRESSIONS = {
    "zst": "zstd",
    "gz": "gzip",
    "bz2": "bz2",
    "xz": "xz",
    "lzma": "xz",
    "lz4": "lz4-frame",
    "br": "brotli",
    "snappy": "snappy-framed",
}
#: Names mldataforge's command line accepts for the same codecs.
COMPRESSION_ALIASES = {"zstd": "zst", "gzip": "gz", "brotli": "br", "none": None}
#: zstd at level 1 without the content size, exactly mldataforge's stream_writer frames.
ZSTD_LEVEL = 1
ENCODINGS = ("a85", "b64", "hex")
#: numpy scalar types mldataforge reads back (float16 and bool_ it cannot).
NUMPY_SCALARS = frozenset(
    ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]
)
#: Suffixes that name a value's type (the first suffix of a typed key).
TYPE_EXTS = frozenset(["raw", "str", "npy", "pt", "np"]) | NUMPY_SCALARS
#: The suffix of a list whose items carry their own suffixes (``{"raw": "..."}``): an
#: hpcio extension, for lists of bytes; mldataforge refuses the key ("Unsupported
#: extension") rather than misreading it.
TYPED_LIST = "list"


def canonical_compression(name):
    """The JINX extension of a compression name or alias (``zstd`` -> ``zst``)."""
    if isinstance(name, str):
        name = COMPRESSION_ALIASES.get(name, name)
    if name is None or (isinstance(name, str) and name in COMPRESSIONS):
        return name
    raise InvalidArgumentError(
        f"unknown JINX compression {name!r}; use one of {', '.join(COMPRESSIONS)} "
        "(or zstd, gzip, brotli)"
    )


def compress(ext: str, data: bytes) -> bytes:
    codec = _codecs_table.get_codec(COMPRESSIONS[ext])
    if ext == "zst":
        return codec.compress(data, ZSTD_LEVEL, content_size=False)
    return codec.compress(data)


def decompress(ext: str, data, limit: int, path=None, offset=None, sample=None) -> bytes:
    if ext == "zst":  # the common codec goes straight to the kernel (frames without content size)
        return _zstd_kernels.zstd_decompress(
            data, limit, path=path, offset=-1 if offset is None else offset,
            sample=-1 if sample is None else sample,
        )
    return _codecs_table.get_codec(COMPRESSIONS[ext]).decompress(
        data, limit, path=path, offset=offset, sample=sample
    )


def encoder(encoding: str):
    """The function that base-encodes bytes to text for a footer ``encoding``."""
    if encoding == "a85":
        return _jinx.a85encode
    if encoding == "b64":
        return lambda b: binascii.b2a_base64(b, newline=False).decode("ascii")
    return lambda b: b.hex()


# Header parses are cached by the header's bytes: the values of one field share a few.
_npy_headers: dict[bytes, tuple] = {}
# What numpy's header parser raises for text that is not a header: literal_eval errors,
# and tokenize errors from the fallback parse of headers written by Python 2.
_NPY_HEADER_ERRORS = (ValueError, SyntaxError, TypeError, tokenize.TokenError, RecursionError)


def load_npy(data) -> np.ndarray:
    """``np.load`` of .npy bytes without pickles; ValueError names what is wrong."""
    mv = memoryview(data)
    if len(mv) < 10 or bytes(mv[:6]) != b"\x93NUMPY":
        raise DecodeError("not a .npy value (bad magic)")
    hlen = (10 + int.from_bytes(mv[8:10], "little")) if mv[6] == 1 else (12 + int.from_bytes(mv[8:12], "little"))
    header = bytes(mv[:hlen])
    parsed = _npy_headers.get(header)
    if parsed is None:
        parsed = _parse_npy_header(header)
        if len(_npy_headers) < 1024:
            _npy_headers[header] = parsed
    shape, fortran, dtype, count = parsed
    if len(mv) - hlen < count * dtype.itemsize:
        raise DecodeError(f".npy value is truncated: {len(mv) - hlen} data bytes for {count} x {dtype}")
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
    return shape, fortran, dtype, int(np.prod(shape, dtype=np.int64))


def load_torch(data):
    """``torch.load(weights_only=True)`` of .pt bytes; ValueError for bytes it rejects."""
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("a .pt value needs torch: pip install torch") from None
    try:
        return torch.load(io.BytesIO(bytes(data)), weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, OSError, KeyError, AttributeError) as exc:
        raise DecodeError(f"not a torch.save value: {exc}") from None
