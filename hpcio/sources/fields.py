"""Fields that carry bytes as text or by reference, turned into bytes while reading.

Raw datasets made by other tools hold binary values in ways a training shard should
not keep: base64 text (JSON has no bytes), ``data:image/png;base64,...`` URLs (chat and
VLM datasets), paths or ``tar://`` references to files beside the source, and Hugging
Face ``{"bytes": ..., "path": ...}`` structs (its ``Image`` and ``Audio`` features).
The reader options below (``hpcio convert -I KEY=VALUE``) say which to decode; the
converter reads through a :class:`DecodedReader` that applies them to every sample.

``base64_fields``
    Top-level fields whose string values (or lists of strings) are base64; a base64
    ``data:`` URL there is decoded too.
``ref_fields``
    Top-level fields whose strings (or lists of strings) are references
    (:mod:`.references`); ``ref_root`` the directories references may name files in
    and relative ones start from (a list, or directories joined by ``:``; default: the
    source file's directory; relative ones are taken from the working directory);
    ``ref_anywhere=true`` admits any path; ``ref_max_bytes`` bounds a referenced file
    (default 1 GiB); ``max_open_tars`` how many tar shards stay open.
``decode_data_urls``
    Decode ``data:<image|audio|video>/<type>;base64,...`` strings anywhere in a sample
    (nested in lists and objects too).
``decode_file_structs``
    Replace ``{"bytes", "path"}`` objects anywhere in a sample by their bytes, or by the
    file at ``path`` when the bytes are null.

The last two are on by default for the formats other tools write (data URLs in
:data:`DATA_URL_FORMATS`, file structs in those of them that hold bytes,
:data:`FILE_STRUCT_FORMATS`) and off for training-shard formats, whose strings and
objects were stored as such on purpose; ``false`` turns them off, ``true`` on for any
format.
"""

from __future__ import annotations

import binascii
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import DecodeError, HpcioError, InvalidArgumentError, OptionError
from ..formats import base
from .references import DEFAULT_MAX_REF_BYTES, References

__all__ = ["FIELD_OPTIONS", "DATA_URL_FORMATS", "FILE_STRUCT_FORMATS", "FieldDecoder", "DecodedReader", "split_options",
           "binary_text_fields", "warn_binary_text"]

FIELD_OPTIONS = ("base64_fields", "ref_fields", "ref_root", "ref_anywhere", "ref_max_bytes", "max_open_tars",
                 "decode_data_urls", "decode_file_structs")
#: Source formats other tools write, where data URLs are decoded by default.
DATA_URL_FORMATS = frozenset({"jsonl", "parquet", "msgpack", "huggingface"})
#: Those of them that store bytes, where file structs are decoded by default.
FILE_STRUCT_FORMATS = frozenset({"parquet", "msgpack", "huggingface"})

# Media whose bytes identify their own type, so dropping the URL's header loses nothing.
_DATA_URL = re.compile(r"data:(?:image|audio|video)/[\w.+-]+(?:;[\w.+-]+=[^;,]*)*;base64,")
_FILE_STRUCT_KEYS = frozenset({"bytes", "path"})
# Leading bytes of binary formats, by name: base64 text opening with one of them is
# almost surely a file that a source could not store as bytes.
_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"),
               (b"RIFF", "RIFF (WebP, WAV)"), (b"\x93NUMPY", "npy"), (b"\x28\xb5\x2f\xfd", "zstd"),
               (b"\x1f\x8b", "gzip"), (b"%PDF-", "PDF"), (b"fLaC", "FLAC"), (b"OggS", "Ogg"),
               (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))


def split_options(options: Mapping | None) -> tuple[dict, dict]:
    """``(field options, the format reader's own options)`` from reader options."""
    options = dict(options or {})
    fields = {k: options.pop(k) for k in FIELD_OPTIONS if k in options}
    return fields, options


def _names(value, option: str) -> tuple[str, ...]:
    """Field names from a list or a comma-separated string (``-I base64_fields=a,b``)."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(f"reader option {option}: expected field names (a list, or a comma-separated "
                         f"string), got {value!r}")
    return tuple(v.strip() for v in value if v.strip())


def _switch(value, option: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidArgumentError(f"reader option {option}: expected true or false, got {value!r}")


def _roots(value) -> list[str]:
    """``ref_root`` as directories: a list, or one string of directories joined by ``:``."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(os.pathsep)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(f"reader option ref_root: expected directories, got {value!r}")
    roots = [os.path.abspath(v) for v in value if v]
    missing = [r for r in roots if not os.path.isdir(r)]
    if missing:
        raise InvalidArgumentError(f"reader option ref_root: {missing[0]} is not a directory")
    return roots


def _positive(value, option: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if isinstance(value, bool) or n < 1:
        raise InvalidArgumentError(f"reader option {option}: expected a whole number of bytes >= 1, got {value!r}")
    return n


def _b64(text: str) -> bytes:
    return binascii.a2b_base64(text, strict_mode=True)


# (file, byte offset or None, "on line N" / "in row N" or None, sample index)
Where = tuple


def binary_text_fields(sample: Mapping) -> dict[str, str]:
    """The top-level fields of ``sample`` whose string (or a list's first string) is
    base64 text of a binary format's bytes, with that format's name."""
    out = {}
    for field, value in sample.items():
        if isinstance(value, list):
            value = next((v for v in value if v is not None), None)
        if not isinstance(value, str) or len(value) < 16:
            continue
        try:
            head = binascii.a2b_base64(value[:16], strict_mode=True)
        except (binascii.Error, ValueError):
            continue
        kind = next((name for magic, name in _SIGNATURES if head.startswith(magic)), None)
        if kind is not None:
            out[field] = kind
    return out


def warn_binary_text(reader: base.Reader, source_path: str, source_format: str) -> None:
    """Warn, a line per field, when the first sample of a source that stores text (JSON
    Lines, Parquet, ...) holds base64 text of a known binary format that no option
    decodes: it would be converted as text, a third larger, not as the bytes it holds."""
    if source_format not in DATA_URL_FORMATS or not len(reader):
        return
    try:
        sample = reader.read(0)
    except HpcioError:
        return  # the conversion reads it again and reports it where it belongs
    for field, kind in binary_text_fields(sample).items():
        warnings.warn(f"field {field!r} of {source_path} holds base64 text of {kind} data, converted as text; "
                      f"-I base64_fields={field} converts it to bytes", stacklevel=2)


class FieldDecoder:
    """Turns a source's text-encoded and referenced bytes into bytes (see the module).

    ``source_path`` is the source file or directory (relative references and struct
    paths start from its directory); ``source_format`` decides the defaults.  Given the
    source's open ``reader``, errors name the line or row of a sample, and Arrow columns
    whose type can hold neither a data URL nor a file struct are not searched.
    """

    def __init__(self, options: Mapping, source_path: str, source_format: str, reader=None):
        unknown = sorted(set(options) - set(FIELD_OPTIONS))
        if unknown:
            raise OptionError(f"unknown field options {unknown}; known: {', '.join(FIELD_OPTIONS)}")
        base64_fields = _names(options.get("base64_fields", ()), "base64_fields")
        ref_fields = _names(options.get("ref_fields", ()), "ref_fields")
        both = sorted(set(base64_fields) & set(ref_fields))
        if both:
            raise InvalidArgumentError(f"fields {both} are named both in base64_fields and ref_fields")
        self.named = {**dict.fromkeys(base64_fields, (self._base64_text, "base64 text")),
                      **dict.fromkeys(ref_fields, (self._ref_text, "a reference"))}
        self.data_urls = _switch(options.get("decode_data_urls"), "decode_data_urls",
                                 source_format in DATA_URL_FORMATS)
        self.file_structs = _switch(options.get("decode_file_structs"), "decode_file_structs",
                                    source_format in FILE_STRUCT_FORMATS)
        base_dir = source_path if os.path.isdir(source_path) else os.path.dirname(source_path)
        roots = _roots(options.get("ref_root"))
        self.references = References(roots or [os.path.abspath(base_dir or ".")],
                                     int(options.get("max_open_tars", 16)),
                                     max_bytes=_positive(options.get("ref_max_bytes", DEFAULT_MAX_REF_BYTES),
                                                         "ref_max_bytes"),
                                     anywhere=_switch(options.get("ref_anywhere"), "ref_anywhere", False))
        self.locate = _locator(reader, source_format, source_path)
        self.walk_fields = _arrow_walk_fields(reader, self.data_urls, self.file_structs)
        self.walks = (self.data_urls or self.file_structs) and self.walk_fields != frozenset()

    @property
    def active(self) -> bool:
        """Whether there is anything to decode at all (else the reader is left bare)."""
        return bool(self.named) or self.walks

    def decode(self, sample: Mapping, i: int) -> Mapping:
        """Sample ``i`` with its fields decoded: a new dict when anything changed."""
        changed = None
        for field, (decode, what) in self.named.items():
            value = sample.get(field)
            if value is not None:
                if changed is None:
                    changed = dict(sample)
                changed[field] = self._each(value, field, decode, what, i)
        if self.walks:
            data_urls = self.data_urls
            fields = sample.keys() if self.walk_fields is None else self.walk_fields
            for field in fields:
                value = sample.get(field)
                kind = type(value)  # only strings and containers can change: no call for the rest
                if (kind is str and data_urls and value.startswith("data:")) or kind is dict or kind is list:
                    if field in self.named:
                        continue
                    new = self._walk(value, field, i)
                    if new is not value:
                        if changed is None:
                            changed = dict(sample)
                        changed[field] = new
        return sample if changed is None else changed

    def _error(self, kind: type, field: str, text: str, i: int) -> HpcioError:
        """``kind("field 'f' on line 3 is not base64: ...")`` located at sample ``i``."""
        path, offset, place, sample = self.locate(i)
        return kind(f"field {field!r}{' ' + place if place else ''}{text}", path=path, offset=offset, sample=sample)

    def _each(self, value, field: str, decode, what: str, i: int):
        """``decode`` applied to a string or to each string of a list (None stays)."""
        if isinstance(value, str):
            return decode(value, field, i)
        if isinstance(value, (list, tuple)) and all(v is None or isinstance(v, str) for v in value):
            return [None if v is None else decode(v, field, i) for v in value]
        raise self._error(DecodeError, field, f" holds a {type(value).__name__}, not {what}", i)

    def _base64_text(self, text: str, field: str, i: int) -> bytes:
        m = _DATA_URL.match(text) if text.startswith("data:") else None
        try:
            return _b64(text[m.end():] if m else text)
        except (binascii.Error, ValueError) as exc:
            raise self._error(DecodeError, field, f" is not base64: {exc}", i) from None

    def _ref_text(self, ref: str, field: str, i: int) -> bytes:
        try:
            return self.references.resolve(ref)
        except HpcioError as exc:
            raise self._error(type(exc), field, f": {exc}", i) from None

    def _walk(self, value, field: str, i: int):
        """``value`` with data URLs and file structs decoded, copied only where changed."""
        kind = type(value)
        if kind is str:
            m = _DATA_URL.match(value) if self.data_urls else None
            if m is None:
                return value
            try:
                return _b64(value[m.end():])
            except (binascii.Error, ValueError) as exc:
                raise self._error(DecodeError, field, f" holds a data URL that is not base64: {exc}", i) from None
        if kind is dict:
            if self.file_structs and value.keys() == _FILE_STRUCT_KEYS and _is_file_struct(value):
                return self._file_struct(value, field, i)
            items = value.items()
        elif kind is list:
            items = enumerate(value)
        else:
            return value
        data_urls = self.data_urls
        changed = None
        for key, item in items:
            kind = type(item)
            if (kind is str and data_urls and item.startswith("data:")) or kind is dict or kind is list:
                new = self._walk(item, field, i)
                if new is not item:
                    if changed is None:
                        changed = value.copy()
                    changed[key] = new
        return value if changed is None else changed

    def _file_struct(self, value: dict, field: str, i: int):
        """A file struct's bytes, else the file at its path, else None."""
        data, path = value["bytes"], value["path"]
        if data is not None:
            return bytes(data)
        return None if path is None else self._ref_text(path, field, i)

    def close(self) -> None:
        self.references.close()


def _is_file_struct(value: dict) -> bool:
    """``{"bytes": bytes or None, "path": str or None}``, not just any object with those keys."""
    data, path = value["bytes"], value["path"]
    return (data is None or isinstance(data, (bytes, bytearray, memoryview))) and (path is None or isinstance(path, str))


class DecodedReader(base.Reader):
    """A source's reader whose samples come out with :class:`FieldDecoder` applied.

    Anything else (``len``, ``block_starts``, ``sample_nbytes``, ...) is the wrapped
    reader's.  A decoding error names the source file, the line (JSONL) or row
    (Parquet, Hugging Face) and the field, with the byte offset where known.
    """

    def __init__(self, reader: base.Reader, decoder: FieldDecoder):
        self.reader = reader
        self.decoder = decoder
        self.path = reader.path
        self.fields = reader.fields

    def __getattr__(self, name):
        if name == "reader":  # not set yet: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.reader, name)

    def __len__(self) -> int:
        return len(self.reader)

    def block_starts(self) -> np.ndarray | None:
        return self.reader.block_starts()

    def drop_pages(self) -> None:
        self.reader.drop_pages()

    def mean_sample_bytes(self) -> float | None:
        return self.reader.mean_sample_bytes()

    def shard_sizes(self) -> list[int] | None:
        return self.reader.shard_sizes()

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        i = self.reader.check_index(i)
        return self.decoder.decode(self.reader.read(i, fields), i)

    def read_many(self, indices, fields=None) -> list:
        indices = np.asarray(indices, dtype=np.int64)
        decode = self.decoder.decode
        return [decode(s, i) for s, i in zip(self.reader.read_many(indices, fields), indices.tolist())]

    def close(self) -> None:
        self.decoder.close()
        self.reader.close()


# --- what the decoder knows of particular readers -------------------------------------------
def _locator(reader, source_format: str, source_path: str) -> Callable[[int], Where]:
    """Where sample ``i`` of ``reader`` is: its file, byte offset, line or row."""
    if source_format == "jsonl" and hasattr(reader, "starts"):
        def on_line(i):
            start = int(reader.starts[i])
            return reader.path, start, f"on line {_newlines(reader.buf, start) + 1}", i
        return on_line
    if source_format == "parquet" and hasattr(reader, "groups"):
        def in_parquet_row(i):
            g = int(np.searchsorted(reader.cum, i, side="right")) - 1
            file_index = reader.groups[g][0]
            first = next(k for k, (fi, _rg) in enumerate(reader.groups) if fi == file_index)
            return reader.paths[file_index], None, f"in row {i - int(reader.cum[first])}", i
        return in_parquet_row
    if hasattr(reader, "file_row"):
        def in_row(i):
            path, row = reader.file_row(i)
            return path, None, f"in row {row}", i
        return in_row
    return lambda i: (source_path, None, None, i)


def _newlines(buf, stop: int, step: int = 64 << 20) -> int:
    """Newlines in ``buf[:stop]``, counted a bounded piece at a time (a line number for
    an error message must not copy a file of many GB)."""
    return sum(bytes(buf[a:min(a + step, stop)]).count(b"\n") for a in range(0, stop, step))


def _arrow_walk_fields(reader, data_urls: bool, file_structs: bool) -> frozenset | None:
    """The columns of an Arrow-backed reader that can hold a data URL (a string inside)
    or a file struct; None (every field) for other readers."""
    schema = getattr(reader, "schema", None)
    if schema is None or not type(schema).__module__.startswith("pyarrow"):
        return None
    import pyarrow as pa

    def holds(kind) -> bool:
        if data_urls and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            return True
        if pa.types.is_struct(kind):
            names = {kind.field(k).name for k in range(kind.num_fields)}
            return (file_structs and names == _FILE_STRUCT_KEYS) or any(
                holds(kind.field(k).type) for k in range(kind.num_fields))
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            return holds(kind.value_type)
        if pa.types.is_map(kind):
            return holds(kind.key_type) or holds(kind.item_type)
        return False

    return frozenset(f.name for f in schema if holds(f.type))
