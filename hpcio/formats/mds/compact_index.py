"""``index.hpcio``: a compact form of an MDS dataset's ``index.json``.

Every process of a job opening a dataset of 10^5 shards would otherwise parse a 30 MB
``index.json`` into 10^5 Python objects.  The compact index holds what a reader needs
as fixed-width arrays read in one request (3.6 MB at 10^5 shards), and each shard's own
entry as a short JSON object read and parsed only when that shard is opened.  It sits beside ``index.json``, which stays exactly what
mosaicml-streaming writes and reads.

It is used only when its header describes the very ``index.json`` beside it: a dataset
whose ``index.json`` was rewritten since, or one written by another library, is read
from ``index.json`` as before.  The header records index.json's size, its mtime in
nanoseconds and the xxh3-64 digest of its bytes.  One ``stat`` of index.json that gives
the recorded size and mtime is trusted without reading a byte of it: every process of a
job would otherwise read all of it (30 MB at 10^5 shards) to check the digest.  A stat
that differs in mtime only (a copy that did not keep the times, ``touch``) has the
digest computed, and the compact index is used when that matches.  Neither the inode
nor the ctime is recorded: ``cp -p`` and ``rsync -a`` keep the size and mtime but give
a new inode and ctime, and their copies keep the fast path.  A rewrite of index.json
that keeps both its size and its mtime to the nanosecond (to the second, on a
filesystem that keeps seconds) is not seen; each shard is still checked against its
entry when it is opened, and ``hpcio index`` rewrites the compact index.  The MDS writer and the converter record no mtime (0), so that a dataset's
files are the same bytes on every run and at any rank count; ``hpcio index`` and
``hpcio stage`` record the mtime of the copy they vouch for.  Its own bytes are
protected by a second digest, so the sample counts it holds are those its writer
checked against the shard files; a reader then checks each shard's size and count only
when it opens that shard, not every shard before it.

Byte layout (version 2; every integer little-endian; ``K`` shards)::

    offset  size      field
    0       8         magic b"HPCIOMDS"
    8       4  u32    format version (2); a reader ignores a version it does not know
    12      4  u32    header size H (72)
    16      8  u64    K, the number of shards
    24      8  u64    size in bytes of the index.json this was made from
    32      8  u64    xxh3-64 of those index.json bytes
    40      8  u64    C, bytes of the configurations section
    48      8  u64    E, bytes of the entries section
    56      8  u64    xxh3-64 of bytes [0, 56) followed by bytes [64, end of file)
    64      8  i64    mtime of that index.json, in nanoseconds since the epoch; 0 when
                      not recorded (as writers and the converter leave it)
    H       8(K+1)    u64 cum[K+1]: cum[0] = 0, cum[k+1] - cum[k] = samples of shard k
    ...     8K        u64 raw_bytes[K]: bytes of shard k uncompressed (raw_data.bytes)
    ...     8K        u64 file_bytes[K]: bytes of the file opened (zip_data.bytes, else raw)
    ...     8K        u64 entry_end[K]: end of shard k's entry in the entries section
                      (its start is entry_end[k-1], 0 for shard 0)
    ...     4K        u32 config_id[K]: shard k's configuration in the configurations list
    ...     pad       zero bytes up to a multiple of 8
    ...     C         the configurations: a UTF-8 JSON list of the distinct shard
                      configurations (an index.json entry without samples, raw_data and
                      zip_data), zero-padded to a multiple of 8
    ...     E         the entries: shard k's {"raw_data", "samples", "zip_data"} as
                      UTF-8 JSON at [entry_end[k-1], entry_end[k]); the file ends here

Version 1 is the same without the mtime (H = 64): it is read, index.json's digest
always checked.  Version 2 files are ignored by readers that know only version 1.

Shard ``k``'s ``index.json`` entry is its configuration updated with its entry, and is
checked like any ``index.json`` entry when the shard is first looked at.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import xxhash

from ...errors import CorruptShardError, IndexOutOfRangeError, ShardNotFoundError, TruncatedShardError
from .compression import parse_compression
from .index import INDEX_NAME, NAME, _check_entry, _dataset_dir, _entry_columns, _load_index, _loads

__all__ = ["COMPACT_NAME", "write_compact_index", "update_compact_index"]

COMPACT_NAME = "index.hpcio"
_MAGIC = b"HPCIOMDS"
_VERSION = 2
_HEADER_V1 = struct.Struct("<8sIIQQQQQQ")
_HEADER = struct.Struct("<8sIIQQQQQQq")
_HEADERS = {1: _HEADER_V1, 2: _HEADER}
_DIGEST_AT = 56
_PER_SHARD = ("samples", "raw_data", "zip_data")
_CHUNK = 1 << 20
# Checked shard entries kept at once: a pass over every shard must not hold one Python
# object per shard; an entry evicted is parsed again (microseconds) when next used.
_KEPT_ENTRIES = 4096


def _pad8(n: int) -> int:
    return -n % 8


def _file_xxh3(fd: int, size: int, skip: tuple[int, int] | None = None) -> int:
    """xxh3-64 of the first ``size`` bytes of ``fd`` (without bytes ``[skip)``), read a
    MiB at a time into one buffer: hashing a 30 MB index.json through a mapping would
    add its pages to the process's resident memory."""
    h = xxhash.xxh3_64()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    pos = 0
    while pos < size:
        n = os.preadv(fd, [view[: min(_CHUNK, size - pos)]], pos)
        if n <= 0:
            break
        lo, hi = pos, pos + n
        if skip is not None and skip[0] < hi and lo < skip[1]:
            if lo < skip[0]:
                h.update(view[: skip[0] - lo])
            if skip[1] < hi:
                h.update(view[skip[1] - lo : n])
        else:
            h.update(view[:n])
        pos = hi
    return h.intdigest()


# --- writing ------------------------------------------------------------------------------
def _encode(entries: list, index_bytes: int, index_mtime_ns: int, index_digest: int) -> bytes:
    """The compact index of the shard ``entries`` of an index.json of ``index_bytes``
    bytes, modified at ``index_mtime_ns``, hashing to ``index_digest``."""
    k = len(entries)
    configs: list = []
    known: dict = {}
    config_ids = np.zeros(k, "<u4")
    cum = np.zeros(k + 1, "<u8")
    raw_bytes = np.zeros(k, "<u8")
    file_bytes = np.zeros(k, "<u8")
    entry_end = np.zeros(k, "<u8")
    parts = []
    end = 0
    for j, entry in enumerate(entries):
        config = {key: value for key, value in entry.items() if key not in _PER_SHARD}
        key = json.dumps(config, sort_keys=True)
        if key not in known:
            known[key] = len(configs)
            configs.append(config)
        config_ids[j] = known[key]
        # an entry may leave out zip_data (it then has none): the compact one says null
        part = json.dumps({name: entry.get(name) for name in _PER_SHARD}, sort_keys=True,
                          separators=(",", ":")).encode()
        parts.append(part)
        end += len(part)
        entry_end[j] = end
        cum[j + 1] = cum[j] + entry["samples"]
        raw_bytes[j] = entry["raw_data"]["bytes"]
        file_bytes[j] = (entry.get("zip_data") or entry["raw_data"])["bytes"]
    config_data = json.dumps(configs, sort_keys=True, separators=(",", ":")).encode()
    config_data += bytes(_pad8(len(config_data)))
    ids = config_ids.tobytes()
    body = b"".join([cum.tobytes(), raw_bytes.tobytes(), file_bytes.tobytes(), entry_end.tobytes(),
                     ids, bytes(_pad8(len(ids))), config_data, *parts])
    head = _HEADER.pack(_MAGIC, _VERSION, _HEADER.size, k, index_bytes, index_digest,
                        len(config_data), end, 0, index_mtime_ns)
    return _signed(head + body)


def _signed(data: bytes) -> bytes:
    """``data``, a compact index, with its own digest (bytes 56 to 64) computed."""
    h = xxhash.xxh3_64(data[:_DIGEST_AT])
    h.update(memoryview(data)[_DIGEST_AT + 8 :])
    return data[:_DIGEST_AT] + struct.pack("<Q", h.intdigest()) + data[_DIGEST_AT + 8 :]


def _write(directory: str, entries: list, durable: bool = False, index_file: str | None = None,
           record_mtime: bool = False) -> str:
    """Write ``index.hpcio`` of ``directory`` from the shard ``entries`` that the
    index.json in ``index_file`` (default: the dataset's own) holds, atomically; returns
    its path.  Writers name the index.json they are about to publish, so that a dataset
    becomes visible, with both files, when index.json is renamed into place.

    Writers leave the mtime out (0): a dataset's files are then the same bytes on every
    run and at any rank count.  ``record_mtime`` is for ``hpcio index`` and staging,
    which vouch for one copy of a dataset."""
    index_path = index_file or os.path.join(directory, INDEX_NAME)
    fd = os.open(index_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        digest = _file_xxh3(fd, st.st_size)
    finally:
        os.close(fd)
    mtime_ns = st.st_mtime_ns if record_mtime else 0
    return _publish(directory, _encode(entries, st.st_size, mtime_ns, digest), durable)


def _publish(directory: str, data: bytes, durable: bool) -> str:
    """``data`` written as the ``index.hpcio`` of ``directory``, atomically."""
    path = os.path.join(directory, COMPACT_NAME)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def write_compact_index(path, *, check_files: bool = True) -> str:
    """Write ``index.hpcio`` beside the ``index.json`` of the MDS dataset at ``path``
    (a dataset written by streaming, mldataforge or an older hpcio); returns its path.

    The compact index vouches for the sample counts of every shard, so that readers no
    longer check the shards before the one they read: with ``check_files`` (default)
    each shard file's size and record count are first checked against ``index.json``
    (one open of every shard, once, here).  ``index.json`` is not changed.

    A compact index already made from these very ``index.json`` bytes (its digest
    matches) is kept: only its record of index.json's size and mtime is brought up to
    date (a copy that did not keep the times), and no shard is checked again.
    """
    from .shards import _check_count

    directory = _dataset_dir(path)
    compact = _usable_compact(directory)
    if compact is not None:
        try:
            if compact.matched == "stat":
                return compact.path
            if compact.version == _VERSION:
                return _restamp(directory, compact)
            return _write(directory, [info.entry for info in compact], durable=True, record_mtime=True)
        finally:
            compact.close()
    shards = _load_index(directory)
    if check_files:
        for info in shards:
            _check_count(info, os.path.join(directory, info.file_basename))
    return _write(directory, [info.entry for info in shards], durable=True, record_mtime=True)


def update_compact_index(path) -> str | None:
    """Give the MDS dataset at ``path`` a compact index when it has none that matches the
    ``index.json`` beside it, as a staged copy of a dataset written by streaming or
    mldataforge needs (the shard files checked, see :func:`write_compact_index`).
    Returns the path of ``index.hpcio`` when it was written, None when one already
    matched (it is left as copied: a staged copy keeps its source's bytes) or the dataset
    has no shards (an empty ``index.json`` costs nothing to open)."""
    directory = _dataset_dir(path)
    compact = _usable_compact(directory)
    if compact is not None:
        compact.close()
        return None
    if not _load_index(directory):
        return None
    return write_compact_index(directory)


def _usable_compact(directory: str) -> _CompactIndex | None:
    """The dataset's compact index, None when it has none that matches index.json or
    its own is damaged: either way the one to write is built from index.json."""
    try:
        return _load_compact(directory)
    except (CorruptShardError, TruncatedShardError) as exc:
        if exc.path != os.path.join(directory, COMPACT_NAME):
            raise
        return None


def _restamp(directory: str, compact: _CompactIndex) -> str:
    """``compact`` rewritten with the mtime of the index.json beside it (whose digest it
    holds) in its header."""
    mtime_ns = os.stat(os.path.join(directory, INDEX_NAME)).st_mtime_ns
    with open(compact.path, "rb") as f:
        data = bytearray(f.read())
    struct.pack_into("<q", data, _HEADER.size - 8, mtime_ns)
    return _publish(directory, _signed(bytes(data)), durable=True)


# --- reading ------------------------------------------------------------------------------
class _CompactIndex(Sequence):
    """The shards of a dataset as its compact index holds them: the tables read once, and
    each shard's checked entry (``_ShardInfo``) read and built on first use.

    The file is read, not mapped: a mapping would keep the file's pages cached and its
    mount busy after the reader closes, and the entries section (as large as index.json)
    is read one entry at a time, through a descriptor held until :meth:`close`."""

    def __init__(self, path: str, fd: int, k: int, sections: dict, configs: list):
        self.path = path
        # a file object, so that a reader dropped without close() releases it too
        self._file = os.fdopen(fd, "rb", buffering=0)
        self._k = k
        self.cum = sections["cum"]
        self.raw_bytes = sections["raw_bytes"]
        self.file_bytes = sections["file_bytes"]
        self._entry_end = sections["entry_end"]
        self._config_ids = sections["config_ids"]
        self._entries_at = sections["entries_at"]
        self.configs = configs
        self._infos: OrderedDict = OrderedDict()  # the checked entries used last
        self.version = _VERSION
        self.matched = "stat"  # how index.json was recognised: "stat" or "digest"

    def __len__(self) -> int:
        return self._k

    def close(self) -> None:
        """Release the file; an entry asked for later opens it for that read alone."""
        self._file.close()

    def _pread(self, size: int, offset: int) -> bytes:
        if not self._file.closed:
            return os.pread(self._file.fileno(), size, offset)
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, size, offset)
        finally:
            os.close(fd)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(self._k))]
        k = int(k)
        if k < 0:
            k += self._k
        if not 0 <= k < self._k:
            raise IndexOutOfRangeError(f"shard {k} out of range for {self._k} shards")
        info = self._infos.get(k)
        if info is None:
            info = self._infos[k] = self._entry(k)
            if len(self._infos) > _KEPT_ENTRIES:
                self._infos.popitem(last=False)
        else:
            self._infos.move_to_end(k)
        return info

    def _entry(self, k: int):
        lo = int(self._entry_end[k - 1]) if k else 0
        hi = int(self._entry_end[k])
        at = self._entries_at + lo

        def bad(detail: str) -> CorruptShardError:
            return CorruptShardError(f"shard entry {k} of {COMPACT_NAME}: {detail}", path=self.path, offset=at)

        raw = self._pread(hi - lo, at)
        if len(raw) != hi - lo:
            raise TruncatedShardError(f"shard entry {k} of {COMPACT_NAME} ends past the file's end",
                                      path=self.path, offset=at + len(raw))
        try:
            part = _loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad(f"not valid JSON: {getattr(exc, 'msg', None) or exc}") from None
        if not isinstance(part, dict) or set(part) != set(_PER_SHARD):
            raise bad(f"expected an object of {', '.join(_PER_SHARD)}")
        entry = {**self.configs[int(self._config_ids[k])], **part}
        info = _check_entry(k, entry, self.path, source=COMPACT_NAME, offset=at)
        samples = int(self.cum[k + 1] - self.cum[k])
        if info.samples != samples:
            raise bad(f"'samples' is {info.samples}; the count table says {samples}")
        file_bytes = info.zip_bytes if info.whole_shard else info.raw_bytes
        if info.raw_bytes != int(self.raw_bytes[k]) or file_bytes != int(self.file_bytes[k]):
            raise bad(f"its file sizes ({info.raw_bytes}, {file_bytes}) differ from the size tables "
                      f"({int(self.raw_bytes[k])}, {int(self.file_bytes[k])})")
        return info


def _load_compact(directory: str) -> _CompactIndex | None:
    """The dataset's compact index, or None when it has none, or one made from another
    index.json than the one beside it (or of a version this reader does not know).
    ``matched`` on the result says how index.json was recognised: ``"stat"`` (its size
    and mtime; no byte of it read) or ``"digest"``.

    Raises CorruptShardError / TruncatedShardError naming ``index.hpcio`` and the byte
    offset where the file is damaged."""
    path = os.path.join(directory, COMPACT_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptShardError(f"{COMPACT_NAME} is not a regular file", path=path)
        size = st.st_size
        head = os.pread(fd, _HEADER.size, 0)
        if len(head) < 16:
            raise TruncatedShardError(f"{COMPACT_NAME} is {size} bytes, too short for its header",
                                      path=path, offset=len(head))
        magic, version = head[:8], struct.unpack_from("<I", head, 8)[0]
        if magic != _MAGIC:
            raise CorruptShardError(f"{COMPACT_NAME} starts with {magic!r}, expected {_MAGIC!r}", path=path, offset=0)
        header = _HEADERS.get(version)
        if header is None:
            os.close(fd)
            return None  # written by another hpcio version: index.json serves
        if len(head) < header.size:
            raise TruncatedShardError(f"{COMPACT_NAME} is {size} bytes, too short for its "
                                      f"{header.size}-byte header", path=path, offset=len(head))
        fields = header.unpack(head[: header.size])
        header_size, k, json_bytes, json_digest, c, e, digest = fields[2:9]
        json_mtime_ns = fields[9] if version >= 2 else None
        if header_size != header.size:
            raise CorruptShardError(f"header size is {header_size}, version {version} has {header.size}",
                                    path=path, offset=12)
        matched = _matches_index(directory, json_bytes, json_mtime_ns, json_digest)
        if matched is None:
            os.close(fd)
            return None  # made from another index.json
        expected = header.size + 8 * (k + 1) + 24 * k + 4 * k + _pad8(4 * k) + c + e
        if c % 8:
            raise CorruptShardError(f"the configurations section is {c} bytes, not a multiple of 8",
                                    path=path, offset=40)
        if size != expected:
            cls = TruncatedShardError if size < expected else CorruptShardError
            raise cls(f"{COMPACT_NAME} is {size} bytes; its header ({k} shards, {c} bytes of configurations, "
                      f"{e} bytes of entries) says {expected}", path=path, offset=min(size, expected))
        got = _file_xxh3(fd, size, skip=(_DIGEST_AT, _DIGEST_AT + 8))
        if got != digest:
            raise CorruptShardError(f"{COMPACT_NAME} hashes to xxh3-64 {got:016x}, its header says {digest:016x}",
                                    path=path, offset=_DIGEST_AT)
        # the tables and configurations; the entries are read one by one when first used
        tables = os.pread(fd, size - e, 0)
        sections, configs = _sections(path, tables, header.size, k, c, e)
        index = _CompactIndex(path, fd, k, sections, configs)
    except BaseException:
        os.close(fd)
        raise
    index.version, index.matched = version, matched
    return index


def _matches_index(directory: str, json_bytes: int, json_mtime_ns: int | None, json_digest: int) -> str | None:
    """How index.json beside the compact index is known to be the one it was made from:
    ``"stat"`` (its size and mtime are the recorded ones), ``"digest"`` (its size and
    digest are), or None (it is another one)."""
    index_path = os.path.join(directory, INDEX_NAME)
    try:
        st = os.stat(index_path)
    except FileNotFoundError:
        raise ShardNotFoundError("no index.json: not an MDS dataset", path=index_path) from None
    if st.st_size != json_bytes:
        return None
    if json_mtime_ns and st.st_mtime_ns == json_mtime_ns:
        return "stat"
    return "digest" if _index_digest(index_path) == json_digest else None


def _index_digest(index_path: str) -> int:
    """xxh3-64 of the bytes of index.json."""
    fd = os.open(index_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _file_xxh3(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _sections(path: str, mapped: bytes, at: int, k: int, c: int, e: int) -> tuple[dict, list]:
    """The arrays and configurations (after a header of ``at`` bytes) of a compact index
    whose size and digest are checked, each checked in turn; errors name the offset of
    the first bad value."""

    def array(dtype: str, count: int):
        """The next ``count`` values of type ``dtype`` and their offset."""
        nonlocal at
        view = np.frombuffer(mapped, dtype, count, at)
        at += view.nbytes
        return view, at - view.nbytes

    cum, cum_at = array("<u8", k + 1)
    raw_bytes, raw_at = array("<u8", k)
    file_bytes, _ = array("<u8", k)
    entry_end, end_at = array("<u8", k)
    config_ids, ids_at = array("<u4", k)
    at += _pad8(4 * k)
    configs_at = at
    entries_at = configs_at + c

    def first_bad(mask, start: int, width: int, detail: str):
        j = int(np.argmax(mask))
        raise CorruptShardError(f"{detail} at element {j}", path=path, offset=start + width * j)

    if cum[0] != 0:
        raise CorruptShardError(f"the count table starts at {int(cum[0])}, not 0", path=path, offset=cum_at)
    if k:
        counts = np.diff(cum.astype(np.int64, copy=False)) if cum[-1] < 1 << 63 else None
        if counts is None:
            first_bad(cum >= 1 << 63, cum_at, 8, "a sample total does not fit in 63 bits")
        if (counts < 0).any():
            first_bad(np.concatenate([[False], counts < 0]), cum_at, 8, "the count table decreases")
        if (raw_bytes >= 1 << 32).any():
            first_bad(raw_bytes >= 1 << 32, raw_at, 8, "a shard is 4 GiB or more; MDS offsets are u32")
        # a shard holds its count and n + 1 u32 offsets: a count its size cannot hold is refused
        short = 8 + 4 * counts.astype(np.uint64) > raw_bytes
        if short.any():
            first_bad(short, raw_at, 8, "a shard is too small for its sample count")
        rises = np.diff(entry_end.astype(np.int64), prepend=0) > 0
        if not rises.all():
            first_bad(~rises, end_at, 8, "the entry ends do not rise")
        if entry_end[-1] != e:
            raise CorruptShardError(f"the last entry ends at {int(entry_end[-1])}; the entries are {e} bytes",
                                    path=path, offset=end_at + 8 * (k - 1))
    elif e:
        raise CorruptShardError(f"no shards but {e} bytes of entries", path=path, offset=48)
    try:
        configs = _loads(mapped[configs_at:entries_at].rstrip(b"\0"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptShardError(f"the configurations are not valid JSON: {getattr(exc, 'msg', None) or exc}",
                                path=path, offset=configs_at) from None
    if not isinstance(configs, list) or not all(isinstance(x, dict) for x in configs):
        raise CorruptShardError("the configurations are not a list of objects", path=path, offset=configs_at)
    if k and (config_ids >= len(configs)).any():
        first_bad(config_ids >= len(configs), ids_at, 4, f"a configuration number is not below {len(configs)}")
    for j, config in enumerate(configs):
        _check_config(j, config, path, configs_at)
    return {"cum": cum, "raw_bytes": raw_bytes, "file_bytes": file_bytes, "entry_end": entry_end,
            "config_ids": config_ids, "entries_at": entries_at}, configs


def _check_config(j: int, config: dict, path: str, offset: int) -> None:
    """A shard configuration: MDS version 2, known columns and compression, no per-shard key."""
    def bad(detail: str) -> CorruptShardError:
        return CorruptShardError(f"configuration {j} of {COMPACT_NAME}: {detail}", path=path, offset=offset)

    if set(config) & set(_PER_SHARD):
        raise bad(f"holds a per-shard key ({', '.join(sorted(set(config) & set(_PER_SHARD)))})")
    if config.get("version") != 2 or config.get("format") != NAME:
        raise bad(f"version {config.get('version')!r}, format {config.get('format')!r}; expected 2, 'mds'")
    try:
        parse_compression(config.get("compression"))
    except ValueError as exc:
        raise bad(str(exc)) from None
    try:
        _entry_columns(config, None, bad)
    except CorruptShardError as exc:
        if exc.offset is not None:
            raise
        raise bad(str(exc)) from None  # an unknown encoding, said without a place
