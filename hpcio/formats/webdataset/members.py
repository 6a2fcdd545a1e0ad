"""WebDataset member names: which member holds which field, and how its bytes decode."""

from __future__ import annotations

import re

from ..._paths import check_relative_name
from ...errors import SchemaError, UnsupportedValueError
from .. import _values

# Extensions webdataset's default decoders understand, by the kind they decode to.
_TEXT_EXTS = {"txt", "text", "transcript"}
_JSON_EXTS = {"json", "jsn"}
_INT_EXTS = {"cls", "cls2", "class", "count", "index", "inx", "id"}
_NPY_EXTS = {"npy"}
_BYTES_EXTS = {"bin", "jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm",
               "flac", "mp3", "wav", "mp4", "webm"}
_EXT_KIND = {
    **{e: "str" for e in _TEXT_EXTS},
    **{e: "json" for e in _JSON_EXTS},
    **{e: "int" for e in _INT_EXTS},
    **{e: "ndarray" for e in _NPY_EXTS},
    **{e: "bytes" for e in _BYTES_EXTS},
}
_KIND_EXT = {"str": "txt", "json": "json", "float": "json", "int": "cls", "ndarray": "npy", "bytes": "bin"}


def _image_ext(data) -> str | None:
    head = bytes(data[:12])
    if head.startswith(b"\xff\xd8\xff"):
        return "jpg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    return None


def member_suffix(field: str, value, *, sample=None, path=None) -> tuple[str, bytes]:
    """``(suffix, data)`` of the member holding ``field``.

    A field named like an extension of its kind (``jpg``, ``txt``, ``json``, ``cls``)
    is the suffix itself; otherwise the kind's extension is appended, so the reader can
    strip it again: ``caption`` -> ``caption.txt``, ``image`` (JPEG bytes) -> ``image.jpg``.
    """
    _values.check_field_name(field, sample=sample, path=path)
    if field != field.lower():
        raise SchemaError(
            f"field {field!r} has upper-case letters: webdataset lower-cases member suffixes,"
            f" so it would read back as {field.lower()!r}; rename the field",
            path=path, sample=sample)
    kind = _values.kind_of(value, field=field, sample=sample, path=path)
    if kind in ("bytes_list", "bytes_mapping"):
        raise UnsupportedValueError(
            f"field {field!r}: a {'list of bytes' if kind == 'bytes_list' else 'mapping holding bytes'} "
            "takes one member per bytes value, which this layout does not name", path=path, sample=sample)
    if kind == "float":
        data = _values.encode_json(value, field=field, sample=sample, path=path)
    else:
        data = _values.encode_value(kind, value, field=field, sample=sample, path=path)
    wanted = "json" if kind == "float" else kind
    if "." not in field and _EXT_KIND.get(field.lower()) == wanted:
        return field, data
    ext = (_image_ext(data) or "bin") if kind == "bytes" else _KIND_EXT[kind]
    return f"{field}.{ext}", data


def decode_member(suffix: str, data, decode: bool = True, *, path=None, sample=None):
    """``(field, value)`` of a member with ``suffix`` (the inverse of :func:`member_suffix`).

    With ``decode=False`` the field is the whole suffix and the value the raw bytes, as
    the webdataset library gives them before its decoders run.
    """
    if not decode:
        return suffix, bytes(data)
    field, kind = member_field(suffix)
    if kind is None:
        return suffix, bytes(data)
    if kind == "json":
        return field, _values.decode_json(data, field=field, sample=sample, path=path)
    return field, _values.decode_value(kind, data, field=field, sample=sample, path=path)


def member_field(suffix: str) -> tuple[str, str | None]:
    """The field a member suffix decodes to and its value kind (None: raw bytes under
    the whole suffix, for an extension without a decoder)."""
    head, dot, ext = suffix.rpartition(".")
    kind = _EXT_KIND.get(ext.lower())
    if kind is None:
        return suffix, None
    return (head if dot else ext), kind


def split_name(name: str, key_dots: int = 0) -> tuple[str | None, str | None]:
    """``(key, suffix)`` of a member name; ``(None, None)`` when it has no suffix.

    >>> split_name("train/000123.image.jpg")
    ('train/000123', 'image.jpg')
    >>> split_name("img.0001.jpg", key_dots=1)
    ('img.0001', 'jpg')
    """
    directory, slash, base = name.rpartition("/")
    parts = base.split(".", key_dots + 1)
    if len(parts) <= key_dots + 1 or not parts[0]:
        return None, None
    return directory + slash + ".".join(parts[: key_dots + 1]), parts[-1]


_SKIP_META = re.compile(r"__[^/]*__($|/)")


def _is_meta(name: str) -> bool:
    """Whether webdataset skips the member ``name``: a top-level ``__x__`` name, or a
    path starting with an ``__x__`` component (its ``skip_meta`` pattern).  Other names
    with underscores, ``__meta__.json`` included, are samples to webdataset and here."""
    if "/" not in name and name.startswith("__") and name.endswith("__"):
        return True
    return _SKIP_META.match(name) is not None


def _member_key(raw_name: bytes, key_dots: int, *, path=None, offset=None) -> tuple[str | None, str | None]:
    """``(key, suffix)`` of the tar member named ``raw_name``; ``(None, None)`` for a
    member that belongs to no sample (a metadata member, or a name without a suffix).

    A name that would leave the archive's directory when extracted (absolute, or with
    a ``..`` component) is refused: its key would carry the escape into every tool
    that writes files by key."""
    name = raw_name.decode("utf-8", "surrogateescape")
    if raw_name.startswith(b"/") or b".." in raw_name:
        check_relative_name(name, what="tar member name", source=path, offset=offset)
    if _is_meta(name):
        return None, None
    key, suffix = split_name(name, key_dots)
    # webdataset lower-cases suffixes: "0001.JPG" is field "jpg" there and here
    return key, (None if suffix is None else suffix.lower())

