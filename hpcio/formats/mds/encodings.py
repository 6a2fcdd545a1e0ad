"""MDS column encodings: value <-> bytes, byte-compatible with mosaicml-streaming.

Each column of an MDS dataset has an encoding string (``"str"``, ``"int"``,
``"ndarray:float32:2,3"``, ...).  :func:`column_codec` turns one into a
:class:`ColumnCodec`, which encodes one value (the writer) and decodes a whole batch of
values sliced out of one buffer (the readers), so the per-value Python work is a single
comprehension step and fixed-size numeric columns are decoded by one numpy gather.

Values come back as:

* ``bytes`` for ``bytes``; ``str`` for ``str``; ``int`` for ``int`` and ``str_int``;
  ``float`` for ``str_float``; ``decimal.Decimal`` for ``str_decimal``; the JSON value
  for ``json``;
* numpy scalars (``numpy.float32``, ``numpy.uint8``, ...) for the numeric dtype
  columns, as streaming returns them, so the dtype survives a round trip;
* writable numpy arrays for ``ndarray`` columns;
* the stored bytes for image columns (``jpeg``, ``png``, ``pil``) and lists of bytes for
  ``list[...]``/``jpeg_array``, unless the reader was opened with
  ``decode_images=True``, which gives PIL images as streaming does;
* a list of ``bytes`` for ``list[bytes]`` and a mapping holding ``bytes`` (at any depth)
  for ``dict[bytes]``, hpcio's extensions (their layouts:
  :mod:`~hpcio.formats.mds.streaming_encodings`), which streaming reads once
  :func:`hpcio.formats.mds.register_streaming_reader` has registered them.
"""

from __future__ import annotations

import math
import pickle
import struct
from collections.abc import Sequence
from io import BytesIO

import numpy as np

from ..._core import _records
from ..._core._records import loads_exact
from ...columns import loads_json
from ...errors import (
    CorruptShardError,
    DecodeError,
    KeyNotFoundError,
    SchemaError,
    SelfCheckError,
    UnsupportedValueError,
)
from .._values import bytes_inside
from .json_text import _json_dumps
from .streaming_encodings import encode_bytes_dict, pack_items

__all__ = [
    "ColumnCodec",
    "column_codec",
    "infer_encoding",
    "NUMERIC_DTYPES",
    "NDARRAY_DTYPE_CODES",
    "EXTENSION_ENCODINGS",
    "COMPILED_KINDS",
]

# The scalar encodings that are numpy dtypes of the same name.
NUMERIC_DTYPES = (
    "uint8", "uint16", "uint32", "uint64",
    "int8", "int16", "int32", "int64",
    "float16", "float32", "float64",
)  # fmt: skip

# ndarray value dtype codes (streaming ``NDArray._int2value_dtype``).
NDARRAY_DTYPE_CODES = {
    8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16",
    32: "uint32", 33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64",
}  # fmt: skip
_NDARRAY_CODE_OF = {v: k for k, v in NDARRAY_DTYPE_CODES.items()}
_SHAPE_DTYPES = ("<u1", "<u2", "<u4", "<u8")

_PLAIN = {
    "bytes", "str", "int", "str_int", "str_float", "str_decimal", "json", "pkl",
    "jpeg", "png", "pil", "list[pil]", "list[jpeg]", "list[png]", "jpeg_array", "jpegarray",
    "list[bytes]", "dict[bytes]", *NUMERIC_DTYPES,
}  # fmt: skip
#: Encodings hpcio adds to streaming's; readable by streaming after register_streaming_reader().
EXTENSION_ENCODINGS = ("list[bytes]", "dict[bytes]")
#: Their values, and pickled ones, are built a batch at a time by the compiled record kernels.
COMPILED_KINDS = {"list[bytes]": _records.KIND_BYTES_LIST, "dict[bytes]": _records.KIND_BYTES_DICT,
                  "pkl": _records.KIND_PICKLE}
_UNSAFE = {"pkl"}
_U32 = struct.Struct("<I")
_Q = struct.Struct("<q")


def _pil():
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - pillow is a declared extra
        from ...errors import MissingDependencyError

        raise MissingDependencyError(
            "image columns need Pillow: pip install pillow (or pip install 'hpcio[formats]')"
        ) from exc
    return Image


class _Reject(Exception):
    """A value an encoder cannot store; turned into SchemaError with the column named."""


class ColumnCodec:
    """The encoder and batch decoder of one MDS column encoding.

    Parameters
    ----------
    encoding
        The encoding string as it appears in ``column_encodings``.
    """

    __slots__ = ("encoding", "kind", "size", "unsafe", "dtype", "shape", "_encode")

    def __init__(self, encoding: str):
        self.encoding = encoding
        self.unsafe = encoding in _UNSAFE
        self.dtype: np.dtype | None = None
        self.shape: tuple[int, ...] | None = None
        name, _, config = encoding.partition(":")
        if name == "ndarray":
            self.kind = "ndarray"
            self._parse_ndarray(config)
        elif config or encoding not in _PLAIN:
            raise KeyNotFoundError(encoding)
        else:
            self.kind = "jpeg_array" if encoding == "jpegarray" else encoding
        self.size = self._fixed_size()
        self._encode = getattr(self, "_enc_" + _method_suffix(self.kind))

    # --- parsing ----------------------------------------------------------------------
    def _parse_ndarray(self, config: str) -> None:
        # streaming NDArray.from_str: "dtype" or "dtype:d0,d1,..."; "" means neither.
        args = config.split(":") if config else []
        if len(args) > 2:
            raise KeyNotFoundError(self.encoding)
        if args:
            if args[0] not in _NDARRAY_CODE_OF:
                raise KeyNotFoundError(self.encoding)
            self.dtype = np.dtype(args[0])
        if len(args) == 2:
            try:
                shape = tuple(int(d) for d in args[1].split(","))
            except ValueError:
                raise KeyNotFoundError(self.encoding) from None
            if not shape or min(shape) < 1:
                raise KeyNotFoundError(self.encoding)
            self.shape = shape

    def _fixed_size(self) -> int | None:
        if self.kind == "int":
            return 8
        if self.kind in NUMERIC_DTYPES:
            return np.dtype(self.kind).itemsize
        if self.kind == "ndarray" and self.dtype is not None and self.shape is not None:
            return int(np.prod(self.shape)) * self.dtype.itemsize
        return None

    # --- encoding ---------------------------------------------------------------------
    def encode(self, value) -> bytes:
        """The bytes of ``value`` in this encoding (``_Reject`` if it does not fit).

        Like streaming, a ``bytes`` value is taken as already encoded, whatever the
        encoding (that is how pre-encoded JPEG bytes go into a ``jpeg`` column).
        """
        if type(value) is bytes:
            data = value
        else:
            data = self._encode(value)
        if self.size is not None and len(data) != self.size:
            raise _Reject(f"{len(data)} bytes where the encoding takes exactly {self.size}")
        return data

    @staticmethod
    def _want(value, types, what: str):
        if not isinstance(value, types):
            raise _Reject(f"expected {what}, got {type(value).__name__}")

    def _enc_bytes(self, value):
        self._want(value, (bytearray, memoryview), "bytes")
        return bytes(value)

    def _enc_str(self, value):
        self._want(value, str, "str")
        return value.encode("utf-8")

    def _enc_int(self, value):
        self._want(value, (int, np.integer), "int")
        try:
            return _Q.pack(int(value))
        except struct.error:
            raise _Reject(f"{value} does not fit in int64") from None

    def _enc_numeric(self, value):
        self._want(value, (int, float, np.number, np.bool_), f"a number for {self.kind}")
        try:
            return np.dtype(self.kind).type(value).tobytes()
        except (OverflowError, ValueError) as exc:
            raise _Reject(f"{value!r} does not fit in {self.kind}: {exc}") from None

    def _enc_str_int(self, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Reject(f"expected int, got {type(value).__name__}")
        return str(value).encode("utf-8")

    def _enc_str_float(self, value):
        self._want(value, float, "float")
        return str(value).encode("utf-8")

    def _enc_str_decimal(self, value):
        from decimal import Decimal

        self._want(value, Decimal, "decimal.Decimal")
        return str(value).encode("utf-8")

    def _enc_json(self, value):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        try:
            return _json_dumps(value).encode("utf-8")
        except (TypeError, ValueError) as exc:
            nested = bytes_inside(value, "value") if isinstance(value, dict) else None
            if nested:  # a mapping that came with bytes after the first sample
                raise _Reject(f"{nested} is bytes, which JSON cannot hold; declare the column "
                              "dict[bytes] (columns=...)") from None
            raise _Reject(f"not JSON-serialisable: {exc}") from None

    def _enc_pkl(self, value):
        return pickle.dumps(value)

    def _image(self, value, fmt: str) -> bytes:
        Image = _pil()
        self._want(value, Image.Image, "a PIL image or encoded image bytes")
        if fmt == "pil":
            mode = value.mode.encode("utf-8")
            width, height = value.size
            return struct.pack("<3I", width, height, len(mode)) + mode + value.tobytes()
        if fmt == "jpeg":
            from PIL.JpegImagePlugin import JpegImageFile

            # streaming keeps an opened JPEG file's original bytes instead of re-encoding.
            if isinstance(value, JpegImageFile) and getattr(value, "filename", None):
                try:
                    with open(value.filename, "rb") as f:
                        return f.read()
                except FileNotFoundError:
                    pass
        out = BytesIO()
        value.save(out, format=fmt.upper())
        return out.getvalue()

    def _enc_jpeg(self, value):
        return self._image(value, "jpeg")

    def _enc_png(self, value):
        return self._image(value, "png")

    def _enc_pil(self, value):
        return self._image(value, "pil")

    def _enc_image_list(self, value):
        self._want(value, list, "a list of images")
        fmt = self.kind[5:-1]
        # Elements may be encoded bytes (what the reader returns), so a round trip works.
        parts = [
            bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else self._image(v, fmt)
            for v in value
        ]
        head = struct.pack(f"<{2 + len(parts)}I", 0, len(parts), *map(len, parts))
        return head + b"".join(parts)

    def _enc_bytes_list(self, value):
        self._want(value, (list, tuple), "a list of bytes")
        parts = []
        for j, v in enumerate(value):
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise _Reject(f"item {j} is a {type(v).__name__}, expected bytes")
            parts.append(v)
        try:
            return pack_items(parts)
        except ValueError as exc:  # an item of 4 GiB: item sizes are u32
            raise _Reject(str(exc)) from None

    def _enc_bytes_dict(self, value):
        self._want(value, dict, "a mapping (dict)")
        try:
            return encode_bytes_dict(value)
        except ValueError as exc:
            raise _Reject(str(exc)) from None

    def _enc_jpeg_array(self, value):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise _Reject(f"expected a sequence of JPEG byte strings, got {type(value).__name__}")
        parts = []
        for v in value:
            self._want(v, (bytes, bytearray, memoryview), "JPEG byte strings")
            parts.append(bytes(v))
        head = struct.pack(f"<{1 + len(parts)}I", len(parts), *map(len, parts))
        return head + b"".join(parts)

    def _enc_ndarray(self, value):
        self._want(value, np.ndarray, "numpy.ndarray")
        code = _NDARRAY_CODE_OF.get(value.dtype.name)
        if code is None or value.dtype.byteorder == ">":
            raise _Reject(f"unsupported array dtype {value.dtype}")
        parts = []
        if self.dtype is None:
            parts.append(bytes([code]))
        elif value.dtype != self.dtype:
            raise _Reject(f"array dtype {value.dtype.name}, column dtype {self.dtype.name}")
        if value.size == 0:
            raise _Reject("an array with 0 elements cannot be stored")
        if self.shape is None:
            if value.ndim == 0:
                raise _Reject("a 0-d array cannot be stored; use a scalar encoding")
            if value.ndim >= 64:
                raise _Reject(f"array has {value.ndim} axes; at most 63")
            biggest = max(value.shape)
            width = 0 if biggest < 1 << 8 else 1 if biggest < 1 << 16 else 2 if biggest < 1 << 32 else 3
            parts.append(bytes([(value.ndim << 2) | width]))
            parts.append(np.asarray(value.shape, _SHAPE_DTYPES[width]).tobytes())
        elif value.shape != self.shape:
            raise _Reject(f"array shape {value.shape}, column shape {self.shape}")
        parts.append(value.tobytes())
        return b"".join(parts)

    # --- decoding ---------------------------------------------------------------------
    def decode_batch(self, buf, u8: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     decode_images: bool = False, zero_copy: bool = False) -> list:
        """Values of this column for records whose column bytes are ``buf[starts[j]:ends[j]]``.

        ``u8`` is ``buf`` as a uint8 array (for the vectorised fixed-size paths).  Values
        never reference ``buf`` (a reused read buffer or an mmap), except with
        ``zero_copy``, where bytes and undecoded image values are memoryviews of it.
        """
        kind = self.kind
        if kind in NUMERIC_DTYPES or kind == "int":
            if not len(starts):
                return []
            gathered = u8[starts[:, None] + np.arange(self.size, dtype=np.int64)]
            if kind == "int":
                return gathered.view("<i8").ravel().tolist()
            return list(gathered.view(np.dtype(kind).newbyteorder("<")).ravel())
        if kind == "ndarray" and self.size is not None:
            if not len(starts):
                return []
            gathered = u8[starts[:, None] + np.arange(self.size, dtype=np.int64)]
            return list(gathered.view(self.dtype.newbyteorder("<")).reshape((-1, *self.shape)))
        mv = memoryview(buf)
        pairs = zip(starts.tolist(), ends.tolist())
        if kind == "str":
            return [str(mv[a:b], "utf-8") for a, b in pairs]
        if kind == "bytes" or (not decode_images and kind in ("jpeg", "png", "pil")):
            if zero_copy:
                return [mv[a:b] for a, b in pairs]
            return [mv[a:b].tobytes() for a, b in pairs]
        if kind == "json":
            try:
                return [loads_exact(mv[a:b]) for a, b in pairs]
            except ValueError:  # NaN, or bad text: decode_one reads or reports it
                pairs = zip(starts.tolist(), ends.tolist())
        if kind in COMPILED_KINDS:  # a bad value: the caller reports it through decode_one
            return _records.values_of_kind(buf, np.ascontiguousarray(starts, np.int64),
                                           np.ascontiguousarray(ends, np.int64), COMPILED_KINDS[kind], None)
        one = self.decode_one
        return [one(mv[a:b], decode_images) for a, b in pairs]

    def decode_one(self, data: memoryview, decode_images: bool = False):
        """The value stored in ``data`` (exactly this column's bytes of one record)."""
        kind = self.kind
        if kind == "str":
            return str(data, "utf-8")
        if kind == "bytes":
            return data.tobytes()
        if kind == "int":
            return int.from_bytes(data, "little", signed=True)
        if kind in NUMERIC_DTYPES:
            return np.frombuffer(data, np.dtype(kind).newbyteorder("<"), 1)[0]
        if kind == "str_int":
            return int(str(data, "utf-8"))
        if kind == "str_float":
            return float(str(data, "utf-8"))
        if kind == "str_decimal":
            from decimal import Decimal, InvalidOperation

            try:
                return Decimal(str(data, "utf-8"))
            except InvalidOperation:
                raise DecodeError(f"not a decimal: {data.tobytes()[:40]!r}") from None
        if kind == "json":
            return loads_json(data)
        if kind == "pkl":
            return pickle.loads(data)
        if kind == "ndarray":
            return self._decode_ndarray(data)
        if kind in ("jpeg", "png", "pil"):
            return self._decode_image(data, kind) if decode_images else data.tobytes()
        if kind == "list[bytes]":
            return _records.bytes_list(data)
        if kind == "dict[bytes]":
            return _records.bytes_dict(data)
        if kind.startswith("list["):
            count = _U32.unpack_from(data, 4)[0]
            return self._split_sized(data, 8, count, kind[5:-1], decode_images)
        if kind == "jpeg_array":
            count = _U32.unpack_from(data, 0)[0]
            return self._split_sized(data, 4, count, "jpeg", decode_images)
        raise SelfCheckError(kind)  # every kind is handled above: column_codec rejects the others

    def _split_sized(self, data, at: int, count: int, fmt: str, decode_images: bool) -> list:
        body = at + 4 * count
        if body > len(data):
            raise DecodeError(f"{count} elements announced, only {len(data)} bytes")
        sizes = struct.unpack_from(f"<{count}I", data, at)
        out = []
        for size in sizes:
            end = body + size
            if end > len(data):
                raise DecodeError(f"element ends at byte {end} of a {len(data)}-byte value")
            part = data[body:end]
            out.append(self._decode_image(part, fmt) if decode_images else part.tobytes())
            body = end
        if body != len(data):
            raise DecodeError(f"elements end at byte {body} of a {len(data)}-byte value")
        return out

    @staticmethod
    def _decode_image(data, fmt: str):
        Image = _pil()
        if fmt == "pil":
            width, height, mode_size = struct.unpack_from("<3I", data, 0)
            mode = str(data[12 : 12 + mode_size], "utf-8")
            return Image.frombytes(mode, (width, height), data[12 + mode_size :].tobytes())
        return Image.open(BytesIO(data.tobytes()))

    def _decode_ndarray(self, data) -> np.ndarray:
        pos = 0
        dtype = self.dtype
        if dtype is None:
            code = data[0]
            if code not in NDARRAY_DTYPE_CODES:
                raise DecodeError(f"unknown ndarray dtype code {code}")
            dtype = np.dtype(NDARRAY_DTYPE_CODES[code])
            pos = 1
        shape = self.shape
        if shape is None:
            byte = data[pos]
            ndim, width = byte >> 2, byte & 3
            if ndim == 1:  # the common case, a token or feature vector: no array for one int
                shape = (int.from_bytes(data[pos + 1 : pos + 1 + (1 << width)], "little"),)
            else:
                shape = tuple(np.frombuffer(data, _SHAPE_DTYPES[width], ndim, pos + 1).tolist())
            pos += 1 + ndim * (1 << width)
        count = math.prod(shape)
        if pos + count * dtype.itemsize != len(data):
            raise DecodeError(
                f"array of shape {shape} and dtype {dtype.name} needs "
                f"{pos + count * dtype.itemsize} bytes, the value has {len(data)}"
            )
        little = _LITTLE.get(dtype)
        if little is None:
            little = _LITTLE[dtype] = dtype.newbyteorder("<")
        return np.frombuffer(data, little, count, pos).reshape(shape).copy()


# dtype -> its little-endian form (newbyteorder builds a new dtype on every call)
_LITTLE: dict = {}


def _method_suffix(kind: str) -> str:
    if kind in NUMERIC_DTYPES:
        return "numeric"
    if kind == "list[bytes]":
        return "bytes_list"
    if kind == "dict[bytes]":
        return "bytes_dict"
    if kind.startswith("list["):
        return "image_list"
    return kind


_CACHE: dict[str, ColumnCodec] = {}


def column_codec(encoding: str, *, path=None, column: str | None = None) -> ColumnCodec:
    """The codec of ``encoding``; CorruptShardError naming the column when it is unknown."""
    codec = _CACHE.get(encoding)
    if codec is None:
        try:
            codec = ColumnCodec(encoding)
        except (KeyError, TypeError):
            raise CorruptShardError(
                f"unknown MDS column encoding {encoding!r} for column {column!r}", path=path
            ) from None
        _CACHE[encoding] = codec
    return codec


def encode_value(codec: ColumnCodec, value, column: str, sample: int) -> bytes:
    """``codec.encode(value)`` with a SchemaError naming the column and sample."""
    try:
        return codec.encode(value)
    except _Reject as exc:
        raise SchemaError(
            f"column {column!r} ({codec.encoding}) cannot store this value: {exc}", sample=sample
        ) from None


def infer_encoding(value, column: str, allow_pickle: bool = False) -> str:
    """The MDS encoding mldataforge would pick for ``value`` (``_infer_mds_encoding``).

    Differences, all on values mldataforge cannot read back: images map to the real
    encoding names (``jpeg``/``png``/``pil``, where mldataforge writes the unknown
    upper-case names), an empty list is ``json`` (not ``jpeg_array``), a list of
    ``bytes`` is ``list[bytes]`` (where mldataforge would pickle it), and a value that
    would need ``pkl`` raises :class:`~hpcio.errors.UnsupportedValueError` unless
    ``allow_pickle`` is set, because reading pickle runs code.  A dict holding bytes at
    any depth (``{"thumb": b"...", "crops": [b"..."]}``) is ``dict[bytes]``, where
    mldataforge would pickle it; a list holding bytes inside its items is refused the
    same way (only ``pkl`` stores it).
    """
    if isinstance(value, str):
        return "str"
    if isinstance(value, int):  # bool is an int, as in mldataforge
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, np.ndarray):
        return "ndarray"
    if isinstance(value, np.generic) and value.dtype.name in NUMERIC_DTYPES:
        return value.dtype.name
    image = _image_kind(value)
    if image:
        return image
    if isinstance(value, list) and value:
        kinds = {_image_kind(v) for v in value}
        if None not in kinds:  # all images: one file format, else raw PIL
            return f"list[{kinds.pop()}]" if len(kinds) == 1 else "list[pil]"
    if (
        isinstance(value, Sequence)
        and value
        and all(isinstance(v, bytearray) for v in value)
    ):
        return "jpeg_array"
    if isinstance(value, list) and value and all(isinstance(v, (bytes, bytearray, memoryview)) for v in value):
        return "list[bytes]"
    nested = bytes_inside(value, column) if isinstance(value, (list, dict)) else None
    if nested and isinstance(value, dict):
        return "dict[bytes]"
    if nested:
        if allow_pickle:
            return "pkl"
        raise UnsupportedValueError(
            f"column {column!r}: {nested} is bytes inside the items of a list, which "
            "no MDS encoding but pkl stores; give the bytes a column of their own (a list of "
            "bytes alone is a list[bytes] column, a dict holding bytes a dict[bytes] column), "
            "or pass allow_pickle=True"
        )
    if isinstance(value, (list, dict, type(None))):
        return "json"
    if allow_pickle:
        return "pkl"
    raise UnsupportedValueError(
        f"cannot infer an MDS encoding for column {column!r} from a "
        f"{type(value).__name__} value; pass columns= explicitly, or allow_pickle=True "
        "to store it with pickle (reading pickle runs code)"
    )


def _image_kind(value) -> str | None:
    module = type(value).__module__
    if not module.startswith("PIL."):
        return None
    Image = _pil()
    if not isinstance(value, Image.Image):
        return None
    fmt = getattr(value, "format", None)
    if fmt == "JPEG":
        return "jpeg"
    if fmt == "PNG":
        return "png"
    return "pil"
