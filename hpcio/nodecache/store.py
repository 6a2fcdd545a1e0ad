"""A node cache's directory: the mirror readers open, the shared residency table, locks.

``<directory>/<name>-<key>/data`` mirrors the dataset: its small files (indexes,
manifests) copied, each shard file either present (resident) or a symbolic link to the
shared tier.  A reader opened on the mirror therefore always finds every file, with its
size, and reads a shard's bytes from the node once the cache has fetched it.  A fetch
copies into a temporary name and renames it over the link; an eviction renames a fresh
link over the file.  Both are atomic, so a reader sees a whole shard or the shared one,
never a torn one, and a fetcher killed mid-copy leaves only a temporary file that the
next fetch of that shard removes.

``meta/state`` is a table shared by every process of the node through ``mmap``: per shard
its state (absent, fetching, resident), bytes and last use (the node's monotonic clock, so
uses compare across datasets), plus node-wide counters and the resident total, which the
cache directory's limit sums over its datasets (:mod:`.budget`).  It
changes under ``meta/lock`` (``flock``); each shard has its own lock file, held while it is
fetched, so two processes never fetch the same shard and a waiting one takes over from a
killed one.  At most ``fetchers`` copies run on the node at once (slot locks).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import mmap
import os
import threading
import time

import numpy as np

from .._hashing import new_hash
from ..errors import ChecksumMismatchError, NodeCacheError, ShardChangedError
from ..formats.base import ShardFile

__all__ = ["Store", "ABSENT", "FETCHING", "RESIDENT", "RESIDENT_WORD", "resident_word"]

ABSENT, FETCHING, RESIDENT = 0, 1, 2
_HEADER = 8  # int64 words: magic, shards, fetched bytes, fetches, evictions, spare, resident bytes, spare
RESIDENT_WORD = 6
_MAGIC = 0x4E4F444543414331  # "NODECAC1"
_FIELDS = 4  # per shard: state, bytes, last use (clock), fetching pid
_COPY_CHUNK = 8 << 20


class Store:
    """The cache directory of one dataset on this node (see the module docstring)."""

    def __init__(self, root: str, remote: str, files: list[list[ShardFile]], fetchers: int):
        """``files``: each shard's files, their paths relative to the dataset."""
        self.root, self.remote = root, os.path.realpath(remote)
        self.data = os.path.join(root, "data")
        self.meta = os.path.join(root, "meta")
        self.fetchers = fetchers
        # shard -> [(remote file, mirror file, size, hashes)]
        self.files = [[(os.path.join(self.remote, f.path), os.path.join(self.data, f.path), f.size, dict(f.hashes))
                       for f in shard] for shard in files]
        self.n = len(files)
        self.sizes = np.array([sum(f.size or 0 for f in shard) for shard in files], dtype=np.int64)
        os.makedirs(os.path.join(self.meta, "locks"), exist_ok=True)
        self._pid, self._lock_fd = -1, -1
        self._threads = threading.RLock()
        with self.locked():
            self._open_table()

    # --- the shared table -----------------------------------------------------------------
    def _open_table(self) -> None:
        path = os.path.join(self.meta, "state")
        size = 8 * (_HEADER + _FIELDS * self.n)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.header = np.frombuffer(self._map, dtype=np.int64, count=_HEADER)
        self.table = np.frombuffer(self._map, dtype=np.int64, offset=8 * _HEADER).reshape(self.n, _FIELDS)
        if self.header[0] != _MAGIC or self.header[1] != self.n:
            self.table[:] = 0
            self.header[:] = 0
            self.header[0], self.header[1] = _MAGIC, self.n
            self._reconcile()
        self.header[RESIDENT_WORD] = int(self.table[self.state != ABSENT, 1].sum())

    def _reconcile(self) -> None:
        """Enter the shards a table lost (a new table over an old mirror) as resident."""
        for k, shard in enumerate(self.files):
            if all(os.path.isfile(m) and not os.path.islink(m) for _r, m, _s, _h in shard):
                self.table[k] = (RESIDENT, self.sizes[k], 0, 0)  # the total is summed after

    @contextlib.contextmanager
    def locked(self):
        """The table lock: one thread of one process of the node at a time.  A forked
        process opens the lock file again (a lock taken through its parent's descriptor
        would be its parent's too)."""
        with self._threads:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._lock_fd = os.open(os.path.join(self.meta, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @property
    def state(self) -> np.ndarray:
        return self.table[:, 0]

    def set_shard(self, k: int, state: int, size: int, last_use: int | None = None) -> None:
        """Enter shard ``k``'s state and bytes (under the table lock), keeping the resident
        total; ``last_use`` None keeps its mark."""
        old = int(self.table[k, 1]) if self.table[k, 0] != ABSENT else 0
        new = size if state != ABSENT else 0
        use = int(self.table[k, 2]) if last_use is None else last_use
        self.table[k] = (state, new, use, os.getpid() if state == FETCHING else 0)
        self.header[RESIDENT_WORD] += new - old

    def touch(self, shards: np.ndarray) -> None:
        """Mark ``shards`` used now (without the lock: a lost update only ages an LRU mark)."""
        self.table[shards, 2] = time.monotonic_ns()

    def resident_bytes(self) -> int:
        """Bytes of this dataset's shards resident or being fetched."""
        return int(self.header[RESIDENT_WORD])

    def counters(self) -> dict:
        return {"fetched_bytes": int(self.header[2]), "fetches": int(self.header[3]),
                "evictions": int(self.header[4]), "resident_bytes": self.resident_bytes(),
                "resident_shards": int(np.count_nonzero(self.state == RESIDENT))}

    # --- fetching and evicting -------------------------------------------------------------
    @contextlib.contextmanager
    def shard_lock(self, k: int):
        fd = os.open(os.path.join(self.meta, "locks", str(k)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def fetch_slot(self):
        """One of the node's ``fetchers`` copy slots, waited for when all are taken."""
        fds = []
        try:
            for i in range(self.fetchers):
                fd = os.open(os.path.join(self.meta, "locks", f"slot{i}"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
                fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    yield
                    return
                except BlockingIOError:
                    continue
            fcntl.flock(fds[os.getpid() % len(fds)], fcntl.LOCK_EX)
            yield
        finally:
            for fd in fds:
                os.close(fd)

    def copy_in(self, k: int) -> int:
        """Copy shard ``k``'s files from the shared tier into the mirror, checked against
        the index's sizes and digests, each published by one rename; its bytes."""
        total = 0
        for remote, mirror, size, hashes in self.files[k]:
            for stale in glob.glob(glob.escape(mirror) + ".fetch-*"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(stale)
            tmp = f"{mirror}.fetch-{os.getpid()}"
            try:
                got, digest = _copy(remote, tmp, "xxh3_64" in hashes)
                if size is not None and got != size:
                    raise ShardChangedError(f"shard file has {got} bytes where the index records {size}",
                                            path=remote)
                if digest is not None and digest != hashes["xxh3_64"]:
                    raise ChecksumMismatchError(f"xxh3_64 of the fetched shard is {digest}, the index records "
                                                f"{hashes['xxh3_64']}", path=remote)
                os.replace(tmp, mirror)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            total += got
        return total

    def evict(self, k: int) -> None:
        """Put links back in place of shard ``k``'s files (under the table lock)."""
        for remote, mirror, _size, _hashes in self.files[k]:
            link_to(remote, mirror)
        self.set_shard(k, ABSENT, 0)
        self.header[4] += 1
        with open(os.path.join(self.meta, "evicted"), "ab") as f:
            f.write(np.int64(k).tobytes())

    def evicted_since(self, offset: int) -> tuple[np.ndarray, int]:
        """Shards evicted since byte ``offset`` of the eviction log, and the new offset."""
        try:
            with open(os.path.join(self.meta, "evicted"), "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return np.zeros(0, np.int64), offset
        whole = len(data) - len(data) % 8
        return np.frombuffer(data[:whole], dtype=np.int64), offset + whole

    def clear(self) -> None:
        """Evict every resident shard."""
        with self.locked():
            for k in np.flatnonzero(self.state == RESIDENT).tolist():
                self.evict(k)

    def close(self) -> None:
        with contextlib.suppress(ValueError, BufferError):
            del self.header, self.table
            self._map.close()
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def _copy(src: str, dst: str, hash_it: bool) -> tuple[int, str | None]:
    """Copy ``src`` to ``dst`` (created), returning the bytes and their xxh3_64 if asked."""
    h = new_hash() if hash_it else None
    buf = bytearray(_COPY_CHUNK)
    view = memoryview(buf)
    total = 0
    try:
        fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NodeCacheError(f"cannot read the shard from the shared tier: {exc.strerror}", path=src) from None
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            while True:
                n = os.readv(fin, [view])
                if not n:
                    break
                if h is not None:
                    h.update(view[:n])
                done = 0
                while done < n:
                    done += os.write(fout, view[done:n])
                total += n
        except OSError as exc:
            what = "write the node-local copy" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "copy the shard"
            raise NodeCacheError(f"cannot {what} {dst}: {exc.strerror}", path=src) from None
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    return total, None if h is None else h.hexdigest()


def resident_word(words: np.ndarray) -> int:
    """The resident total of a table whose first header words are ``words`` (0 when they
    are not a whole header of this layout)."""
    return int(words[RESIDENT_WORD]) if len(words) > RESIDENT_WORD and words[0] == _MAGIC else 0


def link_to(remote: str, mirror: str) -> None:
    """Make ``mirror`` a link to ``remote``, replacing what is there in one rename."""
    tmp = f"{mirror}.link-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(remote, tmp)
    os.replace(tmp, mirror)


def build_mirror(root: str, remote: str, shard_paths: set[str]) -> None:
    """Mirror the dataset ``remote`` in the ``data`` directory of ``root``: shard files
    as links, every other file copied; ``mirror.json`` in its ``meta`` directory records
    the copied files' sizes and modification times, so a later attach notices a dataset
    changed under the cache."""
    remote = os.path.realpath(remote)
    data = os.path.join(root, "data")
    copied = {}
    for top, dirs, names in os.walk(remote):
        dirs.sort()
        rel_top = os.path.relpath(top, remote)
        os.makedirs(os.path.normpath(os.path.join(data, rel_top)), exist_ok=True)
        for name in sorted(names):
            src = os.path.join(top, name)
            dst = os.path.normpath(os.path.join(data, rel_top, name))
            if src in shard_paths:
                if not os.path.lexists(dst):
                    link_to(src, dst)
                continue
            st = os.stat(src)
            tmp = f"{dst}.copy-{os.getpid()}"
            _copy(src, tmp, False)
            os.replace(tmp, dst)
            copied[os.path.relpath(src, remote)] = [st.st_size, st.st_mtime_ns]
    record = {"remote": remote, "copied": copied, "built": time.time()}
    tmp = os.path.join(root, "meta", f"mirror.json.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(root, "meta", "mirror.json"))


def check_mirror(root: str, remote: str) -> bool:
    """True when ``root`` mirrors ``remote`` as it is now; False when there is no mirror
    yet.  A dataset whose indexes changed since it was mirrored is refused: the cache
    would serve shards of the old version beside the new index."""
    try:
        with open(os.path.join(root, "meta", "mirror.json")) as f:
            record = json.load(f)
    except FileNotFoundError:
        return False
    remote = os.path.realpath(remote)
    for rel, (size, mtime) in record["copied"].items():
        path = os.path.join(remote, rel)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is None or (st.st_size, st.st_mtime_ns) != (size, mtime):
            raise ShardChangedError(f"the dataset changed since the node cache in {root} mirrored it "
                                    f"({rel} differs); clear that directory (NodeCache.clear) to read "
                                    "the new version", path=path)
    return True
