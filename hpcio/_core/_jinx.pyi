"""JINX kernels: inline value decoding (Ascii85 in C, base64 and hex by binascii), the
footer locator, and the hot part of lazy samples: their base class, runs of sample lines
read into them, and the plain values they return (compiled)."""

from collections.abc import Iterator, KeysView, Sequence
from typing import Any

from typing_extensions import disjoint_base

ENCODINGS: dict[str, int]  # "a85" -> 0, "b64" -> 1, "hex" -> 2

def decode(data: str | bytes, encoding: int, *, path: str | None = None, offset: int = -1,
           sample: int = -1, what: str | None = None) -> bytes:
    """Decode one inline value (ASCII str or bytes-like); DecodeError on invalid text,
    naming ``what`` (the key), where the text went wrong and path/offset/sample."""
def a85decode(data: str | bytes, **where) -> bytes:
    """Python ``base64.a85encode`` text (no <~ ~>; 'z', 'y' and whitespace accepted)."""
def a85encode(data: bytes) -> str:
    """``base64.a85encode(data).decode()`` in C (the JINX writer's default encoding)."""
def locate_footer(buf, *, path: str | None = None) -> tuple[int, int]:
    """(footer_offset, footer_end) of a whole JINX file in ``buf``; the footer JSON is
    ``buf[footer_offset:footer_end]``.  CorruptShardError/TruncatedShardError otherwise."""
def plain_value(value, sep: str, lazy, shard, sample: int):
    """A stored value without type suffix as a lazy reader returns it: objects with a
    suffixed key become ``lazy(object, shard, sample)``, the lists and objects holding one
    are copied down to it, anything else is the value itself."""

@disjoint_base
class LazySample:
    """Base of ``hpcio.formats.jinx.JinxSample``: the stored object, its shard and line,
    the decoded values asked for, and whether a mutable value was handed out."""
    _raw: dict
    _shard: Any
    _sample: int
    _lent: bool
    def __init__(self, raw: dict, shard, sample: int) -> None: ...
    def __getitem__(self, key: str, /): ...
    def __contains__(self, key: object, /) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def keys(self) -> KeysView[str]: ...
    def __len__(self) -> int: ...

def project(raw: dict, shard, fields: Sequence[str]) -> dict:
    """The stored items of ``raw`` that hold ``fields`` (KeyError for a missing one)."""
def lazy_run(shard, cls: type, a: int, b: int, fields: Sequence[str] | None = None) -> list:
    """Lines ``a..b-1`` of a mapped shard as ``cls`` samples; stops before a line that
    fails (the next run, starting there, raises its located error)."""
def lazy_gather(shard, cls: type, indices: list[int], fields: Sequence[str] | None = None) -> list:
    """Lines ``indices`` of a mapped shard as ``cls`` samples."""
