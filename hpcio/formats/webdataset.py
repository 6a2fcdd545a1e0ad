"""WebDataset: samples as groups of tar members ``<key>.<field>`` in ``shard-%06d.tar``.

Writing follows the conventions the ``webdataset`` library reads: one member per field,
named ``<key>.<suffix>``, where the suffix ends with an extension saying how the bytes
decode (``.txt`` str, ``.json`` JSON, ``.cls`` int, ``.npy`` array, ``.jpg``/``.png``
image bytes as given, ``.bin`` other bytes).  Members are in a fixed order with fixed
owner and time, so equal samples give equal shard bytes.  A list of bytes takes one
member per item (``<key>.images.0.jpg``, ``<key>.images.1.jpg``, ...) and a mapping's bytes
one member per key beside the mapping's JSON, grouped back on reading
(:mod:`hpcio.formats._nested`).

Reading accepts any WebDataset-style tar.  The key of a member is its path up to the
first dot of the basename (``key_dots=0``, webdataset's ``base_plus_ext``); ``key_dots=k``
keeps ``k`` more dots in the key (``img.0001.jpg`` has key ``img.0001`` with ``key_dots=1``).
Consecutive members with the same key form a sample.  Random access goes through a member
index built by the compiled tar scanner from the headers alone; :func:`iter_tar` streams
a tar from any file object (pipes, object stores) without an index.

"Sidecar" shard sets hold other modalities of the same samples with the same keys in
the same order (for example captions next to images); ``sidecars=[...]`` merges their
fields into each sample, checking that the keys agree.
"""

from __future__ import annotations

import glob
import mmap
import os
import re
import tarfile
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from .._paths import check_relative_name, resolve_inside
from ..errors import (
    CorruptShardError,
    KeyNotFoundError,
    OptionError,
    SchemaError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from ..registry import Capabilities
from . import _nested, _values
from .tar_gzip import is_gzip_file, is_gzip_name, open_decompressed
from .base import Reader as _Reader
from .base import PendingFiles, files_bytes, inspect_report, locate, project, sample_starts, verify_samples
from .base import FileWriter

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "iter_tar", "split_name",
           "member_suffix", "member_field", "decode_member", "list_shards", "merge_index", "inspect", "verify"]

NAME = "webdataset"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)

SHARD_PATTERN = "shard-%06d.tar"
# A fixed modification time (2020-01-01) keeps shards byte-identical across runs.
FIXED_MTIME = 1577836800

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


def list_shards(path) -> list[str]:
    """The tar files of ``path``: a directory, one file, a glob pattern, or a list."""
    if isinstance(path, (list, tuple)):
        return [os.fspath(p) for p in path]
    path = os.fspath(path)
    if os.path.isdir(path):
        return sorted(os.path.join(path, n) for n in os.listdir(path) if _is_shard_name(n))
    if os.path.exists(path):
        return [path]
    matches = sorted(glob.glob(path))
    if not matches:
        raise ShardNotFoundError("no WebDataset shards found", path=path)
    return matches


def _is_shard_name(name: str) -> bool:
    return name.endswith(".tar") or is_gzip_name(name)


def sniff(path) -> bool:
    path = os.fspath(path)
    if os.path.isdir(path):
        return any(_is_shard_name(n) for n in os.listdir(path))
    if not os.path.isfile(path):
        return False
    if is_gzip_name(path):
        return is_gzip_file(path)
    with open(path, "rb") as f:
        block = f.read(512)
    # ustar/GNU magic at 257: both the POSIX and the GNU spelling start with "ustar"
    return len(block) == 512 and block[257:262] == b"ustar"


# --- reading ---------------------------------------------------------------------------
class _Shard:
    """The member index of one tar file, grouped into samples."""

    def __init__(self, path: str, key_dots: int, cache_dir: str | None = None):
        from .._core import _io, _tar

        self.path = path
        try:
            self.file = open(path, "rb")
            if self.file.read(2) == b"\x1f\x8b":
                self.file.close()
                self.file = open_decompressed(path, cache_dir)
        except FileNotFoundError:
            raise ShardNotFoundError("WebDataset shard is missing", path=path) from None
        size = os.fstat(self.file.fileno()).st_size
        self.map = _io.map_file(self.file.fileno()) if size else b""
        self.fd, self.mapped_size, self._check_mapped_size = self.file.fileno(), size, _io.check_mapped_size
        names, header_offsets, data_offsets, sizes, _end, error = _tar.scan(
            memoryview(self.map), path=path, partial=True)
        keys, suffixes, starts = [], [], []
        kept = []
        last = None
        seen: set = set()
        for m, raw in enumerate(names):
            key, suffix = _member_key(raw, key_dots, path=path, offset=int(header_offsets[m]))
            if key is None:
                continue
            if key != last:
                starts.append(len(kept))
                keys.append(key)
                last = key
                seen = set()
            if suffix in seen:
                # webdataset refuses a sample with the same member twice: keeping either
                # copy would silently drop the other
                raise CorruptShardError(
                    f"sample {key!r} has the member {suffix!r} twice", path=path,
                    offset=int(header_offsets[m]), sample=len(keys) - 1)
            seen.add(suffix)
            kept.append(m)
            suffixes.append(suffix)
        if error is not None:
            # members before the damage may end a sample early: that sample is damaged too
            bad_sample = max(len(keys) - 1, 0) if names else 0
            raise type(error)(str(error).rsplit(" (", 1)[0], path=path, offset=error.offset,
                              sample=bad_sample)
        kept = np.asarray(kept, dtype=np.int64)
        self.headers = len(names)  # the scanner compared each header's checksum
        self.keys = keys
        self.suffixes = suffixes
        self.data_offsets = data_offsets[kept] if len(kept) else np.zeros(0, np.uint64)
        self.sizes = sizes[kept] if len(kept) else np.zeros(0, np.uint64)
        self.sample_starts = np.asarray(starts + [len(kept)], dtype=np.int64)

    def __len__(self):
        return len(self.keys)

    def members(self, j: int) -> range:
        return range(int(self.sample_starts[j]), int(self.sample_starts[j + 1]))

    def check_size(self) -> None:
        """Raise ShardChangedError if the tar file shrank since it was mapped: reading the
        lost part of the mapping would kill the process (SIGBUS)."""
        if self.mapped_size:
            self._check_mapped_size(self.fd, self.mapped_size, self.path)

    def data(self, m: int):
        a = int(self.data_offsets[m])
        return self.map[a : a + int(self.sizes[m])]

    def close(self):
        if isinstance(self.map, mmap.mmap):
            self.map.close()
        self.file.close()


class Reader(_Reader):
    """Random-access reader of a WebDataset shard set (a directory, file, glob or list).

    Parameters
    ----------
    key_dots
        Dots of the basename kept in the key (0: webdataset's default grouping).
    decode
        Decode ``.txt``/``.json``/``.cls``/``.npy`` members and strip their extensions
        from the field names (the default); False gives raw bytes under the full suffix.
    sidecars
        Other shard sets with the same keys in the same order, merged field-wise.
    include_key
        Add the sample key as ``__key__``.
    cache_dir
        Where gzip-compressed shards (``.tar.gz``, ``.tgz``) are kept decompressed for
        later readers; without it each is decompressed into an anonymous temporary file
        (under ``TMPDIR``) for the reader's lifetime.
    """

    def __init__(self, path, key_dots: int = 0, decode: bool = True,
                 sidecars: Sequence | None = None, include_key: bool = False,
                 cache_dir=None, **options):
        self.path = os.fspath(path) if not isinstance(path, (list, tuple)) else str(path[0])
        self.key_dots = key_dots
        self.decode = decode
        self.include_key = include_key
        self.shards: list[_Shard] = []
        try:
            for p in list_shards(path):
                self.shards.append(_Shard(p, key_dots, cache_dir))
        except BaseException:
            self.close()
            raise
        self.cum = sample_starts([len(s) for s in self.shards])
        self.sidecars = [Reader(p, key_dots=key_dots, decode=decode) for p in (sidecars or [])]
        for side in self.sidecars:
            if len(side) != len(self):
                raise CorruptShardError(
                    f"sidecar has {len(side)} samples, the main shard set {len(self)}",
                    path=side.path)

    def __len__(self) -> int:
        return int(self.cum[-1])

    def _locate(self, i: int) -> tuple[_Shard, int]:
        s, j = locate(self.cum, i)
        return self.shards[int(s)], int(j)

    def key(self, i: int) -> str:
        shard, j = self._locate(self.check_index(i))
        return shard.keys[j]

    def _sample(self, shard: _Shard, j: int, i: int, fields) -> dict:
        out = {"__key__": shard.keys[j]} if self.include_key else {}
        shard.check_size()
        for m in shard.members(j):
            suffix = shard.suffixes[m]
            if fields is not None and not self.decode and suffix not in fields:
                continue
            name, value = decode_member(suffix, shard.data(m), self.decode, path=shard.path, sample=i)
            # the items of a list and a mapping's bytes are named <field>.<...>
            if fields is None or name in fields or name.split(".", 1)[0] in fields or name.rpartition(".")[0] in fields:
                out[name] = value
        if self.decode:
            out = _nested.group_fields(out)
        for side in self.sidecars:
            sshard, sj = side._locate(i)
            if sshard.keys[sj] != shard.keys[j]:
                raise CorruptShardError(
                    f"sidecar key {sshard.keys[sj]!r} does not match key {shard.keys[j]!r}",
                    path=sshard.path, sample=i)
            extra = side._sample(sshard, sj, i, fields)
            extra.pop("__key__", None)
            out.update(extra)
        if fields is not None:
            missing = [f for f in fields if f not in out]
            if missing:
                raise KeyNotFoundError(f"sample {i} of {shard.path} has no field {missing[0]!r}")
            return project(out, fields)
        return out

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        i = self.check_index(i)
        shard, j = self._locate(i)
        return self._sample(shard, j, i, fields)

    def read_many(self, indices, fields=None) -> list:
        indices = np.asarray(indices, dtype=np.int64)
        shards, local = locate(self.cum, indices)
        return [self._sample(self.shards[s], int(j), int(i), fields)
                for s, j, i in zip(shards.tolist(), local.tolist(), indices.tolist())]

    def iter_range(self, start=0, stop=None, fields=None) -> Iterator[Mapping]:
        stop = len(self) if stop is None else stop
        for i in range(start, stop):
            shard, j = self._locate(i)
            yield self._sample(shard, j, i, fields)

    def close(self) -> None:
        for s in self.shards:
            s.close()
        self.shards = []
        for side in getattr(self, "sidecars", []):
            side.close()


def iter_tar(fileobj, key_dots: int = 0, decode: bool = True, path=None,
             include_key: bool = True) -> Iterator[dict]:
    """Stream the samples of a tar from a readable file object, without an index.

    Headers are checked as they come (checksum, truncation), so a damaged stream fails
    at the damaged member with its byte offset and sample number.
    """
    from .._core import _tar

    offset = 0
    sample: dict | None = None
    key = None
    count = 0
    long_name = pax_path = None

    def read_exact(n):
        data = fileobj.read(n)
        if len(data) != n:
            raise TruncatedShardError(
                f"tar data truncated: expected {n} bytes, got {len(data)}",
                path=path, offset=offset, sample=count)
        return data

    while True:
        block = fileobj.read(512)
        if len(block) == 0:
            raise TruncatedShardError("tar archive ends without its end-of-archive blocks",
                                      path=path, offset=offset, sample=count)
        if len(block) < 512:
            raise TruncatedShardError(
                f"tar header truncated: expected 512 bytes, got {len(block)}",
                path=path, offset=offset, sample=count)
        try:
            header = _tar.parse_header(block, offset, path=path)
        except CorruptShardError as exc:
            raise type(exc)(str(exc).rsplit(" (", 1)[0], path=path, offset=offset, sample=count) from None
        if header is None:
            break
        name, size, typeflag = header
        data = read_exact(size)
        pad = -size % 512
        if pad:
            read_exact(pad)
        here = offset
        offset += 512 + size + pad
        if typeflag == "L":
            long_name = data.rstrip(b"\0")
            continue
        if typeflag == "x":
            for rec in data.decode("utf-8", "surrogateescape").split("\n"):
                kv = rec.split(" ", 1)[-1]
                if kv.startswith("path="):
                    pax_path = kv[5:].encode("utf-8", "surrogateescape")
            continue
        if typeflag not in ("0", "7"):
            long_name = pax_path = None
            continue
        name = pax_path or long_name or name
        long_name = pax_path = None
        k, suffix = _member_key(name, key_dots, path=path, offset=here)
        if k is None:
            continue
        if k != key:
            if sample is not None:
                yield _nested.group_fields(sample) if decode else sample
                count += 1
            key = k
            sample = {"__key__": k} if include_key else {}
        field, value = decode_member(suffix, data, decode, path=path, sample=count)
        if field in sample:
            raise CorruptShardError(f"duplicate field {field!r} in sample {k!r}",
                                    path=path, offset=here, sample=count)
        sample[field] = value
    if sample is not None:
        yield _nested.group_fields(sample) if decode else sample


# --- writing ---------------------------------------------------------------------------
class Writer(FileWriter):
    """Writes samples into ``path/shard-%06d.tar`` with count and size rollover.

    Parameters
    ----------
    max_count
        Samples per shard before a new shard starts.
    max_size
        Bytes per shard (data and headers) before a new shard starts; a single sample
        larger than this gets a shard of its own.
    pattern
        Shard file name pattern (``%d`` style), e.g. ``"rank0003-%06d.tar"`` so parallel
        writers never collide.
    start_shard
        Number of the first shard.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.base`): every sample goes into the
        single shard ``shard-<shard_id>.tar`` (no roll-over); :meth:`index_part` then
        describes it for :func:`merge_index`.

    A sample's key is its ``__key__`` field when present, else its position
    (``%09d``; under the hook ``<shard_id>-<position>``, so keys stay unique over the
    dataset).  Keys must be unique, non-empty and free of dots (a dot would split the
    key for every reader); fields are written sorted by name.
    """

    def __init__(self, path, max_count: int = 10_000, max_size: int = 1 << 30,
                 pattern: str = SHARD_PATTERN, start_shard: int = 0,
                 shard_id: int | None = None, num_shards: int | None = None, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unknown WebDataset writer options: {', '.join(options)}")
        self.shard_id = shard_id
        if shard_id is not None:
            max_count, max_size, start_shard = float("inf"), float("inf"), shard_id
        self.max_count = max_count
        self.max_size = max_size
        self.pattern = pattern
        self.shard_number = start_shard
        self.pending = PendingFiles(self.path)
        self.file = None
        self.shard_count = 0
        self.shard_size = 0
        self.last_key = None
        self.shard_names: list[str] = []

    def _open_shard(self):
        final = os.path.join(self.path, self.pattern % self.shard_number)
        self.shard_number += 1
        self.shard_names.append(os.path.basename(final))
        self.file = open(self.pending.add(final), "wb")
        self.shard_count = 0
        self.shard_size = 0

    def _finish_shard(self):
        # two zero blocks end the archive; pad to tar's 10 KiB record like tarfile does
        end = 1024
        total = self.shard_size + end
        end += -total % tarfile.RECORDSIZE
        self.file.write(b"\0" * end)
        self.close_file()

    def _header(self, name: str, size: int) -> bytes:
        info = tarfile.TarInfo(name)
        info.size = size
        info.mtime = FIXED_MTIME
        info.mode = 0o444
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")

    def write(self, sample: Mapping) -> None:
        index = self.count
        key = sample.get("__key__")
        if key is None:
            key = f"{index:09d}" if self.shard_id is None else f"{self.shard_id:06d}-{index:09d}"
        key = check_relative_name(str(key), what="sample key", source=self.path, sample=index)
        base = key.rsplit("/", 1)[-1]
        if not base or "." in base:
            raise UnsupportedValueError(
                f"sample key {key!r} must be non-empty and contain no '.'", path=self.path, sample=index)
        if key == self.last_key:
            raise SchemaError(f"sample key {key!r} repeats the previous sample's key",
                              path=self.path, sample=index)
        members = []
        for field, value in _nested.split_fields(sample, sample_index=index, path=self.path):
            suffix, data = member_suffix(field, value, sample=index, path=self.path)
            name = f"{key}.{suffix}"
            members.append((self._header(name, len(data)), data))
        size = sum(len(h) + len(d) + (-len(d) % 512) for h, d in members)
        if self.file is not None and (self.shard_count >= self.max_count
                                      or (self.shard_count and self.shard_size + size > self.max_size)):
            self._finish_shard()
        if self.file is None:
            self._open_shard()
        for header, data in members:
            self.file.write(header)
            self.file.write(data)
            pad = -len(data) % 512
            if pad:
                self.file.write(b"\0" * pad)
        self.shard_size += size
        self.shard_count += 1
        self.last_key = key
        self.count += 1

    def close(self) -> None:
        with self.aborting():
            if self.file is not None:
                self._finish_shard()
            self.pending.publish()

    def index_part(self) -> dict | None:
        """The shard written under the sharded-writing hook (file name and sample count);
        None when no sample was written (the shard has no file)."""
        if not self.shard_names:
            return None
        return {"file": self.shard_names[0], "samples": self.count}


def merge_index(directory, parts, **options) -> None:
    """The sharded-writing hook's last step: WebDataset has no dataset index (readers
    list the ``.tar`` files), so this only checks that every shard a part names exists.
    Shards that received no sample (None) have no file."""
    directory = os.fspath(directory)
    for part in parts:
        if part is None:
            continue
        path = resolve_inside(directory, part["file"], what="WebDataset shard name", source=directory)
        if not os.path.isfile(path):
            raise ShardNotFoundError("WebDataset shard named by an index part is missing", path=path)


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> dict:
    """Samples, shards and fields of a WebDataset shard set (``fields`` maps each field of
    the first sample to the extension of its member; ``jpg[]`` for a list of members)."""
    with Reader(path) as r:
        fields = {}
        first = next((s for s in r.shards if len(s)), None)
        if first is not None:
            for m in first.members(0):
                suffix = first.suffixes[m]
                field, kind = member_field(suffix)
                ext = suffix.rpartition(".")[2].lower() if kind else None
                head, _, last = field.rpartition(".")
                if head and last.isdigit() and head not in fields:  # a list item: "jpg[]"
                    fields[head] = f"{ext}[]"
                elif not (head and last.isdigit() and fields.get(head) == f"{ext}[]"):
                    fields[field] = ext
        return inspect_report(NAME, path, samples=len(r), shards=len(r.shards), fields=fields,
                              stored_bytes=files_bytes(s.path for s in r.shards),
                              details={"members": sum(len(s.suffixes) for s in r.shards)})


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> dict:
    """Decode every member of every sample; ``hashes_checked`` counts the tar header
    checksums compared (a damaged header ends the check of the dataset)."""
    headers = []

    def open_reader():
        reader = Reader(path)
        headers.append(sum(s.headers for s in reader.shards))
        return reader

    report = verify_samples(NAME, path, open_reader, list_shards, max_errors=max_errors)
    report["hashes_checked"] = sum(headers)
    return report
