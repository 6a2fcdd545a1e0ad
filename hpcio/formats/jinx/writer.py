"""Writing JINX files (and their sidecars) byte-compatible with mldataforge's writers."""

from __future__ import annotations

import math
import numbers
import os
import warnings
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import orjson

from ..._hashing import new_hash, recorded_hashes
from ...errors import InvalidArgumentError, UnsupportedValueError
from .. import base
from .encoder import Encoder, Passthrough
from .sample import JinxSample
from .shard import HASH_PREFIX, SHARD_TEMPLATE, sidecar_path
from .values import ENCODINGS, canonical_compression, compress, encoder


class ShardWriter:
    """Writes one JINX file (and its sidecar) under temporary names, hashing both as
    they are written when ``options.hashes`` asks (see :meth:`footer_hashes`)."""

    def __init__(self, path: str, options: Options):
        self.path = path
        self.opts = options
        self.binx_path = sidecar_path(path)
        self.tmp_path = _tmp_name(path)
        self.tmp_binx = _tmp_name(self.binx_path)
        self.file = open(self.tmp_path, "wb", buffering=1 << 20)
        self.offsets = array("Q", [0])
        self.current = 0
        self.bin: BinaryIO | None = None
        self.hash = new_hash() if options.hashes else None
        self.bin_hash = new_hash() if options.hashes else None

    @property
    def num_samples(self) -> int:
        return len(self.offsets) - 1

    def store_bin(self, data) -> dict:
        if self.bin is None:
            self.bin = open(self.tmp_binx, "wb", buffering=1 << 20)
        offset = self.bin.tell()
        self.bin.write(data)
        if self.bin_hash is not None:
            self.bin_hash.update(data)
        return {"offset": offset, "length": len(data)}

    def write_line(self, line: bytes) -> None:
        self.file.write(line)
        self.file.write(b"\n")
        if self.hash is not None:
            self.hash.update(line)
            self.hash.update(b"\n")
        self.current += len(line) + 1
        self.offsets.append(self.current)

    def close(self, shard_id: int, shard_prev=None, shard_next=None, split=None) -> None:
        o = self.opts
        data = self.offsets.tobytes()
        index: dict | str | None
        if o.binary_threshold is not None and (len(data) > o.binary_threshold or o.encoding is None):
            index, ext = self.store_bin(data), "npy.bin"
        else:
            index, ext = None, "npy"
            if o.index_compression is not None and len(data) >= o.compress_threshold:
                c = compress(o.index_compression, data)
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
        self.footer_hashes(footer)
        self.file.write(orjson.dumps(footer))
        self.file.write(f"\n{self.current}\n".encode())
        self.file.close()
        if self.bin is not None:
            self.bin.close()

    def footer_hashes(self, footer: dict) -> None:
        """Add the hashes to ``footer``, last: ``binx_hash``, the xxh3_64 of the sidecar
        (when there is one), then ``hash`` (mldataforge's own footer field, which its
        writer leaves unset and its reader ignores), the xxh3_64 of the sample lines
        followed by the footer as written without ``hash``; both as ``"xxh3_64:<hex>"``."""
        if self.hash is None:
            return
        if self.bin is not None:
            footer["binx_hash"] = HASH_PREFIX + self.bin_hash.hexdigest()
        self.hash.update(orjson.dumps(footer))
        footer["hash"] = HASH_PREFIX + self.hash.hexdigest()

    def publish(self) -> None:
        # the sidecar first: a visible .jinx always finds the values it points to
        if self.bin is not None:
            os.replace(self.tmp_binx, self.binx_path)
        os.replace(self.tmp_path, self.path)

    def discard(self) -> None:
        for handle in (self.file, self.bin):
            if handle is not None:
                try:
                    handle.close()
                except OSError:
                    pass  # the file is removed: its flush error is moot
        base.remove_files([self.tmp_path, self.tmp_binx])


def _tmp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{os.getpid()}")


class Options:
    """The writer settings and the value encoding rules that depend on them."""

    def __init__(self, compression, index_compression, compress_threshold, compress_ratio,
                 encoding, binary_threshold, ext_sep, hashes=()):
        self.compression = canonical_compression(compression)
        self.index_compression = canonical_compression(index_compression)
        if encoding is None and binary_threshold is None:
            raise InvalidArgumentError("JINX encoding=None needs a binary_threshold: with no text "
                                       "encoding, every byte value and the index go to the .binx sidecar")
        if encoding is not None and encoding not in ENCODINGS:
            raise InvalidArgumentError(f"unknown JINX encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
        if not isinstance(ext_sep, str) or not ext_sep:
            raise InvalidArgumentError(f"ext_sep must be a non-empty string, got {ext_sep!r}")
        _check_size("compress_threshold", compress_threshold)
        if binary_threshold is not None:
            _check_size("binary_threshold", binary_threshold)
        if (isinstance(compress_ratio, bool) or not isinstance(compress_ratio, numbers.Real)
                or not 0 <= compress_ratio < math.inf):
            raise InvalidArgumentError(f"compress_ratio must be a finite number >= 0, got {compress_ratio!r}")
        self.compress_threshold = compress_threshold
        self.compress_ratio = compress_ratio
        self.encoding = encoding
        self.binary_threshold = binary_threshold
        self.ext_sep = ext_sep
        self.hashes = recorded_hashes(hashes, "JINX")
        inf = math.inf
        self.short_limit = min(
            compress_threshold if self.compression is not None else inf,
            binary_threshold if binary_threshold is not None else inf,
        )
        self._encode = None if encoding is None else encoder(encoding)

    def encode(self, data) -> str:
        """``data`` as inline text (not for ``encoding=None``, the sidecar-only layout
        mldataforge also writes, where every byte value goes to the sidecar)."""
        return self._encode(data)

    def settings(self) -> tuple:
        """What decides whether and how a value is compressed."""
        return (self.compression, self.compress_threshold, self.compress_ratio)


def _check_size(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise InvalidArgumentError(f"{name} must be an integer >= 0, got {value!r}")


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
    hashes
        ``["xxh3_64"]`` (None, the default): every footer records the xxh3_64 of its file
        (``hash``) and of its sidecar (``binx_hash``), which ``validate_hashes=True`` and
        ``hpcio verify`` check and mldataforge's reader ignores; ``[]`` records none, for
        files byte-identical to mldataforge's.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.contract`): ``path`` is a directory and
        every sample goes into ``shard-<shard_id>.jinx`` (no size roll-over), whose footer
        names its neighbours in the chain by their file names; :meth:`index_part`
        describes it for :func:`merge_index`.

    Defaults are ``JinxShardWriter``'s: no compression, threshold 64, ratio 1.0, a85.
    Values mldataforge would misread are refused with :class:`UnsupportedValueError`
    (see ``docs/formats/jinx.md``).
    """

    def __init__(self, path, compression=None, index_compression=None, compress_threshold=64,
                 compress_ratio=1.0, encoding="a85", binary_threshold=None, shard_size=None,
                 split=None, ext_sep=".", shard_id=None, num_shards=None, hashes=None):
        super().__init__(path)
        self._hook = None if shard_id is None else (int(shard_id), int(num_shards or shard_id + 1))
        if self._hook is not None:
            shard_size = None
        self.opts = Options(compression, index_compression, compress_threshold, compress_ratio,
                            encoding, binary_threshold, ext_sep, hashes)
        self.shard_size = shard_size
        self.split = split
        self._done: list[ShardWriter] = []
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
            self._cur = ShardWriter(str(Path(self.path) / SHARD_TEMPLATE.format(self.shard_id)), self.opts)
            return
        self._cur = ShardWriter(self._shard_path(0), self.opts)

    def _shard_path(self, shard_id: int) -> str:
        if self.shard_size is None:
            return self.path
        return str(Path(self.path) / SHARD_TEMPLATE.format(shard_id))

    def write(self, sample: Mapping) -> None:
        cur = self._cur
        if self.shard_size is not None and cur.current + 8 * cur.num_samples > self.shard_size:
            cur = self._new_shard()
        if isinstance(sample, JinxSample) and not sample._lent:
            prepared = Passthrough(self.opts, cur, sample, self.count).sample(sample._raw)
        else:
            if not isinstance(sample, Mapping):
                raise UnsupportedValueError(
                    f"a JINX sample must be a mapping, got {type(sample).__name__}",
                    path=self.path, sample=self.count,
                )
            prepared = Encoder(self.opts, cur, self.count).sample(sample)
        cur.write_line(orjson.dumps(prepared))
        self.count += 1

    def _new_shard(self) -> ShardWriter:
        next_path = self._shard_path(self.shard_id + 1)
        self._cur.close(self.shard_id, self._prev, next_path, self.split)
        self._done.append(self._cur)
        self._prev = self._cur.path
        self.shard_id += 1
        self._cur = ShardWriter(next_path, self.opts)
        return self._cur

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._hook is not None:
            k, n = self._hook
            prev = SHARD_TEMPLATE.format(k - 1) if k > 0 else None
            self._prev, nxt = prev, (SHARD_TEMPLATE.format(k + 1) if k + 1 < n else None)
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
            base.remove_empty_dir(self.path)


def merge_index(directory, parts, **options) -> None:
    """Nothing to merge: a JINX dataset is its chain of self-describing shards (the
    sharded-writing hook of :mod:`hpcio.formats.contract`)."""
