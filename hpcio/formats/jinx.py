"""JINX: JSON lines with an index footer and a BINX sidecar, byte-compatible with mldataforge.

A JINX file is one compact JSON object per sample, then a footer line (JSON: the
offset index and the writer's settings), then the footer's byte offset in decimal.
Binary values are stored inline, base-encoded (``a85``, ``b64``, ``hex``), or in the
``.binx`` sidecar; each stored key carries its type and codec as suffixes
(``text.str.zst``, ``img.raw.bin``).  The byte layout is in ``docs/formats/jinx.md``.

The reader maps the file, finds the footer and decodes the index in C (no temporary
files), and returns **lazy samples**: a :class:`JinxSample` decodes a value (sidecar
read, base decoding, decompression) only when it is accessed, so touching small
metadata fields costs one ``orjson.loads`` per sample.

>>> import hpcio, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "toy.jinx")
>>> with hpcio.open_writer(path, format="jinx") as w:
...     w.write({"id": 0, "blob": b"\\x00\\x01", "text": "hello"})
>>> s = hpcio.open(path)[0]
>>> list(s), bytes(s["blob"])
(['id', 'blob', 'text'], b'\\x00\\x01')
"""

from __future__ import annotations

import binascii
import bisect
import io
import math
import os
import warnings
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import orjson

from .. import codecs as _codecs_table
from .._core import _codecs as _zstd_kernels
from .._core import _io, _jinx
from .._core._records import loads_exact
from ..errors import (
    CorruptShardError,
    DecodeError,
    HpcioError,
    MissingDependencyError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from ..registry import Capabilities
from . import base

__all__ = [
    "NAME",
    "CAPABILITIES",
    "COMPRESSIONS",
    "ENCODINGS",
    "sniff",
    "Reader",
    "Writer",
    "merge_index",
    "JinxSample",
    "join",
    "split",
    "inspect",
    "verify",
]

NAME = "jinx"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)

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
_COMPRESSION_ALIASES = {"zstd": "zst", "gzip": "gz", "brotli": "br", "none": None}
#: zstd at level 1 without the content size, exactly mldataforge's stream_writer frames.
_ZSTD_LEVEL = 1
ENCODINGS = ("a85", "b64", "hex")
#: numpy scalar types mldataforge reads back (float16 and bool_ it cannot).
NUMPY_SCALARS = frozenset(
    ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]
)
_TYPE_EXTS = frozenset(["raw", "str", "npy", "pt", "np"]) | NUMPY_SCALARS
_SHARD_GLOB = "shard-*.jinx"
_SHARD_TEMPLATE = "shard-{:05d}.jinx"
_MISSING = object()


def _canonical_compression(name):
    if name is None:
        return None
    name = _COMPRESSION_ALIASES.get(name, name)
    if name is not None and name not in COMPRESSIONS:
        raise ValueError(
            f"unknown JINX compression {name!r}; use one of {', '.join(COMPRESSIONS)} "
            "(or zstd, gzip, brotli)"
        )
    return name


def _compress(ext: str, data: bytes) -> bytes:
    codec = _codecs_table.get_codec(COMPRESSIONS[ext])
    if ext == "zst":
        return codec.compress(data, _ZSTD_LEVEL, content_size=False)
    return codec.compress(data)


def _decompress(ext: str, data, limit: int, path=None, offset=None, sample=None) -> bytes:
    if ext == "zst":  # the hot path: straight to the kernel (frames without content size)
        return _zstd_kernels.zstd_decompress(
            data, limit, path=path, offset=-1 if offset is None else offset,
            sample=-1 if sample is None else sample,
        )
    return _codecs_table.get_codec(COMPRESSIONS[ext]).decompress(
        data, limit, path=path, offset=offset, sample=sample
    )


def sidecar_path(path) -> str:
    """The ``.binx`` sidecar of a JINX file: ``Path(path).with_suffix(".binx")``."""
    return str(Path(path).with_suffix(".binx"))


# ======================================================================================
# Reading
# ======================================================================================
class _Shard:
    """One mapped JINX file: footer, offset table, sidecar and per-key decode plans."""

    def __init__(self, path: str, encoding: str | None = None, limit: int = _codecs_table.DEFAULT_LIMIT):
        self.path = path
        self.limit = limit
        self._file = self._mm = self._binx_file = self._binx_mm = self._binx = None
        try:
            self._open(encoding)
        except BaseException:
            self.close()
            raise

    def _open(self, encoding):
        path = self.path
        try:
            self._file = open(path, "rb")
        except FileNotFoundError:
            raise ShardNotFoundError("JINX file not found", path=path) from None
        size = os.fstat(self._file.fileno()).st_size
        if size == 0:
            raise TruncatedShardError("empty file: no JINX offset line", path=path, offset=0)
        self._mm = _io.map_file(self._file.fileno())
        self._file.close()  # the map holds its own descriptor
        self.buf = memoryview(self._mm)
        self.size = size
        fo, fe = _jinx.locate_footer(self.buf, path=path)
        try:
            footer = orjson.loads(self.buf[fo:fe])
        except orjson.JSONDecodeError as exc:
            raise CorruptShardError(f"garbled JINX footer: {exc}", path=path, offset=fo) from None
        if not isinstance(footer, dict) or not isinstance(footer.get("num_samples"), int):
            raise CorruptShardError(
                "garbled JINX footer: expected a JSON object with an integer num_samples",
                path=path,
                offset=fo,
            )
        self.footer = footer
        self.footer_offset = fo
        self.num_samples = n = footer["num_samples"]
        self.ext_sep = footer.get("ext_sep", ".")
        self.encoding = footer.get("encoding", encoding or "a85")
        if self.encoding not in ENCODINGS:
            raise CorruptShardError(
                f"unknown JINX encoding {self.encoding!r}; expected one of {', '.join(ENCODINGS)}",
                path=path,
                offset=fo,
            )
        self.enc_code = ENCODINGS.index(self.encoding)
        self.binx_path = sidecar_path(path)
        self.plans: dict[str, tuple] = {}
        self.keymaps: dict[tuple, dict] = {}
        table = self._load_index(footer, n, fo)
        self.index = np.frombuffer(table, dtype="<u8")
        self.offsets = memoryview(table).cast("B").cast("Q")

    # --- index --------------------------------------------------------------------------
    def _load_index(self, footer, n, fo):
        key = next((k for k in footer if k.startswith("index" + self.ext_sep)), None)
        if key is None:
            raise CorruptShardError("JINX footer has no index.* entry", path=self.path, offset=fo)
        exts = key.split(self.ext_sep)[1:]
        value = footer[key]
        if exts[-1] == "bin":
            table = self._sidecar_view(value, key, -1, fo)
            exts = exts[:-1]
        elif isinstance(value, str):
            table = _jinx.decode(value, self.enc_code, path=self.path, offset=fo, what=key)
        else:
            raise CorruptShardError(f"JINX footer {key!r} is not a string", path=self.path, offset=fo)
        if not exts or exts[0] != "npy" or len(exts) > 2:
            raise CorruptShardError(f"unsupported JINX index key {key!r}", path=self.path, offset=fo)
        if len(exts) == 2:
            if exts[1] not in COMPRESSIONS:
                raise CorruptShardError(
                    f"unsupported JINX index compression {exts[1]!r}", path=self.path, offset=fo
                )
            table = _decompress(exts[1], table, 8 * (n + 1), path=self.path, offset=fo)
        if len(table) != 8 * (n + 1):
            raise CorruptShardError(
                f"JINX index holds {len(table)} bytes, expected {8 * (n + 1)} "
                f"(8 x (num_samples {n} + 1))",
                path=self.path,
                offset=fo,
            )
        idx = np.frombuffer(table, dtype="<u8")
        if idx[0] != 0 or idx[-1] != fo:
            raise CorruptShardError(
                f"JINX index spans bytes {int(idx[0])}..{int(idx[-1])}, expected 0..{fo} "
                "(the footer offset)",
                path=self.path,
                offset=fo,
            )
        bad = np.flatnonzero(idx[1:] <= idx[:-1])
        if bad.size:
            i = int(bad[0])
            raise CorruptShardError(
                f"JINX index entry {i + 1} ({int(idx[i + 1])}) does not follow entry {i} "
                f"({int(idx[i])})",
                path=self.path,
                offset=int(idx[i]),
                sample=i,
            )
        return table

    # --- sidecar ------------------------------------------------------------------------
    def _sidecar(self):
        if self._binx is None:
            try:
                self._binx_file = open(self.binx_path, "rb")
            except FileNotFoundError:
                raise ShardNotFoundError(
                    "JINX sidecar not found (a value is stored in it)", path=self.binx_path
                ) from None
            if os.fstat(self._binx_file.fileno()).st_size == 0:
                self._binx = memoryview(b"")
            else:
                self._binx_mm = _io.map_file(self._binx_file.fileno())
                self._binx = memoryview(self._binx_mm)
            self._binx_file.close()
        return self._binx

    def _sidecar_view(self, loc, key, sample, offset):
        try:
            start, length = loc["offset"], loc["length"]
            if not (isinstance(start, int) and isinstance(length, int)) or start < 0 or length < 0:
                raise TypeError
        except (TypeError, KeyError):
            raise CorruptShardError(
                f"value {key!r}: expected a sidecar location {{\"offset\": int, \"length\": int}}, "
                f"got {loc!r}",
                path=self.path,
                offset=offset,
                sample=sample,
            ) from None
        binx = self._sidecar()
        if start + length > len(binx):
            raise TruncatedShardError(
                f"value {key!r}: sidecar bytes [{start}, {start + length}) lie beyond its end "
                f"({len(binx)} bytes)",
                path=self.binx_path,
                offset=start,
                sample=sample,
            )
        return binx[start : start + length]

    # --- samples ------------------------------------------------------------------------
    def raw(self, i: int) -> dict:
        """Sample ``i``'s JSON object, keys still suffixed and values still encoded."""
        off = self.offsets
        a = off[i]
        try:
            obj = loads_exact(self.buf[a : off[i + 1]])
        except ValueError as exc:  # not JSON, or (decoded by Python's json) not UTF-8
            raise CorruptShardError(f"garbled JINX sample line: {exc}", path=self.path, offset=a, sample=i) from None
        if type(obj) is not dict:
            raise CorruptShardError(
                f"JINX sample line holds a {type(obj).__name__}, expected an object",
                path=self.path,
                offset=a,
                sample=i,
            )
        return obj

    def plan(self, raw_key: str) -> tuple:
        """``(logical_key, exts)`` of a stored key, cached per shard."""
        p = self.plans.get(raw_key)
        if p is None:
            parts = raw_key.split(self.ext_sep)
            p = self.plans[raw_key] = (parts[0], tuple(parts[1:]))
        return p

    def keymap(self, raw: dict) -> dict:
        """Logical key -> stored key for a sample's keys, cached per key layout."""
        layout = tuple(raw)
        km = self.keymaps.get(layout)
        if km is None:
            km = {}
            for rk in layout:
                km.setdefault(self.plan(rk)[0], rk)
            if len(self.keymaps) < 4096:  # bounded: heterogeneous files must not grow it forever
                self.keymaps[layout] = km
        return km

    def decode(self, raw_key: str, value, sample: int):
        """The Python value of stored ``raw_key: value`` (sidecar, base, codec, type)."""
        exts = self.plan(raw_key)[1]
        if not exts:
            return self.plain(value, sample)
        offset = self.offsets[sample] if sample >= 0 else None
        last = exts[-1]
        if last in NUMPY_SCALARS:
            try:
                return np.dtype(last).type(value)
            except (TypeError, ValueError) as exc:
                raise DecodeError(f"value {raw_key!r}: not a {last}: {exc}", path=self.path, offset=offset, sample=sample) from None
        if last == "bin":
            data = self._sidecar_view(value, raw_key, sample, offset)
            exts = exts[:-1]
        elif isinstance(value, str):
            data = _jinx.decode(value, self.enc_code, path=self.path, offset=offset, sample=sample, what=raw_key)
        else:
            raise DecodeError(
                f"value {raw_key!r}: expected encoded text, got {type(value).__name__}",
                path=self.path,
                offset=offset,
                sample=sample,
            )
        return self.unserialize(raw_key, data, exts, sample, offset)

    def unserialize(self, raw_key, data, exts, sample, offset):
        for ext in reversed(exts):
            if ext in COMPRESSIONS:
                data = _decompress(ext, data, self.limit, path=self.path, offset=offset, sample=sample)
                continue
            try:
                if ext == "raw":
                    return bytes(data)
                if ext == "str":
                    return str(data, "utf-8")
                if ext == "npy":
                    return _load_npy(data)
                if ext == "pt":
                    return _load_torch(data)
                if ext == "np":
                    dtype, _, buf = bytes(data).partition(b"\x00")
                    return np.frombuffer(buf, dtype=dtype.decode("ascii"))[0]
            except (ValueError, UnicodeDecodeError, TypeError, EOFError) as exc:
                raise DecodeError(f"value {raw_key!r}: cannot decode {ext}: {exc}", path=self.path, offset=offset, sample=sample) from None
            raise DecodeError(f"value {raw_key!r}: unsupported extension {ext!r}", path=self.path, offset=offset, sample=sample)
        try:
            return loads_exact(data)
        except ValueError as exc:  # not JSON, or (decoded by Python's json) not UTF-8
            raise DecodeError(f"value {raw_key!r}: not JSON: {exc}", path=self.path, offset=offset, sample=sample) from None

    def plain(self, value, sample):
        """A value stored without suffix: nested objects with encoded keys stay lazy."""
        return _jinx.plain_value(value, self.ext_sep, JinxSample, self, sample)

    def materialize(self, raw: dict, sample: int) -> dict:
        """Every value of ``raw`` decoded: the eager sample."""
        out = {}
        for rk, v in raw.items():
            logical, exts = self.plan(rk)
            if exts:
                out[logical] = self.decode(rk, v, sample)
            elif type(v) is dict:
                out[logical] = self.materialize(v, sample)
            elif type(v) is list:
                out[logical] = self._materialize_list(v, sample)
            else:
                out[logical] = v
        return out

    def _materialize_list(self, items, sample):
        return [
            self.materialize(v, sample) if type(v) is dict
            else self._materialize_list(v, sample) if type(v) is list
            else v
            for v in items
        ]

    def close(self):
        # A view still held elsewhere keeps its map alive; the map then dies with it.
        for view in (getattr(self, "offsets", None), getattr(self, "buf", None), self._binx):
            if isinstance(view, memoryview):
                try:
                    view.release()
                except BufferError:
                    pass
        for handle in (self._mm, self._binx_mm, self._file, self._binx_file):
            if handle is not None:
                try:
                    handle.close()
                except BufferError:
                    pass


_npy_headers: dict[bytes, tuple] = {}


def _load_npy(data) -> np.ndarray:
    """``np.load`` of .npy bytes, with the header parse cached by its bytes."""
    mv = memoryview(data)
    if len(mv) < 10 or bytes(mv[:6]) != b"\x93NUMPY":
        raise ValueError("not a .npy value (bad magic)")
    major = mv[6]
    if major == 1:
        hlen = 10 + int.from_bytes(mv[8:10], "little")
    else:
        hlen = 12 + int.from_bytes(mv[8:12], "little")
    header = bytes(mv[:hlen])
    parsed = _npy_headers.get(header)
    if parsed is None:
        fp = io.BytesIO(header)
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        if dtype.hasobject:
            raise ValueError(".npy value holds Python objects (pickles are refused)")
        parsed = (shape, fortran, dtype, int(np.prod(shape, dtype=np.int64)))
        if len(_npy_headers) < 1024:
            _npy_headers[header] = parsed
    shape, fortran, dtype, count = parsed
    if len(mv) - hlen < count * dtype.itemsize:
        raise ValueError(f".npy value is truncated: {len(mv) - hlen} data bytes for {count} x {dtype}")
    arr = np.frombuffer(mv, dtype=dtype, count=count, offset=hlen).copy()
    return arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)


def _load_torch(data):
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("a .pt value needs torch: pip install torch") from None
    return torch.load(io.BytesIO(bytes(data)), weights_only=True)


class JinxSample(_jinx.LazySample, Mapping):
    """A lazy JINX sample: values are decoded when accessed, keys keep file order.

    Unlike mldataforge's ``LazyDict``, iteration gives the logical keys in the order
    they were written, and a decoded value is cached without changing the stored object,
    which :func:`join` copies without decoding.  Lists and objects with nothing to decode
    are returned as parsed, as a dict returns its values; once such a value (or a decoded
    array or JSON container) has been handed out, writers encode the sample as it now
    reads instead of copying it.  Item access, ``keys``, ``in``, iteration and ``len``
    are compiled (``hpcio._core._jinx.LazySample``); ``get``, ``items``, ``values`` and
    ``==`` are the Mapping ones.
    """

    __slots__ = ()

    def raw_items(self):
        """``(stored key, stored value)`` pairs, still suffixed and encoded."""
        return self._raw.items()

    @property
    def sample_index(self) -> int:
        """The sample's position in its JINX file."""
        return self._sample

    def materialize(self) -> dict:
        """A plain dict with every value decoded (nested objects too)."""
        return self._shard.materialize(self._raw, self._sample)

    def __repr__(self):
        return f"JinxSample({self._raw!r})"


# Lazy samples are built a run of lines at a time, in one compiled call.  Short runs:
# the samples of a run are alive together, and with 256 a fresh process spent more time
# growing its heap than a run of 16 spends in calls (vlm metadata pass 6.1 ms vs 4.8 ms).
_RUN = 16


def _shard_paths(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(str(p) for p in Path(path).glob(_SHARD_GLOB))
        if not files:
            raise ShardNotFoundError(f"no {_SHARD_GLOB} files in the directory", path=path)
        return files
    if not os.path.exists(path):
        raise ShardNotFoundError("no such JINX file or directory", path=path)
    return [path]


class Reader(base.Reader):
    """A JINX file or a directory of ``shard-*.jinx`` files.

    Parameters
    ----------
    path
        A ``.jinx`` file or a directory holding ``shard-NNNNN.jinx`` files.
    lazy
        True (default): samples are :class:`JinxSample` mappings that decode values on
        access.  False: plain dicts, every value decoded.
    split
        Keep only shards whose footer ``split`` equals this (as mldataforge does).
    encoding
        Encoding assumed for files whose footer does not name one (default a85).
    limit
        Largest decompressed size accepted for one value (bytes).
    """

    def __init__(self, path, lazy: bool = True, split: str | None = None,
                 encoding: str | None = None, limit: int = _codecs_table.DEFAULT_LIMIT):
        super().__init__(path)
        self.lazy = lazy
        self.shards: list[_Shard] = []
        try:
            for p in _shard_paths(self.path):
                shard = _Shard(p, encoding=encoding, limit=limit)
                if split is not None and shard.footer.get("split") != split:
                    shard.close()
                    continue
                self.shards.append(shard)
        except BaseException:
            for s in self.shards:
                s.close()
            raise
        counts = [s.num_samples for s in self.shards]
        self.cum = np.concatenate([[0], np.cumsum(counts, dtype=np.uint64)]).astype(np.uint64)
        self._starts = [int(c) for c in self.cum[:-1]]
        self._n = int(self.cum[-1])

    def __len__(self) -> int:
        return self._n

    def mean_sample_bytes(self) -> float | None:
        if not self._n:
            return None
        sidecars = sum(os.path.getsize(s.binx_path) for s in self.shards if os.path.isfile(s.binx_path))
        return (sum(s.size for s in self.shards) + sidecars) / self._n

    def _locate(self, i: int):
        k = bisect.bisect_right(self._starts, i) - 1
        return self.shards[k], i - self._starts[k]

    def _sample(self, shard: _Shard, local: int, fields):
        raw = shard.raw(local)
        if fields is not None:
            raw = _jinx.project(raw, shard, fields)
        return JinxSample(raw, shard, local) if self.lazy else shard.materialize(raw, local)

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        if len(self.shards) == 1:
            return self._sample(self.shards[0], i, fields)
        shard, local = self._locate(i)
        return self._sample(shard, local, fields)

    def read_many(self, indices, fields=None) -> list:
        if len(self.shards) == 1:
            shard = self.shards[0]
            if self.lazy:
                return _jinx.lazy_gather(shard, JinxSample, np.asarray(indices).tolist(), fields)
            return [self._sample(shard, i, fields) for i in np.asarray(indices).tolist()]
        idx = np.asarray(indices, dtype=np.int64)
        which = np.searchsorted(self.cum, idx, side="right") - 1
        local = idx - self.cum[which].astype(np.int64)
        shards = self.shards
        return [self._sample(shards[k], j, fields) for k, j in zip(which.tolist(), local.tolist())]

    def iter_many(self, indices, fields=None):
        samples = self.read_many(indices, fields)
        return base.handed_out(samples) if self.lazy else iter(samples)

    def iter_range(self, start=0, stop=None, fields=None):
        stop = self._n if stop is None else stop
        sample = self._sample
        for shard, lo in zip(self.shards, self._starts):
            a, b = max(start - lo, 0), min(stop - lo, shard.num_samples)
            if self.lazy:
                while a < b:
                    run = _jinx.lazy_run(shard, JinxSample, a, min(a + _RUN, b), fields)
                    a += len(run)
                    yield from base.handed_out(run)
            else:
                for j in range(a, b):
                    yield sample(shard, j, fields)

    def read_field(self, indices, field: str) -> list:
        """One field of many samples; zstd values in the sidecar are decoded in one
        GIL-free batch per shard (``zstd_decode_many``), everything else as accessed."""
        samples = self._lazy_many(indices)
        out = [None] * len(samples)
        batches: dict[_Shard, list] = {}
        for j, s in enumerate(samples):
            raw, shard = s._raw, s._shard
            v = raw.get(field, _MISSING)
            if v is _MISSING:
                rk = shard.keymap(raw).get(field)
                exts = shard.plan(rk)[1] if rk is not None else ()
                if len(exts) == 3 and exts[1] == "zst" and exts[2] == "bin" and type(raw[rk]) is dict:
                    batches.setdefault(shard, []).append((j, rk, raw[rk], s._sample))
                    continue
            out[j] = s[field]
        for shard, items in batches.items():
            self._decode_batch(shard, items, out)
        return out

    @staticmethod
    def _decode_batch(shard: _Shard, items: list, out: list) -> None:
        binx = shard._sidecar()
        try:
            starts = np.fromiter((loc["offset"] for _, _, loc, _ in items), np.uint64, len(items))
            ends = starts + np.fromiter((loc["length"] for _, _, loc, _ in items), np.uint64, len(items))
        except (KeyError, TypeError, ValueError, OverflowError):
            starts = None
        if starts is None or (len(ends) and int(ends.max()) > len(binx)) or bool((ends < starts).any()):
            for j, rk, loc, i in items:  # the per-value path names the bad one
                out[j] = shard.decode(rk, loc, i)
            return
        data, pos = _zstd_kernels.zstd_decode_many(binx, starts, ends, shard.limit, path=shard.binx_path)
        view = memoryview(data)
        for (j, rk, _, i), a, b in zip(items, pos[:-1].tolist(), pos[1:].tolist()):
            out[j] = shard.unserialize(rk, view[a:b], shard.plan(rk)[1][:1], i, shard.offsets[i])

    def _lazy_many(self, indices):
        if self.lazy:
            return self.read_many(indices, None)
        lazy, self.lazy = self.lazy, True
        try:
            return self.read_many(indices, None)
        finally:
            self.lazy = lazy

    def close(self) -> None:
        """Drop the reader's maps.  Lazy samples already returned keep their shard
        alive and stay readable; its maps close when the last of them is gone."""
        self.shards = []


def sniff(path) -> bool:
    """True for a JINX file (ends with a decimal offset line pointing at an
    ``{"index.`` footer) or a directory of ``shard-*.jinx`` files."""
    path = os.fspath(path)
    if os.path.isdir(path):
        files = sorted(Path(path).glob(_SHARD_GLOB))
        return bool(files) and _sniff_file(str(files[0]))
    return os.path.isfile(path) and _sniff_file(path)


def _sniff_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < 4:
                return False
            f.seek(max(0, size - 24))
            tail = f.read()
            if not tail.endswith(b"\n"):
                return False
            last = tail[:-1].rsplit(b"\n", 1)
            if len(last) != 2 or not last[1].isdigit():
                return False
            fo = int(last[1])
            if fo >= size:
                return False
            f.seek(fo)
            return f.read(8) == b'{"index.'
    except OSError:
        return False


# ======================================================================================
# Writing
# ======================================================================================
class _ShardWriter:
    """Writes one JINX file (and its sidecar) under temporary names."""

    def __init__(self, path: str, options: "_Options"):
        self.path = path
        self.opts = options
        self.binx_path = sidecar_path(path)
        self.tmp_path = _tmp_name(path)
        self.tmp_binx = _tmp_name(self.binx_path)
        self.file = open(self.tmp_path, "wb", buffering=1 << 20)
        self.offsets = array("Q", [0])
        self.current = 0
        self.bin = None

    @property
    def num_samples(self) -> int:
        return len(self.offsets) - 1

    def store_bin(self, data) -> dict:
        if self.bin is None:
            self.bin = open(self.tmp_binx, "wb", buffering=1 << 20)
        offset = self.bin.tell()
        self.bin.write(data)
        return {"offset": offset, "length": len(data)}

    def write_line(self, line: bytes) -> None:
        self.file.write(line)
        self.file.write(b"\n")
        self.current += len(line) + 1
        self.offsets.append(self.current)

    def close(self, shard_id: int, shard_prev=None, shard_next=None, split=None) -> None:
        o = self.opts
        data = self.offsets.tobytes()
        if o.binary_threshold is not None and len(data) > o.binary_threshold:
            index, ext = self.store_bin(data), "npy.bin"
        else:
            index, ext = None, "npy"
            if o.index_compression is not None and len(data) >= o.compress_threshold:
                c = _compress(o.index_compression, data)
                if len(c) <= o.compress_ratio * len(data):
                    index, ext = o.encode(c), f"npy.{o.index_compression}"
            if index is None:
                index = o.encode(data)
            if o.encoding == "hex":
                warnings.warn(
                    f"JINX encoding 'hex': mldataforge cannot read the index of {self.path} "
                    "(hpcio can); use a85 or b64, or a binary_threshold below the index "
                    "size, for files mldataforge must read",
                    UserWarning,
                    stacklevel=4,
                )
        footer = {
            f"index.{ext}": index,
            "num_samples": self.num_samples,
            "shard_id": shard_id,
            "version": "1.0",
            "encoding": o.encoding,
            "binary_threshold": o.binary_threshold,
            "compression": o.compression,
            "index_compression": o.index_compression,
            "compress_threshold": o.compress_threshold,
            "compress_ratio": o.compress_ratio,
            "ext_sep": o.ext_sep,
        }
        if shard_prev:
            footer["shard_prev"] = shard_prev
        if shard_next:
            footer["shard_next"] = shard_next
        if split:
            footer["split"] = split
        self.file.write(orjson.dumps(footer))
        self.file.write(f"\n{self.current}\n".encode())
        self.file.close()
        if self.bin is not None:
            self.bin.close()

    def publish(self) -> None:
        # the sidecar first: a visible .jinx always finds the values it points to
        if self.bin is not None:
            os.replace(self.tmp_binx, self.binx_path)
        os.replace(self.tmp_path, self.path)

    def discard(self) -> None:
        for handle in (self.file, self.bin):
            if handle is not None:
                handle.close()
        for p in (self.tmp_path, self.tmp_binx):
            if os.path.exists(p):
                os.remove(p)


def _tmp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{os.getpid()}")


class _Options:
    """The writer settings and the value encoding rules that depend on them."""

    def __init__(self, compression, index_compression, compress_threshold, compress_ratio,
                 encoding, binary_threshold, ext_sep):
        self.compression = _canonical_compression(compression)
        self.index_compression = _canonical_compression(index_compression)
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown JINX encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
        if not isinstance(ext_sep, str) or not ext_sep:
            raise ValueError(f"ext_sep must be a non-empty string, got {ext_sep!r}")
        self.compress_threshold = compress_threshold
        self.compress_ratio = compress_ratio
        self.encoding = encoding
        self.binary_threshold = binary_threshold
        self.ext_sep = ext_sep
        inf = math.inf
        self.short_limit = min(
            compress_threshold if self.compression is not None else inf,
            binary_threshold if binary_threshold is not None else inf,
        )
        if encoding == "a85":
            self._encode = _jinx.a85encode
        elif encoding == "b64":
            self._encode = lambda b: binascii.b2a_base64(b, newline=False).decode("ascii")
        else:
            self._encode = lambda b: b.hex()

    def encode(self, data) -> str:
        return self._encode(data)

    def settings(self) -> tuple:
        """What decides whether and how a value is compressed."""
        return (self.compression, self.compress_threshold, self.compress_ratio)


class Writer(base.Writer):
    """Writes JINX byte-compatible with mldataforge's ``JinxShardWriter``/``JinxDatasetWriter``.

    Parameters (named as mldataforge names them)
    ----------
    path
        The ``.jinx`` file, or with ``shard_size`` the directory of ``shard-NNNNN.jinx``.
    compression, index_compression
        ``None`` or a JINX extension: ``zst``, ``gz``, ``bz2``, ``xz``, ``lzma``, ``lz4``,
        ``br``, ``snappy`` (``zstd``, ``gzip``, ``brotli`` are accepted as aliases).
    compress_threshold, compress_ratio
        A value is compressed when it has at least ``compress_threshold`` bytes, and the
        compressed form is kept when it is at most ``compress_ratio`` times the size.
    encoding
        ``a85`` (default), ``b64`` or ``hex`` for inline binary values.  mldataforge
        cannot read an inline ``hex`` index, so closing a shard that has one warns.
    binary_threshold
        Values (and the index) longer than this many bytes go to the ``.binx`` sidecar.
    shard_size
        Start a new shard when the current one would pass this many bytes.
    split
        A split name recorded in every footer.
    ext_sep
        The key suffix separator (``.``).
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.base`): ``path`` is a directory and
        every sample goes into ``shard-<shard_id>.jinx`` (no size roll-over), whose footer
        names its neighbours in the chain by their file names; :meth:`index_part`
        describes it for :func:`merge_index`.

    Defaults are ``JinxShardWriter``'s: no compression, threshold 64, ratio 1.0, a85.
    Values mldataforge would misread are refused with :class:`UnsupportedValueError`
    (see ``docs/formats/jinx.md``).
    """

    def __init__(self, path, compression=None, index_compression=None, compress_threshold=64,
                 compress_ratio=1.0, encoding="a85", binary_threshold=None, shard_size=None,
                 split=None, ext_sep=".", shard_id=None, num_shards=None):
        super().__init__(path)
        self._hook = None if shard_id is None else (int(shard_id), int(num_shards or shard_id + 1))
        if self._hook is not None:
            shard_size = None
        self.opts = _Options(compression, index_compression, compress_threshold, compress_ratio,
                             encoding, binary_threshold, ext_sep)
        self.shard_size = shard_size
        self.split = split
        self._done: list[_ShardWriter] = []
        self._created_dir = False
        if shard_size is not None:
            if not os.path.isdir(self.path):
                os.makedirs(self.path)
                self._created_dir = True
        self.shard_id = 0
        self._prev = None
        self._closed = False
        if self._hook is not None:
            os.makedirs(self.path, exist_ok=True)
            self.shard_id = self._hook[0]
            self._cur = _ShardWriter(str(Path(self.path) / _SHARD_TEMPLATE.format(self.shard_id)), self.opts)
            return
        self._cur = _ShardWriter(self._shard_path(0), self.opts)

    def _shard_path(self, shard_id: int) -> str:
        if self.shard_size is None:
            return self.path
        return str(Path(self.path) / _SHARD_TEMPLATE.format(shard_id))

    def write(self, sample: Mapping) -> None:
        cur = self._cur
        if self.shard_size is not None and cur.current + 8 * cur.num_samples > self.shard_size:
            cur = self._new_shard()
        if isinstance(sample, JinxSample) and not sample._lent:
            prepared = _Passthrough(self.opts, cur, sample, self.count).sample(sample._raw)
        else:
            if not isinstance(sample, Mapping):
                raise UnsupportedValueError(
                    f"a JINX sample must be a mapping, got {type(sample).__name__}",
                    path=self.path, sample=self.count,
                )
            prepared = _Encoder(self.opts, cur, self.count).sample(sample)
        cur.write_line(orjson.dumps(prepared))
        self.count += 1

    def _new_shard(self) -> _ShardWriter:
        next_path = self._shard_path(self.shard_id + 1)
        self._cur.close(self.shard_id, self._prev, next_path, self.split)
        self._done.append(self._cur)
        self._prev = self._cur.path
        self.shard_id += 1
        self._cur = _ShardWriter(next_path, self.opts)
        return self._cur

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._hook is not None:
            k, n = self._hook
            prev = _SHARD_TEMPLATE.format(k - 1) if k > 0 else None
            self._prev, nxt = prev, (_SHARD_TEMPLATE.format(k + 1) if k + 1 < n else None)
        else:
            nxt = None
        try:
            self._cur.close(self.shard_id, self._prev, nxt, self.split)
            self._done.append(self._cur)
            for w in self._done:
                w.publish()
        except BaseException:
            self._discard()
            raise

    def index_part(self) -> dict:
        """The shard written under the sharded-writing hook: file name and sample count."""
        return {"file": os.path.basename(self._cur.path), "samples": self.count}

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._discard()

    def _discard(self) -> None:
        for w in self._done + [self._cur]:
            w.discard()
        if self._created_dir:
            try:
                os.rmdir(self.path)
            except OSError:
                pass


def merge_index(directory, parts, **options) -> None:
    """Nothing to merge: a JINX dataset is its chain of self-describing shards (the
    sharded-writing hook of :mod:`hpcio.formats.base`)."""


class _Encoder:
    """Turns one sample into the JSON object mldataforge's writer would produce."""

    def __init__(self, opts: _Options, shard: _ShardWriter, sample: int):
        self.o = opts
        self.shard = shard
        self.index = sample

    def fail(self, key, message):
        raise UnsupportedValueError(f"field {key!r}: {message}", path=self.shard.path, sample=self.index)

    def sample(self, sample: Mapping) -> dict:
        return self.mapping(sample, "")

    def mapping(self, m: Mapping, prefix: str) -> dict:
        out = {}
        sep = self.o.ext_sep
        for key, val in m.items():
            if type(key) is not str:
                self.fail(prefix + str(key), f"keys must be str, got {type(key).__name__}")
            if sep in key:
                self.fail(prefix + key, f"key contains the suffix separator {sep!r}; mldataforge "
                          "would read it as a type suffix (rename the key)")
            stored, ext = self.value(val, prefix + key)
            out[f"{key}{sep}{ext}" if ext else key] = stored
        return out

    def value(self, v, key):
        t = type(v)
        if t is str:
            if len(v) < self.o.short_limit:
                return v, None
            return self.store(v.encode("utf-8"), "str")
        if t is int or t is bool or v is None:
            if t is int and not -(1 << 63) <= v < (1 << 64):
                self.fail(key, f"integer {v} does not fit in 64 bits (JSON readers reject it)")
            return v, None
        if isinstance(v, float):  # np.float64 included: mldataforge stores it as a plain float
            if not math.isfinite(v):
                self.fail(key, f"non-finite float {v} (JSON would store null)")
            return float(v), None
        if isinstance(v, (bytes, bytearray, memoryview)):
            return self.store(bytes(v), "raw")
        if isinstance(v, Mapping):
            return self.mapping(v, key + "/"), None
        if isinstance(v, (list, tuple)):
            return self.sequence(v, key), None
        if isinstance(v, str):
            return self.value(str(v), key)
        if isinstance(v, int):
            return self.value(int(v), key)
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                self.fail(key, "numpy arrays of Python objects cannot be stored (.npy refuses pickles)")
            buf = io.BytesIO()
            np.save(buf, v, allow_pickle=False)
            return self.store(buf.getvalue(), "npy")
        if isinstance(v, np.generic):
            name = str(v.dtype)
            if name not in NUMPY_SCALARS:
                self.fail(key, f"numpy {name} scalars cannot be stored: mldataforge cannot read them "
                          "back; convert with .item() or store np.asarray(x) (an .npy array)")
            item = v.item()
            if isinstance(item, float) and not math.isfinite(item):
                self.fail(key, f"non-finite {name} {item} (JSON would store null)")
            return item, name
        if type(v).__module__.startswith("torch") and type(v).__name__ in ("Tensor", "Parameter"):
            import torch

            buf = io.BytesIO()
            torch.save(v, buf)
            return self.store(buf.getvalue(), "pt")
        self.fail(key, f"{type(v).__name__} values cannot be stored in JINX")

    def sequence(self, items, key) -> list:
        # mldataforge drops the type suffix of list items, so only values that need no
        # suffix may appear in a list; long strings are kept verbatim for the same reason
        out = []
        for j, v in enumerate(items):
            where = f"{key}[{j}]"
            t = type(v)
            if t is str or t is int or t is bool or v is None:
                if t is int and not -(1 << 63) <= v < (1 << 64):
                    self.fail(where, f"integer {v} does not fit in 64 bits")
                out.append(v)
            elif isinstance(v, float):
                if not math.isfinite(v):
                    self.fail(where, f"non-finite float {v} (JSON would store null)")
                out.append(float(v))
            elif isinstance(v, Mapping):
                out.append(self.mapping(v, where + "/"))
            elif isinstance(v, (list, tuple)):
                out.append(self.sequence(v, where))
            elif isinstance(v, str):
                out.append(str(v))
            elif isinstance(v, int) and not isinstance(v, np.generic):
                out.append(int(v))
            else:
                self.fail(where, f"{type(v).__name__} items cannot be stored in a list: "
                          "mldataforge reads list items back without their type (store them "
                          "under separate keys, or as one numpy array)")
        return out

    def store(self, data: bytes, ext: str):
        """Compress, then place in the sidecar or inline: the stored value and its suffix."""
        o = self.o
        comp = None
        if o.compression is not None and len(data) >= o.compress_threshold:
            c = _compress(o.compression, data)
            if len(c) <= o.compress_ratio * len(data):
                data, comp = c, o.compression
        return self.place(data, ext, comp)

    def place(self, data, ext: str, comp):
        o = self.o
        exts = [ext, comp] if comp else [ext]
        if o.binary_threshold is not None and len(data) > o.binary_threshold:
            exts.append("bin")
            return self.shard.store_bin(data), o.ext_sep.join(exts)
        if exts == ["str"]:
            return str(data, "utf-8"), None
        return o.encode(data), o.ext_sep.join(exts)


class _Passthrough(_Encoder):
    """Re-writes a lazy sample, copying stored bytes without decoding where valid.

    A stored value is copied (its compressed bytes, or its base text when the
    encodings agree, or its sidecar blob) when the destination would compress it the
    same way; otherwise it is decoded and encoded again with the destination rules.
    Placement (inline or sidecar) is always decided again from the stored size, and
    inline text is re-encoded when the encodings differ (mldataforge copies it
    verbatim and corrupts the values).
    """

    def __init__(self, opts, shard, source: JinxSample, index):
        super().__init__(opts, shard, index)
        self.src = source._shard
        self.src_index = source._sample
        s = self.src.footer
        src_settings = (
            _canonical_compression(s.get("compression")), s.get("compress_threshold"), s.get("compress_ratio")
        )
        self.same_settings = src_settings == opts.settings()

    def sample(self, raw: dict) -> dict:
        return self.raw_mapping(raw)

    def raw_mapping(self, raw: dict) -> dict:
        out = {}
        src, sep = self.src, self.o.ext_sep
        for rk, v in raw.items():
            logical, exts = src.plan(rk)
            if not exts:
                if type(v) is dict:
                    out[logical] = self.raw_mapping(v)
                elif type(v) is list:
                    out[logical] = self.raw_list(v)
                else:
                    stored, ext = self.value(v, logical)
                    out[f"{logical}{sep}{ext}" if ext else logical] = stored
                continue
            stored, ext = self.copy(rk, v, exts)
            out[f"{logical}{sep}{ext}" if ext else logical] = stored
        return out

    def raw_list(self, items):
        return [
            self.raw_mapping(v) if type(v) is dict else self.raw_list(v) if type(v) is list else v
            for v in items
        ]

    def copy(self, rk, v, exts):
        src = self.src
        last = exts[-1]
        if last in NUMPY_SCALARS:
            return v, self.o.ext_sep.join(exts)
        in_bin = last == "bin"
        body = exts[:-1] if in_bin else exts
        comp = body[-1] if body and body[-1] in COMPRESSIONS else None
        kind = body[0] if body else None
        if kind not in _TYPE_EXTS or len(body) > 2 or (len(body) == 2 and comp is None):
            return self.value(src.decode(rk, v, self.src_index), rk)
        if comp is not None:
            # lzma and xz name the same XZ container
            ok = COMPRESSIONS[comp] == COMPRESSIONS.get(self.o.compression)
        else:
            ok = self.o.compression is None or self.same_settings
        if not ok:
            return self.value(src.decode(rk, v, self.src_index), rk)
        o = self.o
        if in_bin:
            data = src._sidecar_view(v, rk, self.src_index, src.offsets[self.src_index])
        elif (isinstance(v, str) and o.encoding == src.encoding and o.binary_threshold is None
              and not (kind == "str" and comp is None)):
            return v, o.ext_sep.join(body)  # same text, same place: copy verbatim
        elif isinstance(v, str):
            data = _jinx.decode(v, src.enc_code, path=src.path, offset=src.offsets[self.src_index],
                                     sample=self.src_index, what=rk)
        else:
            return self.value(src.decode(rk, v, self.src_index), rk)
        if kind == "str" and comp is None:
            text = str(data, "utf-8")
            return self.value(text, rk)
        return self.place(data, kind, comp)


# ======================================================================================
# Join, split, inspect, verify
# ======================================================================================
def _footer_options(footer: dict) -> dict:
    return {
        "compression": footer.get("compression"),
        "index_compression": footer.get("index_compression"),
        "compress_threshold": footer.get("compress_threshold", 64),
        "compress_ratio": footer.get("compress_ratio", 1.0),
        "encoding": footer.get("encoding", "a85"),
        "binary_threshold": footer.get("binary_threshold"),
        "ext_sep": footer.get("ext_sep", "."),
    }


def _open_inputs(inputs) -> list[Reader]:
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return [Reader(p, lazy=True) for p in inputs]


def join(inputs, output, **writer_options) -> int:
    """Write the samples of JINX ``inputs`` (files or shard directories) into ``output``.

    Writer options default to the first input's footer settings, so stored values
    and sidecar blobs are copied without decoding; options that differ make the
    affected values be re-encoded.  Returns the number of samples written.
    """
    readers = _open_inputs(inputs)
    try:
        first = next((r.shards[0].footer for r in readers if r.shards), {})
        opts = {**_footer_options(first), **writer_options}
        with Writer(output, **opts) as w:
            for r in readers:
                for s in r.iter_range():
                    w.write(s)
            return w.count
    finally:
        for r in readers:
            r.close()


def split(inputs, output_dir, *, parts: int | None = None, size_hint: int | None = None,
          prefix: str = "part-", **writer_options) -> list[str]:
    """Split JINX ``inputs`` into files ``{output_dir}/{prefix}{part:04d}.jinx``.

    Give ``parts`` (equal sample counts, the first ones one larger) or ``size_hint``
    (start a new part once a part's sample lines reach this many bytes, as mldataforge
    does).  Values are copied without decoding when the settings agree (see
    :func:`join`).  Returns the paths written.
    """
    if (parts is None) == (size_hint is None):
        raise ValueError("give exactly one of parts= or size_hint=")
    readers = _open_inputs(inputs)
    try:
        n = sum(len(r) for r in readers)
        first = next((r.shards[0].footer for r in readers if r.shards), {})
        opts = {**_footer_options(first), **writer_options}
        os.makedirs(output_dir, exist_ok=True)
        paths, w = [], None
        bounds = None
        if parts is not None:
            if parts < 1:
                raise ValueError(f"parts must be >= 1, got {parts}")
            per, extra = divmod(n, parts)
            bounds = np.cumsum([per + (k < extra) for k in range(parts)]).tolist()
        done = 0

        def open_part():
            p = os.path.join(output_dir, f"{prefix}{len(paths):04d}.jinx")
            paths.append(p)
            return Writer(p, **opts)

        try:
            for r in readers:
                for s in r.iter_range():
                    if w is None:
                        w = open_part()
                    w.write(s)
                    done += 1
                    full = (done >= bounds[len(paths) - 1]) if bounds else w._cur.current >= size_hint
                    if full:
                        w.close()
                        w = None
            if bounds:
                while len(paths) < parts:  # more parts than samples: empty parts
                    open_part().close()
            elif w is None and not paths:
                w = open_part()
            if w is not None:
                w.close()
        except BaseException:
            if w is not None:
                w.abort()
            raise
        return paths
    finally:
        for r in readers:
            r.close()


def inspect(path) -> dict:
    """A summary of a JINX file or shard directory: shards, footers, fields."""
    with Reader(path) as r:
        shards = []
        for s in r.shards:
            f = s.footer
            index_key = next(k for k in f if k.startswith("index" + s.ext_sep))
            shards.append({
                "path": s.path,
                "bytes": s.size,
                "sidecar_bytes": os.path.getsize(s.binx_path) if os.path.exists(s.binx_path) else None,
                "num_samples": s.num_samples,
                "index": index_key,
                **{k: v for k, v in f.items() if k != index_key and k != "num_samples"},
            })
        fields = {}
        if len(r):
            first = r.shards[0] if r.shards[0].num_samples else next(s for s in r.shards if s.num_samples)
            for rk in first.raw(0):
                logical, exts = first.plan(rk)
                fields[logical] = first.ext_sep.join(exts) or None
        return {"format": NAME, "path": os.fspath(path), "num_samples": len(r),
                "shards": shards, "fields": fields}


def verify(path) -> dict:
    """Decode every value of every sample; report the problems found.

    Returns ``{"ok": bool, "num_samples": n, "errors": [message, ...]}``; structural
    errors (footer, index) end the check of that shard, value errors are listed per
    sample (at most 100).
    """
    errors: list[str] = []
    n = 0
    for p in _shard_paths(os.fspath(path)):
        try:
            shard = _Shard(p)
        except HpcioError as exc:
            errors.append(str(exc))
            continue
        try:
            n += shard.num_samples
            for i in range(shard.num_samples):
                try:
                    shard.materialize(shard.raw(i), i)
                except HpcioError as exc:
                    errors.append(str(exc))
                    if len(errors) >= 100:
                        break
        finally:
            shard.close()
    return {"ok": not errors, "num_samples": n, "errors": errors}
