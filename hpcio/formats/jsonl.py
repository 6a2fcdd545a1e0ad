"""Plain JSON lines (``.jsonl``, ``.jsonl.zst``, ``.jsonl.gz``) with random access.

The reader maps the file (or its decompressed bytes) and builds a newline index in C
(``_index.scan_lines``), so ``ds[i]`` is one ``orjson.loads`` of one line.  Whole-file
compressed inputs are decompressed into memory, or into ``cache_dir`` when given (a few
MiB at a time, so a file larger than memory opens); the index is then written beside
them in the cache and mapped, so a second open (by any
process) is instant and the index takes no anonymous memory.  Blank lines are skipped.
Nothing is written anywhere else (no temporary files).

>>> import hpcio, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "toy.jsonl.zst")
>>> with hpcio.open_writer(path, format="jsonl") as w:
...     for i in range(3):
...         w.write({"id": i, "text": f"line {i}"})
>>> ds = hpcio.open(path)
>>> len(ds), ds[-1]["text"]
(3, 'line 2')
"""

from __future__ import annotations

import hashlib
import mmap
import os
import socket
from collections.abc import Mapping, Sequence

import numpy as np
import orjson

from .. import codecs as _codecs_table
from .._core._records import loads_exact
from ..errors import CorruptShardError, InvalidArgumentError, ShardNotFoundError, UnsupportedValueError
from ..registry import Capabilities
from . import _values, base
from ._checksums import HashedFile, Manifest, manifest_path, validate_files
from .reports import InspectReport, VerifyReport

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "SUFFIXES", "inspect", "verify"]

NAME = "jsonl"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=False, batch_read=True)

#: file suffix -> whole-file codec (None: plain text)
SUFFIXES = {
    ".jsonl": None, ".ndjson": None, ".jsonl.zst": "zstd", ".jsonl.zstd": "zstd",
    ".jsonl.gz": "gzip", ".ndjson.zst": "zstd", ".ndjson.gz": "gzip",
}
#: largest decompressed input accepted (a corrupt header must not exhaust memory)
DECOMPRESS_LIMIT = 1 << 40


def _codec_of(path: str):
    name = os.path.basename(path).lower()
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return True, SUFFIXES[suffix]
    return False, None


def sniff(path) -> bool:
    """True for a file named ``*.jsonl``/``*.ndjson`` (optionally ``.zst``/``.gz``)."""
    path = os.fspath(path)
    return os.path.isfile(path) and _codec_of(path)[0]


# Bytes of a file indexed at a time: the pages of each part are unmapped once indexed,
# so opening a file larger than memory keeps no more than this of it resident.
INDEX_CHUNK_BYTES = 16 << 20

# The cached line index, ``<key>.lines.u64``: for each non-blank line in order, its start
# and end byte offsets as two little-endian uint64 (16 bytes a line, no header), so it is
# written part by part and mapped as an (n, 2) array.
INDEX_SUFFIX = ".lines.u64"
_PAIRS = np.dtype("<u8")


def _index_parts(data, drop_pages):
    """The (start, end) offset pairs of the non-blank lines of ``data`` (bytes-like with
    ``find``/``rfind``), one (n, 2) array per part of whole lines of about
    :data:`INDEX_CHUNK_BYTES`; ``drop_pages()`` is called after each part."""
    size = len(data)
    at = 0
    while at < size:
        end = min(size, at + INDEX_CHUNK_BYTES)
        if not hasattr(data, "rfind"):
            end = size
        elif end < size:  # end the part after a newline; a longer line makes it longer
            newline = data.rfind(b"\n", at, end)
            if newline < 0:
                newline = data.find(b"\n", end)
            end = size if newline < 0 else newline + 1
        pairs = np.column_stack(_index_part(data, at, end)).astype(_PAIRS, copy=False)
        drop_pages()
        yield pairs
        at = end


def _index_lines(data, drop_pages) -> np.ndarray:
    """The (n, 2) offset pairs of :func:`_index_parts`, in memory."""
    return np.concatenate([np.zeros((0, 2), _PAIRS), *_index_parts(data, drop_pages)])


def _write_index(path: str, data, drop_pages) -> None:
    """Write the offset pairs of ``data`` to ``path`` (see :data:`INDEX_SUFFIX`) a part at a
    time, so building it holds one part in memory, not the index."""
    with _AtomicFile(path) as f:
        for pairs in _index_parts(data, drop_pages):
            f.write(pairs)


def _map_index(path: str):
    """The read-only map of the index file ``path`` (None when empty: nothing to map) and
    its (n, 2) offset pairs viewed from it."""
    with open(path, "rb") as f:  # the map holds its own descriptor
        if not os.fstat(f.fileno()).st_size:
            return None, np.zeros((0, 2), _PAIRS)
        from .._core import _io

        mm = _io.map_file(f.fileno())
    return mm, np.frombuffer(mm, _PAIRS).reshape(-1, 2)


def _index_part(data, at: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of the non-blank lines of ``data[at:end]``, which ends after
    a newline or at the end."""
    from .._core import _index

    with memoryview(data) as whole, whole[at:end] as buf:
        bounds = _index.scan_lines(buf, at)
        starts, ends = bounds[:-1], bounds[1:]
        if not len(starts):
            return starts, ends
        view = np.frombuffer(buf, dtype=np.uint8)
        # a JSON line starts with its value; only lines starting with whitespace can be blank
        first = view[(starts - at).astype(np.intp)]
        maybe = np.flatnonzero(np.isin(first, np.frombuffer(b" \t\r\n", dtype=np.uint8)))
        if maybe.size:
            blank = [int(i) for i in maybe if not bytes(view[starts[i] - at:ends[i] - at]).strip()]
            if blank:
                keep = np.ones(len(starts), dtype=bool)
                keep[blank] = False
                starts, ends = starts[keep], ends[keep]
        del view, first
    return starts, ends


class Reader(base.Reader):
    """A JSON-lines file with random access through a newline index.

    Parameters
    ----------
    path
        ``.jsonl`` (mapped), ``.jsonl.zst`` or ``.jsonl.gz`` (decompressed once).
    cache_dir
        Where to keep the decompressed bytes and the line index between opens; both are
        mapped from there, and every process given the same ``cache_dir`` reuses what
        the first one wrote; a compressed file is decompressed into it a few MiB at a
        time.  ``None`` keeps both in memory only.
    validate_hashes
        True: check the file (as stored, compressed or not) against the xxh3_64 its
        ``<file>.hashes.json`` records before reading, raising
        :class:`~hpcio.errors.ChecksumMismatchError` naming it; ``"xxh3_64"`` also
        requires the manifest.
    """

    def __init__(self, path, cache_dir=None, validate_hashes: bool | str = False):
        super().__init__(path)
        if not os.path.isfile(self.path):
            raise ShardNotFoundError("no such JSONL file", path=self.path)
        validate_files([self.path], validate_hashes)
        self._mm = None
        _, codec = _codec_of(self.path)
        st = os.stat(self.path)
        key = f"{os.path.basename(self.path)}.{st.st_size}.{st.st_mtime_ns}"
        key = f"{key[:80]}-{hashlib.sha1(os.path.abspath(self.path).encode()).hexdigest()[:12]}"
        data_path = self.path
        if codec is not None:
            if cache_dir is None:
                with open(self.path, "rb") as f:
                    self.buf = self._decompress(codec, f.read())
                data_path = None
            else:
                os.makedirs(cache_dir, exist_ok=True)
                data_path = os.path.join(cache_dir, key + ".jsonl")
                if not os.path.exists(data_path):
                    # A part at a time: the file may be larger than memory.
                    with open(self.path, "rb") as f, _AtomicFile(data_path) as out:
                        _codecs_table.get_codec(codec).decompress_file(f, out, DECOMPRESS_LIMIT, path=self.path)
        if data_path is not None:
            with open(data_path, "rb") as f:  # the map holds its own descriptor
                if os.fstat(f.fileno()).st_size:
                    from .._core import _io

                    self._mm = _io.map_file(f.fileno())
                    self.buf = memoryview(self._mm)
                else:
                    self.buf = memoryview(b"")
        self._index_mm = None
        data = self._mm if self._mm is not None else self.buf
        if cache_dir is None:
            pairs = _index_lines(data, self.drop_pages)
        else:
            index_path = os.path.join(cache_dir, key + INDEX_SUFFIX)
            if not os.path.exists(index_path):
                os.makedirs(cache_dir, exist_ok=True)
                _write_index(index_path, data, self.drop_pages)
            self._index_mm, pairs = _map_index(index_path)
        self._set_index(pairs)

    def _set_index(self, pairs: np.ndarray) -> None:
        """Take the offsets from the (n, 2) ``pairs``: ``starts``/``ends`` as arrays, and
        as memoryviews for :meth:`read` (indexing one is cheaper than a numpy array)."""
        self._n = len(pairs)
        self.starts, self.ends = pairs[:, 0], pairs[:, 1]
        flat = memoryview(np.asarray(pairs, dtype=np.uint64).reshape(-1))  # type: ignore[arg-type]
        self._s, self._e = flat[0::2], flat[1::2]

    def _decompress(self, codec: str, data: bytes):
        return _codecs_table.get_codec(codec).decompress(data, DECOMPRESS_LIMIT, path=self.path)

    def __len__(self) -> int:
        return self._n

    def drop_pages(self) -> None:
        for mm in (self._mm, self._index_mm):
            if mm is not None:
                mm.madvise(mmap.MADV_DONTNEED)

    def sample_nbytes(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Bytes of the lines ``start`` to ``stop`` (the end when None), which the
        converter balances shards with, asking a window at a time."""
        return (self.ends[start:stop] - self.starts[start:stop]).astype(np.int64)

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        a = self._s[i]
        try:
            obj = loads_exact(self.buf[a : self._e[i]])
        except ValueError as exc:  # not JSON, or (decoded by Python's json) not UTF-8
            raise CorruptShardError(f"garbled JSON on {self._where(a, exc)}", path=self.path, offset=a,
                                    sample=i) from None
        if type(obj) is not dict:
            raise CorruptShardError(
                f"JSON line holds a {type(obj).__name__}, expected an object",
                path=self.path, offset=a, sample=i,
            )
        return obj if fields is None else base.project(obj, fields)

    def _where(self, start: int, exc: ValueError) -> str:
        """``line L, column C: reason`` of a parse error in the line starting at byte
        ``start``: the file's line (blank lines counted), not the parser's line 1."""
        step = 1 << 26  # counted a piece at a time: an error deep in a large file copies little
        line = 1 + sum(bytes(self.buf[lo : min(lo + step, start)]).count(b"\n") for lo in range(0, start, step))
        reason, col = getattr(exc, "msg", None), getattr(exc, "colno", None)
        if reason is None or col is None:
            return f"line {line}: {exc}"
        return f"line {line}, column {col}: {reason}"

    def read_many(self, indices, fields=None) -> list:
        read = self.read
        return [read(i, fields) for i in np.asarray(indices).tolist()]

    def iter_range(self, start=0, stop=None, fields=None):
        stop = len(self) if stop is None else stop
        read = self.read
        for i in range(start, stop):
            yield read(i, fields)

    def close(self) -> None:
        views = [self._s, self._e] + ([self.buf] if isinstance(self.buf, memoryview) else [])
        for view in views:
            try:
                view.release()
            except BufferError:
                pass
        self.starts = self.ends = None  # their views of the index map
        for mm in (self._mm, self._index_mm):
            if mm is not None:
                try:
                    mm.close()
                except BufferError:  # a caller still holds a view; the map dies with it
                    pass


class _AtomicFile:
    """A file written under a temporary name beside its target and renamed on success."""

    def __init__(self, path: str):
        self.path = path
        head, tail = os.path.split(path)
        self.tmp = os.path.join(head, f".{tail}.tmp-{socket.gethostname()}-{os.getpid()}")

    def __enter__(self):
        self.f = open(self.tmp, "wb")
        return self.f

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.discard()
            return False
        try:
            self.f.close()
        except BaseException:
            self.discard()
            raise
        os.replace(self.tmp, self.path)
        return False

    def discard(self) -> None:
        """Close (a failing flush is moot) and remove the temporary file."""
        f = getattr(self, "f", None)
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
        base.remove_files([self.tmp])


def _unwritable(sample: Mapping, exc: TypeError) -> str:
    """Why orjson refused ``sample``: the bytes value JSON has no form for, named where it
    lies, and orjson's own words."""
    for field, value in sample.items():
        nested = _values.bytes_inside(value, str(field))
        if nested:
            return (f"field {field!r}: {nested} is bytes, which JSON Lines cannot store (JSON has no "
                    "binary type: write binary fields to MDS, JINX, WebDataset, Zarr, HDF5, "
                    f"Parquet or MessagePack); sample cannot be written as JSON: {exc}")
    return f"sample cannot be written as JSON: {exc}"


class Writer(base.Writer):
    """Writes one JSON object per line; ``.zst``/``.gz`` names compress the whole file.

    numpy arrays and scalars are written as JSON lists and numbers (they read back as
    such).  ``bytes`` have no JSON form and raise :class:`UnsupportedValueError`.
    The file appears only when :meth:`close` succeeds.

    ``hashes``: ``["xxh3_64"]`` (None, the default) records the xxh3_64 of the file as
    stored in ``<file>.hashes.json`` beside it (:mod:`hpcio.formats._checksums`), for
    ``validate_hashes=True`` and ``hpcio verify``; ``[]`` writes the file alone.
    """

    def __init__(self, path, compression_level: int | None = None, hashes=None):
        super().__init__(path)
        self.manifest = Manifest(hashes, "JSONL")
        known, self.codec = _codec_of(self.path)
        if not known:
            raise InvalidArgumentError(
                f"cannot tell the JSONL flavour of {self.path!r}: name it "
                + ", ".join(f"*{s}" for s in SUFFIXES)
            )
        self.level = compression_level
        self._out = _AtomicFile(self.path)
        self._plain = _AtomicFile(self.path + ".plain") if self.codec else None
        self._hashes: _AtomicFile | None = None
        self._f = (self._plain or self._out).__enter__()
        if self.codec is None:
            self._f = self.manifest.wrap(self._f)

    def write(self, sample: Mapping) -> None:
        try:
            line = orjson.dumps(sample, option=orjson.OPT_SERIALIZE_NUMPY)
        except TypeError as exc:
            raise UnsupportedValueError(_unwritable(sample, exc), path=self.path, sample=self.count) from None
        self._f.write(line)
        self._f.write(b"\n")
        self.count += 1

    def close(self) -> None:
        if self._f is None:
            return
        with self.aborting():
            stored = self._f
            if self.codec is not None:
                self._f.flush()
                with open(self._plain.tmp, "rb") as src:
                    data = src.read()
                self._plain.discard()
                codec = _codecs_table.get_codec(self.codec)
                stored = self.manifest.wrap(self._out.__enter__())
                stored.write(codec.compress(data, self.level))
            if isinstance(stored, HashedFile):
                # written whole before the file is published, which it follows
                self.manifest.record(self.path, stored)
                target = manifest_path(self.path, single_file=True)
                self._hashes = _AtomicFile(target)
                self._hashes.__enter__().write(self.manifest.encode(target))
                self._hashes.f.close()
            self._out.__exit__(None, None, None)
            if self._hashes is not None:
                self._hashes.__exit__(None, None, None)
            self._f = None

    def abort(self) -> None:
        if self._f is None:
            return
        self._f = None
        for atomic in (self._plain, self._out, self._hashes):
            if atomic is not None:
                atomic.discard()


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> InspectReport:
    """Lines of a JSONL file; ``fields`` are the keys of the first line with the kinds of
    their values (other lines may differ: JSON objects are untyped)."""
    with Reader(path) as r:
        first = r.read(0) if len(r) else {}
        fields = {k: _values.kind_of(v, field=k, sample=0, path=r.path) for k, v in first.items()}
        return base.inspect_report(
            NAME, path, samples=len(r), shards=1, fields=fields,
            stored_bytes=base.files_bytes([r.path]),
            details={"compression": _codec_of(r.path)[1],
                     "decoded_bytes": int(r.ends[-1]) if len(r) else 0})


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Check the file against its hash manifest, then decompress it and parse every line."""
    return base.verify_samples(NAME, path, lambda: Reader(path), lambda p: [os.fspath(p)], max_errors=max_errors,
                               manifest=True)
