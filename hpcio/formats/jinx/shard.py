"""One JINX file, mapped: its footer, offset index, BINX sidecar and value decoding.

Every footer and index problem is raised as a :class:`CorruptShardError` naming the
file and the byte offset of the footer, so a damaged file is reported in one line
instead of failing later with whatever Python error its garbage happens to cause.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ... import codecs as _codecs_table
from ..._core import _io, _jinx
from ..._core._records import loads_exact
from ..._hashing import DEFAULT_HASH, file_digest, new_hash
from ..._paths import listed_inside
from ...errors import (
    ChecksumMismatchError,
    CorruptShardError,
    DecodeError,
    ShardNotFoundError,
    TruncatedShardError,
)
from .sample import JinxSample
from .values import COMPRESSIONS, ENCODINGS, NUMPY_SCALARS, TYPED_LIST, decompress, load_npy, load_torch

NAME = "jinx"
SHARD_GLOB = "shard-*.jinx"
SHARD_TEMPLATE = "shard-{:05d}.jinx"
# How hpcio spells the footer's ``hash`` and ``binx_hash``: a value without it is some
# other writer's and is not checked.
HASH_PREFIX = f"{DEFAULT_HASH}:"
# What decoding a typed value raises for bytes that are not of its type.
_VALUE_ERRORS = (ValueError, TypeError, EOFError, IndexError, OverflowError, RecursionError)


def sidecar_path(path) -> str:
    """The ``.binx`` sidecar of a JINX file: ``Path(path).with_suffix(".binx")``."""
    return str(Path(path).with_suffix(".binx"))


def shard_paths(path: str) -> list[str]:
    """The JINX files of ``path``: the file itself, or a directory's ``shard-*.jinx``."""
    if os.path.isdir(path):
        names = sorted(p.name for p in Path(path).glob(SHARD_GLOB))
        if not names:
            raise ShardNotFoundError(f"no {SHARD_GLOB} files in the directory", path=path)
        return listed_inside(path, names, what="JINX shard")
    if not os.path.exists(path):
        raise ShardNotFoundError("no such JINX file or directory", path=path)
    return [path]


class Shard:
    """One mapped JINX file: footer, offset table, sidecar and per-key decode plans."""

    def __init__(self, path: str, encoding: str | None = None, limit: int = _codecs_table.DEFAULT_LIMIT):
        self.path = path
        self.limit = limit
        # set by _open and _binx_open; None until then and once closed
        self._file: Any = None
        self._mm: Any = None
        self._binx_file: Any = None
        self._binx_mm: Any = None
        self._binx: Any = None
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
        self._mm = _io.map_file(self._file.fileno())  # the file stays open for check_size
        self.buf = memoryview(self._mm)
        self.size = size
        fo, fe = _jinx.locate_footer(self.buf, path=path)
        self.footer_offset = fo
        self.footer = footer = self._parse_footer(fo, fe)
        self.num_samples = footer["num_samples"]
        self.ext_sep = footer.get("ext_sep", ".")
        self.encoding = footer.get("encoding", encoding or "a85")
        # null: mldataforge's sidecar-only layout, where no value is inline text
        if self.encoding is not None and (type(self.encoding) is not str or self.encoding not in ENCODINGS):
            raise self._corrupt(f"unknown JINX encoding {self.encoding!r}; expected one of {', '.join(ENCODINGS)}")
        self.enc_code = -1 if self.encoding is None else ENCODINGS.index(self.encoding)
        self.binx_path = sidecar_path(path)
        self.plans: dict[str, tuple] = {}
        self.keymaps: dict[tuple, dict] = {}
        table = self._load_index()
        self.index = np.frombuffer(table, dtype="<u8")
        self.offsets = memoryview(table).cast("B").cast("Q")

    # --- footer -------------------------------------------------------------------------
    def _corrupt(self, message: str, offset=None) -> CorruptShardError:
        return CorruptShardError(message, path=self.path, offset=self.footer_offset if offset is None else offset)

    def _parse_footer(self, fo: int, fe: int) -> dict:
        """The footer object, its fields the reader relies on checked."""
        try:
            footer = orjson.loads(self.buf[fo:fe])
        except orjson.JSONDecodeError as exc:
            raise self._corrupt(f"garbled JINX footer: {exc.msg}", fo + exc.pos) from None
        if not isinstance(footer, dict) or not isinstance(footer.get("num_samples"), int):
            raise self._corrupt("garbled JINX footer: expected a JSON object with an integer num_samples")
        n = footer["num_samples"]
        if not 0 <= n <= fo:  # every sample is at least a newline before the footer
            raise self._corrupt(f"garbled JINX footer: num_samples {n} is not in 0..{fo} (the footer offset)")
        sep = footer.get("ext_sep", ".")
        if type(sep) is not str or not sep:
            raise self._corrupt(f"garbled JINX footer: ext_sep must be a non-empty string, got {sep!r}")
        return footer

    # --- index --------------------------------------------------------------------------
    def _load_index(self) -> bytes | memoryview:
        """The offset table's bytes, checked: n+1 increasing offsets from 0 to the footer."""
        footer, n, fo = self.footer, self.num_samples, self.footer_offset
        key = next((k for k in footer if k.startswith("index" + self.ext_sep)), None)
        if key is None:
            raise self._corrupt("JINX footer has no index.* entry")
        table: bytes | memoryview
        exts = key.split(self.ext_sep)[1:]
        value = footer[key]
        if exts[-1] == "bin":
            table = self.sidecar_view(value, key, -1, fo)
            exts = exts[:-1]
        elif isinstance(value, str):
            table = self.decode_inline(value, key, -1, fo)
        else:
            raise self._corrupt(f"JINX footer {key!r} is not a string")
        if not exts or exts[0] != "npy" or len(exts) > 2:
            raise self._corrupt(f"unsupported JINX index key {key!r}")
        if len(exts) == 2:
            if exts[1] not in COMPRESSIONS:
                raise self._corrupt(f"unsupported JINX index compression {exts[1]!r}")
            table = decompress(exts[1], table, 8 * (n + 1), path=self.path, offset=fo)
        if len(table) != 8 * (n + 1):
            raise self._corrupt(
                f"JINX index holds {len(table)} bytes, expected {8 * (n + 1)} (8 x (num_samples {n} + 1))"
            )
        idx = np.frombuffer(table, dtype="<u8")
        if idx[0] != 0 or idx[-1] != fo:
            raise self._corrupt(
                f"JINX index spans bytes {int(idx[0])}..{int(idx[-1])}, expected 0..{fo} (the footer offset)"
            )
        bad = np.flatnonzero(idx[1:] <= idx[:-1])
        if bad.size:
            i = int(bad[0])
            raise CorruptShardError(
                f"JINX index entry {i + 1} ({int(idx[i + 1])}) does not follow entry {i} ({int(idx[i])})",
                path=self.path,
                offset=int(idx[i]),
                sample=i,
            )
        return table

    @property
    def index_key(self) -> str:
        """The footer key holding the index (``index.npy``, ``index.npy.zst``, ``index.npy.bin``)."""
        return next(k for k in self.footer if k.startswith("index" + self.ext_sep))

    # --- hashes -------------------------------------------------------------------------
    def check_hashes(self) -> int:
        """Compare the hashes the footer records (``hash``: the sample lines, then the
        footer as written without ``hash``; ``binx_hash``: the sidecar) with the bytes;
        returns how many were compared, raises ChecksumMismatchError at one that differs."""
        want = self.footer.get("hash")
        if not (isinstance(want, str) and want.startswith(HASH_PREFIX)):
            return 0
        fo = self.footer_offset
        h = new_hash()
        h.update(self.buf[:fo])
        h.update(orjson.dumps({k: v for k, v in self.footer.items() if k != "hash"}))
        got = HASH_PREFIX + h.hexdigest()
        if got != want:
            raise ChecksumMismatchError(
                f"{DEFAULT_HASH} mismatch: the footer's hash says {want[len(HASH_PREFIX):]}, bytes [0, {fo}) "
                f"and the footer hash to {got[len(HASH_PREFIX):]}", path=self.path, offset=0)
        want = self.footer.get("binx_hash")
        if not (isinstance(want, str) and want.startswith(HASH_PREFIX)):
            return 1
        if not os.path.exists(self.binx_path):
            raise ShardNotFoundError("JINX sidecar not found (the footer records its hash)", path=self.binx_path)
        got = HASH_PREFIX + file_digest(self.binx_path)
        if got != want:
            size = os.path.getsize(self.binx_path)
            raise ChecksumMismatchError(
                f"{DEFAULT_HASH} mismatch: the footer's binx_hash says {want[len(HASH_PREFIX):]}, bytes [0, {size}) "
                f"of the sidecar hash to {got[len(HASH_PREFIX):]}", path=self.binx_path, offset=0)
        return 2

    # --- sidecar ------------------------------------------------------------------------
    def sidecar(self) -> memoryview:
        """The mapped ``.binx`` sidecar, opened on first use."""
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
        else:
            self._check_sidecar_size()
        return self._binx

    def decode_inline(self, text: str, key: str, sample: int, offset: int):
        """The bytes of a value stored inline as base-encoded text."""
        if self.enc_code < 0:
            raise DecodeError(
                f"value {key!r} is inline text, but the footer's encoding is null (a "
                "sidecar-only file keeps every byte value in the .binx sidecar)",
                path=self.path, offset=offset, sample=sample)
        return _jinx.decode(text, self.enc_code, path=self.path, offset=offset, sample=sample, what=key)

    def check_size(self) -> None:
        """Raise ShardChangedError if the file (or its mapped sidecar) shrank since it was
        mapped: reading the lost part of a mapping would kill the process (SIGBUS)."""
        _io.check_mapped_size(self._file.fileno(), self.size, self.path)
        self._check_sidecar_size()

    def _check_sidecar_size(self) -> None:
        if self._binx_mm is not None:
            _io.check_mapped_size(self._binx_file.fileno(), len(self._binx_mm), self.binx_path)

    def sidecar_view(self, loc, key, sample, offset) -> memoryview:
        """The sidecar bytes a ``{"offset", "length"}`` location names."""
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
        binx = self.sidecar()
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

    def decode(self, raw_key: str, value, sample: int, unpickle: bool = True):
        """The Python value of stored ``raw_key: value`` (sidecar, base, codec, type).

        With ``unpickle`` False a ``.pt`` value is returned as its stored bytes:
        torch.load unpickles, which only trusted data may do."""
        exts = self.plan(raw_key)[1]
        if not exts:
            return self.plain(value, sample)
        offset = self.offsets[sample] if sample >= 0 else None
        last = exts[-1]
        if exts == (TYPED_LIST,):
            return self.typed_list(raw_key, value, sample, offset, unpickle)
        if last in NUMPY_SCALARS:
            try:
                return np.dtype(last).type(value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise DecodeError(f"value {raw_key!r}: not a {last}: {exc}", path=self.path, offset=offset, sample=sample) from None
        if last == "bin":
            data = self.sidecar_view(value, raw_key, sample, offset)
            exts = exts[:-1]
        elif isinstance(value, str):
            data = self.decode_inline(value, raw_key, sample, offset)
        else:
            raise DecodeError(
                f"value {raw_key!r}: expected encoded text, got {type(value).__name__}",
                path=self.path,
                offset=offset,
                sample=sample,
            )
        return self.unserialize(raw_key, data, exts, sample, offset, unpickle)

    def unserialize(self, raw_key, data, exts, sample, offset, unpickle: bool = True):
        """Undo ``exts`` right to left on the stored bytes: codecs, then the type."""
        for ext in reversed(exts):
            if ext in COMPRESSIONS:
                data = decompress(ext, data, self.limit, path=self.path, offset=offset, sample=sample)
                continue
            try:
                if ext == "raw":
                    return bytes(data)
                if ext == "str":
                    return str(data, "utf-8")
                if ext == "npy":
                    return load_npy(data)
                if ext == "pt":
                    return load_torch(data) if unpickle else bytes(data)
                if ext == "np":
                    dtype, _, buf = bytes(data).partition(b"\x00")
                    return np.frombuffer(buf, dtype=dtype.decode("ascii"))[0]
            except _VALUE_ERRORS as exc:
                raise DecodeError(f"value {raw_key!r}: cannot decode {ext}: {exc}", path=self.path, offset=offset, sample=sample) from None
            raise DecodeError(f"value {raw_key!r}: unsupported extension {ext!r}", path=self.path, offset=offset, sample=sample)
        try:
            return loads_exact(data)
        except (ValueError, RecursionError) as exc:  # not JSON, or (decoded by Python's json) not UTF-8
            raise DecodeError(f"value {raw_key!r}: not JSON: {exc}", path=self.path, offset=offset, sample=sample) from None

    def typed_list(self, raw_key, items, sample, offset, unpickle: bool = True) -> list:
        """The values of a ``list``-suffixed key: one-key objects ``{suffix: stored}``."""
        if type(items) is not list:
            raise DecodeError(f"value {raw_key!r}: expected a list, got {type(items).__name__}",
                              path=self.path, offset=offset, sample=sample)
        logical = self.plan(raw_key)[0]
        out = []
        for j, item in enumerate(items):
            if type(item) is not dict or len(item) != 1:
                raise DecodeError(f"value {raw_key!r}: item {j} is not a one-key object {{suffix: value}}",
                                  path=self.path, offset=offset, sample=sample)
            (suffix, stored), = item.items()
            if suffix:
                out.append(self.decode(f"{logical}[]{self.ext_sep}{suffix}", stored, sample, unpickle))
            elif type(stored) is dict:
                out.append(self.materialize(stored, sample, unpickle))
            elif type(stored) is list:
                out.append(self._materialize_list(stored, sample, unpickle))
            else:
                out.append(stored)
        return out

    def plain(self, value, sample):
        """A value stored without suffix: nested objects with encoded keys stay lazy."""
        return _jinx.plain_value(value, self.ext_sep, JinxSample, self, sample)

    def materialize(self, raw: dict, sample: int, unpickle: bool = True) -> dict:
        """Every value of ``raw`` decoded: the eager sample."""
        out = {}
        for rk, v in raw.items():
            logical, exts = self.plan(rk)
            if exts:
                out[logical] = self.decode(rk, v, sample, unpickle)
            elif type(v) is dict:
                out[logical] = self.materialize(v, sample, unpickle)
            elif type(v) is list:
                out[logical] = self._materialize_list(v, sample, unpickle)
            else:
                out[logical] = v
        return out

    def _materialize_list(self, items, sample, unpickle):
        return [
            self.materialize(v, sample, unpickle) if type(v) is dict
            else self._materialize_list(v, sample, unpickle) if type(v) is list
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
