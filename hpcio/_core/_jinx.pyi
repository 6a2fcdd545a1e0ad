"""JINX kernels: Ascii85/base64/hex decoding, the footer locator and the plain values of
lazy samples (compiled)."""

ENCODINGS: dict[str, int]  # "a85" -> 0, "b64" -> 1, "hex" -> 2

def decode(data: str | bytes, encoding: int, *, path: str | None = None, offset: int = -1,
           sample: int = -1, what: str | None = None) -> bytes:
    """Decode one inline value (ASCII str or bytes-like); DecodeError on invalid text,
    naming ``what`` (the key), the character position and path/offset/sample."""
def a85decode(data: str | bytes, **where) -> bytes:
    """Python ``base64.a85encode`` text (no <~ ~>; 'z', 'y' and whitespace accepted)."""
def b64decode(data: str | bytes, **where) -> bytes:
    """Strict standard base64 with padding."""
def hexdecode(data: str | bytes, **where) -> bytes: ...
def a85encode(data: bytes) -> str:
    """``base64.a85encode(data).decode()`` in C (the JINX writer's default encoding)."""
def locate_footer(buf, *, path: str | None = None) -> tuple[int, int]:
    """(footer_offset, footer_end) of a whole JINX file in ``buf``; the footer JSON is
    ``buf[footer_offset:footer_end]``.  CorruptShardError/TruncatedShardError otherwise."""
def plain_value(value, sep: str, lazy, shard, sample: int):
    """A stored value without type suffix as a lazy reader returns it: objects with a
    suffixed key become ``lazy(object, shard, sample)``, other objects new dicts and lists
    new lists (nested values alike), anything else itself."""
