"""The MDS column encodings hpcio adds to mosaicml-streaming's, in pure Python and as
streaming encodings.

* ``list[bytes]`` is streaming's list layout over values stored as given: a u32
  placeholder ``0``, the u32 count, each value's u32 size, then the values back to back.
* ``dict[bytes]`` stores a mapping holding bytes anywhere inside it in that same list
  layout: item 0 is the mapping as JSON text (``json.dumps`` defaults, as a ``json``
  column) with every bytes value replaced by ``null``, item 1 the JSON array of the
  bytes values' paths (each the array of keys and list indices leading to the value),
  and the items after them the bytes values, in the order of their paths.

:func:`register` adds both to streaming's encoding table, so ``StreamingDataset`` (and
mldataforge, which decodes through the same table) reads them and ``MDSWriter`` writes
them.  This module imports nothing of hpcio and imports streaming only in
:func:`register`, so an interpreter without hpcio's compiled core (a peer's environment)
can load it from its file, and hpcio's writer encodes through it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

__all__ = ["pack_items", "unpack_items", "encode_bytes_dict", "decode_bytes_dict", "streaming_encodings", "register"]

_BINARY = (bytes, bytearray, memoryview)
_U32 = struct.Struct("<I")


def pack_items(items) -> bytes:
    """Byte strings in streaming's list layout; ValueError for an item of 4 GiB or more.

    The errors of this module are plain ValueErrors: it imports nothing of hpcio, whose
    callers turn them into their typed errors."""
    for j, item in enumerate(items):
        if len(item) >= 1 << 32:
            raise ValueError(f"item {j} holds {len(item)} bytes; at most 2**32 - 1")
    return b"".join([struct.pack(f"<{2 + len(items)}I", 0, len(items), *map(len, items)), *items])


def unpack_items(data) -> list:
    """The byte strings of streaming's list layout; ValueError when the sizes do not add up."""
    mv = memoryview(data).cast("B")
    if len(mv) < 8:
        raise ValueError(f"a list needs 8 bytes, the value has {len(mv)}")
    count = _U32.unpack_from(mv, 4)[0]
    pos = 8 + 4 * count
    if pos > len(mv):
        raise ValueError(f"{count} elements announced, only {len(mv)} bytes")
    out = []
    for size in struct.unpack_from(f"<{count}I", mv, 8):
        out.append(mv[pos : pos + size].tobytes())
        pos += size
    if pos != len(mv):
        raise ValueError(f"elements end at byte {pos} of a {len(mv)}-byte value")
    return out


def _strip(value, path: list, paths: list, blobs: list):
    """``value`` with its bytes replaced by None, their paths and values appended."""
    if isinstance(value, _BINARY):
        paths.append(list(path))
        # item sizes count bytes: a memoryview whose len() is not its size gives its bytes
        blobs.append(value.tobytes() if isinstance(value, memoryview) and value.nbytes != len(value) else value)
        return None
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"key {key!r} at {_where(path)} is a {type(key).__name__}; "
                                     "JSON keys are str")
            path.append(key)
            out[key] = _strip(item, path, paths, blobs)
            path.pop()
        return out
    if isinstance(value, (list, tuple)):
        items = []
        for j, item in enumerate(value):
            path.append(j)
            items.append(_strip(item, path, paths, blobs))
            path.pop()
        return items
    return value


def _where(path: list) -> str:
    return "the top" if not path else "".join(f"[{k!r}]" for k in path)


def encode_bytes_dict(value: Mapping) -> bytes:
    """The ``dict[bytes]`` bytes of ``value``; ValueError naming what it
    cannot hold: a key that is not a str, a value JSON cannot write, bytes of 4 GiB."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping, got {type(value).__name__}")
    paths: list = []
    blobs: list = []
    skeleton = _strip(value, [], paths, blobs)
    try:
        text = json.dumps(skeleton)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not JSON-serialisable: {exc}") from None
    return pack_items([text.encode("utf-8"), json.dumps(paths).encode("utf-8"), *blobs])


def _loads(text: bytes, what: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the {what} of a dict[bytes] value is not JSON: {exc}") from None


def decode_bytes_dict(data) -> dict:
    """The mapping stored in ``dict[bytes]`` bytes: its JSON with each path's null
    replaced by the bytes item of the same rank; ValueError when a path leads to no null
    placeholder or the bytes are no such value."""
    items = unpack_items(data)
    if len(items) < 2:
        raise ValueError(f"a dict[bytes] value holds {len(items)} items; at least 2")
    skeleton = _loads(items[0], "mapping")
    paths = _loads(items[1], "path list")
    if type(skeleton) is not dict or type(paths) is not list or len(paths) != len(items) - 2:
        raise ValueError(f"a dict[bytes] value holds {len(items) - 2} bytes items for "
                         f"{len(paths) if type(paths) is list else 'no'} paths")
    for path, blob in zip(paths, items[2:]):
        if type(path) is not list or not path:
            raise ValueError(f"bad path {path!r} in a dict[bytes] value")
        container = skeleton
        for depth, key in enumerate(path):
            if not (type(container) is dict and type(key) is str and key in container
                    or type(container) is list and type(key) is int and 0 <= key < len(container)):
                raise ValueError(f"path {path!r} of a dict[bytes] value leads nowhere")
            if depth + 1 < len(path):
                container = container[key]
        if container[key] is not None:
            raise ValueError(f"path {path!r} of a dict[bytes] value holds no placeholder")
        container[key] = blob
    return skeleton


_CLASSES: dict = {}


def streaming_encodings() -> dict:
    """hpcio's encodings as streaming ``Encoding`` classes, by name (imports streaming)."""
    if not _CLASSES:
        from streaming.base.format.mds import encodings as _encodings

        class BytesList(_encodings.List):
            """``list[bytes]``: decodes to a list of ``bytes``."""

            def underlying_encoder(self):
                return _encodings.Bytes()

            def decode(self, data: bytes) -> list:
                return [bytes(v) for v in super().decode(data)]

        class BytesDict(_encodings.Encoding):
            """``dict[bytes]``: a mapping whose values (at any depth) may be ``bytes``."""

            def encode(self, obj) -> bytes:
                return encode_bytes_dict(obj)

            def decode(self, data: bytes) -> dict:
                return decode_bytes_dict(data)

        _CLASSES.update({"list[bytes]": BytesList, "dict[bytes]": BytesDict})
    return _CLASSES


def register() -> None:
    """Add hpcio's encodings to streaming's table (``_encodings``)."""
    from streaming.base.format.mds import encodings as _encodings

    _encodings._encodings.update(streaming_encodings())
