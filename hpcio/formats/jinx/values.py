"""JINX value coding: compression extensions, base encodings, and the .npy/.pt loaders.

A stored key's suffixes name how its value was coded (``text.str.zst``); this module
holds what each suffix means and the functions that apply or undo it.
"""

from __future__ import annotations

import binascii
import io
import pickle

from ... import codecs as _codecs_table
from ..._core import _codecs as _zstd_kernels, _jinx
from ...errors import DecodeError, InvalidArgumentError, MissingDependencyError
from .._values import load_npy  # noqa: F401  (the .npy loader, shared with the other formats)

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
